"""How fast is a matrix product here? (lesson 1.1: CPU vs GPU, measured)

``run_benchmark`` times ``torch.mm`` on square matrices over sizes x dtypes x devices the way a
careful benchmark does: warm-up, device synchronisation (CUDA events on GPUs), an inner loop long
enough to swamp timer overhead, several repeats, median and spread. Throughput is
GFLOP/s = 2 n^3 / t. ``best_achievable`` sweeps shapes for the highest rate this device reaches
(in the spirit of stas00's mamf-finder, with a CPU path). ``effitrain bench`` is the same from a terminal.

A busy machine (a learner's laptop with a browser open, another program on one core) makes timings lie, so
every verdict a lesson prints comes from here and first asks whether the run can be trusted
(:func:`unreliable_reason`): the repeats spread too much (IQR / median above :data:`SPREAD_MAX`; the IQR,
inter-quartile range, is the width of the middle half of the repeats), the interleaved rounds of a
comparison disagree, or fewer cores were idle than the product uses threads (:func:`busy_reason`).
An unreliable run says so instead of stating a conclusion.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import torch

from effitrain_helpers.core.devices import available_devices, cpu_model_name
from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.core.validate import positive_int, positive_number

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_CHOICES = ("cpu", "cuda", "mps", "all")
MAX_SIZE = 32768
MOST_REPEATS = 1000  # timed repeats per measurement: more adds time, not precision
TARGET_REPEAT_S = 0.1  # each repeat runs the product enough times to last about this long
WARMUP_S = 0.05  # warm-up runs the product at least this long (and at least three times)
SAY_S = 30.0  # a run estimated to take longer says so before it starts ...
BUDGET_S = 600.0  # ... and one estimated above this is refused (smaller sizes or fewer repeats measure the same)
PROBE_SIZE = 1024  # the product timed once to estimate larger ones (time grows as size³)
SPREAD_MAX = 0.10  # IQR / median of the repeats above this: the run is unreliable (torch.utils.benchmark warns at 0.1)
IDLE_MARGIN = 0.5  # busy when fewer than (threads - IDLE_MARGIN) cores were idle just before measuring
LOAD_WINDOW_S = 0.25  # how long the CPU load is sampled before a run
AGREE_RANGE = (0.8, 1.25)  # workbook time / torch.utils.benchmark time counted as agreeing
MIN_ROUNDS = 2  # a measurement cut short by its time budget still keeps this many repeats
LOOP_STEP = 4  # each repeat re-sizes its loop towards TARGET_REPEAT_S by at most this factor

# Dense peaks (GFLOP/s, no sparsity; SXM boards where there are several) of common GPUs, from their makers'
# data sheets. float32 is the plain (non-tensor-core) rate. A missing dtype means no fast path for it.
GPU_PEAK_GFLOPS = {
    ("H200", "bfloat16"): 989_000, ("H200", "float16"): 989_000, ("H200", "float32"): 67_000,
    ("H100", "bfloat16"): 989_000, ("H100", "float16"): 989_000, ("H100", "float32"): 67_000,
    ("A100", "bfloat16"): 312_000, ("A100", "float16"): 312_000, ("A100", "float32"): 19_500,
    ("L4", "bfloat16"): 121_000, ("L4", "float16"): 121_000, ("L4", "float32"): 30_300,
    ("T4", "float16"): 65_000, ("T4", "float32"): 8_100,
    ("V100", "float16"): 125_000, ("V100", "float32"): 15_700,
}


@dataclass
class MatmulResult:
    """One measurement: ``seconds`` is the median time of one n x n product."""

    device: str
    device_name: str
    dtype: str
    size: int
    seconds: float
    seconds_min: float
    seconds_max: float
    repeats: int
    number: int
    gflops: float
    times: tuple[float, ...] = ()  # seconds of one product in each repeat, in the order they ran
    busy: str = ""  # why the machine looked busy before the run (see busy_reason), or "" when it did not

    @property
    def gflops_best(self) -> float:
        """Throughput of the fastest repeat (the least disturbed by other work on the machine)."""
        return gflops(self.size, self.seconds_min)

    @property
    def spread(self) -> float:
        """IQR / median of the repeats (0 with fewer than 2 repeats): how much they disagree."""
        return relative_iqr(self.times)

    @property
    def unreliable(self) -> str:
        """Why this measurement cannot be trusted, or "" when it can (see :func:`unreliable_reason`)."""
        return unreliable_reason(self.times, self.busy)

    def to_dict(self) -> dict:
        return asdict(self)


def gflops(size: int, seconds: float) -> float:
    """Throughput of one n x n by n x n product: 2 n^3 floating-point operations in ``seconds``."""
    return 2 * size**3 / seconds / 1e9


def default_sizes(device: str, dtype: str, size: str = "small") -> list[int]:
    """The sizes a lesson measures on ``device`` in ``dtype`` for the ``small`` or ``full`` setting."""
    from effitrain_helpers.core.sizes import lesson_size

    kind = "cpu" if device == "cpu" else "gpu"
    width = "float32" if dtype == "float32" else "16bit"
    return list(getattr(lesson_size("1.1", size), f"{kind}_{width}"))


# ---------------------------------------------------------------- validating what the user asked for
def parse_sizes(sizes: str | Iterable[int]) -> list[int]:
    """Sizes from '256,512' or a list; each a whole number in 1..32768."""
    items = [s.strip() for s in sizes.split(",")] if isinstance(sizes, str) else list(sizes)
    if not items or items == [""]:
        raise ValueError(tr("no sizes given; allowed: whole numbers 1..32768 such as 256,512,1024."))
    out = []
    for item in items:
        try:
            value = int(item) if not isinstance(item, float) or item.is_integer() else None
        except (TypeError, ValueError):
            value = None
        if value is None or isinstance(item, bool) or not 1 <= value <= MAX_SIZE:
            raise ValueError(
                tr("size {item!r} is not allowed; sizes are whole numbers from 1 to {max_size} (the side of a square "
                   "matrix). Fix: e.g. --sizes 256,512,1024.", item=item, max_size=MAX_SIZE)
            )
        out.append(value)
    return out


def parse_dtypes(dtypes: str | Iterable[str]) -> list[str]:
    """Dtype names from 'float32,bfloat16' or a list; each one of float32, bfloat16, float16."""
    items = [d.strip() for d in dtypes.split(",")] if isinstance(dtypes, str) else list(dtypes)
    for item in items:
        if item not in DTYPES:
            raise ValueError(
                tr("dtype {item!r} is not allowed; choose from {dtypes}. Fix: e.g. --dtypes float32,bfloat16.",
                   item=item, dtypes=', '.join(DTYPES))
            )
    if not items:
        raise ValueError(tr("no dtypes given; choose from {dtypes}.", dtypes=', '.join(DTYPES)))
    return items


def resolve_devices(device: str = "all") -> tuple[list[str], list[str]]:
    """Torch devices for ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``all``, and notes on missing hardware.

    A device family that is absent is not an error: it is reported in the notes and skipped.
    """
    present = available_devices()
    family = device.split(":")[0] if isinstance(device, str) else None
    if family not in DEVICE_CHOICES or (":" in device and family != "cuda"):
        raise ValueError(
            tr("device {device!r} is not allowed; choose from {device_choices} (or cuda:N). Fix: e.g. --device cpu.",
               device=device, device_choices=', '.join(DEVICE_CHOICES))
        )
    if device == "all":
        chosen = present
    elif device == "cuda":
        chosen = [d for d in present if d.startswith("cuda")]
    else:
        chosen = [d for d in present if d == device]
    notes = []
    if not chosen:
        notes.append(tr("no {device} device found on this machine: measuring the CPU only", device=device))
        chosen = ["cpu"]
    elif device == "all" and len(present) == 1:
        notes.append(tr("no GPU found: showing CPU only"))
    return chosen, notes


def dtype_supported(device: str, dtype: str) -> bool:
    """Whether ``torch.mm`` runs in ``dtype`` on ``device`` (probed with a tiny product)."""
    if device.startswith("cuda") and dtype == "bfloat16":
        with torch.cuda.device(device):
            if not torch.cuda.is_bf16_supported():
                return False
    try:
        x = torch.ones(8, 8, dtype=DTYPES[dtype], device=device)
        torch.mm(x, x)
        return True
    except (RuntimeError, TypeError):
        return False


# ---------------------------------------------------------------- is the run reliable?
def relative_iqr(values: Iterable[float]) -> float:
    """Inter-quartile range over median of ``values`` (0.0 for fewer than 2 values or a zero median)."""
    values = sorted(values)
    if len(values) < 2 or statistics.median(values) == 0:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / abs(statistics.median(values))


def idle_cores(window_s: float = LOAD_WINDOW_S) -> float:
    """How many of this process's cores were idle, summed, over the next ``window_s`` seconds (psutil)."""
    import psutil

    from effitrain_helpers.processes.launch import usable_cores

    busy = psutil.cpu_percent(interval=window_s, percpu=True)
    mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(len(busy))
    mine = [c for c in mine if c < len(busy)] or range(len(busy))
    return min(usable_cores(), sum(1 - busy[c] / 100 for c in mine))


