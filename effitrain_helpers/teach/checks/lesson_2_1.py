"""Exercises of lesson 2.1 (fine-tune with Trainer)."""

from __future__ import annotations

import math

import numpy as np

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes


EPOCHS, BATCH, PAIRS, LEARNING_RATE = 2, 8, 32, 1e-3  # q1's run: 2 epochs of 4 steps


def _check_make_trainer(fn) -> None:
    """Build the learner's Trainer on 32 pairs of the workbook's data, train it, and judge what it did."""
    import tempfile

    import datasets
    import torch
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from effitrain_helpers.sources.models import load_classifier
    from effitrain_helpers.training.train import TrainConfig, build_data

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    model, tokenizer = load_classifier(verbose=False)
    datasets.disable_progress_bars()  # the check shows its verdict only
    try:
        data, _ = build_data(TrainConfig(n_train=PAIRS, n_validation=16), tokenizer)
    finally:
        datasets.enable_progress_bars()
    lengths = [len(ids) for ids in data["train"]["input_ids"]]
    short, long = lengths.index(min(lengths)), lengths.index(max(lengths))
    features = [{k: data["train"][i][k] for k in ("input_ids", "attention_mask", "labels")} for i in (short, long)]
    start = [p.detach().clone() for p in model.parameters()]
    batches = []  # the rows of every training forward pass
    model.register_forward_hook(lambda module, args, kwargs, output: batches.append(
        len(kwargs["input_ids"])) if module.training else None, with_kwargs=True)
    with tempfile.TemporaryDirectory() as out:
        trainer = fn(model, tokenizer, data["train"], data["validation"], out)
        if not isinstance(trainer, Trainer):
            raise Incorrect(tr("return the Trainer you built; your function returned {kind}.",
                               kind=type(trainer).__name__))
        _judge_arguments(trainer.args, out)
        try:
            padded = trainer.data_collator(features)["input_ids"]
        except (ValueError, TypeError, RuntimeError) as err:
            raise Incorrect(tr("the Trainer's data collator cannot batch pairs of {shortest} and {longest} "
                               "tokens ({kind}): pass a collator that pads them to one length.",
                               shortest=min(lengths), longest=max(lengths), kind=type(err).__name__)) from None
        if tuple(padded.shape) != (2, max(lengths)):
            raise Incorrect(tr("the data collator returned input_ids of shape {shape} for pairs of {shortest} and "
                               "{longest} tokens; it should pad to (2, {longest}).", shape=tuple(padded.shape),
                               shortest=min(lengths), longest=max(lengths)))
        for quiet in (PrinterCallback, ProgressCallback):  # the check shows its verdict only
            trainer.remove_callback(quiet)
        trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    if trainer.state.global_step != EPOCHS * PAIRS // BATCH:
        raise Incorrect(tr("{pairs} pairs took {steps} optimizer steps; {epochs} epochs in batches of "
                           "{batch} per device take {expected}.", pairs=PAIRS, steps=trainer.state.global_step,
                           epochs=EPOCHS, batch=BATCH, expected=EPOCHS * PAIRS // BATCH))
    if max(batches, default=0) != BATCH:
        raise Incorrect(tr("the training batches held up to {rows} rows; the exercise asks for {batch} per "
                           "device (per_device_train_batch_size).", rows=max(batches, default=0), batch=BATCH))
    if not math.isclose(trainer.lr_scheduler.base_lrs[0], LEARNING_RATE):
        raise Incorrect(tr("the Trainer trained at learning rate {got:g}; the exercise asks for {want:g} "
                           "(learning_rate).", got=trainer.lr_scheduler.base_lrs[0], want=LEARNING_RATE))
    logged = [h for h in trainer.state.log_history if "loss" in h]
    if len(logged) != EPOCHS:
        raise Incorrect(tr("the Trainer logged the training loss {count} time(s) in {epochs} epochs: log at every "
                           "epoch (logging_strategy).", count=len(logged), epochs=EPOCHS))
    if len(evals) != EPOCHS:
        raise Incorrect(tr("the Trainer evaluated {count} time(s) in {epochs} epochs: evaluate at every "
                           "epoch.", count=len(evals), epochs=EPOCHS))
    if "eval_accuracy" not in evals[-1]:
        raise Incorrect(tr("the evaluation computed only {metrics}: give the Trainer a compute_metrics function "
                           "(the workbook's trainer_metrics) for accuracy and F1.", metrics=sorted(evals[-1])))
    if all(torch.equal(a, b) for a, b in zip(start, model.parameters())):
        raise Incorrect(tr("the weights did not change: was the learning rate 0, or the model not the one passed "
                           "in?"))


def _judge_arguments(args, out: str) -> None:
    """What the run cannot show in 8 steps on this machine: where the Trainer writes, that it saves no
    checkpoint (the default saves every 500 steps) and that it keeps to the CPU on a machine with a GPU."""
    import os

    if os.path.abspath(args.output_dir) != os.path.abspath(out):
        raise Incorrect(tr("the Trainer writes into {got!r}, not the output_dir your function was given: pass it "
                           "on (output_dir=output_dir).", got=args.output_dir))
    if args.save_strategy != "no":
        raise Incorrect(tr("this Trainer saves checkpoints (save_strategy {strategy!r}: every {steps} steps by "
                           "default); the exercise asks for none.", strategy=str(args.save_strategy.value),
                           steps=args.save_steps))
    if not args.use_cpu:
        raise Incorrect(tr("on a machine with a GPU this Trainer would train there; the exercise asks for the "
                           "CPU (use_cpu)."))


PER_DEVICE, GLOBAL, PROCESSES, STEPS = 4, 16, 2, 2  # q4: micro-batches of 4, global batches of 16, 2 steps
MAX_ROWS = 4096  # q4's data: enough rows for STEPS full steps of the learner's global batch, up to this


def _train_counting(fn, n_rows: int) -> dict:
    """In each process of the group: a real Trainer with the learner's ``fn(output_dir)`` arguments (run for
    STEPS optimizer steps, saving and printing nothing) on a tiny regression and ``n_rows`` rows, watched. Records
    the rows of every forward pass (a forward hook) and, at each optimizer step (a step hook on the optimizer
    given to the Trainer), the rows this process had run so far."""
    import tempfile

    import torch
    from transformers import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from transformers.trainer_utils import SaveStrategy

    class Regression(torch.nn.Module):  # answers model(**batch)["loss"], as Trainer expects
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 1)

        def forward(self, inputs, labels):
            return {"loss": torch.nn.functional.mse_loss(self.linear(inputs).squeeze(-1), labels)}

    torch.manual_seed(0)
    model = Regression()
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(n_rows, 3, generator=generator), torch.randn(n_rows, generator=generator)
    rows = [{"inputs": x[i], "labels": y[i]} for i in range(n_rows)]
    forwards, steps = [], []
    model.register_forward_hook(lambda _m, _a, kwargs, _o: forwards.append(len(kwargs["inputs"])), with_kwargs=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer.register_step_post_hook(lambda *_: steps.append(sum(forwards)))
    with tempfile.TemporaryDirectory() as out:
        args = fn(out)
        args.max_steps, args.save_strategy, args.disable_tqdm = STEPS, SaveStrategy.NO, True
        trainer = Trainer(model=model, args=args, train_dataset=rows, optimizers=(optimizer, None))
        for quiet in (PrinterCallback, ProgressCallback):  # the check shows its verdict only
            trainer.remove_callback(quiet)
        trainer.train()
    return {"forwards": forwards, "steps": steps, "world size": args.world_size}


def _check_make_arguments(fn) -> None:
    """Build the learner's TrainingArguments here (are they some?), then train a real Trainer with them in
    PROCESSES real processes and count the rows every optimizer step saw, in all the processes together."""
    import os
    import tempfile

    from transformers import TrainingArguments

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    with tempfile.TemporaryDirectory() as out:
        args = fn(out)
    if not isinstance(args, TrainingArguments):
        raise Incorrect(tr("make_arguments should return transformers.TrainingArguments(...), which Trainer "
                           "takes as args=; yours returned {kind}.", kind=type(args).__name__))
    if os.path.abspath(args.output_dir) != os.path.abspath(out):
        raise Incorrect(tr("the Trainer writes into {got!r}, not the output_dir your function was given: pass it "
                           "on (output_dir=output_dir).", got=args.output_dir))
    if not args.use_cpu:
        raise Incorrect(tr("use_cpu is left False: on a machine with a GPU this Trainer would train there, and the "
                           "exercise keeps the run on the CPU, as exercise 1 does."))
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * PROCESSES
    if STEPS * per_step > MAX_ROWS:
        raise Incorrect(tr("your arguments make optimizer steps of {rows} rows in {processes} processes, far "
                           "more than {expected}.", rows=per_step, processes=PROCESSES, expected=GLOBAL))
    ranks = run_learner_in_processes(_train_counting, fn, STEPS * per_step, processes=PROCESSES, timeout=120)
    first = ranks[0]
    if len(first["steps"]) != STEPS:
        raise Incorrect(tr("the Trainer took {count} optimizer step(s) in a run of max_steps={steps}.",
                           count=len(first["steps"]), steps=STEPS))
    micro = first["forwards"][0]
    k = len(first["forwards"]) // STEPS  # micro-batches per optimizer step, in each process
    seen = sum(r["steps"][0] for r in ranks)  # rows of the first optimizer step, all processes together
    if seen == GLOBAL and micro == PER_DEVICE:
        return
    if micro == GLOBAL and k == 1:
        raise Incorrect(tr("each of the {processes} processes took a batch of {micro} per step, so a step saw "
                           "{seen}: per_device_train_batch_size is per process, and the exercise fixes it at "
                           "{per_device}; gradient_accumulation_steps makes up the rest.", processes=PROCESSES,
                           micro=micro, seen=seen, per_device=PER_DEVICE))
    if micro != PER_DEVICE:
        raise Incorrect(tr("each process ran micro-batches of {micro}; the exercise fixes the per-device batch at "
                           "{per_device} (what fits in one process's memory): make up the global batch with "
                           "gradient_accumulation_steps.", micro=micro, per_device=PER_DEVICE))
    if k == 1:
        raise Incorrect(tr("each optimizer step saw {seen} rows, {per_device} per process x {processes} "
                           "processes: no accumulation. Let each process add up the gradients of several "
                           "micro-batches before the step (gradient_accumulation_steps).", seen=seen,
                           per_device=PER_DEVICE, processes=PROCESSES))
    if seen == PROCESSES * GLOBAL:
        raise Incorrect(tr("each optimizer step saw {seen} rows, {processes} times {expected}: {k} micro-batches "
                           "of {micro} make {expected} in each process, and the {processes} processes each add "
                           "theirs. Divide by the number of processes too.", seen=seen, processes=PROCESSES,
                           expected=GLOBAL, k=k, micro=micro))
    raise Incorrect(tr("each optimizer step saw {seen} rows ({k} micro-batches of {micro} x {processes} "
                       "processes), not {expected}.", seen=seen, k=k, micro=micro, processes=PROCESSES,
                       expected=GLOBAL))


def _call_metrics(fn, logits, labels):
    """``fn`` called as Trainer calls compute_metrics: with an ``EvalPrediction``, which unpacks as
    ``(predictions, labels)`` and also has them as ``.predictions`` and ``.label_ids``."""
    from transformers.trainer_utils import EvalPrediction

    try:
        return fn(EvalPrediction(predictions=logits, label_ids=labels))
    except ValueError as err:
        if "broadcast" not in str(err):
            raise
        raise Incorrect(tr("your function raised ValueError ({error}): the predictions and the labels do not line "
                           "up. Each row of the logits is one sample, and its class is the index of the row's "
                           "largest logit: argmax over the last axis, argmax(-1), one class per label.",
                           error=err)) from None


def _check_metrics_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    logits = np.array([[2.0, 1.0], [0.1, 0.3], [5.0, -1.0], [0.0, 1.0]])
    labels = np.array([0, 1, 1, 1])
    out = _call_metrics(fn, logits, labels)
    if not isinstance(out, dict) or "accuracy" not in out:
        raise Incorrect(tr("return a dict with an 'accuracy' key; your function returned {out!r}.", out=out))
    got = as_number(out["accuracy"])
    other = _call_metrics(fn, np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1]))  # a second case: 1 of 2 right
    if math.isclose(got, 0.75) and not math.isclose(as_number(other.get("accuracy", -1)), 0.5):
        raise Incorrect(tr("right for the first test case only: compute the accuracy from the logits and labels "
                           "given."))
    if math.isclose(got, 3.0):
        raise Incorrect(tr("that is the number of correct rows; divide by the number of rows."))
    if math.isclose(got, 0.25):
        raise Incorrect(tr("that compares the logits' smallest entry: take argmax(-1), the highest."))
    if not math.isclose(got, 0.75):
        raise Incorrect(tr("for 4 rows with 3 right your function gives {got!r}; expected 0.75.", got=got))


