"""Data parallelism's gradient sync by hand: which gradients travel together, and how they are averaged (lessons
6.2, 6.3).

- :func:`broadcast_parameters`: every rank starts from rank 0's weights, as DDP's constructor makes it;
- :func:`average_gradients`: plain data parallelism after backward, every gradient all-reduced and divided by
  the world size;
- :func:`gradient_buckets`: the parameters that get a gradient, last layer first (the order backward completes
  them), grouped into buckets of about ``bucket_bytes``, as DDP groups them (``bucket_cap_mb``); frozen
  parameters left out, a tied weight once;
- :class:`OverlappedSync`: DDP's overlap, bucket by bucket during backward: hooks launch asynchronous
  all-reduces in one fixed order, ``wait()`` before the optimizer step;
- :class:`MissingGradientError` (made by :func:`missing_gradient`): a bucket never complete because a parameter
  got no gradient in a backward, which torch's DDP reports as "Expected to have finished reduction in the prior
  iteration".

Everything here runs inside one rank of a process group made by
:func:`~effitrain_helpers.processes.launch.launch`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int


def broadcast_parameters(params: Iterable[torch.nn.Parameter]) -> None:
    """Rank 0's values into every rank's ``params``, in place (a broadcast per tensor)."""
    import torch.distributed as dist

    for p in params:
        dist.broadcast(p.data, src=0)


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


def average_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Plain data parallelism (lesson 6.2): all-reduce every gradient and divide by the world size."""
    import torch.distributed as dist

    world = dist.get_world_size()
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


class MissingGradientError(RuntimeError):
    """A bucket was never complete: a parameter that needs a gradient got none in this backward (lessons 6.2,
    6.3), the case torch's DDP reports as "Expected to have finished reduction in the prior iteration"."""


def missing_gradient(sent: int, buckets: Sequence[Sequence[torch.nn.Parameter]]) -> MissingGradientError:
    """The error for bucket number ``sent`` of ``buckets`` (the first one never sent), naming the shapes of its
    parameters that got no gradient."""
    late = [tuple(p.shape) for p in buckets[sent] if p.grad is None]
    return MissingGradientError(tr(
        "bucket {b} of {n} was never sent: its parameters of shapes {shapes} got no gradient in this backward "
        "(not used in forward?). Use every parameter that requires a gradient in the loss, or freeze it "
        "(requires_grad=False) before the buckets are made.", b=sent + 1, n=len(buckets), shapes=late))


class OverlappedSync:
    """DDP's overlap by hand: ``sync = OverlappedSync(model, bucket_bytes)``, then ``sync.wait()`` after every
    ``loss.backward()`` and before ``optimizer.step()`` (the reference for lesson 6.2's exercise 4).

    The parameters that get a gradient are grouped by :func:`gradient_buckets`; a hook on each
    (``register_post_accumulate_grad_hook``) counts the gradients of its bucket. Once a bucket is complete *and*
    every bucket before it has been launched, its gradients, flattened into one tensor, are all-reduced with
    ``async_op=True``: the call returns at once and the all-reduce runs while backward goes on. Buckets leave
    in one order on every rank, whatever order their gradients arrive in (collectives are matched by the order
    each rank calls them). ``wait()`` waits for each, writes the average back into every ``p.grad`` and gets
    ready for the next backward; a bucket never launched (a parameter got no gradient) raises
    :class:`MissingGradientError` on every rank instead of letting the replicas drift apart.
    """

    def __init__(self, model: torch.nn.Module, bucket_bytes: int):
        self.buckets = gradient_buckets(model.parameters(), bucket_bytes)
        self.arrived, self.pending = [0] * len(self.buckets), []
        for b, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, b=b: self._arrived(b))

    def _arrived(self, b: int) -> None:  # autograd calls it during backward
        import torch.distributed as dist

        self.arrived[b] += 1
        n = len(self.pending)  # the next bucket to launch
        while n < len(self.buckets) and self.arrived[n] == len(self.buckets[n]):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[n]])
            self.pending.append((flat, dist.all_reduce(flat, async_op=True)))
            n += 1

    def wait(self) -> None:
        import torch.distributed as dist

        world = dist.get_world_size()
        for bucket, (flat, work) in zip(self.buckets, self.pending):
            work.wait()
            for p, average in zip(bucket, (flat / world).split([p.numel() for p in bucket])):
                p.grad.copy_(average.view_as(p))
        sent, self.arrived, self.pending = len(self.pending), [0] * len(self.buckets), []
        if sent < len(self.buckets):
            raise missing_gradient(sent, self.buckets)
