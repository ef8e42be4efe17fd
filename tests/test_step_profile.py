"""Lesson 5.2's helpers: the profiler's events turned into a per-step breakdown, the trace's path, the verdicts
on loader workers and profiler overhead, the on-the-fly tokenizing dataset and the breakdown figure."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.measure import step_profile
from effitrain_helpers.measure.step_profile import (COMMUNICATION, OTHER, StepProfile, TokenizingPairs,
                                                    label_memory, loader_verdict, optimizer_state_bytes,
                                                    overhead_note, phase_table, summarize, trace_path,
                                                    union_length)


def event(name, start, end, thread=1):
    """A stand-in for torch's FunctionEvent: a name and a time range in microseconds."""
    span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
    return SimpleNamespace(name=name, time_range=span, thread=thread)


def profile(phases=None, step=100.0, wall=(0.1, 0.1, 0.1), communication=0.0):
    phases = {"data loading": 10.0, "forward": 30.0, "backward": 40.0, "optimizer step": 15.0} \
        if phases is None else phases
    return StepProfile(phases, step, communication, [w * 1e3 for w in wall], len(wall))


def test_union_length_counts_overlaps_once():
    assert union_length([]) == 0
    assert union_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert union_length([(0, 10), (2, 3)]) == 10


def test_summarize_per_step_means_and_collectives_clipped_to_steps():
    events = [event("ProfilerStep#3", 0, 1000), event("ProfilerStep#4", 1000, 3000),
              event("forward", 10, 310), event("forward", 1010, 1510),
              event("backward", 310, 910), event("backward", 1510, 2910),
              # two buckets reduced at once on gloo's threads count once; the part outside the steps is cut
              event("gloo:all_reduce", 400, 600, thread=2), event("gloo:all_reduce", 500, 700, thread=3),
              event("gloo:broadcast", 2900, 3400, thread=2), event("c10d::allreduce_", 400, 410)]
    got = summarize(events, [0.001, 0.002])
    assert got.steps == 2
    assert got.phases_ms == {"data loading": 0.0, "forward": 0.4, "backward": 1.0, "optimizer step": 0.0}
    assert got.step_ms == pytest.approx(1.5)
    assert got.communication_ms == pytest.approx((300 + 100) / 2 / 1e3)
    assert got.wall_ms == [1.0, 2.0] and got.wall_mean_ms == 1.5
    assert got.other_ms == pytest.approx(0.1)
    assert got.dominant() == "backward"


def test_summarize_refuses_what_cannot_be_a_breakdown():
    with pytest.raises(ValueError, match="recorded no steps"):
        summarize([event("forward", 0, 1)], [])
    with pytest.raises(ValueError, match="1 reference timings for 2 recorded steps"):
        summarize([event("ProfilerStep#1", 0, 1), event("ProfilerStep#2", 1, 2)], [0.1])


def test_summarize_reads_a_real_profiler():
    from torch.profiler import profile as torch_profile
    from torch.profiler import record_function, schedule

    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch_profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(4):
            with record_function("forward"):
                loss = model(torch.randn(8, 16)).square().mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer step"):
                optimizer.step()
            prof.step()
    got = summarize(prof, [0.01, 0.01])
    assert got.steps == 2
    assert got.phases_ms["forward"] > 0 and got.phases_ms["backward"] > 0
    assert got.phases_ms["data loading"] == 0 and got.communication_ms == 0
    assert sum(got.phases_ms.values()) <= got.step_ms


def test_phase_table_adds_up_and_keeps_collectives_apart():
    table = phase_table(profile(communication=20.0))
    assert list(table.columns) == ["phase", "ms per step", "share of the step"]
    assert list(table["phase"]) == ["data loading", "forward", "backward", "optimizer step", OTHER,
                                    "whole step (profiler)", COMMUNICATION]
    assert table["ms per step"][:5].sum() == pytest.approx(100.0)
    assert list(table["share of the step"][-2:]) == ["100%", "20%"]
    assert COMMUNICATION not in list(phase_table(profile())["phase"])


def test_share_names_the_phases_it_knows():
    p = profile()
    assert p.share("forward") == pytest.approx(0.3) and p.share(OTHER) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="'loading' was not profiled"):
        p.share("loading")


def test_trace_path_one_fixed_name_per_kind_and_rank(monkeypatch, tmp_path):
    monkeypatch.setattr(SETTINGS, "cache_dir", tmp_path)
    assert trace_path("1-process") == tmp_path / "traces" / "step-1-process.json"
    assert trace_path("2-processes", 1).name == "step-2-processes-rank1.json"
    assert (tmp_path / "traces").is_dir()
    for bad in ("", "1 process", "../x", "Upper", None):
        with pytest.raises(ValueError, match="lower-case letters"):
            trace_path(bad)
    with pytest.raises(ValueError, match="rank"):
        trace_path("x", -1)


