"""Lesson 7.3's checkers with right answers (the solution, and the planner's own parts summed) and each named
mistake (all in this process: quick)."""

from dataclasses import replace

import pytest

from effitrain_helpers.measure.memory_estimate import layer_activation_bytes
from effitrain_helpers.measure.planner import Cluster, Model, bubble, memory_per_device, parameters_per_rank, plan
from effitrain_helpers.teach.checks.lesson_7_3 import q1, q2, q3
from effitrain_helpers.teach.exercises import ____


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


@pytest.mark.parametrize("answer, words", [
    (_memory, None),
    (lambda *a: _memory(*a, zero=False), "ZeRO is left out"),
    (lambda *a: _memory(*a, zero_shards=lambda layout: layout.dp), "divide by DP x CP"),
    (lambda *a: _memory(*a, in_flight=lambda layout, m: m), "GPipe"),
    (lambda *a: _memory(*a, in_flight=lambda layout, m: 1), "one micro-batch of activations only"),
    (lambda *a: _memory(*a, logits=False), "the logits are missing"),
    (lambda *a: _memory(*a, split=False), "not split"),
    (lambda *a: _memory(*a, bytes_per=(4, 4, 8)), "float32 Adam"),
    (lambda *a: _memory(*a) * 1.1, "compare each part"),
    (lambda *a: "many", "return one number"),
])
def test_q1_names_each_mistake(answer, words):
    result = q1.evaluate(answer)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


@pytest.mark.parametrize("answer, words", [
    (lambda p, m: (p - 1) / (m + p - 1), None),
    (lambda p, m: 1 - m / (m + p - 1), None),
    (lambda p, m: (p - 1) / m, "ideal step"),
    (lambda p, m: (m - 1) / (m + p - 1), "swapped"),
    (lambda p, m: p / (m + p), "a stage idles"),
])
def test_q2_names_each_mistake(answer, words):
    result = q2.evaluate(answer)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


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


@pytest.mark.parametrize("report, words", [
    (lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6, {"tp": 4}), None),
    (lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6, {"tp": 4, "cp": None}), None),
    (lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6), "TP other than 4"),
    (lambda: plan(THIRTEEN_B, Cluster(32, 40e9), 2e6, {"tp": 4}), "not bytes"),
    (lambda: plan(THIRTEEN_B, Cluster(32, 40), 2e6 / 4096, {"tp": 4}), "not sequences"),
    (lambda: plan(THIRTEEN_B, Cluster(64, 40), 2e6, {"tp": 4}), "the question says 32"),
    (lambda: plan(replace(THIRTEEN_B, heads=80), Cluster(32, 40), 2e6, {"tp": 4}), "heads"),
    (lambda: plan(THIRTEEN_B, Cluster(32, 40, inter_gbps=5), 2e6, {"tp": 4}), "defaults"),
    (lambda: "DP8 TP4", "what plan(...) returned"),
])
def test_q3_names_each_mistake(report, words):
    result = q3.evaluate(report())
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


@pytest.mark.parametrize("exercise", [q1, q2, q3])
def test_starter_code_is_not_attempted(exercise):
    assert exercise.evaluate(____).status == "not attempted"
