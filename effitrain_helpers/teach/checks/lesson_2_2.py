"""Exercises of lesson 2.2 (train with Accelerator, in several processes).

q1's checker runs the learner's whole training function in 2 real processes (``launch``) on a tiny model and
judges what happened: the model came back wrapped for DDP, Accelerate saw a world of 2, each rank trained on
its own half of the samples, the ranks ended with identical weights, the prepared scheduler reached the end
of its schedule, and the weights equal those of one process training on the global batches. q2's checker runs
the learner's warm-up schedule, prepared, in 2 and then 3 real processes and reads the learning rate of every
optimizer step: its peak after the first quarter of the steps, 0 when the run ends (just after the last step) and not
before.
"""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, run_learner_in_processes

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
            self.in_eval_mode = 0  # forward passes run in eval mode (dropout off)

        def forward(self, inputs, labels, index):
            if self.training:
                self.seen += index.tolist()
            else:
                self.in_eval_mode += 1
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
    model.eval()  # as from_pretrained returns it: training mode is the learner's to turn on
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
        "in_eval_mode": model.in_eval_mode,
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
    if first["in_eval_mode"] and not first["seen"]:
        raise Incorrect(tr("the model trained in eval mode (dropout off): from_pretrained returns a model in eval "
                           "mode, and so does this check; call model.train() before the training loop."))
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


Q2_WORLDS, Q2_SAMPLES, Q2_BATCH, Q2_EPOCHS, Q2_LR = (2, 3), 64, 4, 2, 0.1  # q2: 8, then 6 batches per epoch and rank


def _run_learner_schedule(fn) -> dict:
    """Inside one launched process: prepare a tiny model, its SGD optimizer and loader with a real Accelerator,
    run the learner's ``fn(accelerator, model, optimizer, train_loader, epochs)`` and report the learning rate
    each optimizer step used, the rate at the end, how often a prepared scheduler's ``step`` was called, and how
    many backward passes began with gradients of an earlier batch still in the parameters (zero_grad left out)."""
    import torch
    from accelerate import Accelerator
    from accelerate.scheduler import AcceleratedScheduler
    from torch.utils.data import DataLoader

    from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows, watch_stale_gradients

    accelerator = Accelerator()
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=Q2_LR)
    used: list[float] = []  # the rate of each optimizer step, read just before it
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    loader = DataLoader(tiny_rows(Q2_SAMPLES), batch_size=Q2_BATCH)
    stale = watch_stale_gradients(model)
    model, prepared_optimizer, loader = accelerator.prepare(model, optimizer, loader)
    original, calls = AcceleratedScheduler.step, []

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    AcceleratedScheduler.step = counted
    before = [p.detach().clone() for p in model.parameters()]
    try:
        fn(accelerator, model, prepared_optimizer, loader, Q2_EPOCHS)
    finally:
        AcceleratedScheduler.step = original
    trained = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return {"used": used, "final": optimizer.param_groups[0]["lr"], "prepared_calls": len(calls),
            "per_epoch": len(loader), "world": accelerator.num_processes, "trained": trained,
            "stale": sum(stale[1:])}


def _check_schedule(fn) -> None:
    """The learner's schedule in 2 processes, then (if right there) in 3: a number of processes written as a
    literal is right in one world size only."""
    for world in Q2_WORLDS:
        first = run_learner_in_processes(_run_learner_schedule, fn, processes=world, timeout=120)[0]
        try:
            _judge_schedule(first)
        except Incorrect as err:
            if world == Q2_WORLDS[0]:
                raise
            raise Incorrect(tr("right in {right} processes, wrong in {world}: {why} Is the number of processes "
                               "written as a number? Read it from the Accelerator.", right=Q2_WORLDS[0],
                               world=world, why=err)) from None


