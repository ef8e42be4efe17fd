"""Where does each ``check()`` verdict go? One JSON line per check, appended to a file on this machine.

``record(exercise, status)`` is called by ``Exercise.check``; it appends
``{"lesson": "1.1", "exercise": "q2", "name": ..., "status": "correct", "time": ISO 8601 UTC}`` to
:func:`verdicts_file` and never raises: a notebook whose verdict cannot be written (read-only disk, full
disk) still shows its verdict. Nothing leaves the machine. ``read()`` gives the lines back, skipping any
that are not valid records (a half-written line from a crash, bytes that are not UTF-8, fields of the wrong
type); ``read_counted()`` also says how many it skipped.

The file is ``$EFFITRAIN_PROGRESS`` when set (``effitrain grade`` points each submission's kernel at a file
of its own this way), else ``progress.jsonl`` in the workbook's cache folder (``EFFITRAIN_CACHE``).

Under ``effitrain grade`` (:data:`GRADING_ENV` set in the sandboxed kernel) no file is written: each verdict is
shown as an output of the check cell itself, of type :data:`VERDICT_MIME`, and the grader takes from the
executed notebook only the verdicts found in the check cells it restored from the instructor's source, for the
exercises those cells check (:mod:`effitrain_helpers.teach.grade`), each with the seal of the code that decided
it (:func:`~effitrain_helpers.teach.exercises.seal`). :func:`passed` tells the grader's own cells
whether an exercise was Correct (they then run the reference in its place).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from effitrain_helpers.core import files
from effitrain_helpers.core.settings import SETTINGS

PROGRESS_ENV = "EFFITRAIN_PROGRESS"
CHECKS_PACKAGE = "effitrain_helpers.teach.checks"
START = "start"  # the start page's lesson id (checks module ``start_here``)
GRADING_ENV = "EFFITRAIN_GRADING"  # "1" in a kernel effitrain grade runs
VERDICT_MIME = "application/vnd.effitrain.verdict+json"
_LAST: dict[tuple[str, str], str] = {}  # under grade: the last verdict of each (lesson, exercise) in this kernel


def grading() -> bool:
    """Whether this kernel is one ``effitrain grade`` runs (see module docstring)."""
    return os.environ.get(GRADING_ENV) == "1"


def passed(exercises) -> bool:
    """Under grade: whether every ``(lesson, exercise)`` of ``exercises`` was last checked Correct here."""
    return all(_LAST.get(tuple(e)) == "correct" for e in exercises)


def _show_to_grader(lesson: str, name: str, status: str, message: str, seal: dict) -> None:
    """The verdict, the checker's message and the ``seal`` of the machinery that decided it as an output of the
    running cell (under grade), where the grader reads it."""
    from IPython.display import display

    _LAST[lesson, name] = status
    display({VERDICT_MIME: {"lesson": lesson, "exercise": name, "status": status, "message": message, "seal": seal}},
            raw=True)


def verdicts_file() -> Path:
    """The file verdicts are appended to (see module docstring); read at each call."""
    explicit = os.environ.get(PROGRESS_ENV, "").strip()
    return Path(explicit).expanduser() if explicit else SETTINGS.cache_dir / "progress.jsonl"


def lesson_of(module: str) -> str | None:
    """The lesson id of a checks module: ``...checks.lesson_2_2`` -> ``"2.2"``, ``...checks.start_here`` ->
    ``"start"``; None for a module outside ``effitrain_helpers.teach.checks``."""
    package, _, leaf = module.rpartition(".")
    if package != CHECKS_PACKAGE:
        return None
    if leaf == "start_here":
        return START
    return leaf.removeprefix("lesson_").replace("_", ".") if leaf.startswith("lesson_") else None


def exercise_object(lesson: str, name: str) -> Any:
    """The installed exercise ``name`` (``"q2"``) of ``lesson`` (``"1.1"``, ``"start"``), or None when the package
    has no such lesson or exercise."""
    import importlib

    leaf = "start_here" if lesson == START else "lesson_" + lesson.replace(".", "_")
    try:
        module = importlib.import_module(f"{CHECKS_PACKAGE}.{leaf}")
    except ImportError:
        return None
    return getattr(module, name, None)


def _key(exercise: Any) -> tuple[str | None, str | None]:
    """``(lesson, variable name)`` of an exercise, e.g. ``("1.1", "q2")``, found from its checker's module."""
    module = getattr(getattr(exercise, "checker", None), "__module__", "") or ""
    names = vars(sys.modules[module]) if module in sys.modules else {}
    return lesson_of(module), next((n for n, v in names.items() if v is exercise), None)


def record(exercise: Any, status: str, message: str = "", seal: dict | None = None) -> None:
    """Append one verdict of ``exercise`` (an :class:`~effitrain_helpers.teach.exercises.Exercise`) to
    :func:`verdicts_file`; an exercise that is not a lesson's (a test's own) is not recorded. Under grade the
    checker's ``message`` goes with the verdict (the student's feedback), and the ``seal`` of the machinery that
    decided it (:func:`~effitrain_helpers.teach.exercises.seal`). Never raises."""
    try:
        lesson, name = _key(exercise)
        if lesson is None or name is None:
            return
        if grading():
            _show_to_grader(lesson, name, status, str(message), seal or {})
            return
        line = json.dumps({"lesson": lesson, "exercise": name, "name": exercise.name, "status": status,
                           "time": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        path = verdicts_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        # never blocks: a FIFO with no reader refuses at once (ENXIO)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
        with open(fd, "a", encoding="utf-8") as f:  # one short line, appended in one write
            f.write(line + "\n")
    except Exception:  # noqa: BLE001 - progress is a convenience: the check's verdict is shown regardless
        pass


def _valid(rec) -> bool:
    """A verdict record: a dict whose lesson, exercise and status are texts (anything else is a broken line)."""
    return isinstance(rec, dict) and all(isinstance(rec.get(k), str) for k in ("lesson", "exercise", "status"))


def read_counted(path: str | Path | None = None) -> tuple[list[dict], int]:
    """``(records, skipped)``: every valid verdict in ``path`` (default :func:`verdicts_file`), oldest first, and
    how many non-blank lines were not one (undecodable bytes, not JSON, fields missing or of the wrong type).
    A bad line never hides the good ones around it; a file that cannot be read gives ``([], 0)``, one that is
    not a regular file or is too large (``/dev/zero``) a ``ValueError`` naming it (:func:`files.read_bytes`)."""
    path = verdicts_file() if path is None else Path(path)
    try:
        data = files.read_bytes(path)
    except OSError:
        return [], 0
    records, skipped = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError included
            rec = None
        if _valid(rec):
            records.append(rec)
        else:
            skipped += 1
    return records, skipped


def read(path: str | Path | None = None) -> list[dict]:
    """Every valid verdict in ``path`` (default :func:`verdicts_file`), oldest first; [] when there is none."""
    return read_counted(path)[0]
