"""Exercises of lesson 2.2 (train with Accelerator, in several processes).

q1's checker runs the learner's whole training function in 2 real processes (``launch``) on a tiny model and
judges what happened: the model came back wrapped for DDP, Accelerate saw a world of 2, each rank trained on
its own half of the samples, the ranks ended with identical weights, the prepared scheduler reached the end
of its schedule, and the weights equal those of one process training on the global batches.
"""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

CHECKS = ("data_sharding", "model_replication", "gradient_aggregation", "parameter_synchronization")

PROCESSES, SAMPLES, BATCH, EPOCHS, LR = 2, 48, 4, 2, 0.5  # q1's run: 6 steps per epoch in each rank


def _tiny_parts(batch_size: int = BATCH):
    """A seeded model that answers like a Hugging Face model (``.loss``), its SGD optimizer, a data loader of
    dict batches (with each sample's ``index``) and a linear schedule sized for every batch of the loader."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    class Output(dict):
        __getattr__ = dict.__getitem__

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(6, 2)
            self.seen: list[int] = []  # sample indices this process trained on

        def forward(self, inputs, labels, index):
            if self.training:
                self.seen += index.tolist()
            logits = self.linear(inputs)
            return Output(loss=F.cross_entropy(logits, labels), logits=logits)

    torch.manual_seed(0)
    x = torch.randn(SAMPLES, 6)
    rows = [{"inputs": x[i], "labels": int(x[i, 0] > 0), "index": i} for i in range(SAMPLES)]
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(rows, batch_size=batch_size)  # default collate: a dict of stacked tensors
    total = EPOCHS * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total))
    return model, optimizer, loader, scheduler


def _run_learner_training(fn) -> dict:
    """Inside one launched process: run the learner's ``fn`` on fresh parts and report what it did."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import PartialState

    model, optimizer, loader, scheduler = _tiny_parts()
    original, calls = Accelerator.backward, []

    def counted(self, loss, **kwargs):
        calls.append(1)
        return original(self, loss, **kwargs)

    Accelerator.backward = counted
    try:
        returned = fn(model, optimizer, loader, scheduler, EPOCHS)
    finally:
        Accelerator.backward = original
    return {
        "world": PartialState().num_processes if PartialState._shared_state else None,
        "wrapped": isinstance(returned, torch.nn.parallel.DistributedDataParallel),
        "returned": type(returned).__name__, "seen": sorted(model.seen), "backward_calls": len(calls),
        "lr": optimizer.param_groups[0]["lr"], "weights": [p.detach().cpu().clone() for p in model.parameters()],
    }


def _reference_weights():
    """One process on the global batches (PROCESSES x BATCH samples per step, so its schedule, sized from its own
    loader, has one step per global batch): what DDP must reproduce."""
    model, optimizer, loader, scheduler = _tiny_parts(batch_size=PROCESSES * BATCH)
    model.train()
    for _ in range(EPOCHS):
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _check_training_fn(fn) -> None:
    import torch

    runs = run_learner_in_processes(_run_learner_training, fn, processes=PROCESSES, timeout=120)
    first = runs[0]
    if first["world"] is None:
        raise Incorrect(tr("your function never created an Accelerator: start with accelerator = Accelerator()."))
    if not first["wrapped"]:
        raise Incorrect(tr("your function returned a {returned}, not the model wrapped for DDP: pass the model "
                           "to accelerator.prepare and return what prepare gave back.", returned=first['returned']))
    per_rank = [len(r["seen"]) for r in runs]
    if sorted(runs[0]["seen"] + runs[1]["seen"]) != sorted(list(range(SAMPLES)) * EPOCHS):
        raise Incorrect(tr("the ranks trained on {per_rank} samples for {samples} samples x {epochs} epochs: "
                           "each rank should train on its own half; pass the data loader to accelerator.prepare.",
                           per_rank=per_rank, samples=SAMPLES, epochs=EPOCHS))
    if first["backward_calls"] == 0:
        raise Incorrect(tr("the loss never went through accelerator.backward(loss); loss.backward() skips what "
                           "Accelerate adds (loss scaling in mixed precision, gradient accumulation)."))
    if not all(torch.equal(a, b) for a, b in zip(runs[0]["weights"], runs[1]["weights"])):
        raise Incorrect(tr("the two ranks ended with different weights: the gradients were not averaged across "
                           "them."))
    schedule_steps = round((1 - first["lr"] / LR) * EPOCHS * math.ceil(SAMPLES / BATCH))  # linear decay
    if schedule_steps in (EPOCHS, EPOCHS * PROCESSES):  # one scheduler.step() per epoch, prepared or not
        raise Incorrect(tr("the scheduler stepped once per epoch (the learning rate ended at {lr:.3g}, not 0): "
                           "its schedule counts optimizer steps, so call scheduler.step() inside the batch loop, "
                           "after each optimizer.step().", lr=first['lr']))
    if first["lr"] != 0:
        raise Incorrect(tr("the learning rate ended at {lr:.3g} instead of 0: the schedule counts the batches of "
                           "both processes, so prepare the scheduler (it then steps once per process per call) "
                           "and call scheduler.step() after each optimizer step.", lr=first['lr']))
    if not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(_reference_weights(), first["weights"])):
        raise Incorrect(tr("the weights differ from one process training on the global batches: one "
                           "optimizer.step() per batch, and optimizer.zero_grad() each step so gradients do not "
                           "pile up."))


