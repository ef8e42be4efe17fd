"""Exercises of lesson 2.2 (train with Accelerator)."""

from __future__ import annotations

import copy
import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, Spy

CHECKS = ("data_sharding", "model_replication", "gradient_aggregation", "parameter_synchronization")


def _check_step_fn(fn) -> None:
    import torch
    from accelerate import Accelerator

    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    spy = Spy(Accelerator(), watch=("backward",))
    reference = copy.deepcopy(model)
    model, optimizer = spy.prepare(model, optimizer)
    batches = [{"x": torch.randn(8, 4), "y": torch.randint(0, 2, (8,))} for _ in range(2)]

    class Out:  # what a Hugging Face model returns: an object with .loss
        def __init__(self, loss):
            self.loss = loss

    def forward(x, y):
        return Out(torch.nn.functional.cross_entropy(model(x), y))

    before = [p.detach().clone() for p in model.parameters()]
    for batch in batches:  # two steps: gradients left over from the first would spoil the second
        fn(forward, batch, optimizer, spy)
    if "backward" not in spy.calls:
        raise Incorrect("your step never called accelerator.backward(loss); loss.backward() skips what Accelerate adds "
                        "(gradient scaling, accumulation, synchronisation).")
    if all(torch.equal(a, b) for a, b in zip(before, model.parameters())):
        raise Incorrect("the weights did not change: call optimizer.step() after the backward pass.")
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for batch in batches:  # the right answer, computed here
        ref_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(reference(batch["x"]), batch["y"]).backward()
        ref_optimizer.step()
    if not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(reference.parameters(), model.parameters())):
        raise Incorrect("after two steps the weights are not what two clean steps give: gradients pile up between "
                        "steps unless you call optimizer.zero_grad() (before the backward pass or after the step).")


def _check_steps_per_epoch(answer) -> None:
    want = math.ceil(math.ceil(3000 / 16) / 2)
    if answer == math.ceil(3000 / 16):
        raise Incorrect("that is the number of batches in all; each of the 2 processes takes every second one.")
    if answer == 3000 // 16 // 2:
        raise Incorrect("rounded down: the last, partial batch is still a batch (and even_batches fills it).")
    if answer != want:
        raise Incorrect(f"{answer!r} is not it: 3,000 samples in batches of 16, shared by 2 processes.")


def _check_failing(answer) -> None:
    if not isinstance(answer, (set, list, tuple)):
        raise Incorrect(f"give a set of check names from CHECKS; you gave {answer!r}.")
    names = {str(a) for a in answer}
    unknown = names - set(CHECKS)
    if unknown:
        raise Incorrect(f"{sorted(unknown)} are not check names; use the names in CHECKS.")
    want = {"gradient_aggregation", "parameter_synchronization"}
    if "data_sharding" in names or "model_replication" in names:
        raise Incorrect("sharding and replication happen before any gradient exists: they still pass.")
    if names != want:
        raise Incorrect("one more: if each process steps with its own gradient, what happens to the weights after the step?")


q1 = Exercise(
    "2.2 q1: one Accelerate training step",
    _check_step_fn,
    usage="q1.check(train_step)",
    hints=["Four lines: forward (get .loss), backward through the accelerator, step, zero the gradients.",
           "loss = forward(**batch).loss; accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()"],
    solution_code=(
        "def train_step(forward, batch, optimizer, accelerator):\n"
        "    loss = forward(**batch).loss\n    accelerator.backward(loss)\n"
        "    optimizer.step()\n    optimizer.zero_grad()\n\nq1.check(train_step)"
    ),
)
q2 = Exercise(
    "2.2 q2: steps per epoch in 2 processes",
    _check_steps_per_epoch,
    usage="q2.check(steps)",
    hints=["First count the batches of 16 in 3,000 samples (the last one is partial).",
           "Then the 2 processes take them in turn: math.ceil(math.ceil(3000 / 16) / 2)."],
    solution_code="steps = math.ceil(math.ceil(3000 / 16) / 2)\nq2.check(steps)",
)
q3 = Exercise(
    "2.2 q3: what breaks without gradient averaging",
    _check_failing,
    usage="q3.check(failing)",
    hints=["Which of the four steps need a gradient at all?",
           "Different gradients on each process lead to different weights after optimizer.step()."],
    solution_code='failing = {"gradient_aggregation", "parameter_synchronization"}\nq3.check(failing)',
)
