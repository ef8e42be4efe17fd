"""Is this process one rank of a process group on CPUs? One answer for every lesson run.

Accelerate forms a CPU (gloo) group only when asked: ``Accelerator(cpu=True)`` or ``ACCELERATE_USE_CPU=1``
(``accelerate.state.AcceleratorState`` reads that variable). Without it, N processes on a machine with no
CUDA each train alone. :func:`~effitrain_helpers.processes.launch.launch` sets the variable for every CPU
worker; ``torchrun`` does not, so a rank it starts on a CPU machine is recognised by ``WORLD_SIZE > 1``.
"""

from __future__ import annotations

import os

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
