"""Which lines of a submission are the student's, and what does the grader run instead of the rest?

``effitrain grade`` never runs a submitted notebook as it is. :func:`graded_notebook` builds the notebook that
runs from the instructor's solved source (as nbgrader's overwrite step does): every cell that is not an
exercise (set-up, text, the lesson's own code) is the source's; in an exercise cell only the solution regions
(``# BEGIN SOLUTION`` .. ``# END SOLUTION``) are the student's lines, and the ``qN.check(...)`` calls around them
are the source's again, in a cell of their own after the answer's (the check cell: the only place the grader
reads verdicts from). After each check cell comes one cell of the grader's own: when that exercise was not
Correct, it runs the source's solution, so a later exercise that uses this one is judged with the reference in
its place (one mistake costs one exercise); that the grader's cell ran shows the check cell ran to its end.
A hidden check of the source (:func:`~effitrain_helpers.teach.editions.hidden_checks`: cases no edition holds)
runs where the instructor put it, with the student's answer run again on its cases and the kernel's names put
back after it; the exercise is Correct only when its visible check and every hidden check say so.

:func:`review` reads each answer before it runs: a line that reaches into the checking machinery (the exercise
objects, :mod:`~effitrain_helpers.teach.verdicts`, ``Exercise``, ``solution_code``, a checker's ``_reference_*``,
the workbook's notebooks, the notebook's own history (``In``, ``_ih``: a hidden check's code), ``exec``/``eval``,
frames, ``gc``, ...) flags the exercise for review by hand, with
that line; a flagged exercise is never credited.

A submission is matched to its lesson (:func:`match_source`) by the lesson the student edition recorded in its
metadata, else its file name, else the lessons it imports.
"""

from __future__ import annotations

import ast
import copy
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass, field

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.editions import (BLANK_IMPORT, INSTRUCTOR_TAG, _is_instructor_only, exercise_cells,
                                              hidden_checks)
from effitrain_helpers.teach.verdicts import CHECKS_PACKAGE, lesson_of

_IMPORT = re.compile(rf"^\s*from\s+{re.escape(CHECKS_PACKAGE)}\.(\w+)\s+import[ \t]+\(?([\w \t,]+)", re.M)
_CHECK_LINE = re.compile(r"^q\d+\.check\(")  # a top-level check call: the source's, never the student's
_EXERCISE_NAME = re.compile(r"^q\d+$")
_COPY = re.compile(r"(-Copy\d+|_mine-[\w.-]*| \(\d+\))$")  # what Jupyter or the workbook adds to a copy's name
_NAMES = {  # a name (variable, attribute, import) in an answer that reaches the machinery: why it is flagged
    **dict.fromkeys(["Exercise", "CheckResult", "Incorrect", "verdicts", "solution_code", "checker", "answer_or",
                     "VERDICT_MIME", "GRADING_ENV"], "the checking machinery"),
    **dict.fromkeys(["importlib", "builtins", "__builtins__", "gc", "inspect", "ctypes", "_getframe", "settrace",
                     "setprofile", "get_ipython"], "code that finds other code"),
    **dict.fromkeys(["__globals__", "__closure__", "__code__", "__dict__", "__subclasses__", "__bases__", "__mro__",
                     "__module__", "__wrapped__", "__func__", "__self__", "__getattribute__", "__file__", "f_globals",
                     "f_locals", "f_back", "f_builtins", "tb_frame", "gi_frame", "cr_frame"],
                    "the inside of functions and modules"),
    **dict.fromkeys(["In", "Out", "_ih", "_oh", "_i", "_ii", "_iii", "_dh", "history_manager"],
                    "the notebook's own history (the cells' code, a hidden check's too)"),
}
_CALLS = {"exec", "eval", "compile", "__import__", "globals", "breakpoint"}  # called by their bare name
_TEXTS = {".ipynb": "a notebook file", "EFFITRAIN_": "the workbook's settings", "vnd.effitrain": "the verdicts",
          "verdict": "the verdicts", "progress.jsonl": "the verdicts", "effitrain_helpers.teach": "the checking "
          "machinery", "notebooks/": "the workbook's notebooks"}
_LINES = {re.compile(r"effitrain_helpers\s*\.\s*teach"): "effitrain_helpers.teach (the checking machinery)",
          re.compile(r"\bsys\s*\.\s*modules\b"): "sys.modules (code that finds other code)"}
REVIEW = msg("flagged for review")  # a row status
_SAVED = "_effitrain_saved"  # the grader's copy of the kernel's names while a hidden check runs


