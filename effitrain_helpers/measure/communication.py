"""How often, and how much, do the processes of a training run talk to each other? (lesson 3.2)

:class:`CommunicationCounter` runs inside each process of a group and records every collective a training
loop triggers:

- every ``torch.distributed.all_reduce`` called from Python, which is how ``accelerate.local_sgd.LocalSGD``
  averages the parameters;
- the gradient all-reduces of ``DistributedDataParallel``, which normally happen in C++: a communication hook
  (the standard averaging all-reduce) routes them through ``torch.distributed.all_reduce``, where they are
  counted.

The loop calls ``counter.step()`` after each optimizer step; a step *synchronised* if any bytes were
exchanged during it. Plain data parallelism synchronises at every step; local SGD with ``k`` steps at every
k-th step only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class CommunicationSummary:
    """What a :class:`CommunicationCounter` recorded: optimizer steps, the steps that exchanged data
    (1-based), collective calls, bytes sent by this process and seconds blocked in Python-level all-reduces."""

    steps: int
    synchronised_steps: list[int]
    calls: int
    bytes: int
    blocked_seconds: float

    @property
    def synchronisations(self) -> int:
        """How many steps exchanged data."""
        return len(self.synchronised_steps)


@dataclass
class CommunicationCounter:
    """Counts collectives (calls, bytes, seconds spent blocked in Python-level all-reduces) per step."""

    calls: int = 0
    bytes: int = 0
    blocked_seconds: float = 0.0
    steps: int = 0
    synchronised_steps: list[int] = field(default_factory=list)
    _bytes_at_last_step: int = 0
    _original_all_reduce: object = None

    def watch(self, model=None) -> "CommunicationCounter":
        """Start counting: patch ``torch.distributed.all_reduce`` and, if ``model`` is a DDP model, register
        a counting communication hook on it (before its first backward). Returns ``self``."""
        import torch.distributed as dist

        if self._original_all_reduce is None:
            self._original_all_reduce = dist.all_reduce
            original = self._original_all_reduce

            def counted_all_reduce(tensor, *args, **kwargs):
                start = time.perf_counter()
                result = original(tensor, *args, **kwargs)
                self.blocked_seconds += time.perf_counter() - start
                self._record(tensor.numel() * tensor.element_size())
                return result

            dist.all_reduce = counted_all_reduce
        if model is not None and hasattr(model, "register_comm_hook"):
            model.register_comm_hook(None, self._ddp_hook)
        return self

    def stop(self) -> None:
        """Stop counting Python-level all-reduces (restore ``torch.distributed.all_reduce``)."""
        import torch.distributed as dist

        if self._original_all_reduce is not None:
            dist.all_reduce = self._original_all_reduce
            self._original_all_reduce = None

    def _record(self, nbytes: int) -> None:
        self.calls += 1
        self.bytes += nbytes

    def _ddp_hook(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(None, bucket)  # calls torch.distributed.all_reduce: counted there

    def step(self) -> None:
        """Mark the end of one optimizer step (records whether it synchronised)."""
        self.steps += 1
        if self.bytes > self._bytes_at_last_step:
            self.synchronised_steps.append(self.steps)
        self._bytes_at_last_step = self.bytes

    def summary(self) -> CommunicationSummary:
        """Steps, synchronised steps, collective calls, bytes and blocked seconds so far."""
        return CommunicationSummary(self.steps, list(self.synchronised_steps), self.calls, self.bytes,
                                    self.blocked_seconds)