def test_loader_verdict_from_the_measurement():
    quiet = (0.100, 0.101, 0.100)
    without = profile(step=100.0, wall=quiet)
    faster = profile({"data loading": 1.0, "forward": 30.0}, step=80.0, wall=quiet)
    slower = profile({"data loading": 1.0, "forward": 30.0}, step=120.0, wall=quiet)
    same = profile({"data loading": 1.0, "forward": 30.0}, step=102.0, wall=quiet)
    assert loader_verdict(without, faster, 2).startswith("2 workers made the step 20% faster (100 -> 80 ms)")
    assert "data loading 10 -> 1 ms per step, the rest of the step 90 -> 79 ms" in loader_verdict(without, faster, 2)
    assert "20% slower" in loader_verdict(without, slower, 2)
    assert "no difference" in loader_verdict(without, same, 2)
    busy = loader_verdict(without, faster, 2, busy="only 0.3 idle cores for 2 threads")
    assert busy.startswith("No verdict") and "0.3 idle cores" in busy and "faster" not in busy
    spread = loader_verdict(without, profile(step=80.0, wall=(0.05, 0.1, 0.2)), 2)
    assert spread.startswith("No verdict") and "spread" in spread
    with pytest.raises(ValueError, match="workers"):
        loader_verdict(without, faster, 0)


def test_overhead_note_only_concludes_on_a_quiet_machine():
    recorded = profile(wall=(0.110, 0.110, 0.111))
    assert overhead_note(recorded, [0.100, 0.100]).endswith("recording cost about +10.3 ms per step.")
    noisy = overhead_note(recorded, [0.100, 0.300])
    assert "not read as overhead" in noisy and "cost about" not in noisy
    assert "not read as overhead" in overhead_note(recorded, [0.1, 0.1], busy="busy")
    with pytest.raises(ValueError, match="reference_seconds is empty"):
        overhead_note(recorded, [])


def test_tokenizing_pairs_tokenizes_each_item_when_read():
    calls = []

    def tokenizer(first, second, **options):
        calls.append((first, second, options["max_length"]))
        return {"input_ids": torch.ones(1, options["max_length"], dtype=torch.long),
                "attention_mask": torch.ones(1, options["max_length"], dtype=torch.long)}

    data = TokenizingPairs({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [0, 1]}, tokenizer, 8)
    assert len(data) == 2 and calls == []
    item = data[1]
    assert calls == [("b", "d", 8)]
    assert item["input_ids"].shape == (8,) and int(item["labels"]) == 1
    batch = next(iter(torch.utils.data.DataLoader(data, batch_size=2)))
    assert batch["input_ids"].shape == (2, 8) and data.items_read == 3
    with pytest.raises(ValueError, match="seq_len"):
        TokenizingPairs({"sentence1": [], "sentence2": [], "label": []}, tokenizer, 0)


@pytest.mark.slow
def test_with_loader_workers_the_training_process_tokenizes_nothing():
    def tokenizer(first, second, **options):
        return {"input_ids": torch.ones(1, options["max_length"], dtype=torch.long),
                "attention_mask": torch.ones(1, options["max_length"], dtype=torch.long)}

    data = TokenizingPairs({"sentence1": ["a"] * 4, "sentence2": ["c"] * 4, "label": [0] * 4}, tokenizer, 8)
    batches = list(torch.utils.data.DataLoader(data, batch_size=2, num_workers=2))
    assert len(batches) == 2 and data.items_read == 0
    assert len(list(torch.utils.data.DataLoader(data, batch_size=2))) == 2 and data.items_read == 4


def test_plot_step_breakdown_draws_one_bar_per_configuration():
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach.plots import plot_step_breakdown

    fig = plot_step_breakdown({"1 process": profile(), "2 processes": profile(communication=20.0)})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["1 process", "2 processes"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:5] == ["data loading", "forward", "backward", "optimizer step", OTHER] and len(legend) == 6
    plt.close(fig)
    with pytest.raises(ValueError, match="profiles is empty"):
        plot_step_breakdown({})


def test_module_names_the_labels_the_lesson_types():
    assert step_profile.PHASES == ("data loading", "forward", "backward", "optimizer step")
    assert json.dumps(step_profile.PHASES)


def _profiled_adamw_step(profile_memory=True):
    """One step of a small MLP and a fresh AdamW under the profiler, labelled like the lesson."""
    from torch.profiler import profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with profile(profile_memory=profile_memory) as prof:
        with record_function("forward"):
            loss = model(torch.randn(32, 64)).square().mean()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer step"):
            optimizer.step()
    return prof, model, optimizer


