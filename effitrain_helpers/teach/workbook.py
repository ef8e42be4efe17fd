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

Two runs on one folder at once (a double-click, two terminals) take turns: each holds the lock file
``.effitrain-workbook.lock`` (which names its process) from reading the manifest to writing it; a run waits for
another at most :data:`LOCK_WAIT` seconds, then stops naming the process that holds the lock and how to end it.
Copies and the manifest are written to a temporary file and moved over the old one, so they are always whole
(a full disk leaves the old copy, or none); a copy whose bytes are a proper beginning of the lesson's (one an
older workbook truncated on a full disk) holds nothing of the learner's and is written again. A copy the manifest does not list (the
manifest was lost or broken) is the workbook's again when its bytes are exactly what the workbook writes now
(its sha256 fingerprint matches): nothing of the learner's can be in it.

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
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from effitrain_helpers.core import files
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.editions import check_all, source_notebooks, default_source, make_edition

WORKBOOK_ENV = "EFFITRAIN_WORKBOOK"
MANIFEST = ".effitrain-workbook.json"
LOCK = ".effitrain-workbook.lock"  # held by one run at a time (see the module docstring); holds its process id
LOCK_WAIT = 120.0  # seconds a run waits for another run's turn before naming that run and stopping
# What a run did with each lesson (the ``action`` of a :class:`Copy`).
NEW, UPDATED, UNCHANGED, KEPT, CHANGED, NOT_OURS, FRESH, REPAIRED = (
    msg("new"), msg("updated"), msg("up to date"), msg("yours (kept)"), msg("yours (lesson changed)"),
    msg("not written by the workbook"), msg("fresh copy"), msg("damaged copy rewritten"))


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



