"""The lessons' figures, drawn large enough for a projector.

- ``plot_gflops``: matrix-product throughput against size, one line per device and dtype (lesson 1.1)
- ``plot_four_steps``: the four steps of data-parallel training on two devices (lesson 1.1)
- ``plot_gradient_sync``: steps 3 and 4 with a parameter server and with DDP's all-reduce (lesson 1.1)
- ``plot_saved_bytes``, ``plot_checkpointing``, ``plot_local_sgd``, ``plot_precision``: chapter 3's measurements
- ``plot_rank_bytes``: bytes each rank holds under DDP and FSDP, by kind (lesson 5.1)
- ``plot_step_breakdown``: a training step's phases as stacked bars, one per configuration (lesson 5.2)
- ``plot_class_summary``: a graded class, students per verdict for each exercise (the instructor's start page)

Every text a figure draws (titles, axis labels, legends, annotations, tick labels that are words) is in the
learner's language (``tr``, see :mod:`effitrain_helpers.core.language`); a title a lesson passes in is the lesson's
own (translated in its notebook), and the default title, when none is passed, is translated here. Values stay as
they are: device, dtype and precision names, a lesson's labels, code (``optimizer.step()``, ``load_state``).
Numbers drawn as text use the language's separators (``number``, ``number_list``); so do the numeric ticks of
every figure: each ``plot_*`` function hands its figure to :func:`numbers_in_language` (wrapped once, at the end of
this module), which a lesson can call on a figure it draws itself.
"""

from __future__ import annotations

import functools
import textwrap
from typing import TYPE_CHECKING

from effitrain_helpers.core import files
from effitrain_helpers.core.language import msg, number, number_list, separators, tr
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.core.validate import whole_number

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure

    from effitrain_helpers.measure.bench import MatmulResult

FONT = 13

# local_sgd.compare_data_parallel's ways: (legend, bar label), shown translated by plot_local_sgd; another way's
# name is drawn as it is, its underscores made spaces (legend) or line breaks (bar)
_WAYS = {"data_parallel": (msg("data parallel"), msg("data\nparallel")),
         "local_sgd": (msg("local sgd"), msg("local\nsgd")),
         "no_communication": (msg("no communication"), msg("no\ncommunication")),
         "accumulation": (msg("accumulation"), msg("accumulation"))}


def save_figure(figure: "Figure", path, dpi: int = 120) -> None:
    """``figure`` saved to ``path`` (its type from the suffix) whole or not at all: drawn in memory, then written
    by :func:`~effitrain_helpers.core.files.write_atomically`, so a full disk leaves no partial image and its
    ``OSError`` names the path."""
    import io
    from pathlib import Path

    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".").lower() or "png", dpi=dpi)
    files.write_atomically(Path(path).expanduser(), buffer.getvalue())


def plot_gflops(results: list["MatmulResult"], title: str | None = None, ax=None) -> "Figure":
    """GFLOP/s against matrix size (log-log), one line per (device, dtype), with min-max error bars."""
    import matplotlib.pyplot as plt

    if not results:
        raise ValueError(tr("no results to plot; run run_benchmark(...) first and pass its results."))
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 4.8))
    fig = ax.figure
    series: dict[tuple[str, str], list] = {}
    for r in results:
        series.setdefault((r.device, r.dtype), []).append(r)
    for (device, dtype), rows in series.items():
        rows.sort(key=lambda r: r.size)
        x = [r.size for r in rows]
        y = [r.gflops for r in rows]
        low = [r.gflops - 2 * r.size**3 / r.seconds_max / 1e9 for r in rows]
        high = [2 * r.size**3 / r.seconds_min / 1e9 - r.gflops for r in rows]
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=f"{device} {dtype}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(tr("matrix size n (n x n times n x n)"), fontsize=FONT)
    ax.set_ylabel(tr("GFLOP/s (2n^3 / median time)"), fontsize=FONT)
    ax.set_title(title or tr("Matrix product throughput on {device}", device=results[0].device_name), fontsize=FONT)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=FONT - 2)
    fig.tight_layout()
    return fig


def _with_decimal(label: str) -> str:
    """A tick label matplotlib wrote (``0.5``, ``$\\mathdefault{2^{5.32}}$``) with the decimal separator of the
    language drawn now: ``0,5`` (mathtext: ``{,}``, a comma with no space after it) in pt-BR, as it was in English."""
    decimal = separators(SETTINGS.lang)[0]
    if decimal == ".":
        return label
    return label.replace(".", "{%s}" % decimal if "$" in label else decimal)


@functools.cache
def _in_language(formatter_class: type) -> type:
    """``formatter_class`` (a ScalarFormatter or LogFormatter) whose labels and offset (``1e-3``) go through
    :func:`_with_decimal`; same ticks, digits and settings as matplotlib's."""

    class InLanguage(formatter_class):
        in_language = True

        def __call__(self, x, pos=None):
            return _with_decimal(super().__call__(x, pos))

        def get_offset(self):
            return _with_decimal(super().get_offset())

    InLanguage.__name__ = InLanguage.__qualname__ = f"{formatter_class.__name__}InLanguage"
    return InLanguage


def numbers_in_language(fig: "Figure") -> "Figure":
    """``fig`` with the numeric tick labels of all its axes in the learner's language, read when it is drawn
    (``0.5`` becomes ``0,5`` in pt-BR): linear and log axes (``ScalarFormatter``, ``LogFormatter`` and their
    subclasses, major and minor, colour bars too) keep matplotlib's ticks and digits; word ticks (categories,
    ``set_xticks(ticks, labels)``) and English figures are left exactly as they were. Calling it again changes
    nothing. Returns ``fig``."""
    from matplotlib.ticker import LogFormatter, ScalarFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for formatter in (axis.get_major_formatter(), axis.get_minor_formatter()):
                numeric = isinstance(formatter, (ScalarFormatter, LogFormatter))
                if numeric and not hasattr(formatter, "in_language"):
                    formatter.__class__ = _in_language(type(formatter))  # keeps the formatter's own settings
    return fig


def _box(ax, x, y, w, h, text, color):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color, ec="black", lw=1))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=FONT - 2)


def _arrow(ax, start, end, text=""):
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "lw": 1.5})
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.05, (start[1] + end[1]) / 2, text, fontsize=FONT - 4)


