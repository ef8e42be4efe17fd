"""What does gradient accumulation save and cost, here? (lesson 3.1; a row of ``effitrain efficiency``)

:func:`measure_accumulation` measures, in this process and without an ``Accelerator``, the activation bytes one
micro-batch of b keeps for backward next to one batch of k*b (theory: k times fewer), and the time of k
micro-batch passes next to one pass over the whole batch (theory: the same arithmetic).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from effitrain_helpers.training.workload import check_steps, lesson_batches, lesson_model, split_batches


@dataclass
class AccumulationMeasurement:
    """Activation bytes saved for backward and forward + backward seconds (median) of k micro-batches of b
    against one batch of k*b."""

    micro_batch: int
    accumulation_steps: int
    activation_bytes_micro_batch: int
    activation_bytes_full_batch: int
    seconds_full_batch: float
    seconds_accumulated: float
    time_spread: float = 0.0  # IQR / median of the per-round time ratios (accumulated / full batch)

    @property
    def activation_ratio(self) -> float:
        """Whole batch over micro-batch activation bytes (theory: :attr:`expected_ratio`)."""
        return self.activation_bytes_full_batch / self.activation_bytes_micro_batch

    @property
    def expected_ratio(self) -> float:
        return float(self.accumulation_steps)


def measure_accumulation(micro_batch: int = 4, accumulation_steps: int = 4, seq_len: int = 64,
                         repeats: int = 3) -> AccumulationMeasurement:
    """Accumulation's memory and time on the lesson model (timed alternately after a warm-up, median of
    ``repeats``, so that a busy moment of a shared machine hits both ways alike)."""
    from effitrain_helpers.measure.saved_memory import saved_bytes

    k = check_steps("gradient_accumulation_steps", accumulation_steps)
    model = lesson_model()
    whole = lesson_batches(1, micro_batch * k, seq_len)[0]
    micro = split_batches([whole], k)
    small, large = saved_bytes(model, micro[0]).activation_bytes, saved_bytes(model, whole).activation_bytes
    times: dict[str, list[float]] = {"full_batch": [], "accumulated": []}
    for _ in range(repeats + 1):
        for name, batches in (("full_batch", [whole]), ("accumulated", micro)):
            start = time.perf_counter()
            for batch in batches:
                (model(**batch).loss / len(batches)).backward()
            model.zero_grad(set_to_none=True)
            times[name].append(time.perf_counter() - start)
    from effitrain_helpers.measure.bench import relative_iqr

    rounds = [a / f for a, f in zip(times["accumulated"][1:], times["full_batch"][1:])]
    return AccumulationMeasurement(micro_batch, k, small, large, statistics.median(times["full_batch"][1:]),
                                   statistics.median(times["accumulated"][1:]), relative_iqr(rounds))
