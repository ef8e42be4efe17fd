"""The gradebook: every submission graded by the grader itself, one CSV row per student and exercise.

``effitrain grade SUBMISSIONS_DIR --out grades.csv [--feedback DIR] [--wide FILE.csv] [--deadline TIME]
[--summary] [--timeout S] [--source DIR] [--roster CSV] [--resume | --merge | --replace] [--unsafe]``
(what is built from the rows, feedback pages, the wide table, the summary: :mod:`~effitrain_helpers.teach.reports`):

- **Who and what.** Every regular ``.ipynb`` file under the folder is a submission (checkpoints skipped; links,
  FIFOs and files over :data:`MAX_NOTEBOOK_BYTES` get an ``invalid notebook`` row and are never opened for
  long). The ``notebook`` column is its path under the folder; the student is ``alice`` for ``alice.ipynb``,
  the folder for ``alice/1_1_x.ipynb`` (a file named after a lesson), and the path for any other file
  (``section2/uma.ipynb`` is ``section2/uma``): sections stay apart. A ``--roster`` CSV (``file,student``) names
  the student of any file. Two submissions of one student for one lesson (a ``-Copy1``, a file and a folder)
  are named in a ``duplicate`` row and only one is graded (the first by path, a ``-Copy1`` after the original).
- **The grader decides** (:mod:`~effitrain_helpers.teach.answers`): each submission is matched to its lesson in
  the instructor's solved notebooks (``--source``, default the workbook's ``notebooks/``); what runs is that
  lesson with only the student's answer lines in it, the rest restored, and the lesson's reference in place of
  a wrong answer for the exercises after it. Verdicts are read from the restored check cells' outputs only; an
  answer that reaches into the checking machinery is ``flagged for review`` and never credited, and so is a verdict
  whose seal (:func:`~effitrain_helpers.teach.exercises.seal`) shows the code that decided it was changed. Hidden
  checks (:func:`~effitrain_helpers.teach.editions.hidden_checks`) must agree for an exercise to be Correct.
- **In a sandbox** (:mod:`~effitrain_helpers.teach.sandbox`): no network, no view of the other submissions, the
  gradebook, the instructor's notebooks or this command; every process it starts ends with it. Without
  bubblewrap grade refuses, unless ``--unsafe``.
- **Rows**: per exercise the verdict (``correct``, ``incorrect``, ``not attempted``, ``not checked``, ``flagged
  for review``) and in ``detail`` the checker's message, in the class's language; one more row when the notebook
  is not a readable notebook, one per cell that raised (``error``, the error's first line), it ran
  past ``S`` seconds (``timeout``), matches no lesson (``no exercises``) or is a ``duplicate``. Cells a
  spreadsheet would read as a formula (starting ``= + - @``) are written with a leading ``'``.
- **When**: each row has ``submitted`` (:func:`submission_time`: nbgrader's ``timestamp.txt`` beside the notebook,
  else the file's time) and, after a ``--deadline``, ``late`` (``yes``/``no``).
- **Never loses a row**: the rows of each notebook are appended to ``--out`` as soon as it is graded; an
  ``--out`` that already holds rows is refused unless ``--resume`` (grade only the notebooks it lacks),
  ``--merge`` (keep its rows of other notebooks, replace those graded now) or ``--replace``. SIGTERM ends the
  run as Ctrl-C does: the notebook running is stopped, its temporary folder removed, the rows so far kept.

Nothing under ``SUBMISSIONS_DIR`` is written, renamed or deleted.
"""

from __future__ import annotations

import csv
import os
import signal
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from effitrain_helpers.core import files
from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.outputs import check_output_file
from effitrain_helpers.core.validate import positive_number
from effitrain_helpers.teach import sandbox, verdicts
from effitrain_helpers.teach.answers import REVIEW, graded_notebook, lesson_name, match_source
from effitrain_helpers.teach.exercises import CORRECT, INCORRECT

