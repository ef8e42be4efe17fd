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

from effitrain_helpers.core.language import msg, tr
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
    """Bytes of every tensor in ``optimizer.state`` (AdamW: two moments per value and a 0-d ``step`` each), this
    rank's local shard only where the state is a ``DTensor`` (``fully_shard``'s)."""
    from effitrain_helpers.training.model_sharding import local_part

    return sum(local_part(v).numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
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


def gradient_buckets(params: Iterable[torch.nn.Parameter], bucket_bytes: int) -> list[list[torch.nn.Parameter]]:
    """The parameters that get a gradient (``requires_grad``), each once (a tied weight is one parameter), last
    first (the order backward produces them), grouped into buckets: a bucket closes once it holds at least
    ``bucket_bytes`` (the last one may be smaller; a tensor larger than that is a bucket of its own)."""
    bucket_bytes = positive_int("bucket_bytes", bucket_bytes, example="bucket_bytes=2**16")
    unique = list({id(p): p for p in params if p.requires_grad}.values())
    buckets, current, size = [], [], 0
    for p in reversed(unique):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_bytes:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def _segments(flats: Sequence[torch.Tensor], lo: int, hi: int):
    """``(tensor index, start, end)`` of the parts of ``flats`` (seen one after the other) in ``[lo, hi)``."""
    offset = 0
    for i, f in enumerate(flats):
        a, b = max(lo, offset), min(hi, offset + f.numel())
        if a < b:
            yield i, a - offset, b - offset
        offset += f.numel()


def _pieces(tensors: Sequence[torch.Tensor], chunk: int, world: int) -> tuple[list[torch.Tensor], list[int]]:
    """``tensors`` seen as one flat vector padded to ``world * chunk`` values, cut into ``world`` pieces of
    ``chunk``: a piece inside one tensor is a *view* of it (nothing copied), one that spans two tensors or the
    padding is a zero-padded copy. Returns the pieces and the indices of the copies."""
    flats = [t.reshape(-1) for t in tensors]
    pieces, copies = [], []
    for r in range(world):
        parts = list(_segments(flats, r * chunk, (r + 1) * chunk))
        if len(parts) == 1 and parts[0][2] - parts[0][1] == chunk:
            i, a, b = parts[0]
            pieces.append(flats[i][a:b])
            continue
        piece, at = torch.zeros(chunk), 0
        for i, a, b in parts:
            piece[at:at + b - a] = flats[i][a:b]
            at += b - a
        pieces.append(piece)
        copies.append(r)
    return pieces, copies


def _reduce_scatter_gradients(out: torch.Tensor, params: Sequence[torch.nn.Parameter], world: int) -> int:
    """Reduce-scatter the gradients of ``params`` (one flat vector cut in ``world`` equal pieces) into ``out``
    (this rank's piece, averaged over the ranks). Returns the bytes of the copies this needed (:func:`_pieces`)."""
    import torch.distributed as dist

    pieces, copies = _pieces([p.grad for p in params], out.numel(), world)
    dist.reduce_scatter(out, pieces)
    out /= world
    return sum(pieces[r].numel() * pieces[r].element_size() for r in copies)


def _all_gather_weights(mine: torch.Tensor, params: Sequence[torch.nn.Parameter], world: int) -> int:
    """All-gather every rank's ``mine`` straight into the weights of ``params`` (one flat vector cut in
    ``world`` equal pieces; a piece that is no view of one weight goes through a copy, written back after).
    Returns the bytes of those copies."""
    import torch.distributed as dist

    weights = [p.data for p in params]
    pieces, copies = _pieces(weights, mine.numel(), world)
    dist.all_gather(pieces, mine)
    flats = [w.reshape(-1) for w in weights]
    for r in copies:
        at = 0
        for i, a, b in _segments(flats, r * mine.numel(), (r + 1) * mine.numel()):
            flats[i][a:b] = pieces[r][at:at + b - a]
            at += b - a
    return sum(pieces[r].numel() * pieces[r].element_size() for r in copies)


def _grads_held(params: Iterable[torch.Tensor]) -> int:
    """Bytes of the gradients that exist now on ``params``."""
    return sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)


class MissingGradientError(RuntimeError):
    """A bucket was never complete: a parameter that needs a gradient got none in this backward (lessons 6.2,
    6.3), the case torch's DDP reports as "Expected to have finished reduction in the prior iteration"."""


BUCKET_BYTES = 2**16  # 64 KiB: lesson 5.1's model then makes several buckets (its embedding, 256 kB, one alone)


