"""Lesson 5.2's checkers with known right and wrong answers (q1 runs the learner's profiler in 2 processes)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from effitrain_helpers.measure.step_profile import StepProfile
from effitrain_helpers.teach.checks.lesson_5_2 import RECORDED, _judge, q1, q2, q3, q4
from effitrain_helpers.teach.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, Incorrect, ____
from verdicts import mistake, right, speak


ONE = StepProfile({"data loading": 12.0, "forward": 30.0, "backward": 45.0, "optimizer step": 10.0}, 100.0, 0.0,
                  [100.0, 101.0, 99.0], 3)


def test_5_2_q2_which_phase_dominates():
    assert q2.evaluate(max(ONE.phases_ms, key=ONE.phases_ms.get), ONE).status == CORRECT
    assert "pass the 1-process profile" in q2.evaluate("backward", {"backward": 1}).message
    assert q2.evaluate(____, ONE).status == NOT_ATTEMPTED


@pytest.mark.judges("5.2 q2", "right")
@pytest.mark.parametrize("answer", [
    pytest.param(lambda one: max(one.phases_ms.items(), key=lambda pair: pair[1])[0], id="max-of-pairs"),
    pytest.param(lambda one: sorted(one.phases_ms, key=one.phases_ms.__getitem__)[-1], id="last-of-sorted"),
    pytest.param(lambda one: "backward", id="read-off-the-table"),
])
def test_5_2_q2_right_written_another_way(answer):
    result = q2.evaluate(answer(ONE), ONE)
    assert result.status == CORRECT, result.message


@pytest.mark.judges("5.2 q2", "mistake")
@pytest.mark.parametrize("answer, words", [
    pytest.param("forward", "'forward' took 30 ms per step; another phase took more", id="another-phase"),
    pytest.param(max(ONE.phases_ms), "max() over the dict compared the phases' names", id="max-of-the-names"),
    pytest.param("other (not labelled)", "not one of the labelled phases", id="the-unlabelled-rest"),
    pytest.param(45.0, "answer with a phase's name", id="its-milliseconds"),
])
def test_5_2_q2_names_each_mistake(answer, words):
    result = q2.evaluate(answer, ONE)
    assert result.status == INCORRECT and words in result.message, result.message


def test_5_2_q3_the_most_workers_can_save():
    assert q3.evaluate(ONE.phases_ms["data loading"] / ONE.step_ms, ONE).status == CORRECT


@pytest.mark.judges("5.2 q3", "right")
@pytest.mark.parametrize("answer", [
    pytest.param(0.12, id="read-off-the-table"),
    pytest.param(Fraction(12, 100), id="fraction"),
    pytest.param(1 - (ONE.step_ms - ONE.phases_ms["data loading"]) / ONE.step_ms, id="one-minus-the-rest"),
])
def test_5_2_q3_right_written_another_way(answer):
    result = q3.evaluate(answer, ONE)
    assert result.status == CORRECT, result.message


@pytest.mark.judges("5.2 q3", "mistake")
@pytest.mark.parametrize("answer, words", [
    pytest.param(12, "not a percent", id="percent"),
    pytest.param(0.88, "everything BUT data loading", id="the-rest"),
    pytest.param(12 / 88, "data loading over the rest of the step", id="over-the-rest"),
])
def test_5_2_q3_names_each_mistake(answer, words):
    result = q3.evaluate(answer, ONE)
    assert result.status == INCORRECT and words in result.message, result.message


def test_5_2_q2_and_q3_name_the_mistakes_in_portuguese(monkeypatch):
    speak(monkeypatch, "pt-BR")
    assert "o max() sobre o dict comparou os nomes das fases" in q2.evaluate(max(ONE.phases_ms), ONE).message
    assert "isso é o carregamento de dados sobre o resto do passo" in q3.evaluate(12 / 88, ONE).message


def test_5_2_q3_says_what_loading_took_when_it_cannot_name_the_slip():
    assert "12.0 ms of the 100.0 ms step" in q3.evaluate(0.3, ONE).message


FOUND = {"world": 2, "stepped": 5, "returned": "profile", "is_profile": True, "recorded": RECORDED,
         "labels": {"forward": RECORDED, "backward": RECORDED, "optimizer": RECORDED},
         "step_in_optimizer": True, "reduce_in_backward": True, "stale": 0}


@pytest.mark.parametrize("change, message", [
    ({"is_profile": False, "returned": "NoneType"}, "returned NoneType; return the profiler"),
    ({"stepped": 4}, "stepped 4 times for 5 batches"),
    ({"recorded": 0}, "give profile(...) a schedule (without one it marks no steps)"),
    ({"recorded": 5}, "recorded 5 steps, not 3 of 5"),
    ({"labels": {"forward": 3, "backward": 3, "optimizer": 0}}, "'optimizer' (0 of 3)"),
    ({"step_in_optimizer": False}, "does not contain optimizer.step()"),
    ({"reduce_in_backward": False}, "put loss.backward() inside it"),
    ({"stale": 4}, "4 of 5 backward passes began with the gradients of earlier batches"),  # a mutant (issue 41)
    ({"recorded": 0, "scheduled": True, "marked": 5}, "give schedule(...) repeat=1, or a wait of 1"),
    ({"recorded": 0, "scheduled": True, "marked": 0}, "each training step (the schedule counts those calls)"),
    ({"recorded": 0, "scheduled": False, "marked": 5}, "give profile(...) a schedule (without one"),
])
def test_5_2_q1_names_what_the_profiler_missed(change, message):
    _judge(0, FOUND)  # everything recorded: no complaint
    with pytest.raises(Incorrect, match="on rank 1") as err:
        _judge(1, {**FOUND, **change})
    assert message in str(err.value)


def profilers() -> dict:
    """q1's answers: the right one, right ones written another way, and likely mistakes, built here so that they
    travel to the workers by value."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    def right(model, optimizer, batches):
        plan = schedule(wait=1, warmup=1, active=len(batches) - 2)
        with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
            for batch in batches:
                with record_function("forward"):
                    loss = model(**batch).loss
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
                prof.step()
        return prof

    def started_by_hand(model, optimizer, batches):  # right: start() and stop(), the labels from the autograd alias
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=len(batches) - 2))
        prof.start()
        for batch in batches:
            with torch.autograd.profiler.record_function("forward"):
                loss = model(**batch).loss
            with torch.autograd.profiler.record_function("backward"):
                loss.backward()
            with torch.autograd.profiler.record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            prof.step()
        prof.stop()
        return prof

    def first_step_skipped(model, optimizer, batches):  # right: skip_first and one cycle, labels in a loop
        phases = {"forward": lambda b: b.update(loss=model(**b["batch"]).loss),
                  "backward": lambda b: b["loss"].backward(),
                  "optimizer": lambda b: (optimizer.step(), optimizer.zero_grad())}
        plan = schedule(skip_first=1, wait=0, warmup=1, active=len(batches) - 2, repeat=1)  # repeat: the last
        # prof.step() would otherwise start a new cycle (wait=0), whose empty warm-up prof.events() then shows
        with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
            for batch in batches:
                state = {"batch": batch}
                for label, run in phases.items():
                    with record_function(label):
                        run(state)
                prof.step()
        return prof

    def step_outside_the_label(model, optimizer, batches):
        with profile(schedule=schedule(wait=1, warmup=1, active=len(batches) - 2)) as prof:
            for batch in batches:
                with record_function("forward"):
                    loss = model(**batch).loss
                with record_function("backward"):
                    loss.backward()
                optimizer.step()
                with record_function("optimizer"):
                    optimizer.zero_grad()
                prof.step()
        return prof

    def no_schedule(model, optimizer, batches):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches:
                with record_function("forward"):
                    loss = model(**batch).loss
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
                prof.step()
        return prof

    def cycle_started_again(model, optimizer, batches):  # wait=0 and no repeat: the last step opens a new cycle
        with profile(schedule=schedule(skip_first=1, wait=0, warmup=1, active=len(batches) - 2)) as prof:
            for batch in batches:
                with record_function("forward"):
                    loss = model(**batch).loss
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
                prof.step()
        return prof

    def not_returned(model, optimizer, batches):
        right(model, optimizer, batches)

    return locals()


