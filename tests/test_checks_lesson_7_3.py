"""Lesson 7.3's checkers with right answers (the solution, and the planner's own parts summed) and each named
mistake (all in this process: quick)."""

from dataclasses import replace

import pytest

from effitrain_helpers.measure.memory_estimate import layer_activation_bytes
from effitrain_helpers.measure.planner import Cluster, Model, bubble, memory_per_device, parameters_per_rank, plan
from effitrain_helpers.teach.checks.lesson_7_3 import q1, q2, q3
from effitrain_helpers.teach.exercises import ____
from verdicts import assert_verdict, mistake, right


def _memory(model, layout, m, bytes_per=(2, 2, 12), zero_shards=None, in_flight=None, logits=True, split=True,
            zero=True):
    """The solution, with a switch for each likely mistake."""
    n = parameters_per_rank(model, layout)
    shards = layout.dp * layout.cp if zero_shards is None else zero_shards(layout)
    stage = layout.zero if zero else 0
    p, g, k = bytes_per
    held = (p * n / (shards if stage >= 3 else 1) + g * n / (shards if stage >= 2 else 1)
            + k * n / (shards if stage >= 1 else 1))
    t, c = (layout.tp, layout.cp) if split else (1, 1)
    per_layer = layer_activation_bytes(model.hidden, model.heads, model.seq, layout.micro_batch, t, c,
                                       layout.recompute)
    layers = model.layers / layout.pp
    first = layers * per_layer * (min(layout.pp, m) if in_flight is None else in_flight(layout, m))
    last = layers * per_layer + (4 * model.seq * layout.micro_batch * model.vocab / (t * c) if logits else 0)
    return held + max(first, last)


def _memory_stage_by_stage(model, layout, m):
    """Right, another way: each part's bytes per parameter and the ZeRO stage from which it is sharded, summed in
    a loop; the activations of the first and the last stage from one rule (stage s holds min(PP - s, m)
    micro-batches under 1F1B, the last one the logits too)."""
    n = parameters_per_rank(model, layout)
    held = 0.0
    for bytes_per, sharded_from in ((2, 3), (2, 2), (12, 1)):  # parameters, gradients, Adam's state
        held += bytes_per * n / (layout.dp * layout.cp if layout.zero >= sharded_from else 1)
    one = layer_activation_bytes(model.hidden, model.heads, model.seq, layout.micro_batch, tp=layout.tp,
                                 cp=layout.cp, recompute=layout.recompute)
    logits = 4 * model.seq * layout.micro_batch * model.vocab / (layout.tp * layout.cp)
    return held + max(model.layers / layout.pp * one * min(layout.pp - stage, m)
                      + (logits if stage == layout.pp - 1 else 0) for stage in (0, layout.pp - 1))


def _memory_as_a_table(model, layout, m):
    """Right, another way: the four parts in a dict, as the lesson's table shows them, ZeRO's divisors looked up by
    the stage, the busier end stage by an if."""
    n, shards = parameters_per_rank(model, layout), layout.dp * layout.cp
    divisors = [(1, 1, 1), (1, 1, shards), (1, shards, shards), (shards, shards, shards)][layout.zero]
    parts = {"parameters": 2 * n / divisors[0], "gradients": 2 * n / divisors[1],
             "optimizer state": 12 * n / divisors[2]}
    stage = model.layers / layout.pp * layer_activation_bytes(
        model.hidden, model.heads, model.seq, layout.micro_batch, layout.tp, layout.cp, layout.recompute)
    first = stage * min(layout.pp, m)
    last = stage + 4 * model.seq * layout.micro_batch * model.vocab / layout.tp / layout.cp
    parts["activations"] = first if first > last else last
    return sum(parts.values())


