"""Where does the workbook keep what it builds? Under ``SETTINGS.cache_dir``, written once, atomically.

``build_once(name, write)`` returns ``cache_dir/name``, calling ``write(folder)`` the first time only. It
writes into a temporary folder and moves it into place, so processes that build at the same time (the
ranks of a multi-process lesson, parallel tests) never see a half-written checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from effitrain_helpers.core.settings import SETTINGS


def build_once(name: str, write: Callable[[Path], None], marker: str, force: bool = False,
               wait_seconds: float = 300.0) -> Path:
    """The folder ``SETTINGS.cache_dir / name``, built by ``write`` unless its ``marker`` file exists.

    If ``write`` leaves no ``marker`` (transformers' ``save_pretrained`` writes nothing on ranks other than 0
    of a process group), this process waits up to ``wait_seconds`` for the copy another process is building.
    """
    target = SETTINGS.cache_dir / name
    if (target / marker).is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        write(tmp)
        if not (tmp / marker).is_file():
            return _wait_for(target / marker, wait_seconds)
        if force and target.exists():
            shutil.rmtree(target)
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
            raise RuntimeError(f"{path.parent} was not built within {seconds:.0f} s by the process that builds it "
                               "(rank 0 of the group). Fix: build it once in a single process first, e.g. "
                               "`effitrain model`.")
        time.sleep(0.2)
    return path.parent