def plot_four_steps(num_devices: int = 2) -> "Figure":
    """The four steps of one data-parallel training step, drawn for ``num_devices`` devices."""
    import matplotlib.pyplot as plt

    if not isinstance(num_devices, int) or not 2 <= num_devices <= 4:
        raise ValueError(tr("num_devices={num_devices!r}: draw between 2 and 4 devices.", num_devices=num_devices))
    fig, ax = plt.subplots(figsize=(11, 5.5))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 6)
    ax.axis("off")
    _box(ax, 3.5, 5.2, 3, 0.6, tr("global batch (all samples)"), "#dddddd")
    width = 8 / num_devices
    for i in range(num_devices):
        x = 1 + i * width
        _arrow(ax, (5, 5.2), (x + width * 0.4, 4.55), tr("1. shard") if i == 0 else "")
        _box(ax, x, 4.0, width * 0.8, 0.5, tr("shard {i}", i=i), "#cfe8ff")
        _box(ax, x, 2.8, width * 0.8, 0.8, tr("device {i}\nmodel copy (2. replicate)", i=i), "#ffe7b3")
        _arrow(ax, (x + width * 0.4, 4.0), (x + width * 0.4, 3.6))
        _box(ax, x, 1.8, width * 0.8, 0.5, tr("gradients {i}", i=i), "#ffd0d0")
        _arrow(ax, (x + width * 0.4, 2.8), (x + width * 0.4, 2.3))
        _arrow(ax, (x + width * 0.4, 1.8), (5, 1.1), tr("3. aggregate") if i == 0 else "")
    _box(ax, 3.0, 0.4, 4, 0.7, tr("averaged gradient -> one update\n4. synchronise: same weights everywhere"),
         "#d5f5d5")
    ax.set_title(tr("One step of data-parallel training"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


def plot_image_before_after(image, pixel_values, mean, std) -> "Figure":
    """An image as stored (any size) beside what the model receives (``pixel_values``, de-normalised to show)."""
    import matplotlib.pyplot as plt
    import numpy as np

    pixels = np.asarray(pixel_values, dtype=np.float32)
    if pixels.ndim != 3 or pixels.shape[0] != 3:
        raise ValueError(tr("pixel_values of one image should have shape (3, H, W); got {shape}.", shape=pixels.shape))
    shown = pixels.transpose(1, 2, 0) * np.asarray(std) + np.asarray(mean)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.2))
    left.imshow(image)
    left.set_title(tr("stored: {width} x {height} pixels, uint8", width=image.size[0], height=image.size[1]),
                   fontsize=FONT)
    right.imshow(np.clip(shown, 0, 1))
    right.set_title(tr("pixel_values: {height} x {width}, float32\nvalues in [{low:.2f}, {high:.2f}]",
                       height=pixels.shape[1], width=pixels.shape[2], low=pixels.min(), high=pixels.max()),
                    fontsize=FONT)
    for ax in (left, right):
        ax.set_xlabel(tr("width (pixels)"))
        ax.set_ylabel(tr("height (pixels)"))
    fig.tight_layout()
    return fig


def plot_resampling(wave, rate: int, resampled, target_rate: int, window_ms: float = 10.0) -> "Figure":
    """The first ``window_ms`` milliseconds of a waveform before and after resampling, on one time axis."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(10, 4))
    for signal, sr, style, label in ((wave, rate, "o-", tr("original, {rate} Hz", rate=rate)),
                                     (resampled, target_rate, "x--", tr("resampled, {rate} Hz", rate=target_rate))):
        n = int(sr * window_ms / 1000)
        ax.plot(np.arange(n) / sr * 1000, np.asarray(signal)[:n], style, markersize=4,
                label=tr("{label} ({n} samples)", label=label, n=n))
    ax.set_xlabel(tr("time (ms)"), fontsize=FONT)
    ax.set_ylabel(tr("amplitude"), fontsize=FONT)
    ax.set_title(tr("Same sound, same duration, {ratio:.2f}x as many samples per second", ratio=target_rate / rate),
                 fontsize=FONT)
    ax.legend(fontsize=FONT - 2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_shards(reports: list[dict], num_samples: int, title: str = "") -> "Figure":
    """Which sample (column) each rank (row) received; a darker cell marks a sample given more than once."""
    import matplotlib.pyplot as plt
    import numpy as np
    from collections import Counter

    counts = Counter(i for r in reports for i in r["indices"])
    grid = np.zeros((len(reports), num_samples))
    for row, report in enumerate(reports):
        for i in report["indices"]:
            grid[row, i] = 2 if counts[i] > 1 else 1
    fig, ax = plt.subplots(figsize=(max(6, num_samples * 0.55), 0.9 * len(reports) + 1.6))
    ax.imshow(grid, cmap="Blues", vmin=0, vmax=2.4, aspect="auto")
    for row, report in enumerate(reports):
        for i in report["indices"]:
            ax.text(i, row, str(i), ha="center", va="center", fontsize=FONT - 3,
                    color="white" if counts[i] > 1 else "black")
    ax.set_yticks(range(len(reports)), [tr("rank {rank}", rank=r["rank"]) for r in reports], fontsize=FONT - 1)
    ax.set_xticks(range(num_samples))
    ax.set_xlabel(tr("sample index (dark: sent to more than one rank)"), fontsize=FONT - 1)
    ax.set_title(title or tr("{samples} samples over {processes} processes", samples=num_samples,
                             processes=len(reports)), fontsize=FONT)
    fig.tight_layout()
    return fig


def plot_scaling(one: dict, many: dict) -> "Figure":
    """Samples per second (left) and time per step split into compute and communication (right)."""
    import matplotlib.pyplot as plt

    n = many["world_size"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [tr("1 process"), tr("{n} processes\nworkbook loop", n=n), tr("{n} processes\nplain DDP", n=n)]
    values = [one["workbook_samples_per_s"], many["workbook_samples_per_s"], many["ddp_samples_per_s"]]
    left.bar(labels, values, color=["#999999", "#1f77b4", "#ff7f0e"])
    left.set_ylabel(tr("samples per second (all processes)"), fontsize=FONT - 1)
    left.set_title(tr("Training throughput"), fontsize=FONT)
    for k, data in enumerate((one, many)):
        compute, comm = data["compute_s_per_step"] * 1e3, data["communication_s_per_step"] * 1e3
        right.bar(k, compute, color="#2ca02c", label=tr("compute") if k == 0 else None)
        right.bar(k, comm, bottom=compute, color="#d62728", label=tr("communication") if k == 0 else None)
    right.set_xticks([0, 1], [tr("1 process"), tr("{n} processes", n=n)])
    right.set_ylabel(tr("milliseconds per step"), fontsize=FONT - 1)
    right.set_title(tr("Where a step's time goes"), fontsize=FONT)
    right.legend(fontsize=FONT - 3)
    fig.tight_layout()
    return fig


def plot_saved_bytes(labels: list[str], values: list[float], title: str) -> "Figure":
    """Bars of bytes saved for backward (shown in MiB), one per setting, value written on each bar (lesson 3.1)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    mib = [v / 2**20 for v in values]
    bars = ax.bar(labels, mib, color=["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"][:len(labels)])
    ax.bar_label(bars, [f"{number(m, '.1f')} MiB" for m in mib], fontsize=FONT - 2)
    ax.set_ylabel(tr("activations saved for backward (MiB)"), fontsize=FONT - 1)
    ax.set_title(title, fontsize=FONT)
    fig.tight_layout()
    return fig


