"""One worker process of ``launch`` (run as ``python -m effitrain_helpers.processes.launch_worker FOLDER``).

Sets its thread count, joins the process group, checks it really is rank ``RANK`` of ``WORLD_SIZE``, runs
the function from the folder's payload, writes its result file, leaves the group and says so (the "left"
file); or writes its error file with the exception's type, message and traceback (then exits with 1). Either
way it ends every process below it, those ``fn`` started in a session of their own included (it is their
reaper: ``ending.become_reaper``, Linux), and exits without the interpreter's teardown. A crash in C++ (a signal) prints every thread's Python stack
first, which the launcher shows. The names of the folder's files and of the variables are in ``protocol``.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

from effitrain_helpers.core.language import tr
from effitrain_helpers.processes import protocol
from effitrain_helpers.processes.ending import become_reaper, end_descendants, exit_without_teardown


def _watch_parent() -> None:
    """End this worker, and what it started, if the process that launched it (the notebook kernel) dies."""
    parent = int(os.environ.get(protocol.PARENT_ENV, "0"))

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                end_descendants(timeout=2.0)  # what it started, in its group or in a session of its own
                if hasattr(os, "killpg") and os.getpgrp() == os.getpid():
                    os.killpg(os.getpid(), signal.SIGKILL)  # this worker and what it started (its own group)
                os._exit(3)

    if parent:
        threading.Thread(target=watch, daemon=True).start()


def _join_group(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    backend = os.environ.get(protocol.BACKEND_ENV, "gloo")
    timeout = timedelta(seconds=float(os.environ.get(protocol.TIMEOUT_ENV, "300")))
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, device_id=device)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
    seen = [None] * world
    dist.all_gather_object(seen, rank)
    if seen != list(range(world)) or dist.get_world_size() != world:
        raise RuntimeError(f"process group is broken: expected ranks 0..{world - 1}, the group reports {seen}")


def _check_accelerate(world: int) -> None:
    """If ``fn`` created an Accelerator, it must have seen the whole group (not N lone processes)."""
    if "accelerate" not in sys.modules:
        return
    from accelerate.state import PartialState

    if PartialState._shared_state and PartialState().num_processes != world:
        raise RuntimeError(
            tr("Accelerate saw {num_processes} process(es) instead of {world}: it fell back to single-process mode "
               "(on a CPU machine it needs ACCELERATE_USE_CPU=1 or Accelerator(cpu=True)).",
               num_processes=PartialState().num_processes, world=world)
        )


def main(folder: str) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = Path(folder)
    faulthandler.enable(all_threads=True)  # SIGSEGV, SIGABRT ...: where each thread was, on stderr
    _watch_parent()
    try:
        import cloudpickle
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        fn, args, kwargs = cloudpickle.loads((out / protocol.PAYLOAD).read_bytes())
        _join_group(rank, world)
        value = fn(*args, **kwargs)
        _check_accelerate(world)
        protocol.result_file(out, rank).write_bytes(cloudpickle.dumps(value))
        import torch.distributed as dist

        dist.barrier()  # nobody leaves while a peer may still need the group
        dist.destroy_process_group()
        protocol.left_file(out, rank).touch()
        return 0
    except BaseException as err:  # report everything, including KeyboardInterrupt and SystemExit
        report = {"rank": rank, "type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc()}
        protocol.error_file(out, rank).write_bytes(pickle.dumps(report))
        return 1


if __name__ == "__main__":
    become_reaper()  # a process fn starts in a session of its own stays below this worker ...
    code = main(sys.argv[1])
    end_descendants()  # ... and ends with it, as everything else fn started
    exit_without_teardown(code)
