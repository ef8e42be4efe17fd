"""What does each training-efficiency technique cost and save, here? (chapter 3; ``effitrain efficiency``)

The chapter's techniques each have a module that measures them on one workload (``workload``: the lesson
model and fixed-length batches of sentence pairs, so memory counts are exact):

- gradient accumulation (3.1): ``accumulation.measure_accumulation``;
- gradient (activation) checkpointing (3.2): ``checkpointing.measure_checkpointing``;
- local SGD (3.2): ``local_sgd.measure_local_sgd``, in N processes;
- mixed precision (3.3): ``precision.measure_precision``;
- any combination in one training loop: ``techniques.run_techniques`` (the 3.3 widget).

This module puts them side by side: :func:`measure_chapter` returns one :class:`ChapterRow` per technique
(measured ratios next to theory, and a verdict), :func:`chapter_table` shows them as a table,
:func:`precision_conclusion` says what the mixed-precision row means on this machine and :func:`chapter_records`
gives rows and conclusion as ``effitrain efficiency --json``'s records.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_number
from effitrain_helpers.training.accumulation import measure_accumulation
from effitrain_helpers.training.checkpointing import measure_checkpointing
from effitrain_helpers.training.local_sgd import LOCAL_SGD_NEEDS, measure_local_sgd
from effitrain_helpers.training.precision import (TORCH_NAME, low_precision, low_precision_memory_ratio,
                                                  measure_precision)
from effitrain_helpers.training.workload import check_steps
from effitrain_helpers.training.techniques import Techniques, TechniquesRun

if TYPE_CHECKING:
    from effitrain_helpers.measure.bench import StepBudget


# the most each option of ``effitrain efficiency`` may ask for: 16 steps take about a minute on 2 CPU cores,
# so 256 about a quarter of an hour; accumulation cuts 8 * k rows into k micro-batches
MOST = {"--accumulation-steps": 64, "--local-sgd-steps": 256, "--steps": 256}


def check_options(accumulation_steps: int, local_sgd_steps: int, steps: int) -> None:
    """The command line's step counts, each within :data:`MOST`, and local SGD averaging at least once
    (``--local-sgd-steps`` at most ``--steps``); ``ValueError`` naming the option otherwise."""
    for name, value in (("--accumulation-steps", accumulation_steps), ("--local-sgd-steps", local_sgd_steps),
                        ("--steps", steps)):
        check_steps(name, value, maximum=MOST[name])
    if local_sgd_steps > steps:
        raise ValueError(tr("--local-sgd-steps {k} is more than --steps {steps}: the processes would never average "
                            "their parameters. Fix: --local-sgd-steps at most {steps}, e.g. 4.", k=local_sgd_steps,
                            steps=steps))

FIGURES = {"memory": msg("memory"), "time": msg("time"), "synchronisations": msg("synchronisations")}


@dataclass
class ChapterRow:
    """One technique: measured ratios "technique on / off" (lower is better) next to theory, and a verdict.
    Memory is the activation bytes saved for backward; synchronisations count the steps that exchanged data.

    ``judged`` names the figures (keys of :data:`FIGURES`) the verdict compared with theory; the others are
    shown for reference and the verdict says they are not judged. ``unmeasured`` names the figures that are
    1.0 by construction (nothing measured: the table shows a dash). ``time_doubt`` says why the time figure
    cannot be trusted ("" when it can): the machine was busy, or the repeats spread."""

    technique: str
    memory_ratio: float
    memory_expected: float
    time_ratio: float
    time_expected: float
    sync_ratio: float
    sync_expected: float
    detail: str
    verdict: str = ""
    judged: tuple[str, ...] = ()
    unmeasured: tuple[str, ...] = ()
    time_doubt: str = ""

    def to_dict(self) -> dict:
        """The row as a plain dict (one record of ``effitrain efficiency --json``: :func:`chapter_records`)."""
        return asdict(self)


def _figures(names) -> str:
    """Figure names (keys of :data:`FIGURES`) in the learner's language, joined with "and"."""
    names = [tr(FIGURES[n]) for n in names]
    return names[0] if len(names) == 1 else tr("{first} and {last}", first=", ".join(names[:-1]), last=names[-1])


