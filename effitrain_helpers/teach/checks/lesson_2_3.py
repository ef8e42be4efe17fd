"""Exercises of lesson 2.3 (evaluate with Accelerator; scaling).

q1's checker runs the learner's evaluation in 2 real processes on an uneven split (37 samples in batches of 8)
and counts the predictions each rank got back against the dataset's length, then compares them with the
model's own predictions in one process.
"""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes


SAMPLES, BATCH, PROCESSES = 37, 8, 2  # 5 batches (the last of 5 samples) over 2 processes: an uneven split


def _eval_parts():
    """A seeded classifier with dropout (so evaluation mode matters) that answers like a Hugging Face model
    (``.logits``), and a loader of ``SAMPLES`` dict batches; both in training mode, as a training loop leaves them."""
    import torch
    from torch.utils.data import DataLoader

    class Output(dict):
        __getattr__ = dict.__getitem__

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dropout, self.linear = torch.nn.Dropout(0.5), torch.nn.Linear(4, 2)

        def forward(self, inputs, labels=None):
            return Output(logits=self.linear(self.dropout(inputs)))

    torch.manual_seed(0)
    x = torch.randn(SAMPLES, 4)
    rows = [{"inputs": x[i], "labels": int(x[i, 0] > 0)} for i in range(SAMPLES)]
    return Tiny().train(), DataLoader(rows, batch_size=BATCH)


def _true_predictions() -> list[int]:
    """The model's predictions on every sample, in order, in one process and evaluation mode."""
    import torch

    model, loader = _eval_parts()
    model.eval()
    with torch.no_grad():
        return [int(p) for batch in loader for p in model(**batch).logits.argmax(-1)]


def _run_learner_eval(fn) -> dict:
    """Inside one launched process: prepare the parts, run the learner's ``fn``, report what it returned."""
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    model, loader = accelerator.prepare(*_eval_parts())
    out = fn(model, loader, accelerator)
    if isinstance(out, torch.Tensor):
        out = out.detach().cpu().reshape(-1).tolist()
    return {"rank": accelerator.process_index, "batches_here": len(loader), "returned": out}


def _check_eval_fn(fn) -> None:
    runs = run_learner_in_processes(_run_learner_eval, fn, processes=PROCESSES, timeout=120)
    for run in runs:
        if not isinstance(run["returned"], list):
            raise Incorrect(tr("return the gathered predictions as one tensor (torch.cat); rank {rank} returned "
                               "a {kind}.", rank=run['rank'], kind=type(run['returned']).__name__))
        count = len(run["returned"])
        if count > SAMPLES:
            raise Incorrect(tr("rank {rank} got {count} predictions for {samples} samples: the processes' last "
                               "batches were evened out with repeated samples, and a plain gather keeps them. "
                               "Use the gather that drops them for metrics.", rank=run['rank'], count=count,
                               samples=SAMPLES))
        if count < SAMPLES:
            raise Incorrect(tr("rank {rank} got {count} predictions for {samples} samples: only its own share "
                               "({batches_here} batches). Gather the predictions of every process.",
                               rank=run['rank'], count=count, samples=SAMPLES, batches_here=run['batches_here']))
    if any(run["returned"] != _true_predictions() for run in runs):
        raise Incorrect(tr("{samples} predictions, but not the model's: it has dropout, so switch it to "
                           "evaluation mode with model.eval() before predicting.", samples=SAMPLES))


def _check_ideal_speedups(answer) -> None:
    n = 4
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Incorrect(tr("answer should be a pair (one shared CPU, N GPUs); you gave {answer!r}.", answer=answer))
    cpu, gpu = (as_number(a) for a in answer)
    if math.isclose(cpu, n):
        raise Incorrect(tr("on one CPU the {n} processes share the same cores: each has 1/{n} of the compute.",
                           n=n))
    if not math.isclose(cpu, 1.0):
        raise Incorrect(tr("{cpu} is not it: the total compute of one CPU does not grow with the number of "
                           "processes.", cpu=cpu))
    if not math.isclose(gpu, n):
        raise Incorrect(tr("{gpu} is not it: with one GPU per process, each process brings its own compute.",
                           gpu=gpu))


