"""What does each rank hold, and what does a step send, under ZeRO stages 1, 2 and 3? (lesson 6.3's measurements)

:func:`zero_stages` trains lesson 5.1's model on the same batches six ways in each rank of a group: plain AdamW
with averaged gradients (the reference), ZeRO-1, -2 and -3 by hand (:mod:`effitrain_helpers.engines.zero`),
torch's ``ZeroRedundancyOptimizer`` and lesson 5.1's ``fully_shard``, with bytes held (between steps and at the
peak of a step) and payloads counted; :func:`theory` says what each should hold. What the notebook's table,
``benchmarks/zero_bench.py`` and the tests use.

Payloads are counted by :class:`~effitrain_helpers.measure.communication.CommunicationCounter` (all-reduce,
all-gather, reduce-scatter and broadcast), so ZeRO-1's broadcasts are measured too.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.engines.gradient_sync import average_gradients, gradient_buckets
from effitrain_helpers.engines.zero import (BUCKET_BYTES, GatheredUnits, ReduceScatterOptimizer, ShardedOptimizer,
                                            gradient_bytes)

# zero_stages' runs written here (keys of its results; lesson 6.3 shows them translated: language.term)
RUNS = (msg("AdamW, averaged gradients"), msg("ZeRO-1 by hand"), msg("ZeRO-2 by hand"), msg("ZeRO-3 by hand"))
LEARNING_RATE = 1e-3  # every run here: torch.optim.AdamW(lr=1e-3), its other defaults (lesson 5.1's train_steps)


def state_bytes(optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (AdamW: two moments per value and a 0-d ``step`` each), this
    rank's local shard only where the state is a ``DTensor`` (``fully_shard``'s)."""
    from effitrain_helpers.training.model_sharding import local_part

    return sum(local_part(v).numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


def _units(model) -> list[torch.nn.Module]:
    """The units of lesson 5.1's model that ZeRO-3 gathers one at a time: the embedding, each block, the head."""
    return [model.embed, *model.blocks, model.head]


# the bytes zero_stages measures per rank (keys; lesson 6.3 shows them translated): between two steps, and the
# most held at any moment of a step (parameters and gradients peak at different moments)
HELD = (msg("parameters, between steps"), msg("parameters, peak"), msg("gradients, peak"), msg("optimizer state"))


def _param_bytes(params: Iterable[torch.Tensor]) -> int:
    from effitrain_helpers.training.model_sharding import local_part

    return sum(local_part(p).numel() * p.element_size() for p in params)


def _train(model, batches, optimizer, after_backward: Callable | None, counter) -> None:
    """One AdamW step per batch: loss, backward, ``after_backward()`` (unless None), ``optimizer.step()``,
    ``optimizer.zero_grad()``."""
    for tokens, labels in batches:
        torch.nn.functional.cross_entropy(model(tokens), labels).backward()
        if after_backward is not None:
            after_backward()
        optimizer.step()
        counter.step()
        optimizer.zero_grad()


class _Peaks:
    """The most bytes seen so far, by kind, for runs that sample them from outside (plain data parallelism,
    ZeRO-1, ``ZeroRedundancyOptimizer``: every full gradient at once, after backward; ``fully_shard``: its
    gathered groups at every module hook and its gradients at every reduce-scatter)."""

    def __init__(self):
        self.parameters = self.gradients = 0

    def see(self, parameters: int = 0, gradients: int = 0) -> None:
        self.parameters, self.gradients = max(self.parameters, parameters), max(self.gradients, gradients)


def zero_stages(batches: list[tuple], seed: int = 0) -> dict[str, Any]:
    """In each rank of a group: lesson 5.1's model trained on this rank's part of every batch, six ways:
    plain AdamW with averaged gradients (the reference), ZeRO-1, -2 and -3 by hand, torch's
    ``ZeroRedundancyOptimizer`` and lesson 5.1's ``fully_shard``. For each: bytes this rank holds (:data:`HELD`:
    parameters between steps, master copies included; the most parameter and gradient bytes held at any
    moment of a step; optimizer state), payload per step by collective, and the largest difference of the
    final weights from the reference's. Also the sizes :func:`theory` needs."""
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from effitrain_helpers.measure.communication import CommunicationCounter
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as fsdp_group

    from effitrain_helpers.training.model_sharding import FullParameterWatch, full_state, sharding_model, wrap_fsdp

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in batches]
    results: dict[str, dict] = {}
    reference = None

    def run(name, make):
        nonlocal reference
        model = sharding_model(seed)
        peaks = _Peaks()
        counter = CommunicationCounter().watch()
        try:
            optimizer, after_backward, read = make(model, peaks)
            _train(model, mine, optimizer, after_backward, counter)
        finally:
            counter.stop()
        held = read(model, optimizer, peaks)
        weights = full_state(model)
        reference = reference or weights
        results[name] = {"bytes": held, "gap": max(float((weights[k] - reference[k]).abs().max()) for k in weights),
                         "communication": {c: b // len(mine) for c, b in counter.bytes_by_collective.items()}}

    def averaged(model, peaks):  # after backward: every full gradient held at once, then averaged in place
        return lambda: (peaks.see(gradients=gradient_bytes(model.parameters())), average_gradients(model.parameters()))

    def replicated(model, optimizer, peaks, inner=None):
        held = _param_bytes(model.parameters())
        return {"parameters, between steps": held, "parameters, peak": held, "gradients, peak": peaks.gradients,
                "optimizer state": state_bytes(inner or optimizer)}

    def plain(model, peaks):
        return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE), averaged(model, peaks), replicated

    def zero1(model, peaks):
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LEARNING_RATE)
        return opt, averaged(model, peaks), lambda m, o, p: replicated(m, o, p, o.optimizer)

    def zero2(model, peaks):
        opt = ReduceScatterOptimizer(model.parameters(), torch.optim.AdamW, lr=LEARNING_RATE)

        def read(m, o, p):
            between = _param_bytes([*m.parameters(), o.slice])  # the replicas and the flat master slice
            return {"parameters, between steps": between, "parameters, peak": between + o.peak_gather_bytes,
                    "gradients, peak": o.peak_gradient_bytes, "optimizer state": state_bytes(o.optimizer)}

        return opt, None, read

    def zero3(model, peaks):
        units = GatheredUnits(_units(model))
        opt = torch.optim.AdamW(units.shards, lr=LEARNING_RATE)

        def read(m, o, p):
            held = {"parameters, between steps": _param_bytes(units.shards) + sum(
                        f.untyped_storage().nbytes() for f in units.full),
                    "parameters, peak": units.peak_parameter_bytes, "gradients, peak": units.peak_gradient_bytes,
                    "optimizer state": state_bytes(o)}
            units.gather_all()  # to read the trained weights
            return held

        return opt, None, read

    def torch_zero(model, peaks):
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=LEARNING_RATE)
        return opt, averaged(model, peaks), lambda m, o, p: replicated(m, o, p, o.optim)

    def fsdp(model, peaks):
        wrap_fsdp(model)
        watch = FullParameterWatch(model)
        sharded = _param_bytes(model.parameters())
        original, reduce = dist.reduce_scatter_single, fsdp_group.foreach_reduce
        unsharded = [0]

        def reducing(fsdp_params, unsharded_grads, *args, **kwargs):  # the group's full gradients, still held
            unsharded[0] = sum(g.numel() * g.element_size() for g in unsharded_grads)
            return reduce(fsdp_params, unsharded_grads, *args, **kwargs)

        def sampled(output, input, *args, **kwargs):  # + its shards' and the packed copy being sent
            grads = _param_bytes(p.grad for p in model.parameters() if p.grad is not None)
            peaks.see(gradients=grads + unsharded[0] + input.numel() * input.element_size())
            return original(output, input, *args, **kwargs)

        dist.reduce_scatter_single, fsdp_group.foreach_reduce = sampled, reducing

        def read(m, o, p):
            dist.reduce_scatter_single, fsdp_group.foreach_reduce = original, reduce
            watch.stop()
            return {"parameters, between steps": sharded, "parameters, peak": sharded + watch.peak_bytes,
                    "gradients, peak": p.gradients, "optimizer state": state_bytes(o)}

        return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE), None, read

    for name, make in zip((*RUNS, "ZeroRedundancyOptimizer", "fully_shard"),
                          (plain, zero1, zero2, zero3, torch_zero, fsdp)):
        run(name, make)
    model = sharding_model(seed)
    units = [[p.numel() for p in unit.parameters()] for unit in _units(model)]
    buckets = [[p.numel() for p in b] for b in gradient_buckets(model.parameters(), BUCKET_BYTES)]
    return {"rank": rank, "world": world, "results": results, "unit_values": units, "bucket_values": buckets,
            "tensor_values": [p.numel() for p in model.parameters()]}


