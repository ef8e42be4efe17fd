"""What reaches each student from the gradebook: points per exercise and one feedback page per student.

Built only from the gradebook's rows (:class:`~effitrain_helpers.teach.grade.Row`, made in one place,
``grade_notebook``), never from a submission:

- **Points**: an exercise is worth its ``Exercise.points`` (default 1, set where the instructor defines the
  exercise, e.g. ``Exercise(..., points=2)``), read from the installed checks module, never from a graded kernel.
  A Correct verdict earns them all, any other none: no checker has parts, so there is no partial credit.
- **Wide table** (``--wide FILE.csv``), the one an LMS (Canvas, Moodle, Gradescope) imports: one row per student,
  columns ``student``, ``id`` (the roster's ``id`` column, else empty), one per exercise named ``LESSON EXERCISE``
  (``start q1``, ``1.1 q2``: the points earned, empty when the student handed in no notebook of that lesson), one
  ``LESSON total`` per lesson, ``total`` (the sum) and ``late`` (the lessons handed in after ``--deadline``);
  with ``--points-row``, a first row ``Points Possible`` (what each column is worth), as Canvas reads it.
- **Summary** (``--summary``): per exercise, how many students were correct, incorrect, did not attempt it, or got
  another status (not checked, flagged for review); :func:`class_counts` is the same count, which the instructor's
  start page draws (:func:`~effitrain_helpers.teach.grade.plot_gradebook`).
- **Feedback** (``effitrain grade ... --feedback DIR``): ``DIR/<student>.html`` per student, a page that reads
  offline (no script, no link out; every text escaped): per notebook, each exercise's verdict, the checker's
  message and the points, every cell that failed with its error's first line, and the total.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from effitrain_helpers.core.language import number, tr
from effitrain_helpers.teach.exercises import VERDICT_LABELS
from effitrain_helpers.teach.verdicts import START, exercise_object

CORRECT = "correct"


@lru_cache(maxsize=None)
def points_of(lesson: str, exercise: str) -> float:
    """What exercise ``exercise`` (``"q2"``) of ``lesson`` (``"1.1"``, ``"start"``) is worth: its
    ``Exercise.points``, 1 when the module or the exercise is not found."""
    return float(getattr(exercise_object(lesson, exercise), "points", 1))


def earned(row) -> float:
    """The points a gradebook row earns: all of its exercise's for Correct, none otherwise (and none for a row
    about a whole notebook)."""
    return points_of(row.lesson, row.exercise) if row.exercise and row.status == CORRECT else 0.0


def _natural(text: str) -> list[tuple]:
    """A sort key comparing the numbers in ``text`` as numbers: ``q2 < q10``, ``1.2 < 10.1``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text)]


def _lesson_key(lesson: str) -> tuple:
    """``start`` first, then ``1.1 < 1.2 < 2.1 < 10.1``, then anything else (a notebook's path) by name."""
    return lesson != START, _natural(lesson)


def _exercise_key(key: tuple[str, str]) -> tuple:
    lesson, exercise = key
    return _lesson_key(lesson), _natural(exercise)


def _g(value: float) -> str:
    """Points as an LMS reads them: ``2``, ``1.5`` (a dot, whatever the class's language)."""
    return format(value, "g")


POINTS_POSSIBLE = "Points Possible"  # the first row of a Canvas gradebook CSV: what each column is worth


def wide_table(rows: list, ids: dict[str, str] | None = None, points_row: bool = False) -> tuple[list[str], list[dict]]:
    """``(header, records)`` of the wide table (module docstring) from the gradebook's ``rows``; ``ids`` maps a
    student to the id an LMS knows. ``points_row``: a first row ``Points Possible`` with what each exercise and
    total is worth, as Canvas's gradebook import reads it."""
    exercises = sorted({(r.lesson, r.exercise) for r in rows if r.exercise}, key=_exercise_key)
    lessons = sorted({lesson for lesson, _ in exercises}, key=_lesson_key)
    header = ["student", "id", *(f"{lesson} {exercise}" for lesson, exercise in exercises),
              *(f"{lesson} total" for lesson in lessons), "total", "late"]

    def record(student: str, got: dict[tuple[str, str], float], late: str = "") -> dict:
        line = {"student": student, "id": (ids or {}).get(student, "")}
        line.update({f"{lesson} {exercise}": _g(got[lesson, exercise]) if (lesson, exercise) in got else ""
                     for lesson, exercise in exercises})
        line.update({f"{lesson} total": _g(sum(v for (le, _), v in got.items() if le == lesson)) for lesson in lessons})
        line["total"] = _g(sum(got.values()))
        line["late"] = late
        return line

    records = [record(POINTS_POSSIBLE, {key: points_of(*key) for key in exercises})] if points_row else []
    for student in sorted({r.student for r in rows}):
        mine = [r for r in rows if r.student == student]
        got: dict[tuple[str, str], float] = {}
        for r in mine:
            if r.exercise:
                got[r.lesson, r.exercise] = max(got.get((r.lesson, r.exercise), 0.0), earned(r))
        late = " ".join(sorted({r.lesson or r.notebook for r in mine if r.late == "yes"}, key=_lesson_key))
        records.append(record(student, got, late))
    return header, records


