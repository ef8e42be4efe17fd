"""Every checker of lesson 1.1, with known right and known wrong answers."""

import time

import numpy as np
import pytest
import torch
from torch.utils import benchmark
from torch.utils.benchmark import Timer
from accelerate import Accelerator
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from effitrain_helpers.teach.checks import lesson_1_1
from effitrain_helpers.teach.checks.lesson_1_1 import STEP_NAMES, q1, q2, q3, q4
from effitrain_helpers.teach.exercises import ____
from verdicts import mistake, right

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


def _prepare_discarded(path):  # the case: prepare called, its result thrown away (Correct before)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    accelerator = Accelerator()
    accelerator.prepare(model)
    return accelerator, model, AutoTokenizer.from_pretrained(path)


def _labels_in_the_config(path):  # right, written another way: the labels in a config, prepared inline
    accelerator = Accelerator()
    config = AutoConfig.from_pretrained(path, num_labels=2)
    model = AutoModelForSequenceClassification.from_pretrained(path, config=config)
    return accelerator, accelerator.prepare(model), AutoTokenizer.from_pretrained(path)


def _prepare_model_first(path):  # right, written another way: the Accelerator first, prepare_model, labels by name
    accelerator = Accelerator()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = accelerator.prepare_model(AutoModelForSequenceClassification.from_pretrained(
        path, id2label={0: "different", 1: "paraphrase"}))
    return accelerator, model, tokenizer


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
    mistake("1.1 q1", _bare_model, "incorrect", "AutoModel has no task head"),
    mistake("1.1 q1", _random_weights, "incorrect", "not the checkpoint's"),
    mistake("1.1 q1", _not_prepared, "incorrect", "not returned by accelerator.prepare"),
    mistake("1.1 q1", _prepare_discarded, "incorrect", "Keep what prepare gives back"),
    right("1.1 q1", _labels_in_the_config, "correct", ""),
    right("1.1 q1", _prepare_model_first, "correct", ""),
    mistake("1.1 q1", _three_labels, "incorrect", "with num_labels=2"),
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
        right("1.1 q2", round(COUNT * 16 / 2**20, 1), "correct", ""),  # rounded to one decimal
        right("1.1 q2", np.float32(COUNT * 16 / 2**20), "correct", ""),  # a NumPy float32
        right("1.1 q2", torch.tensor(COUNT * 4.0) * 4 / 1024**2, "correct", ""),  # a 0-d tensor
        mistake("1.1 q2", COUNT * 16 / 1e6, "incorrect", "megabytes"),
        mistake("1.1 q2", COUNT * 4 / 2**20, "incorrect", "only the weights"),
        mistake("1.1 q2", COUNT * 8 / 2**20, "incorrect", "two moving averages"),
        mistake("1.1 q2", COUNT * 12 / 2**20, "incorrect", "three of the four"),
        mistake("1.1 q2", COUNT * 16, "incorrect", "that is bytes"),
        (1.0, "incorrect", "is not what training"),
        ("1.5", "incorrect", "should be a number"),
        (torch.ones(3), "incorrect", "should be a number"),
    ],
)
def test_q2_training_memory(answer, expected, words):
    result = q2.evaluate(answer, MODEL)
    assert result.status == expected and words in result.message


# ---------------------------------------------------------------- q3: the learner's own benchmark.Timer

def _timed(stmt="a @ b", n_of=lambda n: n, dtype_of=lambda dtype: dtype, rate=lambda n, s: 2 * n**3 / s / 1e9,
           measure=lambda timer: timer.blocked_autorange(), setup="pass"):
    """A learner's matmul_gflops(n, dtype), right unless one of its parts is swapped for a wrong one."""
    def matmul_gflops(n, dtype):
        a = torch.randn(n_of(n), n_of(n), dtype=dtype_of(dtype))
        b = torch.randn(n_of(n), n_of(n), dtype=dtype_of(dtype))
        timer = benchmark.Timer(stmt=stmt, setup=setup, globals={"a": a, "b": b})
        return rate(n, measure(timer).median)
    return matmul_gflops


def _solution_gflops(n, dtype):  # the notebook's solution, word for word
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    timer = benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b})
    seconds = timer.blocked_autorange().median
    return 2 * n**3 / seconds / 1e9


def _imported_timer(n, dtype):  # `from torch.utils.benchmark import Timer`, timeit(number), all threads
    a = torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / Timer("torch.mm(a, a)", globals={"a": a}, num_threads=2).timeit(20).median / 1e9


def _matrices_in_setup(n, dtype):  # right, another way: the matrices made in the Timer's setup, torch.matmul
    timer = benchmark.Timer(stmt="torch.matmul(a, b)", globals={"n": n, "dtype": dtype, "torch": torch},
                            setup="a = torch.randn(n, n, dtype=dtype)\nb = torch.randn(n, n, dtype=dtype)")
    return 2 * n**3 / timer.blocked_autorange(min_run_time=0.1).median * 1e-9


