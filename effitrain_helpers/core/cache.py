"""Where does the workbook keep what it builds? Under ``SETTINGS.cache_dir``, written once, atomically.

``build_once(name, write)`` returns ``cache_dir/name``, calling ``write(folder)`` the first time only. It
writes into a temporary ``.building-{pid}-*`` folder and moves it into place, so processes that build at the
same time (the ranks of a multi-process lesson, parallel tests) never see a half-written checkpoint. A build
folder whose process died (killed mid-build) is removed by the next build in the same folder, and a cached
entry found damaged (truncated weights, a broken JSON file) is built again.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.settings import SETTINGS

BUILDING = ".building-"  # prefix of a folder being written: .building-{pid}-{random}


def damage(folder: Path) -> str | None:
    """None when every file of a cached entry is whole, else what is wrong (one phrase).

    Checks each ``*.json`` parses and each ``*.safetensors`` file is as long as its own header says (a download
    or a copy cut short, a disk that filled up); a sharded checkpoint's index must name files that exist.
    """
    for path in sorted(folder.glob("*.json")):
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            return f"{path.name} is not valid JSON ({type(err).__name__})"
        if path.name.endswith(".index.json") and isinstance(content, dict):
            missing = sorted(set(content.get("weight_map", {}).values()) - {p.name for p in folder.iterdir()})
            if missing:
                return f"{path.name} names missing files {missing}"
    for path in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_damage(path)
        if problem:
            return f"{path.name} {problem}"
    return None


def _safetensors_damage(path: Path) -> str | None:
    """None when a safetensors file's size matches its header (8-byte length, JSON, then the tensors' bytes)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"is truncated ({size} bytes)"
        (header_len,) = struct.unpack("<Q", head)
        if header_len > size - 8:
            return f"is truncated ({size} bytes, header alone says {header_len + 8})"
        try:
            header = json.loads(f.read(header_len))
        except ValueError:
            return "has a broken header"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    expected = 8 + header_len + max(ends, default=0)
    return None if size == expected else f"is {size} bytes where its header says {expected} (truncated?)"


def _remove_stale_builds(parent: Path, unnamed_after_s: float = 3600.0) -> None:
    """Remove ``.building-{pid}-*`` folders of processes that no longer run on this machine (and build folders
    without a pid, from older versions, after an hour)."""
    import psutil

    for folder in parent.glob(BUILDING + "*"):
        pid = folder.name[len(BUILDING):].split("-", 1)[0]
        if pid.isdigit():
            stale = int(pid) != os.getpid() and not psutil.pid_exists(int(pid))
        else:
            stale = time.time() - folder.stat().st_mtime > unnamed_after_s
        if stale:
            shutil.rmtree(folder, ignore_errors=True)


def _discard(target: Path) -> None:
    """Move a damaged entry out of the way in one step (readers never see it half deleted), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=f"{BUILDING}{os.getpid()}-discard-", dir=target.parent))
    try:
        os.replace(target, trash / "old")
    except FileNotFoundError:  # another process discarded it first
        pass
    shutil.rmtree(trash, ignore_errors=True)


def _cache_parent(target: Path) -> None:
    """Create the folder of ``target``; a cache location that cannot be written is the user's to fix."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(target.parent, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as err:
        where = (f"EFFITRAIN_CACHE={os.environ['EFFITRAIN_CACHE']!r}" if os.environ.get("EFFITRAIN_CACHE")
                 else tr("the cache folder {folder!r}", folder=str(SETTINGS.cache_dir)))
        raise ValueError(tr("{where} cannot hold the workbook's cache ({reason} at {parent!r}). Fix: export "
                            "EFFITRAIN_CACHE=a folder you can write to.",
                            where=where, reason=err.strerror or err, parent=str(target.parent))) from None


def build_once(name: str, write: Callable[[Path], None], marker: str, force: bool = False,
               wait_seconds: float = 300.0) -> Path:
    """The folder ``SETTINGS.cache_dir / name``, built by ``write`` unless its ``marker`` file exists.

    If ``write`` leaves no ``marker`` (transformers' ``save_pretrained`` writes nothing on ranks other than 0
    of a process group), this process waits up to ``wait_seconds`` for the copy another process is building.
    """
    target = SETTINGS.cache_dir / name
    if (target / marker).is_file() and not force:
        problem = damage(target)
        if problem is None:
            return target
        print(f"the cached {target} is damaged ({problem}): building it again", file=sys.stderr)
        force = True
    _cache_parent(target)
    _remove_stale_builds(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f"{BUILDING}{os.getpid()}-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        write(tmp)
        if not (tmp / marker).is_file():
            return _wait_for(target / marker, wait_seconds)
        if force and target.exists():
            _discard(target)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: keep its copy
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _wait_for(path: Path, seconds: float) -> Path:
    deadline = time.monotonic() + seconds
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(tr("{parent} was not built within {seconds:.0f} s by the process that builds it (rank "
                                  "0 of the group). Fix: build it once in a single process first, e.g. `effitrain "
                                  "model`.", parent=path.parent, seconds=seconds))
        time.sleep(0.2)
    return path.parent