COLUMNS = ("student", "notebook", "lesson", "exercise", "status", "detail", "submitted", "late")
FIRST_COLUMNS = COLUMNS[:6]  # a gradebook written before submission times were kept has only these
INVALID, ERROR, TIMEOUT, NOT_CHECKED, NO_EXERCISES, DUPLICATE = (
    msg("invalid notebook"), msg("error"), msg("timeout"), msg("not checked"), msg("no exercises"), msg("duplicate"))
MAX_TIMEOUT = 24 * 3600.0  # seconds per notebook: a day
MAX_NOTEBOOK_BYTES = 64 * 2**20  # a submission larger than this is not read
MAX_JOBS = 64  # notebooks graded at once, at most
MAX_MESSAGE = 1000  # characters of a checker's message kept in ``detail``
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


@dataclass
class Row:
    """One line of the gradebook; ``exercise`` is empty on a row about the whole notebook."""

    student: str
    notebook: str
    lesson: str
    exercise: str
    status: str
    detail: str = ""
    submitted: str = ""  # when it was handed in, ISO 8601 UTC (timestamp.txt or the file's time)
    late: str = ""  # "yes" or "no" after a --deadline, else empty


@dataclass
class Submission:
    """One submitted file: its student, its path under the submissions folder, and what was read of it."""

    student: str
    notebook: str  # path under the submissions folder, e.g. "section2/uma.ipynb"
    path: Path
    nb: object = None  # the parsed notebook, or None
    problem: str = ""  # why it cannot be read as a notebook
    source: str | None = None  # the lesson notebook it is a copy of
    duplicate_of: str = ""
    submitted: datetime | None = None  # when it was handed in (:func:`submission_time`)


def read_notebook(path: Path):
    """The notebook at ``path``, read only if it is a regular file (not a link, FIFO or device) of at most
    :data:`MAX_NOTEBOOK_BYTES` (:func:`~effitrain_helpers.core.files.read_bytes`); ValueError (one line)
    otherwise."""
    import nbformat

    if path.is_symlink():
        raise ValueError(tr("it is a link ({target}); a link is not a submission: not read",
                            target=str(os.readlink(path))))
    try:
        data = files.read_bytes(path, limit=MAX_NOTEBOOK_BYTES)
    except OSError as err:
        raise ValueError(tr("cannot open it ({why}): not read", why=err.strerror or err)) from None
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        nb.cells  # noqa: B018 - a JSON file that is not a notebook fails here
        if not isinstance(nb.cells, list) or not all(isinstance(c, dict) and "source" in c for c in nb.cells):
            raise ValueError(tr("its cells are not a list of cells"))
    except Exception as err:  # noqa: BLE001 - whatever is wrong with the file, it is this student's row
        raise ValueError(tr("cannot read it as a notebook: {error}: {message}", error=type(err).__name__,
                            message=str(err)[:200])) from None
    return nb


