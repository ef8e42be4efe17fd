"""Check, hint and solution for the "Let's practice" sections (in the spirit of Kaggle Learn).

A lesson's exercises live in ``effitrain_helpers.teach.checks.lesson_X_Y`` as :class:`Exercise` objects:

- ``q1.check(answer, ...)`` shows *Correct*, *Incorrect* (with a message that helps) or *Not attempted*;
  it never raises, whatever the learner passes;
- ``q1.hint()`` shows the next hint (graded: the first is gentle, the last nearly gives it away);
- ``q1.solution()`` shows the solution code, unless solutions are turned off for the class (see
  :func:`solutions_enabled`: a graded class's student edition, or ``EFFITRAIN_SOLUTIONS=off``).

``q1.require(...)`` is ``check`` for an autograder's test cell (nbgrader's): an AssertionError unless Correct.
``q1.evaluate(...)`` returns the :class:`CheckResult` without displaying it (used by tests), and
``q1.answer_or(answer, reference)`` hands later cells the learner's answer once it is Correct; only ``check``
records its verdict for ``effitrain progress``. Everything they show is in the learner's language
(:func:`~effitrain_helpers.core.language.tr`: verdict words, the exercise's name, its hints and the checker's
messages); the statuses and the recorded verdicts stay in English.
``____`` is the blank that starter code leaves for the learner to fill in: an answer that is ``____`` (or
``...``), holds one (``(____, ____)``), or a function or class whose code still uses ``____`` is *not attempted*.
"""

from __future__ import annotations

import inspect
import json
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from effitrain_helpers.core import files
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.verdicts import grading, record

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not attempted"
# each verdict as a learner sees it
VERDICT_LABELS = {CORRECT: msg("✅ Correct"), INCORRECT: msg("❌ Incorrect"), NOT_ATTEMPTED: msg("⏳ Not attempted")}


class Blank:
    """The placeholder ``____`` in starter code; checking it reports 'not attempted'."""

    def __repr__(self) -> str:
        return "____"


____ = Blank()


class Spy:
    """Wraps ``target`` and records, in ``calls``, each call of a method named in ``watch`` (for checkers that
    must know *how* an answer worked, e.g. whether it used ``accelerator.backward``)."""

    def __init__(self, target: Any, watch: tuple[str, ...]):
        self._target, self._watch, self.calls = target, set(watch), []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._watch or not callable(attr):
            return attr

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return recorded


class Incorrect(Exception):
    """Raised by a checker with a message for the learner (why the answer is wrong, what to look at)."""


def run_learner_in_processes(worker: Callable, fn: Any, *args: Any, processes: int = 2, **options: Any) -> list:
    """For a checker: ``worker(fn, *args)`` in ``processes`` real processes (a CPU group, as the lessons run
    them), each rank's return value in rank order. ``fn`` is the learner's function: anything else, or a rank
    that raises, is :class:`Incorrect` in one line naming the rank and the error. ``options`` go to
    :func:`~effitrain_helpers.processes.launch.launch` (``timeout``, ...). Used by lessons 2.2-5.2's checkers."""
    from effitrain_helpers.processes.launch import RankFailed, launch

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    try:
        return launch(worker, fn, *args, num_processes=processes, cpu=True, quiet=True, **options)
    except RankFailed as err:
        raise Incorrect(tr("in the {processes} processes, rank {rank} raised {exc_type}: {message}",
                           processes=processes, rank=err.rank, exc_type=err.exc_type,
                           message=str(err).splitlines()[0].split(": ", 1)[-1])) from None


@dataclass
class CheckResult:
    """What ``check`` found: ``status`` is 'correct', 'incorrect' or 'not attempted'."""

    exercise: str
    status: str
    message: str = ""

    def __bool__(self) -> bool:
        return self.status == CORRECT

    def __repr__(self) -> str:
        return f"{tr(VERDICT_LABELS[self.status])} ({self.exercise})" + (f": {self.message}" if self.message else "")

    def _repr_markdown_(self) -> str:
        color = {CORRECT: "#1a7f37", INCORRECT: "#cf222e", NOT_ATTEMPTED: "#9a6700"}[self.status]
        # the message starts in lower case, as it does after the plain repr's colon
        end, text = (":", f" {self.message}") if self.message else (".", "")
        return f'<span style="color:{color}">**{tr(VERDICT_LABELS[self.status])}** ({self.exercise}){end}</span>{text}'