@pytest.mark.parametrize("answer, words", [
    (_memory, None),
    right("7.3 q1", _memory_stage_by_stage, None),
    right("7.3 q1", _memory_as_a_table, None),
    mistake("7.3 q1", lambda *a: _memory(*a, zero=False), "ZeRO is left out"),
    mistake("7.3 q1", lambda *a: _memory(*a, zero_shards=lambda layout: layout.dp), "divide by DP x CP"),
    mistake("7.3 q1", lambda *a: _memory(*a, in_flight=lambda layout, m: m), "GPipe"),
    mistake("7.3 q1", lambda *a: _memory(*a, in_flight=lambda layout, m: 1), "one micro-batch of activations only"),
    mistake("7.3 q1", lambda *a: _memory(*a, logits=False), "the logits are missing"),
    mistake("7.3 q1", lambda *a: _memory(*a, split=False), "not split"),
    mistake("7.3 q1", lambda *a: _memory(*a, bytes_per=(4, 4, 8)), "float32 Adam"),
    (lambda *a: _memory(*a) * 1.1, "compare each part"),
    (lambda *a: "many", "return one number"),
])
def test_q1_names_each_mistake(answer, words):
    assert_verdict(q1, answer, words=words)


def _idle_slots_counted(p, m):
    """Right, another way: the step's slots walked one by one for the first stage, its idle ones counted."""
    slots = m + p - 1
    idle = sum(1 for slot in range(slots) if slot >= m)  # it works the first m slots, then waits
    return idle / slots


@pytest.mark.parametrize("answer, words", [
    (lambda p, m: (p - 1) / (m + p - 1), None),
    right("7.3 q2", lambda p, m: 1 - m / (m + p - 1), None),
    right("7.3 q2", _idle_slots_counted, None),
    mistake("7.3 q2", lambda p, m: (p - 1) / m, "ideal step"),
    mistake("7.3 q2", lambda p, m: (m - 1) / (m + p - 1), "swapped"),
    (lambda p, m: p / (m + p), "a stage idles"),
])
def test_q2_names_each_mistake(answer, words):
    assert_verdict(q2, answer, words=words)


@pytest.mark.parametrize("exercise, answer, name", [
    (q1, lambda model, layout, m: sum(memory_per_device(model, layout, m).values()), "memory_per_device"),
    (q2, lambda p, m: bubble(p, m), "bubble"),
    (q2, bubble, "bubble"),
])
def test_the_lesson_s_own_function_is_not_an_answer(exercise, answer, name):
    """The notebook imports the planner's functions (it uses them before the exercises): handing them back is
    refused, named."""
    result = exercise.evaluate(answer)
    assert result.status == "incorrect" and f"hands the work to {name}" in result.message, result.message


THIRTEEN_B = Model(13e9, 40, 5120, 40, 4096, 32000)


def _plan_by_keywords():
    """Right, another way: every argument by keyword, the numbers written as integers with underscores."""
    model = Model(parameters=13_000_000_000, layers=40, hidden=5120, heads=40, seq=4096, vocab=32_000)
    return plan(model=model, cluster=Cluster(devices=32, memory_gb=40.0), global_batch_tokens=2_000_000,
                fixed=dict(tp=4))


@pytest.mark.parametrize("report, words", [
    (lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6, {"tp": 4}), None),
    right("7.3 q3", lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6, {"tp": 4, "cp": None}), None),
    right("7.3 q3", _plan_by_keywords, None),
    mistake("7.3 q3", lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6), "TP other than 4"),
    mistake("7.3 q3", lambda: plan(THIRTEEN_B, Cluster(32, 40e9), 2e6, {"tp": 4}), "not bytes"),
    mistake("7.3 q3", lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6 / 4096, {"tp": 4}), "not sequences"),
    (lambda: plan(THIRTEEN_B, Cluster(64, 40), 2e6, {"tp": 4}), "the question says 32"),
    mistake("7.3 q3", lambda: plan(replace(THIRTEEN_B, heads=80), Cluster(32, 40), 2e6, {"tp": 4}), "heads"),
    mistake("7.3 q3", lambda: plan(THIRTEEN_B, Cluster(32, 40, inter_gbps=5), 2e6, {"tp": 4}), "defaults"),
    (lambda: "DP8 TP4", "what plan(...) returned"),
])
def test_q3_names_each_mistake(report, words):
    assert_verdict(q3, report(), words=words)


@pytest.mark.parametrize("exercise", [q1, q2, q3])
def test_starter_code_is_not_attempted(exercise):
    assert exercise.evaluate(____).status == "not attempted"
