"""What does each rank hold, and what does a step send, under ZeRO stages 1, 2 and 3 written by hand? (lesson 6.3)

Lesson 6.3 opens up what lesson 5.1 called: the *Zero Redundancy Optimizer* (ZeRO) removes the copies that
data parallelism keeps on every rank, in three stages. This module holds the lesson's reference versions,
each a few lines of ``torch.distributed`` (they run inside every rank of a group made by ``launch``):

- :func:`balanced_owners`: whole tensors assigned to ranks, balanced by size (largest first, each to the
  rank with the fewest values so far, as ``ZeroRedundancyOptimizer._partition_parameters`` does);
- :class:`ShardedOptimizer` (ZeRO-1): each rank builds the inner optimizer over its own tensors only, steps
  them, then broadcasts each updated tensor from its owner;
- :class:`ReduceScatterOptimizer` (ZeRO-2): the gradients are reduce-scattered into each owner's flat buffer
  (N equal slices of all the values) instead of all-reduced, and the updated slices all-gathered back;
- :class:`GatheredUnits` (ZeRO-3): each unit's (block's) parameters live as 1/N flat shards; module hooks
  all-gather a unit just before its forward and its backward and free it after, and its gradients are
  reduce-scattered as soon as they are complete;
- :func:`zero_stages`: all of them, plain AdamW, torch's ``ZeroRedundancyOptimizer`` and lesson 5.1's
  ``fully_shard``, trained on the same batches in one rank, with bytes held and payloads counted
  (what the notebook's table, ``benchmarks/zero_bench.py`` and the tests use).

Payloads are counted by :class:`~effitrain_helpers.measure.communication.CommunicationCounter` (all-reduce,
all-gather, reduce-scatter and broadcast), so ZeRO-1's broadcasts are measured too.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import torch

from effitrain_helpers.core.language import msg
from effitrain_helpers.core.validate import positive_int

# zero_stages' runs written here (keys of its results; lesson 6.3 shows them translated: language.term)
RUNS = (msg("AdamW, averaged gradients"), msg("ZeRO-1 by hand"), msg("ZeRO-2 by hand"), msg("ZeRO-3 by hand"))
LEARNING_RATE = 1e-3  # every run here: torch.optim.AdamW(lr=1e-3), its other defaults (lesson 5.1's train_steps)


def balanced_owners(sizes: Sequence[int], world_size: int) -> list[int]:
    """The rank that owns each tensor, for tensors of ``sizes`` values among ``world_size`` ranks: largest
    first, each to the rank holding the fewest values so far (ties: the lowest rank). No rank then holds more
    than ``sum(sizes) / world_size + max(sizes)`` values, and with at least ``world_size`` tensors of
    positive size every rank owns one."""
    world_size = positive_int("world_size", world_size, example="world_size=2")
    loads, owners = [0] * world_size, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        owner = min(range(world_size), key=lambda r: loads[r])
        owners[i] = owner
        loads[owner] += sizes[i]
    return owners


def state_bytes(optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (AdamW: two moments per value and a 0-d ``step`` each)."""
    return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Plain data parallelism (lesson 6.2): all-reduce every gradient and divide by the world size."""
    import torch.distributed as dist

    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


class ShardedOptimizer:
    """ZeRO-1 by hand: ``ShardedOptimizer(params, torch.optim.AdamW, lr=1e-3)``.

    Every rank keeps every parameter and averages every gradient (as DDP does), but builds the inner
    optimizer (``self.optimizer``) over its own tensors only (:func:`balanced_owners`), so it keeps the
    optimizer state of about 1/N of the values. ``step()`` steps that share, then broadcasts each parameter
    from its owner, so every rank holds the same weights again.
    """

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = balanced_owners([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, owner in zip(self.params, self.owners) if owner == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **defaults)

    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            dist.broadcast(p.data, src=owner)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def _pack(tensors: Iterable[torch.Tensor], length: int) -> torch.Tensor:
    """``tensors`` flattened one after the other into a zero-padded float32 vector of ``length`` values."""
    flat = torch.zeros(length)
    offset = 0
    for t in tensors:
        flat[offset:offset + t.numel()] = t.reshape(-1)
        offset += t.numel()
    return flat


def _unpack(flat: torch.Tensor, like: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Views of ``flat`` shaped as ``like``, one after the other (the inverse of :func:`_pack`)."""
    views, offset = [], 0
    for t in like:
        views.append(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
    return views


class ReduceScatterOptimizer:
    """ZeRO-2 by hand: ``ReduceScatterOptimizer(params, torch.optim.AdamW, lr=1e-3)``.

    All the parameters, flattened one after the other and padded, are cut into N equal slices; rank r owns
    slice r (a flat ``torch.nn.Parameter``, ``self.slice``, the only thing its inner optimizer steps). After
    backward, call :meth:`reduce_gradients` *instead of* averaging every gradient: the gradients, packed the
    same way, are reduce-scattered, so each rank receives the sum of only its own slice, into one flat buffer,
    and drops every other gradient. ``step()`` steps the slice and all-gathers the slices back into every
    parameter: a reduce-scatter + an all-gather, the two halves of a ring all-reduce, so it sends what an
    all-reduce sends. Equal slices (tensors cut where they fall, as DeepSpeed's stage 2 does) keep the
    padding below N values; ZeRO-1's whole tensors would pad every owner's buffer to the largest share.
    """

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.chunk = math.ceil(sum(p.numel() for p in self.params) / self.world)
        flat = _pack((p.detach() for p in self.params), self.world * self.chunk)
        self.slice = torch.nn.Parameter(flat[self.rank * self.chunk:(self.rank + 1) * self.chunk].clone())
        self.optimizer = optimizer_class([self.slice], **defaults)

    def reduce_gradients(self):
        import torch.distributed as dist

        packed = _pack((p.grad for p in self.params), self.world * self.chunk)
        mine = torch.empty(self.chunk)
        dist.reduce_scatter_single(mine, packed)
        self.slice.grad = mine / self.world
        for p in self.params:
            p.grad = None

    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        gathered = torch.empty(self.world * self.chunk)
        dist.all_gather_single(gathered, self.slice.detach())
        for p, value in zip(self.params, _unpack(gathered, self.params)):
            p.data.copy_(value)

    def zero_grad(self):
        self.slice.grad = None


class GatheredUnits:
    """ZeRO-3 by hand over ``units`` (modules run one after the other, e.g. embedding, blocks, head).

    Each unit's parameters are packed into one flat vector, padded to N equal chunks; the rank keeps only its
    chunk (``self.shards``, the parameters its optimizer steps). The unit's parameters stay as views of a
    full flat buffer whose *storage is freed* (resized to 0 bytes, as FSDP1 does) except while the unit
    runs: a forward pre-hook and a backward pre-hook all-gather it, a forward hook frees it, and once every
    parameter's gradient has been accumulated (``register_post_accumulate_grad_hook``) the gradients are
    reduce-scattered into the chunk's gradient and the buffer freed again. ``peak_parameter_bytes`` is the
    largest number of parameter bytes (shards + gathered buffers) this rank held at any hook.
    """

    def __init__(self, units: Sequence[torch.nn.Module]):
        import torch.distributed as dist

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.units, self.shards, self.full, self.chunk = list(units), [], [], []
        self.peak_parameter_bytes = 0
        for unit in self.units:
            params = list(unit.parameters())
            chunk = math.ceil(sum(p.numel() for p in params) / self.world)
            full = _pack((p.detach() for p in params), self.world * chunk)
            self.shards.append(torch.nn.Parameter(full[self.rank * chunk:(self.rank + 1) * chunk].clone()))
            for p, view in zip(params, _unpack(full, params)):
                p.data = view
            self.full.append(full)
            self.chunk.append(chunk)
            self._free(len(self.full) - 1)
            self._install_hooks(len(self.full) - 1, unit, params)
        self._note_bytes()

    def _install_hooks(self, i: int, unit: torch.nn.Module, params: list) -> None:
        done = set()

        def gradient_ready(p):
            done.add(id(p))
            if len(done) == len(params):
                done.clear()
                self._reduce_gradients(i, params)
                self._free(i)

        unit.register_forward_pre_hook(lambda module, args: self._gather(i))
        unit.register_forward_hook(lambda module, args, output: self._free(i))
        unit.register_full_backward_pre_hook(lambda module, grad_output: self._gather(i))
        for p in params:
            p.register_post_accumulate_grad_hook(gradient_ready)

    def _gather(self, i: int) -> None:
        import torch.distributed as dist

        full = self.full[i]
        if full.untyped_storage().nbytes() == 0:
            full.untyped_storage().resize_(full.numel() * full.element_size())
            dist.all_gather_single(full, self.shards[i].detach())
        self._note_bytes()

    def _free(self, i: int) -> None:
        self.full[i].untyped_storage().resize_(0)

    def _reduce_gradients(self, i: int, params: list) -> None:
        import torch.distributed as dist

        packed = _pack((p.grad for p in params), self.world * self.chunk[i])
        mine = torch.empty(self.chunk[i])
        dist.reduce_scatter_single(mine, packed)
        self.shards[i].grad = mine / self.world
        for p in params:
            p.grad = None

    def _note_bytes(self) -> None:
        held = sum(s.numel() * s.element_size() for s in self.shards)
        held += sum(f.untyped_storage().nbytes() for f in self.full)
        self.peak_parameter_bytes = max(self.peak_parameter_bytes, held)

    def gather_all(self) -> None:
        """Gather every unit (to read the whole trained model); the next forward frees them again."""
        for i in range(len(self.units)):
            self._gather(i)


def _units(model) -> list[torch.nn.Module]:
    """The units of lesson 5.1's model that ZeRO-3 gathers one at a time: the embedding, each block, the head."""
    return [model.embed, *model.blocks, model.head]


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _grad_bytes(params: Iterable[torch.nn.Parameter]) -> int:
    return sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)


