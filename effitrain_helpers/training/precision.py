"""Is 16-bit training faster, smaller and as good, here? (lesson 3.3; a row of ``effitrain efficiency``)

:func:`low_precision` picks the 16-bit type this hardware runs (bf16 on CPUs, which ``torch.autocast`` supports
on every CPU, and on NVIDIA GPUs from Ampere on; fp16 on older GPUs); :func:`measure_precision` trains the same
workload in each precision, each in a fresh process (Accelerate fixes the precision when a process creates its
first ``Accelerator``); :func:`low_precision_memory_ratio` is the theory for the activation bytes.
"""

from __future__ import annotations

from dataclasses import replace

from effitrain_helpers.core.language import tr
from effitrain_helpers.training.techniques import PRECISIONS, Techniques, TechniquesRun, measure_techniques, run_techniques

TORCH_NAME = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def low_precision(device: str | None = None) -> str:
    """The 16-bit type to teach on ``device`` (default: CUDA if present, else the CPU): 'bf16' on CPUs and on
    GPUs with bf16 units (NVIDIA Ampere and later), 'fp16' on older GPUs."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return "fp16"
    return "bf16"


def low_precision_memory_ratio(fp32_run: TechniquesRun) -> float:
    """Theory for 16-bit autocast, as a ratio to float32's activation bytes: activations halve, but backward
    also keeps the 16-bit copy autocast made of each matrix-product weight (2 bytes per weight)."""
    return (fp32_run.activation_bytes / 2 + 2 * fp32_run.matmul_weights) / fp32_run.activation_bytes


def training_step_seconds(accelerator, model, optimizer, batch: dict, repeats: int = 3) -> float:
    """Seconds of one training step (forward, backward, optimizer step) of an ``accelerator``-prepared ``model``
    on ``batch`` in this process: the fastest of ``repeats`` steps after a warm-up step (the least disturbed by
    other programs). Lesson 3.3 times its runs' step this way before them, to say how long they take."""
    from effitrain_helpers.measure.bench import fastest_seconds

    def step() -> None:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()

    return fastest_seconds(step, repeats, str(accelerator.device))


def measure_precision(precisions: tuple[str, ...] = PRECISIONS, steps: int = 8, batch_size: int = 8,
                      seq_len: int = 32, in_this_process: str | None = None, budget=None) -> dict[str, TechniquesRun]:
    """The same training in each precision, each in a fresh process, except ``in_this_process``: a precision
    this process's Accelerate is already set to (lesson 3.3 created its Accelerator with it), which runs here
    and saves starting a process.

    With ``budget`` (a :class:`~effitrain_helpers.measure.bench.StepBudget`), a precision other than fp32 (the
    reference) and ``in_this_process`` is a run the cell can do without: it starts only if a run as long as the
    last fresh process's still fits the budget, and is otherwise left out (``budget.left_out`` says why)."""
    import time

    out, fresh_s = {}, 0.0
    for precision in precisions:
        techniques = Techniques(precision=precision, steps=steps, batch_size=batch_size, seq_len=seq_len)
        if precision == in_this_process:
            out[precision] = replace(run_techniques(techniques), state_dict=None, replicas_agree=True)
            continue
        optional = budget is not None and precision not in ("fp32", in_this_process)
        if optional and fresh_s and not budget.fits(fresh_s):
            budget.leave_out(precision, tr("a run in a fresh process took {seconds:.0f} s here, and {left:.0f} s "
                                           "were left", seconds=fresh_s, left=max(0.0, budget.deadline - time.time())))
            continue
        began = time.perf_counter()
        out[precision] = measure_techniques(techniques)
        fresh_s = time.perf_counter() - began
    return out
