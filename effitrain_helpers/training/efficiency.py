"""What does each training-efficiency technique cost and save, here? (chapter 3; ``effitrain efficiency``)

The four techniques of chapter 3 run on one workload (the lesson model and fixed-length batches of sentence
pairs, so memory counts are exact). :func:`run_techniques` is one training loop that combines any of them
(:class:`Techniques` says which); the lessons write the same loops in plain sight, and use this module for
what is measuring, not teaching:

- gradient accumulation (3.1): :func:`measure_accumulation` (activation bytes and time of k micro-batches);
- activation checkpointing (3.2): :func:`measure_checkpointing` (bytes against theory, step time);
- local SGD (3.2): :func:`measure_local_sgd` (synchronisations, bytes, agreement, in N processes);
- mixed precision (3.3): :func:`measure_precision` (one fresh process per precision: Accelerate fixes the
  precision when a process creates its first ``Accelerator``);
- the chapter's summary table (3.3, ``effitrain efficiency``): :func:`measure_chapter`, :func:`chapter_table`;
  the widget of lesson 3.3 runs :func:`measure_techniques`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

PRECISIONS = ("fp32", "bf16", "fp16")
_ACCELERATE_NAME = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
_TORCH_NAME = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def check_steps(name: str, value) -> int:
    """``value`` as a whole number >= 1, else ``ValueError`` naming ``name`` (e.g. ``gradient_accumulation_steps``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed: it must be a whole number >= 1"
                         f"{' (1 means off)' if name.endswith('_steps') else ''}. Fix: pass e.g. {name}=4.")
    return value


def resolve_precision(precision: str, device: str = "cpu") -> tuple[str, str]:
    """The precision that will really run for ``precision`` on ``device`` ('cpu', 'cuda', 'mps'), and a note.

    Returns ``(effective, note)``: ``effective`` is one of :data:`PRECISIONS`. A precision the device cannot run
    raises ``ValueError``; one that Accelerate quietly ignores (fp16 on a CPU) comes back as 'fp32' with a note
    saying so, never as a silent change.
    """
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is unknown: use one of {', '.join(PRECISIONS)}.")
    if device not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={device!r} is unknown: use 'cpu', 'cuda' or 'mps'.")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is visible here. Fix: use device='cpu'.")
    if precision == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ValueError(f"{torch.cuda.get_device_name()} cannot run bf16 (it needs compute capability 8.0+). "
                         "Fix: use precision='fp16' with a GradScaler, or 'fp32'.")
    if precision == "fp16" and device == "cpu":
        return "fp32", ("fp16 on a CPU: Accelerate does not autocast to fp16 there, so this runs in fp32 "
                        "(same numbers as fp32). Use bf16 on a CPU, fp16 on a GPU.")
    return precision, ""