def _check_schedule_length(answer) -> None:
    got = as_number(answer)
    batches = math.ceil(3000 / 16)
    if got == 3 * batches:
        return
    if got in (3 * math.ceil(batches / 2), 3 * math.ceil(3000 / 32)):
        raise Incorrect(tr("that is the scheduler.step() calls of one process; a prepared scheduler steps once "
                           "per process at each call, so this schedule would end halfway through training."))
    if got in (batches, math.ceil(batches / 2)):
        raise Incorrect(tr("that covers one epoch; the rate must reach zero after all 3."))
    raise Incorrect(tr("{answer!r} is not it: count the batches of 16 in 3,000 pairs, as one loader before "
                       "prepare would, over 3 epochs.", answer=answer))


def _check_failing(answer) -> None:
    if not isinstance(answer, (set, list, tuple)):
        raise Incorrect(tr("give a set of check names from CHECKS; you gave {answer!r}.", answer=answer))
    names = {str(a) for a in answer}
    unknown = names - set(CHECKS)
    if unknown:
        raise Incorrect(tr("{unknown} are not check names; use the names in CHECKS.", unknown=sorted(unknown)))
    want = {"gradient_aggregation", "parameter_synchronization"}
    if "data_sharding" in names or "model_replication" in names:
        raise Incorrect(tr("sharding and replication happen before any gradient exists: they still pass."))
    if names != want:
        raise Incorrect(tr("one more: if each process steps with its own gradient, what happens to the weights "
                           "after the step?"))


q1 = Exercise(
    "2.2 q1: the whole Accelerate training function, in 2 processes",
    _check_training_fn,
    usage="q1.check(my_training)",
    api=True,
    checked=("checked in 2 real processes: a DDP model, each rank on its own half, identical weights, the "
             "schedule run to its end, and the weights of one process on the global batches."),
    hints=["Follow the Accelerate loop of this lesson: one Accelerator, one prepare call for the four objects, "
           "then the epochs and batches; return the model that prepare gave back.",
           "accelerator.prepare(...) returns its arguments wrapped, in the same order (Accelerate docs: "
           "'Accelerator.prepare'); in the loop, the backward pass is accelerator.backward(...), then the "
           "optimizer step, the scheduler step and zero_grad.",
           "accelerator = ____()\n"
           "model, optimizer, ____ = accelerator.prepare(____)\n"
           "for epoch in range(____):\n"
           "    for batch in ____:\n"
           "        loss = ____\n"
           "        accelerator.____(____)\n"
           "        ... three more calls ...\n"
           "return ____"],
    solution_code=(
        "def my_training(model, optimizer, train_loader, scheduler, epochs):\n"
        "    accelerator = Accelerator()\n"
        "    model, optimizer, train_loader, scheduler = accelerator.prepare(\n"
        "        model, optimizer, train_loader, scheduler)\n"
        "    model.train()\n"
        "    for epoch in range(epochs):\n"
        "        for batch in train_loader:\n"
        "            loss = model(**batch).loss\n"
        "            accelerator.backward(loss)\n"
        "            optimizer.step()\n"
        "            scheduler.step()\n"
        "            optimizer.zero_grad()\n"
        "    return model\n\n"
        "q1.check(my_training)"
    ),
)
q2 = Exercise(
    "2.2 q2: how long the prepared schedule must be",
    _check_schedule_length,
    usage="q2.check(schedule_length)",
    hints=[
        "A prepared scheduler steps once per process at every call: think of the batches of all processes "
        "together, not of one process's calls.",
        "That is the length of the training DataLoader before prepare, times the epochs (accelerate/scheduler.py, "
        "AcceleratedScheduler.step).",
        "schedule_length = ____ * math.ceil(____ / ____)",
    ],
    solution_code="schedule_length = 3 * math.ceil(3000 / 16)\nq2.check(schedule_length)",
)
q3 = Exercise(
    "2.2 q3: what breaks without gradient averaging",
    _check_failing,
    usage="q3.check(failing)",
    hints=["Which of the four steps need a gradient at all?",
           "Different gradients on each process lead to what after optimizer.step()? Look at CHECKS for the names.",
           "failing = {____, ____}: two of the names in CHECKS."],
    solution_code='failing = {"gradient_aggregation", "parameter_synchronization"}\nq3.check(failing)',
)
