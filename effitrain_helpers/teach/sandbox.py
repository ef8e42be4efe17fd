"""Where does a graded notebook run? In a bubblewrap sandbox of its own, which it cannot see out of.

:func:`run_graded` runs ``python -m effitrain_helpers.teach.sandbox FOLDER LIMIT`` (this module's ``main``)
inside ``bwrap`` with: new PID, network, IPC, UTS and user namespaces (no network, no other process visible:
not the grader, its arguments or another submission's kernel), a private ``/tmp``, the whole file system
read-only, the home folder hidden but for what a lesson reads from it (this Python, the workbook, its cache and
the Hugging Face cache, read-only: run each lesson once, or ``effitrain prefetch``, before grading so that what
it builds is there), the submissions folder, the instructor's notebooks and every path the caller names hidden
behind empty folders or ``/dev/null``, and only the notebook's own folder writable. The runner there executes the
notebook with nbclient (the kernel's output to ``/dev/null``), makes itself unreadable to the processes it
starts (``PR_SET_DUMPABLE`` 0: they cannot open its file descriptors) and hands the executed notebook back on
its standard output. When it ends, or the grader kills it, the PID namespace ends and every process the
notebook started ends with it.

Without bubblewrap (:func:`unavailable` says why) ``effitrain grade`` refuses unless ``--unsafe``; then the
runner runs as a plain process in a session of its own, and everything carrying its marker (:data:`RUN_ENV`)
is killed after it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from functools import lru_cache
from pathlib import Path

from effitrain_helpers.core.language import tr

RUN_ENV = "EFFITRAIN_GRADE_RUN"  # (unsafe mode) the marker every process of one graded notebook inherits
NOTEBOOK = "graded.ipynb"
INSIDE = "/tmp/effitrain-grade"  # the notebook's folder, as the sandbox sees it
SLACK = 60.0  # seconds the grader waits past the limit for the runner to hand its result back
POLL = 0.5  # seconds between two looks at a run's cancel event


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why the sandbox cannot run here (one line), or None when ``bwrap`` works."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return tr("bubblewrap (bwrap) is not installed, so submissions cannot run in a sandbox. Fix: install it "
                  "(Debian/Ubuntu: sudo apt-get install bubblewrap), or add --unsafe to run them with your "
                  "permissions")
    try:
        done = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                               "--dev", "/dev", "--tmpfs", "/tmp", "true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return tr("bubblewrap (bwrap) failed to start ({error}). Fix: check it runs, or add --unsafe", error=err)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        return tr("bubblewrap (bwrap) cannot make a sandbox here ({why}; user namespaces may be off). Fix: enable "
                  "them (sysctl kernel.unprivileged_userns_clone=1), or add --unsafe", why=why[0])
    return None


def _hidden(paths) -> list[str]:
    """bwrap arguments hiding each of ``paths`` (a folder behind an empty one, a file behind /dev/null), also
    under /tmp: the sandbox's /tmp is its own, but a folder shown again there (a checkout under /tmp) may hold
    one."""
    args = []
    temp = Path(tempfile.gettempdir()).resolve()
    for path in dict.fromkeys(Path(p).resolve() for p in paths):
        if not path.exists() or path in (temp, Path("/tmp")):
            continue
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return args


def _needed(env: dict) -> list[Path]:
    """What a lesson reads outside its own folder: this Python and its packages, the workbook's checkout, its
    cache (the offline kit included) and the Hugging Face cache."""
    from effitrain_helpers.core.settings import SETTINGS

    home = Path.home()
    package_root = Path(__file__).resolve().parents[2]
    hf = Path(env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface")
    needed = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent, package_root,
              SETTINGS.cache_dir, hf, *(Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return list(dict.fromkeys(p.expanduser().resolve() for p in needed))


def _shown_again(top: Path, env: dict) -> list[str]:
    """bwrap arguments showing again, read-only, what a lesson needs (:func:`_needed`) from under ``top``, a
    folder the sandbox replaced by an empty one (the home folder; /tmp, where a checkout may live)."""
    return [arg for path in _needed(env) if top in path.parents and path.exists()
            for arg in ("--ro-bind", str(path), str(path))]


def _home(env: dict) -> list[str]:
    """bwrap arguments hiding the home folder (keys, mail, other work), then showing again what a lesson needs
    from it."""
    home = Path.home().resolve()
    if home == Path("/") or not home.is_dir():
        return []
    return ["--tmpfs", str(home), *_shown_again(home, env)]


def _command(folder: Path, limit: float, hide, safe: bool, env: dict) -> list[str]:
    runner = [sys.executable, "-m", "effitrain_helpers.teach.sandbox", INSIDE if safe else str(folder), str(limit)]
    if not safe:
        return runner
    return ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc",
            "--dev", "/dev", "--tmpfs", "/tmp", *_shown_again(Path("/tmp"), env), *_home(env), *_hidden(hide), "--bind", str(folder), INSIDE,
            "--chdir", INSIDE, *runner]


class Cancelled(Exception):
    """The grader asked a run to stop (``cancel`` set: Ctrl-C or SIGTERM while grading in parallel)."""


def run_graded(folder: Path, limit: float, env: dict, hide=(), safe: bool = True, cancel=None) -> dict:
    """Run ``folder/graded.ipynb`` (see module docstring) within ``limit`` seconds; returns the runner's result:
    ``{"notebook": executed notebook (dict), "outcome": "ok" | "timeout" | "error", "detail": what failed}``, or an
    ``"error"`` result when the runner gave nothing back. ``cancel`` (a ``threading.Event``), looked at every
    :data:`POLL` seconds, stops the run with :class:`Cancelled`. Whatever ends the wait (its end, SIGTERM, Ctrl-C,
    ``cancel``), every process of the run is killed before this returns or raises."""
    inside = INSIDE if safe else str(folder)  # where the run may write: its own folder (HOME and caches read-only)
    env = {**env, "IPYTHONDIR": f"{inside}/.ipython", "MPLCONFIGDIR": f"{inside}/.matplotlib",
           "JUPYTER_RUNTIME_DIR": f"{inside}/.jupyter", "TMPDIR": "/tmp" if safe else str(folder),
           RUN_ENV: uuid.uuid4().hex}
    proc = subprocess.Popen(_command(folder, limit, hide, safe, env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=str(folder), start_new_session=True)
    ends = time.monotonic() + limit + SLACK
    try:
        while True:
            try:
                out, _ = proc.communicate(timeout=max(0.0, min(POLL, ends - time.monotonic())))
                break
            except subprocess.TimeoutExpired:  # retrying communicate loses no output
                if cancel is not None and cancel.is_set():
                    raise Cancelled from None
                if time.monotonic() >= ends:
                    return {"notebook": None, "outcome": "timeout", "detail": ""}  # grade says it, in the class's language
    finally:
        _end(proc, env[RUN_ENV], safe)
    try:
        result = json.loads(out.decode("utf-8"))
        if isinstance(result, dict) and isinstance(result.get("notebook"), dict):
            return result
    except ValueError:
        pass
    return {"notebook": None, "outcome": "error",
            "detail": tr("the notebook's runner ended (exit {code}) without a result", code=proc.returncode)}


def _end(proc: subprocess.Popen, marker: str, safe: bool) -> None:
    """Kill the run: its session (bwrap, whose PID namespace then ends), and in unsafe mode every process
    carrying its marker."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if not safe:
        _end_marked(marker)