def theory(run: str, world: int, unit_values: Sequence[Sequence[int]], bucket_values: Sequence[Sequence[int]]
           ) -> dict[str, float]:
    """What a rank of ``world`` should hold, by kind (:data:`HELD`), for the run named ``run`` (a key of
    :func:`zero_stages` 's results) of lesson 5.1's model (float32, AdamW), from the values of its units
    (embedding, blocks, head) and of ZeRO-2's buckets:

    - replicated (AdamW, ZeRO-1, ``ZeroRedundancyOptimizer``): every parameter and every gradient; the state
      whole, or 1/N of it (ZeRO-1's whole tensors put it within one tensor of that);
    - ZeRO-2: the parameters and a flat master slice of 1/N (padded); gradients at the peak 1/N plus the
      largest bucket (its full gradients, the moment it is sent);
    - ZeRO-3: 1/N of each unit between steps, plus the largest unit gathered at the peak; gradients 1/N plus
      the largest unit's;
    - ``fully_shard``: 1/N between steps; at the peak the root (embedding and head: kept from forward to
      backward) and two blocks (one running, the next prefetched); gradients 1/N of the blocks' and the root
      group twice (its full gradients and the packed copy it reduce-scatters).
    Copies a collective needs where a piece spans two tensors or the padding are not in the theory."""
    tensors = [v for unit in unit_values for v in unit]
    params, state_of = 4 * sum(tensors), lambda values, count: 8 * values + 4 * count
    padded = [4 * math.ceil(sum(u) / world) for u in unit_values]
    if run in ("AdamW, averaged gradients", "ZeRO-1 by hand", "ZeroRedundancyOptimizer"):
        state = state_of(sum(tensors), len(tensors)) / (1 if run.startswith("AdamW") else world)
        return {"parameters, between steps": params, "parameters, peak": params, "gradients, peak": params,
                "optimizer state": state}
    if run == "ZeRO-2 by hand":
        master = sum(4 * math.ceil(sum(b) / world) for b in bucket_values)
        return {"parameters, between steps": params + master, "parameters, peak": params + master,
                "gradients, peak": master + max(4 * sum(b) for b in bucket_values),
                "optimizer state": state_of(master // 4, 1)}
    if run == "ZeRO-3 by hand":
        return {"parameters, between steps": sum(padded), "parameters, peak": sum(padded) + world * max(padded),
                "gradients, peak": sum(padded) + max(4 * sum(u) for u in unit_values),
                "optimizer state": state_of(sum(padded) // 4, len(unit_values))}
    if run == "fully_shard":
        root = 4 * (sum(unit_values[0]) + sum(unit_values[-1]))
        blocks = sorted((4 * sum(u) for u in unit_values[1:-1]), reverse=True)
        return {"parameters, between steps": params / world, "parameters, peak": params / world + root + sum(blocks[:2]),
                "gradients, peak": sum(blocks) / world + 2 * root,
                "optimizer state": state_of(sum(tensors), len(tensors)) / world}
    raise ValueError(tr("run={value!r} is not one of {allowed}.", value=run,
                        allowed=", ".join((*RUNS, "ZeroRedundancyOptimizer", "fully_shard"))))