def busy_reason(threads: int | None = None, idle: float | None = None) -> str:
    """Why the machine is too busy to time ``threads`` threads ("" when it is not).

    ``idle`` is the number of idle cores (measured with :func:`idle_cores` when not given); ``threads``
    defaults to ``torch.get_num_threads()``. Busy means fewer than ``threads - IDLE_MARGIN`` idle cores.
    """
    threads = torch.get_num_threads() if threads is None else threads
    idle = idle_cores() if idle is None else idle
    if idle < threads - IDLE_MARGIN:
        return tr("only {idle:.1f} idle cores for {threads} threads: other programs are using the CPU",
                  idle=idle, threads=threads)
    return ""


def unreliable_reason(times: Iterable[float], busy: str = "") -> str:
    """Why a series of repeated timings cannot be trusted, or "" when it can.

    Two signs: ``busy`` (a reason from :func:`busy_reason`), and the repeats spreading more than
    :data:`SPREAD_MAX` (IQR / median), which happens when another program takes the CPU during the run.
    """
    return "; ".join(filter(None, [busy, spread_reason(relative_iqr(times))]))


def spread_reason(spread: float) -> str:
    """Why repeats whose IQR / median is ``spread`` cannot be trusted (above :data:`SPREAD_MAX`), or ""."""
    if spread > SPREAD_MAX:
        return tr("repeats spread by {spread:.0%} of the median (IQR), above {most:.0%}", spread=spread,
                  most=SPREAD_MAX)
    return ""


UNRELIABLE_ADVICE = msg("close other programs and re-run")


def unreliable_advice() -> str:
    """:data:`UNRELIABLE_ADVICE` in the learner's language (what a verdict on a disturbed run advises)."""
    return tr(UNRELIABLE_ADVICE)


