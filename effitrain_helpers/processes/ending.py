"""Ending processes for good: a list of them, or one process and everything below it; and a rank ending itself
without the interpreter's teardown.

The one home of "kill, then wait until they are gone", shared by the graders (a notebook's kernel and all it
started) and the torchrun experiments (torchrun and its ranks, each in a session of its own, which a kill of
torchrun's process group does not reach)."""

from __future__ import annotations

import os
import sys


def kill_all(procs, timeout: float = 10.0) -> int:
    """SIGKILL every ``psutil.Process`` in ``procs`` (those already gone are skipped) and wait up to ``timeout``
    seconds until they are; returns how many were given."""
    import psutil

    procs = list(procs)
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=timeout)
    return len(procs)


def end_tree(pid: int, timeout: float = 10.0) -> None:
    """Kill the process ``pid`` and every process below it, descendants listed first (while ``pid`` is alive,
    so none is orphaned out of reach)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    kill_all(family, timeout=timeout)


def become_reaper() -> bool:
    """Linux: make this process the reaper of every process below it (``PR_SET_CHILD_SUBREAPER``), so that one
    started in a session of its own (``start_new_session=True``) whose parent ends is re-parented here rather
    than to init, and stays among this process's descendants (:func:`end_descendants` reaches it). Returns
    whether it took effect (False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def end_descendants(timeout: float = 10.0) -> int:
    """Kill every process below this one (whatever its process group or session) and wait until they are gone;
    returns how many there were. With :func:`become_reaper` first, that is everything it ever started that
    still runs."""
    import psutil

    return kill_all(psutil.Process().children(recursive=True), timeout=timeout)


def exit_without_teardown(code: int) -> None:
    """Exit this process with ``code`` once the atexit functions have run (temporary folders removed, output
    flushed), skipping the interpreter's teardown: there torch's gloo threads, freed with the objects that hold
    the process group, can abort a rank that has finished its work ("terminate called without an active
    exception", SIGABRT, about 1 run in 40 in CI). Every process the workbook runs as a rank ends this way."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
