"""Every checker of lesson 1.1, with known right and known wrong answers."""

import numpy as np
import pytest
import torch
from transformers import DistilBertConfig

from effitrain_helpers.teach.checks.lesson_1_1 import STEP_NAMES, q1, q2, q3, q4
from effitrain_helpers.teach.exercises import ____

CONFIG = DistilBertConfig(n_layers=3, dim=64, n_heads=4, hidden_dim=128, vocab_size=100)


@pytest.mark.parametrize(
    "answer, expected, words",
    [
        (16, "correct", ""),
        (16.0, "correct", ""),
        (np.int64(16), "correct", ""),
        (torch.tensor(16), "correct", ""),
        (64, "incorrect", "whole token vector"),
        (4, "incorrect", "number of heads"),
        (8, "incorrect", "compare `dim` and `n_heads`"),
        ("16", "incorrect", "should be a number"),
        (____, "not attempted", ""),
    ],
)
def test_q1_head_width(answer, expected, words):
    result = q1.evaluate(answer, CONFIG)
    assert result.status == expected and words in result.message


def test_q1_forgotten_argument_says_how_to_call():
    result = q1.evaluate(16)
    assert result.status == "incorrect" and "q1.check(head_width, model.config)" in result.message


MODEL = torch.nn.Linear(1000, 100)  # 100,100 parameters
COUNT = 100_100


@pytest.mark.parametrize(
    "answer, expected, words",
    [
        (COUNT * 16 / 2**20, "correct", ""),
        (round(COUNT * 16 / 2**20, 1), "correct", ""),
        (np.float32(COUNT * 16 / 2**20), "correct", ""),
        (COUNT * 16 / 1e6, "incorrect", "megabytes"),
        (COUNT * 4 / 2**20, "incorrect", "only the weights"),
        (COUNT * 8 / 2**20, "incorrect", "two moving averages"),
        (COUNT * 12 / 2**20, "incorrect", "three of the four"),
        (COUNT * 16, "incorrect", "that is bytes"),
        (1.0, "incorrect", "is not what training"),
        ("1.5", "incorrect", "should be a number"),
        (torch.ones(3), "incorrect", "should be a number"),
    ],
)
def test_q2_training_memory(answer, expected, words):
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


ORDER = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]


@pytest.mark.parametrize(
    "steps, expected, words",
    [
        (ORDER, "correct", ""),
        (["Data sharding", "model replication", "gradient aggregation", "parameter synchronisation"], "correct", ""),
        (list(STEP_NAMES), "incorrect", "position 2"),
        (list(reversed(ORDER)), "incorrect", "position 1"),
        (ORDER[:2] + ORDER[:1:-1], "incorrect", "position 3 is wrong: the gradients of all devices are combined"),
        (["data sharding"] * 4, "incorrect", "exactly once"),
        (["data sharding", "backprop", "gradient aggregation", "parameter synchronization"], "incorrect", "backprop"),
        ("data sharding", "incorrect", "list"),
    ],
)
def test_q4_steps(steps, expected, words):
    result = q4.evaluate(steps)
    assert result.status == expected and words in result.message


def test_step_names_do_not_give_the_order_away():
    assert list(STEP_NAMES) != ORDER and sorted(STEP_NAMES) == sorted(ORDER)


def test_every_exercise_has_hints_usage_and_a_solution():
    for i, q in enumerate((q1, q2, q3, q4), start=1):
        assert q.hints and q.solution_code.strip() and q.usage.startswith(f"q{i}.check(")
