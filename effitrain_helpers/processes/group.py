"""Is this process one rank of a process group on CPUs? One answer for every lesson run.

Accelerate forms a CPU (gloo) group only when asked: ``Accelerator(cpu=True)`` or ``ACCELERATE_USE_CPU=1``
(``accelerate.state.AcceleratorState`` reads that variable). Without it, N processes on a machine with no
CUDA each train alone. :func:`~effitrain_helpers.processes.launch.launch` sets the variable for every CPU
worker; ``torchrun`` does not, so a rank it starts on a CPU machine is recognised by ``WORLD_SIZE > 1``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from effitrain_helpers.core.language import tr

CPU_GROUP_VARIABLE = "ACCELERATE_USE_CPU"  # what launch sets and Accelerate reads


def cpu_group_requested() -> bool:
    """True when Accelerate should form a CPU group here (pass it as ``Accelerator(cpu=...)``).

    Either the launcher said so (``ACCELERATE_USE_CPU``, parsed as Accelerate parses it: ``launch`` and
    ``accelerate launch --cpu`` set it), or this is a multi-process run (``WORLD_SIZE > 1``, e.g. ``torchrun``)
    on a machine without CUDA.
    """
    import torch
    from accelerate.utils import parse_flag_from_env

    if parse_flag_from_env(CPU_GROUP_VARIABLE):
        return True
    return not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1


def forget_meshes() -> None:
    """DTensor caches its redistribution and sharding plans by mesh, and a mesh equals the previous world's
    mesh of the same shape while naming that world's (destroyed) groups: forget them before the next world
    (lessons 7.1 and 7.3 build one fake world after another in one process)."""
    from torch.distributed.tensor import _redistribute
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _redistribute._gen_transform_infos.cache_clear()
    _clear_sharding_prop_cache()  # the Python and the C++ fast path's caches


@contextmanager
def fake_group(world: int, rank: int = 0):
    """This process as ``rank`` of a *fake* process group of ``world`` ranks (``torch.distributed``'s ``fake``
    backend with a ``FakeStore``, as torchtitan does): collectives return at once and send nothing, so a
    sharded model runs its real code paths (dtypes, shapes, which collectives) with no other process. Destroyed,
    and its meshes forgotten, on leaving. Refuses to start while a process group exists already."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError(tr("a process group exists in this process already ({backend}); a fake world needs "
                              "none. Fix: restart the kernel, or call torch.distributed.destroy_process_group().",
                              backend=dist.get_backend()))
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()
        forget_meshes()