def as_number(answer: Any) -> float:
    """A Python, NumPy or 0-d torch number as float, for checkers; anything else is :class:`Incorrect`."""
    if not isinstance(answer, (bool, str)):
        try:
            return float(answer)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise Incorrect(tr("answer should be a number; you gave {kind} {answer!r}.", kind=type(answer).__name__,
                       answer=answer))


def _show(obj: Any) -> None:
    if isinstance(obj, str):  # hints and solutions: as text (display() would show a quoted repr)
        print(obj)
        return
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(obj)
            return
    except ImportError:
        pass
    print(repr(obj) if not isinstance(obj, str) else obj)


def _is_blank(value: Any) -> bool:
    return isinstance(value, Blank) or value is Ellipsis


def _uses_blank(code: types.CodeType) -> bool:
    """Whether compiled code (or code nested in it) reads the name ``____``."""
    return "____" in code.co_names or any(isinstance(c, types.CodeType) and _uses_blank(c) for c in code.co_consts)


_FILL_IN = msg("replace ____ with your answer, then run the cell again.")


def _methods(cls: type) -> list[types.FunctionType]:
    """The functions a class defines itself (plain, static and class methods), e.g. an autograd Function's."""
    found = (getattr(v, "__func__", v) for v in vars(cls).values())
    return [f for f in found if isinstance(f, types.FunctionType)]