@dataclass
class Check:
    """One check cell of a graded notebook: which exercises it judges and what the student's answer is."""

    cell: int  # index in the graded notebook
    exercises: list[tuple[str, str]]  # (lesson, variable), e.g. ("1.1", "q2")
    flag: str = ""  # why the answer is flagged for review ("" when it is not)
    note: str = ""  # what of the student's cell did not run (lines outside the answer, edited)
    setup: int | None = None  # a hidden check's cell of its own set-up (it must run without an error)
    answer: int | None = None  # a hidden check's cell running the student's answer again (the same)


@dataclass
class Graded:
    """The notebook the grader runs for one submission, and where its verdicts will be."""

    source: str  # the lesson's notebook (file name in the source folder)
    notebook: object  # nbformat notebook
    checks: list[Check] = field(default_factory=list)
    hidden: list[Check] = field(default_factory=list)  # the hidden checks' check cells (editions.hidden_checks)
    where: list[str] = field(default_factory=list)  # per cell: how an error row names it ("cell 4", ...)


def exercise_lessons(nb) -> dict[str, str]:
    """``{variable: lesson}`` of the exercises a notebook imports (``from ...checks.lesson_1_1 import q1, q2``)."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for module, names in _IMPORT.findall(cell.source):
                lesson = lesson_of(f"{CHECKS_PACKAGE}.{module}")
                for name in re.split(r"[\s,]+", names.strip()):
                    if lesson and _EXERCISE_NAME.match(name):
                        found[name] = lesson
    return found


def lesson_name(file_name: str) -> str:
    """``1_1_x.ipynb`` for ``1_1_x-Copy1.ipynb`` or ``1_1_x_mine-2026-12-05.ipynb``: the name it was copied from."""
    stem = file_name.removesuffix(".ipynb")
    return _COPY.sub("", stem) + ".ipynb"


def match_source(nb, file_name: str, sources: dict) -> str | None:
    """The name of the source notebook ``nb`` (a submission called ``file_name``) is a copy of, or None."""
    recorded = nb.metadata.get("effitrain", {}).get("source") if isinstance(nb.metadata.get("effitrain"), dict) \
        else None
    if isinstance(recorded, str) and recorded in sources:
        return recorded
    if lesson_name(file_name) in sources:
        return lesson_name(file_name)
    lessons = set(exercise_lessons(nb).values())
    return next((name for name, src in sources.items() if lessons & set(exercise_lessons(src).values())), None)


def _tokens(code: str) -> list[tuple[int, str]]:
    """``(line, token)`` of the names, operators and strings of ``code`` (IPython's ``!``/``%`` lines turned
    into Python first)."""
    try:
        code = _python(code)
    except Exception:  # noqa: BLE001 - reviewed as it is
        pass
    found = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.NAME, tokenize.STRING, tokenize.OP):
                found.append((tok.start[0], tok.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):  # unfinished code: every word of it
        found = [(n, w) for n, line in enumerate(code.splitlines(), 1)
                 for w in re.findall(r"\w+|'[^']*'|\"[^\"]*\"|[.(=]", line)]
    return found


def _why(token: str, before: str, after: str) -> str | None:
    """Why one token of an answer reaches into the checking machinery (``before``/``after``: its neighbours)."""
    if token[:1] in "'\"" or token[:2].lower() in ("f'", 'f"', "b'", 'b"', "r'", 'r"'):
        return next((what for text, what in _TEXTS.items() if text in token), None)
    if _EXERCISE_NAME.match(token):
        return "the exercise object itself"
    if token.startswith("_reference"):
        return "a checker's reference implementation"
    if token.startswith("_effitrain"):
        return "the grader's own names"
    if re.fullmatch(r"_i\d+", token):
        return "the notebook's own history (the cells' code, a hidden check's too)"
    if token in _CALLS:
        return "code that runs code from text" if before != "." and after == "(" else None
    return _NAMES.get(token)


def review(code: str) -> tuple[int, str] | None:
    """``(line number, why)`` for the first line of an answer that reaches into the checking machinery, or None."""
    code = textwrap.dedent(code)
    hits = [(number, what) for number, line in enumerate(code.splitlines(), 1)
            for pattern, what in _LINES.items() if pattern.search(line)]
    tokens = _tokens(code)
    for k, (number, token) in enumerate(tokens):
        before = tokens[k - 1][1] if k else ""
        after = tokens[k + 1][1] if k + 1 < len(tokens) else ""
        why = _why(token, before, after)
        if why:
            hits.append((number, f"{token[:40]} ({why})"))
            break
    return min(hits) if hits else None


def _same(a: list[str], b: list[str]) -> bool:
    return [x.rstrip() for x in a] == [x.rstrip() for x in b]


def _find(lines: list[str], block: list[str], start: int) -> int | None:
    """Where ``block`` (lines) first starts in ``lines`` at or after ``start``; None when it does not."""
    for i in range(start, len(lines) - len(block) + 1):
        if _same(lines[i:i + len(block)], block):
            return i
    return None


def _drop_check(line: str) -> str:
    """A student's own one-line ``qN.check(...)`` call blanked out (the source's check call is the one that runs)."""
    return "" if _CHECK_LINE.match(line) and line.count("(") == line.count(")") else line


def answers(student: str, source: str, regions) -> tuple[list[tuple[int, list[str]]], bool]:
    """``([(first line in the student's cell, answer lines)] per region, changed)``: the student's lines in place
    of each region of the source cell, found between the parts of the cell the student edition left as they are;
    ``changed`` when those parts were edited (the edits are dropped, the source's lines run instead)."""
    mine, lines = student.splitlines(), source.splitlines()
    fixed = [lines[:regions[0].begin]] + [lines[a.end + 1:b.begin] for a, b in zip(regions, regions[1:])] \
        + [lines[regions[-1].end + 1:]]
    changed = False
    pos = len(fixed[0]) if _same(mine[:len(fixed[0])], fixed[0]) else 0
    changed |= pos == 0 and bool(fixed[0])
    found = []
    for k, _ in enumerate(regions):
        after = fixed[k + 1]
        last = k == len(regions) - 1
        if last and after and _same(mine[len(mine) - len(after):], after) and len(mine) - len(after) >= pos:
            end = len(mine) - len(after)
        elif not last and after and (at := _find(mine, after, pos)) is not None:
            end = at
        elif not after:
            end = len(mine)
        else:  # the student edited the lines after the answer (a check call, most often): the answer stops there
            changed = True
            end = next((i for i in range(pos, len(mine)) if _CHECK_LINE.match(mine[i])), len(mine))
        found.append((pos, [_drop_check(line) for line in mine[pos:end]]))
        pos = end + len(after)
    return found, changed


def _reference_cell(exercises: list[tuple[str, str]], code: str):
    """The grader's cell after an exercise cell: the source's solution, run when the exercise was not Correct."""
    import nbformat

    tree = ast.parse(_python(code))
    tree.body = [node for node in tree.body if not (isinstance(node, ast.Expr) and _CHECK_LINE.match(
        ast.unparse(node)))]
    body = ast.unparse(tree) or "pass"
    source = (f"from {CHECKS_PACKAGE.rsplit('.', 1)[0]}.verdicts import passed as _effitrain_passed\n"
              f"if not _effitrain_passed({exercises!r}):\n{textwrap.indent(body, '    ')}\n"
              "del _effitrain_passed")
    return nbformat.v4.new_code_cell(source, metadata={"effitrain": "reference"})


def _python(code: str) -> str:
    """``code`` with IPython's ``!``/``%`` lines turned into the Python they run."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(code)


def _where(submission, source, i: int, mine=None) -> str:
    """How an error row names cell ``i`` of the source (an exercise's cell: the student's cell ``mine``): its
    number in the submission (found by id), else in the student edition (the banner first, no instructor cells)."""
    if mine is None:
        mine = next((c for c in submission.cells if c.get("id") and c.get("id") == source.cells[i].get("id")), None)
    number = submission.cells.index(mine) if mine is not None else \
        1 + sum(not _is_instructor_only(c) for c in source.cells[:i])
    return tr("cell {cell}", cell=number)


class _Builder:
    """The graded notebook as it is built: each cell with how an error row names it (:attr:`Graded.where`)."""

    def __init__(self, graded: Graded):
        self.graded = graded

    def add(self, cell, where: str) -> int:
        self.graded.notebook.cells.append(cell)
        self.graded.where.append(where)
        return len(self.graded.notebook.cells) - 1


def _grader_cell(source: str):
    import nbformat

    return nbformat.v4.new_code_cell(source, metadata={"effitrain": "grader"})


def _hidden_cells(hidden, cell, answer: str | None) -> list:
    """The cells that run one hidden check, as ``(role, cell)``: the grader keeps the kernel's names (``save``), the
    check's own lines before ``# ANSWER`` (``setup``), the student's ``answer`` run again (a cell of its own: nothing
    it shows is read), the check's lines after it (``check``: where the verdict is read), then the grader puts the
    names back (``restore``), so the exercises after it run as they would have."""
    lines = cell.source.splitlines()
    at = hidden.answer
    before, after = (lines[:at], lines[at + 1:]) if at is not None else ([], lines)
    made = [("save", _grader_cell(f"{_SAVED} = dict(globals())"))]
    if any(line.strip() for line in before):
        made.append(("setup", _grader_cell("\n".join(before))))
    if at is not None:
        made.append(("answer", _grader_cell(answer or "")))
    return made + [("check", _grader_cell("\n".join(after))), ("restore", _grader_cell(
        f"(lambda g, kept: (g.clear(), g.update(kept)))(globals(), globals().pop({_SAVED!r}))"))]


def graded_notebook(submission, source, source_name: str) -> Graded:
    """The notebook to run for ``submission`` (see module docstring), built from ``source`` (a solved notebook
    named ``source_name``): its cells, its check cells with the exercises each judges, its hidden checks, review
    flags, and how an error row names each cell."""
    import nbformat

    marked = dict(exercise_cells(source, source_name))
    hidden = {h.cell: h for h in hidden_checks(source, source_name)}
    lessons = exercise_lessons(source)
    theirs = [c for c in submission.cells if c.cell_type == "code"]
    by_id = {c.get("id"): c for c in theirs if c.get("id")}
    with_check = [c for c in theirs if any(_CHECK_LINE.match(line) for line in c.source.splitlines())]
    out = nbformat.v4.new_notebook(metadata=copy.deepcopy(source.metadata))
    graded = Graded(source_name, out)
    build = _Builder(graded)
    build.add(_grader_cell(BLANK_IMPORT), tr("the grader's own cell"))  # as the edition
    ran: dict[str, tuple[str, str]] = {}  # exercise variable -> (its answer cell's code, its flag)
    nth = 0
    for i, cell in enumerate(source.cells):
        if i in hidden:
            name = hidden[i].exercise
            answer, flag = ran.get(name, ("", ""))
            exercise = (lessons.get(name, ""), name)
            if flag:  # a flagged answer is never run: its flag stands
                continue
            where = tr("a hidden check of {exercise}", exercise=name)
            at = {role: build.add(made, where) for role, made in _hidden_cells(hidden[i], cell, answer)}
            graded.hidden.append(Check(at["check"], [exercise], setup=at.get("setup"), answer=at.get("answer")))
            continue
        if INSTRUCTOR_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        restored = copy.deepcopy(cell)
        if restored.cell_type == "code":
            restored.outputs, restored.execution_count = [], None
        if i not in marked:
            build.add(restored, _where(submission, source, i))
            continue
        regions = marked[i]
        mine = by_id.get(cell.get("id")) or (with_check[nth] if nth < len(with_check) else None)
        nth += 1
        where = _where(submission, source, i, mine)
        names = [n for n in re.findall(r"^(q\d+)\.check\(", cell.source, re.M)]
        exercises = [(lessons.get(n, ""), n) for n in dict.fromkeys(names)]
        note = ""
        if mine is None:  # the cell is gone: the starter runs (not attempted)
            found = [(0, r.starter) for r in regions]
            note = tr("the exercise's cell is missing from the submission")
        else:
            found, changed = answers(mine.source, cell.source, regions)
            if changed:
                note = tr("cell {cell}: lines outside the answer were edited; the lesson's own lines ran instead",
                          cell=submission.cells.index(mine))
        flag = ""
        for start, answer in found:
            hit = review("\n".join(answer))
            if hit and not flag and mine is not None:
                text = answer[hit[0] - 1].strip()[:80] if hit[0] - 1 < len(answer) else ""
                flag = tr("{review}: cell {cell}, line {line} uses {what}: {line_text!r}; never run, never credited: read "
                          "it by hand", review=tr(REVIEW), cell=submission.cells.index(mine), line=start + hit[0],
                          what=hit[1], line_text=text)
        if flag:  # a flagged answer does not run at all: it could change how every later exercise is judged
            found = [(0, r.starter) for r in regions]
        lines, cursor, new = cell.source.splitlines(), 0, []
        for region, (_, answer) in zip(regions, found):
            new += lines[cursor:region.begin] + answer
            cursor = region.end + 1
        after = lines[cursor:]
        split = next((k for k, line in enumerate(after) if _CHECK_LINE.match(line)), 0)
        answer_code = "\n".join(new + after[:split])
        if split or new:  # the answer in a cell of its own: nothing it shows lands in the check cell
            answer_cell = copy.deepcopy(restored)
            answer_cell.source = answer_code
            answer_cell.id = f"effitrain-answer-{len(out.cells)}"
            build.add(answer_cell, where)
        restored.source = "\n".join(after[split:])
        graded.checks.append(Check(build.add(restored, where), exercises, flag, note))
        for _, name in exercises:
            ran[name] = answer_code, flag
        build.add(_reference_cell(exercises, _with_solutions(lines, regions)),
                  tr("the lesson's own answer to {exercise}, run after it", exercise=", ".join(dict.fromkeys(names))))
    return graded


def _with_solutions(lines: list[str], regions) -> str:
    """The source cell with every region's solution in place (markers dropped)."""
    new, cursor = [], 0
    for r in regions:
        new += lines[cursor:r.begin] + r.solution
        cursor = r.end + 1
    return "\n".join(new + lines[cursor:])
