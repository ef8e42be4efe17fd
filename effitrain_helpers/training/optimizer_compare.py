"""Which optimizer keeps the least memory, at what speed and loss? (lessons 4.1-4.3, ``effitrain optimizers``)

A fair comparison: the same model (``models.load_classifier``, copied from one set of initial weights), the
same batches in the same order (built once from chapter 2's data), the same number of steps, the same seed.
Per optimizer it measures the optimizer's state bytes (``optimizer_memory.state_bytes``) next to the theory,
the median time per training step after a warm-up, and the loss on a fixed evaluation set after the last step.

- :func:`make_optimizer` builds ``torch.optim.AdamW``, ``transformers.Adafactor`` (external learning rate,
  as ``Trainer(optim="adafactor")`` sets it) or ``bitsandbytes.optim.AdamW8bit`` from a name;
- :func:`train_steps` trains a model with an optimizer *you* built, on fixed batches (the lessons call it);
- :func:`comparison_setup` checks the inputs and builds what every run shares (lesson 4.3 writes the loop over
  the optimizers with it, building each optimizer itself);
- :func:`compare_optimizers` is that loop in one call (the command line, the widget, the benchmarks) and returns
  one :class:`OptimizerRun` per optimizer.

bitsandbytes is imported only inside the functions that need it. When it cannot be imported, the 8-bit run is
skipped with a note (:func:`bitsandbytes_status` says why) and the rest still runs. The workbook's launcher
starts fresh processes, so importing bitsandbytes in a notebook before ``launch`` is harmless (accelerate's
``notebook_launcher`` forks the kernel instead, and a run it launches breaks when bitsandbytes came first).
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.validate import non_negative_number, positive_int, positive_number, whole_number
from effitrain_helpers.measure.optimizer_memory import OPTIMIZER_NAMES, check_optimizer_name, expected_state_bytes, n_parameters, \
    parameter_bytes, state_bytes
from effitrain_helpers.training.runs import default_learning_rate, learning_rate_hint

MOST_STEPS = 4000  # training steps per optimizer: ten times the full lesson's 400

LABELS = {"adamw": "AdamW", "adafactor": "Adafactor", "adamw8bit": "AdamW8bit"}
CLASSES = {"adamw": "torch.optim.AdamW", "adafactor": "transformers.Adafactor",
           "adamw8bit": "bitsandbytes.optim.AdamW8bit"}


def check_learning_rate(lr, name: str = "learning_rate") -> float:
    """``lr`` as a float if it is a finite number > 0; otherwise a ``ValueError`` naming it."""
    return positive_number(name, lr, hint=learning_rate_hint())


def check_betas(betas) -> tuple[float, float]:
    """``betas`` as a pair of floats in [0, 1); otherwise a ``ValueError`` naming the bad value."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(tr("betas={betas!r} is not allowed: give two numbers (beta1, beta2), each in [0, 1). "
                            "Fix: betas=(0.9, 0.999), AdamW's default.", betas=betas))
    for i, b in enumerate(betas):
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (0 <= b < 1):
            raise ValueError(tr("betas[{i}]={b!r} is not allowed: each beta must be in [0, 1) (0 included, 1 not). "
                                "Fix: betas=(0.9, 0.999), AdamW's default.", i=i, b=b))
    return float(betas[0]), float(betas[1])


KERNELS_HINT = "pip install kernels"  # in the one bitsandbytes log line that a learner cannot act on


class _DropKernelsHint(logging.Filter):
    """Drops bitsandbytes' "... Please make sure you already `pip install kernels` ..." warning: on CPUs with
    AVX512-BF16, importing bitsandbytes tries to fetch a 4-bit matrix kernel from the Hugging Face Hub
    (``bitsandbytes/backends/cpu/ops.py``) and logs this when it cannot; chapter 4 uses no 4-bit kernel."""

    def filter(self, record: logging.LogRecord) -> bool:
        return KERNELS_HINT not in record.getMessage()