def unreliable_note(rows: dict[str, str]) -> str:
    """What a table of timings says under it: which rows are unreliable and why, and what a spread is, in a
    learner's words; "" when every row is reliable.

    ``rows`` maps each row's label to its reason ("" for a reliable row; several reasons joined by "; ", as
    :func:`unreliable_reason` joins them). Each reason is said once, with the rows it applies to ("every row"
    when it applies to all)."""
    by_reason: dict[str, list[str]] = {}
    for label, why in rows.items():
        for part in filter(None, why.split("; ")):
            by_reason.setdefault(part, []).append(label)
    if not by_reason:
        return ""
    parts = "; ".join(tr("{rows}: {why}", why=why, rows=tr("every row") if len(labels) == len(rows) > 1
                         else ", ".join(labels)) for why, labels in by_reason.items())
    return tr("UNRELIABLE rows, no conclusion drawn from their times: {parts}. A row's spread is how much its "
              "repeated timings disagree: the width of their middle half (the IQR) over their median. Above "
              "{most:.0%}, or with fewer idle cores than threads, other programs took the CPU during the run, so "
              "those times say more about the machine than about what was timed; {advice}.", parts=parts,
              most=SPREAD_MAX, advice=unreliable_advice())


def saving_text(what: str, before_ms: float, after_ms: float, whole_ms: float, doubt: str = "") -> str:
    """What ``what`` saved per step, going from ``before_ms`` to ``after_ms`` milliseconds, next to
    ``whole_ms``, the most it could save; said as no saving when it saved nothing, and as no conclusion when
    ``doubt`` (why the timings cannot be trusted) is not empty."""
    fields = dict(what=what, before=before_ms, after=after_ms, whole=whole_ms)
    if doubt:
        return tr("{what}: {before:.1f} ms per step without it, {after:.1f} ms with it, at most {whole:.1f} ms to "
                  "hide: UNRELIABLE, so no conclusion on a saving ({why})", why=doubt, **fields)
    saved = before_ms - after_ms
    if saved <= 0:
        return tr("{what} saved no time in this run: {before:.1f} ms per step without it, {after:.1f} ms with it "
                  "(at most {whole:.1f} ms to hide)", **fields)
    if whole_ms <= 0:
        return tr("{what} saved {saved:.1f} ms per step ({before:.1f} ms to {after:.1f} ms)", saved=saved, **fields)
    return tr("{what} saved {saved:.1f} ms per step ({before:.1f} ms to {after:.1f} ms), {share:.0%} of the "
              "{whole:.1f} ms it could hide", saved=saved, share=saved / whole_ms, **fields)


def time_budget_note(cut: dict[str, tuple[int, int]], budget_s: float) -> str:
    """The line a timing cell prints when its time budget cut repeats: which measurements kept how many of
    the repeats asked for (``cut`` maps a label to (kept, asked)); "" when nothing was cut."""
    if not cut:
        return ""
    rows = ", ".join(tr("{label} ({kept} of {asked})", label=label, kept=kept, asked=asked)
                     for label, (kept, asked) in cut.items())
    return tr("the machine ran slower than expected, so the repeats were cut to keep this cell within its budget "
              "of {budget:.0f} s: {rows}; fewer repeats give a rougher median", budget=budget_s, rows=rows)


MIN_STEPS = 3  # a training run cut by its time budget keeps this many steps (the first warms up, two are timed)


