"""Run a function in N real processes from a notebook, and get each rank's return value back.

``launch(fn, *args, num_processes=N)`` is what every multi-process lesson uses:

- ``fn`` may be defined in the notebook itself: it travels to the workers by value (cloudpickle);
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
- when a rank raises, :class:`RankFailed` carries its exception type, message and traceback, the other ranks
  are ended, and no process is left behind.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

MAX_PROCESSES = 64
WORKER = "effitrain_helpers.processes.launch_worker"


class RankFailed(RuntimeError):
    """A rank raised: ``rank``, ``exc_type`` (its exception's class name) and ``remote_traceback``."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str):
        super().__init__(f"rank {rank} raised {exc_type}: {message}\n\n--- traceback of rank {rank} ---\n{remote_traceback}")
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


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _validate(fn, num_processes, timeout, threads_per_process) -> None:
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable; pass the function itself, e.g. launch(train, num_processes=2).")
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or not 1 <= num_processes <= MAX_PROCESSES:
        raise ValueError(
            f"num_processes={num_processes!r} is not allowed; use a whole number from 1 to {MAX_PROCESSES} "
            f"(default: every GPU, or 2 on a CPU). Fix: e.g. num_processes=2."
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds, e.g. timeout=120.")
    if threads_per_process is not None and (
        isinstance(threads_per_process, bool) or not isinstance(threads_per_process, int) or threads_per_process < 1
    ):
        raise ValueError(f"threads_per_process={threads_per_process!r} must be a whole number >= 1, or None (cores / N).")


def _environment(rank: int, n: int, port: int, threads: int, use_gpu: bool, timeout: float) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("ACCELERATE_USE_CPU", "CUDA_VISIBLE_DEVICES") if not use_gpu else ("ACCELERATE_USE_CPU",):
        env.pop(var, None)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
        "EFFITRAIN_BACKEND": "nccl" if use_gpu else "gloo", "EFFITRAIN_TIMEOUT": str(timeout),
        "PYTHONUNBUFFERED": "1", "EFFITRAIN_PARENT_PID": str(os.getpid()),
    })
    if sys.platform.startswith("linux") or sys.platform == "darwin":
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
    """Stop a worker and what it started (its process group on POSIX; the process itself on Windows)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL if hard else signal.SIGTERM)
        elif hard:
            proc.kill()
        else:
            proc.terminate()
    except (ProcessLookupError, PermissionError):
        pass


def _end(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """Terminate every worker still running, then kill what is left after ``grace`` seconds."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal(p, hard=False)
    deadline = time.monotonic() + grace
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(p, hard=True)
            p.wait()


def _last_lines(outputs: list[list[str]], n: int = 5) -> str:
    return "".join(f"\n  rank {r}: " + ("".join(lines[-n:]).rstrip() or "(no output)").replace("\n", "\n    ")
                   for r, lines in enumerate(outputs))


def _failure(folder: Path, procs: list[subprocess.Popen], outputs: list[list[str]]) -> RankFailed:
    """The error of the first rank that failed (by its error file, else by its exit code)."""
    reports = sorted(folder.glob("rank*.error.pkl"), key=lambda p: p.stat().st_mtime)
    if reports:
        report = pickle.loads(reports[0].read_bytes())
        return RankFailed(report["rank"], report["type"], report["message"], report["traceback"])
    rank = next(i for i, p in enumerate(procs) if p.poll() not in (None, 0))
    tail = "".join(outputs[rank][-20:])
    return RankFailed(rank, "ProcessExit", f"exited with code {procs[rank].returncode} before reporting", tail)


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
    error reports instead of relaying them. Raises :class:`RankFailed` when a rank raises,
    ``TimeoutError`` after ``timeout`` seconds, ``ValueError`` for bad arguments.
    """
    import cloudpickle

    n = default_num_processes() if num_processes is None else num_processes
    _validate(fn, n, timeout, threads_per_process)
    gpus = 0 if cpu else gpu_count()
    if 0 < gpus < n:
        print(f"this machine has {gpus} GPU(s) for {n} processes: running all {n} on the CPU instead")
        gpus = 0
    threads = threads_per_process or max(1, usable_cores() // n)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="effitrain-launch-") as tmp:
        folder = Path(tmp)
        (folder / "payload.pkl").write_bytes(cloudpickle.dumps((fn, args, kwargs)))
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
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if any(p.poll() not in (None, 0) for p in procs):
                    raise _failure(folder, procs, outputs)
                if time.monotonic() > deadline:
                    running = [r for r, p in enumerate(procs) if p.poll() is None]
                    raise TimeoutError(
                        f"the {n} processes did not finish within timeout={timeout} s (still running: ranks "
                        f"{running}); they were ended. Fix: pass a larger timeout, or make the work smaller. "
                        f"Their last output:{_last_lines(outputs)}"
                    )
                time.sleep(0.02)
            if any(p.returncode != 0 for p in procs):
                raise _failure(folder, procs, outputs)
        finally:
            _end(procs)
            for relay in relays:
                relay.join(timeout=5)
        missing = [r for r in range(n) if not (folder / f"rank{r}.result.pkl").is_file()]
        if missing:
            raise RankFailed(missing[0], "ProcessExit", "exited with code 0 without returning a result (os._exit?)",
                             "".join(outputs[missing[0]][-20:]))
        return [cloudpickle.loads((folder / f"rank{r}.result.pkl").read_bytes()) for r in range(n)]