def _check_always_yes(answer, labels) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(tr("answer should be a pair (accuracy, f1); you gave {answer!r}.", answer=answer))
    accuracy, f1 = (as_number(a) for a in answer)
    labels = [int(x) for x in labels]
    p = sum(labels) / len(labels)
    if not math.isclose(accuracy, p, abs_tol=1e-6):
        raise Incorrect(tr("accuracy {accuracy:.4f} is not right: always saying 1 is right exactly on the rows "
                           "labelled 1.", accuracy=accuracy))
    if math.isclose(f1, p, abs_tol=1e-6):
        raise Incorrect(tr("that is the precision; recall is 1 (every paraphrase found): combine them into F1."))
    if math.isclose(f1, (p + 1) / 2, abs_tol=1e-6):
        raise Incorrect(tr("F1 {f1:.4f} is the arithmetic mean of precision and recall; F1 is their harmonic mean, "
                           "2 P R / (P + R).", f1=f1))
    if not math.isclose(f1, 2 * p / (p + 1), abs_tol=1e-6):
        raise Incorrect(tr("F1 {f1:.4f} is not right: precision is the share of 1s, recall is 1.", f1=f1))


q1 = Exercise(
    "2.1 q1: TrainingArguments and a Trainer, trained briefly",
    _check_make_trainer,
    usage="q1.check(make_trainer)",
    api=True,
    checked=("checked: your Trainer trained for real, batched the pairs, reported accuracy through "
             "compute_metrics and took the expected optimizer steps."),
    hints=[
        "Two objects: the TrainingArguments that describe the run (the names the exercise lists), then the "
        "Trainer that gets the model, the arguments, both datasets, a collator that pads and the metrics.",
        "transformers docs, 'Trainer' and 'TrainingArguments'; the cells above build both. The collator is "
        "DataCollatorWithPadding(tokenizer); compute_metrics is the workbook's trainer_metrics.",
        "Build the TrainingArguments with the folder you were given and the values the exercise lists "
        "(epochs, learning rate, batch size, when to evaluate and log, the CPU, no checkpoints, no "
        "reporting), then return a Trainer given the model, those arguments, the train and evaluation splits,"
        " the padding collator and trainer_metrics.",
    ],
    solution_code=(
        "def make_trainer(model, tokenizer, train_data, eval_data, output_dir):\n"
        "    args = TrainingArguments(output_dir=output_dir, num_train_epochs=2, learning_rate=1e-3,\n"
        "                             per_device_train_batch_size=8, eval_strategy=\"epoch\",\n"
        "                             logging_strategy=\"epoch\", save_strategy=\"no\", use_cpu=True,\n"
        "                             report_to=\"none\")\n"
        "    return Trainer(model=model, args=args, train_dataset=train_data, eval_dataset=eval_data,\n"
        "                   data_collator=DataCollatorWithPadding(tokenizer),\n"
        "                   compute_metrics=trainer_metrics)\n\n"
        "q1.check(make_trainer)"
    ),
)
q2 = Exercise(
    "2.1 q2: compute_metrics",
    _check_metrics_fn,
    usage="q2.check(my_metrics)",
    hints=["Unpack the pair, find each row's predicted class, compare with the labels.",
           "NumPy: each row's predicted class is the index of its largest logit (a NumPy array method; which "
           "axis?); the mean of a boolean array is the fraction of True (transformers docs, 'Trainer', "
           "compute_metrics).",
           "Compare the predicted classes with the labels element by element: the mean of that comparison is "
           "the accuracy. Return it as a Python float, in a dict, under the name 'accuracy'."],
    solution_code=(
        "def my_metrics(eval_pred):\n    logits, labels = eval_pred\n"
        "    return {\"accuracy\": float((logits.argmax(-1) == labels).mean())}\n\nq2.check(my_metrics)"
    ),
)
q3 = Exercise(
    "2.1 q3: the always-yes baseline",
    _check_always_yes,
    usage='q3.check((accuracy, f1), data["validation"][:]["labels"])',
    hints=["Always answering 1 is right on every row labelled 1: accuracy = share of 1s, and so is the precision.",
           "It finds every paraphrase, so recall = 1; F1 is the harmonic mean of precision and recall "
           "(scikit-learn docs, 'f1_score', writes the formula).",
           "labels is a tensor: its share of 1s is one comparison and one reduction (torch docs, "
           "'Reductions'); put that precision and the recall into F1's formula yourself: "
           "always_yes = (____, ____)"],
    solution_code=(
        "labels = data[\"validation\"][:][\"labels\"]\npositive = float((labels == 1).float().mean())\n"
        "always_yes = (positive, 2 * positive * 1.0 / (positive + 1.0))\nq3.check(always_yes, labels)"
    ),
)
q4 = Exercise(
    "2.1 q4: TrainingArguments for a global batch of 16 in 2 processes",
    _check_make_arguments,
    usage="q4.check(make_arguments)",
    api=True,
    checked=("checked in 2 real processes: a Trainer with your arguments ran on the CPU, micro-batches of 4 in "
             "each process, and every optimizer step saw 16 rows in all."),
    hints=["Each process can run several micro-batches, adding up their gradients, before the optimizer steps. "
           "Count the rows one optimizer step sees across all the processes: two of the factors are given, "
           "work out the third.",
           "TrainingArguments (transformers docs, 'Trainer' > 'TrainingArguments') has one argument for the "
           "batch of each device and one for accumulating gradients; Trainer's get_total_train_batch_size "
           "shows how they combine with the world size. Keep the run on the CPU with the same argument as "
           "exercise 1.",
           "Work out the accumulation from the global batch, the per-device batch and the number of "
           "processes; return TrainingArguments with the folder given, the per-device batch of the exercise, "
           "that accumulation, and the CPU."],
    solution_code=(
        "def make_arguments(output_dir):\n"
        "    accumulation = 16 // (4 * 2)\n"
        "    return TrainingArguments(output_dir=output_dir, per_device_train_batch_size=4,\n"
        "                             gradient_accumulation_steps=accumulation, use_cpu=True)\n\n"
        "q4.check(make_arguments)"
    ),
)