def quiet_bitsandbytes_kernels_hint() -> None:
    """Install :class:`_DropKernelsHint` on the logger that emits the warning (once; before the import)."""
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if not any(isinstance(f, _DropKernelsHint) for f in logger.filters):
        logger.addFilter(_DropKernelsHint())


def bitsandbytes_status() -> tuple[bool, str]:
    """``(True, 'bitsandbytes X.Y.Z ...')`` when bitsandbytes imports here, else ``(False, why)``. Never raises.

    The first import goes through here, with bitsandbytes' "pip install kernels" warning silenced (only it)."""
    quiet_bitsandbytes_kernels_hint()
    try:
        import bitsandbytes
    except Exception as err:  # ImportError, or a broken native library
        return False, tr("bitsandbytes cannot be imported on this platform ({kind}: {err}); the 8-bit optimizer is "
                         "skipped. Fix: pip install 'bitsandbytes>=0.50' (CPU support since 0.50).",
                         kind=type(err).__name__, err=err)
    return True, tr("bitsandbytes {version} is available (8-bit optimizers on CPU since 0.50)",
                    version=getattr(bitsandbytes, "__version__", "?"))


def learning_rates(names, learning_rate=None, model_source: str = "offline-build") -> dict[str, float]:
    """The learning rate of each optimizer: ``learning_rate`` (one number for all, or a dict by name), else
    :func:`~effitrain_helpers.training.runs.default_learning_rate` for the model's source, the same for all three.

    One rate for all three, decayed linearly to 0: on the default run (150 steps, seeds 0-2 tried) their final
    losses came within 4% of each other (benchmarks check 10%). Pre-trained checkpoints: the usual 5e-5 (not
    tuned here)."""
    defaults = dict.fromkeys(OPTIMIZER_NAMES, default_learning_rate(model_source))
    if learning_rate is None:
        return {n: defaults[n] for n in names}
    if isinstance(learning_rate, dict):
        for key in learning_rate:
            check_optimizer_name(key)
        return {n: check_learning_rate(learning_rate.get(n, defaults[n]), f"learning_rate[{n!r}]") for n in names}
    lr = check_learning_rate(learning_rate)
    return {n: lr for n in names}


def _bnb_overrides_present() -> bool:
    """Whether bitsandbytes' process-wide manager holds per-parameter overrides (they are keyed by position,
    so they also reach later optimizers)."""
    import bitsandbytes as bnb

    manager = bnb.optim.GlobalOptimManager.get_instance()
    return bool(getattr(manager, "index2config", None) or getattr(manager, "module_weight_config_triple", None))


def make_optimizer(name: str, params, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.01):
    """The optimizer called ``name`` over ``params``.

    ``adamw``: ``torch.optim.AdamW``; ``adafactor``: ``transformers.Adafactor`` with an external learning rate
    (``scale_parameter=False, relative_step=False``, as ``Trainer(optim="adafactor")`` builds it; ``beta1`` is
    left at ``None``, so ``betas`` do not apply); ``adamw8bit``: ``bitsandbytes.optim.AdamW8bit``.
    Raises ``ValueError`` for an unknown name, a learning rate <= 0 or betas outside [0, 1), and
    ``RuntimeError`` for ``adamw8bit`` when bitsandbytes cannot be imported.
    """
    name = check_optimizer_name(name)
    lr = check_learning_rate(lr)
    betas = check_betas(betas)
    non_negative_number("weight_decay", weight_decay, hint="e.g. weight_decay=0.01")
    if name == "adamw":
        import torch

        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
    if name == "adafactor":
        from transformers import Adafactor

        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False, warmup_init=False,
                         weight_decay=weight_decay)
    ok, why = bitsandbytes_status()
    if not ok:
        raise RuntimeError(why)
    import bitsandbytes as bnb

    return bnb.optim.AdamW8bit(params, lr=lr, betas=betas, weight_decay=weight_decay)