@pytest.mark.slow
@pytest.mark.parametrize("name, words", [
    ("right", None),
    right("5.2 q1", "started_by_hand", None, marks=pytest.mark.exhaustive),
    right("5.2 q1", "first_step_skipped", None, marks=pytest.mark.exhaustive),
    mistake("5.2 q1", "step_outside_the_label", "does not contain optimizer.step()"),
    mistake("5.2 q1", "no_schedule", "give profile(...) a schedule", marks=pytest.mark.exhaustive),
    mistake("5.2 q1", "not_returned", "returned NoneType; return the profiler itself", marks=pytest.mark.exhaustive),
    mistake("5.2 q1", "cycle_started_again", "give schedule(...) repeat=1", marks=pytest.mark.exhaustive),
])
def test_5_2_q1_runs_the_learners_profiler_in_two_processes(name, words):
    result = q1.evaluate(profilers()[name])
    if words is None:
        assert result.status == CORRECT, result.message
    else:
        assert result.status == INCORRECT and words in result.message, result.message


def test_5_2_q1_refuses_what_is_not_a_function():
    result = q1.evaluate(42)
    assert result.status == INCORRECT and "pass your function itself" in result.message


def _right_profile_and_save(step, path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    prof.export_chrome_trace(path)
    return prof, max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key


def _exported_inside_the_block(step, path):
    from torch.profiler import profile

    with profile() as prof:
        step()
        prof.export_chrome_trace(path)
    return prof, "aten::mm"


def _sorted_by_cpu_total(step, path):
    from torch.profiler import profile

    with profile() as prof:
        step()
    prof.export_chrome_trace(path)
    return prof, max(prof.key_averages(), key=lambda e: e.cpu_time_total).key


def _averages_of_another_profiler(step, path):
    from torch.profiler import profile

    with profile() as prof:
        step()
    prof.export_chrome_trace(path)
    with profile() as other:
        sum(torch.ones(3) for _ in range(3))
    return prof, max(other.key_averages(), key=lambda e: e.self_cpu_time_total).key


def _no_trace(step, path):
    from torch.profiler import profile

    with profile() as prof:
        step()
    return prof, max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key


def _returns_the_table(step, path):
    from torch.profiler import profile

    with profile() as prof:
        step()
    prof.export_chrome_trace(path)
    return prof, prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=1).splitlines()