class ReduceScatterOptimizer:
    """ZeRO-2 by hand: ``ReduceScatterOptimizer(params, torch.optim.AdamW, lr=1e-3)``.

    The parameters that need a gradient go into buckets (:func:`gradient_buckets`, last layer first); each
    bucket's values, one after the other and padded, are cut into N equal slices, and rank r owns slice r of
    every bucket: a flat float32 master copy (``self.slice``, the only thing its inner optimizer steps).
    *During backward*, a hook on every parameter (``register_post_accumulate_grad_hook``) counts the gradients
    that arrived; once a bucket is complete it is **reduce-scattered** (each rank receives the average of its
    own slice only) and its full gradients are **freed** at once, buckets always sent in the same order on
    every rank (a bucket waits for the ones before it). So no rank ever holds every full gradient: at most
    1/N of them plus the bucket in flight. ``step()`` steps the slice and all-gathers the slices back into
    every parameter: a reduce-scatter + an all-gather, the two halves of a ring all-reduce, so it sends what
    an all-reduce sends. A parameter that got no gradient leaves its bucket unsent: ``step()`` raises
    :class:`MissingGradientError` instead of letting the ranks drift apart. ``peak_gradient_bytes`` is the
    most gradient bytes this rank held (full gradients, copies made for a reduce-scatter, its slice's).
    """

    def __init__(self, params, optimizer_class, bucket_bytes: int = BUCKET_BYTES, **defaults):
        import torch.distributed as dist

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.buckets = gradient_buckets(params, bucket_bytes)
        self.params = [p for bucket in self.buckets for p in bucket]
        self.chunks = [math.ceil(sum(p.numel() for p in b) / self.world) for b in self.buckets]
        self.offsets = [sum(self.chunks[:b]) for b in range(len(self.buckets))]
        mine = [_pack((p.detach() for p in b), self.world * c)[self.rank * c:(self.rank + 1) * c]
                for b, c in zip(self.buckets, self.chunks)]
        self.slice = torch.nn.Parameter(torch.cat(mine))
        self.optimizer = optimizer_class([self.slice], **defaults)
        self.arrived, self.sent, self.peak_gradient_bytes = [0] * len(self.buckets), 0, 0
        self.peak_gather_bytes = 0  # the most bytes step() copied to gather one bucket
        for b, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, b=b: self._arrived(b))

    def _arrived(self, b: int) -> None:
        self.arrived[b] += 1
        while self.sent < len(self.buckets) and self.arrived[self.sent] == len(self.buckets[self.sent]):
            self._send(self.sent)  # in bucket order, the same on every rank
            self.sent += 1

    def _send(self, b: int) -> None:
        if self.slice.grad is None:
            self.slice.grad = torch.zeros_like(self.slice)
        out = self.slice.grad[self.offsets[b]:self.offsets[b] + self.chunks[b]]
        copied = _reduce_scatter_gradients(out, self.buckets[b], self.world)
        held = _grads_held([*self.params, self.slice]) + copied
        self.peak_gradient_bytes = max(self.peak_gradient_bytes, held)
        for p in self.buckets[b]:
            p.grad = None  # this bucket's full gradients: freed as soon as they are sent

    def step(self):
        if self.sent < len(self.buckets):
            late = [tuple(p.shape) for p in self.buckets[self.sent] if p.grad is None]
            raise MissingGradientError(tr(
                "bucket {b} of {n} was never sent: its parameters of shapes {shapes} got no gradient in this "
                "backward (not used in forward?). Use every parameter that requires a gradient in the loss, or "
                "freeze it (requires_grad=False) before building the optimizer.",
                b=self.sent + 1, n=len(self.buckets), shapes=late))
        self.optimizer.step()
        for b, bucket in enumerate(self.buckets):
            mine = self.slice.detach()[self.offsets[b]:self.offsets[b] + self.chunks[b]]
            copied = _all_gather_weights(mine, bucket, self.world)
            self.peak_gather_bytes = max(self.peak_gather_bytes, copied)
        self.arrived, self.sent = [0] * len(self.buckets), 0

    def zero_grad(self):
        self.slice.grad = None


class GatheredUnits:
    """ZeRO-3 by hand over ``units`` (modules run one after the other, e.g. embedding, blocks, head).

    Each unit's parameters are packed into one flat vector, padded to N equal chunks; the rank keeps only its
    chunk (``self.shards``, the parameters its optimizer steps). The unit's parameters stay as views of a
    full flat buffer whose *storage is freed* (resized to 0 bytes, as FSDP1 does) except while the unit
    runs: a forward pre-hook and a backward pre-hook all-gather it, a forward hook frees it, and once every
    parameter's gradient has been accumulated (``register_post_accumulate_grad_hook``) the gradients are
    reduce-scattered into the chunk's gradient (:func:`_reduce_scatter_gradients`) and the buffer freed again.
    ``peak_parameter_bytes`` is the largest number of parameter bytes (shards + gathered buffers) this rank
    held at any hook, ``peak_gradient_bytes`` the largest number of gradient bytes (the unit's full gradients,
    the copies made to send them, the shards' gradients) at any reduce-scatter.
    """

    def __init__(self, units: Sequence[torch.nn.Module]):
        import torch.distributed as dist

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.units, self.shards, self.full, self.chunk = list(units), [], [], []
        self.peak_parameter_bytes = self.peak_gradient_bytes = 0
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
        self.shards[i].grad = torch.empty(self.chunk[i])
        copied = _reduce_scatter_gradients(self.shards[i].grad, params, self.world)
        held = _grads_held([*self.shards, *(p for unit in self.units for p in unit.parameters())]) + copied
        self.peak_gradient_bytes = max(self.peak_gradient_bytes, held)
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
        return lambda: (peaks.see(gradients=_grads_held(model.parameters())), average_gradients(model.parameters()))

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
