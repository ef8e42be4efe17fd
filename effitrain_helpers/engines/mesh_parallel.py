"""How do FSDP and tensor parallelism share a mesh of devices? (lesson 7.2; lesson 7.3's fake world uses the block)

A 2-D device mesh arranges ``dp x tp`` ranks in a grid: each row of ``tp`` neighbouring ranks splits every layer
between them (tensor parallelism, Megatron's column-then-row pairs, lesson 6.4), and each column of ``dp`` ranks
holding the same share of the layers shards that share again and feeds it different data (FSDP, lesson 5.1).

- :class:`Block` is the transformer block the lessons split: separate ``q``, ``k``, ``v`` and ``out`` projections
  and a 4h MLP (``up``, ``down``), pre-norm. :class:`TinyLM` stacks a few of them between an embedding and a head.
- :func:`block_plan` is the block's tensor-parallel plan (what lesson 7.2's exercise has the learner write):
  ``q``, ``k``, ``v`` and ``up`` column-wise (each rank computes its own heads, its own hidden features, with no
  communication), ``out`` and ``down`` row-wise (each rank multiplies the features it already holds and one
  all-reduce sums the partial outputs). Two all-reduces forward per block, and one per column-wise layer's input
  gradient backward.
- :func:`make_mesh` builds the ``(dp, tp)`` mesh with ``tp`` the inner dimension, so a tensor-parallel group is
  ``tp`` consecutive ranks (one node's fast links on a cluster).
- :func:`layer_splits` reads how a module's linear layers came out: column-wise (weight ``Shard(0)`` on the
  tensor-parallel dimension), row-wise (``Shard(1)``) or whole.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A pre-norm transformer block of separate ``q``, ``k``, ``v`` and ``out`` projections and a 4h MLP
    (``up``, ``down``). Split by tensor parallelism, each rank's ``q``, ``k``, ``v`` give it ``heads / tp``
    whole heads (the head width stays), so attention runs on local tensors unchanged."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim, self.norm1, self.norm2 = hidden // heads, nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.q, self.k, self.v, self.out = (nn.Linear(hidden, hidden) for _ in range(4))
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        b, s, _ = y.shape
        q, k, v = (f(y).view(b, s, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)
        x = x + self.out(attended)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    """An embedding, ``layers`` :class:`Block` s, a final norm and a head over ``vocab`` tokens."""

    def __init__(self, vocab: int, hidden: int, heads: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class LessonPlan(dict):
    """:func:`block_plan`'s result: a plain dict to ``parallelize_module``, one lesson 7.2's check can tell from a
    plan the learner wrote (exercise 1 is writing it)."""


def block_plan() -> LessonPlan:
    """The :class:`Block`'s tensor-parallel plan for ``parallelize_module``: column-wise into each half, row-wise
    out of it."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return LessonPlan(q=ColwiseParallel(), k=ColwiseParallel(), v=ColwiseParallel(), out=RowwiseParallel(),
                      up=ColwiseParallel(), down=RowwiseParallel())


def make_mesh(dp: int, tp: int):
    """A ``(dp, tp)`` CPU mesh named ``("dp", "tp")``: ``tp`` consecutive ranks share each layer."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def layer_splits(module: nn.Module) -> dict[str, str]:
    """``{name: "column" | "row" | "whole"}`` for each ``nn.Linear`` in ``module``, from its weight's placement
    on the tensor-parallel dimension (the mesh's last: ``fully_shard`` adds its own in front): ``Shard(0)``, output
    features split, column-wise; ``Shard(1)``, input features split, row-wise; anything else (not a DTensor,
    replicated): whole."""
    from torch.distributed.tensor import DTensor, Shard

    splits = {}
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Linear):
            w = layer.weight
            placement = w.placements[-1] if isinstance(w, DTensor) else None
            splits[name] = "column" if placement == Shard(0) else "row" if placement == Shard(1) else "whole"
    return splits
