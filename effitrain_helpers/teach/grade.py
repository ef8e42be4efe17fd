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
  (``error``), or it ran past its time limit (``timeout``); the other notebooks are graded regardless.

This runs the students' code on this machine with your permissions, as nbgrader and otter-grader do: grade in
a container or an account of its own when the submissions are not trusted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from effitrain_helpers.teach import verdicts
from effitrain_helpers.teach.progress import lesson_exercises

COLUMNS = ("student", "notebook", "lesson", "exercise", "status", "detail")
INVALID, ERROR, TIMEOUT, NOT_CHECKED = "invalid notebook", "error", "timeout", "not checked"
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
        raise ValueError(f"SUBMISSIONS_DIR {str(folder)!r} is not a folder. Fix: pass the folder that holds the "
                         "submitted notebooks (one .ipynb per student, or one folder per student).")
    found = []
    for path in sorted(folder.rglob("*.ipynb")):
        rel = path.relative_to(folder)
        if ".ipynb_checkpoints" in rel.parts:
            continue
        found.append((rel.parts[0] if len(rel.parts) > 1 else path.stem, path))
    if not found:
        raise ValueError(f"SUBMISSIONS_DIR {str(folder)!r} holds no .ipynb notebooks. Fix: pass the folder of the "
                         "submissions.")
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


def _this_python_kernel():
    """A kernel manager for a kernel of this very Python (where effitrain is installed), whatever kernel the
    notebook names and whatever ``python3`` kernel is installed elsewhere (as ``nbval --nbval-current-env``)."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):  # noqa: D102 - the one kernel it knows
            return self.kernel_spec_class(resource_dir=RESOURCES, **get_kernel_dict())

    return AsyncKernelManager(kernel_name="effitrain-grade", kernel_spec_manager=ThisPython())


async def _execute(nb, workdir: Path, env: dict, limit: float) -> None:
    """Run ``nb`` in a fresh kernel in ``workdir``; the kernel is shut down (killed) when it ends or times out."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, km=_this_python_kernel(), timeout=limit, allow_errors=True,
                            shutdown_kernel="immediate", resources={"metadata": {"path": str(workdir)}})
    run = asyncio.ensure_future(client.async_execute(env=env, stderr=subprocess.DEVNULL, cleanup_kc=True))
    try:
        done, _ = await asyncio.wait({run}, timeout=limit)
        if not done:  # cancelling kills the kernel; what nbclient raises then (kernel died) is not the news
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            raise TimeoutError
        run.result()
    finally:
        if client.km is not None and await client.km.is_alive():  # the context manager's cleanup missed it
            await client.km.shutdown_kernel(now=True)


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
               verdicts.PROGRESS_ENV: str(record_file), "MPLBACKEND": "Agg"}
        try:
            # in a thread of its own: asyncio.run refuses a thread whose event loop already runs (a Jupyter
            # kernel, where an instructor may call grade(); a test session holding Playwright's loop)
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(asyncio.run, _execute(nb, workdir, env, limit)).result()
            error = _first_error(nb)
            if error:
                rows.append(Row(student, name, "", "", ERROR, error))
        except TimeoutError:
            rows.append(Row(student, name, "", "", TIMEOUT, f"ran past the limit of {limit:g} s; kernel stopped"))
        except Exception as err:  # noqa: BLE001 - a dead kernel, a cell timeout: this notebook's row, not a crash
            status = TIMEOUT if isinstance(err, CellTimeoutError) else ERROR
            rows.append(Row(student, name, "", "", status, f"{type(err).__name__}: {str(err)[:200]}"))
        last = {(r["lesson"], r["exercise"]): r["status"] for r in verdicts.read(record_file)}
    exercises = lesson_exercises()
    imported = [verdicts.lesson_of(f"{verdicts.CHECKS_PACKAGE}.{m}") for cell in nb.cells
                if cell.cell_type == "code" for m in _IMPORTS.findall(cell.source)]
    lessons = dict.fromkeys([les for les in imported if les in exercises] + [les for les, _ in last])
    for lesson in lessons:
        for exercise in exercises.get(lesson, {}):
            rows.append(Row(student, name, lesson, exercise, last.get((lesson, exercise), NOT_CHECKED)))
    return rows


def grade(folder: str | Path, out: str | Path, limit: float = 300.0, progress: bool = True) -> list[Row]:
    """Grade every notebook in ``folder`` into the CSV file ``out``; return the rows."""
    if not isinstance(limit, (int, float)) or not limit > 0:
        raise ValueError(f"--timeout {limit!r} is not a time limit; give seconds per notebook > 0, e.g. --timeout 300.")
    out = Path(out).expanduser()
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: folder {str(out.parent)!r} does not exist. Fix: create it first.")
    submissions = find_submissions(Path(folder).expanduser())
    rows: list[Row] = []
    for i, (student, path) in enumerate(submissions, 1):
        if progress:
            print(f"[{i}/{len(submissions)}] {student}: {path.name}", file=sys.stderr, flush=True)
        rows += grade_notebook(student, path, limit)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    shutil.move(tmp, out)
    return rows
