"""How often, and how much, do the processes of a training run talk to each other? (lessons 3.2, 5.1, 6.4, 8.3)

:class:`CommunicationCounter` runs inside each process of a group and records every collective a training
loop triggers:

- every ``torch.distributed.all_reduce`` called from Python, which is how ``accelerate.local_sgd.LocalSGD``
  averages the parameters;
- the gradient all-reduces of ``DistributedDataParallel``, which normally happen in C++: a communication hook
  (the standard averaging all-reduce) routes them through ``torch.distributed.all_reduce``, where they are
  counted;
- the ``torch.distributed.all_gather_single`` and ``reduce_scatter_single`` calls that ``fully_shard``
  (FSDP2) makes from Python (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``): parameters
  gathered before forward and backward, gradients reduce-scattered after backward (lesson 5.1);
- every ``torch.distributed.broadcast``, which is how ``ZeroRedundancyOptimizer`` sends each parameter from
  the rank that updated it to the others (lesson 6.4);
- ``reduce_scatter`` and ``all_gather`` with a list of pieces, which lesson 6.3's ZeRO by hand uses to send
  gradients and weights straight from and into the tensors where they live;
- on request (``collectives=``), ``isend``: ring attention's point-to-point hops (lesson 8.3), the bytes this
  rank sends (lesson 8.3's sequence parallelism counts ``all_gather_single`` and ``reduce_scatter_single``).

The bytes of a collective are its *payload*, the size of the whole tensor it works on: the tensor of an
all-reduce, the gathered output of an all-gather, the input of a reduce-scatter (padding included).
``bytes_by_collective`` splits them by collective, ``dtypes_by_collective`` names the dtypes each one moved
(lesson 7.1: bfloat16 all-gathers beside float32 reduce-scatters).

The loop calls ``counter.step()`` after each optimizer step; a step *synchronised* if any bytes were
exchanged during it. Plain data parallelism synchronises at every step; local SGD with ``k`` steps at every
k-th step only.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

from effitrain_helpers.core.language import tr

# collective -> the argument whose tensor is its payload (the whole tensor it works on)
PAYLOADS = {"all_reduce": "tensor", "all_gather_single": "output_tensor", "reduce_scatter_single": "input",
            "broadcast": "tensor", "reduce": "tensor", "reduce_scatter": "input_list", "all_gather": "tensor_list",
            "isend": "tensor"}
# what a counter watches unless told otherwise (``CommunicationCounter(collectives=...)`` picks from PAYLOADS);
# broadcast: ZeroRedundancyOptimizer's parameters after its step (lesson 5.1)
COUNTED = {name: PAYLOADS[name]
           for name in ("all_reduce", "all_gather_single", "reduce_scatter_single", "broadcast", "reduce_scatter",
                        "all_gather")}


@dataclass
class CommunicationSummary:
    """What a :class:`CommunicationCounter` recorded: optimizer steps, the steps that exchanged data
    (1-based), collective calls, bytes sent by this process and seconds blocked in Python-level all-reduces."""

    steps: int
    synchronised_steps: list[int]
    calls: int
    bytes: int
    blocked_seconds: float
    bytes_by_collective: dict[str, int] = field(default_factory=dict)

    @property
    def synchronisations(self) -> int:
        """How many steps exchanged data."""
        return len(self.synchronised_steps)


@dataclass
class CommunicationCounter:
    """Counts collectives (calls, bytes, seconds spent blocked in Python-level collectives) per step.

    ``collectives`` names the ``torch.distributed`` functions watched (keys of :data:`PAYLOADS`; default
    :data:`COUNTED`); lesson 6.2 adds ``broadcast`` and ``reduce`` to see which one a learner called.
    """

    collectives: tuple = tuple(COUNTED)
    calls: int = 0
    bytes: int = 0
    blocked_seconds: float = 0.0
    steps: int = 0
    synchronised_steps: list[int] = field(default_factory=list)
    bytes_by_collective: dict[str, int] = field(default_factory=dict)
    calls_by_collective: dict[str, int] = field(default_factory=dict)
    dtypes_by_collective: dict[str, set] = field(default_factory=dict)  # e.g. {"all_gather_single": {"bfloat16"}}
    _bytes_at_last_step: int = 0
    _originals: dict = field(default_factory=dict)

    def watch(self, model=None) -> "CommunicationCounter":
        """Start counting: patch the watched collectives on ``torch.distributed`` and, if ``model``
        is a DDP model, register a counting communication hook on it (before its first backward).
        Returns ``self``."""
        import torch.distributed as dist

        unknown = sorted(set(self.collectives) - set(PAYLOADS))
        if unknown:
            raise ValueError(tr("collectives={unknown} cannot be counted; choose among {payloads}.",
                                unknown=unknown, payloads=sorted(PAYLOADS)))
        for name in self.collectives:
            payload = PAYLOADS[name]
            if name not in self._originals:
                self._originals[name] = getattr(dist, name)
                setattr(dist, name, self._counted(name, payload, self._originals[name]))
        if model is not None and hasattr(model, "register_comm_hook"):
            model.register_comm_hook(None, self._ddp_hook)
        return self

    def _counted(self, name: str, payload: str, original):
        """``original`` wrapped: the call runs as before, its payload's bytes and blocked time recorded."""
        signature = inspect.signature(original)

        def counted(*args, **kwargs):
            tensor = signature.bind(*args, **kwargs).arguments[payload]
            start = time.perf_counter()
            result = original(*args, **kwargs)
            self.blocked_seconds += time.perf_counter() - start
            tensors = tensor if isinstance(tensor, (list, tuple)) else [tensor]  # a list: its pieces, all of them
            self._record(name, sum(t.numel() * t.element_size() for t in tensors))
            self.dtypes_by_collective.setdefault(name, set()).update(str(t.dtype).removeprefix("torch.")
                                                                     for t in tensors)
            return result

        return counted

    def stop(self) -> None:
        """Stop counting Python-level collectives (restore the originals on ``torch.distributed``)."""
        import torch.distributed as dist

        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def _record(self, name: str, nbytes: int) -> None:
        self.calls += 1
        self.bytes += nbytes
        self.bytes_by_collective[name] = self.bytes_by_collective.get(name, 0) + nbytes
        self.calls_by_collective[name] = self.calls_by_collective.get(name, 0) + 1

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
        """Steps, synchronised steps, collective calls, bytes (also by collective) and blocked seconds so far."""
        return CommunicationSummary(self.steps, list(self.synchronised_steps), self.calls, self.bytes,
                                    self.blocked_seconds, dict(self.bytes_by_collective))
