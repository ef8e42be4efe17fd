"""Every checker of lesson 1.1, with known right and known wrong answers."""

import pytest
import torch
from transformers import DistilBertConfig

from effitrain_helpers.checks.lesson_1_1 import FOUR_STEPS, q1, q2, q3, q4
from effitrain_helpers.exercises import ____

CONFIG = DistilBertConfig(n_layers=3, dim=64, n_heads=2, hidden_dim=128, vocab_size=100)


def status(result):
    return result.status


@pytest.mark.parametrize(
    "answer, expected, words",
    [
        ((3, 64), "correct", ""),
        ((64, 3), "incorrect", "swapped"),
        ((6, 64), "incorrect", "n_layers"),
        ((3, 768), "incorrect", "dim"),
        (3, "incorrect", "tuple"),
        (____, "not attempted", ""),
    ],
)
def test_q1_config(answer, expected, words):
    result = q1.evaluate(answer, CONFIG)
    assert result.status == expected and words in result.message


MODEL = torch.nn.Linear(1000, 100)  # 100,100 parameters
COUNT = 100_100


@pytest.mark.parametrize(
    "answer, expected, words",
    [
        (COUNT * 4 / 2**20, "correct", ""),
        (COUNT * 4 / 1e6, "incorrect", "megabytes"),
        (COUNT / 2**20, "incorrect", "4 bytes"),
        (COUNT * 2 / 2**20, "incorrect", "16-bit"),
        (1.0, "incorrect", "float32 parameters"),
        ("0.38", "incorrect", "number of MiB"),
    ],
)
def test_q2_param_memory(answer, expected, words):
    result = q2.evaluate(answer, MODEL)
    assert result.status == expected and words in result.message


@pytest.mark.parametrize(
    "fn, expected, words",
    [
        (lambda n, t: 2 * n**3 / t / 1e9, "correct", ""),
        (lambda n, t: n**3 / t / 1e9, "incorrect", "factor of 2"),
        (lambda n, t: 2 * n**3 / t, "incorrect", "divide by 1e9"),
        (lambda n, t: None, "incorrect", "return"),
        (lambda n, t: 2.0, "incorrect", "n=512"),
        (lambda n, t: 2 * n**2 / t / 1e9, "incorrect", "expected 2.0"),
        (lambda n: 1, "incorrect", "TypeError"),
        (2.0, "incorrect", "function itself"),
    ],
)
def test_q3_gflops(fn, expected, words):
    result = q3.evaluate(fn)
    assert result.status == expected and words in result.message


@pytest.mark.parametrize(
    "steps, expected, words",
    [
        (list(FOUR_STEPS), "correct", ""),
        (["Data sharding", "model replication", "gradient aggregation", "parameter synchronisation"], "correct", ""),
        (list(reversed(FOUR_STEPS)), "incorrect", "position 1"),
        (["data sharding", "model replication", "parameter synchronization", "gradient aggregation"], "incorrect", "position 3"),
        (["data sharding"] * 4, "incorrect", "exactly once"),
        (["data sharding", "backprop", "gradient aggregation", "parameter synchronization"], "incorrect", "backprop"),
        ("data sharding", "incorrect", "list"),
    ],
)
def test_q4_steps(steps, expected, words):
    result = q4.evaluate(steps)
    assert result.status == expected and words in result.message


def test_every_exercise_has_hints_and_a_solution():
    for q in (q1, q2, q3, q4):
        assert q.hints and q.solution_code.strip()
