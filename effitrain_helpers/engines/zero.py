"""ZeRO by hand, stages 1, 2 and 3: what each rank keeps of the optimizer state, the gradients and the parameters
(lesson 6.3).

The *Zero Redundancy Optimizer* (ZeRO) removes the copies that data parallelism keeps on every rank, in three
stages. Each is a few lines of ``torch.distributed`` and runs inside every rank of a group made by ``launch``:

- :func:`balanced_owners`: whole tensors assigned to ranks, balanced by size (largest first, each to the
  rank with the fewest values so far, as ``ZeroRedundancyOptimizer._partition_parameters`` does);
- :class:`ShardedOptimizer` (ZeRO-1): each rank builds the inner optimizer over its own tensors only, steps
  them, then broadcasts each updated tensor from its owner;
- :class:`ReduceScatterOptimizer` (ZeRO-2): during backward each bucket of gradients
  (:func:`~effitrain_helpers.engines.gradient_sync.gradient_buckets`) is reduce-scattered into each owner's
  flat slice and freed, instead of all-reduced, and the updated slices all-gathered back after the step;
- :class:`GatheredUnits` (ZeRO-3): each unit's (block's) parameters live as 1/N flat shards; module hooks
  all-gather a unit just before its forward and its backward and free it after, and its gradients are
  reduce-scattered as soon as they are complete;
- :func:`flat_pieces` and :func:`gradient_bytes`: tensors seen as one flat vector cut in N equal pieces, and the
  gradient bytes held now (what the stages send and what lesson 6.3's checker measures).

The runs that train and measure them side by side are in :mod:`effitrain_helpers.training.zero_stages`.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.engines.gradient_sync import gradient_buckets, missing_gradient


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


def _segments(flats: Sequence[torch.Tensor], lo: int, hi: int):
    """``(tensor index, start, end)`` of the parts of ``flats`` (seen one after the other) in ``[lo, hi)``."""
    offset = 0
    for i, f in enumerate(flats):
        a, b = max(lo, offset), min(hi, offset + f.numel())
        if a < b:
            yield i, a - offset, b - offset
        offset += f.numel()


def flat_pieces(tensors: Sequence[torch.Tensor], chunk: int, world: int) -> tuple[list[torch.Tensor], list[int]]:
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


def reduce_scatter_gradients(out: torch.Tensor, params: Sequence[torch.nn.Parameter], world: int) -> int:
    """Reduce-scatter the gradients of ``params`` (one flat vector cut in ``world`` equal pieces) into ``out``
    (this rank's piece, averaged over the ranks). Returns the bytes of the copies this needed (:func:`flat_pieces`)."""
    import torch.distributed as dist

    pieces, copies = flat_pieces([p.grad for p in params], out.numel(), world)
    dist.reduce_scatter(out, pieces)
    out /= world
    return sum(pieces[r].numel() * pieces[r].element_size() for r in copies)


def _all_gather_weights(mine: torch.Tensor, params: Sequence[torch.nn.Parameter], world: int) -> int:
    """All-gather every rank's ``mine`` straight into the weights of ``params`` (one flat vector cut in
    ``world`` equal pieces; a piece that is no view of one weight goes through a copy, written back after).
    Returns the bytes of those copies."""
    import torch.distributed as dist

    weights = [p.data for p in params]
    pieces, copies = flat_pieces(weights, mine.numel(), world)
    dist.all_gather(pieces, mine)
    flats = [w.reshape(-1) for w in weights]
    for r in copies:
        at = 0
        for i, a, b in _segments(flats, r * mine.numel(), (r + 1) * mine.numel()):
            flats[i][a:b] = pieces[r][at:at + b - a]
            at += b - a
    return sum(pieces[r].numel() * pieces[r].element_size() for r in copies)


def gradient_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of the gradients that exist now on ``params``."""
    return sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)


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
    :class:`~effitrain_helpers.engines.gradient_sync.MissingGradientError` instead of letting the ranks drift
    apart. ``peak_gradient_bytes`` is the most gradient bytes this rank held (full gradients, copies made for a
    reduce-scatter, its slice's).
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
        copied = reduce_scatter_gradients(out, self.buckets[b], self.world)
        held = gradient_bytes([*self.params, self.slice]) + copied
        self.peak_gradient_bytes = max(self.peak_gradient_bytes, held)
        for p in self.buckets[b]:
            p.grad = None  # this bucket's full gradients: freed as soon as they are sent

    def step(self):
        if self.sent < len(self.buckets):
            raise missing_gradient(self.sent, self.buckets)
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
    reduce-scattered into the chunk's gradient (:func:`reduce_scatter_gradients`) and the buffer freed again.
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
        copied = reduce_scatter_gradients(self.shards[i].grad, params, self.world)
        held = gradient_bytes([*self.shards, *(p for unit in self.units for p in unit.parameters())]) + copied
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
