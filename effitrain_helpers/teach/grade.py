"""The gradebook: every submitted notebook run headless, one CSV row per student and exercise.

``effitrain grade SUBMISSIONS_DIR --out grades.csv [--timeout S]`` finds the notebooks in the folder
(``alice.ipynb`` is student ``alice``; ``alice/2_2_x.ipynb`` is student ``alice`` too, one folder per student)
and, for each one:

- copies it into a temporary folder (the submission itself is only read, never written) and executes the
  copy there, in a fresh kernel of this Python (whatever kernel the notebook names), offline (``HF_HUB_OFFLINE=1``), with solutions off
  (``EFFITRAIN_SOLUTIONS=off``), cells that raise reported and the rest still run, all within ``S``
  seconds; past that the kernel is killed;
- collects the verdicts of its ``check()`` calls (each kernel records them in a file of its own,
  ``EFFITRAIN_PROGRESS``) and writes one row per exercise of the lessons the notebook imports: the last
  verdict, or *not checked* when no check of it ran;
- writes one more row when the notebook is not a readable notebook (``invalid notebook``), a cell raised
  (``error``), or it ran past its time limit (``timeout``), and one row ``no exercises`` for a notebook that
  ran without a problem but imports no lesson's exercises: every submission gets at least one row; the other
  notebooks are graded regardless.

What it never touches: nothing under ``SUBMISSIONS_DIR`` is written, renamed or deleted. ``--out`` is refused,
before any notebook runs, when it is empty, a folder, not a ``.csv`` name, inside ``SUBMISSIONS_DIR``, or an
existing file that is not a gradebook this command wrote (its first line is :data:`COLUMNS`); the CSV is written
to a temporary file beside it and moved into place, so an interrupted run leaves the previous gradebook whole.

Each notebook's kernel runs in a session (process group) of its own and every process it starts carries a
marker in its environment (:data:`RUN_ENV`): whatever ends the notebook (its end, its time limit, Ctrl-C,
SIGTERM), every process carrying that run's marker is killed, a child that started a session of its own
included, and its temporary folder (the copy, the verdicts, the kernel's connection file) is removed.

This runs the students' code on this machine with your permissions, as nbgrader and otter-grader do: grade in
a container or an account of its own when the submissions are not trusted.
"""

from __future__ import annotations

import asyncio
import csv
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.outputs import check_output_file
from effitrain_helpers.core.validate import positive_number
from effitrain_helpers.teach import verdicts
from effitrain_helpers.teach.progress import lesson_exercises

COLUMNS = ("student", "notebook", "lesson", "exercise", "status", "detail")
INVALID, ERROR, TIMEOUT, NOT_CHECKED, NO_EXERCISES = (
    msg("invalid notebook"), msg("error"), msg("timeout"), msg("not checked"), msg("no exercises"))
MAX_TIMEOUT = 24 * 3600.0  # seconds per notebook: a day
RUN_ENV = "EFFITRAIN_GRADE_RUN"  # the marker every process of one graded notebook inherits
_IMPORTS = re.compile(rf"^\s*from\s+{re.escape(verdicts.CHECKS_PACKAGE)}\.(\w+)\s+import\b", re.M)


@dataclass
class Row:
    """One line of the gradebook; ``exercise`` is empty on a row about the whole notebook."""

    student: str
    notebook: str
    lesson: str
    exercise: str
    status: str
    detail: str = ""


def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """``(student, notebook path)`` for every ``.ipynb`` under ``folder`` (checkpoints skipped), sorted."""
    if not folder.is_dir():
        raise ValueError(tr("SUBMISSIONS_DIR {folder!r} is not a folder. Fix: pass the folder that holds the "
                            "submitted notebooks (one .ipynb per student, or one folder per student).",
                            folder=str(folder)))
    found = []
    for path in sorted(folder.rglob("*.ipynb")):
        rel = path.relative_to(folder)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        found.append((rel.parts[0] if len(rel.parts) > 1 else path.stem, path))
    if not found:
        raise ValueError(tr("SUBMISSIONS_DIR {folder!r} holds no .ipynb notebooks. Fix: pass the folder of the "
                            "submissions.", folder=str(folder)))
    return found