def lesson_rows(n: int, seq_len: int = 64, seed: int = 0) -> list[dict]:
    """``n`` tokenized sentence pairs, each padded (or cut) to exactly ``seq_len`` tokens, as a list of
    ``{"input_ids", "attention_mask", "labels"}`` tensors: a dataset ``Trainer`` accepts as it is."""
    from effitrain_helpers.sources.models import load_classifier
    from effitrain_helpers.training.runs import TrainConfig, build_data

    check_steps("n", n)
    check_steps("seq_len", seq_len)
    import datasets

    _, tokenizer = load_classifier(verbose=False)
    bars = not datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a second's tokenizing: no bar in the lessons' output
    try:
        # at least 64 pairs, so that both classes are present, then the first n
        data, _ = build_data(TrainConfig(n_train=max(n, 64), n_validation=1, max_length=seq_len, seed=seed), tokenizer)
    finally:
        if bars:
            datasets.enable_progress_bars()
    rows = data["train"].select(range(n))
    encoded = tokenizer.pad({"input_ids": rows[:]["input_ids"]}, padding="max_length", max_length=seq_len,
                            return_tensors="pt")
    labels = rows.with_format("torch")[:]["labels"]
    return [{"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i], "labels": labels[i]}
            for i in range(n)]


def lesson_batches(n_batches: int, batch_size: int, seq_len: int = 64, seed: int = 0) -> list[dict]:
    """``n_batches`` batches of ``batch_size`` rows of :func:`lesson_rows` (the same rows every call, so memory
    counts depend on the batch shape only, and runs with different batch sizes see the same samples)."""
    import torch

    check_steps("n_batches", n_batches)
    check_steps("batch_size", batch_size)
    rows = lesson_rows(n_batches * batch_size, seq_len, seed)
    return [{key: torch.stack([row[key] for row in rows[i:i + batch_size]]) for key in rows[0]}
            for i in range(0, len(rows), batch_size)]


def lesson_model(seed: int = 0):
    """The lesson model (the course's DistilBERT classifier, or the workbook's own offline), in training mode,
    with weights that depend only on ``seed`` and dropout switched off: chapter 3 compares runs step by step,
    and dropout would draw different random masks for a batch and for its micro-batches (the workbook's
    offline model has none anyway)."""
    import torch
    from transformers import set_seed

    from effitrain_helpers.sources.models import load_classifier

    set_seed(seed)
    model, _ = load_classifier(verbose=False)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for name in ("dropout", "attention_dropout", "seq_classif_dropout", "hidden_dropout_prob",
                 "attention_probs_dropout_prob"):
        if isinstance(getattr(model.config, name, None), float):
            setattr(model.config, name, 0.0)  # attention kernels read the rate from the config
    return model.train()


def low_precision(device: str | None = None) -> str:
    """The 16-bit type to teach on ``device`` (default: CUDA if present, else the CPU): 'bf16' on CPUs and on
    GPUs with bf16 units (NVIDIA Ampere and later), 'fp16' on older GPUs."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return "fp16"
    return "bf16"


# --- one training run with any combination of the techniques ----------------------------------------------------

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
            raise ValueError(f"precision={self.precision!r} is unknown: use one of {', '.join(PRECISIONS)}.")
        if self.batch_size % self.accumulation_steps:
            raise ValueError(f"batch_size={self.batch_size} cannot be cut into {self.accumulation_steps} equal "
                             f"micro-batches. Fix: use a batch_size that is a multiple of {self.accumulation_steps}.")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate!r} must be a positive number, e.g. 1e-3.")


def run_techniques(techniques: Techniques) -> dict:
    """Train the lesson model with ``techniques`` in this process, or in each process of a group (each rank
    takes its own share of the data). Use a fresh process for a precision other than the first one this
    process used: Accelerate fixes the precision when its first ``Accelerator`` is created.

    Returns this rank's per-step losses, weights fingerprints, seconds per step (median), the activation bytes
    saved for backward by one micro-batch, communication counts, whether LocalSGD ran, the dtype the matrix
    products ran in, and the final weights (``state_dict`` on the CPU).
    """
    import contextlib

    import torch
    from accelerate import Accelerator
    from accelerate.local_sgd import LocalSGD

    from effitrain_helpers.measure.bench import synchronize
    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.measure.saved_memory import SavedTensors
    from effitrain_helpers.processes.group import cpu_group_requested
    from effitrain_helpers.training.runs import weights_fingerprint

    t = techniques
    device = "cuda" if torch.cuda.is_available() else "cpu"
    effective, note = resolve_precision(t.precision, device)
    accelerator = Accelerator(gradient_accumulation_steps=t.accumulation_steps, cpu=device == "cpu" and cpu_group_requested(),
                              mixed_precision=_ACCELERATE_NAME[t.precision])
    rank, world = accelerator.process_index, accelerator.num_processes
    batches = lesson_batches(t.steps * world, t.batch_size, t.seq_len, t.seed)[rank::world]
    micro_batches = split_batches(batches, t.accumulation_steps)
    model = lesson_model(t.seed)
    set_checkpointing(model, t.checkpointing)
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
    model, optimizer = accelerator.prepare(model, optimizer)
    counter = CommunicationCounter().watch(model)
    dtypes = _watch_compute_dtype(model)
    k = t.local_sgd_steps or 1
    quiet = contextlib.nullcontext() if t.gradient_sync else accelerator.no_sync(model)
    losses, fingerprints, seconds, saved, started = [], [], [], None, time.perf_counter()
    with quiet, LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k, enabled=k > 1) as local_sgd:
        for batch in micro_batches:
            batch = {key: value.to(accelerator.device) for key, value in batch.items()}
            with accelerator.accumulate(model):
                with SavedTensors(model.parameters(), model) if saved is None else contextlib.nullcontext() as counted:
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
    unwrapped = accelerator.unwrap_model(model)
    per_step = [sum(losses[i:i + t.accumulation_steps]) / t.accumulation_steps for i in range(0, len(losses), t.accumulation_steps)]
    return {"rank": rank, "world_size": world, "techniques": asdict(t), "precision_effective": effective, "note": note,
            "compute_dtype": sorted(dtypes.seen), "parameter_dtype": str(next(unwrapped.parameters()).dtype).removeprefix("torch."),
            "local_sgd_enabled": local_sgd.enabled, "losses": per_step, "fingerprints": fingerprints,
            "seconds_per_step": statistics.median(seconds[1:] or seconds), "activation_bytes": saved.activation_bytes,
            "communication": in_loop, "closing_bytes": counter.bytes - in_loop["bytes"],
            "parameter_bytes": sum(p.numel() * p.element_size() for p in unwrapped.parameters()),
            "matmul_weights": sum(m.weight.numel() for m in unwrapped.modules() if isinstance(m, torch.nn.Linear)),
            "final_fingerprint": weights_fingerprint(unwrapped),
            "state_dict": {name: value.detach().cpu().clone() for name, value in unwrapped.state_dict().items()}}


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


def max_difference(state_a: dict, state_b: dict) -> float:
    """The largest absolute difference between two state dicts (or two models) with the same keys."""
    if hasattr(state_a, "state_dict"):
        state_a, state_b = state_a.state_dict(), state_b.state_dict()
    return max(float((state_a[k].detach().cpu().float() - state_b[k].detach().cpu().float()).abs().max()) for k in state_a)


def split_batches(batches: list[dict], parts: int) -> list[dict]:
    """Each batch cut into ``parts`` equal micro-batches, in order (the batch size must divide evenly)."""
    check_steps("parts", parts)
    out = []
    for batch in batches:
        size = len(batch["labels"])
        if size % parts:
            raise ValueError(f"a batch of {size} cannot be cut into {parts} equal micro-batches. "
                             f"Fix: use a batch size that is a multiple of {parts}.")
        step = size // parts
        out += [{k: v[i:i + step] for k, v in batch.items()} for i in range(0, size, step)]
    return out


def measure_techniques(techniques: Techniques, num_processes: int = 1) -> dict:
    """:func:`run_techniques` in ``num_processes`` fresh processes: rank 0's figures without the weights, the
    slowest rank's seconds per step, the loss averaged over ranks, and whether all replicas ended identical."""
    from effitrain_helpers.processes.launch import launch

    if not isinstance(techniques, Techniques):
        raise TypeError(f"techniques must be an efficiency.Techniques(...); got {type(techniques).__name__}.")
    ranks = launch(run_techniques, techniques, num_processes=num_processes, quiet=True)
    for r in ranks:
        r.pop("state_dict")
    return {**ranks[0], "seconds_per_step": max(r["seconds_per_step"] for r in ranks),
            "losses": [statistics.fmean(s) for s in zip(*(r["losses"] for r in ranks))],
            "replicas_agree": len({r["final_fingerprint"] for r in ranks}) == 1}


# --- lesson 3.1: gradient accumulation ---------------------------------------------------------------------------

def measure_accumulation(micro_batch: int = 4, accumulation_steps: int = 4, seq_len: int = 64, repeats: int = 3) -> dict:
    """Accumulation's memory and time, in this process (plain forward and backward passes, no Accelerator):
    the activation bytes saved for backward by one micro-batch of b and by one batch of k*b (theory: k times
    more), and the seconds of k micro-batch passes against one pass over the whole batch (timed alternately
    after a warm-up, median; theory: the same arithmetic)."""
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
    return {"micro_batch": micro_batch, "accumulation_steps": k, "activation_bytes_micro_batch": small,
            "activation_bytes_full_batch": large, "activation_ratio": large / small, "expected_ratio": float(k),
            "seconds": {name: statistics.median(values[1:]) for name, values in times.items()}}


# --- lesson 3.2: activation checkpointing -------------------------------------------------------------------------

def set_checkpointing(model, enabled: bool) -> None:
    """Switch activation checkpointing on or off (``gradient_checkpointing_enable`` is its deprecated name)."""
    if enabled:
        model.activation_checkpointing_enable()
    else:
        model.activation_checkpointing_disable()


def _step(model, batch) -> None:
    model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)