def plot_checkpointing(rows: list) -> "Figure":
    """Bytes saved for backward (left) and step time (right) against sequence length, without and with
    gradient checkpointing (lesson 3.2; rows from ``checkpointing.measure_checkpointing``)."""
    import matplotlib.pyplot as plt

    lengths = [r.seq_len for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, color, name in (("off", "#1f77b4", tr("checkpointing off")), ("on", "#ff7f0e", tr("checkpointing on"))):
        left.plot(lengths, [getattr(r, f"activation_bytes_{label}") / 2**20 for r in rows], "o-", color=color,
                  label=name)
        right.plot(lengths, [getattr(r, f"step_seconds_{label}") * 1e3 for r in rows], "o-", color=color,
                   label=name)
    left.plot(lengths, [r.activation_bytes_on_expected / 2**20 for r in rows], "x:", color="#ff7f0e",
              label=tr("theory, with"))
    right.plot(lengths, [r.step_seconds_off * 4e3 / 3 for r in rows], "x:", color="#ff7f0e",
               label=tr("theory, with (4/3 x without)"))
    left.set_ylabel(tr("activations saved for backward (MiB)"), fontsize=FONT - 1)
    right.set_ylabel(tr("forward + backward (ms)"), fontsize=FONT - 1)
    left.set_title(tr("Memory"), fontsize=FONT)
    right.set_title(tr("Time"), fontsize=FONT)
    for ax in (left, right):
        ax.set_xlabel(tr("sequence length (batch {batch})", batch=rows[0].batch_size), fontsize=FONT - 1)
        ax.set_xticks(lengths)
        ax.legend(fontsize=FONT - 3)
    fig.tight_layout()
    return fig


def plot_local_sgd(summary: dict) -> "Figure":
    """Loss per step (left) and synchronisations per run (right) for the ways of ``local_sgd.measure_local_sgd``
    (``{way: WaySummary}``, lesson 3.2)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(summary)
    for name in names:
        losses = summary[name].mean_losses
        label = tr(_WAYS[name][0]) if name in _WAYS else name.replace("_", " ")
        left.plot(range(1, len(losses) + 1), losses, label=label)
    left.set_xlabel(tr("optimizer step"), fontsize=FONT - 1)
    left.set_ylabel(tr("training loss (mean over processes)"), fontsize=FONT - 1)
    left.set_title(tr("Loss curves"), fontsize=FONT)
    left.legend(fontsize=FONT - 3)
    bars = right.bar([tr(_WAYS[n][1]) if n in _WAYS else n.replace("_", "\n") for n in names],
                     [summary[n].synchronisations for n in names],
                     color="#9467bd")
    right.bar_label(bars, [f"{summary[n].bytes_per_rank / 2**20:.0f} MiB" for n in names], fontsize=FONT - 3)
    right.set_ylabel(tr("synchronisations (label: MiB sent per process)"), fontsize=FONT - 2)
    right.set_title(tr("Communication"), fontsize=FONT)
    fig.tight_layout()
    return fig


def plot_precision(runs: dict) -> "Figure":
    """Loss per step (left) and seconds per step (right), one per precision (lesson 3.3; ``{precision:
    TechniquesRun}`` from ``precision.measure_precision``). A precision that ran as another (fp16 on a CPU runs
    as fp32) has a loss curve but no speed bar: its time would be the other's; an unreliable time is marked."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = ["-", "--", ":"]
    labels = [name if run.precision_effective == name
              else tr("{name}\n(ran as {effective})", name=name, effective=run.precision_effective)
              for name, run in runs.items()]
    for (name, run), style, label in zip(runs.items(), styles, labels):
        left.plot(range(1, len(run.losses) + 1), run.losses, style, lw=2, label=label.replace("\n", " "))
    left.set_xlabel(tr("optimizer step"), fontsize=FONT - 1)
    left.set_ylabel(tr("training loss"), fontsize=FONT - 1)
    left.set_title(tr("Loss curves"), fontsize=FONT)
    left.legend(fontsize=FONT - 3)
    timed = {name: run for name, run in runs.items() if run.precision_effective == name}  # ran as asked
    bars = right.bar(list(timed), [r.seconds_per_step * 1e3 for r in timed.values()], color="#8c564b")
    right.bar_label(bars, [f"{r.seconds_per_step * 1e3:.0f} ms" + (f"\n({tr('unreliable')})" if r.time_doubt else "")
                           for r in timed.values()], fontsize=FONT - 3)
    right.set_ylabel(tr("milliseconds per step"), fontsize=FONT - 1)
    right.set_title(tr("Speed"), fontsize=FONT)
    fig.tight_layout()
    return fig


# --- chapter 4: optimizers -------------------------------------------------------------------------------------

def plot_state_bytes(rows: list[tuple[str, float, float]], title: str | None = None, unit: str = "MiB") -> "Figure":
    """Measured against theoretical optimizer-state bytes: ``rows`` of ``(label, measured_bytes, theory_bytes)``
    (lessons 4.1-4.3). Bars are drawn in ``unit`` (``MiB``, ``KiB`` or ``B``) and labelled with the ratio; the
    title is ``title``, or "Optimizer state" in the learner's language."""
    import matplotlib.pyplot as plt

    scale = {"MiB": 2**20, "KiB": 2**10, "B": 1}
    if unit not in scale:
        raise ValueError(tr("unit={unit!r} is not allowed; allowed: {scale}.", unit=unit, scale=', '.join(scale)))
    if not rows:
        raise ValueError(tr("no rows to plot; pass [(label, measured_bytes, theory_bytes), ...]."))
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows)), 4.2))
    xs = range(len(rows))
    measured = [m / scale[unit] for _, m, _ in rows]
    theory = [t / scale[unit] for _, _, t in rows]
    ax.bar([x - 0.2 for x in xs], measured, 0.4, label=tr("measured (optimizer.state)"), color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], theory, 0.4, label=tr("theory (from shapes)"), color="#bbbbbb", hatch="//")
    for x, (_, m, t) in zip(xs, rows):
        ax.text(x, max(m, t) / scale[unit], tr("{ratio:.3f}x theory", ratio=m / t) if t else "", ha="center",
                va="bottom", fontsize=FONT - 3)
    ax.set_xticks(list(xs), [label for label, _, _ in rows], fontsize=FONT - 1)
    ax.set_ylabel(tr("state ({unit})", unit=unit), fontsize=FONT)
    ax.set_title(title or tr("Optimizer state"), fontsize=FONT)
    ax.legend(fontsize=FONT - 3)
    ax.margins(y=0.15)
    fig.tight_layout()
    return fig