def _verdict(row: ChapterRow, ok: bool, yes: str, no: str, not_judged: str) -> str:
    """The row's verdict in the learner's language, one part per kind of figure: the judged figures as expected
    or not (``yes`` and ``no`` say why, already translated), a judged time that is unreliable as no conclusion,
    and the measured figures not judged as such (``not_judged`` says why)."""
    judged = [f for f in row.judged if not (f == "time" and row.time_doubt)]
    parts = []
    if judged:
        parts.append(tr("{figures}: as expected ({why})", figures=_figures(judged), why=yes) if ok else
                     tr("{figures}: differs from theory ({why})", figures=_figures(judged), why=no))
    if "time" in row.judged and row.time_doubt:
        parts.append(tr("time: UNRELIABLE, no conclusion ({why})", why=row.time_doubt))
    rest = [f for f in FIGURES if f not in row.judged and f not in row.unmeasured]
    if rest:
        parts.append(tr("{figures}: not judged ({why})", figures=_figures(rest), why=not_judged))
    return "; ".join(parts)


def _time_doubt(busy: str, spread: float) -> str:
    """Why a time ratio of interleaved repeats cannot be trusted: the machine was ``busy``, or the per-round
    ratios ``spread`` too much (:func:`~effitrain_helpers.measure.bench.spread_reason`); "" when it can."""
    from effitrain_helpers.measure.bench import spread_reason

    return "; ".join(filter(None, [busy, spread_reason(spread)]))


TOKENS_RATIO = 2  # local SGD's micro-batch (8 rows of 64 tokens) over lesson 3.3's precision step (8 of 32)
HERE_STEPS = 150  # the measurements in this process (accumulation, checkpointing, two lesson models built, a
# matmul benchmark), in precision steps: an estimate from one run's CPU seconds on a 2-core machine


def chapter_budget(step_s: float, num_processes: int | None = None, steps: int = 16, budget_s: float = 45.0,
                   accumulation_steps: int = 4, local_sgd_steps: int = 4, busy: str | None = None) -> StepBudget:
    """The chapter table's time budget (:class:`~effitrain_helpers.measure.bench.StepBudget`), made, and its
    clock started, before :func:`measure_chapter`, from ``step_s``: one fp32 training step timed in this lesson
    (3.3's precision run: 8 rows of 32 tokens, AdamW, every core). A rank of local SGD's N processes trains
    :data:`TOKENS_RATIO` times the tokens on cores / N threads (about 2 N ``step_s`` a micro-batch) and 3 + k
    micro-batches per step (``runs``: plain data parallel, local SGD, no communication, and accumulation's k);
    the measurements in this process (``here_s``) take about :data:`HERE_STEPS` steps. On a ``busy`` machine
    (sampled now when None) whose whole would overrun ``budget_s``, the processes train fewer steps
    (:func:`~effitrain_helpers.measure.bench.step_budget`), at least ``local_sgd_steps`` (local SGD averages once)."""
    from effitrain_helpers.measure.bench import step_budget
    from effitrain_helpers.processes.launch import resolve_num_processes

    n = resolve_num_processes(num_processes, minimum=2, why=LOCAL_SGD_NEEDS)
    check_steps("accumulation_steps", accumulation_steps)
    check_steps("local_sgd_steps", local_sgd_steps)
    check_steps("steps", steps)
    positive_number("budget_s", budget_s, example="budget_s=45")
    positive_number("step_s", step_s, example="step_s=runs['fp32'].seconds_per_step")
    return step_budget(steps, TOKENS_RATIO * n * step_s, 3 + accumulation_steps, budget_s, busy,
                       fresh_processes=n, here_s=HERE_STEPS * step_s, least=min(steps, local_sgd_steps))


