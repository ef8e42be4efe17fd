"""What does sequence parallelism change in a tensor-parallel block? (lesson 8.3)

Megatron-LM's tensor parallelism (lesson 6.4) splits the MLP's weights, but every rank still runs the layer norm
and the dropouts on the *whole* sequence: their activations are replicated N times. Sequence parallelism
(Korthikanti et al. 2022) splits those regions along the sequence instead: rank r keeps tokens
``r*s/N .. (r+1)*s/N`` there. The MLP needs every token, so the block's two communications change:

- before the column-parallel layer, an **all-gather** of the sequence (tensor parallelism's ``f`` was the
  identity); its backward is a **reduce-scatter** of the gradient;
- after the row-parallel layer, a **reduce-scatter** (sum the partial outputs and keep this rank's tokens) in
  place of ``g``'s all-reduce; its backward is an all-gather.

An all-reduce is a reduce-scatter followed by an all-gather, so the bytes on the wire are the same; what changes
is the memory: the norm's input and the dropout masks are 1/N per rank.

- :class:`GatherSequence`, :class:`ScatterSequence`: the two autograd functions;
- :class:`Block`: ``LayerNorm -> Dropout -> MLP -> Dropout`` plus the residual, run three ways: whole
  (one process), ``"tp"`` (lesson 6.4's split MLP, norm and dropouts replicated) and ``"sp"`` (the same with the
  sequence split outside the MLP).
"""

from __future__ import annotations

import copy

import torch

from effitrain_helpers.core.language import tr
from effitrain_helpers.engines.tensor_parallel import CopyToRanks, SumFromRanks, split_mlp

MODES = ("whole", "tp", "sp")


class GatherSequence(torch.autograd.Function):
    """Forward: every rank's ``(tokens/N, d)`` gathered into ``(tokens, d)``, in rank order. Backward: the
    gradient reduce-scattered (summed over ranks, each keeping its own tokens' rows)."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        world = dist.get_world_size()
        whole = x.new_empty((x.shape[0] * world, *x.shape[1:]))
        dist.all_gather_single(whole, x.contiguous())
        return whole

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        mine = grad.new_empty((grad.shape[0] // dist.get_world_size(), *grad.shape[1:]))
        dist.reduce_scatter_single(mine, grad.contiguous())
        return mine


class ScatterSequence(torch.autograd.Function):
    """Forward: the partial sums ``(tokens, d)`` of all ranks summed, each rank keeping its ``tokens/N`` rows
    (reduce-scatter). Backward: the gradient of those rows all-gathered."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        mine = x.new_empty((x.shape[0] // dist.get_world_size(), *x.shape[1:]))
        dist.reduce_scatter_single(mine, x.contiguous())
        return mine

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        whole = grad.new_empty((grad.shape[0] * dist.get_world_size(), *grad.shape[1:]))
        dist.all_gather_single(whole, grad.contiguous())
        return whole


class Block(torch.nn.Module):
    """``x + Dropout(mlp(Dropout(LayerNorm(x))))`` on ``(tokens, width)`` rows, ``mlp`` a
    ``Linear(width, hidden) -> GELU -> Linear(hidden, width)``, one of three ways (``mode``):

    - ``"whole"``: the block in one process;
    - ``"tp"``: rank ``rank``'s share of the MLP (lesson 6.4: ``f``, column- and row-parallel layers, ``g``);
      the norm and the dropouts run on every token on every rank;
    - ``"sp"``: the same shares, but the input is this rank's ``tokens/N`` rows: norm, dropouts and residual
      on them, :class:`GatherSequence` before the MLP and :class:`ScatterSequence` after it.

    Give every mode and rank the same ``mlp`` (its weights are copied or sliced, never changed)."""

    def __init__(self, mlp: torch.nn.Sequential, dropout: float = 0.1, mode: str = "whole", rank: int = 0,
                 world: int = 1):
        super().__init__()
        if mode not in MODES:
            raise ValueError(tr("mode={mode!r} is not one of {modes}.", mode=mode, modes=", ".join(MODES)))
        self.mode = mode
        self.norm = torch.nn.LayerNorm(mlp[0].in_features)
        self.drop_in, self.drop_out = torch.nn.Dropout(dropout), torch.nn.Dropout(dropout)
        if mode == "whole":
            self.mlp = copy.deepcopy(mlp)
        else:
            self.up, self.down = split_mlp(mlp, rank, world)
            self.bias = torch.nn.Parameter(mlp[2].bias.detach().clone())

    def forward(self, x):
        h = self.drop_in(self.norm(x))
        if self.mode == "whole":
            h = self.mlp(h)
        else:
            enter, leave = (CopyToRanks, SumFromRanks) if self.mode == "tp" else (GatherSequence, ScatterSequence)
            h = leave.apply(self.down(torch.nn.functional.gelu(self.up(enter.apply(h))))) + self.bias
        return x + self.drop_out(h)
