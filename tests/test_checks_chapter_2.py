"""Every checker of chapter 2, with known right and known wrong answers."""


import pytest
import torch
from transformers import TrainingArguments

from effitrain_helpers.teach.checks import lesson_2_1 as l21
from effitrain_helpers.teach.checks import lesson_2_2 as l22
from effitrain_helpers.teach.checks import lesson_2_3 as l23
from effitrain_helpers.teach.exercises import Spy


def _args(tmp_path, **changes):
    base = dict(output_dir=str(tmp_path), num_train_epochs=2, per_device_train_batch_size=8, eval_strategy="epoch",
                logging_strategy="epoch", save_strategy="no", use_cpu=True, report_to="none")
    return TrainingArguments(**{**base, **changes})


def test_2_1_q1(tmp_path):
    assert l21.q1.evaluate(_args(tmp_path)).status == "correct"
    assert "eval_strategy" in l21.q1.evaluate(_args(tmp_path, eval_strategy="no")).message
    assert "per_device_train_batch_size is 16" in l21.q1.evaluate(_args(tmp_path, per_device_train_batch_size=16)).message
    assert "TrainingArguments object" in l21.q1.evaluate({"eval_strategy": "epoch"}).message


def test_2_1_q2():
    def right(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    def count(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": int((logits.argmax(-1) == labels).sum())}

    def argmin(eval_pred):
        logits, labels = eval_pred
        return {"accuracy": float((logits.argmin(-1) == labels).mean())}

    assert l21.q2.evaluate(right).status == "correct"
    assert "number of correct rows" in l21.q2.evaluate(count).message
    assert "argmax" in l21.q2.evaluate(argmin).message
    assert "'accuracy' key" in l21.q2.evaluate(lambda e: 0.75).message
    assert "first test case only" in l21.q2.evaluate(lambda e: {"accuracy": 0.75}).message


@pytest.mark.parametrize("answer, words", [((0.6, 0.75), ""), ((0.6, 0.6), "precision"), ((0.4, 0.75), "accuracy"),
                                          ((0.6, 0.5), "F1")])
def test_2_1_q3(answer, words):
    labels = [1] * 6 + [0] * 4
    result = l21.q3.evaluate(answer, labels)
    assert (result.status == "correct") == (words == "") and words in result.message


def test_2_2_q1():
    def right(forward, batch, optimizer, accelerator):
        accelerator.backward(forward(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()

    def plain_backward(forward, batch, optimizer, accelerator):
        forward(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def no_step(forward, batch, optimizer, accelerator):
        accelerator.backward(forward(**batch).loss)
        optimizer.zero_grad()

    def no_zero(forward, batch, optimizer, accelerator):
        accelerator.backward(forward(**batch).loss)
        optimizer.step()

    assert l22.q1.evaluate(right).status == "correct"
    assert "accelerator.backward" in l22.q1.evaluate(plain_backward).message
    assert "optimizer.step()" in l22.q1.evaluate(no_step).message
    assert "zero_grad" in l22.q1.evaluate(no_zero).message

    def zero_first(forward, batch, optimizer, accelerator):
        optimizer.zero_grad()
        accelerator.backward(forward(**batch).loss)
        optimizer.step()

    assert l22.q1.evaluate(zero_first).status == "correct"


@pytest.mark.parametrize("answer, words", [(94, ""), (188, "in all"), (93, "rounded down"), (100, "not it")])
def test_2_2_q2(answer, words):
    result = l22.q2.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message


@pytest.mark.parametrize("answer, words", [
    ({"gradient_aggregation", "parameter_synchronization"}, ""), ({"gradient_aggregation"}, "one more"),
    ({"data_sharding", "gradient_aggregation"}, "before any gradient"), ({"speed"}, "not check names"),
])
def test_2_2_q3(answer, words):
    result = l22.q3.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message


def _predictions(gather="gather_for_metrics", evaluation_mode=True):
    """A q1 answer; ``gather`` names the Accelerator method used (None: no gathering)."""

    def my_predictions(model, loader, accelerator):
        if evaluation_mode:
            model.eval()
        predictions = []
        with torch.no_grad():
            for batch in loader:
                predicted = model(**batch).logits.argmax(-1)
                predictions.append(getattr(accelerator, gather)(predicted) if gather else predicted)
        return torch.cat(predictions)

    return my_predictions


@pytest.mark.parametrize("answer, words", [
    (_predictions(), ""),
    (_predictions(gather="gather"), "predictions for 37 samples: the processes' last batches were evened out"),
    (_predictions(gather=None), "only its own share"),
    (_predictions(evaluation_mode=False), "model.eval()"),
])
def test_2_3_q1_counts_what_2_real_processes_gathered(answer, words):
    result = l23.q1.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message, result


def test_2_3_q1_plain_mistakes_and_the_truth():
    assert "pass your function itself" in l23.q1.evaluate("gather").message
    assert len(l23._true_predictions()) == l23.SAMPLES


@pytest.mark.parametrize("answer, words", [((1.0, 4.0), ""), ((4.0, 4.0), "share the same cores"),
                                           ((1.0, 1.0), "its own compute"), ((0.5, 4.0), "does not grow")])
def test_2_3_q2(answer, words):
    result = l23.q2.evaluate(answer)
    assert (result.status == "correct") == (words == "") and words in result.message


@pytest.mark.parametrize("answer, words", [(4.5, ""), (9.0, "every other process"), (2.25, "one of the two"),
                                           (1.0, "2 (N-1)/N"), (3.0, "2 (N-1)/N")])
def test_2_3_q3(answer, words):
    result = l23.q3.evaluate(answer, 3.0)
    assert (result.status == "correct") == (words == "") and words in result.message


def test_spy_records_only_watched_calls():
    class Target:
        def a(self):
            return 1

        def b(self):
            return 2

        value = 3

    spy = Spy(Target(), watch=("a",))
    assert (spy.a(), spy.b(), spy.value) == (1, 2, 3) and spy.calls == ["a"]
