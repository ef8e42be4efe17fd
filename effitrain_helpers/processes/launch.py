"""Run a function in N real processes from a notebook, and get each rank's return value back.

``launch(fn, *args, num_processes=N)`` is what every multi-process lesson uses:

- ``fn`` may be defined in the notebook itself: it travels to the workers by value (cloudpickle); so does a
  function of a module the workers could not import by its name (a script loaded from its path), see
  :func:`_pickled`;
- the workers are fresh Python processes (not forks of the kernel), so an Accelerator, CUDA or
  bitsandbytes already initialised in the notebook cannot break them;
- they form one real process group before ``fn`` runs: gloo over loopback on CPUs
  (``ACCELERATE_USE_CPU=1``, so Accelerate sees ``MULTI_CPU`` rather than N lone processes), NCCL with one
  GPU per rank on GPU machines, with the same ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR``
  variables ``accelerate launch`` and ``torchrun`` set; each worker checks the group's size and ranks, and
  that Accelerate (if ``fn`` used it) saw the same world, so a silent fall-back to one process fails loudly;
- each process gets cores / N threads, a free loopback port and a timeout; a worker whose notebook kernel
  dies ends itself;
- GPUs are used when there are at least N of them; otherwise the N processes run on the CPU (said so);
- results come back in rank order; prints appear live, prefixed with the rank;
- the workers import what the notebook can: its ``sys.path`` (with what the notebook added) is their
  ``PYTHONPATH``;
- when a rank raises, :class:`RankFailed` carries its exception type, message and traceback; when a rank
  dies without a word (killed by a signal, as the out-of-memory killer does, or ``os._exit``), it is named
  with its exit code or signal, not the peer that lost its connection to it;
- whatever ends the run (success, failure, timeout, an interrupt, SIGTERM to the notebook's process), every
  worker and every process a worker started (in a session of its own too: the worker is its reaper, see
  ``launch_worker``) is ended and the launch folder removed; a folder left by a
  notebook process killed with SIGKILL is removed by the next launch.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.processes import protocol
from effitrain_helpers.core.validate import positive_int, positive_number, whole_number

MAX_PROCESSES = 64
WORKER = "effitrain_helpers.processes.launch_worker"
START_S = 5.0  # about how long a fresh process takes to start and import a lesson's libraries on a quiet
# machine (5.3 CPU seconds for 3.3's fp32 run of 1 step, measured on a busy 2-core machine)
OOM_HINT = msg("Out of memory? The kernel's out-of-memory killer ends a process with SIGKILL (see `dmesg`). "
               "Fix: fewer processes, a smaller batch or model, or more memory")


class RankFailed(RuntimeError):
    """A rank failed: ``rank``, ``exc_type`` (its exception's class name, or ``ProcessExit`` when it died
    without reporting) and ``remote_traceback`` (its traceback, or its last output)."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str):
        if exc_type == "ProcessExit":
            headline = tr("rank {rank} {message}", rank=rank, message=message)
            tail = tr("last output of rank {rank}", rank=rank)
        else:
            headline = tr("rank {rank} raised {error}: {message}", rank=rank, error=exc_type, message=message)
            tail = tr("traceback of rank {rank}", rank=rank)
        super().__init__(f"{headline}\n\n--- {tail} ---\n{remote_traceback}")
        self.rank, self.exc_type, self.remote_traceback = rank, exc_type, remote_traceback


def usable_cores() -> int:
    """CPU cores this process may run on (respects affinity and container limits where the OS tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def gpu_count() -> int:
    """Number of CUDA GPUs, without creating a CUDA context in this process."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_num_processes() -> int:
    """Every GPU on a machine with 2 or more, else 2 (processes on the CPU)."""
    return gpu_count() if gpu_count() >= 2 else 2


