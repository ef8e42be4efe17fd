"""Where does a training step's time go? (lesson 5.2: ``torch.profiler`` on the lesson model)

The lesson profiles a few training steps itself, in plain sight (``torch.profiler.profile`` with a
``schedule``, a ``record_function`` label around each phase). This module turns what the profiler recorded
into numbers a learner can read:

- :func:`summarize` reads the profiler's events: each labelled phase's wall time per step (the main thread's
  ``record_function`` ranges), the whole step (the profiler's own ``ProfilerStep`` ranges), and the time the
  process group's threads spent in collectives (``gloo:all_reduce``, ``gloo:broadcast``; ``nccl:...`` on GPUs),
  which overlap the backward pass instead of adding to it; the reference wall times measured with
  ``time.perf_counter`` around the same steps travel with it;
- :func:`phase_table` makes the table (phase, ms per step, share of the step);
- :func:`collective_overlap` reads a saved Chrome trace of one step (lesson 6.2: gradient hooks starting
  asynchronous all-reduces): when the labelled backward ran, when the calling thread issued each collective
  (``c10d::allreduce_``), and when the process group's threads ran it (``gloo:all_reduce``);
- :func:`trace_path` names the Chrome/Perfetto trace file of a run kind in the workbook's cache folder (one
  fixed name per kind: a new run overwrites the last);
- :class:`TokenizingPairs` is a dataset whose ``__getitem__`` tokenizes a sentence pair on the fly, so that
  data loading has a real cost (what ``DataLoader(num_workers=...)`` can move off the training process).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.core.validate import positive_int, whole_number

PHASES = ("data loading", "forward", "backward", "optimizer step")  # the labels lesson 5.2 types
OTHER = msg("other (not labelled)")  # a key (share(OTHER)); phase_table shows it translated
COMMUNICATION = msg("communication (gloo threads, overlaps)")
COLLECTIVE_PREFIXES = ("gloo:", "nccl:")  # how torch's process groups name the collectives they run
ISSUE_PREFIX = "c10d::"  # the op the calling thread records when it issues a collective (c10d::allreduce_)
STEP_PREFIX = "ProfilerStep"  # the range the profiler records for each step of its schedule
TRACE_FOLDER = "traces"  # under SETTINGS.cache_dir
_KIND = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass
class StepProfile:
    """What the profiler saw in one process, per step (milliseconds, means over the recorded steps).

    ``phases_ms`` maps each label to its wall time per step; ``step_ms`` is the profiler's whole step;
    ``communication_ms`` the wall time per step during which a collective ran on the process group's threads
    (0 in one process); ``wall_ms`` the same steps timed with ``time.perf_counter`` (the reference).
    """

    phases_ms: dict[str, float]
    step_ms: float
    communication_ms: float
    wall_ms: list[float]
    steps: int
    rank: int = 0

    @property
    def other_ms(self) -> float:
        """The part of the step no label covers (the loop's own Python, the profiler's bookkeeping)."""
        return max(0.0, self.step_ms - sum(self.phases_ms.values()))

    @property
    def wall_mean_ms(self) -> float:
        """The mean of the reference timings (``time.perf_counter`` around each recorded step), comparable
        with ``step_ms`` (also a mean over the same steps)."""
        return statistics.fmean(self.wall_ms)

    def share(self, phase: str) -> float:
        """``phase``'s fraction of the profiler's step (0..1): a label, ``OTHER`` or ``COMMUNICATION``."""
        ms = {OTHER: self.other_ms, COMMUNICATION: self.communication_ms}.get(phase)
        if ms is None:
            if phase not in self.phases_ms:
                raise ValueError(tr("phase {phase!r} was not profiled; phases: {phases_ms}.",
                                    phase=phase, phases_ms=', '.join(self.phases_ms)))
            ms = self.phases_ms[phase]
        return ms / self.step_ms if self.step_ms else 0.0

    def dominant(self) -> str:
        """The labelled phase that took the most time per step."""
        return max(self.phases_ms, key=self.phases_ms.get)


def _span(event: Any) -> tuple[float, float]:
    """An event's (start, end) in microseconds (``FunctionEvent.time_range``)."""
    return float(event.time_range.start), float(event.time_range.end)


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """The total length covered by ``intervals`` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def summarize(events: Any, wall_seconds: Iterable[float], phases: Iterable[str] = PHASES,
              rank: int = 0) -> StepProfile:
    """The per-step breakdown of a finished ``torch.profiler.profile`` (or its ``.events()``).

    ``wall_seconds`` are the ``time.perf_counter`` durations of the same recorded steps (the reference);
    their count must match the profiler's steps. A label that never ran counts 0 ms. Collectives are counted
    as the union of their intervals inside each step (two buckets reduced at once count once).
    """
    events = list(events.events() if hasattr(events, "events") else events)
    wall = [float(s) * 1e3 for s in wall_seconds]
    phases = tuple(phases)
    steps = [_span(e) for e in events if e.name.startswith(STEP_PREFIX)]
    if not steps:
        raise ValueError(tr("the profiler recorded no steps: call prof.step() at the end of each step, and run at "
                            "least wait + warmup + active steps of its schedule."))
    if len(wall) != len(steps):
        raise ValueError(tr("{n_wall} reference timings for {n_steps} recorded steps: time exactly the steps the "
                            "schedule records (the last `active` ones).", n_wall=len(wall), n_steps=len(steps)))
    n = len(steps)
    phases_ms = {p: sum(e.time_range.elapsed_us() for e in events if e.name == p) / n / 1e3 for p in phases}
    collectives = [_span(e) for e in events if e.name.startswith(COLLECTIVE_PREFIXES)]
    communication = sum(union_length((max(lo, a), min(hi, b)) for lo, hi in collectives if hi > a and lo < b)
                        for a, b in steps)
    step_ms = sum(b - a for a, b in steps) / n / 1e3
    return StepProfile(phases_ms, step_ms, communication / n / 1e3, wall, n, rank)


def collective_overlap(events: Iterable[dict], label: str = "backward") -> dict:
    """When one profiled step's collectives ran against its ``label`` range, from a Chrome trace written by
    ``prof.export_chrome_trace`` and read back as JSON (its ``["traceEvents"]``); lesson 6.2.

    Returns milliseconds since the ``label`` range (a ``record_function``) began: ``ended`` (when it ended),
    ``issued`` (the start of each ``c10d::`` op the range's thread called: the collective handed to the
    process group) and ``ran`` (each ``gloo:``/``nccl:`` event's start and end, on the process group's own
    threads), each sorted. An all-reduce issued or run before ``ended`` overlapped the backward pass.
    """
    spans = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    ranges = [e for e in spans if e.get("name") == label]
    if len(ranges) != 1:
        raise ValueError(tr("the trace holds {n_ranges} ranges named {label!r}, not 1: profile one step, with "
                            "record_function({label!r}) around its loss.backward().",
                            n_ranges=len(ranges), label=label))
    zero, thread = float(ranges[0]["ts"]), ranges[0].get("tid")
    end = zero + float(ranges[0]["dur"])
    ran = sorted((float(e["ts"]) - zero, float(e["ts"]) + float(e["dur"]) - zero) for e in spans
                 if str(e.get("name", "")).startswith(COLLECTIVE_PREFIXES))
    issued = sorted(float(e["ts"]) - zero for e in spans
                    if str(e.get("name", "")).startswith(ISSUE_PREFIX) and e.get("tid") == thread)
    if not ran or not issued:
        raise ValueError(tr("the trace holds {n_issued} collectives issued ({issue_prefix}...) and {n_ran} run "
                            "({collective_prefixes}...): profile with ProfilerActivity.CPU in a process group, "
                            "around a step whose hooks call dist.all_reduce.",
                            n_issued=len(issued), issue_prefix=ISSUE_PREFIX, n_ran=len(ran), collective_prefixes=', '.join(COLLECTIVE_PREFIXES)))
    return {"ended": (end - zero) / 1e3, "issued": [t / 1e3 for t in issued],
            "ran": [(a / 1e3, b / 1e3) for a, b in ran]}


def phase_table(profile: StepProfile):
    """A DataFrame: one row per labelled phase, then the unlabelled rest and the whole step (these add up),
    then the collectives (on other threads, overlapping the backward pass: not part of the sum)."""
    import pandas as pd

    rows = [(p, ms) for p, ms in profile.phases_ms.items()] + [(tr(OTHER), profile.other_ms),
                                                                (tr("whole step (profiler)"), profile.step_ms)]
    if profile.communication_ms:
        rows.append((tr(COMMUNICATION), profile.communication_ms))
    return pd.DataFrame({tr("phase"): [r[0] for r in rows], tr("ms per step"): [round(r[1], 1) for r in rows],
                         tr("share of the step"): [f"{r[1] / profile.step_ms:.0%}" for r in rows]})


def trace_path(kind: str, rank: int | None = None) -> Path:
    """Where the trace of run ``kind`` goes: ``SETTINGS.cache_dir/traces/step-{kind}[-rank{r}].json``.

    One fixed name per kind (and rank), so a new run overwrites the last instead of piling up files. The
    folder is created; ``kind`` is lower-case letters, digits and dashes (e.g. ``"1-process"``).
    """
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise ValueError(tr("kind={kind!r} is not allowed: use lower-case letters, digits and dashes, e.g. "
                            "'1-process'.", kind=kind))
    suffix = "" if rank is None else f"-rank{whole_number('rank', rank, minimum=0)}"
    folder = SETTINGS.cache_dir / TRACE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"step-{kind}{suffix}.json"


class TokenizingPairs:
    """Sentence pairs tokenized at each ``__getitem__`` (padded to ``seq_len``): a map-style dataset whose
    loading costs real work every epoch, as on-the-fly preprocessing does.

    ``pairs`` has ``sentence1``, ``sentence2`` and ``label`` columns (a ``datasets.Dataset`` or a dict of
    lists); items are ``{"input_ids", "attention_mask", "labels"}`` tensors that ``DataLoader``'s default
    collate stacks into batches. ``items_read`` counts the items this process tokenized: a loader's workers
    tokenize in their own copies of the dataset, so with workers the training process's count stays put.
    """

    def __init__(self, pairs, tokenizer, seq_len: int = 64):
        self.first, self.second = list(pairs["sentence1"]), list(pairs["sentence2"])
        self.labels = list(pairs["label"])
        self.tokenizer, self.seq_len = tokenizer, positive_int("seq_len", seq_len)
        self.items_read = 0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        import torch

        self.items_read += 1
        encoded = self.tokenizer(self.first[i], self.second[i], truncation=True, padding="max_length",
                                 max_length=self.seq_len, return_tensors="pt")
        return {"input_ids": encoded["input_ids"][0], "attention_mask": encoded["attention_mask"][0],
                "labels": torch.tensor(self.labels[i])}


SAME_WITHIN = 0.05  # two step times within 5% of each other count as the same


def loader_verdict(without: StepProfile, with_workers: StepProfile, workers: int, busy: str = "") -> str:
    """One sentence on whether ``workers`` loader processes made the step faster, from the two profiles,
    with where the time went: the data-loading phase and the rest of the step, before -> after.

    No conclusion when the machine was busy (``busy``, a reason from ``measure.bench.busy_reason``) or either
    run's reference timings spread too much (``measure.bench.unreliable_reason``): it says so instead.
    """
    from effitrain_helpers.measure.bench import unreliable_advice, unreliable_reason

    positive_int("workers", workers)
    doubts = [r for r in (busy, unreliable_reason(without.wall_ms), unreliable_reason(with_workers.wall_ms)) if r]
    before, after = without.step_ms, with_workers.step_ms
    data = [p.phases_ms.get("data loading", 0.0) for p in (without, with_workers)]
    where = tr("data loading {data_before:.0f} -> {data_after:.0f} ms per step, the rest of the step "
               "{rest_before:.0f} -> {rest_after:.0f} ms", data_before=data[0], data_after=data[1],
               rest_before=before - data[0], rest_after=after - data[1])
    if doubts:
        return tr("No verdict: the measurement cannot be trusted ({doubts}). Seen: step {before:.0f} -> "
                  "{after:.0f} ms, {where}. Fix: {advice}.", doubts="; ".join(dict.fromkeys(doubts)),
                  before=before, after=after, where=where, advice=unreliable_advice())
    change = after / before - 1
    if abs(change) <= SAME_WITHIN:
        return tr("{workers} workers made no difference to the step ({before:.0f} -> {after:.0f} ms): {where}.",
                  workers=workers, before=before, after=after, where=where)
    if change < 0:
        return tr("{workers} workers made the step {change:.0%} faster ({before:.0f} -> {after:.0f} ms): "
                  "{where}.", workers=workers, change=abs(change), before=before, after=after, where=where)
    return tr("{workers} workers made the step {change:.0%} slower ({before:.0f} -> {after:.0f} ms): {where}.",
              workers=workers, change=abs(change), before=before, after=after, where=where)


def overhead_note(profile: StepProfile, reference_seconds: Iterable[float], busy: str = "") -> str:
    """One sentence on what recording cost per step: the recorded steps' ``perf_counter`` mean against the
    same loop's steps with the profiler off (``reference_seconds``, from the schedule's ``wait`` steps).

    With a busy machine (``busy``) or reference steps that spread too much, it gives the numbers and says
    the difference cannot be read as overhead, instead of a false conclusion.
    """
    from effitrain_helpers.measure.bench import unreliable_advice, unreliable_reason

    off = [float(s) * 1e3 for s in reference_seconds]
    if not off:
        raise ValueError(tr("reference_seconds is empty: time at least one step with the profiler off (the "
                            "schedule's wait steps after the first)."))
    on, plain = profile.wall_mean_ms, statistics.fmean(off)
    seen = tr("profiler on {on:.1f} ms per step, off {off:.1f} ms ({change:+.0%})", on=on, off=plain,
              change=on / plain - 1)
    doubts = [r for r in (busy, unreliable_reason(off), unreliable_reason(profile.wall_ms)) if r]
    if doubts:
        return tr("{seen}; not read as overhead: the measurement cannot be trusted ({doubts}). Fix: {advice}.",
                  seen=seen, doubts="; ".join(doubts), advice=unreliable_advice())
    return tr("{seen}: recording cost about {cost:+.1f} ms per step.", seen=seen, cost=on - plain)


def label_memory(prof: Any, labels: Iterable[str] = PHASES) -> dict[str, int]:
    """Net CPU bytes allocated inside each labelled range of a ``profile(..., profile_memory=True)`` run
    (``key_averages()``'s ``cpu_memory_usage``: allocations minus frees, children included). A label that
    never ran counts 0; without ``profile_memory=True`` every label counts 0."""
    averages = {event.key: event for event in prof.key_averages()}
    return {label: int(averages[label].cpu_memory_usage) if label in averages else 0 for label in labels}


def optimizer_state_bytes(optimizer: Any) -> int:
    """The bytes of every tensor in ``optimizer.state`` (for AdamW: ``exp_avg``, ``exp_avg_sq`` and ``step``
    of each parameter), the reference for what the optimizer's first step allocates."""
    import torch

    return sum(value.numel() * value.element_size() for state in optimizer.state.values()
               for value in state.values() if isinstance(value, torch.Tensor))