def _first_error(nb) -> str | None:
    """``"cell 4 raised NameError: ..."`` for the first cell of an executed notebook that raised (+ how many)."""
    raised = [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    if not raised:
        return None
    i, out = raised[0]
    more = f" (and {len(raised) - 1} more cells)" if len(raised) > 1 else ""
    return f"cell {i} raised {out.get('ename')}: {out.get('evalue', '')}"[:300] + more


def _this_python_kernel(connection_file: Path):
    """A kernel manager for a kernel of this very Python (where effitrain is installed), whatever kernel the
    notebook names and whatever ``python3`` kernel is installed elsewhere (as ``nbval --nbval-current-env``),
    its connection file at ``connection_file`` (the notebook's temporary folder, removed with it)."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):  # noqa: D102 - the one kernel it knows
            return self.kernel_spec_class(resource_dir=RESOURCES, **get_kernel_dict())

    return AsyncKernelManager(kernel_name="effitrain-grade", kernel_spec_manager=ThisPython(),
                              connection_file=str(connection_file))


async def _execute(nb, workdir: Path, env: dict, limit: float) -> None:
    """Run ``nb`` in a fresh kernel in ``workdir``; the kernel is shut down (killed) when it ends or times out.
    (nbclient's own per-cell limit takes whole seconds: the whole notebook's ``limit`` is kept here.)"""
    from nbclient import NotebookClient

    km = _this_python_kernel(workdir.parent / "kernel.json")
    client = NotebookClient(nb, km=km, timeout=math.ceil(limit), allow_errors=True,
                            shutdown_kernel="immediate", resources={"metadata": {"path": str(workdir)}})
    run = asyncio.ensure_future(client.async_execute(env=env, stderr=subprocess.DEVNULL, cleanup_kc=True))
    try:
        done, _ = await asyncio.wait({run}, timeout=limit)
        if not done:
            raise TimeoutError
        run.result()
    finally:  # past the limit or this run cancelled (Ctrl-C): cancelling kills the kernel, and what nbclient
        run.cancel()  # raises then (kernel died) is not the news
        await asyncio.gather(run, return_exceptions=True)
        if client.km is not None and await client.km.is_alive():  # the context manager's cleanup missed it
            await client.km.shutdown_kernel(now=True)


STOP_WAIT = 10.0  # seconds an interrupted notebook's run gets to wind down (the kernel is already killed)


def end_processes(run: str) -> int:
    """Kill every process whose environment carries ``RUN_ENV=run`` (a graded notebook's kernel and all it
    started, a child in a session of its own included); returns how many were killed."""
    import psutil

    from effitrain_helpers.processes.ending import kill_all

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(RUN_ENV) == run:
                found.append(proc)
        except (psutil.Error, OSError):  # gone meanwhile, another user's, a zombie
            continue
    return kill_all(found, timeout=5)


def _run_notebook(nb, workdir: Path, env: dict, limit: float) -> None:
    """:func:`_execute` in a thread of its own (``asyncio.run`` refuses a thread whose event loop already runs:
    a Jupyter kernel, where an instructor may call grade(); a test session holding Playwright's loop).
    Whatever interrupts the wait (Ctrl-C, SIGTERM), the notebook's processes are killed at once, its run is
    cancelled and given :data:`STOP_WAIT` seconds to wind down before the exception goes on: the thread is a
    daemon, so a client that never finishes its cleanup cannot keep the command from exiting."""
    running, outcome = {}, {}

    async def run() -> None:
        running["loop"], running["task"] = asyncio.get_running_loop(), asyncio.current_task()
        await _execute(nb, workdir, env, limit)

    def work() -> None:
        try:
            asyncio.run(run())
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome["error"] = err

    thread = threading.Thread(target=work, name="effitrain-grade-notebook", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        if "loop" in running:
            try:
                running["loop"].call_soon_threadsafe(running["task"].cancel)
            except RuntimeError:  # the run ended meanwhile and its loop is closed
                pass
        end_processes(env[RUN_ENV])
        thread.join(STOP_WAIT)
        raise
    if "error" in outcome:
        raise outcome["error"]


def grade_notebook(student: str, path: Path, limit: float) -> list[Row]:
    """The rows of one submission (module docstring); never raises for a bad notebook."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError

    name = path.name
    try:
        data = path.read_bytes()
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        nb.cells  # noqa: B018 - a JSON file that is not a notebook fails here
    except Exception as err:  # noqa: BLE001 - whatever is wrong with the file, it is this student's row
        return [Row(student, name, "", "", INVALID, f"cannot read it as a notebook: {type(err).__name__}: "
                                                    f"{str(err)[:200]}")]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="effitrain-grade-") as tmp:
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        (workdir / name).write_bytes(data)  # the kernel's folder holds a copy, never the submission
        record_file = Path(tmp) / "verdicts.jsonl"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "EFFITRAIN_SOLUTIONS": "off",
               verdicts.PROGRESS_ENV: str(record_file), "MPLBACKEND": "Agg", RUN_ENV: uuid.uuid4().hex}
        try:
            _run_notebook(nb, workdir, env, limit)
            error = _first_error(nb)
            if error:
                rows.append(Row(student, name, "", "", ERROR, error))
        except TimeoutError:
            rows.append(Row(student, name, "", "", TIMEOUT, f"ran past the limit of {limit:g} s; kernel stopped"))
        except Exception as err:  # noqa: BLE001 - a dead kernel, a cell timeout: this notebook's row, not a crash
            status = TIMEOUT if isinstance(err, CellTimeoutError) else ERROR
            rows.append(Row(student, name, "", "", status, f"{type(err).__name__}: {str(err)[:200]}"))
        finally:
            end_processes(env[RUN_ENV])  # what the notebook started and left running, before its folder goes
        last = {(r["lesson"], r["exercise"]): r["status"] for r in verdicts.read(record_file)}
    exercises = lesson_exercises()
    imported = [verdicts.lesson_of(f"{verdicts.CHECKS_PACKAGE}.{m}") for cell in nb.cells
                if cell.cell_type == "code" for m in _IMPORTS.findall(cell.source)]
    lessons = dict.fromkeys([les for les in imported if les in exercises] + [les for les, _ in last])
    for lesson in lessons:
        for exercise in exercises.get(lesson, {}):
            rows.append(Row(student, name, lesson, exercise, last.get((lesson, exercise), NOT_CHECKED)))
    if not rows:
        rows.append(Row(student, name, "", "", NO_EXERCISES, "ran without errors, but imports no lesson's "
                        f"exercises (from {verdicts.CHECKS_PACKAGE}.lesson_N_M import q1): nothing to grade"))
    return rows


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
            return f.readline().rstrip("\r\n") == ",".join(COLUMNS)
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


def _write_csv(rows: list[Row], out: Path) -> None:
    """The gradebook written beside ``out`` and moved over it in one step (an interruption leaves the old one)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with open(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(asdict(r) for r in rows)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _terminated(signum, frame):
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the running notebook's processes and folders go


def grade(folder: str | Path, out: str | Path, limit: float = 300.0, progress: bool = True) -> list[Row]:
    """Grade every notebook in ``folder`` into the CSV file ``out``; return the rows. Every argument is checked
    before the first notebook runs; SIGTERM ends the run as Ctrl-C does (the notebook running is stopped)."""
    limit = check_timeout(limit)
    if not str(folder).strip():
        raise ValueError(tr("SUBMISSIONS_DIR is empty. Fix: pass the folder of the submitted notebooks."))
    submissions_folder = Path(folder).expanduser()
    out = check_gradebook(out, submissions_folder)
    submissions = find_submissions(submissions_folder)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None
    try:
        rows: list[Row] = []
        for i, (student, path) in enumerate(submissions, 1):
            if progress:
                print(f"[{i}/{len(submissions)}] {student}: {path.name}", file=sys.stderr, flush=True)
            rows += grade_notebook(student, path, limit)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    _write_csv(rows, out)
    return rows
