"""What does gradient (activation) checkpointing save and cost, here? (lesson 3.2; a row of ``effitrain efficiency``)

The course calls it *gradient checkpointing*; transformers 5 names the switch ``activation_checkpointing_enable()``
(``gradient_checkpointing_enable()`` is its deprecated alias until v6). Each checkpointed layer keeps only its
inputs and recomputes the rest during backward (``torch.utils.checkpoint.checkpoint``).

:func:`measure_checkpointing` gives, per sequence length, a :class:`CheckpointingRow`: the activation bytes
saved for backward without and with it (an exact count, next to theory), the step time without and with it,
and, on a CUDA GPU, the peak memory of a step (``torch.cuda.max_memory_allocated``). The peak is what decides
whether a batch fits; a CPU has no such counter, so there the row holds ``None`` and the lesson says so.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from effitrain_helpers.training.workload import lesson_batches, lesson_model


def set_checkpointing(model, enabled: bool) -> None:
    """Switch gradient (activation) checkpointing on or off in a transformers model."""
    if enabled:
        model.activation_checkpointing_enable()
    else:
        model.activation_checkpointing_disable()


def _step(model, batch) -> None:
    model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)


def checkpointing_step_times(model, batch: dict, repeats: int = 3) -> dict[bool, list[float]]:
    """Seconds of each of ``repeats`` forward + backward passes on ``batch`` without (False) and with (True)
    checkpointing, timed alternately after a warm-up of each, so that a busy moment of a shared machine hits
    both alike."""
    from effitrain_helpers.measure.bench import synchronize

    device = next(model.parameters()).device.type
    times: dict[bool, list[float]] = {False: [], True: []}
    for enabled in (False, True, *([False, True] * repeats)):
        set_checkpointing(model, enabled)
        start = time.perf_counter()
        _step(model, batch)
        synchronize(device)
        times[enabled].append(time.perf_counter() - start)
    set_checkpointing(model, False)
    return {enabled: values[1:] for enabled, values in times.items()}


def peak_step_bytes(model, batch: dict) -> int | None:
    """The most memory a CUDA GPU held during one forward + backward on ``batch``, above what was allocated
    before it (weights, the batch): activations, gradients and temporaries together. ``None`` on a CPU, whose
    allocator keeps no such count."""
    import torch

    if next(model.parameters()).device.type != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    _step(model, batch)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


@dataclass
class CheckpointingRow:
    """One sequence length, without (``_off``) and with (``_on``) checkpointing. ``*_peak_bytes`` is None where
    no peak can be measured (a CPU)."""

    seq_len: int
    batch_size: int
    activation_bytes_off: int
    activation_bytes_on: int
    activation_bytes_on_expected: int
    step_seconds_off: float
    step_seconds_on: float
    peak_bytes_off: int | None = None
    peak_bytes_on: int | None = None
    time_spread: float = 0.0  # IQR / median of the per-round time ratios (on / off)

    @property
    def memory_saved(self) -> float:
        """The fraction of the bytes saved for backward that checkpointing removes (not the peak memory)."""
        return 1 - self.activation_bytes_on / self.activation_bytes_off

    @property
    def peak_saved(self) -> float | None:
        """The fraction of a step's peak memory that checkpointing removes (None on a CPU)."""
        if self.peak_bytes_off is None or self.peak_bytes_on is None:
            return None
        return 1 - self.peak_bytes_on / self.peak_bytes_off

    @property
    def time_added(self) -> float:
        return self.step_seconds_on / self.step_seconds_off - 1


def measure_checkpointing(seq_lens: tuple[int, ...] = (32, 64, 128), batch_size: int = 8,
                          repeats: int = 3) -> list[CheckpointingRow]:
    """For each sequence length, on the lesson model (on a CUDA GPU if there is one, else the CPU): the bytes
    saved for backward without and with checkpointing, and the theory for "with" (everything saved inside the
    layers dropped, one input of batch x length x hidden size kept per layer); the step time without and
    with it; and the peak memory of a step where it can be measured."""
    import torch

    from effitrain_helpers.measure.bench import relative_iqr
    from effitrain_helpers.measure.saved_memory import checkpointable_layers, saved_bytes

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = lesson_model().to(device)
    layers = len(checkpointable_layers(model))
    width, item = model.config.hidden_size, next(model.parameters()).element_size()
    rows = []
    for seq_len in seq_lens:
        batch = {k: v.to(device) for k, v in lesson_batches(1, batch_size, seq_len)[0].items()}
        off, peak_off = saved_bytes(model, batch), peak_step_bytes(model, batch)
        set_checkpointing(model, True)
        on, peak_on = saved_bytes(model, batch), peak_step_bytes(model, batch)
        times = checkpointing_step_times(model, batch, repeats)
        expected = off.activation_bytes - off.inside_layer_bytes + layers * batch_size * seq_len * width * item
        rows.append(CheckpointingRow(seq_len, batch_size, off.activation_bytes, on.activation_bytes, expected,
                                     statistics.median(times[False]), statistics.median(times[True]), peak_off,
                                     peak_on, relative_iqr([b / a for a, b in zip(times[False], times[True])])))
    return rows
