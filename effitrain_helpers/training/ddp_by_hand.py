"""Does a hand-written gradient sync train exactly like ``DistributedDataParallel``? (lesson 6.2)

Everything here runs inside one rank of a process group (started by
:func:`~effitrain_helpers.processes.launch.launch`) and is *not* what the lesson teaches: the model, each
rank's data shard, a training loop that calls the learner's sync functions where data parallelism needs
them, the same loop through torch's DDP as the reference, and a timer for the lesson's overlap measurement.
The sync functions themselves (broadcast, all-reduce, hooks, buckets) are written in the notebook.

- :func:`sync_model`: an MLP whose weights depend on ``seed`` (each rank passes its own, so ranks really
  start apart unless someone broadcasts);
- :func:`shard`: rank ``r``'s micro-batch ``i`` of step ``s``, the same on every call, different per rank;
- :func:`train_by_hand` / :func:`train_with_ddp`: the same steps, on the same shards, by hand and by DDP;
- :func:`time_steps`: seconds per step of several step functions, in interleaved rounds after a warm-up.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

LR = 0.1  # plain SGD: the weights move by exactly lr x the averaged gradient, so 1e-6 means "the same"


def sync_model(seed: int, width: int = 8, depth: int = 2):
    """A ``depth``-layer tanh MLP ``width -> ... -> 1`` (float32), weights drawn from ``seed``."""
    import torch

    torch.manual_seed(seed)
    layers = []
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def shard(rank: int, step: int, micro: int = 0, batch: int = 4, width: int = 8):
    """``(inputs, targets)`` of rank ``rank``'s micro-batch ``micro`` at optimizer step ``step``."""
    import torch

    generator = torch.Generator().manual_seed(10_000 * rank + 100 * step + micro)
    return torch.randn(batch, width, generator=generator), torch.randn(batch, 1, generator=generator)


def loss_of(model, inputs, targets):
    """The loss every run here minimises: mean squared error of ``model(inputs)``."""
    import torch

    return torch.nn.functional.mse_loss(model(inputs), targets)


def flat_weights(model):
    """Every parameter of ``model`` in one detached float32 vector (a copy)."""
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def flat_grads(model):
    """Every parameter's gradient in one vector (a copy; zeros where a gradient is missing)."""
    import torch

    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                      for p in model.parameters()]).clone()


@dataclass
class ReplicaRecord:
    """What one rank's run recorded: its weights at the start (after the learner's broadcast) and the end,
    its gradients of step 1 before and after the learner's sync, the optimizer steps taken, the collective
    calls counted (by collective: ``start_calls`` before the first step, ``calls`` in all) and the bytes
    exchanged in each optimizer step."""

    rank: int
    world_size: int
    start: object
    final: object
    local_grads: object = None
    synced_grads: object = None
    optimizer_steps: int = 0
    calls: dict = field(default_factory=dict)
    start_calls: dict = field(default_factory=dict)
    bytes_per_step: list = field(default_factory=list)
    parameter_bytes: int = 0


def _counted(run: Callable, collectives=("all_reduce", "broadcast", "reduce")):
    """``run(counter)`` with a :class:`CommunicationCounter` watching ``collectives``; the counter after it."""
    from effitrain_helpers.measure.communication import CommunicationCounter

    counter = CommunicationCounter(collectives=collectives).watch()
    try:
        run(counter)
    finally:
        counter.stop()
    return counter


