"""How much communication does local SGD save, and when do the replicas agree? (lesson 3.2; ``effitrain efficiency``)

Plain data parallelism averages gradients at every step; ``accelerate.local_sgd.LocalSGD`` averages the
parameters every k steps (and once more when its ``with`` block ends). :func:`measure_local_sgd` trains the
same workload both ways, and without any communication, in N real processes (:func:`compare_data_parallel` in
each), and :func:`summarize_data_parallel` turns every rank's runs into one :class:`WaySummary` per way.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.measure.communication import CommunicationSummary
from effitrain_helpers.training.runs import weights_fingerprint
from effitrain_helpers.training.techniques import Techniques, run_techniques
from effitrain_helpers.training.workload import check_steps


@dataclass
class ReplicaRun:
    """What one process of a data-parallel run reports for :func:`summarize_data_parallel` (lesson 3.2's own
    loop returns one, made by :class:`ReplicaRecorder`;
    :class:`~effitrain_helpers.training.techniques.TechniquesRun` has the same fields)."""

    world_size: int
    local_sgd_enabled: bool
    losses: list[float]
    fingerprints: list[str]            # of the weights after each optimizer step
    communication: CommunicationSummary
    closing_bytes: int                 # sent after the loop: LocalSGD's closing average
    seconds_per_step: float
    final_fingerprint: str
    parameter_bytes: int


class ReplicaRecorder:
    """The bookkeeping of lesson 3.2's loop in one process, kept out of the loop so that it shows only training.

    Counts what the process sends (a :class:`CommunicationCounter` on the prepared model), times each step
    (``with recorder.step():`` around the step itself), and after each step keeps its loss and a fingerprint of
    the weights (:meth:`after_step`, not timed). :meth:`end_of_loop` marks where the loop ended, inside the
    ``LocalSGD`` block, so that :meth:`run` can tell the loop's bytes from LocalSGD's closing average.
    """

    def __init__(self, accelerator, model):
        from effitrain_helpers.measure.communication import CommunicationCounter

        self.world_size = accelerator.num_processes
        self.net = accelerator.unwrap_model(model)
        self.counter = CommunicationCounter().watch(model)
        self.losses: list[float] = []
        self.fingerprints: list[str] = []
        self.seconds: list[float] = []
        self.in_loop: CommunicationSummary | None = None

    @contextmanager
    def step(self):
        """Time the block: one training step."""
        start = time.perf_counter()
        yield
        self.seconds.append(time.perf_counter() - start)

    def after_step(self, loss) -> None:
        """Keep the step's loss and the weights' fingerprint; count whether the step sent anything."""
        self.losses.append(loss.item())
        self.counter.step()
        self.fingerprints.append(weights_fingerprint(self.net))

    def end_of_loop(self) -> None:
        """Call inside the ``LocalSGD`` block, after the loop: what was sent so far was sent by the loop."""
        self.in_loop = self.counter.summary()

    def run(self, local_sgd_enabled: bool) -> ReplicaRun:
        """Stop counting and report: the bytes sent after :meth:`end_of_loop` are LocalSGD's closing average;
        the time per step is the median without the first step (warm-up)."""
        if self.in_loop is None:
            raise RuntimeError(tr("call end_of_loop() inside the LocalSGD block, after the loop, before run()."))
        self.counter.stop()
        return ReplicaRun(self.world_size, local_sgd_enabled, self.losses, self.fingerprints, self.in_loop,
                          self.counter.bytes - self.in_loop.bytes, statistics.median(self.seconds[1:]),
                          weights_fingerprint(self.net),
                          sum(p.numel() * p.element_size() for p in self.net.parameters()))


@dataclass
class WaySummary:
    """One way of training (plain data parallel, local SGD, no communication) across all ranks."""

    world_size: int
    steps: int
    local_sgd_enabled: bool
    synchronised_steps: list[int]      # steps that exchanged data (rank 0's count; every rank's is the same)
    calls: int
    bytes_per_rank: int                # sent in the loop by each process
    closing_bytes: int
    parameter_bytes: int
    seconds_per_step: float            # the slowest rank's median
    agreeing_steps: list[int]          # steps after which every rank held bit-identical weights
    final_agree: bool
    mean_losses: list[float]           # per step, averaged over ranks

    @property
    def synchronisations(self) -> int:
        return len(self.synchronised_steps)


def agreeing_steps(ranks: list) -> list[int]:
    """The optimizer steps (1-based) after which every rank held bit-identical weights."""
    return [i + 1 for i, prints in enumerate(zip(*(r.fingerprints for r in ranks))) if len(set(prints)) == 1]


def compare_data_parallel(local_sgd_steps: int = 4, steps: int = 24, batch_size: int = 8,
                          accumulation_steps: int | None = None) -> dict:
    """Run in each process of a group: the same training, one way after the other: plain data parallel,
    LocalSGD every ``local_sgd_steps`` steps, no communication at all, and (if ``accumulation_steps``) plain
    data parallel with gradient accumulation. Returns {way: TechniquesRun} without the weights."""
    k = check_steps("local_sgd_steps", local_sgd_steps)
    ways = {"data_parallel": Techniques(steps=steps, batch_size=batch_size),
            "local_sgd": Techniques(local_sgd_steps=k, steps=steps, batch_size=batch_size),
            "no_communication": Techniques(gradient_sync=False, steps=steps, batch_size=batch_size)}
    if accumulation_steps is not None:
        ways["accumulation"] = Techniques(accumulation_steps=accumulation_steps, steps=steps,
                                          batch_size=batch_size * accumulation_steps)
    out = {}
    for name, techniques in ways.items():
        out[name] = run_techniques(techniques)
        out[name].state_dict = None
    return out


def summarize_data_parallel(ranks: list[dict]) -> dict[str, WaySummary]:
    """From every rank's ``{way: run}`` (:func:`compare_data_parallel`, or lesson 3.2's loop), one
    :class:`WaySummary` per way."""
    out = {}
    for way in ranks[0]:
        runs = [r[way] for r in ranks]
        first = runs[0]
        out[way] = WaySummary(
            world_size=first.world_size, steps=len(first.losses), local_sgd_enabled=first.local_sgd_enabled,
            synchronised_steps=first.communication.synchronised_steps, calls=first.communication.calls,
            bytes_per_rank=first.communication.bytes, closing_bytes=first.closing_bytes,
            parameter_bytes=first.parameter_bytes, seconds_per_step=max(r.seconds_per_step for r in runs),
            agreeing_steps=agreeing_steps(runs), final_agree=len({r.final_fingerprint for r in runs}) == 1,
            mean_losses=[statistics.fmean(s) for s in zip(*(r.losses for r in runs))])
    return out


LOCAL_SGD_NEEDS = msg("; local SGD needs a group of at least 2 (in one process LocalSGD switches itself off)")


def measure_local_sgd(local_sgd_steps: int = 4, steps: int = 24, num_processes: int = 2, batch_size: int = 8,
                      accumulation_steps: int | None = None) -> dict[str, WaySummary]:
    """:func:`compare_data_parallel` in ``num_processes`` real processes, summarised."""
    from effitrain_helpers.processes.launch import launch, resolve_num_processes

    check_steps("local_sgd_steps", local_sgd_steps)
    resolve_num_processes(num_processes, minimum=2, why=LOCAL_SGD_NEEDS)
    return summarize_data_parallel(launch(compare_data_parallel, local_sgd_steps, steps, batch_size,
                                          accumulation_steps, num_processes=num_processes, quiet=True))