def _train(model, batches, optimizer, after_backward: Callable, counter) -> dict[str, int]:
    """One step per batch: loss, backward, ``after_backward()`` (returns the gradient bytes held, measured
    at the first step), ``optimizer.step()``, ``optimizer.zero_grad()``. Returns the measured bytes."""
    held = {}
    for tokens, labels in batches:
        torch.nn.functional.cross_entropy(model(tokens), labels).backward()
        held.setdefault("gradients", after_backward())
        optimizer.step()
        counter.step()
        optimizer.zero_grad()
    return held


def zero_stages(batches: list[tuple], seed: int = 0) -> dict[str, Any]:
    """In each rank of a group: lesson 5.1's model trained on this rank's part of every batch, six ways:
    plain AdamW with averaged gradients (the reference), ZeRO-1, -2 and -3 by hand, torch's
    ``ZeroRedundancyOptimizer`` and lesson 5.1's ``fully_shard``. For each: bytes this rank holds
    (parameters, peak for ZeRO-3 and FSDP's; gradients at the first step; optimizer state), payload per
    step by collective, and the largest difference of the final weights from the reference's."""
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.training.model_sharding import measured_run, sharding_model, wrap_fsdp

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in batches]
    results: dict[str, dict] = {}
    reference = None

    def run(name, make):
        nonlocal reference
        model = sharding_model(seed)
        counter = CommunicationCounter().watch()
        try:
            optimizer, after_backward, read = make(model)
            held = _train(model, mine, optimizer, after_backward, counter)
        finally:
            counter.stop()
        held.update(read(model, optimizer))
        weights = _weights(model)
        reference = reference or weights
        results[name] = {"bytes": held, "gap": max(float((weights[k] - reference[k]).abs().max()) for k in weights),
                         "communication": {c: b // len(mine) for c, b in counter.bytes_by_collective.items()}}

    def replicated(model, optimizer, inner=None):
        return {"parameters": _param_bytes(model), "optimizer state": state_bytes(inner or optimizer)}

    def plain(model):
        opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        return opt, lambda: (average_gradients(model.parameters()), _grad_bytes(model.parameters()))[1], replicated

    def zero1(model):
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LEARNING_RATE)
        return (opt, lambda: (average_gradients(model.parameters()), _grad_bytes(model.parameters()))[1],
                lambda m, o: replicated(m, o, o.optimizer))

    def zero2(model):
        opt = ReduceScatterOptimizer(model.parameters(), torch.optim.AdamW, lr=LEARNING_RATE)
        return (opt, lambda: (opt.reduce_gradients(), _grad_bytes([opt.slice]))[1],
                lambda m, o: replicated(m, o, o.optimizer))

    def zero3(model):
        units = GatheredUnits(_units(model))
        opt = torch.optim.AdamW(units.shards, lr=LEARNING_RATE)

        def read(m, o):
            peak = units.peak_parameter_bytes
            units.gather_all()
            return {"parameters": peak, "optimizer state": state_bytes(o)}

        return opt, lambda: _grad_bytes(units.shards), read

    def torch_zero(model):
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=LEARNING_RATE)
        return (opt, lambda: (average_gradients(model.parameters()), _grad_bytes(model.parameters()))[1],
                lambda m, o: replicated(m, o, o.optim))

    for name, make in zip((*RUNS, "ZeroRedundancyOptimizer"), (plain, zero1, zero2, zero3, torch_zero)):
        run(name, make)
    fsdp = measured_run(wrap_fsdp, batches, seed)
    results["fully_shard"] = {"bytes": fsdp["bytes"], "communication": fsdp["communication"],
                              "gap": max(float((fsdp["weights"][k] - reference[k]).abs().max()) for k in reference)}
    model = sharding_model(seed)
    units = [[p.numel() for p in unit.parameters()] for unit in _units(model)]
    return {"rank": rank, "world": world, "results": results, "unit_values": units,
            "tensor_values": [p.numel() for p in model.parameters()]}
