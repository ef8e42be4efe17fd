"""One training run with any combination of chapter 3's techniques (``effitrain efficiency``, the 3.3 widget).

:class:`Techniques` says which techniques a run uses (gradient accumulation, gradient checkpointing, mixed
precision, local SGD) and the workload; :func:`run_techniques` trains the lesson model with them in this
process or in each process of a group, the way lessons 2.2 and 3.1-3.3 teach (an ``Accelerator``, prepared
model, optimizer and data loader), and returns a :class:`TechniquesRun`; :func:`measure_techniques` runs it in
fresh processes. The lessons write the same loops in plain sight; this module serves the measurements.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace

from effitrain_helpers.core.language import tr
from effitrain_helpers.measure.communication import CommunicationSummary
from effitrain_helpers.training.checkpointing import set_checkpointing
from effitrain_helpers.training.workload import check_steps, lesson_model, lesson_rows

PRECISIONS = ("fp32", "bf16", "fp16")
ACCELERATE_NAME = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}  # Accelerator(mixed_precision=...)


def resolve_precision(precision: str, device: str = "cpu") -> tuple[str, str]:
    """The precision that will really run for ``precision`` on ``device`` ('cpu', 'cuda', 'mps'), and a note.

    Returns ``(effective, note)``: ``effective`` is one of :data:`PRECISIONS`. A precision the device cannot run
    raises ``ValueError``; one that Accelerate quietly ignores (fp16 on a CPU) comes back as 'fp32' with a note
    saying so, never as a silent change.
    """
    import torch

    if precision not in PRECISIONS:
        raise ValueError(tr("precision={precision!r} is unknown: use one of {precisions}.",
                            precision=precision, precisions=', '.join(PRECISIONS)))
    if device not in ("cpu", "cuda", "mps"):
        raise ValueError(tr("device={device!r} is unknown: use 'cpu', 'cuda' or 'mps'.", device=device))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(tr("device='cuda' but no CUDA GPU is visible here. Fix: use device='cpu'."))
    if precision == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ValueError(tr("{gpu} cannot run bf16 (it needs compute capability 8.0+). Fix: use "
                            "precision='fp16' with a GradScaler, or 'fp32'.",
                            gpu=torch.cuda.get_device_name()))
    if precision == "fp16" and device == "cpu":
        return "fp32", tr("fp16 on a CPU: Accelerate does not autocast to fp16 there, so this runs in fp32 "
                          "(same numbers as fp32). Use bf16 on a CPU, fp16 on a GPU.")
    return precision, ""


@dataclass
class Techniques:
    """Which of chapter 3's techniques a training run uses, and the workload. Checked on creation.

    ``batch_size`` is the batch per optimizer step and process; with ``accumulation_steps=k`` it is cut into k
    micro-batches. ``local_sgd_steps=None`` means plain data parallelism (gradients averaged every step);
    ``gradient_sync=False`` switches all communication off (the compute-only reference).
    """

    accumulation_steps: int = 1
    checkpointing: bool = False
    precision: str = "fp32"
    local_sgd_steps: int | None = None
    gradient_sync: bool = True
    steps: int = 8
    batch_size: int = 8
    seq_len: int = 64
    learning_rate: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        check_steps("gradient_accumulation_steps", self.accumulation_steps)
        if self.local_sgd_steps is not None:
            check_steps("local_sgd_steps", self.local_sgd_steps)
        for name in ("steps", "batch_size", "seq_len"):
            check_steps(name, getattr(self, name))
        if self.precision not in PRECISIONS:
            raise ValueError(tr("precision={precision!r} is unknown: use one of {precisions}.",
                                precision=self.precision, precisions=', '.join(PRECISIONS)))
        if self.batch_size % self.accumulation_steps:
            raise ValueError(tr("batch_size={batch_size} cannot be cut into {accumulation_steps} equal "
                                "micro-batches. Fix: use a batch_size that is a multiple of {accumulation_steps}.",
                                batch_size=self.batch_size, accumulation_steps=self.accumulation_steps))
        if not self.learning_rate > 0:
            raise ValueError(tr("learning_rate={learning_rate!r} must be a positive number, e.g. 1e-3.",
                                learning_rate=self.learning_rate))


@dataclass
class TechniquesRun:
    """What one process measured in a :func:`run_techniques` run (or, from :func:`measure_techniques`, rank 0's
    figures with the slowest rank's time, the loss averaged over ranks and ``replicas_agree`` filled in)."""

    rank: int
    world_size: int
    techniques: Techniques
    precision_effective: str
    note: str
    compute_dtype: list[str]            # the dtype(s) the matrix products ran in
    parameter_dtype: str
    local_sgd_enabled: bool
    losses: list[float]                 # per optimizer step (mean over its micro-batches)
    fingerprints: list[str]             # of the weights after each optimizer step
    seconds_per_step: float             # median
    activation_bytes: int               # saved for backward by one micro-batch
    communication: CommunicationSummary
    closing_bytes: int                  # sent after the loop (LocalSGD's closing average)
    parameter_bytes: int
    matmul_weights: int                 # weights of the nn.Linear layers (autocast copies them to 16 bits)
    final_fingerprint: str
    state_dict: dict | None = field(default=None, repr=False)   # the final weights, on the CPU
    replicas_agree: bool | None = None  # all ranks ended with identical weights (measure_techniques)
    step_seconds: list[float] = field(default_factory=list)  # each timed step (the first one left out)

    @property
    def time_doubt(self) -> str:
        """Why ``seconds_per_step`` cannot be trusted (its steps spread too much), or "" when it can
        (:func:`~effitrain_helpers.measure.bench.unreliable_reason`)."""
        from effitrain_helpers.measure.bench import unreliable_reason

        return unreliable_reason(self.step_seconds)


class _watch_compute_dtype:
    """Records the output dtype of the model's first ``nn.Linear`` (the precision matrix products ran in)."""

    def __init__(self, model) -> None:
        import torch

        self.seen: set[str] = set()
        layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        self._handle = layer.register_forward_hook(
            lambda module, inputs, output: self.seen.add(str(output.dtype).removeprefix("torch.")))

    def remove(self) -> None:
        self._handle.remove()


def run_techniques(techniques: Techniques) -> TechniquesRun:
    """Train the lesson model with ``techniques`` in this process, or in each process of a group (the prepared
    data loader gives each rank its own batches). Use a fresh process for a precision other than the first one
    this process used: Accelerate fixes the precision when its first ``Accelerator`` is created."""
    import contextlib

    import torch
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD
    from torch.utils.data import DataLoader

    from effitrain_helpers.measure.bench import synchronize
    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.measure.saved_memory import SavedTensors
    from effitrain_helpers.processes.group import cpu_group_requested
    from effitrain_helpers.training.runs import weights_fingerprint

    t = techniques
    device = "cuda" if torch.cuda.is_available() else "cpu"
    effective, note = resolve_precision(t.precision, device)
    accelerator = Accelerator(gradient_accumulation_steps=t.accumulation_steps,
                              cpu=device == "cpu" and cpu_group_requested(),
                              mixed_precision=ACCELERATE_NAME[t.precision])
    world = accelerator.num_processes
    rows = lesson_rows(t.steps * world * t.batch_size, t.seq_len, t.seed)
    model = lesson_model(t.seed)
    set_checkpointing(model, t.checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
    model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                   DataLoader(rows, batch_size=t.batch_size // t.accumulation_steps))
    counter = CommunicationCounter().watch(model)
    dtypes = _watch_compute_dtype(model)
    k = t.local_sgd_steps or 1
    quiet = contextlib.nullcontext() if t.gradient_sync else accelerator.no_sync(model)
    losses, fingerprints, seconds, saved, started = [], [], [], None, time.perf_counter()
    with quiet, LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k, enabled=k > 1) as local_sgd:
        for batch in loader:
            with accelerator.accumulate(model):
                counting = SavedTensors(model.parameters(), model) if saved is None else contextlib.nullcontext()
                with counting as counted:
                    loss = model(**batch).loss
                saved = saved or counted
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            if accelerator.sync_gradients:  # an optimizer step happened
                local_sgd.step()
                synchronize(device)
                seconds.append(time.perf_counter() - started)
                counter.step()
                fingerprints.append(weights_fingerprint(accelerator.unwrap_model(model)))
                started = time.perf_counter()
        in_loop = counter.summary()
    counter.stop()
    dtypes.remove()
    net = accelerator.unwrap_model(model)
    k_acc = t.accumulation_steps
    return TechniquesRun(
        rank=accelerator.process_index, world_size=world, techniques=t, precision_effective=effective, note=note,
        compute_dtype=sorted(dtypes.seen), parameter_dtype=str(next(net.parameters()).dtype).removeprefix("torch."),
        local_sgd_enabled=local_sgd.enabled,
        losses=[statistics.fmean(losses[i:i + k_acc]) for i in range(0, len(losses), k_acc)],
        fingerprints=fingerprints, seconds_per_step=statistics.median(seconds[1:] or seconds),
        step_seconds=seconds[1:] or seconds,
        activation_bytes=saved.activation_bytes, communication=in_loop, closing_bytes=counter.bytes - in_loop.bytes,
        parameter_bytes=sum(p.numel() * p.element_size() for p in net.parameters()),
        matmul_weights=sum(m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Linear)),
        final_fingerprint=weights_fingerprint(net),
        state_dict={name: value.detach().cpu().clone() for name, value in net.state_dict().items()})


def measure_techniques(techniques: Techniques, num_processes: int = 1) -> TechniquesRun:
    """:func:`run_techniques` in ``num_processes`` fresh processes: rank 0's figures without the weights, the
    slowest rank's seconds per step, the loss averaged over ranks, and whether all replicas ended identical."""
    from effitrain_helpers.processes.launch import launch

    if not isinstance(techniques, Techniques):
        raise TypeError(tr("techniques must be a techniques.Techniques(...); got {kind}.",
                           kind=type(techniques).__name__))
    check_steps("num_processes", num_processes)
    ranks = launch(run_techniques, techniques, num_processes=num_processes, quiet=True)
    slowest = max(ranks, key=lambda r: r.seconds_per_step)
    return replace(ranks[0], state_dict=None, seconds_per_step=slowest.seconds_per_step,
                   step_seconds=slowest.step_seconds,
                   losses=[statistics.fmean(s) for s in zip(*(r.losses for r in ranks))],
                   replicas_agree=len({r.final_fingerprint for r in ranks}) == 1)