def train_by_hand(broadcast, average, steps: int = 3, width: int = 8) -> ReplicaRecord:
    """In each rank: a model from this rank's own seed, ``broadcast(model)`` (None: skipped), then ``steps``
    SGD steps on this rank's shard, calling ``average(model)`` after each ``loss.backward()``."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    model = sync_model(seed=rank, width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    record = ReplicaRecord(rank, world, None, None,
                           parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()))

    def run(counter):
        if broadcast is not None:
            broadcast(model)
        record.start, record.start_calls = flat_weights(model), dict(counter.calls_by_collective)
        for step in range(steps):
            before = counter.bytes
            loss_of(model, *shard(rank, step, width=width)).backward()
            if step == 0:
                record.local_grads = flat_grads(model)
            average(model)
            if step == 0:
                record.synced_grads = flat_grads(model)
            optimizer.step()
            optimizer.zero_grad()
            record.bytes_per_step.append(counter.bytes - before)

    counter = _counted(run)
    record.calls, record.final = dict(counter.calls_by_collective), flat_weights(model)
    record.optimizer_steps = steps
    return record


def train_accumulated_by_hand(train, steps: int = 2, k: int = 4, width: int = 8) -> ReplicaRecord:
    """In each rank: rank 0's weights (``sync_model(0)``: no broadcast needed), then the learner's
    ``train(model, optimizer, micro_batches, k)`` on this rank's ``steps * k`` micro-batches, counted."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    model = sync_model(seed=0, width=width)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    record = ReplicaRecord(rank, world, flat_weights(model), None,
                           parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()))
    optimizer.register_step_post_hook(lambda *_: setattr(record, "optimizer_steps", record.optimizer_steps + 1))
    micro_batches = [shard(rank, s, i, width=width) for s in range(steps) for i in range(k)]
    counter = _counted(lambda counter: train(model, optimizer, micro_batches, k))
    record.calls, record.final = dict(counter.calls_by_collective), flat_weights(model)
    record.bytes_per_step = [counter.bytes]
    return record


def train_with_ddp(steps: int = 3, k: int = 1, width: int = 8):
    """The reference in each rank: rank 0's weights through torch's ``DistributedDataParallel`` (which
    broadcasts them when it wraps the model), the same shards, ``k`` micro-batches per step (``no_sync`` on
    the first ``k - 1``, each loss divided by ``k``). Returns the final weights as one vector."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = dist.get_rank()
    ddp = DistributedDataParallel(sync_model(seed=rank, width=width))  # DDP broadcasts rank 0's
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    for step in range(steps):
        for i in range(k):
            with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
                (loss_of(ddp, *shard(rank, step, i, width=width)) / k).backward()
        optimizer.step()
        optimizer.zero_grad()
    return flat_weights(ddp.module)


def time_steps(ways: dict[str, Callable[[], object]], steps: int, warmup: int = 2,
               deadline: float | None = None) -> dict[str, list[float]]:
    """Seconds of each of ``steps`` calls of every way's step function, after ``warmup`` untimed rounds, in
    interleaved rounds (each round calls every way once, so a busy moment hits all ways alike and shows as a
    spread); every rank calls a barrier before each call, so the ranks start each step together.

    With ``deadline`` (``time.time()`` seconds: a timing cell's
    :attr:`~effitrain_helpers.measure.bench.StepBudget.deadline`), no timed round starts past it once
    :data:`~effitrain_helpers.measure.bench.MIN_STEPS` rounds are timed: the ranks decide together (an
    all-reduce of "past the deadline" before each round), so every rank runs the same rounds and every
    collective finds its partner. Each way then has fewer than ``steps`` seconds."""
    import torch.distributed as dist

    from effitrain_helpers.measure.bench import MIN_STEPS

    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(warmup + steps):
        if deadline is not None and i >= warmup + MIN_STEPS and _any_rank_past(deadline):
            break
        for name, step in ways.items():
            dist.barrier()
            start = time.perf_counter()
            step()
            if i >= warmup:
                seconds[name].append(time.perf_counter() - start)
    return seconds


def _any_rank_past(deadline: float) -> bool:
    """Whether any rank of the group is past ``deadline`` (``time.time()`` seconds); every rank must call it."""
    import torch
    import torch.distributed as dist

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    past = torch.tensor([float(time.time() > deadline)], device=device)
    dist.all_reduce(past, op=dist.ReduceOp.MAX)
    return bool(past.item())


def median_ms(seconds: list[float]) -> float:
    """The median of ``seconds``, in milliseconds."""
    return statistics.median(seconds) * 1e3
