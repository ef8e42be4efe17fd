"""Exercises of lesson 2.3 (evaluate with Accelerator; scaling).

q1's checker runs the learner's evaluation in 2 real processes on an uneven split (37 samples in batches of 8)
and counts the predictions each rank got back against the dataset's length, then compares them with the
model's own predictions in one process. q2's checker runs the learner's step timing in 2 real processes where
rank 1 starts late and steps slower (sleeps), and compares what each rank reported with the slow rank's step.
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


STEPS, SLOW, FAST, LATE = 4, 0.1, 0.005, 0.6  # q2: rank 1's steps take SLOW s, rank 0's FAST; rank 1 starts LATE


def _run_learner_timing(fn) -> dict:
    """Inside one launched process: time the learner's ``fn(accelerator, step, STEPS)`` on a ``step`` that
    sleeps (rank 1 is the slow rank: its steps take ``SLOW`` s against ``FAST``, and it arrives ``LATE`` s
    after rank 0, as a rank still busy with earlier work would)."""
    import time

    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    calls = []

    def step():
        calls.append(1)
        time.sleep(SLOW if rank == 1 else FAST)

    if rank == 1:
        time.sleep(LATE)
    out = fn(accelerator, step, STEPS)
    return {"rank": rank, "calls": len(calls), "returned": out}


def _check_time_steps(fn) -> None:
    _judge_timings(run_learner_in_processes(_run_learner_timing, fn, processes=PROCESSES, timeout=120))


def _judge_timings(runs: list[dict]) -> None:
    """What the 2 ranks of :func:`_run_learner_timing` reported, against the slow rank's step of ``SLOW`` s."""
    for run in runs:
        if isinstance(run["returned"], bool) or not isinstance(run["returned"], (int, float)):
            raise Incorrect(tr("return the seconds per step as a number; rank {rank} returned a {kind}.",
                               rank=run["rank"], kind=type(run["returned"]).__name__))
        if run["calls"] != STEPS:
            raise Incorrect(tr("rank {rank} called step() {calls} time(s) for n={n}: run it exactly n times, "
                               "inside the timed region.", rank=run["rank"], calls=run["calls"], n=STEPS))
    fast, slow = (float(run["returned"]) for run in runs)
    if slow > 2.5 * SLOW:
        raise Incorrect(tr("rank 1 reported {got:.3f} s for steps of about {want:.2f} s: that is the total time "
                           "of the {n} steps; divide it by n to get seconds per step.", got=slow, want=SLOW,
                           n=STEPS))
    if fast < 0.5 * SLOW:
        raise Incorrect(tr("rank 0 reported {got:.3f} s per step, but a step of the group takes about {want:.2f} s "
                           "(rank 1 is slower): rank 0 stopped its clock without waiting for rank 1 to finish. "
                           "Call accelerator.wait_for_everyone() before stopping the clock.", got=fast,
                           want=SLOW))
    if fast > 1.6 * SLOW:
        raise Incorrect(tr("rank 0 reported {got:.3f} s per step for steps of about {want:.2f} s: its clock "
                           "started while rank 1 was still busy with earlier work ({late} s late), and counted "
                           "that wait. Call accelerator.wait_for_everyone() before starting the clock.",
                           got=fast, want=SLOW, late=LATE))
    if not all(0.7 * SLOW < t < 1.6 * SLOW for t in (fast, slow)):
        raise Incorrect(tr("ranks 0 and 1 reported {fast:.3f} and {slow:.3f} s per step; both should report "
                           "the slowest rank's {want:.2f} s per step.", fast=fast, slow=slow, want=SLOW))


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
    if math.isclose(got, 2 * (n - 1) * gradient_mib, rel_tol=1e-3):
        raise Incorrect(tr("that counts a whole gradient at each of the 2 (N-1) sends; each send is one chunk, 1/N "
                           "of the gradient."))
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
           "Put the model in evaluation mode, and with gradients off run each batch of the prepared loader, "
           "take its predicted classes, and pass them through the gathering call of hint 2 before keeping "
           "them; join the kept tensors into one at the end."],
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
    "2.3 q2: timing a step of the whole group",
    _check_time_steps,
    usage="q2.check(my_time_steps)",
    api=True,
    checked=("checked in 2 real processes where rank 1 is slower and starts late: both ranks reported the "
             "slowest rank's seconds per step, step() ran n times."),
    hints=["A step of N processes is as long as its slowest process. Line all processes up before the clock "
           "starts, and again before it stops, so that no rank times only its own part.",
           "Accelerate docs, 'Accelerator.wait_for_everyone': every process stops there until all have "
           "arrived. For the clock, Python's time module has one meant for measuring short intervals (its docs "
           "say which); the answer is seconds per step, not the total.",
           "Wait for every process, read the clock, run the n steps, wait for every process again, read the "
           "clock again; the difference divided by n is the answer."],
    solution_code=(
        "def my_time_steps(accelerator, step, n):\n"
        "    accelerator.wait_for_everyone()\n"
        "    start = time.perf_counter()\n"
        "    for _ in range(n):\n"
        "        step()\n"
        "    accelerator.wait_for_everyone()\n"
        "    return (time.perf_counter() - start) / n\n\n"
        "q2.check(my_time_steps)"
    ),
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
