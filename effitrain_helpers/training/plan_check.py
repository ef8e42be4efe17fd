"""Does the planner's arithmetic match real tensors? (lesson 7.3, ``tests/test_plan_check.py``)

Two checks of :mod:`effitrain_helpers.measure.planner`, each against torch's own machinery:

- :func:`fake_world` builds, for a DP x TP x PP layout of 64 or more ranks, each rank's share of a small
  transformer on a *fake* process group (``torch.distributed``'s ``fake`` backend with a ``FakeStore``, as
  torchtitan checks memory before a run: collectives return at once, no process is started): tensor parallelism
  with ``parallelize_module`` (``ColwiseParallel`` for the query, key, value and first MLP layer, ``RowwiseParallel``
  for the output projections, vocabulary-parallel embedding and head), the rank's pipeline stage only (its layers,
  the embedding on the first stage and the head on the last) and, for ZeRO-3, ``fully_shard`` over the
  data-parallel dimension. One forward, backward and AdamW step later it counts each rank's local parameter,
  gradient and optimizer-state bytes, and the planner's prediction for that rank (float32 Adam: 4 + 4 + 8 bytes
  per parameter) beside them. The difference is what the planner leaves out: norms and biases that tensor
  parallelism replicates, shards padded to equal sizes, AdamW's step counters.
- :func:`activation_run` runs in each of 2 real gloo processes the Megatron block the formulas describe
  (:class:`MegatronBlock`: layer norms, attention with softmax and dropout, a 4h MLP with GELU, dropouts, in
  bfloat16), alone (TP 1) and split over the 2 ranks (TP 2, lesson 6.4's ``CopyToRanks`` / ``SumFromRanks``,
  no sequence parallelism), with no, selective and full recomputation, and counts the bytes autograd saves
  (:class:`~effitrain_helpers.measure.saved_memory.SavedTensors`) against Korthikanti et al.'s formula.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.engines.mesh_parallel import Block, block_plan
from effitrain_helpers.engines.tensor_parallel import CopyToRanks, SumFromRanks
from effitrain_helpers.measure.memory_estimate import layer_activation_bytes
from effitrain_helpers.measure.planner import PART_TERMS, Layout, Model, parameters_per_rank
from effitrain_helpers.measure.saved_memory import SavedTensors
from effitrain_helpers.processes.group import forget_meshes

FAKE_SHAPE = {"layers": 8, "hidden": 256, "heads": 8, "seq": 32, "vocab": 1024}  # the fake world's model
ADAM_FP32 = {"parameters": 4, "gradients": 4, "optimizer state": 8}  # bytes per parameter, float32 AdamW
DROPOUT = 0.1
TERMS = PART_TERMS + (msg("rank"), msg("stage"), msg("part"), msg("measured bytes"), msg("predicted bytes"),
                      msg("recompute"), msg("measured"), msg("formula"), msg("measured / formula"))  # table labels


class Stage(nn.Module):
    """One pipeline stage of the fake world's model: the embedding on the first, ``blocks`` layers, the final
    norm and the head on the last."""

    def __init__(self, shape: dict, blocks: int, first: bool, last: bool):
        super().__init__()
        h = shape["hidden"]
        self.embed = nn.Embedding(shape["vocab"], h) if first else None
        self.blocks = nn.ModuleList(Block(h, shape["heads"]) for _ in range(blocks))
        self.norm = nn.LayerNorm(h) if last else None
        self.head = nn.Linear(h, shape["vocab"], bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x) if self.embed is not None else x
        for block in self.blocks:
            x = block(x)
        if self.head is None:
            return x
        # the vocabulary-parallel head hands back a view of the gathered logits; FSDP warns when the module it
        # wraps returns a view (an in-place edit of it would skip a hook): return a tensor of its own
        return self.head(self.norm(x)).clone()


def whole_model_parameters(shape: dict) -> int:
    """The fake world's model's parameters in all (one stage holding everything, built on the meta device)."""
    with torch.device("meta"):
        return sum(p.numel() for p in Stage(shape, shape["layers"], True, True).parameters())


def _local_bytes(tensors) -> int:
    """Bytes of this rank's part of ``tensors`` (a DTensor's local shard)."""
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() * t.element_size() for t in tensors)


def _tensor_parallel(stage: Stage, tp_mesh) -> None:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {f"blocks.{i}.{name}": style for i in range(len(stage.blocks)) for name, style in block_plan().items()}
    if stage.embed is not None:
        plan["embed"] = RowwiseParallel(input_layouts=Replicate())
    if stage.head is not None:
        plan["head"] = ColwiseParallel(output_layouts=Replicate())
    parallelize_module(stage, tp_mesh, plan)  # each rank's q, k, v then give its heads: head_dim stays

def rank_bytes(layout: Layout, rank: int, shape: dict = FAKE_SHAPE, step: bool = True) -> dict:
    """On a fake process group of ``layout``'s ``dp·tp·pp`` ranks, as rank ``rank``: build its share (see the
    module docstring) and, with ``step``, run one forward, backward and AdamW step; return its ``stage``, its
    measured ``bytes`` by part (parameters only without ``step``) and the planner's ``predicted`` bytes for that
    rank. ZeRO 0 (every data-parallel rank whole) or 3 (``fully_shard``); CP 1."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if layout.zero not in (0, 3) or layout.cp != 1:
        raise ValueError(tr("the fake world builds ZeRO 0 or 3 with CP 1; got {name}. Fix: zero=0 or 3, cp=1.",
                            name=layout.name()))
    world = layout.dp * layout.tp * layout.pp
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (layout.pp, layout.dp, layout.tp), mesh_dim_names=("pp", "dp", "tp"))
        stage_index = mesh["pp"].get_local_rank()
        torch.manual_seed(0)
        with torch.device("cpu" if step else "meta"):  # shapes without storage: a share built in no time
            stage = Stage(shape, shape["layers"] // layout.pp, stage_index == 0, stage_index == layout.pp - 1)
        if layout.tp > 1:
            _tensor_parallel(stage, mesh["tp"])
        if layout.zero == 3:
            for block in stage.blocks:
                fully_shard(block, mesh=mesh["dp"])
            fully_shard(stage, mesh=mesh["dp"])
        params = list(stage.parameters())
        measured = {"parameters": _local_bytes(params)}
        if step:
            optimizer = torch.optim.AdamW(params, lr=1e-3)
            x = (torch.randint(shape["vocab"], (1, shape["seq"])) if stage.embed is not None
                 else torch.randn(1, shape["seq"], shape["hidden"], requires_grad=True))
            stage(x).float().pow(2).mean().backward()
            optimizer.step()
            state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
            measured.update({"gradients": _local_bytes(p.grad for p in params),
                             "optimizer state": _local_bytes(state)})
    finally:
        dist.destroy_process_group()
        forget_meshes()
    model = Model(whole_model_parameters(shape), **shape)
    count = parameters_per_rank(model, layout, stage_index) / (layout.dp if layout.zero == 3 else 1)
    return {"rank": rank, "stage": stage_index, "bytes": measured,
            "predicted": {part: count * ADAM_FP32[part] for part in measured}}


def stepped_ranks(layout: Layout) -> list[int]:
    """The first rank (first stage, first data-parallel and tensor-parallel shard) and the last (last stage, last
    shards: FSDP's short one when a dimension does not divide)."""
    return sorted({0, layout.dp * layout.tp * layout.pp - 1})


def fake_world(layout: Layout, shape: dict = FAKE_SHAPE) -> list[dict]:
    """:func:`rank_bytes` for every rank of ``layout``, one after another in this process (no process is
    started): each rank's parameters, and a whole step (gradients, optimizer state) on :func:`stepped_ranks`
    (a step re-plans DTensor's sharding for the new world: about a second a rank, too long for 64)."""
    stepped = set(stepped_ranks(layout))
    return [rank_bytes(layout, r, shape, step=r in stepped) for r in range(layout.dp * layout.tp * layout.pp)]


def relative_errors(results: list[dict]) -> dict[str, float]:
    """The largest ``|measured - predicted| / predicted`` over the ranks that measured each part."""
    return {part: max(abs(r["bytes"][part] - r["predicted"][part]) / r["predicted"][part] for r in results
                      if part in r["bytes"]) for part in ADAM_FP32}


def dropout(x: torch.Tensor) -> torch.Tensor:
    """Dropout that keeps a 1-byte mask for backward, as the fused GPU kernel does and the formula counts
    (``torch.native_dropout``; ``F.dropout`` on a CPU keeps its mask in the activations' 16 bits instead)."""
    return torch.native_dropout(x, DROPOUT, True)[0]


class MegatronBlock(nn.Module):
    """The block Korthikanti et al. count (their figure 2), in ``tp`` shares: layer norm, q/k/v (its ``h/tp``
    features), scores, softmax, dropout, values, output projection, dropout, residual; layer norm, ``h → 4h/tp``,
    GELU, ``4h/tp → h``, dropout, residual. With ``tp > 1`` lesson 6.4's ``CopyToRanks`` opens and
    ``SumFromRanks`` closes each half (Megatron's f and g). ``recompute``: none, selective (the scores, softmax,
    dropout and values product run again in backward) or full (the whole block)."""

    def __init__(self, hidden: int, heads: int, tp: int = 1, recompute: str = "none"):
        super().__init__()
        self.tp, self.recompute = tp, recompute
        self.heads, self.head_dim = heads // tp, hidden // heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden // tp)
        self.out = nn.Linear(hidden // tp, hidden, bias=tp == 1)
        self.up, self.down = nn.Linear(hidden, 4 * hidden // tp), nn.Linear(4 * hidden // tp, hidden, bias=tp == 1)

    def _enter(self, x):
        return CopyToRanks.apply(x) if self.tp > 1 else x

    def _leave(self, x):
        return SumFromRanks.apply(x) if self.tp > 1 else x

    def _core(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        return dropout(torch.softmax(scores, dim=-1)) @ v

    def _block(self, x):
        b, s, _ = x.shape
        q, k, v = self._qkv(x)
        core = (checkpoint(self._core, q, k, v, use_reentrant=True) if self.recompute == "selective"
                else self._core(q, k, v))
        x = x + dropout(self._leave(self.out(core.transpose(1, 2).reshape(b, s, -1))))
        hidden = F.gelu(self.up(self._enter(self.norm2(x))))
        return x + dropout(self._leave(self.down(hidden)))

    def _qkv(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self._enter(self.norm1(x)))
        return [t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in qkv.chunk(3, dim=-1)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full":
            return checkpoint(self._block, x, use_reentrant=True)
        return self._block(x)


def saved_activation_bytes(hidden: int, heads: int, seq: int, micro_batch: int, tp: int = 1,
                           recompute: str = "none") -> int:
    """Bytes autograd keeps for backward in one :class:`MegatronBlock` (bfloat16, dropout on), weights aside."""
    torch.manual_seed(0)
    block = MegatronBlock(hidden, heads, tp, recompute).to(torch.bfloat16).train()
    x = torch.randn(micro_batch, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
    with SavedTensors(block.parameters()) as counter:
        y = block(x)
    y.float().sum().backward()
    return counter.activation_bytes


def activation_run(hidden: int = 256, heads: int = 8, seq: int = 128, micro_batch: int = 2) -> dict:
    """In each rank of a 2-process group: :func:`saved_activation_bytes` at TP 1 and TP 2 (the group's two ranks),
    each recomputation, with Korthikanti's formula for each (``layer_activation_bytes``, sequence parallelism
    off, as this block has none)."""
    import torch.distributed as dist

    rows = []
    for tp in (1, dist.get_world_size()):
        for recompute in ("none", "selective", "full"):
            rows.append({"tp": tp, "recompute": recompute,
                         "measured": saved_activation_bytes(hidden, heads, seq, micro_batch, tp, recompute),
                         "formula": layer_activation_bytes(hidden, heads, seq, micro_batch, tp, 1, recompute,
                                                           sequence_parallel=False)})
    return {"rank": dist.get_rank(), "rows": rows}
