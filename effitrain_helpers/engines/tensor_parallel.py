"""How is one MLP block split across ranks, and what does it exchange? (lesson 6.4, tensor parallelism)

Megatron-LM's MLP (Shoeybi et al., 2019) splits ``Linear(d, h) -> GELU -> Linear(h, d)`` over N ranks:

- the first layer is **column-parallel**: rank r keeps rows ``r*h/N .. (r+1)*h/N`` of its weight (and of its
  bias), so it computes its own h/N of the hidden features, and GELU applies to them with no communication;
- the second is **row-parallel**: rank r keeps the matching h/N *columns* of its weight, so it computes a
  partial sum of the output; the sum over ranks (one all-reduce) is the output, and the bias is added after;
- two autograd functions make the pair: ``f`` (identity forward, all-reduce of the gradient backward) before
  the first layer and ``g`` (all-reduce forward, identity backward) after the second. One all-reduce of
  ``tokens x d`` values per block in forward, one in backward.

This module holds the house's reference version (what the checkers compare a learner's against and the
closing table runs): :func:`split_mlp`, :class:`CopyToRanks`, :class:`SumFromRanks`, :class:`ParallelMLP`,
and :func:`measured_tp_run`, which runs a split MLP in each rank of a group and compares it with the unsplit
one, counting the all-reduces (:class:`~effitrain_helpers.measure.communication.CommunicationCounter`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int

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


def split_mlp(mlp: torch.nn.Sequential, rank: int, world: int) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """Rank ``rank`` 's share of ``mlp``: ``(up, down)``, a column-parallel ``Linear(d, h/N)`` (rows of the
    first weight and its bias) and a row-parallel ``Linear(h/N, d, bias=False)`` (columns of the second
    weight; its bias is added once, after the sum). ``h`` must be a multiple of ``world``."""
    first, last = mlp[0], mlp[2]
    if first.out_features % world:
        raise ValueError(tr("hidden={out_features} is not a multiple of world={world}: choose a hidden size that the "
                            "number of ranks divides.", out_features=first.out_features, world=world))
    k = first.out_features // world
    rows = slice(rank * k, (rank + 1) * k)
    up = torch.nn.Linear(first.in_features, k)
    down = torch.nn.Linear(k, last.out_features, bias=False)
    with torch.no_grad():
        up.weight.copy_(first.weight[rows])
        up.bias.copy_(first.bias[rows])
        down.weight.copy_(last.weight[:, rows])
    return up, down


class CopyToRanks(torch.autograd.Function):
    """Megatron's ``f``: the input as it is in forward; in backward, the gradients of all ranks summed (each
    rank's share of the layer contributed part of the input's gradient)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class SumFromRanks(torch.autograd.Function):
    """Megatron's ``g``: the partial sums of all ranks summed in forward; the gradient as it is in backward."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ParallelMLP(torch.nn.Module):
    """This rank's part of a Megatron MLP: ``g(down(gelu(up(f(x))))) + bias``. ``copy`` and ``total`` are the
    two autograd functions (default: the house's :class:`CopyToRanks` and :class:`SumFromRanks`); ``split``
    makes ``(up, down)`` (default :func:`split_mlp`)."""

    def __init__(self, mlp, rank: int, world: int, copy=CopyToRanks, total=SumFromRanks, split=split_mlp):
        super().__init__()
        self.up, self.down = split(mlp, rank, world)
        self.bias = torch.nn.Parameter(mlp[2].bias.detach().clone())  # replicated: added once, after the sum
        self.copy, self.total = copy, total

    def forward(self, x):
        hidden = torch.nn.functional.gelu(self.up(self.copy.apply(x)))
        return self.total.apply(self.down(hidden)) + self.bias


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