def _try_lock(lock, wait: float = 0.0) -> bool:
    """Hold ``lock`` (an open file) exclusively: True when held; False when another process still holds it after
    ``wait`` seconds. ``fcntl.flock`` on POSIX, ``msvcrt.locking`` of its first byte on Windows."""
    deadline = time.monotonic() + wait
    while True:
        if os.name == "nt":
            import msvcrt

            try:
                lock.seek(0)
                msvcrt.locking(lock.fileno(), msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                pass
        else:
            import fcntl

            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _unlock(lock) -> None:
    """Let go of a lock taken by :func:`_try_lock`."""
    if os.name == "nt":
        import msvcrt

        lock.seek(0)
        msvcrt.locking(lock.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_UN)

class Workbook:
    """The learner's folder and its manifest; :meth:`sync` and :meth:`fresh` do the work."""

    def __init__(self, folder: str | Path | None = None, source: str | Path | None = None, lang: str = "en"):
        self.folder = default_folder() if folder is None else Path(folder).expanduser()
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(tr("workbook folder {folder!r} is a file, not a folder. Fix: pass --dir with a folder "
                                "path (or set {workbook_env}).", folder=str(self.folder), workbook_env=WORKBOOK_ENV))
        self.notebooks = source_notebooks(source, lang)  # another language: its translated lessons
        self.manifest_path = self.folder / MANIFEST
        self._editions: dict[str, bytes] = {}
        self.manifest = self._read_manifest()

    def _read_manifest(self) -> dict[str, dict]:
        """``{notebook: {"written": sha256}}`` from the manifest ({} when it is missing or unreadable)."""
        try:
            manifest = json.loads(files.read_bytes(self.manifest_path))
        except (OSError, ValueError):
            manifest = {}
        return {k: v for k, v in manifest.items() if isinstance(v, dict) and isinstance(v.get("written"), str)} \
            if isinstance(manifest, dict) else {}

    def _recognise(self) -> None:
        """Add to the manifest every copy it lacks whose bytes are exactly the lesson's edition now."""
        for name in self.notebooks:
            path = self.folder / name
            if name not in self.manifest and path.is_file() and files.read_bytes(path) == self._edition_bytes(name):
                self.manifest[name] = {"written": _sha(self._edition_bytes(name))}

    @contextmanager
    def _turn(self):
        """This run's turn on the folder: the lock file held (waiting for another run, said once), the
        manifest read afresh and the copies it lost recognised; the manifest is saved before the turn ends."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / LOCK, "a") as lock:
            if not _try_lock(lock):
                print(tr("another workbook run is updating {folder}; waiting for it to finish ...",
                         folder=str(self.folder)), file=sys.stderr, flush=True)
                if not _try_lock(lock, wait=LOCK_WAIT):
                    raise TimeoutError(self._held_by(LOCK_WAIT))
            try:
                lock.truncate(0)  # who holds the turn, for a run that waits too long (_held_by)
                lock.write(f"{os.getpid()}\n")
                lock.flush()
                self.manifest = self._read_manifest()
                self._recognise()
                yield
                self._save_manifest()
            finally:
                _unlock(lock)

    def _held_by(self, waited: float) -> str:
        """One line for a run that waited ``waited`` seconds in vain: which process holds the lock, and the fix."""
        try:
            pid = int(files.read_bytes(self.folder / LOCK, limit=64).split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        if pid is None:
            return tr("another workbook run has held {lock} for over {seconds:.0f} s. Fix: end that run (a hung "
                      "`effitrain workbook` or `make lab`), then run this command again.",
                      lock=str(self.folder / LOCK), seconds=waited)
        return tr("another workbook run (process {pid}) has held {lock} for over {seconds:.0f} s. Fix: if it is "
                  "hung, end it (`kill {pid}`, or Ctrl-C in its terminal), then run this command again.",
                  pid=pid, lock=str(self.folder / LOCK), seconds=waited)

    def _edition_bytes(self, name: str) -> bytes:
        import nbformat

        if name not in self._editions:
            nb = make_edition(self.notebooks[name], name, "student", solutions=True)
            self._editions[name] = (nbformat.writes(nb) + "\n").encode()
        return self._editions[name]

    def _write(self, name: str, data: bytes, exclusive: bool) -> None:
        """Write a copy whole or not at all (``exclusive``: only if no file is there, so a learner's file is never
        replaced): a full disk leaves the old copy, or none, never a truncated one."""
        files.write_atomically(self.folder / name, data, exclusive=exclusive)
        self.manifest[name] = {"written": _sha(data)}

    def _damaged(self, name: str) -> bool:
        """Whether the copy of ``name`` is a truncated write of the lesson's edition (an older workbook writing
        in place onto a full disk): its bytes are a proper beginning of the edition's, so nothing in it is the
        learner's."""
        data = files.read_bytes(self.folder / name)
        return len(data) < len(self._edition_bytes(name)) and self._edition_bytes(name).startswith(data)

    def _save_manifest(self) -> None:
        """The manifest written to a temporary file of its own and moved over the old one (never half written)."""
        fd, tmp = tempfile.mkstemp(prefix=MANIFEST + ".", suffix=".tmp", dir=self.folder)
        try:
            with open(fd, "w") as f:
                f.write(json.dumps(self.manifest, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.manifest_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _touched(self, name: str) -> bool:
        """Whether the learner's copy differs from what the workbook wrote (or the workbook never wrote it)."""
        written = self.manifest.get(name, {}).get("written")
        return written is None or _sha(files.read_bytes(self.folder / name)) != written

    def sync(self) -> list[Copy]:
        """Bring the folder up to date with the lessons, never touching the learner's work (module docstring)."""
        check_all(self.notebooks)  # a marker error stops the run before anything is written
        report = []
        with self._turn():
            for name in self.notebooks:
                report.append(Copy(name, self._sync_one(name)))
        return report

    def _sync_one(self, name: str) -> str:
        """Bring one lesson's copy up to date; returns what was done (the ``action`` of its :class:`Copy`)."""
        path = self.folder / name
        data = self._edition_bytes(name)
        if not path.exists():
            self._write(name, data, exclusive=True)
            return NEW
        if self._damaged(name):
            self._write(name, data, exclusive=False)
            return REPAIRED
        if name not in self.manifest:
            return NOT_OURS
        if self.manifest[name]["written"] == _sha(data):
            return UNCHANGED if not self._touched(name) else KEPT
        if not self._touched(name):
            self._write(name, data, exclusive=False)
            return UPDATED
        return CHANGED

    def find(self, lesson: str) -> str:
        """The notebook of ``lesson`` (``"2.2"``, ``"start"`` or a notebook's file name)."""
        matches = [n for n in self.notebooks if lesson in (lesson_id(n), n, Path(n).stem)]
        if not matches:
            known = ", ".join(lesson_id(n) for n in self.notebooks)
            raise ValueError(tr("--fresh {lesson!r} is not a lesson of this workbook; choose one of {known}.",
                                lesson=lesson, known=known))
        return matches[0]

    def fresh(self, lesson: str) -> Copy:
        """A fresh copy of ``lesson``; the learner's copy, if touched, is renamed (never deleted) first."""
        name = self.find(lesson)
        check_all({name: self.notebooks[name]})
        path, kept = self.folder / name, None
        with self._turn():
            if path.exists() and self._touched(name):
                target = path.with_name(f"{path.stem}_mine-{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
                while target.exists():  # two --fresh in the same second
                    target = target.with_name(target.stem + "-1.ipynb")
                os.rename(path, target)
                kept = target.name
            self._write(name, self._edition_bytes(name), exclusive=not path.exists())
        return Copy(name, FRESH, kept)


def describe(report: list[Copy], folder: Path) -> str:
    """What a :meth:`Workbook.sync` did, for the terminal: counts, then one line per lesson that needs a word."""
    counts = {}
    for c in report:
        counts[c.action] = counts.get(c.action, 0) + 1
    lines = [tr("your workbook: {folder} ({counts})", folder=folder,
                counts=", ".join(tr("{n} {action}", n=n, action=tr(a)) for a, n in counts.items()))]
    for c in report:
        if c.action == CHANGED:
            lines.append(tr("  {notebook}: the lesson changed since your copy was made. For a fresh copy that keeps "
                            "yours (renamed *_mine-<time>.ipynb): {command}", notebook=c.notebook,
                            command=fresh_command(c.notebook, folder)))
        elif c.action == NOT_OURS:
            lines.append(tr("  {notebook}: not written by the workbook, left as it is. To replace it with the lesson "
                            "(yours kept, renamed): {command}", notebook=c.notebook,
                            command=fresh_command(c.notebook, folder)))
        elif c.action in (NEW, UPDATED, REPAIRED):
            lines.append(f"  {c.notebook}: {tr(c.action)}")
    return "\n".join(lines)