def adamw_implementation(optimizer) -> str:
    """Which of torch's three Adam/AdamW implementations ``optimizer.step()`` runs (lesson 4.1):

    ``"fused"`` when a group sets ``fused=True`` (one kernel per step: each tensor read and written once),
    ``"foreach"`` when a group sets ``foreach=True`` or leaves both at ``None`` with every parameter on a device
    with foreach kernels (CUDA, XPU, ...), else ``"for-loop"`` (one parameter at a time, several passes over
    each tensor: torch's default on the CPU). The rule is torch's own, ``torch.optim.adam.adam``'s call of
    ``torch.optim.optimizer._default_to_fused_or_foreach``.
    """
    import torch
    from torch.optim.optimizer import _default_to_fused_or_foreach

    if not isinstance(optimizer, torch.optim.Adam):
        raise TypeError(tr("expected torch.optim.Adam or AdamW; got {kind}.", kind=type(optimizer).__name__))
    kinds = set()
    for group in optimizer.param_groups:
        foreach, fused = group.get("foreach"), group.get("fused")
        if fused is None and foreach is None:
            _, foreach = _default_to_fused_or_foreach(group["params"], group["differentiable"], use_fused=False)
        kinds.add("fused" if fused else "foreach" if foreach else "for-loop")
    return ", ".join(sorted(kinds))


@dataclass
class OptimizerRun:
    """What one optimizer did in the comparison. Bytes are bytes; seconds are wall-clock seconds."""

    name: str
    optimizer_class: str
    learning_rate: float
    steps: int
    n_parameters: int
    parameter_bytes: int
    state_bytes: int  # measured from optimizer.state after the last step
    expected_state_bytes: int  # theory from the parameter shapes (optimizer_memory)
    seconds_per_step: float  # median over the steps after the warm-up: forward, backward, step, zero_grad
    seconds_per_step_iqr: float  # spread: interquartile range of the same steps
    seconds_per_step_quartiles: tuple[float, float]  # 25th and 75th percentiles of the same steps
    optimizer_seconds_per_step: float  # median of optimizer.step() alone
    initial_loss: float  # loss on the fixed evaluation batches before training
    final_loss: float  # loss on the same batches after the last step
    losses: list[float] = field(default_factory=list)  # training loss of each step

    @property
    def bytes_per_parameter(self) -> float:
        return self.state_bytes / self.n_parameters

    @property
    def state_vs_theory(self) -> float:
        return self.state_bytes / self.expected_state_bytes

    def to_dict(self) -> dict:
        out = asdict(self)
        out["bytes_per_parameter"] = self.bytes_per_parameter
        return out


@dataclass
class Comparison:
    """The result of :func:`compare_optimizers`: the runs, notes (e.g. why one was skipped), and what ran."""

    runs: list[OptimizerRun]
    notes: list[str]
    model: str
    data: str
    device: str
    steps: int
    batch_size: int
    seed: int

    def run(self, name: str) -> OptimizerRun:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(tr("no run named {name!r}; ran: {ran}", name=name, ran=[r.name for r in self.runs]))

    def to_records(self) -> list[dict]:
        return [{**r.to_dict(), "device": self.device, "model": self.model} for r in self.runs]