def resolve_num_processes(value: Any = None, minimum: int = 1, name: str = "num_processes", why: str = "") -> int:
    """The one home of the process count: ``value`` checked, or :func:`default_num_processes` when None.

    ``minimum`` is what the caller's work needs (``why`` says why, e.g. local SGD needs a group); ``name`` is
    how the user spelled it (``--processes`` on the command line), so the error names what they typed.
    """
    n = default_num_processes() if value is None else value
    example = max(2, minimum)
    fix = f"{name} {example}" if name.startswith("--") else f"{name}={example}"
    return whole_number(name, n, minimum=minimum, maximum=MAX_PROCESSES,
                        hint=tr("e.g. {fix} (default: every GPU, or 2 on a CPU){why}", fix=fix, why=tr(why)))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _importable(name: str) -> bool:
    """Whether a fresh process would find module ``name`` by its name on this process's path (the workers'
    ``PYTHONPATH``) as the same file: searched with the path finder, not read from ``sys.modules``."""
    from importlib.machinery import PathFinder

    parent, _, _ = name.rpartition(".")
    if parent and not _importable(parent):
        return False
    search = getattr(sys.modules.get(parent), "__path__", None) if parent else None
    spec = PathFinder.find_spec(name, search)
    file = getattr(sys.modules.get(name), "__file__", None)
    return bool(spec and spec.origin and file and os.path.realpath(spec.origin) == os.path.realpath(file))


def _unimportable_module(obj) -> types.ModuleType | None:
    """The module of function ``obj`` when the workers could not import it by its name (a script loaded from
    its file), else None (``__main__`` travels by value anyway, and a module without a file is built in)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "") if callable(obj) else None
    if module is None or module.__name__ == "__main__" or not getattr(module, "__file__", None):
        return None
    return None if _importable(module.__name__) else module


def _pickled(fn, args, kwargs) -> bytes:
    """``(fn, args, kwargs)`` pickled with cloudpickle. cloudpickle sends a function of an importable module by
    reference (the worker imports it by name); the module of ``fn``, or of a function passed as an argument,
    that the workers cannot import by its name travels by value instead, so a learner's function from a plain
    script can be judged like one from a notebook."""
    import cloudpickle

    modules = {id(m): m for m in map(_unimportable_module, (fn, *args, *kwargs.values())) if m is not None}
    for module in modules.values():
        cloudpickle.register_pickle_by_value(module)
    try:
        try:
            return cloudpickle.dumps((fn, args, kwargs))
        except Exception as err:  # noqa: BLE001 - a lock, a socket, an open file, a generator ...
            raise TypeError(_unpicklable(fn, args, kwargs, err)) from None
    finally:
        for module in modules.values():
            cloudpickle.unregister_pickle_by_value(module)


def _unpicklable(fn, args, kwargs, err: Exception) -> str:
    """One line for ``launch`` 's arguments that cannot be sent to the workers: which one, and the fix."""
    import cloudpickle

    named = [("fn", fn)] + [(tr("argument {i}", i=i + 1), a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, value in named:
        try:
            cloudpickle.dumps(value)
        except Exception as own:  # noqa: BLE001 - the first that fails on its own is named
            err = own
            break
    else:
        name, value = "fn", fn
    return tr("launch: {name} ({kind}) cannot be sent to the worker processes ({reason}): each process gets its "
              "own copy of fn and its arguments, and this object cannot be copied into another process. Fix: "
              "create it inside fn (each process makes its own), or pass what it is made from.", name=name,
              kind=type(value).__name__, reason=str(err).splitlines()[0] if str(err) else type(err).__name__)


def _validate(fn, timeout, threads_per_process) -> None:
    if not callable(fn):
        raise TypeError(tr("fn={fn!r} is not callable; pass the function itself, e.g. launch(train, num_processes=2).",
                           fn=fn))
    positive_number("timeout", timeout, hint=msg("e.g. timeout=120 (seconds)"))
    if threads_per_process is not None:
        positive_int("threads_per_process", threads_per_process, hint=msg("e.g. threads_per_process=1, or None (cores / N)"))


def _environment(rank: int, n: int, port: int, threads: int, use_gpu: bool, timeout: float) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("ACCELERATE_USE_CPU", "CUDA_VISIBLE_DEVICES") if not use_gpu else ("ACCELERATE_USE_CPU",):
        env.pop(var, None)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        protocol.BACKEND_ENV: "nccl" if use_gpu else "gloo", protocol.TIMEOUT_ENV: str(timeout),
        "PYTHONUNBUFFERED": "1", protocol.PARENT_ENV: str(os.getpid()),
        "PYTHONPATH": os.pathsep.join(sys.path),  # the workers import what this process can, in its order
    })
    if sys.platform.startswith("linux") or sys.platform == "darwin":
        # one machine: gloo talks over loopback, as accelerate's own launcher sets it (gloo's choice of an
        # interface by the hostname is flaky on some hosts)
        env["GLOO_SOCKET_IFNAME"] = "lo0" if sys.platform == "darwin" else "lo"
    if not use_gpu:
        env["ACCELERATE_USE_CPU"] = "1"  # otherwise Accelerate on a CPU machine runs N lone processes
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _relay(rank: int, stream, sink: list[str], quiet: bool) -> None:
    """Print a worker's output line by line, prefixed with its rank (always kept for error reports).

    Reads bytes, so no output can stop the relay (undecodable bytes are replaced); a progress bar that
    redraws itself with carriage returns shows its last state only.
    """
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n").split("\r")[-1] + "\n"
        sink.append(line)
        if not quiet:
            print(f"[rank {rank}] {line}", end="", flush=True)
    stream.close()