def test_label_memory_sees_the_optimizer_state_allocated_in_its_step():
    prof, model, optimizer = _profiled_adamw_step()
    params = list(model.parameters())
    state = optimizer_state_bytes(optimizer)
    assert state == 2 * sum(p.numel() * p.element_size() for p in params) + 4 * len(params)  # moments + step
    net = label_memory(prof, ("forward", "backward", "optimizer step", "never ran"))
    assert net["optimizer step"] == state and net["never ran"] == 0
    assert net["forward"] > 0  # what autograd saved for backward
    quiet, *_ = _profiled_adamw_step(profile_memory=False)
    assert label_memory(quiet, ("optimizer step",)) == {"optimizer step": 0}


def test_plot_trace_timeline_draws_the_ranges_and_the_memory_of_a_saved_trace(tmp_path):
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach.plots import plot_trace_timeline

    prof, *_ = _profiled_adamw_step()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    fig = plot_trace_timeline(events)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:3] == ["forward", "backward", "optimizer step"] and len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="no record_function ranges"):
        plot_trace_timeline([e for e in events if e.get("cat") != "user_annotation"])


def trace_event(name, start, duration, thread, category="cpu_op"):
    """One complete event ("ph": "X") of a Chrome trace, as ``export_chrome_trace`` writes it (microseconds)."""
    return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": duration, "tid": thread, "pid": 1}


def hooked_step_trace(first_run_at=1_200.0):
    """A made-up trace of one hooked step: backward from 1000 to 5000 us on thread 1, two all-reduces issued by
    its hooks at 2000 and 4500 us, run by gloo's thread 2 from ``first_run_at`` and from 5100 us."""
    return [trace_event("backward", 1_000.0, 4_000.0, 1, "user_annotation"),
            trace_event("c10d::allreduce_", 4_500.0, 20.0, 1), trace_event("c10d::allreduce_", 2_000.0, 20.0, 1),
            trace_event("gloo:all_reduce", 5_100.0, 900.0, 2, "user_annotation"),
            trace_event("gloo:all_reduce", first_run_at, 3_000.0, 2, "user_annotation"),
            trace_event("aten::mm", 1_100.0, 50.0, 1), {"ph": "M", "name": "thread_name", "tid": 2}]


def test_collective_overlap_finds_the_issued_and_run_all_reduces_against_backward():
    from effitrain_helpers.measure.step_profile import collective_overlap

    seen = collective_overlap(hooked_step_trace())
    assert seen == {"ended": 4.0, "issued": [1.0, 3.5], "ran": [(0.2, 3.2), (4.1, 5.0)]}
    assert all(t < seen["ended"] for t in seen["issued"]) and seen["ran"][0][0] < seen["ended"]
    late = collective_overlap(hooked_step_trace(first_run_at=6_000.0))  # gloo started after backward ended
    assert min(a for a, _ in late["ran"]) > late["ended"]


def test_collective_overlap_refuses_a_trace_without_its_range_or_its_collectives():
    from effitrain_helpers.measure.step_profile import collective_overlap

    events = hooked_step_trace()
    with pytest.raises(ValueError, match="0 ranges named 'backward'"):
        collective_overlap([e for e in events if e.get("name") != "backward"])
    with pytest.raises(ValueError, match=r"2 ranges named 'backward'"):
        collective_overlap(events + [events[0]])
    with pytest.raises(ValueError, match=r"0 collectives issued \(c10d::...\) and 2 run"):
        collective_overlap([e for e in events if not e.get("name", "").startswith("c10d::")])
    with pytest.raises(ValueError, match=r"2 collectives issued \(c10d::...\) and 0 run"):
        collective_overlap([e for e in events if not e.get("name", "").startswith("gloo:")])


def _hooked_profiled_step():
    """Run in each of 2 processes: one step of a 6-layer MLP (1024 wide, 256 rows: a backward of tens of ms) whose gradient hooks start asynchronous
    all-reduces, under ``torch.profiler``; the trace exported, read back and reduced to its overlap."""
    import tempfile

    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from effitrain_helpers.measure.step_profile import collective_overlap

    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)])
    works = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: works.append(dist.all_reduce(p.grad, async_op=True)))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = model(torch.randn(256, 1024)).square().mean()
        with record_function("backward"):
            loss.backward()
        for work in works:
            work.wait()
    with tempfile.TemporaryDirectory() as folder:
        prof.export_chrome_trace(f"{folder}/trace.json")
        with open(f"{folder}/trace.json") as file:
            return collective_overlap(json.load(file)["traceEvents"])


@pytest.mark.slow
def test_a_real_trace_shows_the_hooks_all_reduces_issued_and_running_during_backward():
    from effitrain_helpers.processes.launch import launch

    for seen in launch(_hooked_profiled_step, num_processes=2, quiet=True, timeout=120):
        assert len(seen["issued"]) == len(seen["ran"]) == 12  # one per parameter, as gloo:all_reduce
        assert all(t < seen["ended"] for t in seen["issued"]), seen
        assert seen["ran"][0][0] < seen["ended"], seen  # the first ran while backward was still running