STATUSES = ("correct", "incorrect", "not attempted", "other")  # the summary's columns, "other" for the rest


def class_counts(rows: list) -> list[tuple[str, dict[str, int]]]:
    """``[("1.1 q2", {"correct": 12, "incorrect": 3, "not attempted": 1, "other": 0}), ...]``: per exercise (in
    lesson order), how many rows of the gradebook got each status (:data:`STATUSES`)."""
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
    for r in rows:
        if r.exercise:
            counts[r.lesson, r.exercise][r.status if r.status in VERDICT_LABELS else "other"] += 1
    return [(f"{lesson} {exercise}", counts[lesson, exercise]) for lesson, exercise in sorted(counts, key=_exercise_key)]


def summary_table(rows: list) -> str:
    """The class table of ``--summary`` (module docstring), in the class's language."""
    head = [tr("exercise"), tr("correct"), tr("incorrect"), tr("not attempted"), tr("other")]
    lines = [[label, *(number(n[s]) for s in STATUSES)] for label, n in class_counts(rows)]
    widths = [max(len(line[i]) for line in [head, *lines]) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(line, widths))) for line in [head, *lines])


def feedback_name(student: str) -> str:
    """The feedback file of ``student``, relative to the feedback folder: ``section2/uma`` -> ``section2/uma.html``,
    each part made of letters, digits, ``. _ -`` only (``..`` and the like become ``_``)."""
    parts = [re.sub(r"[^\w.-]", "_", part) for part in student.split("/") if part]
    parts = [part if part.strip(".") else "_" for part in parts] or ["_"]
    return "/".join(parts) + ".html"


def _label(status: str) -> str:
    """A row's status as the learner sees a verdict (``✅ Correct``), in the class's language."""
    return tr(VERDICT_LABELS[status]) if status in VERDICT_LABELS else tr(status)


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def feedback_page(student: str, rows: list) -> str:
    """The HTML feedback page of one student from their gradebook rows (module docstring)."""
    by_notebook: dict[str, list] = defaultdict(list)
    for r in rows:
        by_notebook[r.notebook].append(r)
    title = tr("Feedback for {student}", student=student)
    parts = ['<!DOCTYPE html>\n<html><head><meta charset="utf-8">', f"<title>{_esc(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #999;padding:.3em .6em;text-align:left;vertical-align:top}"
             ".correct{color:#1a7f37}.incorrect{color:#cf222e}</style></head><body>", f"<h1>{_esc(title)}</h1>"]
    total = out_of = 0.0
    for notebook, mine in by_notebook.items():
        lesson = next((r.lesson for r in mine if r.lesson), "")
        parts.append(f"<h2>{_esc(notebook)}" + (f" ({_esc(tr('lesson {lesson}', lesson=lesson))})" if lesson else "")
                     + "</h2>")
        problems = [r for r in mine if not r.exercise]
        if problems:
            parts.append("<ul>" + "".join(f"<li><b>{_esc(tr(r.status))}</b>: {_esc(r.detail)}</li>" for r in problems)
                         + "</ul>")
        exercises = [r for r in mine if r.exercise]
        if exercises:
            parts.append(f"<table><tr><th>{_esc(tr('exercise'))}</th><th>{_esc(tr('verdict'))}</th>"
                         f"<th>{_esc(tr('points'))}</th><th>{_esc(tr('message'))}</th></tr>")
            for r in exercises:
                worth, got = points_of(r.lesson, r.exercise), earned(r)
                total, out_of = total + got, out_of + worth
                status_class = re.sub(r"\W", "-", r.status)
                parts.append(f"<tr><td>{_esc(r.exercise)}</td><td class=\"{_esc(status_class)}\">{_esc(_label(r.status))}"
                             f"</td><td>{_esc(number(got, 'g'))} / {_esc(number(worth, 'g'))}</td>"
                             f"<td>{_esc(r.detail)}</td></tr>")
            parts.append("</table>")
    summary = tr("Total: {earned} of {points} points", earned=number(total, "g"), points=number(out_of, "g"))
    parts.append(f"<p><b>{_esc(summary)}</b></p></body></html>\n")
    return "\n".join(parts)


def write_feedback(rows: list, folder: Path) -> list[Path]:
    """One feedback page per student of ``rows`` in ``folder`` (created if missing); returns the files written.
    Two students whose names give one file name get ``-2``, ``-3``... after the second."""
    by_student: dict[str, list] = defaultdict(list)
    for r in rows:
        by_student[r.student].append(r)
    written, taken = [], set()
    for student in sorted(by_student):
        name = feedback_name(student)
        stem, n = name.removesuffix(".html"), 2
        while name.lower() in taken:
            name, n = f"{stem}-{n}.html", n + 1
        taken.add(name.lower())
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(feedback_page(student, by_student[student]), encoding="utf-8")
        written.append(path)
    return written