def _signal(proc: subprocess.Popen, hard: bool) -> None:
    """Signal a worker's process group: the worker and what it started (on Windows, the worker only)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL if hard else signal.SIGTERM)
        elif proc.poll() is None:
            proc.kill() if hard else proc.terminate()
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(proc: subprocess.Popen) -> bool:
    """Whether anything is left in a worker's process group (the worker, or a child it left behind)."""
    if not hasattr(os, "killpg"):
        return proc.poll() is None
    try:
        os.killpg(proc.pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _end(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """End every worker and every process a worker started, also those of workers that already returned.

    SIGTERM to each worker's process group, SIGKILL to what is left after ``grace`` seconds.
    """
    for p in procs:
        _signal(p, hard=False)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    while any(_group_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    for p in procs:
        if _group_alive(p):
            _signal(p, hard=True)
        p.wait()


def _last_lines(outputs: list[list[str]], n: int = 5) -> str:
    return "".join(f"\n  rank {r}: " + ("".join(lines[-n:]).rstrip() or "(no output)").replace("\n", "\n    ")
                   for r, lines in enumerate(outputs))


def how_it_ended(returncode: int) -> str:
    """A worker's end in words: its exit code, or the signal that killed it by number and name."""
    if returncode >= 0:
        return tr("exited with code {code}", code=returncode)
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = tr("unknown signal")
    return tr("was killed by signal {number} ({name})", number=-returncode, name=name)


def _failure(folder: Path, procs: list[subprocess.Popen], failed: list[int], outputs: list[list[str]]) -> RankFailed:
    """The error of the rank that failed first, among ``failed`` (the ranks found ended with an error at once).

    A rank that died without reporting (a signal, ``os._exit``) is the cause: the others' reports are then
    only their lost connection to it. Otherwise the earliest report wins.
    """
    silent = [r for r in failed if not protocol.error_file(folder, r).is_file()]
    if silent:
        rank = silent[0]
        code = procs[rank].returncode
        hint = f". {tr(OOM_HINT)}" if code == -getattr(signal, "SIGKILL", 9) else ""
        return RankFailed(rank, "ProcessExit", tr("{ended} before reporting; the other ranks were ended{hint}.",
                                                  ended=how_it_ended(code), hint=hint),
                          "".join(outputs[rank][-20:]) or tr("(no output)"))
    first = min(failed, key=lambda r: protocol.error_file(folder, r).stat().st_mtime)
    report = pickle.loads(protocol.error_file(folder, first).read_bytes())
    return RankFailed(report["rank"], report["type"], report["message"], report["traceback"])


def _wait(procs: list[subprocess.Popen], folder: Path, outputs: list[list[str]], timeout: float) -> None:
    """Wait until every worker has exited with 0; raise on the first failure or after ``timeout`` seconds.

    A worker that ended otherwise *after* it wrote its result and left the group (its "left" file) did all its
    work: torch's gloo threads can abort a process during the interpreter's exit ("terminate called without
    an active exception"). That end is said in one line on stderr, and its result is kept.
    """
    deadline = time.monotonic() + timeout
    while True:
        codes = [p.poll() for p in procs]
        done = [r for r, code in enumerate(codes) if code == 0 or (code is not None
                                                                   and protocol.left_file(folder, r).is_file())]
        failed = [r for r, code in enumerate(codes) if code is not None and r not in done]
        if failed:
            raise _failure(folder, procs, failed, outputs)
        if len(done) == len(procs):
            for r in (r for r in done if codes[r] != 0):
                print(tr("note: rank {rank} {ended} while exiting, after it had written its result and left the "
                         "group; its result is kept.", rank=r, ended=how_it_ended(codes[r])), file=sys.stderr)
            return
        if time.monotonic() > deadline:
            running = [r for r, code in enumerate(codes) if code is None]
            raise TimeoutError(
                tr("the {n_procs} processes did not finish within timeout={timeout} s (still running: ranks "
                   "{running}); they were ended. Fix: pass a larger timeout, or make the work smaller. Their last "
                   "output:{output}", n_procs=len(procs), timeout=timeout, running=running,
                   output=_last_lines(outputs))
            )
        time.sleep(0.02)


def _remove_stale_folders() -> None:
    """Remove the launch folders of processes that no longer exist (a notebook killed with SIGKILL)."""
    import psutil

    for folder in Path(tempfile.gettempdir()).glob(protocol.FOLDER_PREFIX + "*"):
        parent = protocol.parent_of(folder)
        if parent is not None and parent != os.getpid() and not psutil.pid_exists(parent):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def sigterm_ends_the_launch():
    """While workers run, SIGTERM to this process raises ``SystemExit``, so they are ended and the folder
    removed before the process exits (the default action would exit at once, leaving both behind).

    Only where SIGTERM has its default action and in the main thread (the only one that may set handlers).
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def launch(
    fn: Callable[..., Any],
    *args: Any,
    num_processes: int | None = None,
    timeout: float = 300.0,
    threads_per_process: int | None = None,
    cpu: bool = False,
    quiet: bool = False,
    **kwargs: Any,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``num_processes`` real processes; return their values in rank order.

    ``cpu=True`` forms a CPU group even on a GPU machine; ``quiet=True`` keeps the workers' prints to
    error reports instead of relaying them. Raises :class:`RankFailed` when a rank fails,
    ``TimeoutError`` after ``timeout`` seconds, ``ValueError`` for bad arguments.
    """
    import cloudpickle

    n = resolve_num_processes(num_processes)
    _validate(fn, timeout, threads_per_process)
    gpus = 0 if cpu else gpu_count()
    if 0 < gpus < n:
        print(f"this machine has {gpus} GPU(s) for {n} processes: running all {n} on the CPU instead")
        gpus = 0
    threads = threads_per_process or max(1, usable_cores() // n)
    port = free_port()
    _remove_stale_folders()
    with sigterm_ends_the_launch(), tempfile.TemporaryDirectory(prefix=protocol.folder_prefix(os.getpid())) as tmp:
        folder = Path(tmp)
        (folder / protocol.PAYLOAD).write_bytes(_pickled(fn, args, kwargs))
        procs: list[subprocess.Popen] = []
        outputs: list[list[str]] = [[] for _ in range(n)]
        relays = []
        try:
            for rank in range(n):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", WORKER, tmp], env=_environment(rank, n, port, threads, bool(gpus), timeout),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=hasattr(os, "killpg"),
                ))
                relay = threading.Thread(target=_relay, args=(rank, procs[-1].stdout, outputs[rank], quiet), daemon=True)
                relay.start()
                relays.append(relay)
            _wait(procs, folder, outputs, timeout)
        finally:
            _end(procs)
            for relay in relays:
                relay.join(timeout=5)
        missing = [r for r in range(n) if not protocol.result_file(folder, r).is_file()]
        if missing:
            raise RankFailed(missing[0], "ProcessExit", "exited with code 0 without returning a result (os._exit?)",
                             "".join(outputs[missing[0]][-20:]))
        return [cloudpickle.loads(protocol.result_file(folder, r).read_bytes()) for r in range(n)]