def plot_optimizer_comparison(comparison) -> "Figure":
    """The chapter 4 comparison in one figure (lesson 4.3, ``effitrain optimizers``): state bytes measured and
    theoretical, milliseconds per step (median, with the measured quartiles as error bars: never below 0),
    and the training-loss curves with each final evaluation loss."""
    import matplotlib.pyplot as plt
    import numpy as np

    runs = comparison.runs
    if not runs:
        raise ValueError(tr("the comparison has no runs; run compare_optimizers(...) with at least one optimizer."))
    fig, (mem, speed, curves) = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1, 1, 1.6]})
    xs = np.arange(len(runs))
    names = [r.name for r in runs]
    mem.bar(xs - 0.2, [r.state_bytes / 2**20 for r in runs], 0.4, label=tr("measured"), color="#1f77b4")
    mem.bar(xs + 0.2, [r.expected_state_bytes / 2**20 for r in runs], 0.4, label=tr("theory"), color="#bbbbbb",
            hatch="//")
    mem.set_xticks(xs, names)
    mem.set_ylabel(tr("optimizer state (MiB)"), fontsize=FONT - 1)
    mem.set_title(tr("Memory"), fontsize=FONT)
    mem.legend(fontsize=FONT - 3)
    medians = np.array([r.seconds_per_step for r in runs]) * 1e3
    quartiles = np.array([r.seconds_per_step_quartiles for r in runs]) * 1e3  # measured 25th, 75th percentiles
    below, above = np.clip(medians - quartiles[:, 0], 0, None), np.clip(quartiles[:, 1] - medians, 0, None)
    speed.bar(xs, medians, yerr=[below, above], color="#2ca02c", capsize=4,
              label=tr("whole step (bars: 25th-75th percentile)"))
    speed.bar(xs, [r.optimizer_seconds_per_step * 1e3 for r in runs], color="#d62728", width=0.5,
              label="optimizer.step()")
    speed.set_xticks(xs, names)
    speed.set_ylim(0, 1.3 * max(quartiles[:, 1].max(), medians.max()))  # room for the legend above the bars
    speed.set_ylabel(tr("ms per step (median) on {device}", device=comparison.device), fontsize=FONT - 1)
    speed.set_title(tr("Time"), fontsize=FONT)
    speed.legend(fontsize=FONT - 3)
    window = max(1, comparison.steps // 15)
    for r in runs:
        smooth = np.convolve(r.losses, np.ones(window) / window, mode="valid")
        line, = curves.plot(np.arange(len(smooth)) + window, smooth,
                            label=tr("{name} (lr {lr:g})", name=r.name, lr=r.learning_rate))
        curves.scatter([comparison.steps], [r.final_loss], color=line.get_color(), marker="o", zorder=3)
    curves.set_xlabel(tr("step"), fontsize=FONT - 1)
    curves.set_ylabel(tr("training loss (mean of {window} steps)", window=window), fontsize=FONT - 1)
    curves.set_title(tr("Loss (dots: evaluation loss at the end)"), fontsize=FONT)
    curves.legend(fontsize=FONT - 3)
    curves.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- chapter 3 (lesson 3.3): number formats -----------------------------------------------------------------------

def float_layout(dtype) -> tuple[int, int, int]:
    """(sign, exponent, mantissa) bits of a torch floating-point dtype, from ``torch.finfo``: the mantissa has
    -log2(eps) stored bits, the exponent the rest after the sign bit."""
    import math

    import torch

    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    return 1, info.bits - 1 - mantissa, mantissa


def plot_float_formats(dtypes: tuple = ("float32", "bfloat16", "float16")) -> "Figure":
    """The bit layouts of floating-point formats, one row each, every bit a box: sign, exponent (the range),
    mantissa (the precision), with the counts and each format's largest value and gap after 1.0 (lesson 3.3)."""
    import matplotlib.pyplot as plt
    import torch

    parts = ((tr("sign"), "#d62728"), (tr("exponent"), "#1f77b4"), (tr("mantissa"), "#2ca02c"))
    fig, ax = plt.subplots(figsize=(13, 0.9 + 0.9 * len(dtypes)))
    for row, name in enumerate(dtypes):
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(tr("dtypes: {name!r} is not a torch floating-point type; use e.g. 'float32', 'bfloat16'.",
                                name=name))
        y, x = len(dtypes) - 1 - row, 0
        for (part, color), bits in zip(parts, float_layout(dtype)):
            for bit in range(bits):
                ax.add_patch(plt.Rectangle((x + bit, y + 0.15), 0.92, 0.7, color=color, alpha=0.85))
            ax.text(x + bits / 2, y + 0.5, f"{bits}" if bits < 3 else f"{part} {bits}", ha="center",
                    va="center", color="white", fontsize=FONT - 3, fontweight="bold")
            x += bits
        info = torch.finfo(dtype)
        ax.text(-1, y + 0.5, name, ha="right", va="center", fontsize=FONT)
        ax.text(33, y + 0.5, tr("largest {largest:.1e}\ngap after 1.0: {gap:.1e}", largest=info.max, gap=info.eps),
                ha="left", va="center", fontsize=FONT - 3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for _, color in parts]
    ax.legend(handles, [tr("sign"), tr("exponent (range)"), tr("mantissa (precision)")], loc="upper center",
              bbox_to_anchor=(0.45, 0), ncol=3, fontsize=FONT - 3, frameon=False)
    ax.set_xlim(-8, 42)
    ax.set_ylim(0, len(dtypes))
    ax.axis("off")
    ax.set_title(tr("Bits of each number format (one box per bit)"), fontsize=FONT)
    return fig


# --- chapter 1: data preparation -------------------------------------------------------------------------------

def plot_gradient_sync(num_devices: int = 2) -> "Figure":
    """Steps 3 and 4 of data-parallel training drawn two ways, side by side (lesson 1.1).

    Left, a parameter server: every device sends its gradients to one place, which averages them, updates
    the only true copy of the weights and sends the new weights back. Right, DDP: the devices all-reduce
    their gradients (every one ends with the same average), each applies the same optimizer step to its own
    copy, and the only broadcast of weights is the one from rank 0 when the model is wrapped.
    """
    import matplotlib.pyplot as plt

    whole_number("num_devices", num_devices, minimum=2, maximum=4, hint="e.g. num_devices=2 (it draws 2 to 4)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6))
    width = 8 / num_devices
    centers = [1 + i * width + width * 0.4 for i in range(num_devices)]
    for ax in (left, right):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 7)
        ax.axis("off")
    # parameter server
    _box(left, 1.0, 5.0, 8, 1.0, tr("parameter server\n3. average the gradients, update the weights"), "#d5f5d5")
    for i, x in enumerate(centers):
        _box(left, x - width * 0.4, 1.6, width * 0.8, 1.0, tr("device {i}\nforward + backward", i=i), "#ffe7b3")
        _arrow(left, (x - 0.4, 2.6), (x - 0.4, 5.0))
        _arrow(left, (x + 0.4, 5.0), (x + 0.4, 2.6))
        left.text(x - 0.5, 3.8, tr("gradients"), ha="right", va="center", fontsize=FONT - 3)
        left.text(x + 0.5, 3.8, tr("4. new\nweights"), ha="left", va="center", fontsize=FONT - 3)
    left.text(5, 0.8, tr("one place holds the weights; the devices wait for it"), ha="center", fontsize=FONT - 2)
    left.set_title(tr("Parameter server (the course's picture)"), fontsize=FONT + 1)
    # DDP: all-reduce, then the same update everywhere
    _box(right, 1.0, 5.8, 8, 0.7, tr("at prepare: rank 0 broadcasts its weights (once)"), "#e6e6e6")
    for i, x in enumerate(centers):
        _arrow(right, (x, 5.8), (x, 5.0))
        _box(right, x - width * 0.4, 3.9, width * 0.8, 1.1, tr("rank {i}\nforward + backward", i=i), "#ffe7b3")
        _box(right, x - width * 0.4, 1.0, width * 0.8, 1.0, tr("4. optimizer step\non rank {i}'s copy", i=i),
             "#d5f5d5")
    _box(right, 1.0, 2.45, 8, 0.9, tr("3. all-reduce: every rank receives the average gradient"), "#ffd0d0")
    for x in centers:
        _arrow(right, (x, 3.9), (x, 3.35))
        _arrow(right, (x, 2.45), (x, 2.0))
    right.text(5, 0.4, tr("same weights + same average gradient = same new weights, with no second broadcast"),
               ha="center", fontsize=FONT - 2)
    right.set_title(tr("DDP: all-reduce, then every rank updates itself"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# --- chapter 4 (lessons 4.2 and 4.3): Adafactor's row and column means, block-wise 8-bit quantisation --------------

def plot_adafactor_factors(full, row, col, title: str = "") -> "Figure":
    """Adafactor's factored second moment against the full one (lesson 4.2).

    ``full``: the full matrix of squared gradients that Adam would keep (``r x c``); ``row`` (``r``) and ``col``
    (``c``): Adafactor's ``exp_avg_sq_row`` and ``exp_avg_sq_col``, the means of ``full`` along each row and
    each column. Left: the full matrix with the row means beside it and the column means below; middle: the
    rank-1 rebuild ``row[i] * col[j] / mean(row)`` that Adafactor divides by; right: rebuilt against full, one
    dot per value (log-log; on the diagonal the rebuild is exact).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    full, row, col = (np.asarray(x, dtype=np.float64) for x in (full, row, col))
    if full.ndim != 2 or row.shape != full.shape[:1] or col.shape != full.shape[1:]:
        raise ValueError(tr("full must be a matrix (r, c) with row of shape (r,) and col of shape (c,); got {shape}, "
                            "{row_shape}, {col_shape}.", shape=full.shape, row_shape=row.shape, col_shape=col.shape))
    rebuilt = np.outer(row, col) / row.mean()
    logs = np.log10(np.concatenate([full.ravel(), rebuilt.ravel()]))
    vmin, vmax = np.percentile(logs, [1, 99])
    fig = plt.figure(figsize=(15, 5.2))
    grid = fig.add_gridspec(2, 5, width_ratios=[1, 0.07, 0.12, 1, 1.05], height_ratios=[1, 0.07],
                            wspace=0.08, hspace=0.08)
    shown = dict(aspect="auto", interpolation="nearest", cmap="viridis", vmin=vmin, vmax=vmax)
    ax_full = fig.add_subplot(grid[0, 0])
    ax_full.imshow(np.log10(full), **shown)
    ax_full.set_title(tr("full second moment: {count:,} values", count=full.size), fontsize=FONT - 1)
    ax_full.set_xticks([])
    ax_full.set_ylabel(tr("row"), fontsize=FONT - 2)
    ax_row = fig.add_subplot(grid[0, 1], sharey=ax_full)
    ax_row.imshow(np.log10(row)[:, None], **shown)
    ax_row.set_xticks([0], [tr("row\nmeans")], fontsize=FONT - 4)
    ax_row.tick_params(labelleft=False)
    ax_col = fig.add_subplot(grid[1, 0], sharex=ax_full)
    ax_col.imshow(np.log10(col)[None, :], **shown)
    ax_col.set_yticks([0], [tr("column means")], fontsize=FONT - 4)
    ax_col.set_xlabel(tr("column"), fontsize=FONT - 2)
    ax_rebuilt = fig.add_subplot(grid[0, 3])
    image = ax_rebuilt.imshow(np.log10(rebuilt), **shown)
    ax_rebuilt.set_title(tr("rebuilt from {count:,} means", count=row.size + col.size), fontsize=FONT - 1)
    ax_rebuilt.set_xticks([])
    ax_rebuilt.set_yticks([])
    fig.colorbar(image, ax=[ax_rebuilt], location="bottom", fraction=0.06, pad=0.04,
                 label=tr("log10 of the squared gradient"))
    ax_scatter = fig.add_subplot(grid[0, 4])
    pick = np.random.default_rng(0).choice(full.size, size=min(full.size, 4000), replace=False)
    ax_scatter.loglog(full.ravel()[pick], rebuilt.ravel()[pick], ".", alpha=0.3, markersize=3)
    low, high = 10 ** vmin, 10 ** vmax
    ax_scatter.plot([low, high], [low, high], color="black", linewidth=1, label=tr("rebuilt = full"))
    ax_scatter.set_xlabel(tr("full value"), fontsize=FONT - 2)
    ax_scatter.set_ylabel(tr("rebuilt value"), fontsize=FONT - 2)
    ax_scatter.yaxis.set_label_position("right")
    ax_scatter.yaxis.tick_right()
    ax_scatter.legend(fontsize=FONT - 4, loc="upper left")
    ax_scatter.set_title(tr("one dot per value"), fontsize=FONT - 1)
    if title:
        fig.suptitle(title, fontsize=FONT)
    return fig


def plot_blockwise_quantisation(true_values, codes, absmax, qmap, block_size: int = 256, blocks: int = 3,
                                title: str = "") -> "Figure":
    """Block-wise 8-bit quantisation, as bitsandbytes stores an optimizer state (lesson 4.3).

    ``true_values``: the float32 state (flat); ``codes``: its uint8 codes; ``absmax``: one float32 scale per
    block of ``block_size`` values; ``qmap``: the 256-entry table a code indexes. Top: the first ``blocks``
    blocks, true values and decoded ones (``qmap[code] * absmax[block]``), each block's +-absmax; bottom left:
    the table (dense near 0); bottom right: the decoding error of every value, relative to its block's absmax.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    true_values, codes, absmax, qmap = (np.asarray(x).ravel() for x in (true_values, codes, absmax, qmap))
    if qmap.size != 256 or codes.size != true_values.size or absmax.size != -(-codes.size // block_size):
        raise ValueError(tr("need a 256-entry qmap, one code per value and one absmax per block of {block_size}; got "
                            "qmap {size}, {codes} codes for {values} values, {absmax} absmax.", block_size=block_size,
                            size=qmap.size, codes=codes.size, values=true_values.size, absmax=absmax.size))
    scale = np.repeat(absmax, block_size)[:codes.size]
    decoded = qmap[codes.astype(np.int64)] * scale
    fig = plt.figure(figsize=(14, 7.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.1, 1], hspace=0.4, wspace=0.25)
    top = fig.add_subplot(grid[0, :])
    shown = min(blocks * block_size, codes.size)
    xs = np.arange(shown)
    top.plot(xs, true_values[:shown], color="#bbbbbb", linewidth=2.5, label=tr("float32 value"))
    top.plot(xs, decoded[:shown], ".", color="#1f77b4", markersize=3, label=tr("decoded from 8 bits"))
    for b in range(-(-shown // block_size)):
        lo, hi = b * block_size, min((b + 1) * block_size, shown)
        top.hlines([absmax[b], -absmax[b]], lo, hi, colors="#d62728", linestyles="--",
                   label=tr("block's absmax (one float32)") if b == 0 else None)
        top.axvline(lo, color="black", linewidth=0.8)
    top.set_xlabel(tr("value index (blocks of {block_size})", block_size=block_size), fontsize=FONT - 2)
    top.set_ylabel(tr("state value"), fontsize=FONT - 2)
    top.margins(y=0.3)
    top.legend(fontsize=FONT - 4, loc="upper right", ncol=3)
    top.set_title(title or tr("{blocks} blocks of {block_size} values: 1 byte each + one absmax per block",
                              blocks=blocks, block_size=block_size), fontsize=FONT)
    table = fig.add_subplot(grid[1, 0])
    table.plot(np.arange(256), np.sort(qmap), ".", markersize=3)
    table.set_xlabel(tr("code (0-255)"), fontsize=FONT - 2)
    table.set_ylabel(tr("qmap[code] (times absmax)"), fontsize=FONT - 2)
    near = 0.1
    table.set_title(tr("the table: {count} of 256 entries within +-{near}", count=int((np.abs(qmap) < near).sum()),
                       near=near), fontsize=FONT - 1)
    table.grid(alpha=0.3)
    error = fig.add_subplot(grid[1, 1])
    relative = np.abs(decoded - true_values) / np.where(scale > 0, scale, 1)
    error.hist(relative, bins=60, color="#1f77b4")
    error.set_yscale("log")
    error.set_xlabel(tr("|decoded - float32| / block's absmax"), fontsize=FONT - 2)
    error.set_ylabel(tr("values"), fontsize=FONT - 2)
    error.set_title(tr("decoding error: at most {error:.3f} of the absmax", error=relative.max()), fontsize=FONT - 1)
    return fig


# ---- chapter 5, lesson 5.1: what each rank holds under DDP and under FSDP -----------------------------------------

def plot_rank_bytes(measured: dict[str, list[dict]], theory: dict[str, list[dict]] | None = None,
                    title: str = "") -> "Figure":
    """Bytes each rank holds, by kind, under each strategy (lesson 5.1): one group of bars per strategy
    (``measured["DDP"]``, ``measured["FSDP"]``: one ``{kind: bytes}`` per rank, in rank order), one bar per
    rank stacked by kind (parameters, gradients, optimizer state); ``theory`` (same shape) marks each bar's
    expected total with a black line."""
    import matplotlib.pyplot as plt

    if not measured or not all(measured.values()):
        raise ValueError(tr("nothing to plot: pass {strategy: [{kind: bytes} per rank]}, e.g. report['bytes'] of "
                            "compare_ddp_fsdp()."))
    kinds = list(next(iter(measured.values()))[0])
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    span = sum(map(len, measured.values())) + 0.6 * len(measured)  # x units: a bar per rank, a gap per strategy
    fig, ax = plt.subplots(figsize=(max(10.0, 0.9 * span), 5.5))  # 6.3's six strategies: 14 inches
    chars_per_unit = 0.85 * fig.get_figwidth() / span * 72 / (0.55 * (FONT - 1))  # a glyph: ~0.55 of its size
    ticks, labels, groups, x = [], [], [], 0.0
    for strategy, ranks in measured.items():
        groups.append((strategy, x + (len(ranks) - 1) / 2, len(ranks)))
        for rank, held in enumerate(ranks):
            bottom = 0.0
            for colour, kind in zip(colours, kinds):
                ax.bar(x, held[kind] / 2**20, bottom=bottom, color=colour, width=0.8,
                       label=tr(kind) if x == 0 else None)  # model_sharding.KINDS, translated there
                bottom += held[kind] / 2**20
            ax.text(x, bottom, number(bottom, ".2f"), ha="center", va="bottom", fontsize=FONT - 2)
            if theory is not None:
                expected = sum(theory[strategy][rank].values()) / 2**20
                ax.hlines(expected, x - 0.45, x + 0.45, colors="black", linewidth=2,
                          label=tr("theory") if x == 0 else None)
            ticks.append(x)
            labels.append(tr("rank {rank}", rank=rank))
            x += 1
        x += 0.6
    ax.set_xticks(ticks, labels, fontsize=FONT - 2)
    for strategy, centre, count in groups:  # the strategy's name once, under its group of ranks, wrapped to fit
        ax.annotate(textwrap.fill(strategy, width=int((count + 0.6) * chars_per_unit), break_long_words=False),
                    xy=(centre, 0), xycoords=("data", "axes fraction"), xytext=(0, -3 * FONT),
                    textcoords="offset points", ha="center", va="top", fontsize=FONT - 1)
    ax.set_ylabel(tr("MiB held by the rank"), fontsize=FONT)
    ax.legend(fontsize=FONT - 2, loc="upper center", ncol=len(kinds) + 1)  # in one row, above the bars
    ax.margins(y=0.3)
    ax.set_title(title or tr("What each rank holds: full copies (DDP) against 1/N shards (FSDP)"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# ---- chapter 5, lesson 5.3


def plot_resume_timeline(launches: list[dict], crash_after: int, resumed_from: int) -> "Figure":
    """The steps of a crashed run and of its resumed launch on one axis (lesson 5.3).

    Each launch is ``{"label", "start", "end", "saves"}``: it ran the optimizer steps ``start + 1 .. end`` and
    saved a checkpoint after each step in ``saves``. The first launch died after ``crash_after`` steps; the
    second resumed from the checkpoint taken after ``resumed_from`` steps, so steps ``resumed_from + 1 ..
    crash_after`` were done twice (lost, in red).
    """
    import matplotlib.pyplot as plt

    if not launches:
        raise ValueError(tr("no launches to draw; pass the crashed launch and the resumed one."))
    if not 0 <= resumed_from <= crash_after:
        raise ValueError(tr("resumed_from={resumed_from} must lie between 0 and crash_after={crash_after}.",
                            resumed_from=resumed_from, crash_after=crash_after))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.0 * len(launches)))
    for lane, run in enumerate(reversed(launches)):
        ax.broken_barh([(run["start"], run["end"] - run["start"])], (lane - 0.3, 0.6), color="#9ecae1")
        for step in range(run["start"] + 1, run["end"] + 1):
            ax.plot([step, step], [lane - 0.3, lane + 0.3], color="white", lw=1)
        ax.plot(run["saves"], [lane] * len(run["saves"]), "D", color="#08519c", ms=9,
                label=tr("checkpoint saved") if lane == 0 else None)
    top = len(launches) - 1  # the first launch is drawn on the top lane
    ax.broken_barh([(resumed_from, crash_after - resumed_from)], (top - 0.3, 0.6), color="#fb6a4a",
                   label=tr("lost: {steps} step(s) done again", steps=crash_after - resumed_from))
    ax.plot([crash_after], [top], "X", color="#a50f15", ms=16, label=tr("rank killed (SIGKILL)"))
    ax.annotate("", xy=(resumed_from, top - 1 + 0.35), xytext=(resumed_from, top - 0.35),
                arrowprops={"arrowstyle": "->", "color": "#08519c", "lw": 2})
    ax.text(resumed_from - 0.15, top - 0.5, "load_state", ha="right", va="center", fontsize=FONT - 3,
            color="#08519c")
    ax.set_yticks(range(len(launches)), [run["label"] for run in reversed(launches)], fontsize=FONT - 1)
    ax.set_xlabel(tr("optimizer steps done"), fontsize=FONT - 1)
    ax.set_xlim(0, max(run["end"] for run in launches) + 0.5)
    ax.set_ylim(-0.7, len(launches) - 0.3)
    ax.legend(fontsize=FONT - 3, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, frameon=False)
    ax.set_title(tr("Checkpoint, crash, resume"), fontsize=FONT)
    fig.tight_layout()
    return fig


# ---- chapter 5, lesson 5.2
def plot_step_breakdown(profiles: dict, title: str | None = None) -> "Figure":
    """One stacked bar per configuration (``{label: StepProfile}``): the labelled phases and the unlabelled
    rest, in ms per step, adding up to the profiler's step; under it, a hatched bar for the time collectives
    ran on the process group's threads (overlapping backward, so not stacked). Lesson 5.2. The phases keep the
    labels the lesson gave them; the title is ``title``, or "Where a training step's time goes" translated."""
    import matplotlib.pyplot as plt

    from effitrain_helpers.measure.step_profile import OTHER

    if not profiles:
        raise ValueError(tr("profiles is empty: pass {label: StepProfile} for at least one configuration."))
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.1 * len(profiles)))
    labels, hatched = list(profiles), False
    for y, label in enumerate(labels):
        profile = profiles[label]
        parts = list(profile.phases_ms.items()) + [(OTHER, profile.other_ms)]
        left = 0.0
        for (phase, ms), color in zip(parts, colors[:len(parts) - 1] + ["#cccccc"]):
            ax.barh(y, ms, left=left, height=0.5, color=color,
                    label=(tr(OTHER) if phase == OTHER else phase) if y == 0 else None)
            if ms >= 0.07 * profile.step_ms:
                ax.text(left + ms / 2, y, f"{ms:.0f}", ha="center", va="center", fontsize=FONT - 3)
            left += ms
        if profile.communication_ms:
            ax.barh(y + 0.38, profile.communication_ms, height=0.2, color="white", edgecolor="black",
                    hatch="//", label=None if hatched else tr("collectives (gloo threads, overlapping)"))
            hatched = True
    ax.set_yticks(range(len(labels)), labels, fontsize=FONT - 2)
    ax.invert_yaxis()
    ax.set_xlabel(tr("milliseconds per step (profiler)"), fontsize=FONT - 1)
    ax.set_title(title or tr("Where a training step's time goes"), fontsize=FONT)
    ax.legend(fontsize=FONT - 4, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# ---- chapter 6, lesson 6.4
def plot_pipeline_timeline(runs: dict) -> "Figure":
    """One panel per schedule (``{label: the rank-ordered results of one pipeline run}``, see
    ``training/pipeline.py``'s ``run_schedule``): a row per stage, a bar per operation from its measured start
    to its end (forward blue, backward orange, each labelled with its micro-batch), on the run's clock in ms.
    The white gaps are the bubble. Lesson 6.4."""
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError(tr("runs is empty: pass {schedule: [rank results of run_schedule]} for one run or more."))
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.4 + 1.2 * sum(len(r) for r in runs.values()) / 2),
                             squeeze=False)
    colors = {"F": "#1f77b4", "B": "#ff7f0e"}
    for ax, (label, ranks) in zip(axes[:, 0], runs.items()):
        t0 = min(r["start"] for r in ranks)
        for r in ranks:
            for kind, i, began, end in r["events"]:
                ax.barh(r["stage"], (end - began) * 1e3, left=(began - t0) * 1e3, height=0.6, color=colors[kind],
                        edgecolor="white")
                ax.text((began + end - 2 * t0) / 2 * 1e3, r["stage"], f"{kind}{i}", ha="center", va="center",
                        fontsize=FONT - 5, color="white")
        ax.set_yticks(range(len(ranks)), [tr("stage {stage}", stage=r["stage"]) for r in ranks], fontsize=FONT - 2)
        ax.invert_yaxis()
        ax.set_title(label, fontsize=FONT - 1)
    axes[-1, 0].set_xlabel(tr("milliseconds since the step began (F: forward, B: backward of micro-batch i)"),
                           fontsize=FONT - 2)
    fig.tight_layout()
    return fig


# ---- chapter 6, lesson 6.1: collectives, each rank's buffer before and after; what an all-reduce costs ----------

def plot_collectives(seen: list[dict], title: str = "") -> "Figure":
    """Each rank's buffer before and after each collective (lesson 6.1): ``seen[rank][collective]`` is the pair
    ``(before, after)`` of value lists that rank held, as measured in a real run; one row per collective,
    one line of cells per rank, before on the left and after on the right."""
    import matplotlib.pyplot as plt

    if not seen or not all(seen):
        raise ValueError(tr("nothing to plot: pass one {collective: (before, after)} per rank, e.g. what "
                            "launch(four_collectives, num_processes=3) returned."))
    names, world = list(seen[0]), len(seen)
    fig, axes = plt.subplots(len(names), 2, figsize=(11, 2.0 + 1.35 * len(names) * world / 3), squeeze=False)
    colours = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb"]
    for row, name in enumerate(names):
        for col, label in enumerate((tr("before"), tr("after"))):
            ax = axes[row][col]
            width = max(len(seen[r][name][col]) for r in range(world))
            for r in range(world):
                values = seen[r][name][col]
                for i, v in enumerate(values):
                    ax.add_patch(plt.Rectangle((i, world - 1 - r), 0.95, 0.9, color=colours[r % len(colours)]))
                    ax.text(i + 0.47, world - 0.55 - r, number(v, "g"), ha="center", va="center", fontsize=FONT - 1)
                ax.text(-0.15, world - 0.55 - r, tr("rank {rank}", rank=r), ha="right", va="center",
                        fontsize=FONT - 2)
            ax.set_xlim(-1.3, max(width, 3) + 0.1)
            ax.set_ylim(-0.1, world)
            ax.axis("off")
            ax.set_title(f"{name}: {label}", fontsize=FONT)
    fig.suptitle(title or tr("Each rank's buffer before and after each collective (measured)"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# all_reduce_cost.METHODS as the figure's legend shows them, translated
_METHODS = {"ring": msg("ring"), "gloo all_reduce": msg("gloo all_reduce"), "parameter server": msg("parameter server")}


def plot_all_reduce_cost(rows: list[dict], title: str = "") -> "Figure":
    """What an all-reduce cost each rank, by method, over tensor sizes (lesson 6.1): left, bytes sent by the rank
    that sent most (written to its sockets, or counted where the kernel does not say) with the theory as
    dashed lines; right, the median time of the slowest rank. ``rows``: ``compare_all_reduces(...)["rows"]``."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError(tr("nothing to plot: pass compare_all_reduces(...)['rows']."))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    sizes = sorted({r["numel"] for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for i, method in enumerate(methods):
        mine = [[r for r in rows if r["method"] == method and r["numel"] == n] for n in sizes]
        sent = [max((r["socket_bytes"] if r["socket_bytes"] is not None else r["counted_bytes"] or 0)
                    for r in ranks) for ranks in mine]
        theory = [max(r["theory_bytes"] for r in ranks) for ranks in mine]
        seconds = [max(r["seconds"] for r in ranks) for ranks in mine]
        colour = f"C{i}"
        left.plot(sizes, [s / 2**20 for s in sent], "o-", color=colour, label=tr(_METHODS.get(method, method)))
        left.plot(sizes, [t / 2**20 for t in theory], "--", color=colour, alpha=0.7)
        right.plot(sizes, [s * 1e3 for s in seconds], "o-", color=colour, label=tr(_METHODS.get(method, method)))
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(tr("float32 values in the tensor"), fontsize=FONT)
        ax.legend(fontsize=FONT - 2)
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel(tr("MiB sent by the busiest rank (dashed: theory)"), fontsize=FONT)
    right.set_ylabel(tr("ms, median, slowest rank"), fontsize=FONT)
    fig.suptitle(title or tr("All-reduce in {world} processes: bytes and time per rank",
                             world=rows[0]["world"]), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# ---- chapter 6, lesson 6.2: overlap by hand ---------------------------------------------------------------------
def plot_overlap_timeline(overlap: dict, bucket_bytes: list[int]) -> "Figure":
    """One profiled step on one rank (lesson 6.2), as its trace recorded it: the backward range, a mark where
    the backward's thread issued each all-reduce (``c10d::allreduce_``), and a bar for each all-reduce as it
    ran on the process group's threads (``gloo:all_reduce``). ``overlap`` is
    ``measure.step_profile.collective_overlap``'s result (ms since backward began); ``bucket_bytes`` the bytes
    of each bucket (named in the title)."""
    import matplotlib.pyplot as plt

    ran = overlap["ran"]
    if not ran:
        raise ValueError(tr("overlap['ran'] is empty: pass collective_overlap's result for a step whose hooks "
                            "started all-reduces."))
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.5 * len(ran)))
    ax.barh(0, overlap["ended"], height=0.5, color="#1f77b4", label=tr("backward"))
    ax.plot(overlap["issued"], [0] * len(overlap["issued"]), "kv", markersize=9,
            label=tr("all-reduce issued (c10d::allreduce_)"))
    for y, (start, end) in enumerate(ran, start=1):
        ax.barh(y, end - start, left=start, height=0.5, color="#ff7f0e",
                label=tr("all-reduce running (gloo thread)") if y == 1 else None)
    ax.axvline(overlap["ended"], color="black", linestyle="--", label=tr("backward ended"))
    ax.set_yticks(range(len(ran) + 1), [tr("backward")] + [tr("all-reduce {n}", n=n)
                                                           for n in range(1, len(ran) + 1)], fontsize=FONT - 2)
    ax.invert_yaxis()
    ax.set_xlabel(tr("milliseconds since backward began (rank 0, profiler trace)"), fontsize=FONT - 1)
    ax.set_title(tr("Overlap: all-reduces started during backward (buckets of {sizes} MiB)",
                    sizes=number_list([b / 2**20 for b in bucket_bytes], ".1f")), fontsize=FONT)
    ax.legend(fontsize=FONT - 4, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# ---- chapter 5, lesson 5.2: a saved trace read back, the labelled ranges and the memory over time --------------
def plot_trace_timeline(events: list[dict], title: str = "") -> "Figure":
    """A trace written by ``prof.export_chrome_trace`` and read back as JSON (``["traceEvents"]``), drawn as a
    timeline: top, the ``record_function`` ranges (category ``user_annotation``) as bars; bottom, when the
    profiler recorded memory (``profile_memory=True``), the CPU bytes allocated since it started."""
    import matplotlib.pyplot as plt

    ranges = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    if not ranges:
        raise ValueError(tr("the trace holds no record_function ranges: label the step's phases with "
                            "record_function('...') before exporting it."))
    memory = sorted((e for e in events if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {})),
                    key=lambda e: e["ts"])
    start = min(e["ts"] for e in ranges)
    labels = list(dict.fromkeys(e["name"] for e in ranges))
    fig, axes = plt.subplots(2 if memory else 1, 1, figsize=(11, 5 if memory else 2.5), sharex=True, squeeze=False)
    bars = axes[0][0]
    for e in ranges:
        row = labels.index(e["name"])
        bars.broken_barh([((e["ts"] - start) / 1e3, e["dur"] / 1e3)], (row - 0.4, 0.8), color=f"C{row}")
    bars.set_yticks(range(len(labels)), labels, fontsize=FONT - 1)
    bars.invert_yaxis()
    bars.set_title(title or tr("The step as the saved trace recorded it"), fontsize=FONT + 1)
    if memory:
        line = axes[1][0]
        line.step([(e["ts"] - start) / 1e3 for e in memory],
                  [e["args"]["Total Allocated"] / 2**20 for e in memory], where="post")
        line.set_ylabel(tr("MiB allocated since the start"), fontsize=FONT - 1)
        line.grid(True, alpha=0.3)
    axes[-1][0].set_xlabel(tr("ms since the first labelled range"), fontsize=FONT)
    fig.tight_layout()
    return fig


# ---- chapter 5, lesson 5.4: DDP against FSDP over a rate-limited link --------------------------------------------
def plot_link_rates(rows: list[dict], title: str = "") -> "Figure":
    """Time per step of DDP and FSDP against the link's rate, measured (dots) and theory (dashed: the unlimited
    link's time plus bits sent / rate) (lesson 5.4). ``rows``: ``link_rate_steps(...)["rows"]``."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatter, ScalarFormatter

    limited = sorted((r for r in rows if r["rate"] is not None), key=lambda r: r["rate"])
    if not limited:
        raise ValueError(tr("nothing to plot: pass link_rate_steps(...)['rows'] with at least one rate."))
    rates = [r["rate"] / 1e6 for r in limited]
    fig, ax = plt.subplots(figsize=(9, 5))
    for i, name in enumerate(("DDP", "FSDP")):
        ax.plot(rates, [r[name] * 1e3 for r in limited], "o-", color=f"C{i}", label=tr("{name} measured",
                                                                                       name=name))
        ax.plot(rates, [r[f"{name} theory"] * 1e3 for r in limited], "--", color=f"C{i}", alpha=0.7,
                label=tr("{name} theory", name=name))
    ax.set_xscale("log")
    ax.set_yscale("log")
    # plain numbers (20, 100, 1000), not 2 x 10^1 on a projector; between decades, a few minor ticks named
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.set_xlabel(tr("link rate (Mbit/s, tc tbf)"), fontsize=FONT)
    ax.set_ylabel(tr("ms per training step (median)"), fontsize=FONT)
    ax.legend(fontsize=FONT - 2)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or tr("Two nodes, one rank each: time per step against the link's rate"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# ---- chapter 8, lesson 8.1: attention that fits ------------------------------------------------------------------
_ATTENTION_WAYS = {"plain": msg("plain attention (by hand)"), "sdpa math": msg("SDPA, math kernel"),
                   "sdpa flash": msg("SDPA, CPU flash kernel"), "hand flash": msg("FlashAttention by hand")}


def plot_attention_saved_bytes(rows: list[dict], title: str = "") -> "Figure":
    """Bytes kept for backward by each way of computing attention, against the sequence length n, with the
    theory dashed: n x n for plain attention and SDPA's math kernel, n for the flash ones (lesson 8.1).
    ``rows``: ``saved_bytes_compared(...)`` for several n, put together."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    if not rows:
        raise ValueError(tr("nothing to plot: pass the rows of saved_bytes_compared(...) for several n."))
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, way in enumerate(dict.fromkeys(r["way"] for r in rows)):
        mine = sorted((r for r in rows if r["way"] == way), key=lambda r: r["n"])
        ns = [r["n"] for r in mine]
        ax.plot(ns, [r["saved_bytes"] / 2**20 for r in mine], "o-", color=f"C{i}",
                label=tr(_ATTENTION_WAYS.get(way, way)), alpha=0.8, markersize=9 - 2 * i)
        ax.plot(ns, [r["theory_bytes"] / 2**20 for r in mine], "--", color=f"C{i}", alpha=0.6)
    lengths = sorted({r["n"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(tr("sequence length n"), fontsize=FONT)
    ax.set_ylabel(tr("MiB saved for backward (dashed: theory)"), fontsize=FONT)
    ax.legend(fontsize=FONT - 2)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or tr("What attention keeps for backward: n x n against n"), fontsize=FONT + 1)
    fig.tight_layout()
    return fig


# ---- chapter 6, lesson 6.1: the latency-bandwidth model -----------------------------------------------------------
def plot_alpha_beta(alpha: float, beta: float, message_bytes: tuple[int, ...] = (2**10, 2**27),
                    worlds: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)) -> "Figure":
    """The alpha-beta model's all-reduce time against N (lesson 6.1), one panel per message size, one line per
    algorithm of ``measure.latency_bandwidth.ALGORITHMS``, from the ``alpha`` (s) and ``beta`` (s/byte)
    measured here."""
    import matplotlib.pyplot as plt

    from effitrain_helpers.measure.latency_bandwidth import ALGORITHMS, model_seconds

    fig, axes = plt.subplots(1, len(message_bytes), figsize=(11, 4.5), sharey=False)
    for ax, nbytes in zip(axes, message_bytes):
        for algorithm, style in zip(ALGORITHMS, ("-o", "-s", "--")):
            ax.plot(worlds, [model_seconds(algorithm, nbytes, n, alpha, beta) * 1e3 for n in worlds], style,
                    label=tr(algorithm))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(tr("processes N"), fontsize=FONT - 1)
        ax.set_ylabel(tr("model time (ms)"), fontsize=FONT - 1)
        ax.set_title(tr("all-reduce of {size} KiB", size=number(nbytes / 2**10, ",.0f")), fontsize=FONT)
        ax.legend(fontsize=FONT - 3)
    fig.suptitle(tr("alpha-beta model, alpha = {alpha} µs, bandwidth 1/beta = {bandwidth} GB/s (gloo, here)",
                    alpha=number(alpha * 1e6, ".1f"), bandwidth=number(1 / beta / 1e9, ".2f")), fontsize=FONT)
    fig.tight_layout()
    return fig


def plot_class_summary(counts: list[tuple[str, dict[str, int]]], title: str | None = None) -> "Figure":
    """Per exercise, how many students were correct, incorrect, did not attempt it, or got another status: one
    stacked bar each (``counts`` from :func:`~effitrain_helpers.teach.reports.class_counts`; the instructor's start
    page)."""
    import matplotlib.pyplot as plt

    colors = {"correct": "#1a7f37", "incorrect": "#cf222e", "not attempted": "#d4a72c", "other": "#8c959f"}
    words = {"correct": msg("correct"), "incorrect": msg("incorrect"), "not attempted": msg("not attempted"),
             "other": msg("other")}
    labels = [label for label, _ in counts]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(counts)))
    left = [0] * len(counts)
    for status, color in colors.items():
        values = [n.get(status, 0) for _, n in counts]
        ax.barh(labels, values, left=left, color=color, label=tr(words[status]))
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()  # the first exercise on top
    ax.set_xlabel(tr("students"), fontsize=FONT)
    ax.set_title(title or tr("The class, exercise by exercise"), fontsize=FONT + 1, pad=30)  # the legend under it
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def _numbers_in_language(plot):
    """``plot`` (a ``plot_*`` function) whose figure goes through :func:`numbers_in_language`."""

    @functools.wraps(plot)
    def drawn(*args, **kwargs):
        return numbers_in_language(plot(*args, **kwargs))

    return drawn


# every figure's numbers in the learner's language, one home for all plot_* functions (a new one too)
globals().update({name: _numbers_in_language(plot) for name, plot in list(globals().items())
                  if name.startswith("plot_") and callable(plot)})
