"""Where does the workbook keep what it builds? Under ``SETTINGS.cache_dir``, written once, atomically.

``build_once(name, write)`` returns ``cache_dir/name``, calling ``write(folder)`` the first time only. It
writes into a temporary folder and moves it into place, so processes that build at the same time (the
ranks of a multi-process lesson, parallel tests) never see a half-written checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .settings import SETTINGS


def build_once(name: str, write: Callable[[Path], None], marker: str, force: bool = False) -> Path:
    """The folder ``SETTINGS.cache_dir / name``, built by ``write`` unless its ``marker`` file exists."""
    target = SETTINGS.cache_dir / name
    if (target / marker).is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        write(tmp)
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
