"""The scaling measurement says when a busy machine makes its timings unreliable (fake timings, no processes)."""

import os

import pytest

from effitrain_helpers.training.scaling import idle_cores, scaling_verdict, time_steps, unreliable_reasons

STEADY = {"workbook": [1.00, 1.02, 0.99], "compute": [0.90, 0.91, 0.90], "ddp": [1.01, 1.00, 1.00]}


def _run(world, samples_per_s, reasons=()):
    return {"world_size": world, "workbook_samples_per_s": samples_per_s, "unreliable": list(reasons)}


def test_steady_timings_on_enough_idle_cores_are_reliable():
    assert unreliable_reasons(STEADY, threads_needed=2, idle=1.9) == []
    assert unreliable_reasons(STEADY, threads_needed=2, idle=None) == []  # idle cores unknown: not held against it
    assert unreliable_reasons({"workbook": [1.0]}, threads_needed=1, idle=1.0) == []  # one round: no spread


def test_repeats_that_spread_are_caught_and_named():
    (reason,) = unreliable_reasons({**STEADY, "compute": [0.9, 1.8, 0.9]}, threads_needed=2, idle=2.0)
    assert "compute loop's 3 repeats spread 100%" in reason


def test_interleaved_rounds_that_disagree_are_caught():
    # each loop steady within 20 %, but in round 2 the workbook loop was hit and DDP was not
    times = {"workbook": [1.0, 1.2, 1.0], "ddp": [1.0, 0.85, 1.0]}
    reasons = unreliable_reasons(times, threads_needed=2, idle=2.0)
    assert reasons == ["the interleaved rounds disagree: workbook / DDP time went from 1.00 to 1.41 between rounds"]


def test_fewer_idle_cores_than_threads_is_caught():
    (reason,) = unreliable_reasons(STEADY, threads_needed=2, idle=1.0)  # another program burns one of 2 cores
    assert reason.startswith("only 1.0 idle core(s) for 2 thread(s)")
    assert unreliable_reasons(STEADY, threads_needed=2, idle=1.6) == []  # noise from the notebook itself


def test_the_verdict_refuses_to_conclude_on_a_busy_run():
    # lesson 2.3 under load: one process 8x slower than two (it ran 2 threads on the 1 free core)
    ok, text = scaling_verdict(_run(1, 50, ["only 1.0 idle core(s) for 2 thread(s): another program is using "
                                               "the CPU"]), _run(2, 400))
    assert not ok and text.startswith("Unreliable measurement, so no conclusion")
    assert "1 process: only 1.0 idle core(s)" in text and "8.0x as fast as one" in text
    assert all(len(line) <= 100 for line in text.splitlines()), "a reason per line, readable on a projector"


def test_an_implausible_speedup_alone_is_flagged():
    ok, text = scaling_verdict(_run(1, 100), _run(2, 300))
    assert not ok and "3.0x as fast as one" in text


@pytest.mark.parametrize("many, words", [(180, "1.80x the samples per second of one process (faster)"),
                                         (70, "0.70x the samples per second of one process (slower)")])
def test_a_sound_run_gets_a_conclusion(many, words):
    ok, text = scaling_verdict(_run(1, 100), _run(2, many))
    assert ok and words in text


def test_idle_cores_measures_this_machine():
    idle = idle_cores(interval=0.1)
    assert idle is None or 0 <= idle <= os.cpu_count() + 0.01


def test_time_steps_returns_seconds_per_step_in_one_process():
    import time

    from accelerate import Accelerator

    calls = []
    seconds = time_steps(Accelerator(cpu=True), lambda: (calls.append(1), time.sleep(0.01)), 3)
    assert len(calls) == 3 and 0.01 <= seconds < 0.5