def _judge_schedule(first: dict) -> None:
    """Raises Incorrect, naming the mistake, unless one rank's record of a run is the schedule asked for."""
    used, final, per_epoch = first["used"], first["final"], first["per_epoch"]
    steps, warm = len(used), first["per_epoch"] * Q2_EPOCHS // 4
    if steps != Q2_EPOCHS * per_epoch:
        raise Incorrect(tr("the optimizer stepped {steps} times, not {want} ({epochs} epochs of {per_epoch} "
                           "batches in each process): keep one optimizer.step() per batch.", steps=steps,
                           want=Q2_EPOCHS * per_epoch, epochs=Q2_EPOCHS, per_epoch=per_epoch))
    if not first["trained"]:
        raise Incorrect(tr("the weights never changed: the optimizer stepped with no gradients. Each batch's loss "
                           "must go backward first, with accelerator.backward(loss)."))
    if first["stale"]:
        raise Incorrect(tr("{count} of {steps} backward passes began with the gradients of earlier batches still "
                           "in the parameters, so they add up from step to step: clear them once per optimizer "
                           "step (optimizer.zero_grad()).", count=first["stale"], steps=steps))
    changes = [i for i in range(1, steps) if not math.isclose(used[i], used[i - 1])]
    if not changes and math.isclose(final, used[0]):
        raise Incorrect(tr("the learning rate never changed (it stayed at {lr:.3g}): call scheduler.step() "
                           "after each optimizer.step().", lr=final))
    if all(i % per_epoch == 0 for i in changes):
        raise Incorrect(tr("the learning rate changed only at the ends of epochs: the scheduler stepped once per "
                           "epoch, but its schedule counts optimizer steps; call scheduler.step() inside the "
                           "batch loop, after each optimizer.step()."))
    if not first["prepared_calls"]:
        if math.isclose(final, 0, abs_tol=1e-12):
            raise Incorrect(tr("your rate reaches 0 on time, but only because the scheduler was left out of "
                               "accelerator.prepare and sized for one process. Prepare it (it then also holds "
                               "back during gradient accumulation and after skipped fp16 steps) and size it "
                               "for the steps of all processes."))
        raise Incorrect(tr("the learning rate ended at {lr:.3g}, too high ({fraction:.0%} of its peak instead of "
                           "0): the scheduler was not passed to accelerator.prepare, so it stepped once per "
                           "call instead of once per process per call. Prepare it.", lr=final,
                           fraction=final / Q2_LR))
    peak = max(range(steps), key=lambda i: (used[i], -i))  # the first step at the highest rate
    early = [i for i in range(peak + 1, steps) if math.isclose(used[i], 0, abs_tol=1e-12)]
    if early:
        raise Incorrect(tr("the learning rate reached 0 after {at} of {steps} optimizer steps and the rest "
                           "trained at rate 0: a prepared scheduler steps {n} times per call (once per "
                           "process), so size the schedule, warm-up included, for the steps of all {n} "
                           "processes, not of one.", at=early[0], steps=steps, n=first["world"]))
    if used[peak] < Q2_LR * (1 - 1e-6):
        raise Incorrect(tr("the learning rate never reached its peak {peak:g} (its highest was {top:.3g}, at the "
                           "last step): the warm-up is longer than the run. num_warmup_steps is a quarter of "
                           "num_training_steps; did you swap the two?", peak=Q2_LR, top=used[peak]))
    if not math.isclose(final, 0, abs_tol=1e-12):
        raise Incorrect(tr("the learning rate ended at {lr:.3g} instead of 0: the schedule is longer than the run "
                           "({steps} optimizer steps in each of {n} processes).", lr=final, steps=steps,
                           n=first["world"]))
    if peak != warm:
        raise Incorrect(tr("the warm-up lasted {peak} optimizer step(s), not {warm} (a quarter of {steps}): "
                           "the prepared scheduler counts the warm-up in steps of all processes too, so size "
                           "num_warmup_steps like num_training_steps.", peak=peak, warm=warm, steps=steps))


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
           "Inside the function: an Accelerator; one prepare call for the model, the optimizer, the loader "
           "and the scheduler, keeping the four it returns; the model in training mode; then, for each epoch "
           "and each batch, the loss, its backward through the accelerator, and the three calls of hint 2. "
           "Return the prepared model."],
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
    "2.2 q2: a warm-up schedule under accelerator.prepare",
    _check_schedule,
    usage="q2.check(train_with_warmup)",
    api=True,
    checked=("checked in 2 and then 3 real processes: the learning rate peaked after the first quarter of the "
             "optimizer steps and reached 0 when the run ended, just after the last optimizer step, not before."),
    hints=[
        "A prepared scheduler steps the scheduler it wraps once per process at every call "
        "(accelerate/scheduler.py, AcceleratedScheduler.step): count the steps of all processes together, "
        "for the warm-up as for the whole run.",
        "transformers' get_linear_schedule_with_warmup takes num_warmup_steps and num_training_steps (docs: "
        "'Optimization', 'Schedules'); accelerator.prepare(...) wraps a scheduler too; the Accelerator knows "
        "how many processes run (an attribute: Accelerate docs, 'Accelerator').",
        "Count what the prepared scheduler will see: every process steps it at every batch, so the run's length "
        "is counted over all processes together, not over this process's batches; the warm-up is a share of "
        "that same count. Step it where the optimizer steps, after it.",
    ],
    solution_code=(
        "def train_with_warmup(accelerator, model, optimizer, train_loader, epochs):\n"
        "    total = epochs * len(train_loader) * accelerator.num_processes\n"
        "    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=total // 4,\n"
        "                                                num_training_steps=total)\n"
        "    scheduler = accelerator.prepare(scheduler)\n"
        "    for _ in range(epochs):\n"
        "        for batch in train_loader:\n"
        "            accelerator.backward(model(**batch).loss)\n"
        "            optimizer.step()\n"
        "            scheduler.step()\n"
        "            optimizer.zero_grad()\n\n"
        "q2.check(train_with_warmup)"
    ),
)
q3 = Exercise(
    "2.2 q3: what breaks without gradient averaging",
    _check_failing,
    usage="q3.check(failing)",
    hints=["Which of the four steps need a gradient at all?",
           "Different gradients on each process lead to what after optimizer.step()? Look at CHECKS for the names.",
           "A step fails when it needs the gradients to be equal on every process, or depends on a step that "
           "does. Read each name in CHECKS with that question."],
    solution_code='failing = {"gradient_aggregation", "parameter_synchronization"}\nq3.check(failing)',
)