def _end_marked(marker: str) -> None:
    import psutil

    from effitrain_helpers.processes.ending import kill_all

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(RUN_ENV) == marker:
                found.append(proc)
        except (psutil.Error, OSError):  # gone meanwhile, another user's, a zombie
            continue
    kill_all(found, timeout=5)


def _this_python_kernel(connection_file: Path):
    """A kernel manager for a kernel of this very Python, whatever kernel the notebook names."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):  # noqa: D102 - the one kernel it knows
            spec = get_kernel_dict()  # no history database: the kernel's code cannot read the cells' code from it
            spec["argv"] = [*spec["argv"], "--HistoryManager.enabled=False"]
            return self.kernel_spec_class(resource_dir=RESOURCES, **spec)

    return AsyncKernelManager(kernel_name="effitrain-grade", kernel_spec_manager=ThisPython(),
                              connection_file=str(connection_file))


async def _execute(nb, folder: Path, limit: float) -> str:
    """Run ``nb`` in a fresh kernel; ``"timeout"`` past ``limit`` seconds (the kernel killed), else ``"ok"``."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, km=_this_python_kernel(folder / "kernel.json"), timeout=math.ceil(limit),
                            allow_errors=True, shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(folder)}})
    run = asyncio.ensure_future(client.async_execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                     cleanup_kc=True))
    done, _ = await asyncio.wait({run}, timeout=limit)
    if not done:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        return "timeout"
    run.result()
    return "ok"


def main(argv: list[str]) -> None:
    """The runner (inside the sandbox): execute ``FOLDER/graded.ipynb``, print the result as JSON, exit."""
    import ctypes

    import nbformat

    result = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the grader's channel: only this process holds it
    os.dup2(2, 1)
    try:  # PR_SET_DUMPABLE = 4: the notebook's processes cannot open this one's file descriptors
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    folder, limit = Path(argv[0]), float(argv[1])
    nb = nbformat.read(folder / NOTEBOOK, as_version=4)
    (folder / NOTEBOOK).unlink()  # the kernel reads no cell it has not run yet (a hidden check's cases)
    outcome, detail = "ok", ""
    try:
        outcome = asyncio.run(_execute(nb, folder, limit))
    except Exception as err:  # noqa: BLE001 - a dead kernel, a cell timeout: this notebook's row
        from nbclient.exceptions import CellTimeoutError

        outcome = "timeout" if isinstance(err, CellTimeoutError) else "error"
        detail = f"{type(err).__name__}: {str(err)[:200]}"
    json.dump({"notebook": nb, "outcome": outcome, "detail": detail}, result)
    result.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
