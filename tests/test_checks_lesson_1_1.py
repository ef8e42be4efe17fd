"""Every checker of lesson 1.1, with known right and known wrong answers."""

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from effitrain_helpers.teach.checks.lesson_1_1 import STEP_NAMES, q1, q2, q3, q4
from effitrain_helpers.teach.exercises import ____

# ---------------------------------------------------------------- q1: the learner's own from_pretrained + prepare

@pytest.fixture(scope="module")
def path():
    from effitrain_helpers.sources.models import choose_model

    return choose_model().path


def _solution(path):
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(path)
    accelerator = Accelerator()
    return accelerator, accelerator.prepare(model), tokenizer


def _bare_model(path):  # AutoModel: no task head, no logits
    accelerator = Accelerator()
    return accelerator, accelerator.prepare(AutoModel.from_pretrained(path)), AutoTokenizer.from_pretrained(path)


def _random_weights(path):  # from a config: the architecture without the checkpoint's weights
    config = AutoConfig.from_pretrained(path, num_labels=2)
    accelerator = Accelerator()
    model = accelerator.prepare(AutoModelForSequenceClassification.from_config(config))
    return accelerator, model, AutoTokenizer.from_pretrained(path)


def _not_prepared(path):  # moved by hand: Accelerate never saw it
    accelerator = Accelerator()
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).to(accelerator.device)
    return accelerator, model, AutoTokenizer.from_pretrained(path)


def _three_labels(path):
    accelerator = Accelerator()
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=3)
    return accelerator, accelerator.prepare(model), AutoTokenizer.from_pretrained(path)


def _no_accelerator(path):
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    return "cpu", model, AutoTokenizer.from_pretrained(path)


def _model_only(path):
    return AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)


def _starter(path):
    model = ____
    return ____, model, ____


@pytest.mark.parametrize("fn, expected, words", [
    (_solution, "correct", ""),
    (_bare_model, "incorrect", "AutoModel has no task head"),
    (_random_weights, "incorrect", "not the checkpoint's"),
    (_not_prepared, "incorrect", "not returned by accelerator.prepare"),
    (_three_labels, "incorrect", "num_labels=2"),
    (_no_accelerator, "incorrect", "should be an Accelerator"),
    (_model_only, "incorrect", "should return (accelerator, model, tokenizer)"),
    (_starter, "not attempted", "still contains ____"),
    ("model", "incorrect", "pass your function itself"),
])
def test_q1_load_and_prepare_runs_the_learners_calls(path, fn, expected, words):
    result = q1.evaluate(fn, path)
    assert result.status == expected and words in result.message, result


def test_q1_forgotten_argument_says_how_to_call():
    result = q1.evaluate(_solution)
    assert result.status == "incorrect" and "q1.check(load_and_prepare, choice.path)" in result.message


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