def _check_ring_bytes(answer, gradient_mib) -> None:
    n = 4
    gradient_mib = as_number(gradient_mib)
    got = as_number(answer)
    want = 2 * (n - 1) / n * gradient_mib
    if math.isclose(got, want, rel_tol=1e-3):
        return
    if math.isclose(got, gradient_mib * (n - 1), rel_tol=1e-3):
        raise Incorrect(tr("that is sending the whole gradient to every other process; a ring splits it into N "
                           "chunks."))
    if math.isclose(got, (n - 1) / n * gradient_mib, rel_tol=1e-3):
        raise Incorrect(tr("that is one of the two phases (reduce-scatter); the all-gather phase sends as much "
                           "again."))
    if not math.isclose(got, want, rel_tol=1e-3):
        raise Incorrect(tr("{got:.3f} MiB is not it: ring all-reduce sends 2 (N-1)/N of the gradient per process.",
                           got=got))


q1 = Exercise(
    "2.3 q1: predictions gathered from 2 processes, each sample once",
    _check_eval_fn,
    usage="q1.check(my_predictions)",
    api=True,
    checked=("checked in 2 real processes on an uneven split: one prediction per sample came back, equal to the "
             "model's own in one process."),
    hints=["Evaluation mode and no gradients, then for each batch the predicted classes; collect them from every "
           "process so that each sample counts once, even when the split is uneven.",
           "Accelerate docs, 'Accelerator.gather_for_metrics': like gather, but it drops the samples added to "
           "even out the last batches. torch.cat joins the per-batch tensors; the argmax of a batch's logits "
           "gives its classes.",
           "model.____()\n"
           "predictions = ____\n"
           "with torch.____():\n"
           "    for batch in ____:\n"
           "        predicted = ____\n"
           "        predictions.append(____)\n"
           "return ____"],
    solution_code=(
        "def my_predictions(model, loader, accelerator):\n"
        "    model.eval()\n"
        "    predictions = []\n"
        "    with torch.no_grad():\n"
        "        for batch in loader:\n"
        "            predicted = model(**batch).logits.argmax(-1)\n"
        "            predictions.append(accelerator.gather_for_metrics(predicted))\n"
        "    return torch.cat(predictions)\n\n"
        "q1.check(my_predictions)"
    ),
)
q2 = Exercise(
    "2.3 q2: ideal speedups",
    _check_ideal_speedups,
    usage="q2.check((on_one_cpu, on_4_gpus))",
    hints=["Speedup = time with one process / time with N, if communication were free. Where does each "
           "process's compute come from?",
           "On one CPU the processes divide the same cores between them; with one GPU each, every process brings "
           "a device of its own.",
           "(on_one_cpu, on_4_gpus) = (____, ____): one of them is 1.0."],
    solution_code="on_one_cpu, on_4_gpus = 1.0, 4.0\nq2.check((on_one_cpu, on_4_gpus))",
)
q3 = Exercise(
    "2.3 q3: what a ring all-reduce sends",
    _check_ring_bytes,
    usage='q3.check(mib_sent, scaling_n["gradient_mib"])',
    hints=["A ring all-reduce has two phases, reduce-scatter then all-gather; the gradient is cut into N chunks.",
           "In each phase a process sends all the chunks but one, each 1/N of the gradient (nccl-tests' "
           "doc/PERFORMANCE.md, 'bus bandwidth', derives the total).",
           "mib_sent = (MiB sent in the first phase) + (MiB sent in the second), each written with N and "
           "scaling_n[\"gradient_mib\"]; N is how many processes the run above had (its output says)."],
    solution_code='mib_sent = 2 * (4 - 1) / 4 * scaling_n["gradient_mib"]\nq3.check(mib_sent, scaling_n["gradient_mib"])',
)
