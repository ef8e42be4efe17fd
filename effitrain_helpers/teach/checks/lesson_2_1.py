"""Exercises of lesson 2.1 (fine-tune with Trainer)."""

from __future__ import annotations

import math

import numpy as np

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number


def _check_args(args) -> None:
    from transformers import TrainingArguments

    if not isinstance(args, TrainingArguments):
        raise Incorrect(f"pass a TrainingArguments object; you gave {type(args).__name__}.")
    wanted = {"eval_strategy": "epoch", "logging_strategy": "epoch", "save_strategy": "no", "use_cpu": True,
              "num_train_epochs": 2, "per_device_train_batch_size": 8, "report_to": []}
    for name, want in wanted.items():
        got = getattr(args, name)
        got = getattr(got, "value", got)  # enums compare by their value
        if got != want and not (name == "report_to" and got in ([], ["none"], "none", None)):
            raise Incorrect(f"{name} is {got!r}; this exercise wants {want!r}.")


def _check_metrics_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    logits = np.array([[2.0, 1.0], [0.1, 0.3], [5.0, -1.0], [0.0, 1.0]])
    labels = np.array([0, 1, 1, 1])
    out = fn((logits, labels))
    if not isinstance(out, dict) or "accuracy" not in out:
        raise Incorrect(f"return a dict with an 'accuracy' key; your function returned {out!r}.")
    got = as_number(out["accuracy"])
    other = fn((np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1])))  # a second case: 1 of 2 right
    if math.isclose(got, 0.75) and not math.isclose(as_number(other.get("accuracy", -1)), 0.5):
        raise Incorrect("right for the first test case only: compute the accuracy from the logits and labels given.")
    if math.isclose(got, 3.0):
        raise Incorrect("that is the number of correct rows; divide by the number of rows.")
    if math.isclose(got, 0.25):
        raise Incorrect("that compares the logits' smallest entry: take argmax(-1), the highest.")
    if not math.isclose(got, 0.75):
        raise Incorrect(f"for 4 rows with 3 right your function gives {got!r}; expected 0.75.")


def _check_always_yes(answer, labels) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(f"answer should be a pair (accuracy, f1); you gave {answer!r}.")
    accuracy, f1 = (as_number(a) for a in answer)
    labels = [int(x) for x in labels]
    p = sum(labels) / len(labels)
    if not math.isclose(accuracy, p, abs_tol=1e-6):
        raise Incorrect(f"accuracy {accuracy:.4f} is not right: always saying 1 is right exactly on the rows labelled 1.")
    if math.isclose(f1, p, abs_tol=1e-6):
        raise Incorrect("that is the precision; recall is 1 (every paraphrase found): combine them into F1.")
    if not math.isclose(f1, 2 * p / (p + 1), abs_tol=1e-6):
        raise Incorrect(f"F1 {f1:.4f} is not right: precision is the share of 1s, recall is 1.")


q1 = Exercise(
    "2.1 q1: TrainingArguments",
    _check_args,
    usage="q1.check(my_args)",
    hints=["Copy the `args` cell and change the values the exercise names.",
           "num_train_epochs=2, per_device_train_batch_size=8, use_cpu=True; keep the strategies and report_to."],
    solution_code=(
        "my_args = TrainingArguments(output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=8,\n"
        "                            eval_strategy='epoch', logging_strategy='epoch', save_strategy='no',\n"
        "                            use_cpu=True, report_to='none')\nq1.check(my_args)"
    ),
)
q2 = Exercise(
    "2.1 q2: compute_metrics",
    _check_metrics_fn,
    usage="q2.check(my_metrics)",
    hints=["`logits.argmax(-1)` gives the predicted class of each row.",
           "Compare with `labels` and take the mean of the matches."],
    solution_code=(
        "def my_metrics(eval_pred):\n    logits, labels = eval_pred\n"
        "    return {'accuracy': float((logits.argmax(-1) == labels).mean())}\n\nq2.check(my_metrics)"
    ),
)
q3 = Exercise(
    "2.1 q3: the always-yes baseline",
    _check_always_yes,
    usage='q3.check((accuracy, f1), data["validation"][:]["labels"])',
    hints=["Always answering 1 is right on every row labelled 1: accuracy = share of 1s = precision.",
           "It finds every paraphrase, so recall = 1; F1 = 2 p / (p + 1)."],
    solution_code=(
        "labels = data['validation'][:]['labels']\npositive = float((labels == 1).float().mean())\n"
        "always_yes = (positive, 2 * positive / (positive + 1))\nq3.check(always_yes, labels)"
    ),
)