def _roster_rows(path) -> list[dict]:
    """The lines of a ``--roster`` CSV (columns ``file``, ``student``, optionally ``id``); ValueError, one line."""
    try:
        with open(Path(path).expanduser(), encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ValueError(tr("--roster {path!r} cannot be read ({why}). Fix: pass a CSV file with columns "
                            "file,student.", path=str(path), why=err)) from None
    if not rows or not {"file", "student"} <= set(rows[0]):
        raise ValueError(tr("--roster {path!r} has no columns file and student. Fix: a CSV whose first line is "
                            "file,student and one line per submission, e.g. section2/uma.ipynb,Uma Lima.",
                            path=str(path)))
    return [r for r in rows if r["file"] and r["student"]]


def read_roster(path) -> dict[str, str]:
    """``{file under the submissions folder: student}`` from a CSV with columns ``file`` and ``student``."""
    return {r["file"].strip(): r["student"].strip() for r in _roster_rows(path)}


def roster_ids(path) -> dict[str, str]:
    """``{student: id}`` from a roster's optional ``id`` column (the id an LMS knows the student by)."""
    return {r["student"].strip(): (r.get("id") or "").strip() for r in _roster_rows(path) if (r.get("id") or "").strip()}


TIMESTAMP_FILE = "timestamp.txt"  # nbgrader's: the submission time, beside the notebook


def submission_time(path: Path, folder: Path) -> datetime:
    """When the notebook at ``path`` was handed in (UTC): the ``timestamp.txt`` beside it, as nbgrader writes it
    (``2026-12-01 13:04:22.123456 UTC``; no zone is UTC), when the notebook is in a folder of its own under
    ``folder`` and the file reads as a time; else the notebook's modification time."""
    stamp = path.parent / TIMESTAMP_FILE
    if path.parent != folder and not stamp.is_symlink():
        try:
            text = files.read_bytes(stamp, limit=200).decode("utf-8").strip().removesuffix(" UTC")
            when = datetime.fromisoformat(text)
            return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
        except (OSError, ValueError):  # UnicodeDecodeError included: no usable timestamp, the file's time then
            pass
    return datetime.fromtimestamp(path.stat(follow_symlinks=False).st_mtime, timezone.utc)


def check_deadline(value) -> datetime:
    """``value`` (ISO 8601, e.g. ``2026-12-01T23:59``; no zone is this machine's local time) as a time; ValueError
    naming it otherwise."""
    try:
        when = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise ValueError(tr("--deadline {value!r} is not an ISO 8601 time. Fix: e.g. --deadline 2026-12-01T23:59 "
                            "(this machine's time zone) or --deadline 2026-12-01T23:59-03:00.",
                            value=str(value))) from None
    return when.astimezone() if when.tzinfo is None else when


def student_of(notebook: str, sources: dict) -> str:
    """The student of a file at ``notebook`` (path under the submissions folder): see module docstring."""
    parts = notebook.split("/")
    stem = parts[-1].removesuffix(".ipynb")
    if len(parts) == 1:
        return stem
    folder = "/".join(parts[:-1])
    return folder if lesson_name(parts[-1]) in sources else f"{folder}/{stem}"


def find_submissions(folder: Path, sources: dict, roster: dict | None = None) -> list[Submission]:
    """Every ``.ipynb`` under ``folder`` (checkpoints skipped), sorted, read and matched to its lesson, the
    duplicates marked (module docstring)."""
    if not folder.is_dir():
        raise ValueError(tr("SUBMISSIONS_DIR {folder!r} is not a folder. Fix: pass the folder that holds the "
                            "submitted notebooks (one .ipynb per student, or one folder per student).",
                            folder=str(folder)))
    found: list[Submission] = []
    for path in sorted(folder.rglob("*.ipynb")):
        rel = path.relative_to(folder)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        notebook = rel.as_posix()
        sub = Submission((roster or {}).get(notebook) or student_of(notebook, sources), notebook, path)
        sub.submitted = submission_time(path, folder)
        try:
            sub.nb = read_notebook(path)
            sub.source = match_source(sub.nb, path.name, sources)
        except ValueError as err:
            sub.problem = str(err)
        found.append(sub)
    if not found:
        raise ValueError(tr("SUBMISSIONS_DIR {folder!r} holds no .ipynb notebooks. Fix: pass the folder of the "
                            "submissions.", folder=str(folder)))
    first: dict[tuple[str, str], str] = {}
    for sub in sorted(found, key=lambda s: (s.path.name != lesson_name(s.path.name), s.notebook)):  # copies last
        if sub.source:
            sub.duplicate_of = first.setdefault((sub.student, sub.source), sub.notebook)
            if sub.duplicate_of == sub.notebook:
                sub.duplicate_of = ""
    return found


def _errors(nb, where: list[str] | None = None) -> list[str]:
    """``"cell 4 raised NameError: ..."`` (the error's first line) for every cell of an executed notebook that
    raised, in order: one ``error`` row each, so the feedback lists every failed cell. ``where`` names each cell
    (:attr:`~effitrain_helpers.teach.answers.Graded.where`: its number in the student's notebook, a hidden check,
    the grader's own cell); without it, a cell is named by its number in ``nb``."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                first = (str(out.get("evalue", "")).splitlines() or [""])[0]
                name = where[i] if where and i < len(where) else tr("cell {cell}", cell=i)
                found.append(tr("{where} raised {error}: {message}", where=name, error=str(out.get("ename")),
                                message=first)[:300])
    return found


def _raised(cell) -> bool:
    return any(out.get("output_type") == "error" for out in cell.get("outputs", []))


def _hidden_verdict(ran, graded, exercise) -> str | None:
    """Why ``exercise``, Correct on its visible check, is not Correct on a hidden check of ``graded`` (the
    checker's message), or None when every hidden check of it said Correct."""
    for hidden in (h for h in graded.hidden if exercise in h.exercises):
        if hidden.setup is not None and _raised(ran.cells[hidden.setup]):
            return tr("the hidden check's own set-up raised an error (the instructor's code: tell your instructor)")
        if hidden.answer is not None and _raised(ran.cells[hidden.answer]):
            return tr("your answer raised an error when run again on a hidden check's cases")
        status, message = _verdicts(ran.cells[hidden.cell], ran.cells[hidden.cell + 1], [exercise]).get(
            exercise, ("", tr("the hidden check did not run to its end")))
        if status != CORRECT:
            return message or tr("not correct")
    return None


def _verdicts(cell, next_cell, exercises) -> dict:
    """``{(lesson, exercise): (status, message)}``: the last verdicts a check cell showed (with the checker's message,
    at most :data:`MAX_MESSAGE` characters), for the exercises it checks only,
    and only when it ran to its end (no error in it, the grader's cell after it ran): an answer called by the
    checker that shows a verdict of its own and then stops the kernel gets none."""
    outputs = cell.get("outputs", [])
    if any(out.get("output_type") == "error" for out in outputs) or next_cell.get("execution_count") is None:
        return {}
    found = {}
    for out in outputs:
        rec = out.get("data", {}).get(verdicts.VERDICT_MIME) if out.get("output_type") == "display_data" else None
        if isinstance(rec, dict) and (rec.get("lesson"), rec.get("exercise")) in exercises \
                and rec.get("status") in ("correct", "incorrect", "not attempted"):
            message = rec.get("message") if isinstance(rec.get("message"), str) else ""
            found[rec["lesson"], rec["exercise"]] = _sealed(rec) or (rec["status"], message[:MAX_MESSAGE])
    return found


@lru_cache(maxsize=None)
def _expected_seal(lesson: str, exercise: str) -> tuple | None:
    from effitrain_helpers.teach.exercises import seal

    found = verdicts.exercise_object(lesson, exercise)
    return tuple(sorted(seal(found).items())) if found is not None else None


def _sealed(rec: dict) -> tuple[str, str] | None:
    """``(flagged for review, why)`` when the verdict ``rec`` was decided by other code than the installed package's
    (:func:`~effitrain_helpers.teach.exercises.seal`: an answer replaced the checker or the machinery), else None."""
    expected = _expected_seal(rec["lesson"], rec["exercise"])
    if expected is None:
        return None
    seal = rec.get("seal") if isinstance(rec.get("seal"), dict) else {}
    changed = [name for name, digest in expected if seal.get(name) != digest]
    if not changed:
        return None
    return REVIEW, tr("{review}: the code that checks {exercise} was changed before its check ({names}); never "
                      "credited: read the answers before it by hand", review=tr(REVIEW), exercise=rec["exercise"],
                      names=", ".join(changed))


def grade_notebook(sub: Submission, limit: float, sources: dict, hide=(), safe: bool = True,
                   deadline: datetime | None = None, cancel=None) -> list[Row]:
    """The rows of one submission (module docstring), each with its submission time and, after a ``deadline``,
    whether it is late; never raises for a bad notebook. The one place rows are made: a feedback file or a wide
    table is built from these."""
    import nbformat

    submitted = sub.submitted.isoformat(timespec="seconds") if sub.submitted else ""
    late = ("yes" if sub.submitted > deadline else "no") if deadline and sub.submitted else ""

    def row(lesson="", exercise="", status="", detail=""):
        return Row(sub.student, sub.notebook, lesson, exercise, status, detail, submitted, late)

    if sub.problem:
        return [row(status=INVALID, detail=sub.problem)]
    if sub.duplicate_of:
        return [row(status=DUPLICATE, detail=tr("same student and lesson as {notebook} (graded): not graded twice; "
                                                "keep one, or name their students in a --roster",
                                                notebook=sub.duplicate_of))]
    if sub.source is None:
        return [row(status=NO_EXERCISES, detail=tr("matches no lesson of the source notebooks (by its metadata, its "
                                                   "file name or the exercises it imports): nothing to grade"))]
    graded = graded_notebook(sub.nb, sources[sub.source], sub.source)
    with tempfile.TemporaryDirectory(prefix="effitrain-grade-") as tmp:
        folder = Path(tmp)
        nbformat.write(graded.notebook, folder / sandbox.NOTEBOOK)
        env = {k: v for k, v in os.environ.items() if k not in (verdicts.PROGRESS_ENV, sandbox.RUN_ENV)}
        env.update({"HF_HUB_OFFLINE": "1", "EFFITRAIN_SOLUTIONS": "off", verdicts.GRADING_ENV: "1",
                    "MPLBACKEND": "Agg"})
        result = sandbox.run_graded(folder, limit, env, hide, safe, cancel)
    rows: list[Row] = []
    ran = nbformat.from_dict(result["notebook"]) if result["notebook"] else None
    if result["outcome"] == "timeout":
        rows.append(row(status=TIMEOUT, detail=tr("ran past the limit of {limit} s; its kernel and every process it "
                                                  "started were stopped", limit=number(limit, "g"))))
    elif result["outcome"] == "error":
        rows.append(row(status=ERROR, detail=result["detail"]))
    elif ran is not None:
        rows += [row(status=ERROR, detail=error) for error in _errors(ran, graded.where)]
    for check in graded.checks:
        found = _verdicts(ran.cells[check.cell], ran.cells[check.cell + 1], check.exercises) if ran else {}
        for exercise in check.exercises:
            if check.flag:
                rows.append(row(*exercise, REVIEW, check.flag))
                continue
            status, message = found.get(exercise, (NOT_CHECKED, ""))
            hidden = _hidden_verdict(ran, graded, exercise) if status == CORRECT else None
            if hidden is not None:
                status, message = INCORRECT, tr("the visible check passed, but a hidden check (cases only the "
                                                "instructor holds) did not: {message}", message=hidden)
            rows.append(row(*exercise, status, "; ".join(t for t in (check.note, message) if t)))
    if not graded.checks:
        rows.append(row(status=NO_EXERCISES, detail=tr("its lesson {lesson} has no marked exercises",
                                                       lesson=sub.source)))
    return rows


def check_jobs(value) -> int:
    """``value`` as how many notebooks to grade at once: a whole number from 1 to :data:`MAX_JOBS`; else
    ValueError (one line)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_JOBS:
        raise ValueError(tr("-j {value!r} is not allowed: a whole number from 1 to {most}. Fix: e.g. -j 2 (about "
                            "one per CPU core).", value=value, most=MAX_JOBS))
    return value


def check_timeout(value) -> float:
    """``value`` as seconds per notebook: a finite number > 0, at most :data:`MAX_TIMEOUT`; else ValueError."""
    seconds = positive_number("--timeout", value, example="--timeout 300")
    if seconds > MAX_TIMEOUT:
        raise ValueError(tr("--timeout {value!r} is more than a day ({most:g} s) per notebook. Fix: e.g. "
                            "--timeout 300.", value=value, most=MAX_TIMEOUT))
    return seconds


def _is_gradebook(path: Path) -> bool:
    """Whether ``path`` starts with the gradebook's header line (a CSV this command wrote)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.readline().rstrip("\r\n") in (",".join(COLUMNS), ",".join(FIRST_COLUMNS))
    except (OSError, UnicodeDecodeError):
        return False


def check_gradebook(out, submissions: Path) -> Path:
    """``out`` as the gradebook to write, refused (ValueError, one line) when writing it could lose anything:
    empty, a folder, not ``.csv``, inside ``submissions``, or an existing file that is not a gradebook."""
    if not str(out).strip():
        raise ValueError(tr("--out is empty. Fix: name the CSV file to write, e.g. --out grades.csv."))
    path = check_output_file(out, "--out", (".csv",))
    resolved = path.resolve()
    if resolved == submissions.resolve() or submissions.resolve() in resolved.parents:
        raise ValueError(tr("--out {path!r} is inside SUBMISSIONS_DIR {folder!r}, which grade never writes to. Fix: "
                            "write the gradebook outside it, e.g. --out grades.csv.", path=str(out),
                            folder=str(submissions)))
    if path.exists() and not (path.is_file() and _is_gradebook(path)):
        raise ValueError(tr("--out {path!r} exists and is not a gradebook this command wrote (its first line is not "
                            "{header}); it is left as it is. Fix: choose a new file name, e.g. --out grades.csv.",
                            path=str(out), header=",".join(COLUMNS)))
    return path


def _cell(value: str) -> str:
    """A CSV cell a spreadsheet shows as text: one starting like a formula gets a leading ``'``."""
    return "'" + value if value.startswith(_FORMULA) else value


def _uncell(value: str) -> str:
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA) else value


def read_gradebook(path: Path) -> list[Row]:
    """The rows of a gradebook this command wrote (a last line cut short by a crash is dropped)."""
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    rows = []
    for rec in csv.DictReader(text.splitlines(keepends=True)):
        if all(isinstance(rec.get(c), str) for c in FIRST_COLUMNS):
            rows.append(Row(*(_uncell(rec.get(c) or "") for c in COLUMNS)))
    return rows


def _write_csv(rows: list[Row], out: Path) -> None:
    """The gradebook written beside ``out`` and moved over it in one step (an interruption leaves the old one)."""
    write_table(COLUMNS, [asdict(r) for r in rows], out)


def write_table(header, records: list[dict], out: Path) -> None:
    """A CSV file of ``records`` (dicts keyed by ``header``), each cell as text a spreadsheet shows as it is,
    written beside ``out`` and moved over it in one step (an interruption leaves the old one)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with open(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(header))
            writer.writeheader()
            writer.writerows({k: _cell(str(v)) for k, v in r.items()} for r in records)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _append(rows: list[Row], out: Path) -> None:
    """One notebook's rows added to the gradebook in one write, on disk before the next notebook runs."""
    import io

    text = io.StringIO()
    csv.DictWriter(text, fieldnames=COLUMNS).writerows({k: _cell(v) for k, v in asdict(r).items()} for r in rows)
    with open(out, "a", encoding="utf-8", newline="") as f:
        f.write(text.getvalue())
        f.flush()
        os.fsync(f.fileno())


KEEP_MODES = ("resume", "merge", "replace")


def start_gradebook(out: Path, notebooks: set[str], mode: str | None) -> tuple[list[Row], set[str]]:
    """Make ``out`` ready for this run's rows; returns ``(rows kept, notebooks already graded)``. An ``out`` that
    holds rows needs a ``mode`` (module docstring): ValueError otherwise."""
    old = read_gradebook(out) if out.exists() else []
    if old and mode is None:
        raise ValueError(tr("--out {path!r} already holds {n} rows of an earlier grade run; nothing was changed. Fix: "
                            "--resume to grade only the notebooks it lacks, --merge to keep its rows of other "
                            "notebooks and replace those graded now, --replace to start it over, or a new file name.",
                            path=str(out), n=len(old)))
    if mode == "resume":
        keep = old
    elif mode == "merge":
        keep = [r for r in old if r.notebook not in notebooks]
    else:
        keep = []
    _write_csv(keep, out)
    return keep, ({r.notebook for r in keep} if mode == "resume" else set())


def _terminated(signum, frame):
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the running notebook's processes and folders go


def hidden_paths(submissions: Path, out: Path, sources_folder: Path, roster, feedback: Path | None = None,
                 wide: Path | None = None) -> list[Path]:
    """What a sandboxed submission must not see: the other submissions, the gradebook, the instructor's notebooks
    (and the workbook's own), the roster, the feedback folder and the wide table (those that exist already)."""
    from effitrain_helpers.teach.editions import default_source

    return [p for p in (submissions, out, sources_folder, default_source(), roster and Path(roster),
                        feedback and feedback.exists() and feedback, wide and wide.exists() and wide) if p]


def check_wide(path, submissions: Path, out: Path) -> Path:
    """``path`` as the wide CSV to write: a ``.csv`` outside ``submissions``, not ``out``, and, when it exists, one
    this command wrote (its first line starts ``student,id,``); ValueError, one line."""
    wide = check_output_file(path, "--wide", (".csv",))
    resolved = wide.resolve()
    if resolved == submissions.resolve() or submissions.resolve() in resolved.parents or resolved == out.resolve():
        raise ValueError(tr("--wide {path!r} is inside SUBMISSIONS_DIR or is --out. Fix: name another file, e.g. "
                            "--wide grades-wide.csv.", path=str(path)))
    if wide.exists():
        try:
            with open(wide, encoding="utf-8", newline="") as f:
                ours = wide.is_file() and f.readline().startswith("student,id,")
        except (OSError, UnicodeDecodeError):
            ours = False
        if not ours:
            raise ValueError(tr("--wide {path!r} exists and is not a table this command wrote; it is left as it is. "
                                "Fix: choose a new file name, e.g. --wide grades-wide.csv.", path=str(path)))
    return wide


def check_feedback(path, submissions: Path) -> Path:
    """``path`` as the feedback folder (created if missing, outside ``submissions``); ValueError, one line."""
    from effitrain_helpers.core.outputs import check_output_folder

    folder = check_output_folder(path, "--feedback")
    resolved = folder.resolve()
    if resolved == submissions.resolve() or submissions.resolve() in resolved.parents:
        raise ValueError(tr("--feedback {path!r} is inside SUBMISSIONS_DIR {folder!r}, which grade never writes to. "
                            "Fix: write the feedback outside it, e.g. --feedback feedback.", path=str(path),
                            folder=str(submissions)))
    return folder


def grade(folder: str | Path, out: str | Path, limit: float = 300.0, progress: bool = True, *,
          source: str | Path | None = None, roster: str | Path | None = None, mode: str | None = None,
          unsafe: bool = False, feedback: str | Path | None = None, wide: str | Path | None = None,
          deadline: str | None = None, jobs: int = 1, points_row: bool = False) -> list[Row]:
    """Grade every notebook in ``folder`` into the CSV file ``out`` (module docstring); return this run's rows.
    Once all are graded, from every row of ``out`` (:mod:`~effitrain_helpers.teach.reports`): with ``feedback``, a
    folder, each student's feedback page there; with ``wide``, a CSV file, the one-row-per-student table an LMS
    imports (``points_row``: first a ``Points Possible`` row, as Canvas reads it). A ``deadline`` (ISO 8601) marks the rows of later submissions late. ``jobs`` notebooks are graded at
    once, each in its own sandbox, their rows appended as each finishes. Every argument is checked before the first
    notebook runs; SIGTERM ends the run as Ctrl-C does (every notebook running is stopped)."""
    from effitrain_helpers.teach.editions import MarkerError, check_all, default_source, source_notebooks

    limit = check_timeout(limit)
    if mode is not None and mode not in KEEP_MODES:
        raise ValueError(tr("mode={mode!r} is not allowed; choose one of {allowed}.", mode=mode,
                            allowed=", ".join(KEEP_MODES)))
    if not str(folder).strip():
        raise ValueError(tr("SUBMISSIONS_DIR is empty. Fix: pass the folder of the submitted notebooks."))
    submissions_folder = Path(folder).expanduser()
    out = check_gradebook(out, submissions_folder)
    feedback_folder = check_feedback(feedback, submissions_folder) if feedback is not None else None
    wide_file = check_wide(wide, submissions_folder, out) if wide is not None else None
    if points_row and wide_file is None:
        raise ValueError(tr("--points-row adds a row to the --wide table, and there is no --wide. Fix: add --wide "
                            "FILE.csv, or leave --points-row out."))
    due = check_deadline(deadline) if deadline is not None else None
    jobs = check_jobs(jobs)
    why = None if unsafe else sandbox.unavailable()
    if why:
        raise ValueError(tr("grade refuses to run submissions outside a sandbox: {why}.", why=why))
    sources = source_notebooks(source)
    try:  # every lesson's markers and hidden checks, before any notebook runs
        check_all(sources)
    except MarkerError as err:
        problems = str(err).splitlines()[1:] or [str(err)]
        raise ValueError(tr("the source notebooks cannot be graded: {problems}. Fix: correct them (effitrain editions "
                            "--check --source DIR lists every problem).", problems="; ".join(problems))) from None
    subs = find_submissions(submissions_folder, sources, read_roster(roster) if roster else None)
    hide = hidden_paths(submissions_folder, out, Path(source).expanduser() if source else default_source(), roster,
                        feedback_folder, wide_file)
    kept, done = start_gradebook(out, {s.notebook for s in subs}, mode)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None
    rows: list[Row] = []
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="effitrain-grade")
    try:
        todo = [s for s in subs if s.notebook not in done]
        running = {pool.submit(grade_notebook, sub, limit, sources, hide, safe=not unsafe, deadline=due,
                               cancel=cancel): sub for sub in todo}
        for i, future in enumerate(as_completed(running), 1):
            sub, mine = running[future], future.result()
            _append(mine, out)
            rows += mine
            if progress:
                print(f"[{i}/{len(todo)}] {sub.student}: {sub.notebook}", file=sys.stderr, flush=True)
    finally:  # on Ctrl-C or SIGTERM every notebook running stops within sandbox.POLL s, its folder removed
        cancel.set()
        pool.shutdown(wait=True, cancel_futures=True)
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    from effitrain_helpers.teach.reports import wide_table, write_feedback

    if feedback_folder is not None:
        write_feedback(read_gradebook(out), feedback_folder)
    if wide_file is not None:
        write_table(*wide_table(read_gradebook(out), roster_ids(roster) if roster else {}, points_row), wide_file)
    return rows


def plot_gradebook(path: str | Path = "grades.csv"):
    """The instructor's view of a class: the gradebook at ``path`` (an ``--out`` of ``effitrain grade``) drawn per
    exercise, students correct / incorrect / not attempted / other
    (:func:`~effitrain_helpers.teach.plots.plot_class_summary`), or None, with one line saying how to make a
    gradebook, when there is none at ``path``."""
    from effitrain_helpers.teach.plots import plot_class_summary
    from effitrain_helpers.teach.reports import class_counts

    path = Path(path).expanduser()
    rows = read_gradebook(path) if path.is_file() and _is_gradebook(path) else []
    counts = class_counts(rows)
    if not counts:
        print(tr("No graded exercise in {path} yet: grade the class with `effitrain grade SUBMISSIONS_DIR --out "
                 "{path}`, then run this cell again.", path=str(path)))
        return None
    return plot_class_summary(counts)