def _sorted_then_first(step, path):
    """Right, another way: the profiler's events sorted by self CPU time, largest first."""
    from torch.profiler import profile

    with profile() as prof:
        step()
    prof.export_chrome_trace(str(path))
    ranked = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return (prof, ranked[0].key)


def _started_by_hand(step, path):
    """Right, another way: start() and stop() instead of a `with` block, the top found in a loop."""
    import torch

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    step()
    prof.stop()
    prof.export_chrome_trace(path)
    top, most = None, -1.0
    for event in prof.key_averages():
        if event.self_cpu_time_total > most:
            top, most = event.key, event.self_cpu_time_total
    return prof, top


def test_5_2_q4_reads_the_trace_back_and_compares_the_top_operator():
    right = q4.evaluate(_right_profile_and_save)
    assert right.status == CORRECT and "self CPU time" in right.message


@pytest.mark.judges("5.2 q4", "right")
@pytest.mark.parametrize("right", [_sorted_then_first, _started_by_hand])
def test_5_2_q4_right_written_another_way(right):
    result = q4.evaluate(right)
    assert result.status == CORRECT, result.message


@pytest.mark.judges("5.2 q4", "mistake")
@pytest.mark.parametrize("wrong, message", [
    (_exported_inside_the_block, "before the profiler stopped"),
    (_sorted_by_cpu_total, "'training step' has the most CPU total"),
    (_averages_of_another_profiler, "not the operator with the most self CPU time in your profiler"),
    (_no_trace, "no trace file at the path"),
    (_returns_the_table, "an operator's name, a string"),
    (lambda step, path: None, "return two things"),
])
def test_5_2_q4_names_the_likely_mistake(wrong, message):
    result = q4.evaluate(wrong)
    assert result.status == INCORRECT and message in result.message, result.message
