"""How fast is a matrix product here? (lesson 1.1: CPU vs GPU, measured)

``run_benchmark`` times ``torch.mm`` on square matrices over sizes x dtypes x devices the way a
careful benchmark does: warm-up, device synchronisation (CUDA events on GPUs), an inner loop long
enough to swamp timer overhead, several repeats, median and spread. Throughput is
GFLOP/s = 2 n^3 / t. ``best_achievable`` sweeps shapes for the highest rate this device reaches
(in the spirit of stas00's mamf-finder, with a CPU path). ``effitrain bench`` is the same from a terminal.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import torch

from effitrain_helpers.core.devices import available_devices, cpu_model_name
from effitrain_helpers.core.validate import positive_int

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_CHOICES = ("cpu", "cuda", "mps", "all")
MAX_SIZE = 32768
TARGET_REPEAT_S = 0.1  # each repeat runs the product enough times to last about this long
WARMUP_S = 0.05  # warm-up runs the product at least this long (and at least twice)

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

    @property
    def gflops_best(self) -> float:
        """Throughput of the fastest repeat (the least disturbed by other work on the machine)."""
        return gflops(self.size, self.seconds_min)

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
        raise ValueError("no sizes given; allowed: whole numbers 1..32768 such as 256,512,1024.")
    out = []
    for item in items:
        try:
            value = int(item) if not isinstance(item, float) or item.is_integer() else None
        except (TypeError, ValueError):
            value = None
        if value is None or isinstance(item, bool) or not 1 <= value <= MAX_SIZE:
            raise ValueError(
                f"size {item!r} is not allowed; sizes are whole numbers from 1 to {MAX_SIZE} "
                "(the side of a square matrix). Fix: e.g. --sizes 256,512,1024."
            )
        out.append(value)
    return out


def parse_dtypes(dtypes: str | Iterable[str]) -> list[str]:
    """Dtype names from 'float32,bfloat16' or a list; each one of float32, bfloat16, float16."""
    items = [d.strip() for d in dtypes.split(",")] if isinstance(dtypes, str) else list(dtypes)
    for item in items:
        if item not in DTYPES:
            raise ValueError(
                f"dtype {item!r} is not allowed; choose from {', '.join(DTYPES)}. Fix: e.g. --dtypes float32,bfloat16."
            )
    if not items:
        raise ValueError(f"no dtypes given; choose from {', '.join(DTYPES)}.")
    return items


def resolve_devices(device: str = "all") -> tuple[list[str], list[str]]:
    """Torch devices for ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``all``, and notes on missing hardware.

    A device family that is absent is not an error: it is reported in the notes and skipped.
    """
    present = available_devices()
    family = device.split(":")[0] if isinstance(device, str) else None
    if family not in DEVICE_CHOICES or (":" in device and family != "cuda"):
        raise ValueError(
            f"device {device!r} is not allowed; choose from {', '.join(DEVICE_CHOICES)} (or cuda:N). "
            "Fix: e.g. --device cpu."
        )
    if device == "all":
        chosen = present
    elif device == "cuda":
        chosen = [d for d in present if d.startswith("cuda")]
    else:
        chosen = [d for d in present if d == device]
    notes = []
    if not chosen:
        notes.append(f"no {device} device found on this machine: measuring the CPU only")
        chosen = ["cpu"]
    elif device == "all" and len(present) == 1:
        notes.append("no GPU found: showing CPU only")
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


# ---------------------------------------------------------------- measuring
def synchronize(device: str) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def _time_loop(fn: Callable[[], object], device: str, number: int) -> float:
    """Seconds for ``number`` calls of ``fn``, with the device synchronised (CUDA events on GPUs)."""
    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    synchronize(device)
    return time.perf_counter() - t0


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    if device == "mps":
        return "Apple GPU (MPS)"
    return cpu_model_name()


def _check_repeats(repeats: int) -> None:
    positive_int("repeats", repeats, hint="repeats=5 is a good default")


def time_matmul(size: int, dtype: str = "float32", device: str = "cpu", repeats: int = 5) -> MatmulResult:
    """Median time of one ``size`` x ``size`` product on ``device`` in ``dtype``, with spread."""
    (size,) = parse_sizes([size])
    parse_dtypes([dtype])
    _check_repeats(repeats)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=DTYPES[dtype])
    out = torch.empty_like(a)

    def product() -> None:
        torch.mm(a, b, out=out)

    first, spent, calls = float("inf"), 0.0, 0  # warm-up: kernels chosen, caches and clocks settled
    while calls < 2 or spent < WARMUP_S:
        took = _time_loop(product, device, 1)
        first, spent, calls = min(first, took), spent + took, calls + 1
    number = max(1, math.ceil(TARGET_REPEAT_S / max(first, 1e-7)))
    per_call = [_time_loop(product, device, number) / number for _ in range(repeats)]
    median = statistics.median(per_call)
    return MatmulResult(
        device=device, device_name=_device_name(device), dtype=dtype, size=size, seconds=median,
        seconds_min=min(per_call), seconds_max=max(per_call), repeats=repeats, number=number,
        gflops=gflops(size, median),
    )


def torch_benchmark_seconds(
    size: int, dtype: str = "float32", device: str = "cpu", min_run_time: float = 0.5, best: bool = False
) -> float:
    """Seconds of the same product timed by ``torch.utils.benchmark`` (the reference to agree with): the
    median of its blocks, or with ``best=True`` the fastest block."""
    from torch.utils import benchmark as tb

    (size,) = parse_sizes([size])
    a = torch.randn(size, size, device=device, dtype=DTYPES[parse_dtypes([dtype])[0]])
    b, out = torch.randn_like(a), torch.empty_like(a)
    timer = tb.Timer("torch.mm(a, b, out=out)", globals={"torch": torch, "a": a, "b": b, "out": out},
                     num_threads=torch.get_num_threads())  # its default is 1 thread: not what the helper measures
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return min(measurement.times) if best else measurement.median


def run_benchmark(
    sizes: str | Iterable[int] | None = None,
    dtypes: str | Iterable[str] = ("float32",),
    device: str = "all",
    repeats: int = 5,
    progress: bool = False,
) -> tuple[list[MatmulResult], list[str]]:
    """Measure every size x dtype x device; return the results and notes (missing hardware, skips).

    ``sizes=None`` uses each device's ``default_sizes`` for the current ``SETTINGS.size``. A dtype the
    device cannot run is an error when a single device was asked for, and a reported skip when ``device='all'``.
    """
    from effitrain_helpers.core.settings import SETTINGS

    dtypes = parse_dtypes(dtypes)
    fixed = None if sizes is None else parse_sizes(sizes)
    _check_repeats(repeats)
    devices, notes = resolve_devices(device)
    plan = []
    for dev in devices:
        for dt in dtypes:
            if dtype_supported(dev, dt):
                plan += [(dev, dt, n) for n in (fixed or default_sizes(dev, dt, SETTINGS.size))]
            elif device == "all":
                notes.append(f"{dt} is not supported on {dev}: skipped")
            else:
                raise ValueError(
                    f"dtype {dt!r} is not supported on {dev}; allowed there: "
                    f"{', '.join(d for d in DTYPES if dtype_supported(dev, d))}. Fix: pick one of those."
                )
    if progress:
        from tqdm.auto import tqdm

        plan = tqdm(plan, desc="matmul benchmark", leave=False)
    return [time_matmul(n, dt, dev, repeats) for dev, dt, n in plan], notes


def speedups(results: list[MatmulResult]) -> list[dict]:
    """GPU-over-CPU speedup (CPU seconds / GPU seconds) for every size and dtype measured on both."""
    cpu = {(r.dtype, r.size): r for r in results if r.device == "cpu"}
    rows = []
    for r in results:
        ref = cpu.get((r.dtype, r.size))
        if r.device != "cpu" and ref is not None:
            rows.append({"device": r.device, "dtype": r.dtype, "size": r.size, "speedup": ref.seconds / r.seconds})
    return rows


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
            return None, f"no data-sheet peak stored for {name}"
        model = max(models, key=len)
        peak = GPU_PEAK_GFLOPS.get((model, dtype))
        if peak is None:
            return None, f"{model} has no fast {dtype} path on its data sheet"
        return float(peak), f"{model} data sheet, dense"
    if device == "cpu" and dtype == "float32":
        import psutil

        freq = psutil.cpu_freq()
        mhz = (freq.max or freq.current) if freq else 0
        cores = psutil.cpu_count(logical=False) or 1
        isa = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
        per_cycle = 64 if "AVX512" in isa else 32 if "AVX2" in isa else None
        if mhz and per_cycle:
            clock = "max" if freq.max else "current"
            return cores * mhz / 1000 * per_cycle, (
                f"estimate: {cores} cores x {mhz / 1000:.2f} GHz ({clock} clock) x {per_cycle} FLOP/cycle"
            )
    return None, "no published peak for this device and dtype"


def best_achievable(
    device: str = "cpu", dtype: str = "float32", sizes: Iterable[int] | None = None, repeats: int = 3
) -> SweepResult:
    """Sweep square sizes and report the best and median GFLOP/s reached (mamf-finder style)."""
    if sizes is None:
        sizes = range(256, 1281, 256) if device == "cpu" else range(1024, 8193, 1024)
    results, _ = run_benchmark(list(sizes), [dtype], device, repeats)
    best = max(results, key=lambda r: r.gflops)
    peak, source = theoretical_peak_gflops(best.device, dtype)
    return SweepResult(
        device=best.device, device_name=best.device_name, dtype=dtype, best_gflops=best.gflops,
        best_size=best.size, median_gflops=statistics.median(r.gflops for r in results),
        peak_gflops=peak, peak_source=source, results=results,
    )


def results_table(results: list[MatmulResult]) -> str:
    """A fixed-width table of results for terminals and notebooks."""
    lines = [f"{'device':<8} {'dtype':<9} {'size':>6} {'median ms':>10} {'spread ms':>17} {'GFLOP/s':>9}"]
    for r in results:
        spread = f"{r.seconds_min * 1e3:.3f}-{r.seconds_max * 1e3:.3f}"
        lines.append(
            f"{r.device:<8} {r.dtype:<9} {r.size:>6} {r.seconds * 1e3:>10.3f} {spread:>17} {r.gflops:>9.1f}"
        )
    return "\n".join(lines)
