"""The learner's own copy of the lessons: blank exercises, and their work never overwritten.

``effitrain workbook`` (run by ``make lab``) writes the student edition of every solved notebook in
``notebooks/`` (see :mod:`effitrain_helpers.teach.editions`: starters with blanks ``____``, no instructor
cells, no stored verdicts; ``q1.solution()`` works for a self-paced learner) into the learner's folder,
``my-workbook/`` next to ``notebooks/`` or ``$EFFITRAIN_WORKBOOK``. A manifest there,
``.effitrain-workbook.json``, keeps for each notebook the sha256 of the copy as written. On each run:

- a lesson with no copy yet (first run, a new lesson) gets one;
- a copy the learner has not touched (its bytes still match the manifest) is replaced when its lesson
  changed, and left as it is otherwise;
- a copy the learner touched is never written over, renamed or deleted. When its lesson changed since it was
  written, the run reports it with the one command that gives a fresh copy while keeping theirs:
  ``effitrain workbook --fresh 2.2`` renames theirs to ``<name>_mine-YYYYmmdd-HHMMSS.ipynb`` and writes a new
  copy beside it. A notebook in the folder that the workbook did not write is never touched either.

``--lang pt-BR`` (or ``EFFITRAIN_LANG=pt-BR make lab``) makes the copies from the translated lessons
(``notebooks/pt-BR/``; a lesson not translated yet comes in English). Switching language is a lesson change
like any other: untouched copies are replaced, the learner's own work is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from effitrain_helpers.teach.editions import check_all, source_notebooks, default_source, make_edition

WORKBOOK_ENV = "EFFITRAIN_WORKBOOK"
MANIFEST = ".effitrain-workbook.json"
# What a run did with each lesson (the ``action`` of a :class:`Copy`).
NEW, UPDATED, UNCHANGED, KEPT, CHANGED, NOT_OURS, FRESH = (
    "new", "updated", "up to date", "yours (kept)", "yours (lesson changed)", "not written by the workbook",
    "fresh copy")


def default_folder() -> Path:
    """``$EFFITRAIN_WORKBOOK``, else ``my-workbook/`` next to the solved ``notebooks/`` folder."""
    explicit = os.environ.get(WORKBOOK_ENV, "").strip()
    return Path(explicit).expanduser() if explicit else default_source().parent / "my-workbook"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Copy:
    """What one run did with one lesson's copy; ``kept_as`` names the learner's renamed copy (``--fresh``)."""

    notebook: str
    action: str
    kept_as: str | None = None


def lesson_id(notebook: str) -> str:
    """``"2_2_train_with_accelerator.ipynb"`` -> ``"2.2"``; ``"00_start_here.ipynb"`` -> ``"start"``."""
    parts = notebook.split("_")
    if parts[0] == "00":
        return "start"
    return f"{parts[0]}.{parts[1]}" if len(parts) > 2 and parts[0].isdigit() and parts[1].isdigit() else notebook


def _program() -> str:
    """How the learner's shell calls the command: ``effitrain`` when it is on PATH, else its path
    (``.venv/bin/effitrain`` under ``make lab``, whose shell has not activated the environment)."""
    script = Path(sys.executable).parent / "effitrain"
    if shutil.which("effitrain") or not script.exists():
        return "effitrain"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def fresh_command(notebook: str, folder: Path) -> str:
    """The one command that gives a fresh copy of ``notebook`` in ``folder`` while keeping the learner's."""
    where = "" if folder.resolve() == default_folder().resolve() else f" --dir {shlex.quote(str(folder))}"
    return f"{_program()} workbook{where} --fresh {lesson_id(notebook)}"


