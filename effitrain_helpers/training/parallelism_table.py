"""What does each way of splitting training hold, send and cost here? (lesson 6.4, chapter 6's closing table)

One model (:func:`~effitrain_helpers.training.pipeline.pipeline_model`: residual MLP blocks), one batch,
AdamW, in the same N processes, trained six ways, each with torch's own tool where torch has one:

- **DP**: ``DistributedDataParallel``; each rank a 1/N share of the batch;
- **ZeRO-1**: DDP with ``torch.distributed.optim.ZeroRedundancyOptimizer`` around AdamW;
- **FSDP, reshard_after_forward=False**: ``fully_shard(..., reshard_after_forward=False)`` per block (gathered
  once per step; "ZeRO-2-like": sharded between steps, every block whole from its forward to its backward);
- **ZeRO-3**: ``fully_shard(...)`` per block (gathered in forward and again in backward);
- **TP**: every block split Megatron-style (:mod:`~effitrain_helpers.engines.tensor_parallel`), each rank
  the whole batch;
- **PP**: one stage per rank, 1F1B over ``m`` micro-batches (:mod:`~effitrain_helpers.training.pipeline`).

Measured in each rank: bytes held (parameters, gradients, optimizer state: local shards only), the payload
of every collective per step (:class:`~effitrain_helpers.measure.communication.CommunicationCounter`) or the
bytes sent point to point (PP), and the median seconds per step. :func:`theory` gives what each should hold
and exchange from the model's size alone.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

KEPT_GATHERED = "FSDP, reshard_after_forward=False"  # "ZeRO-2-like", not ZeRO-2: blocks whole during the step
STRATEGIES = ("DP", "ZeRO-1", KEPT_GATHERED, "ZeRO-3", "TP", "PP")
SHAPE = {"width": 128, "hidden": 512, "blocks_per_stage": 2}


def _batch(rows: int, width: int):
    g = torch.Generator().manual_seed(3)
    return torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)


def _tensor_parallel(model, rank: int, world: int):
    """``model`` (stages of residual blocks) with every block's MLP replaced by this rank's ParallelMLP."""
    from effitrain_helpers.engines.tensor_parallel import ParallelMLP

    class ParallelResidual(torch.nn.Module):
        def __init__(self, block):
            super().__init__()
            mlp = torch.nn.Sequential(block.up, torch.nn.GELU(), block.down)
            self.mlp = ParallelMLP(mlp, rank, world)

        def forward(self, x):
            return x + self.mlp(x)

    return torch.nn.Sequential(*(ParallelResidual(b) for stage in model for b in stage))


def _wrapped(strategy: str, rank: int, world: int):
    """``(model, optimizer, optimizer whose .state this rank holds)`` for a data- or tensor-parallel strategy."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    from effitrain_helpers.training.pipeline import pipeline_model

    model = pipeline_model(world, **SHAPE)
    if strategy in ("DP", "ZeRO-1"):
        model = DistributedDataParallel(model)
    elif strategy in (KEPT_GATHERED, "ZeRO-3"):
        for stage in model:
            for block in stage:
                fully_shard(block, reshard_after_forward=strategy == "ZeRO-3")
        fully_shard(model, reshard_after_forward=strategy == "ZeRO-3")
    elif strategy == "TP":
        model = _tensor_parallel(model, rank, world)
    if strategy == "ZeRO-1":
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
        return model, optimizer, optimizer.optim
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, optimizer


def _measure(strategy: str, rows: int, m: int, steps: int) -> dict[str, Any]:
    """This rank's row for ``strategy``: bytes held, payload per step, median seconds per step."""
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.training.model_sharding import rank_bytes
    from effitrain_helpers.engines.pipeline import one_f_one_b
    from effitrain_helpers.training.pipeline import run_schedule

    rank, world = dist.get_rank(), dist.get_world_size()
    if strategy == "PP":
        times, sent = [], 0
        for _ in range(steps):
            result = run_schedule(one_f_one_b, m, size=rows // m, **SHAPE)
            times.append(result["end"] - result["start"])
            sent = result["sent"]
        n = sum(g.numel() for g in result["grads"] if g is not None) * 4
        held = {"parameters": n, "gradients": n, "optimizer state": 2 * n}
        return {"strategy": strategy, "rank": rank, "bytes": held, "communication": {"send": sent},
                "seconds": statistics.median(times), "note": "AdamW state: 2 values per parameter, not run"}
    model, optimizer, local = _wrapped(strategy, rank, world)
    x, y = _batch(rows, SHAPE["width"])
    if strategy != "TP":
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
    counter = CommunicationCounter().watch(model if strategy in ("DP", "ZeRO-1") else None)
    times, held = [], {}
    try:
        for _ in range(steps):
            dist.barrier()
            start = time.perf_counter()
            torch.nn.functional.mse_loss(model(x), y).backward()
            held.setdefault("gradients", rank_bytes(model, local)["gradients"])
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - start)
    finally:
        counter.stop()
    held = {**rank_bytes(model, local), **held}
    per_step = {k: v // steps for k, v in counter.summary().bytes_by_collective.items()}
    return {"strategy": strategy, "rank": rank, "bytes": held, "communication": per_step,
            "seconds": statistics.median(times), "note": ""}


def every_strategy(rows: int = 64, m: int = 4, steps: int = 3) -> list[dict[str, Any]]:
    """In each rank of a group: :func:`_measure` for every strategy of :data:`STRATEGIES`, in order (a batch
    of ``rows`` rows, ``m`` micro-batches for PP, ``steps`` AdamW steps each)."""
    return [_measure(s, rows, m, steps) for s in STRATEGIES]


def theory(world: int, rows: int = 64, m: int = 4) -> dict[str, dict[str, Any]]:
    """What rank 0 of ``world`` should hold (bytes, with AdamW: 2 state values per parameter value plus a
    4-byte ``step`` per tensor) and exchange per step (payload bytes by kind), strategy by strategy."""
    from effitrain_helpers.training.pipeline import pipeline_model

    model = pipeline_model(world, **SHAPE)
    params = [p for p in model.parameters()]
    total = sum(p.numel() for p in params) * 4
    tensors = len(params)
    width, blocks = SHAPE["width"], world * SHAPE["blocks_per_stage"]
    # TP: every weight and the first bias split, the second bias (width values per block) replicated
    tp = (total - blocks * width * 4) // world + blocks * width * 4
    stage = total // world
    holds = {"DP": (total, total, 2 * total + 4 * tensors),
             "ZeRO-1": (total, total, (2 * total + 4 * tensors) // world),  # about: whole tensors per rank
             KEPT_GATHERED: (total // world, total // world, 2 * total // world + 4 * tensors),  # between steps
             "ZeRO-3": (total // world, total // world, 2 * total // world + 4 * tensors),
             "TP": (tp, tp, 2 * tp + 4 * tensors),
             "PP": (stage, stage, 2 * stage)}
    activations = rows * width * 4
    sends = {"DP": {"all_reduce": total}, "ZeRO-1": {"all_reduce": total, "broadcast": total},
             KEPT_GATHERED: {"all_gather_single": total, "reduce_scatter_single": total},
             "ZeRO-3": {"all_gather_single": 2 * total, "reduce_scatter_single": total},
             # one all-reduce per block in forward, one in backward, but the first block's backward one
             # is skipped: the model's input needs no gradient
             "TP": {"all_reduce": (2 * blocks - 1) * activations},
             "PP": {"send": activations}}
    return {s: {"bytes": dict(zip(("parameters", "gradients", "optimizer state"), holds[s])),
                "communication": sends[s]} for s in STRATEGIES}
