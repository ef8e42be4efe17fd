"""Does the split MLP compute what the whole one does, and what does it send? (lesson 6.4, tensor parallelism)

:func:`measured_tp_run` runs a Megatron-split MLP (:mod:`effitrain_helpers.engines.tensor_parallel`, or the
learner's pieces) in each rank of a group beside the unsplit one, on the same tokens, and counts its
all-reduces (:class:`~effitrain_helpers.measure.communication.CommunicationCounter`); :func:`mlp_block` and
:func:`tokens` are the lesson's block and data, :func:`theory_bytes_per_token` what it should send.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.engines.tensor_parallel import CopyToRanks, ParallelMLP, SumFromRanks, split_mlp

FLOAT32_BYTES = 4


def mlp_block(width: int = 64, hidden: int = 256, seed: int = 0) -> torch.nn.Sequential:
    """The unsplit block, ``Linear(width, hidden) -> GELU -> Linear(hidden, width)``; weights from ``seed``."""
    positive_int("width", width, example="width=64")
    positive_int("hidden", hidden, example="hidden=256")
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))


def tokens(n: int = 64, width: int = 64, seed: int = 1) -> torch.Tensor:
    """``n`` fixed token vectors of ``width`` values (the same on every rank: tensor parallelism splits the
    layer, not the data)."""
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed))


def theory_bytes_per_token(width: int, blocks: int = 1) -> dict[str, int]:
    """Payload bytes of all-reduce per token per training step (float32): ``width`` values in forward and
    ``width`` in backward for each block (a ring all-reduce then makes each rank send ``2(N-1)/N`` of it)."""
    return {"forward": blocks * width * FLOAT32_BYTES, "backward": blocks * width * FLOAT32_BYTES}


def measured_tp_run(copy=CopyToRanks, total=SumFromRanks, split=split_mlp, width: int = 64, hidden: int = 256,
                    n_tokens: int = 64, repeats: int = 5) -> dict[str, Any]:
    """In each rank of a group: the unsplit block and this rank's :class:`ParallelMLP` (built with ``copy``,
    ``total`` and ``split``) on the same tokens; one forward and backward of each (loss: the sum of the
    outputs' squares), the all-reduces counted separately in forward and backward, then ``repeats`` timed
    steps of both.

    Returns ``rank``, ``world``; ``output``, ``input_grad``, ``up_grad`` (weight), ``down_grad`` (weight) of
    the split version and ``full_*`` of the unsplit one, sliced to this rank's share; ``payload``
    (``{"forward": bytes, "backward": bytes}`` of all-reduce) and ``calls``; ``seconds`` and
    ``full_seconds`` (median seconds per step), ``tokens``.
    """
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    mlp = mlp_block(width, hidden)
    parallel = ParallelMLP(mlp, rank, world, copy, total, split)
    x = tokens(n_tokens, width)

    full_x = x.clone().requires_grad_()
    full_out = mlp(full_x)
    full_out.pow(2).sum().backward()

    mine = x.clone().requires_grad_()
    counter = CommunicationCounter().watch()
    try:
        out = parallel(mine)
        forward = counter.summary()
        out.pow(2).sum().backward()
        both = counter.summary()
    finally:
        counter.stop()
    k = hidden // world
    rows = slice(rank * k, (rank + 1) * k)

    def grad(p):
        return None if p.grad is None else p.grad.detach().clone()

    result = {"rank": rank, "world": world, "tokens": n_tokens, "output": out.detach(),
              "full_output": full_out.detach(), "input_grad": grad(mine), "full_input_grad": grad(full_x),
              "up_grad": grad(parallel.up.weight), "full_up_grad": mlp[0].weight.grad[rows].clone(),
              "down_grad": grad(parallel.down.weight), "full_down_grad": mlp[2].weight.grad[:, rows].clone(),
              "payload": {"forward": forward.bytes, "backward": both.bytes - forward.bytes},
              "calls": {"forward": forward.calls, "backward": both.calls - forward.calls}}
    result["seconds"] = _median_step(parallel, x, repeats, sync=True)
    result["full_seconds"] = _median_step(mlp, x, repeats, sync=False)
    return result


def _median_step(module, x, repeats: int, sync: bool) -> float:
    """Median seconds of one forward and backward of ``module`` on ``x`` (ranks start each repeat together)."""
    import statistics

    import torch.distributed as dist

    times = []
    for _ in range(repeats):
        if sync:
            dist.barrier()
        start = time.perf_counter()
        module(x.clone().requires_grad_()).pow(2).sum().backward()
        times.append(time.perf_counter() - start)
    module.zero_grad()
    return statistics.median(times)