@dataclass
class StepBudget:
    """A timing cell's time budget when the cell trains: ``runs`` runs of ``asked`` steps of about ``step_s``
    seconds (a step timed in this notebook), after starting ``fresh_processes`` processes (about ``start_s``
    seconds each on a quiet machine), all within ``budget_s`` seconds from ``started``.

    ``started`` is the wall clock (``time.time()``), which the processes the cell starts read too, so they can
    stop at :attr:`deadline`. A ``busy`` machine gets ``steps`` < ``asked`` when the whole would overrun
    (:func:`step_budget`, decided and said before the runs: :meth:`note`); what the cell cuts while it runs, a
    run left out (:meth:`leave_out`) or timed steps stopped at the deadline (:meth:`stopped`), is said after
    them by :meth:`cuts_note`. See :func:`step_budget`."""

    asked: int
    steps: int
    step_s: float
    runs: int
    budget_s: float
    busy: str = ""
    fresh_processes: int = 0
    start_s: float = 0.0
    here_s: float = 0.0  # about how long the cell's other work in this process takes (measurements)
    started: float = field(default_factory=time.time)
    left_out: dict[str, str] = field(default_factory=dict)  # a run left out -> why
    timed: int | None = None  # the steps each run kept when the deadline stopped them (None: not stopped)

    @property
    def seconds(self) -> float:
        """About how long the training steps take, at ``asked`` steps (before any cut)."""
        return self.runs * self.asked * self.step_s

    @property
    def deadline(self) -> float:
        """When the budget runs out, in ``time.time()`` seconds (the same clock in every process)."""
        return self.started + self.budget_s

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` more of work would still end within the budget."""
        return time.time() + seconds <= self.deadline

    def steps_that_fit(self, steps: int, least: int = MIN_STEPS) -> int:
        """The steps each run may still take, its fresh processes to start: ``steps``, or as many as what is
        left of the budget holds (at least ``least``), recorded with :meth:`stopped` when fewer."""
        if self.fits(self.fresh_processes * self.start_s + self.runs * steps * self.step_s):
            return steps
        left = self.deadline - time.time() - self.fresh_processes * self.start_s
        kept = min(steps, max(least, int(left // (self.runs * max(self.step_s, 1e-9)))))
        self.stopped(kept)
        return kept

    def leave_out(self, run: str, why: str) -> None:
        """Record that ``run`` was not run, to keep within the budget (``why``: what the time so far showed)."""
        self.left_out[run] = why

    def stopped(self, timed: int) -> None:
        """Record how many steps each run kept (fewer than :attr:`steps` when the deadline stopped them)."""
        self.timed = timed if timed < self.steps else None

    def announce(self, may_leave_out: str = "") -> str:
        """The line a timing cell prints before its runs: about how long their steps take at this size, from
        what, the fresh processes it starts, and that a busy machine gets fewer steps (and ``may_leave_out``,
        a run it can do without) instead of a longer wait."""
        line = tr("training: about {seconds:.0f} s of steps at this size ({runs} runs x {steps} steps x "
                  "{step_ms:.0f} ms, a step timed just now)", seconds=max(1, self.seconds), runs=self.runs,
                  steps=self.asked, step_ms=self.step_s * 1e3)
        if self.fresh_processes:
            line += tr(", plus starting {n} fresh processes (about {each:.0f} s each on a quiet machine)",
                       n=self.fresh_processes, each=max(1, self.start_s))
        if may_leave_out:
            line += tr("; on a busy machine the steps are cut, and {run} left out if need be, to keep the cell "
                       "within {budget:.0f} s, and a note says so", run=may_leave_out, budget=self.budget_s)
        else:
            line += tr("; on a busy machine the steps are cut to keep within {budget:.0f} s, and a note says so",
                       budget=self.budget_s)
        return "\n".join(filter(None, [line, self.note()]))

    def note(self) -> str:
        """Why the runs take fewer steps than asked ("" when they do not); :meth:`announce` ends with it."""
        if self.steps == self.asked:
            return ""
        return tr("the machine is busy ({busy}), so each run trains {kept} of its {asked} steps to keep within "
                  "{budget:.0f} s; fewer steps give a rougher time per step and a loss from earlier in training",
                  busy=self.busy, kept=self.steps, asked=self.asked, budget=self.budget_s)

    def cuts_note(self) -> str:
        """What was cut while the runs ran, to keep within the budget ("" when nothing was)."""
        lines = [tr("the machine ran slower than expected, so {run} was not run, to keep this cell within "
                    "{budget:.0f} s ({why})", run=run, why=why, budget=self.budget_s)
                 for run, why in self.left_out.items()]
        if self.timed is not None:
            lines.append(tr("the machine ran slower than expected, so each run timed {kept} of its {asked} steps, "
                            "to keep this cell within {budget:.0f} s; fewer steps give a rougher median",
                            kept=self.timed, asked=self.steps, budget=self.budget_s))
        return "\n".join(lines)


def step_budget(asked: int, step_s: float, runs: int, budget_s: float, busy: str | None = None,
                fresh_processes: int = 0, start_s: float | None = None, here_s: float = 0.0,
                least: int = MIN_STEPS) -> StepBudget:
    """The steps ``runs`` training runs may take: ``asked``, unless the machine is ``busy`` (a reason from
    :func:`busy_reason`, sampled now when None; kept in the result) and ``runs x asked x step_s``, plus
    ``fresh_processes`` starts of ``start_s`` seconds (default: ``launch.START_S``) and ``here_s`` seconds of
    other work, exceeds ``budget_s``; then as many as fit, at least ``least`` (never more than asked). The
    budget's clock starts now."""
    from effitrain_helpers.processes.launch import START_S

    positive_int("asked", asked)
    positive_int("runs", runs)
    positive_number("budget_s", budget_s, example="budget_s=30")
    start_s = START_S if start_s is None else start_s
    busy = busy_reason() if busy is None else busy
    steps = asked
    for_steps = budget_s - fresh_processes * start_s - here_s
    if busy and runs * asked * step_s > for_steps:
        steps = min(asked, max(least, int(for_steps // (runs * max(step_s, 1e-9)))))
    return StepBudget(asked, steps, step_s, runs, budget_s, busy, fresh_processes, start_s, here_s)


def fastest_seconds(step: Callable[[], object], repeats: int = 3, device: str = "cpu") -> float:
    """Seconds of the fastest of ``repeats`` calls of ``step`` after one warm-up call, ``device`` synchronised
    after each (the least disturbed by other programs): how a timing cell times one step before it budgets."""
    times = []
    for _ in range(repeats + 1):
        began = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - began)
    return min(times[1:])


# ---------------------------------------------------------------- measuring
def synchronize(device: str) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def _time_loop(fn: Callable[[], object], device: str, number: int, limit_s: float = math.inf) -> tuple[float, int]:
    """Seconds for up to ``number`` calls of ``fn``, with the device synchronised (CUDA events on GPUs), and
    how many calls ran. On the CPU the loop stops after the call that passes ``limit_s`` seconds: on a busy
    machine each call can suddenly take a whole scheduler time slice, and a loop sized on quiet calls would
    then run for a minute."""
    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000, number
    synchronize(device)
    t0 = time.perf_counter()
    stop = t0 + limit_s
    done = 0
    while done < number:
        fn()
        done += 1
        if time.perf_counter() > stop:
            break
    synchronize(device)
    return time.perf_counter() - t0, done


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    if device == "mps":
        return "Apple GPU (MPS)"
    return cpu_model_name()


def _check_repeats(repeats: int) -> None:
    positive_int("repeats", repeats, maximum=MOST_REPEATS, hint=msg("repeats=5 is a good default"))


def _warm_product(size: int, dtype: str, device: str) -> tuple[Callable[[], object], int]:
    """A ready ``size`` x ``size`` product on ``device`` in ``dtype``, warmed up, and how many calls make
    one repeat (enough to last about ``TARGET_REPEAT_S``)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty_like(a)

    def product() -> None:
        torch.mm(a, b, out=out)

    calls: list[float] = []  # warm-up: kernels chosen, caches and clocks settled
    while len(calls) < 3 or sum(calls) < WARMUP_S:
        calls.append(_time_loop(product, device, 1)[0])
    # the median call, not the fastest: on a busy machine one lucky call would make every repeat last seconds
    return product, max(1, math.ceil(TARGET_REPEAT_S / max(statistics.median(calls), 1e-7)))


def _result(device: str, dtype: str, size: int, number: int, times: list[float], busy: str) -> MatmulResult:
    median = statistics.median(times)
    return MatmulResult(
        device=device, device_name=_device_name(device), dtype=dtype, size=size, seconds=median,
        seconds_min=min(times), seconds_max=max(times), repeats=len(times), number=number,
        gflops=gflops(size, median), times=tuple(times), busy=busy,
    )


def _interleaved(size: int, dtypes: list[str], device: str, repeats: int, busy: str,
                 deadline: float = math.inf) -> list[MatmulResult]:
    """One result per dtype at ``size``, measured in interleaved rounds (each round times every dtype once),
    so a disturbance hits all dtypes of a round alike and shows up as rounds that disagree.

    Each repeat re-sizes its loop towards ``TARGET_REPEAT_S`` (by at most ``LOOP_STEP``): a warm-up slowed by
    a busy moment neither makes every repeat last seconds nor leaves repeats so short that one interruption
    dominates them, and a repeat whose calls turn slow after a quiet warm-up stops at ``LOOP_STEP`` times
    ``TARGET_REPEAT_S``. After ``MIN_ROUNDS`` rounds, no new round starts past ``deadline`` (``time.perf_counter``
    seconds): the result then has fewer ``repeats`` than asked."""
    ready = [_warm_product(size, dt, device) for dt in dtypes]
    loops = [n for _, n in ready]
    times: list[list[float]] = [[] for _ in dtypes]
    for round_ in range(repeats):
        if round_ >= MIN_ROUNDS and time.perf_counter() > deadline:
            break
        for i, ((product, _), series) in enumerate(zip(ready, times)):
            took, done = _time_loop(product, device, loops[i], limit_s=LOOP_STEP * TARGET_REPEAT_S)
            series.append(took / done)
            scale = min(LOOP_STEP, max(1 / LOOP_STEP, TARGET_REPEAT_S / max(took, 1e-9)))
            loops[i] = max(1, round(done * scale))
    return [_result(device, dt, size, n, series, busy) for dt, (_, n), series in zip(dtypes, ready, times)]


def time_matmul(size: int, dtype: str = "float32", device: str = "cpu", repeats: int = 5,
                busy: str = "") -> MatmulResult:
    """Median time of one ``size`` x ``size`` product on ``device`` in ``dtype``, with spread.

    ``busy`` is stored with the result (a reason from :func:`busy_reason`; not measured here)."""
    (size,) = parse_sizes([size])
    parse_dtypes([dtype])
    _check_repeats(repeats)
    return _interleaved(size, [dtype], device, repeats, busy)[0]


def torch_benchmark(size: int, dtype: str = "float32", device: str = "cpu", min_run_time: float = 0.5):
    """The same product timed by ``torch.utils.benchmark`` (the reference to agree with): its Measurement,
    whose ``times`` are the seconds of one product in each block."""
    from torch.utils import benchmark as tb

    (size,) = parse_sizes([size])
    a = torch.randn(size, size, device=device, dtype=DTYPES[parse_dtypes([dtype])[0]])
    b, out = torch.randn_like(a), torch.empty_like(a)
    timer = tb.Timer("torch.mm(a, b, out=out)", globals={"torch": torch, "a": a, "b": b, "out": out},
                     num_threads=torch.get_num_threads())  # its default is 1 thread: not what the helper measures
    return timer.blocked_autorange(min_run_time=min_run_time)


def torch_benchmark_seconds(
    size: int, dtype: str = "float32", device: str = "cpu", min_run_time: float = 0.5, best: bool = False
) -> float:
    """Seconds of one product by :func:`torch_benchmark`: the median of its blocks, or with ``best=True``
    the fastest block."""
    measurement = torch_benchmark(size, dtype, device, min_run_time)
    return min(measurement.times) if best else measurement.median


def estimated_seconds(groups: dict[tuple[str, int], list[str]], repeats: int) -> float:
    """About how long :func:`run_benchmark` takes for ``groups`` (``{(device, size): dtypes}``): per product of
    ``p`` seconds, a warm-up of ``max(2p, WARMUP_S)`` and ``repeats`` repeats of ``max(TARGET_REPEAT_S, p)``;
    ``p`` of a size above :data:`PROBE_SIZE` is a timed product of that size scaled by size³."""
    rates: dict[tuple[str, str], float] = {}
    total = 0.0
    for (device, size), dtypes in groups.items():
        for dtype in dtypes:
            product = 0.0
            if size > PROBE_SIZE:
                if (device, dtype) not in rates:
                    probe, _ = _warm_product(PROBE_SIZE, dtype, device)
                    rates[device, dtype] = _time_loop(probe, device, 1)[0] / PROBE_SIZE ** 3
                product = rates[device, dtype] * size ** 3
            total += max(2 * product, WARMUP_S) + repeats * max(TARGET_REPEAT_S, product)
    return total


def _plan(sizes, dtypes, device: str) -> tuple[list[tuple[str, str, int]], list[str]]:
    """What :func:`run_benchmark` will measure, as (device, dtype, size) in the order of its results, and
    notes (missing hardware, skipped dtypes). Raises as :func:`run_benchmark` documents."""
    dtypes = parse_dtypes(dtypes)
    fixed = None if sizes is None else parse_sizes(sizes)
    devices, notes = resolve_devices(device)
    plan = []
    for dev in devices:
        for dt in dtypes:
            if dtype_supported(dev, dt):
                plan += [(dev, dt, n) for n in (fixed or default_sizes(dev, dt, SETTINGS.size))]
            elif device == "all":
                notes.append(tr("{dtype} is not supported on {device}: skipped", dtype=dt, device=dev))
            else:
                raise ValueError(
                    tr("dtype {dt!r} is not supported on {dev}; allowed there: {allowed}. Fix: pick one of those.",
                       dt=dt, dev=dev, allowed=', '.join(d for d in DTYPES if dtype_supported(dev, d)))
                )
    return plan, notes


def estimate_seconds(sizes: str | Iterable[int] | None = None, dtypes: str | Iterable[str] = ("float32",),
                     device: str = "all", repeats: int = 5) -> float:
    """About how long :func:`run_benchmark` takes with these arguments on a quiet machine: the load sample,
    then per measurement a warm-up and ``repeats`` repeats of about ``TARGET_REPEAT_S`` each."""
    _check_repeats(repeats)
    plan, _ = _plan(sizes, dtypes, device)
    groups: dict[tuple[str, int], list[str]] = {}
    for dev, dt, n in plan:
        groups.setdefault((dev, n), []).append(dt)
    return LOAD_WINDOW_S + estimated_seconds(groups, repeats)


def announce(sizes: str | Iterable[int] | None = None, dtypes: str | Iterable[str] = ("float32",),
             device: str = "all", repeats: int = 5, budget_s: float | None = None) -> str:
    """The line a timing cell prints before it runs :func:`run_benchmark`: about how long it takes at this
    size and, with ``budget_s``, that a busy machine gets fewer repeats instead of a longer wait."""
    seconds = estimate_seconds(sizes, dtypes, device, repeats)
    if budget_s is None:
        return tr("measuring: about {seconds:.0f} s at this size on a quiet machine", seconds=max(1, seconds))
    return tr("measuring: about {seconds:.0f} s at this size on a quiet machine; on a busy one the repeats are "
              "cut to keep within {budget:.0f} s, and the notes say so", seconds=max(1, seconds), budget=budget_s)


def run_benchmark(
    sizes: str | Iterable[int] | None = None,
    dtypes: str | Iterable[str] = ("float32",),
    device: str = "all",
    repeats: int = 5,
    progress: bool = False,
    check_load: bool = True,
    budget_s: float | None = None,
) -> tuple[list[MatmulResult], list[str]]:
    """Measure every size x dtype x device; return the results and notes (missing hardware, skips, a busy CPU,
    repeats cut by the budget).

    ``sizes=None`` uses each device's ``default_sizes`` for the current ``SETTINGS.size``. A dtype the
    device cannot run is an error when a single device was asked for, and a reported skip when ``device='all'``.
    The dtypes of one device and size are timed in interleaved rounds (see :func:`dtype_ratio`). With
    ``check_load`` the CPU load is sampled for ``LOAD_WINDOW_S`` first and kept in each CPU result's ``busy``.
    With ``budget_s`` (seconds), a measurement whose turn comes after its share of the budget is spent keeps
    ``MIN_ROUNDS`` repeats instead of ``repeats``, and a note names it (:func:`time_budget_note`).
    """
    _check_repeats(repeats)
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise ValueError(tr("budget_s={budget!r} is not allowed: give a positive number of seconds, e.g. 20, or None "
                            "for no budget.", budget=budget_s))
    plan, notes = _plan(sizes, dtypes, device)
    groups: dict[tuple[str, int], list[str]] = {}  # the dtypes of one device and size run interleaved
    for dev, dt, n in plan:
        groups.setdefault((dev, n), []).append(dt)
    if max(n for _, n in groups) > PROBE_SIZE:  # how long, said (or refused) before it starts
        seconds = estimated_seconds(groups, repeats)
        if seconds > BUDGET_S:
            fix = tr("smaller --sizes (e.g. 1024,2048,4096) or fewer --repeats") if repeats > 1 else \
                tr("smaller --sizes (e.g. 1024,2048,4096)")
            raise ValueError(tr("these sizes would take about {minutes:,.0f} min to measure here, more than the "
                                "{budget:.0f} min a benchmark may take. Fix: {fix}.", minutes=seconds / 60,
                                budget=BUDGET_S / 60, fix=fix))
        if seconds > SAY_S and progress:
            print(tr("measuring for about {seconds:,.0f} s (Ctrl-C stops it)", seconds=seconds), file=sys.stderr,
                  flush=True)
    started = time.perf_counter()
    busy = busy_reason() if check_load else ""
    items = list(groups.items())
    if progress:
        from tqdm.auto import tqdm

        items = tqdm(items, desc=tr("matmul benchmark"), leave=False)
    results, done = [], 0
    for (dev, n), dts in items:
        done += len(dts)  # each group's deadline: its share of the budget, so early groups cannot spend it all
        deadline = math.inf if budget_s is None else started + budget_s * done / len(plan)
        # a busy CPU slows CPU products; GPU timings (CUDA events) are judged by their own spread
        results += _interleaved(n, dts, dev, repeats, busy if dev == "cpu" else "", deadline)
    order = {key: i for i, key in enumerate(plan)}
    results.sort(key=lambda r: order[(r.device, r.dtype, r.size)])
    cut = {f"{r.device} {r.dtype} n={r.size}": (r.repeats, repeats) for r in results if r.repeats < repeats}
    if cut:
        notes.append(time_budget_note(cut, budget_s))
    if busy:
        notes.append(tr("the machine looks busy ({busy}): timings may be unreliable; {advice}", busy=busy,
                        advice=unreliable_advice()))
    return results, notes


def results_note(results: list[MatmulResult]) -> str:
    """:func:`unreliable_note` for a table of results (its rows named by device, dtype and size)."""
    return unreliable_note({f"{r.device} {r.dtype} n={r.size}": r.unreliable for r in results})


def speedups(results: list[MatmulResult]) -> list[dict]:
    """GPU-over-CPU speedup (CPU seconds / GPU seconds) for every size and dtype measured on both."""
    cpu = {(r.dtype, r.size): r for r in results if r.device == "cpu"}
    rows = []
    for r in results:
        ref = cpu.get((r.dtype, r.size))
        if r.device != "cpu" and ref is not None:
            rows.append({"device": r.device, "dtype": r.dtype, "size": r.size, "speedup": ref.seconds / r.seconds})
    return rows


# ---------------------------------------------------------------- verdicts that stay true on a busy machine
@dataclass
class Verdict:
    """A measured comparison and what may be concluded from it: ``reliable`` is False when the run was
    disturbed, and then ``text`` says why instead of stating a conclusion."""

    reliable: bool
    value: float
    text: str

    def __str__(self) -> str:
        return self.text


def dtype_ratio(results: list[MatmulResult], device: str, size: int, dtype: str = "bfloat16",
                reference: str = "float32") -> Verdict:
    """How fast ``dtype`` runs relative to ``reference`` (rate ratio) at ``size`` on ``device``.

    Uses the interleaved rounds of :func:`run_benchmark`: the ratio of each round, their median as the value.
    Unreliable when either series is (:func:`unreliable_reason`) or the rounds' ratios spread by more than
    ``SPREAD_MAX``: then the text names the reason and draws no conclusion.
    """
    pick = {r.dtype: r for r in results if (r.device, r.size) == (device, size) and r.dtype in (dtype, reference)}
    if set(pick) != {dtype, reference}:
        raise ValueError(tr("no {dtype} and {reference} results at n={size} on {device}; measure both with "
                            "run_benchmark(dtypes=[{reference!r}, {dtype!r}]) first.",
                            dtype=dtype, reference=reference, size=size, device=device))
    fast, ref = pick[dtype], pick[reference]
    rounds = [r / f for r, f in zip(ref.times, fast.times)] or [ref.seconds / fast.seconds]
    value = statistics.median(rounds)
    head = tr("{device}, n={size}: {dtype} at {value:.2f}x the {reference} rate", device=device, size=size,
              dtype=dtype, value=value, reference=reference)
    reasons = [why for why in (fast.unreliable, ref.unreliable) if why]
    if relative_iqr(rounds) > SPREAD_MAX:
        reasons.append(tr("the {n} interleaved rounds disagree (ratios {low:.2f} to {high:.2f})", n=len(rounds),
                          low=min(rounds), high=max(rounds)))
    if reasons:
        return Verdict(False, value, tr("{head}: UNRELIABLE, no conclusion ({why}); {advice}", head=head,
                                        why=reasons[0], advice=unreliable_advice()))
    fields = dict(head=head, dtype=dtype, reference=reference, n=len(rounds), spread=relative_iqr(rounds))
    if value > 1:
        text = tr("{head}: {dtype} is faster than {reference} here ({n} interleaved rounds agree within "
                  "{spread:.0%})", **fields)
    elif value < 1:
        text = tr("{head}: {dtype} is slower than {reference} here ({n} interleaved rounds agree within "
                  "{spread:.0%})", **fields)
    else:
        text = tr("{head}: {dtype} is as fast as {reference} here ({n} interleaved rounds agree within "
                  "{spread:.0%})", **fields)
    return Verdict(True, value, text)


def reference_check(result: MatmulResult, min_run_time: float = 0.5) -> Verdict:
    """Time ``result``'s product again with ``torch.utils.benchmark`` and say whether the two agree.

    The value is reference seconds / workbook seconds. "agree" needs both timings reliable (the reference's
    own IQR / median at most ``SPREAD_MAX``, no busy CPU) and the ratio within ``AGREE_RANGE``.
    """
    measurement = torch_benchmark(result.size, result.dtype, result.device, min_run_time)
    ratio = measurement.median / result.seconds
    head = tr("{device}, n={size}: workbook {ours:.3f} ms, torch.utils.benchmark {theirs:.3f} ms (ratio "
              "{ratio:.2f})", device=result.device, size=result.size, ours=result.seconds * 1e3,
              theirs=measurement.median * 1e3, ratio=ratio)
    reasons = [why for why in (result.unreliable, unreliable_reason(measurement.times)) if why]
    if reasons:
        return Verdict(False, ratio, tr("{head}: UNRELIABLE ({why}); {advice}", head=head, why=reasons[0],
                                        advice=unreliable_advice()))
    low, high = AGREE_RANGE
    if low <= ratio <= high:
        return Verdict(True, ratio, tr("{head}: agree", head=head))
    return Verdict(True, ratio, tr("{head}: disagree although both runs were steady: a timer is wrong",
                                   head=head))


def results_frame(results: list[MatmulResult]):
    """The results as a pandas DataFrame for notebooks: median ms, spread (IQR / median), GFLOP/s, trust; headers
    and yes/no in the learner's language, numbers with its separators (numbers stay numbers in English)."""
    import pandas as pd

    english = SETTINGS.lang == "en"

    def num(value, spec: str):
        return value if english else number(value, spec)

    return pd.DataFrame([{
        tr("device"): r.device, "dtype": r.dtype, "n": r.size, tr("median ms"): num(round(r.seconds * 1e3, 3), ""),
        tr("spread"): number(r.spread, ".0%"), "GFLOP/s": num(round(r.gflops, 1), ""),
        tr("reliable"): tr("no") if r.unreliable else tr("yes"),
    } for r in results])


# ---------------------------------------------------------------- the best rate this device reaches
@dataclass
class SweepResult:
    """The highest and the median rate over a sweep of shapes, and the efficiency when a peak is known."""

    device: str
    device_name: str
    dtype: str
    best_gflops: float
    best_size: int
    median_gflops: float
    peak_gflops: float | None
    peak_source: str
    results: list[MatmulResult]

    @property
    def efficiency(self) -> float | None:
        return self.best_gflops / self.peak_gflops if self.peak_gflops else None


def theoretical_peak_gflops(device: str, dtype: str) -> tuple[float | None, str]:
    """The device's theoretical peak for ``dtype`` and where that figure comes from (None when unknown).

    GPUs: data-sheet figures for common models. CPUs (float32 only), an estimate: cores x clock x FLOPs
    per cycle, assuming two FMA units per core (32 FLOPs per cycle with AVX2, 64 with AVX-512; CPUs with
    one unit reach half), with the highest clock the OS reports (turbo, else the current clock).
    """
    if device.startswith("cuda"):
        import re

        name = torch.cuda.get_device_name(device)
        models = {m for m, _ in GPU_PEAK_GFLOPS if re.search(rf"\b{m}\b", name)}
        if not models:
            return None, tr("no data-sheet peak stored for {name}", name=name)
        model = max(models, key=len)
        peak = GPU_PEAK_GFLOPS.get((model, dtype))
        if peak is None:
            return None, tr("{model} has no fast {dtype} path on its data sheet", model=model, dtype=dtype)
        return float(peak), tr("{model} data sheet, dense", model=model)
    if device == "cpu" and dtype == "float32":
        import psutil

        freq = psutil.cpu_freq()
        mhz = (freq.max or freq.current) if freq else 0
        cores = psutil.cpu_count(logical=False) or 1
        isa = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
        per_cycle = 64 if "AVX512" in isa else 32 if "AVX2" in isa else None
        if mhz and per_cycle:
            fields = dict(cores=cores, ghz=mhz / 1000, per_cycle=per_cycle)
            if freq.max:
                return cores * mhz / 1000 * per_cycle, tr(
                    "estimate: {cores} cores x {ghz:.2f} GHz (max clock) x {per_cycle} FLOP/cycle", **fields)
            return cores * mhz / 1000 * per_cycle, tr(
                "estimate: {cores} cores x {ghz:.2f} GHz (current clock) x {per_cycle} FLOP/cycle", **fields)
    return None, tr("no published peak for this device and dtype")


def best_achievable(
    device: str = "cpu", dtype: str = "float32", sizes: Iterable[int] | None = None, repeats: int = 3,
    budget_s: float | None = None,
) -> SweepResult:
    """Sweep square sizes and report the best and median GFLOP/s reached (mamf-finder style); ``budget_s``
    as in :func:`run_benchmark`."""
    if sizes is None:
        sizes = range(256, 1281, 256) if device == "cpu" else range(1024, 8193, 1024)
    results, _ = run_benchmark(list(sizes), [dtype], device, repeats, budget_s=budget_s)
    best = max(results, key=lambda r: r.gflops)
    peak, source = theoretical_peak_gflops(best.device, dtype)
    return SweepResult(
        device=best.device, device_name=best.device_name, dtype=dtype, best_gflops=best.gflops,
        best_size=best.size, median_gflops=statistics.median(r.gflops for r in results),
        peak_gflops=peak, peak_source=source, results=results,
    )


def results_table(results: list[MatmulResult]) -> str:
    """A fixed-width table of results for terminals: median, min-max, spread (IQR / median), trust (headers, yes/no
    and numbers in the learner's language)."""
    lines = [f"{tr('device'):<8} {'dtype':<9} {tr('size'):>6} {tr('median ms'):>10} {tr('min-max ms'):>17} "
             f"{tr('spread'):>7} {'GFLOP/s':>9}  {tr('reliable')}"]
    for r in results:
        span = f"{number(r.seconds_min * 1e3, '.3f')}-{number(r.seconds_max * 1e3, '.3f')}"
        lines.append(f"{r.device:<8} {r.dtype:<9} {r.size:>6} {number(r.seconds * 1e3, '>10.3f')} {span:>17} "
                     f"{number(r.spread, '>7.0%')} {number(r.gflops, '>9.1f')}  {tr('no') if r.unreliable else tr('yes')}")
    return "\n".join(lines)


_BURN_ONE_CORE = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


@contextlib.contextmanager
def one_core_burnt(seconds: float = 300.0):
    """A second process spinning on one core for the duration of the block (then killed and reaped): the busy
    machine the benchmarks (``--busy-only``) and the busy-timing tests measure lessons on."""
    burner = subprocess.Popen([sys.executable, "-c", _BURN_ONE_CORE.format(seconds=seconds)])
    try:
        time.sleep(0.5)  # let it take its core
        yield
    finally:
        burner.kill()
        burner.wait()