class Workbook:
    """The learner's folder and its manifest; :meth:`sync` and :meth:`fresh` do the work."""

    def __init__(self, folder: str | Path | None = None, source: str | Path | None = None, lang: str = "en"):
        self.folder = default_folder() if folder is None else Path(folder).expanduser()
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"workbook folder {str(self.folder)!r} is a file, not a folder. Fix: pass --dir with a "
                             f"folder path (or set {WORKBOOK_ENV}).")
        self.notebooks = source_notebooks(source, lang)  # another language: its translated lessons
        self.manifest_path = self.folder / MANIFEST
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            manifest = {}
        # {notebook: {"written": sha256}}; an unreadable manifest makes every copy count as the learner's own
        self.manifest = {k: v for k, v in manifest.items() if isinstance(v, dict) and "written" in v} \
            if isinstance(manifest, dict) else {}

    def _edition_bytes(self, name: str) -> bytes:
        import nbformat

        return (nbformat.writes(make_edition(self.notebooks[name], name, "student", solutions=True)) + "\n").encode()

    def _write(self, name: str, data: bytes, exclusive: bool) -> None:
        """Write a copy (``exclusive``: only if no file is there, so a learner's file is never replaced)."""
        with open(self.folder / name, "xb" if exclusive else "wb") as f:
            f.write(data)
        self.manifest[name] = {"written": _sha(data)}

    def _save_manifest(self) -> None:
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.manifest_path)

    def _touched(self, name: str) -> bool:
        """Whether the learner's copy differs from what the workbook wrote (or the workbook never wrote it)."""
        written = self.manifest.get(name, {}).get("written")
        return written is None or _sha((self.folder / name).read_bytes()) != written

    def sync(self) -> list[Copy]:
        """Bring the folder up to date with the lessons, never touching the learner's work (module docstring)."""
        check_all(self.notebooks)  # a marker error stops the run before anything is written
        self.folder.mkdir(parents=True, exist_ok=True)
        report = []
        for name in self.notebooks:
            path = self.folder / name
            data = self._edition_bytes(name)
            if not path.exists():
                self._write(name, data, exclusive=True)
                report.append(Copy(name, NEW))
            elif name not in self.manifest:
                report.append(Copy(name, NOT_OURS))
            elif self.manifest[name]["written"] == _sha(data):
                report.append(Copy(name, UNCHANGED if not self._touched(name) else KEPT))
            elif not self._touched(name):
                self._write(name, data, exclusive=False)
                report.append(Copy(name, UPDATED))
            else:
                report.append(Copy(name, CHANGED))
        self._save_manifest()
        return report

    def find(self, lesson: str) -> str:
        """The notebook of ``lesson`` (``"2.2"``, ``"start"`` or a notebook's file name)."""
        matches = [n for n in self.notebooks if lesson in (lesson_id(n), n, Path(n).stem)]
        if not matches:
            known = ", ".join(lesson_id(n) for n in self.notebooks)
            raise ValueError(f"--fresh {lesson!r} is not a lesson of this workbook; choose one of {known}.")
        return matches[0]

    def fresh(self, lesson: str) -> Copy:
        """A fresh copy of ``lesson``; the learner's copy, if touched, is renamed (never deleted) first."""
        name = self.find(lesson)
        check_all({name: self.notebooks[name]})
        self.folder.mkdir(parents=True, exist_ok=True)
        path, kept = self.folder / name, None
        if path.exists() and self._touched(name):
            target = path.with_name(f"{path.stem}_mine-{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
            while target.exists():  # two --fresh in the same second
                target = target.with_name(target.stem + "-1.ipynb")
            os.rename(path, target)
            kept = target.name
        self._write(name, self._edition_bytes(name), exclusive=not path.exists())
        self._save_manifest()
        return Copy(name, FRESH, kept)


def describe(report: list[Copy], folder: Path) -> str:
    """What a :meth:`Workbook.sync` did, for the terminal: counts, then one line per lesson that needs a word."""
    counts = {}
    for c in report:
        counts[c.action] = counts.get(c.action, 0) + 1
    lines = [f"your workbook: {folder} (" + ", ".join(f"{n} {a}" for a, n in counts.items()) + ")"]
    for c in report:
        if c.action == CHANGED:
            lines.append(f"  {c.notebook}: the lesson changed since your copy was made. For a fresh copy that "
                         f"keeps yours (renamed *_mine-<time>.ipynb): {fresh_command(c.notebook, folder)}")
        elif c.action == NOT_OURS:
            lines.append(f"  {c.notebook}: not written by the workbook, left as it is. To replace it with the "
                         f"lesson (yours kept, renamed): {fresh_command(c.notebook, folder)}")
        elif c.action in (NEW, UPDATED):
            lines.append(f"  {c.notebook}: {c.action}")
    return "\n".join(lines)