def fixed_batches(tokenizer, steps: int, batch_size: int = 16, n_eval: int = 128, seed: int = 0,
                  n_train: int = 1600, data: str | None = None):
    """``(train_batches, eval_batches, data_choice)``: ``steps`` padded training batches in one seeded order
    (cycling through the ``n_train`` pairs), and the evaluation pairs in batches of 64. Built once, so every
    optimizer sees exactly the same tensors."""
    import torch
    from transformers import DataCollatorWithPadding

    from effitrain_helpers.training.runs import TrainConfig, build_data

    config = TrainConfig(data=data, n_train=n_train, n_validation=n_eval, batch_size=batch_size, seed=seed)
    tokenized, choice = build_data(config, tokenizer)
    columns = ["input_ids", "attention_mask", "labels"]
    train, evaluation = (tokenized[s].with_format("torch", columns=columns) for s in ("train", "validation"))
    collate = DataCollatorWithPadding(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < steps * batch_size:
        order += torch.randperm(len(train), generator=generator).tolist()
    train_batches = [collate([train[i] for i in order[s * batch_size:(s + 1) * batch_size]]) for s in range(steps)]
    eval_batches = [collate([evaluation[i] for i in range(k, min(k + 64, len(evaluation)))])
                    for k in range(0, len(evaluation), 64)]
    return train_batches, eval_batches, choice


def evaluation_loss(model, batches) -> float:
    """Mean cross-entropy of ``model`` over ``batches`` (weighted by batch size), without gradients."""
    import torch

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            n = len(batch["labels"])
            total += model(**batch).loss.item() * n
            count += n
    model.train(was_training)
    return total / count


def train_steps(model, optimizer, batches, eval_batches=None, scheduler=None, warmup: int = 3,
                progress: bool = False) -> dict:
    """Train ``model`` with ``optimizer`` (built by you) on ``batches``, one step per batch (lessons 4.1-4.3).

    ``scheduler`` (optional) is stepped after each optimizer step. Returns ``losses`` (per step),
    ``seconds_per_step`` (median after ``warmup`` steps, its IQR and its 25th/75th percentiles),
    ``optimizer_seconds_per_step`` (median of ``optimizer.step()`` alone), ``state_bytes`` (measured after
    the last step), and ``initial_loss`` / ``final_loss`` on ``eval_batches`` when given.
    """
    import torch

    if not batches:
        raise ValueError(tr("batches is empty: pass at least one batch (e.g. from fixed_batches(tokenizer, steps=10))."))
    device = next(model.parameters()).device
    initial = evaluation_loss(model, eval_batches) if eval_batches else float("nan")
    model.train()
    losses, step_times, opt_times = [], [], []
    iterator = batches
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(batches, desc=type(optimizer).__name__, leave=False)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for batch in iterator:
        batch = {k: v.to(device) for k, v in batch.items()}
        sync()
        start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        sync()
        before_step = time.perf_counter()
        optimizer.step()
        sync()
        opt_times.append(time.perf_counter() - before_step)
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
        losses.append(loss.item())
    timed = step_times[warmup:] if len(step_times) > warmup else step_times
    timed_opt = opt_times[warmup:] if len(opt_times) > warmup else opt_times
    quartiles = statistics.quantiles(timed, n=4) if len(timed) >= 2 else [timed[0]] * 3
    return {"losses": losses, "seconds_per_step": statistics.median(timed),
            "seconds_per_step_iqr": quartiles[2] - quartiles[0],
            "seconds_per_step_quartiles": (quartiles[0], quartiles[2]),
            "optimizer_seconds_per_step": statistics.median(timed_opt), "state_bytes": state_bytes(optimizer),
            "initial_loss": initial, "final_loss": evaluation_loss(model, eval_batches) if eval_batches else float("nan")}


SCHEDULES = ("linear", "constant")


def make_scheduler(optimizer, steps: int):
    """Chapter 2's schedule: the learning rate decays linearly from its value to 0 over ``steps`` (no warm-up)."""
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=steps)


def default_steps() -> int:
    """Training steps of the default comparison: 150 in the small size, 400 in the full size."""
    from effitrain_helpers.core.sizes import lesson_size

    return lesson_size("4").steps