def chapter_announce(budget: StepBudget) -> str:
    """The line the chapter-table cell prints before :func:`measure_chapter`: about how long at this size, from
    what, and what a busy machine cuts (``budget`` from :func:`chapter_budget`; its cut said, if any)."""
    line = tr("the chapter table: about {seconds:.0f} s at this size ({here:.0f} s of measurements here, then {n} "
              "fresh processes, about {start:.0f} s each to start on a quiet machine, each training {steps} steps of "
              "{micro} micro-batches at about {step_ms:.0f} ms, from the fp32 step above); on a busy machine the "
              "processes' steps are cut to keep within {budget:.0f} s, and a note says so",
              seconds=budget.here_s + budget.start_s + budget.seconds, here=budget.here_s,
              n=budget.fresh_processes, start=budget.start_s, steps=budget.asked, micro=budget.runs,
              step_ms=budget.step_s * 1e3, budget=budget.budget_s)
    return "\n".join(filter(None, [line, budget.note()]))


def measure_chapter(num_processes: int | None = None, precision_runs: dict[str, TechniquesRun] | None = None,
                    accumulation_steps: int = 4, local_sgd_steps: int = 4, steps: int = 16,
                    budget: StepBudget | None = None) -> list[ChapterRow]:
    """Measure all four techniques on the lesson workload: one :class:`ChapterRow` per technique.

    Accumulation and checkpointing are measured in this process with plain forward and backward passes (no
    Accelerator, so it works in a notebook whatever Accelerator exists there); local SGD and the precisions
    run in fresh processes; ``precision_runs`` reuses lesson 3.3's :func:`measure_precision` result (fp32 and
    :func:`low_precision`) instead of measuring again. Each row's time carries its doubt (the load seen before
    the measurements, the spread of its repeats).

    With ``budget`` (:func:`chapter_budget`, made just before), local SGD's processes train ``budget.steps``
    (fewer than ``steps`` when a busy machine was seen then), and fewer again, at least ``local_sgd_steps``, when
    what is left of the budget after the measurements in this process would not hold them
    (``budget.cuts_note()`` then says so).
    """
    import torch

    from effitrain_helpers.measure.bench import busy_reason, run_benchmark
    from effitrain_helpers.processes.launch import resolve_num_processes

    n = resolve_num_processes(num_processes, minimum=2, why=LOCAL_SGD_NEEDS)
    check_steps("accumulation_steps", accumulation_steps)
    Techniques(accumulation_steps=accumulation_steps, local_sgd_steps=local_sgd_steps, steps=steps,
               batch_size=8 * accumulation_steps)  # the runs' checks, here (accumulation cuts 8 * k rows into k)
    busy = busy_reason()
    acc = measure_accumulation(micro_batch=4, accumulation_steps=accumulation_steps, seq_len=64)
    ckpt = measure_checkpointing((64,), batch_size=8, repeats=3)[0]
    if budget is not None:
        steps = budget.steps_that_fit(min(steps, budget.steps), least=local_sgd_steps)
    parallel = measure_local_sgd(local_sgd_steps, steps, n, batch_size=8, accumulation_steps=accumulation_steps)
    low = low_precision()
    precision = precision_runs or measure_precision(("fp32", low), steps=4)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results, _ = run_benchmark([256], ("float32", TORCH_NAME[low]), device, check_load=False)  # interleaved
    matmul = {r.dtype: r for r in results}
    dp, ls, quiet, ga = (parallel[w] for w in ("data_parallel", "local_sgd", "no_communication", "accumulation"))
    k, kl = accumulation_steps, local_sgd_steps
    comm = max(0.0, dp.seconds_per_step - quiet.seconds_per_step)
    fp32, half = precision["fp32"], precision[low]
    series = {"fp32": fp32.time_doubt, low: half.time_doubt, **{f"matmul {d}": m.unreliable for d, m in matmul.items()}}
    precision_doubt = "; ".join([busy] * bool(busy) + [f"{name}: {why}" for name, why in series.items() if why])
    rows = [
        ChapterRow(f"gradient accumulation (k={k})", 1 / acc.activation_ratio, 1 / k,
                   acc.seconds_accumulated / acc.seconds_full_batch, 1.0,
                   ga.synchronisations / dp.synchronisations, 1.0,
                   tr("{syncs} synchronisations in {steps} optimizer steps of {k} micro-batches",
                      syncs=ga.synchronisations, steps=ga.steps, k=k),
                   judged=("memory", "synchronisations"), time_doubt=_time_doubt(busy, acc.time_spread)),
        ChapterRow("gradient checkpointing", 1 - ckpt.memory_saved,
                   ckpt.activation_bytes_on_expected / ckpt.activation_bytes_off, 1 + ckpt.time_added, 4 / 3,
                   1.0, 1.0, tr("sequence length {length}, batch {batch}", length=ckpt.seq_len, batch=ckpt.batch_size),
                   judged=("memory", "time"), unmeasured=("synchronisations",),
                   time_doubt=_time_doubt(busy, ckpt.time_spread)),
        ChapterRow(f"local SGD (k={kl}, {n} processes)", 1.0, 1.0, ls.seconds_per_step / dp.seconds_per_step,
                   (quiet.seconds_per_step + comm / kl) / dp.seconds_per_step if dp.seconds_per_step else 1.0,
                   ls.synchronisations / dp.synchronisations, (dp.steps // kl) / dp.steps,
                   tr("{every} vs {local} synchronisations in {steps} steps", every=dp.synchronisations,
                      local=ls.synchronisations, steps=dp.steps),
                   judged=("synchronisations",), unmeasured=("memory",), time_doubt=busy),
        ChapterRow(f"mixed precision ({low})", half.activation_bytes / fp32.activation_bytes,
                   low_precision_memory_ratio(fp32), half.seconds_per_step / fp32.seconds_per_step,
                   matmul[TORCH_NAME[low]].seconds / matmul["float32"].seconds, 1.0, 1.0,
                   tr("matmul {fp32:.3g} GFLOP/s fp32, {half:.3g} GFLOP/s {low} here", fp32=matmul["float32"].gflops,
                      half=matmul[TORCH_NAME[low]].gflops, low=low),
                   judged=("time",), unmeasured=("synchronisations",), time_doubt=precision_doubt),
    ]
    acc_row, ckpt_row, sgd_row, mp_row = rows
    acc_row.verdict = _verdict(acc_row, abs(acc_row.memory_ratio - 1 / k) < 0.05 / k and acc_row.sync_ratio == 1,
                               tr("1/k of the activation memory, one synchronisation per optimizer step"),
                               tr("memory or synchronisations off"),
                               tr("the same arithmetic in k smaller pieces; how much slower small pieces run "
                                  "depends on the hardware"))
    ckpt_row.verdict = _verdict(ckpt_row, abs(ckpt_row.memory_ratio - ckpt_row.memory_expected) < 0.1 and (
        ckpt_row.time_doubt != "" or ckpt_row.time_ratio > 1),
        tr("only the layer inputs kept, paid in recomputation"), tr("memory or time off"), "")
    sgd_row.verdict = _verdict(sgd_row, sgd_row.sync_ratio == sgd_row.sync_expected,
                               tr("{k}x fewer synchronisations", k=kl), tr("synchronisation count off"),
                               tr("theory fixes the count; the time saved depends on this machine's network"))
    mp_row.verdict = _verdict(mp_row, (mp_row.time_ratio < 1) == (mp_row.time_expected < 1),
                              tr("faster") if mp_row.time_expected < 1 else
                              tr("slower, as this hardware's {low} matmuls are", low=low),
                              tr("speed goes the other way than the matmul benchmark"),
                              tr("activations halve, but backward keeps a 16-bit copy of each weight"))
    return rows


_TECHNIQUES = [  # (pattern of the English key, its template): the key stays English, the label is translated
    (re.compile(r"gradient accumulation \(k=(?P<k>\d+)\)"), msg("gradient accumulation (k={k})")),
    (re.compile(r"gradient checkpointing"), msg("gradient checkpointing")),
    (re.compile(r"local SGD \(k=(?P<k>\d+), (?P<n>\d+) processes\)"), msg("local SGD (k={k}, {n} processes)")),
    (re.compile(r"mixed precision \((?P<low>\w+)\)"), msg("mixed precision ({low})")),
]


def technique_label(technique: str) -> str:
    """A row's technique (the English key the checks compare) as the learner reads it, in their language."""
    for pattern, template in _TECHNIQUES:
        found = pattern.fullmatch(technique)
        if found:
            fields = {k: int(v) if v.isdigit() else v for k, v in found.groupdict().items()}
            return tr(template, **fields) if fields else tr(template)
    return technique


def _cell(row: ChapterRow, figure: str, measured: float, theory: float) -> str:
    """One figure of the table: "measured / theory", a dash when nothing was measured, marked *not judged*
    when the verdict did not compare it and *unreliable* when it is a time that cannot be trusted."""
    if figure in row.unmeasured:
        return "—"
    marks = [] if figure in row.judged else [tr("not judged")]
    if figure == "time" and row.time_doubt:
        marks.append(tr("unreliable"))
    pair = f"{number(measured, '.2f')}x / {number(theory, '.2f')}x"
    return f"{pair} ({', '.join(marks)})" if marks else pair


def chapter_table(rows: list[ChapterRow]) -> str:
    """The rows as a Markdown table (ratios are technique on / off; lower is better), headings, technique names
    and numbers in the learner's language (the verdicts and details are translated when measured; the rows keep
    the English technique names as keys, :func:`technique_label` translates them for display). Each figure says
    whether the verdict judged it, a time whether it is reliable, and a paragraph under the table names the
    rows whose time is unreliable and why (:func:`~effitrain_helpers.measure.bench.unreliable_note`)."""
    from effitrain_helpers.measure.bench import unreliable_note

    lines = [tr("| technique | memory (measured / theory) | time per step (measured / theory) | "
                "synchronisations (measured / theory) | verdict |"), "|---|---|---|---|---|"]
    for r in rows:
        cells = [_cell(r, figure, a, b) for figure, a, b in
                 (("memory", r.memory_ratio, r.memory_expected), ("time", r.time_ratio, r.time_expected),
                  ("synchronisations", r.sync_ratio, r.sync_expected))]
        lines.append(f"| {technique_label(r.technique)} | {' | '.join(cells)} | {r.verdict} ({r.detail}) |")
    note = unreliable_note({technique_label(r.technique): r.time_doubt for r in rows})
    return "\n".join(lines) + (f"\n\n{note}" if note else "")


@dataclass
class PrecisionConclusion:
    """What the mixed-precision row means on this machine: the device that ran it (``device`` ``"cpu"`` or
    ``"gpu"``, its ``name``, the CPU's instruction set ``isa``, None on a GPU), whether it has fast units for the
    low precision (``fast_units``), which of five conclusions the measured ratios support (``outcome``:
    ``pays``, ``not_faster_at_this_size``, ``costs_time``, ``faster_without_units``, or ``unreliable`` when the
    row's time cannot be trusted) and ``text``, the sentence
    ``effitrain efficiency`` prints under its table. ``technique`` is the row's key."""

    technique: str
    device: str
    name: str
    isa: str | None
    low: str
    fast_units: bool
    outcome: str
    text: str

    def to_dict(self) -> dict:
        """The conclusion as a plain dict (the ``conclusion`` of ``effitrain efficiency --json``'s
        mixed-precision record)."""
        return asdict(self)


def precision_conclusion(rows: list[ChapterRow], hardware=None) -> PrecisionConclusion:
    """What the mixed-precision row means on this machine (``effitrain efficiency``, in text and in JSON): the
    CPU's instruction set and whether it has fast bf16 (``hardware_summary()``'s ``cpu_isa`` and
    ``cpu_bf16_fast``; the GPU instead when the row ran on one), then the conclusion the measured ratios support
    here. ``hardware`` defaults to :func:`~effitrain_helpers.core.devices.hardware_summary`."""
    from effitrain_helpers.core.devices import _yes, hardware_summary

    hw = hardware or hardware_summary()
    row = next(r for r in rows if r.technique.startswith("mixed precision ("))
    low = row.technique.removeprefix("mixed precision (").rstrip(")")
    figures = dict(time=row.time_ratio, matmul=row.time_expected, memory=row.memory_ratio, low=low)
    if hw.gpus:
        gpu = hw.gpus[0]
        device, name, isa = "gpu", gpu.name, None
        fast = gpu.bf16_fast if low == "bf16" else gpu.fp16_fast
        head = tr("this GPU: {name}; fast {low} units: {fast}.", name=name, low=low, fast=_yes(fast))
    else:
        device, name, isa, fast = "cpu", hw.cpu_model, hw.cpu_isa, hw.cpu_bf16_fast
        head = tr("this CPU: {model}, {isa}; fast bf16 instructions (AMX or AVX512-BF16 on x86, the bf16 "
                  "extension on ARM): {fast}.", model=name, isa=isa, fast=_yes(fast))
    if row.time_doubt:
        outcome = "unreliable"
        body = tr("Its time per step is UNRELIABLE ({why}), so no conclusion on speed here; measure again on a "
                  "quiet machine. It keeps {memory:.2f}x the activation memory.", why=row.time_doubt, **figures)
    elif fast and row.time_ratio < 1:
        outcome = "pays"
        body = tr("So {low} pays here: {time:.2f}x fp32's time per step (matmul {matmul:.2f}x), {memory:.2f}x "
                  "its activation memory.", **figures)
    elif fast:
        outcome = "not_faster_at_this_size"
        body = tr("Yet {low} was not faster at this size ({time:.2f}x fp32's time per step, matmul {matmul:.2f}x): "
                  "the lesson model's products are too small for the units to win; measure at the full size "
                  "(EFFITRAIN_SIZE=full) before choosing. It still keeps {memory:.2f}x the activation memory.",
                  **figures)
    elif row.time_ratio >= 1:
        outcome = "costs_time"
        body = tr("So {low} costs time here ({time:.2f}x fp32's time per step, matmul {matmul:.2f}x) and saves "
                  "only activation memory ({memory:.2f}x): train in fp32 on this machine; {low} pays on hardware "
                  "with units for it (NVIDIA GPUs since Ampere, CPUs with AMX or AVX512-BF16).", **figures)
    else:
        outcome = "faster_without_units"
        body = tr("{low} measured faster ({time:.2f}x fp32's time per step) without units for it, against the "
                  "matmul benchmark ({matmul:.2f}x): other work dominated the step or the machine was busy; "
                  "measure again before relying on it.", **figures)
    return PrecisionConclusion(row.technique, device, name, isa, low, bool(fast), outcome, f"{head} {body}")


def chapter_records(rows: list[ChapterRow], conclusion: PrecisionConclusion) -> list[dict]:
    """What ``effitrain efficiency --json`` prints: one record per technique (:meth:`ChapterRow.to_dict`), the
    mixed-precision record carrying ``conclusion`` (the same :class:`PrecisionConclusion` the text prints)."""
    return [{**r.to_dict(), **({"conclusion": conclusion.to_dict()} if r.technique == conclusion.technique else {})}
            for r in rows]