def _perf_counter(n, dtype):  # timed by hand, no Timer
    a = torch.randn(n, n, dtype=dtype)
    start = time.perf_counter()
    a @ a
    return 2 * n**3 / (time.perf_counter() - start) / 1e9


def _starter_gflops(n, dtype):
    timer = ____
    return ____(timer)


@pytest.mark.parametrize("fn, expected, words", [
    (_solution_gflops, "correct", "checked: with a stand-in Timer"),
    right("1.1 q3", _imported_timer, "correct", "exactly 2 n^3 / seconds / 1e9"),
    right("1.1 q3", _matrices_in_setup, "correct", "exactly 2 n^3 / seconds / 1e9"),
    mistake("1.1 q3", _timed(rate=lambda n, s: n**3 / s / 1e9), "incorrect", "off by a factor of 2"),
    (_timed(rate=lambda n, s: s), "incorrect", "that is the time in seconds"),
    mistake("1.1 q3", _timed(rate=lambda n, s: 2 * n**3 / (s * 1e3) / 1e9), "incorrect",
            "1000 times too small: Measurement.median is in seconds, not milliseconds"),
    (_timed(rate=lambda n, s: 2 * n**3 / s / 1e6), "incorrect", "1000 times too many"),
    mistake("1.1 q3", _timed(rate=lambda n, s: 2 * n**3 / s), "incorrect", "that is FLOP/s; divide by 1e9"),
    mistake("1.1 q3", _timed(measure=lambda t: t.timeit(100), rate=lambda n, s: 2 * n**3 / (s / 100) / 1e9),
            "incorrect", "already the time of one run"),
    (_timed(rate=lambda n, s: 42.0), "incorrect", "returns 42.0 whatever the size and the timing"),
    (lambda n, dtype: 42.0, "incorrect", "returns 42.0 whatever"),
    mistake("1.1 q3", _perf_counter, "incorrect", "did not measure with torch.utils.benchmark.Timer"),
    (_timed(stmt="a + b"), "incorrect", "multiplies no matrices"),
    mistake("1.1 q3", _timed(stmt="c", setup="c = a @ b"), "incorrect", "the product is in `setup`"),
    (_timed(n_of=lambda n: 32), "incorrect", "should multiply two 100 x 100 matrices once"),
    (_timed(stmt="a @ b @ a"), "incorrect", "(2 product(s))"),
    mistake("1.1 q3", _timed(dtype_of=lambda dtype: torch.float32), "incorrect",
            "asked for dtype=torch.float64, your matrices are float32"),
    (_timed(measure=lambda t: t.blocked_autorange(), rate=lambda n, s: None), "incorrect", "add a `return`"),
    (lambda n, dtype: benchmark.Timer("a @ a", globals={"a": torch.ones(n, n, dtype=dtype)}).timeit(10),
     "incorrect", "returns the Measurement"),
    (_starter_gflops, "not attempted", "still contains ____"),
    (2.0, "incorrect", "function itself"),
    (lambda n: 1, "incorrect", "TypeError"),
])
def test_q3_matmul_gflops_runs_the_learners_timer(fn, expected, words):
    result = q3.evaluate(fn)
    assert result.status == expected and words in result.message, result


def test_q3_a_rate_far_from_the_checkers_own_is_named(monkeypatch):
    """The real run: a rate outside a factor of 20 of the checker's measurement before and after is wrong."""
    monkeypatch.setattr(lesson_1_1, "_reference_gflops", lambda n, threads, device: 1e6)
    result = q3.evaluate(_solution_gflops)
    assert result.status == "incorrect" and "the checker's own measurement of the same product" in result.message
    assert "a factor of 20, as the machine may be busy" in result.message


def test_q3_leaves_the_real_timer_in_place_even_when_the_learner_fails():
    q3.evaluate(_timed(rate=lambda n, s: 1 / 0))
    assert benchmark.Timer is Timer and Timer.__module__ == "torch.utils.benchmark.utils.timer"
    assert _imported_timer.__globals__["Timer"] is Timer


ORDER = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]


@pytest.mark.parametrize(
    "steps, expected, words",
    [
        (ORDER, "correct", ""),
        right("1.1 q4", ["Data sharding", "model replication", "gradient aggregation", "parameter synchronisation"],
              "correct", ""),  # capitals, British spelling
        right("1.1 q4", tuple(STEP_NAMES[i] for i in (0, 2, 1, 3)), "correct", ""),  # a tuple, indexed
        mistake("1.1 q4", list(STEP_NAMES), "incorrect",  # STEP_NAMES as given: alphabetical
                "position 2 is wrong: a device can only compute gradients once it holds a copy of the model"),
        (list(reversed(ORDER)), "incorrect", "position 1"),
        mistake("1.1 q4", ORDER[:2] + ORDER[:1:-1], "incorrect",
                "position 3 is wrong: the gradients of all devices are combined"),
        mistake("1.1 q4", ORDER[1::-1] + ORDER[2:], "incorrect",  # the model copied before the data is split
                "position 1 is wrong: before anything else, each device must get its own slice"),
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