@dataclass
class ComparisonSetup:
    """What every optimizer of a comparison shares (from :func:`comparison_setup`): the optimizer ``names`` to
    run, their learning ``rates``, ``notes`` (e.g. why one was skipped), one set of initial weights, the same
    batches, the schedule. Lesson 4.3 writes the loop over the names and builds each optimizer itself; this object
    hands out a fresh copy of the model (:meth:`fresh_model`), trains and measures one optimizer (:meth:`train`)
    and gathers the runs (:meth:`comparison`)."""

    names: list[str]
    rates: dict[str, float]
    notes: list[str]
    base: object  # the model every run copies
    batches: list
    eval_batches: list
    steps: int
    batch_size: int
    seed: int
    schedule: str
    model: str
    data: str
    device: object  # torch.device
    progress: bool = False

    def fresh_model(self):
        """A copy of the initial weights on the device (the seed reset first, so every run starts alike)."""
        import torch

        torch.manual_seed(self.seed)
        return copy.deepcopy(self.base).to(self.device)

    def train(self, name: str, net, optimizer) -> OptimizerRun:
        """Train ``net`` with ``optimizer`` (built by the caller for ``name``) on the shared batches and schedule,
        and measure it: time per step and per ``optimizer.step()``, state bytes next to the theory, losses."""
        scheduler = make_scheduler(optimizer, self.steps) if self.schedule == "linear" else None
        result = train_steps(net, optimizer, self.batches, self.eval_batches, scheduler, progress=self.progress)
        first = optimizer.param_groups[0]  # the learning rate it was built with (a scheduler keeps initial_lr)
        return OptimizerRun(
            name=name, optimizer_class=f"{type(optimizer).__module__}.{type(optimizer).__name__}",
            learning_rate=first.get("initial_lr", first["lr"]), steps=self.steps,
            n_parameters=n_parameters(net), parameter_bytes=parameter_bytes(net),
            state_bytes=result["state_bytes"], expected_state_bytes=expected_state_bytes(name, net),
            seconds_per_step=result["seconds_per_step"], seconds_per_step_iqr=result["seconds_per_step_iqr"],
            seconds_per_step_quartiles=result["seconds_per_step_quartiles"],
            optimizer_seconds_per_step=result["optimizer_seconds_per_step"], initial_loss=result["initial_loss"],
            final_loss=result["final_loss"], losses=result["losses"])

    def comparison(self, runs: list[OptimizerRun]) -> Comparison:
        """The runs, with what ran (device, model, data, steps, batch, seed) and the notes."""
        import torch

        device = "CPU" if self.device.type == "cpu" else torch.cuda.get_device_name(self.device)
        return Comparison(runs, self.notes, self.model, self.data, device, self.steps, self.batch_size, self.seed)


