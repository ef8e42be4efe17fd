"""How far has this learner got? Per lesson: exercises correct, attempted (not yet correct), not attempted.

The exercises of each lesson are counted from its checks module (``effitrain_helpers.teach.checks``: every
:class:`~effitrain_helpers.teach.exercises.Exercise` it defines); the verdicts come from the file that
``check()`` appends to (:mod:`effitrain_helpers.teach.verdicts`). An exercise is *correct* once a check
said Correct, *attempted* when checks judged a real answer but none was correct yet, and *not attempted*
when it was never checked or only with its blanks ``____``. ``effitrain progress [--json]`` prints it; the
start page shows it as a table (:func:`progress_table`).
"""

from __future__ import annotations

import html
import importlib
import pkgutil
from dataclasses import asdict, dataclass
from pathlib import Path

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach import verdicts
from effitrain_helpers.teach.exercises import CORRECT, INCORRECT, Exercise

ATTEMPTED = "attempted"  # a real answer was judged, none correct yet


def _lesson_sort_key(lesson: str) -> tuple:
    return (0,) if lesson == verdicts.START else (1, *(int(p) for p in lesson.split(".") if p.isdigit()))


def lesson_exercises() -> dict[str, dict[str, str]]:
    """``{lesson: {variable: exercise name}}`` for every checks module, start page first, lessons in order."""
    package = importlib.import_module(verdicts.CHECKS_PACKAGE)
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module_name = f"{verdicts.CHECKS_PACKAGE}.{info.name}"
        lesson = verdicts.lesson_of(module_name)
        if lesson is None:
            continue
        module = importlib.import_module(module_name)
        found[lesson] = {name: value.name for name, value in vars(module).items() if isinstance(value, Exercise)}
    return dict(sorted(found.items(), key=lambda item: _lesson_sort_key(item[0])))


def exercise_states(records: list[dict]) -> dict[tuple[str, str], str]:
    """``{(lesson, variable): 'correct' | 'attempted'}`` from verdict records (absent: not attempted)."""
    states: dict[tuple[str, str], str] = {}
    for rec in records:
        key = (rec["lesson"], rec["exercise"])
        if rec["status"] == CORRECT:
            states[key] = CORRECT
        elif rec["status"] == INCORRECT and states.get(key) != CORRECT:
            states[key] = ATTEMPTED
    return states


@dataclass
class LessonProgress:
    """One lesson's counts; ``correct + attempted + not_attempted == exercises``."""

    lesson: str
    exercises: int
    correct: int
    attempted: int
    not_attempted: int


def progress(path: str | Path | None = None) -> list[LessonProgress]:
    """Every lesson's progress from the verdicts in ``path`` (default: this machine's verdicts file)."""
    return progress_table(path)


def _rows(records: list[dict]) -> list[LessonProgress]:
    found = lesson_exercises()

    def current(rec: dict) -> bool:
        """A verdict of the exercise that holds its variable now: when a lesson renumbers its exercises (4.3's q1
        became q2), an old verdict is not credited to the new q1. A record without a name (older) counts."""
        return rec.get("name") in (None, found.get(rec["lesson"], {}).get(rec["exercise"]))

    states = exercise_states([rec for rec in records if current(rec)])
    rows = []
    for lesson, exercises in found.items():
        mine = [states.get((lesson, name)) for name in exercises]
        correct, attempted = mine.count(CORRECT), mine.count(ATTEMPTED)
        rows.append(LessonProgress(lesson, len(mine), correct, attempted, len(mine) - correct - attempted))
    return rows


COLUMNS = ("lesson", "exercises", "correct", "attempted", "not attempted")
# COLUMNS as the table shows them, in the learner's language (tr at display time)
_HEADINGS = (msg("lesson"), msg("exercises"), msg("correct"), msg("attempted"), msg("not attempted"))
_ALL = msg("all")  # the totals row
_START = msg("start")  # the start page's lesson id, shown in the learner's language
_SKIPPED = msg("({n} lines of the verdicts file could not be read and were skipped)")


class ProgressTable(list):
    """A list of :class:`LessonProgress` that shows as a text table (terminal) or an HTML table (notebook);
    ``skipped`` counts the lines of the verdicts file that could not be read (they count for nothing)."""

    skipped = 0

    def _cells(self) -> list[tuple]:
        rows = [(tr(_START) if r.lesson == _START else r.lesson, r.exercises, r.correct, r.attempted, r.not_attempted)
                for r in self]
        total = tuple(sum(r[i] for r in rows) for i in range(1, 5))
        return rows + [(tr(_ALL), *total)]

    def __repr__(self) -> str:
        cells = [tuple(map(tr, _HEADINGS))] + [tuple(map(str, row)) for row in self._cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in cells]
        note = [tr(_SKIPPED, n=self.skipped)] if self.skipped else []
        return "\n".join(lines[:1] + ["-" * len(lines[0])] + lines[1:] + note)

    def _repr_html_(self) -> str:
        # JupyterLab right-aligns the cells of HTML outputs; lesson names read better from the left
        left = ' style="text-align:left"'
        head = "".join(f"<th{left}>{html.escape(tr(c))}</th>" for c in _HEADINGS)
        body = "".join("<tr>" + "".join(f"<td{left}>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                       for row in self._cells())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def to_records(self) -> list[dict]:
        """One JSON-ready dict per lesson."""
        return [asdict(r) for r in self]


def progress_table(path: str | Path | None = None) -> ProgressTable:
    """:func:`progress` as a table that a notebook renders as HTML (the start page's progress cell)."""
    records, skipped = verdicts.read_counted(path)
    table = ProgressTable(_rows(records))
    table.skipped = skipped
    return table
