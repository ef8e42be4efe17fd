"""What ``launch`` and its workers agree on: environment variable names and the files of the launch folder.

``launch`` (in the notebook's process) writes the folder and sets the variables; ``launch_worker`` (in each
rank's process) reads them and answers with one result or error file. Both spell every name through here.

The launch folder is ``{temp}/effitrain-launch-{parent pid}-{random}``, so a later launch can tell the folder
of a notebook process that died without cleaning up (killed with SIGKILL) and remove it.
"""

from __future__ import annotations

from pathlib import Path

# environment variables set for each worker (besides RANK, WORLD_SIZE, MASTER_ADDR ... that torch reads)
BACKEND_ENV = "EFFITRAIN_BACKEND"  # "gloo" (CPU group) or "nccl" (one GPU per rank)
TIMEOUT_ENV = "EFFITRAIN_TIMEOUT"  # seconds, the process group's time limit
PARENT_ENV = "EFFITRAIN_PARENT_PID"  # the worker ends itself when this process is no longer its parent

FOLDER_PREFIX = "effitrain-launch-"
PAYLOAD = "payload.pkl"  # cloudpickle of (fn, args, kwargs)


def folder_prefix(parent_pid: int) -> str:
    """The name every launch folder of process ``parent_pid`` starts with."""
    return f"{FOLDER_PREFIX}{parent_pid}-"


def parent_of(folder: Path) -> int | None:
    """The pid of the process that made a launch folder, read from its name (None if not one of ours)."""
    rest = folder.name[len(FOLDER_PREFIX):] if folder.name.startswith(FOLDER_PREFIX) else ""
    pid = rest.split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def result_file(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its return value (cloudpickle)."""
    return folder / f"rank{rank}.result.pkl"


def left_file(folder: Path, rank: int) -> Path:
    """Written (empty) by rank ``rank`` once it has written its result and left the process group: what it still
    does after that is the interpreter's exit, which cannot lose its result."""
    return folder / f"rank{rank}.left"


def error_file(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its exception: a pickled dict with rank, type, message and traceback."""
    return folder / f"rank{rank}.error.pkl"