def comparison_setup(optimizers=OPTIMIZER_NAMES, steps: int | None = None, learning_rate=None,
                     batch_size: int = 16, seed: int = 0, model: str | None = None, schedule: str = "linear",
                     progress: bool = False, verbose: bool = False) -> ComparisonSetup:
    """Check every input, then build what the runs share: the model (``models.load_classifier``, one set of
    initial weights), the batches (:func:`fixed_batches`), the learning rates (:func:`learning_rates`) and the
    schedule (``linear``: decay to 0 over the steps, chapter 2's ``get_linear_schedule_with_warmup`` without
    warm-up; or ``constant``). ``adamw8bit`` is left out, with a note, when bitsandbytes cannot be imported."""
    import torch

    from effitrain_helpers.sources.models import choose_model, load_classifier

    if isinstance(optimizers, str):
        optimizers = [o for o in optimizers.split(",") if o.strip()]
    names = [check_optimizer_name(o) for o in optimizers]
    if not names:
        raise ValueError(tr("optimizers={optimizers!r} is empty; allowed: {allowed}.", optimizers=optimizers,
                            allowed=", ".join(OPTIMIZER_NAMES)))
    names = list(dict.fromkeys(names))
    steps = default_steps() if steps is None else steps
    positive_int("steps", steps, maximum=MOST_STEPS)
    positive_int("batch_size", batch_size)
    whole_number("seed", seed, minimum=0)
    if schedule not in SCHEDULES:
        raise ValueError(tr("schedule={schedule!r} is not allowed; allowed: {allowed}.", schedule=schedule,
                            allowed=", ".join(SCHEDULES)))
    if learning_rate is not None:  # a bad rate fails here, in one line, before a model is chosen or built
        learning_rates(names, learning_rate)
    choice = choose_model(model)
    rates = learning_rates(names, learning_rate, choice.source)
    notes = []
    if "adamw8bit" in names:
        ok, why = bitsandbytes_status()
        if not ok:
            notes.append(why)
            names.remove("adamw8bit")
        elif _bnb_overrides_present():
            notes.append(tr("bitsandbytes' GlobalOptimManager holds overrides from an earlier optimizer in this "
                            "process (Trainer(optim='adamw_bnb_8bit') adds some for embeddings): the 8-bit state may "
                            "exceed the theory. Fix: bitsandbytes.optim.GlobalOptimManager.get_instance().initialize()."))
    torch.manual_seed(seed)
    base, tokenizer = load_classifier(choice, verbose=verbose)
    batches, eval_batches, data_choice = fixed_batches(tokenizer, steps, batch_size, seed=seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return ComparisonSetup(names, rates, notes, base, batches, eval_batches, steps, batch_size, seed, schedule,
                           f"{choice.path} ({tr(choice.source)})", str(data_choice.name), device, progress)


def compare_optimizers(optimizers=OPTIMIZER_NAMES, steps: int | None = None, learning_rate=None,
                       betas=(0.9, 0.999), weight_decay: float = 0.01, batch_size: int = 16, seed: int = 0,
                       model: str | None = None, schedule: str = "linear", progress: bool = False,
                       verbose: bool = False) -> Comparison:
    """The whole comparison in one call, for ``effitrain optimizers``, the widget and the benchmarks: the loop
    lesson 4.3 writes, each optimizer built by :func:`make_optimizer`. Arguments as in :func:`comparison_setup`,
    plus ``betas`` and ``weight_decay`` for :func:`make_optimizer`; all are checked before anything trains."""
    check_betas(betas)
    non_negative_number("weight_decay", weight_decay, hint="e.g. weight_decay=0.01")
    setup = comparison_setup(optimizers, steps, learning_rate, batch_size, seed, model, schedule, progress, verbose)
    runs = []
    for name in setup.names:
        net = setup.fresh_model()
        optimizer = make_optimizer(name, net.parameters(), setup.rates[name], betas, weight_decay)
        runs.append(setup.train(name, net, optimizer))
    return setup.comparison(runs)


COLUMNS = (msg("optimizer"), "lr", msg("state MiB"), msg("theory MiB"), msg("measured / theory"),
           msg("state bytes / param"), msg("ms / step"), msg("optimizer.step() ms"), msg("final loss"))


def _columns() -> dict[str, str]:
    """The comparison's column names in the learner's language, by their English name (the table's keys)."""
    return {name: tr(name) for name in COLUMNS}


def comparison_frame(comparison: Comparison):
    """The comparison as a pandas DataFrame, one row per optimizer, units in the column names (lesson 4.3)."""
    import pandas as pd

    c = _columns()
    return pd.DataFrame([{
        c["optimizer"]: r.name, c["lr"]: r.learning_rate, c["state MiB"]: r.state_bytes / 2**20,
        c["theory MiB"]: r.expected_state_bytes / 2**20, c["measured / theory"]: r.state_vs_theory,
        c["state bytes / param"]: r.bytes_per_parameter, c["ms / step"]: r.seconds_per_step * 1e3,
        c["optimizer.step() ms"]: r.optimizer_seconds_per_step * 1e3, c["final loss"]: r.final_loss,
    } for r in comparison.runs]).set_index(c["optimizer"])


def comparison_caption(comparison: Comparison) -> str:
    """What ran (steps, batch, seed, device, model, data) and the notes, as lines under the table."""
    lines = [tr("{steps} steps of batch {batch_size}, seed {seed}, on {device}; model {model}; data {data}",
                steps=comparison.steps, batch_size=comparison.batch_size, seed=comparison.seed,
                device=comparison.device, model=comparison.model, data=comparison.data)]
    return "\n".join(lines + [tr("note: {note}", note=n) for n in comparison.notes])


def comparison_table(comparison: Comparison) -> str:
    """The comparison as plain text for a terminal (``effitrain optimizers``): the frame, then the caption."""
    c = _columns()
    formats = {c["lr"]: "{:.0e}".format, c["measured / theory"]: "{:.4f}".format, c["final loss"]: "{:.4f}".format,
               c["ms / step"]: "{:.1f}".format, c["optimizer.step() ms"]: "{:.1f}".format}
    text = comparison_frame(comparison).to_string(formatters=formats, float_format="{:.3f}".format)
    return f"{text}\n{comparison_caption(comparison)}"