def checkpointing_step_seconds(model, batch: dict, repeats: int = 3) -> dict[bool, float]:
    """Median seconds of one forward + backward on ``batch`` without (False) and with (True) checkpointing,
    timed alternately after a warm-up of each, so that a busy moment of a shared machine hits both alike."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for enabled in (False, True, *([False, True] * repeats)):
        set_checkpointing(model, enabled)
        start = time.perf_counter()
        _step(model, batch)
        times[enabled].append(time.perf_counter() - start)
    set_checkpointing(model, False)
    return {enabled: statistics.median(values[1:]) for enabled, values in times.items()}


def measure_checkpointing(seq_lens: tuple[int, ...] = (32, 64, 128), batch_size: int = 8, repeats: int = 3) -> list[dict]:
    """Lesson 3.2: for each sequence length, activation bytes saved for backward (measured without and with
    checkpointing, and the theory for "with": everything saved inside the layers dropped, one input of
    batch x length x hidden size kept per layer) and the step time without and with it, on the lesson model."""
    from effitrain_helpers.measure.saved_memory import checkpointable_layers, saved_bytes

    model = lesson_model()
    layers = len(checkpointable_layers(model))
    width, item = model.config.hidden_size, next(model.parameters()).element_size()
    rows = []
    for seq_len in seq_lens:
        batch = lesson_batches(1, batch_size, seq_len)[0]
        off = saved_bytes(model, batch)
        set_checkpointing(model, True)
        on = saved_bytes(model, batch)
        seconds = checkpointing_step_seconds(model, batch, repeats)
        expected = off.activation_bytes - off.inside_layer_bytes + layers * batch_size * seq_len * width * item
        rows.append({"seq_len": seq_len, "batch_size": batch_size, "activation_bytes_off": off.activation_bytes,
                     "activation_bytes_on": on.activation_bytes, "activation_bytes_on_expected": expected,
                     "step_seconds_off": seconds[False], "step_seconds_on": seconds[True],
                     "memory_saved": 1 - on.activation_bytes / off.activation_bytes,
                     "time_added": seconds[True] / seconds[False] - 1})
    return rows


# --- lesson 3.2: local SGD ----------------------------------------------------------------------------------------

def agreeing_steps(ranks: list[dict]) -> list[int]:
    """The optimizer steps (1-based) after which every rank held bit-identical weights."""
    return [i + 1 for i, prints in enumerate(zip(*(r["fingerprints"] for r in ranks))) if len(set(prints)) == 1]


def compare_data_parallel(local_sgd_steps: int = 4, steps: int = 24, batch_size: int = 8,
                          accumulation_steps: int | None = None) -> dict:
    """Run in each process of a group: the same training, one way after the other: plain data parallel,
    LocalSGD every ``local_sgd_steps`` steps, no communication at all, and (if ``accumulation_steps``) plain
    data parallel with gradient accumulation. Returns {way: run_techniques result} without the weights."""
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
        del out[name]["state_dict"]
    return out


def summarize_data_parallel(ranks: list[dict]) -> dict:
    """From every rank's :func:`compare_data_parallel`: per way, synchronisations, bytes, seconds per step
    (the slowest rank), the steps after which replicas agreed, and the loss averaged over ranks."""
    out = {}
    for way in ranks[0]:
        runs = [r[way] for r in ranks]
        out[way] = {"synchronisations": runs[0]["communication"]["synchronisations"],
                    "synchronised_steps": runs[0]["communication"]["synchronised_steps"],
                    "bytes_per_rank": runs[0]["communication"]["bytes"], "calls": runs[0]["communication"]["calls"],
                    "closing_bytes": runs[0]["closing_bytes"], "local_sgd_enabled": runs[0]["local_sgd_enabled"],
                    "seconds_per_step": max(r["seconds_per_step"] for r in runs),
                    "agreeing_steps": agreeing_steps(runs), "final_agree": len({r["final_fingerprint"] for r in runs}) == 1,
                    "mean_losses": [statistics.fmean(s) for s in zip(*(r["losses"] for r in runs))],
                    "world_size": runs[0]["world_size"], "steps": len(runs[0]["losses"]),
                    "parameter_bytes": runs[0]["parameter_bytes"]}
    return out


LOCAL_SGD_NEEDS = "; local SGD needs a group of at least 2 (in one process LocalSGD switches itself off)"


def measure_local_sgd(local_sgd_steps: int = 4, steps: int = 24, num_processes: int = 2, batch_size: int = 8,
                      accumulation_steps: int | None = None) -> dict:
    """:func:`compare_data_parallel` in ``num_processes`` real processes, summarised."""
    from effitrain_helpers.processes.launch import launch, resolve_num_processes

    check_steps("local_sgd_steps", local_sgd_steps)
    resolve_num_processes(num_processes, minimum=2, why=LOCAL_SGD_NEEDS)
    return summarize_data_parallel(launch(compare_data_parallel, local_sgd_steps, steps, batch_size, accumulation_steps,
                                          num_processes=num_processes, quiet=True))


# --- lesson 3.3: mixed precision ----------------------------------------------------------------------------------

def low_precision_memory_ratio(fp32_run: dict) -> float:
    """Theory for 16-bit autocast, as a ratio to float32's activation bytes: activations halve, but backward
    also keeps the 16-bit copy autocast made of each matrix-product weight (2 bytes per weight)."""
    return (fp32_run["activation_bytes"] / 2 + 2 * fp32_run["matmul_weights"]) / fp32_run["activation_bytes"]


def measure_precision(precisions: tuple[str, ...] = PRECISIONS, steps: int = 8, batch_size: int = 8, seq_len: int = 32,
                      in_this_process: str | None = None) -> dict[str, dict]:
    """Lesson 3.3: the same training in each precision, each in a fresh process (see :func:`run_techniques`),
    except ``in_this_process``: a precision this process's Accelerate is already set to (lesson 3.3 created its
    Accelerator with it), which runs here and saves starting a process."""
    runs = {p: Techniques(precision=p, steps=steps, batch_size=batch_size, seq_len=seq_len) for p in precisions}
    out = {}
    for precision, techniques in runs.items():
        if precision == in_this_process:
            here = run_techniques(techniques)
            here.pop("state_dict")
            out[precision] = {**here, "replicas_agree": True}
        else:
            out[precision] = measure_techniques(techniques)
    return out


# --- the chapter's summary ------------------------------------------------------------------------------------------

def _verdict(ok: bool, yes: str, no: str) -> str:
    return ("as expected: " + yes) if ok else ("differs from theory: " + no)


def measure_chapter(num_processes: int | None = None, precision_runs: dict | None = None, accumulation_steps: int = 4,
                    local_sgd_steps: int = 4, steps: int = 16) -> list[dict]:
    """Measure all four techniques on the lesson workload and return one record per technique with the
    measured and expected ratios (technique on / off) for memory (activation bytes saved for backward),
    time per optimizer step and synchronisations, and a one-line verdict.

    Accumulation and checkpointing are measured in this process with plain forward and backward passes (no
    Accelerator, so it works in a notebook whatever Accelerator exists there); local SGD and the precisions
    run in fresh processes; ``precision_runs`` reuses lesson 3.3's :func:`measure_precision` result (fp32 and
    :func:`low_precision`) instead of measuring again.
    """
    import torch

    from effitrain_helpers.measure.bench import time_matmul
    from effitrain_helpers.processes.launch import resolve_num_processes

    n = resolve_num_processes(num_processes, minimum=2, why=LOCAL_SGD_NEEDS)
    check_steps("accumulation_steps", accumulation_steps)
    Techniques(accumulation_steps=accumulation_steps, local_sgd_steps=local_sgd_steps, steps=steps,
               batch_size=8 * accumulation_steps)  # the runs' checks, here (accumulation cuts 8 * k rows into k)
    acc = measure_accumulation(micro_batch=4, accumulation_steps=accumulation_steps, seq_len=64)
    ckpt = measure_checkpointing((64,), batch_size=8, repeats=3)[0]
    parallel = measure_local_sgd(local_sgd_steps, steps, n, batch_size=8, accumulation_steps=accumulation_steps)
    low = low_precision()
    precision = precision_runs or measure_precision(("fp32", low), steps=4)
    matmul = {d: time_matmul(256, d, "cuda" if torch.cuda.is_available() else "cpu").gflops
              for d in ("float32", _TORCH_NAME[low])}
    dp, ls, quiet = parallel["data_parallel"], parallel["local_sgd"], parallel["no_communication"]
    ga = parallel["accumulation"]
    k, kl = accumulation_steps, local_sgd_steps
    comm = max(0.0, dp["seconds_per_step"] - quiet["seconds_per_step"])
    records = [
        {"technique": f"gradient accumulation (k={k})",
         "memory_ratio": 1 / acc["activation_ratio"], "memory_expected": 1 / k,
         "time_ratio": acc["seconds"]["accumulated"] / acc["seconds"]["full_batch"], "time_expected": 1.0,
         "sync_ratio": ga["synchronisations"] / dp["synchronisations"], "sync_expected": 1.0,
         "detail": f"{ga['synchronisations']} synchronisations in {ga['steps']} optimizer steps of {k} micro-batches"},
        {"technique": "activation checkpointing",
         "memory_ratio": 1 - ckpt["memory_saved"],
         "memory_expected": ckpt["activation_bytes_on_expected"] / ckpt["activation_bytes_off"],
         "time_ratio": 1 + ckpt["time_added"], "time_expected": 4 / 3,
         "sync_ratio": 1.0, "sync_expected": 1.0, "detail": f"sequence length {ckpt['seq_len']}, batch {ckpt['batch_size']}"},
        {"technique": f"local SGD (k={kl}, {n} processes)",
         "memory_ratio": 1.0, "memory_expected": 1.0,
         "time_ratio": ls["seconds_per_step"] / dp["seconds_per_step"],
         "time_expected": (quiet["seconds_per_step"] + comm / kl) / dp["seconds_per_step"] if dp["seconds_per_step"] else 1.0,
         "sync_ratio": ls["synchronisations"] / dp["synchronisations"], "sync_expected": (dp["steps"] // kl) / dp["steps"],
         "detail": f"{dp['synchronisations']} vs {ls['synchronisations']} synchronisations in {dp['steps']} steps"},
        {"technique": f"mixed precision ({low})",
         "memory_ratio": precision[low]["activation_bytes"] / precision["fp32"]["activation_bytes"],
         "memory_expected": low_precision_memory_ratio(precision["fp32"]),
         "time_ratio": precision[low]["seconds_per_step"] / precision["fp32"]["seconds_per_step"],
         "time_expected": matmul["float32"] / matmul[_TORCH_NAME[low]],
         "sync_ratio": 1.0, "sync_expected": 1.0,
         "detail": f"matmul {matmul['float32']:.0f} GFLOP/s fp32, {matmul[_TORCH_NAME[low]]:.1f} GFLOP/s {low} here"},
    ]
    verdicts = [
        _verdict(abs(records[0]["memory_ratio"] - 1 / k) < 0.05 / k and records[0]["sync_ratio"] == 1,
                 "1/k of the activation memory, one synchronisation per optimizer step", "memory or synchronisations off"),
        _verdict(abs(records[1]["memory_ratio"] - records[1]["memory_expected"]) < 0.1 and records[1]["time_ratio"] > 1,
                 "only the layer inputs kept, paid in recomputation", "memory or time off"),
        _verdict(records[2]["sync_ratio"] == records[2]["sync_expected"], f"{kl}x fewer synchronisations", "synchronisation count off"),
        _verdict((records[3]["time_ratio"] < 1) == (records[3]["time_expected"] < 1),
                 "faster" if records[3]["time_expected"] < 1 else f"slower, as this hardware's {low} matmuls are",
                 "speed goes the other way than the matmul benchmark"),
    ]
    for record, verdict in zip(records, verdicts):
        record["verdict"] = verdict
    return records


def chapter_table(records: list[dict]) -> str:
    """The summary records as a Markdown table (ratios are technique on / off; lower is better)."""
    lines = ["| technique | memory (measured / theory) | time per step (measured / theory) | "
             "synchronisations (measured / theory) | verdict |", "|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['technique']} | {r['memory_ratio']:.2f}x / {r['memory_expected']:.2f}x | "
                     f"{r['time_ratio']:.2f}x / {r['time_expected']:.2f}x | {r['sync_ratio']:.2f}x / "
                     f"{r['sync_expected']:.2f}x | {r['verdict']} ({r['detail']}) |")
    return "\n".join(lines)
