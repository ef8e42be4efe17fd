"""Lesson 5.2's checkers with known right and wrong answers (q1 runs the learner's profiler in 2 processes)."""

from __future__ import annotations

import pytest
import torch

from effitrain_helpers.measure.step_profile import StepProfile
from effitrain_helpers.teach.checks.lesson_5_2 import RECORDED, _judge, q1, q2, q3, q4
from effitrain_helpers.teach.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, Incorrect, ____

ONE = StepProfile({"data loading": 12.0, "forward": 30.0, "backward": 45.0, "optimizer step": 10.0}, 100.0, 0.0,
                  [100.0, 101.0, 99.0], 3)


def test_5_2_q2_which_phase_dominates():
    assert q2.evaluate("backward", ONE).status == CORRECT
    assert q2.evaluate(max(ONE.phases_ms, key=ONE.phases_ms.get), ONE).status == CORRECT
    wrong = q2.evaluate("forward", ONE)
    assert wrong.status == INCORRECT and "30 ms" in wrong.message
    assert "not one of the labelled phases" in q2.evaluate("other (not labelled)", ONE).message
    assert "a phase's name" in q2.evaluate(45.0, ONE).message
    assert "pass the 1-process profile" in q2.evaluate("backward", {"backward": 1}).message
    assert q2.evaluate(____, ONE).status == NOT_ATTEMPTED


def test_5_2_q3_the_most_workers_can_save():
    assert q3.evaluate(0.12, ONE).status == CORRECT
    assert q3.evaluate(ONE.phases_ms["data loading"] / ONE.step_ms, ONE).status == CORRECT
    assert "not a percent" in q3.evaluate(12, ONE).message
    assert "everything BUT data loading" in q3.evaluate(0.88, ONE).message
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
])
def test_5_2_q1_names_what_the_profiler_missed(change, message):
    _judge(0, FOUND)  # everything recorded: no complaint
    with pytest.raises(Incorrect, match="on rank 1") as err:
        _judge(1, {**FOUND, **change})
    assert message in str(err.value)


@pytest.mark.slow
def test_5_2_q1_runs_the_learners_profiler_in_two_processes():
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

    assert q1.evaluate(right).status == CORRECT
    wrong = q1.evaluate(step_outside_the_label)
    assert wrong.status == INCORRECT and "does not contain optimizer.step()" in wrong.message


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


def test_5_2_q4_reads_the_trace_back_and_compares_the_top_operator():
    right = q4.evaluate(_right_profile_and_save)
    assert right.status == CORRECT and "self CPU time" in right.message


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
