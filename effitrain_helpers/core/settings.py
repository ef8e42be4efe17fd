"""The one settings object of the workbook: lesson size and cache folder.

Lessons read ``SETTINGS.size`` instead of inventing their own knobs (guide: one size knob).
Environment variables:

- ``EFFITRAIN_SIZE``: ``small`` (default; a 2-core CPU runs a lesson in about a minute)
  or ``full`` (demos on a GPU: larger benchmarks and batches).
- ``EFFITRAIN_CACHE``: where the workbook keeps what it builds (default ``~/.cache/effitrain``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SIZES = ("small", "full")


def _size_from_env() -> str:
    value = os.environ.get("EFFITRAIN_SIZE", "small").strip().lower() or "small"
    if value not in SIZES:
        raise ValueError(
            f"EFFITRAIN_SIZE={value!r} is not a size; allowed: {', '.join(SIZES)}. "
            "Fix: export EFFITRAIN_SIZE=small (CPU, tests) or EFFITRAIN_SIZE=full (GPU demos)."
        )
    return value


def _cache_from_env() -> Path:
    explicit = os.environ.get("EFFITRAIN_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "effitrain"


@dataclass
class Settings:
    """Run-wide settings, read once from the environment (see module docstring)."""

    size: str
    cache_dir: Path

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(size=_size_from_env(), cache_dir=_cache_from_env())

    def set_size(self, size: str) -> None:
        """Switch between ``small`` and ``full`` for the rest of this kernel, and for the processes it launches
        (they read ``EFFITRAIN_SIZE`` from the environment they inherit)."""
        if size not in SIZES:
            raise ValueError(f"size={size!r} is not allowed; choose one of {', '.join(SIZES)}.")
        self.size = size
        os.environ["EFFITRAIN_SIZE"] = size


SETTINGS = Settings.from_env()