def _unfinished(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is still starter code (a message), or None when the learner gave a real answer.

    Catches ``____`` / ``...`` themselves, inside a tuple, list, set or dict (``(____, ____)``), a
    function whose body still uses ``____`` (``def f(x): return ____``), and a class one of whose own
    methods does (lesson 6.4's autograd Functions).
    """
    if _is_blank(value):
        return tr(_FILL_IN)
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType) and _uses_blank(value.__code__):
        return tr("your function {name}() still contains ____: write its code, then run the cell again.",
                  name=value.__name__)
    if isinstance(value, type) and any(_uses_blank(f.__code__) for f in _methods(value)):
        return tr("your class {name} still contains ____: write its code, then run the cell again.",
                  name=value.__name__)
    if depth < 3 and isinstance(value, (tuple, list, set, frozenset, dict)):
        items = list(value.keys()) + list(value.values()) if isinstance(value, dict) else list(value)
        if any(_unfinished(v, depth + 1) for v in items):
            return tr("some parts of your answer are still ____: fill them all in, then run the cell again.")
    return None


def hands_over_to(fn: Any, reference: Any) -> bool:
    """Whether the learner's ``fn`` is the workbook's own ``reference`` answer or calls it, under whatever name
    leads there (a global, an alias, a module's attribute, a closure's variable), in its own code or in a
    function or lambda defined inside it: the checkers whose lesson hands ``reference`` over (lessons 6.3,
    6.4) refuse such an answer. A learner's function that shares the reference's name is its own."""
    if fn is reference:
        return True
    code = getattr(fn, "__code__", None)
    names, codes = set(), [code]
    while codes:
        here = codes.pop()
        if here is not None:
            names |= set(here.co_names)
            codes += [c for c in here.co_consts if isinstance(c, types.CodeType)]
    found = [getattr(fn, "__globals__", {}).get(name) for name in names]
    found += [cell.cell_contents for cell in getattr(fn, "__closure__", None) or () if _filled(cell)]
    return any(v is reference or (isinstance(v, types.ModuleType) and any(getattr(v, n, None) is reference
                                                                         for n in names)) for v in found)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure variable not yet assigned
        return False
    return True


EDITION_FILE = "effitrain-edition.json"  # what `effitrain editions` writes into an edition's folder
_OFF = {"0", "off", "no", "false"}
_ON = {"", "1", "on", "yes", "true"}


def solutions_enabled() -> tuple[bool, str]:
    """Whether ``solution()`` shows solutions here, and why not when it does not.

    Off when ``EFFITRAIN_SOLUTIONS`` is ``off``/``0``/``no``/``false``, or when the notebook's folder holds an
    ``effitrain-edition.json`` with ``"solutions": false`` (written by ``effitrain editions --no-solutions``
    into a graded class's student edition). Any other value than those and ``on``/``1``/``yes``/``true`` is
    named, and counts as off (a misspelt ``of`` in a graded class must not turn solutions on). Read at each
    call, so it follows the kernel's current folder.
    """
    value = os.environ.get("EFFITRAIN_SOLUTIONS", "").strip()
    if value.lower() in _OFF:
        return False, tr("EFFITRAIN_SOLUTIONS is off on this machine")
    if value.lower() not in _ON:
        return False, tr("EFFITRAIN_SOLUTIONS={value!r} is neither on nor off, so solutions count as off; allowed: "
                         "off, 0, no, false or on, 1, yes, true. Fix: export EFFITRAIN_SOLUTIONS=on (or off)",
                         value=value)
    try:
        edition = json.loads(files.read_bytes(Path.cwd() / EDITION_FILE, limit=2**16))  # never a FIFO's wait
    except (OSError, ValueError):
        return True, ""
    if isinstance(edition, dict) and edition.get("solutions") is False:
        return False, tr("this edition was built without solutions (graded class)")
    return True, ""


def _digest(code: types.CodeType, into) -> None:
    """``code``'s instructions, names and plain constants (nested functions' too) fed to the hash ``into``: the
    same in every process running the same source (no address, no hash-ordered set)."""
    into.update(code.co_code)
    into.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _digest(const, into)
        elif const is None or isinstance(const, (str, bytes, int, float)):
            into.update(repr(const).encode())


def _code_of(obj: Any) -> types.CodeType | None:
    """The code a callable runs: a function's, a method's, a ``functools.partial``'s, a class instance's
    ``__call__``."""
    for _ in range(4):
        if isinstance(obj, types.CodeType):
            return obj
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            return code
        obj = getattr(obj, "__func__", None) or getattr(obj, "func", None) or getattr(type(obj), "__call__", None)
    return None


def seal(exercise: "Exercise") -> dict[str, str]:
    """``{name: digest}`` of the code that decides ``exercise``'s verdict: its checker and the machinery around it
    (``Exercise.evaluate``/``check``/``require``, the blank's rules, ``verdicts.record``, IPython's ``display``).
    Under grade each verdict carries it, and the grader compares it with its own, computed from the installed
    package: an answer that replaced any of them (under a disguised name the review cannot see) gets its
    exercise flagged for review instead of credited. Raises the bar, is no proof: code that forges this too is
    still possible (README, "Classroom")."""
    import hashlib

    from IPython.display import display

    from effitrain_helpers.teach import verdicts

    parts = {"checker": exercise.checker, "Exercise.evaluate": Exercise.evaluate, "Exercise.check": Exercise.check,
             "Exercise.require": Exercise.require, "Exercise.__post_init__": Exercise.__post_init__,
             "_unfinished": _unfinished, "_is_blank": _is_blank, "_uses_blank": _uses_blank,
             "CheckResult.__bool__": CheckResult.__bool__, "verdicts.record": verdicts.record,
             "verdicts._show_to_grader": verdicts._show_to_grader, "verdicts._key": verdicts._key,
             "verdicts.grading": verdicts.grading, "display": display}
    found = {}
    for name, obj in parts.items():
        into = hashlib.sha256()
        code = _code_of(obj)
        if code is not None:
            _digest(code, into)
        found[name] = into.hexdigest()[:16] if code is not None else "none"
    return found


@dataclass
class Exercise:
    """One exercise: a checker that raises :class:`Incorrect` for a wrong answer, hints, a solution."""

    name: str
    checker: Callable[..., None]
    usage: str  # how to call check, e.g. "q1.check(answer, model.config)"
    hints: list[str] = field(default_factory=list)
    solution_code: str = ""
    api: bool = False  # the learner writes the lesson's library API, run for real (else: a number or a prediction)
    checked: str = ""  # what a Correct verdict checked, in one line (shown after "Correct")
    points: float = 1  # what a Correct verdict is worth in the gradebook (effitrain grade); no partial credit
    _hints_shown: int = 0

    def __post_init__(self) -> None:
        if grading():  # a graded kernel holds no solution (a student's code could read it)
            self.solution_code = ""

    def evaluate(self, *answers: Any, **context: Any) -> CheckResult:
        """Judge ``answers`` without displaying anything; never raises."""
        name = tr(self.name)
        if not answers:
            return CheckResult(name, NOT_ATTEMPTED, tr(_FILL_IN))
        unfinished = next((why for why in map(_unfinished, answers) if why), None)
        if unfinished:
            return CheckResult(name, NOT_ATTEMPTED, unfinished)
        try:
            inspect.signature(self.checker).bind(*answers, **context)
        except TypeError:
            return CheckResult(name, INCORRECT, tr("call it as `{usage}`.", usage=self.usage))
        try:
            self.checker(*answers, **context)
        except Incorrect as err:
            return CheckResult(name, INCORRECT, str(err))
        except Exception as err:  # the learner's answer broke the checker: say how, don't crash the notebook
            return CheckResult(name, INCORRECT, tr("checking your answer raised {error}: {message}",
                                                   error=type(err).__name__, message=err))
        return CheckResult(name, CORRECT, tr(self.checked) if self.checked else "")

    def check(self, *answers: Any, **context: Any) -> None:
        """Show Correct / Incorrect / Not attempted for ``answers``, and record it on this machine (see
        :mod:`effitrain_helpers.teach.verdicts`: ``effitrain progress`` counts these records)."""
        result = self.evaluate(*answers, **context)
        record(self, result.status, result.message, seal(self) if grading() else None)
        _show(result)

    def require(self, *answers: Any, **context: Any) -> None:
        """``check`` for an autograder's test cell (nbgrader's, :mod:`~effitrain_helpers.teach.nbgrader_source`):
        shows and records the verdict as ``check`` does, then raises AssertionError with the checker's message
        unless it is Correct (an autograder counts a test cell that raised as no points)."""
        result = self.evaluate(*answers, **context)
        record(self, result.status, result.message, seal(self) if grading() else None)
        _show(result)
        if not result:
            raise AssertionError(tr("{exercise} is {verdict}: {message}", exercise=tr(self.name),
                                    verdict=tr(VERDICT_LABELS[result.status]), message=result.message))

    def answer_or(self, answer: Any, reference: Any) -> Any:
        """``answer`` when it checks Correct, else ``reference``, with one line saying which was taken and why.

        For a lesson whose later cells run on the learner's code (4.3's comparison builds each optimizer with
        the learner's ``build_optimizer``): until the exercise is Correct they run on the lesson's own version,
        so a student edition still runs to the end. Nothing is recorded (``check`` does that)."""
        result = self.evaluate(answer)
        verdict = f"{tr(VERDICT_LABELS[result.status])} ({result.exercise})"
        if result:
            _show(tr("{verdict}: this cell uses your answer.", verdict=verdict))
            return answer
        _show(tr("{verdict}: this cell uses the lesson's own {reference} until your answer is Correct; run it "
                 "again then.", verdict=verdict, reference=getattr(reference, "__name__", tr("version"))))
        return reference

    def hint(self, n: int | None = None) -> None:
        """Show hint ``n`` (1-based), or the next one not seen yet."""
        if not self.hints:
            _show(tr("No hints for this one: re-read the cell above the exercise."))
            return
        if n is None:
            self._hints_shown = min(self._hints_shown + 1, len(self.hints))
            n = self._hints_shown
        if not isinstance(n, int) or not 1 <= n <= len(self.hints):
            _show(tr("Hint number {n!r} does not exist: this exercise has hints 1 to {total}.", n=n,
                     total=len(self.hints)))
            return
        _show(tr("Hint {n} of {total}: {hint}", n=n, total=len(self.hints), hint=tr(self.hints[n - 1])))

    def solution(self) -> None:
        """Show the solution code (unless solutions are turned off for this class: see solutions_enabled)."""
        enabled, why = solutions_enabled()
        if not enabled:
            _show(tr("Solutions are turned off for this class ({why}). Hints still work: {exercise}.hint(); "
                     "or ask your instructor.", why=why, exercise=self.usage.split(".")[0]))
            return
        code = tr(self.solution_code)  # its comments in the learner's language (teach.translations collects it)
        _show(tr("Solution ({name}):", name=tr(self.name)) + f"\n\n{code.strip()}")
