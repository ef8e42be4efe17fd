"""Megatron-LM's tensor-parallel MLP: one block split across ranks (lesson 6.4).

Megatron-LM's MLP (Shoeybi et al., 2019) splits ``Linear(d, h) -> GELU -> Linear(h, d)`` over N ranks:

- the first layer is **column-parallel**: rank r keeps rows ``r*h/N .. (r+1)*h/N`` of its weight (and of its
  bias), so it computes its own h/N of the hidden features, and GELU applies to them with no communication;
- the second is **row-parallel**: rank r keeps the matching h/N *columns* of its weight, so it computes a
  partial sum of the output; the sum over ranks (one all-reduce) is the output, and the bias is added after;
- two autograd functions make the pair: ``f`` (identity forward, all-reduce of the gradient backward) before
  the first layer and ``g`` (all-reduce forward, identity backward) after the second. One all-reduce of
  ``tokens x d`` values per block in forward, one in backward.

The house's reference (what the checkers compare a learner's against and the closing table runs):
:func:`split_mlp`, :class:`CopyToRanks`, :class:`SumFromRanks`, :class:`ParallelMLP`. The run that compares
it with the unsplit block and counts its all-reduces is
:func:`effitrain_helpers.training.tensor_parallel_run.measured_tp_run`.
"""

from __future__ import annotations

import torch

from effitrain_helpers.core.language import tr


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
