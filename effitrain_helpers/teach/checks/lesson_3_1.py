"""Exercises of lesson 3.1 (gradient accumulation)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, Spy, as_number


def _check_steps_for_batch(answer) -> None:
    micro, processes, target = 8, 2, 64
    got = as_number(answer)
    if got == target // micro:
        raise Incorrect(f"{got:g} micro-batches of {micro} make {target} in ONE process; here {processes} processes "
                        f"each contribute a micro-batch at every micro-step.")
    if got != target // (micro * processes):
        raise Incorrect(f"with {got:g}, one optimizer step sees {got:g} x {micro} x {processes} = "
                        f"{got * micro * processes:g} samples, not {target}.")


def _tiny_setup(k: int):
    """A linear model answering like a Hugging Face model (``.loss``), k micro-batches, and the weights one
    plain SGD step on the whole batch gives."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 1)

        def forward(self, inputs, labels):
            return type("Out", (), {"loss": torch.nn.functional.mse_loss(self.linear(inputs).squeeze(-1), labels)})()

    torch.manual_seed(0)
    x, y = torch.randn(4 * k, 3), torch.randn(4 * k)
    model = Tiny()
    reference = Tiny()
    reference.load_state_dict(model.state_dict())
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x, y).loss.backward()
    sgd.step()
    micro = [{"inputs": x[i:i + 4], "labels": y[i:i + 4]} for i in range(0, 4 * k, 4)]
    return model, micro, reference


def _check_accumulate_fn(fn) -> None:
    import torch
    from accelerate import Accelerator

    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    k = 4
    model, micro, reference = _tiny_setup(k)
    accelerator = Accelerator(gradient_accumulation_steps=k)  # on the device the lesson's Accelerate set up
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    micro = [{key: value.to(accelerator.device) for key, value in batch.items()} for batch in micro]
    spy = Spy(accelerator, watch=("accumulate", "backward"))
    initial = accelerator.unwrap_model(model).linear.weight.detach().cpu().clone()
    fn(model, micro, optimizer, spy)
    if "accumulate" not in spy.calls:
        raise Incorrect("wrap each micro-batch's forward, backward and step in `with accelerator.accumulate(model):`.")
    if "backward" not in spy.calls:
        raise Incorrect("call accelerator.backward(loss): it divides the loss by the accumulation steps.")
    got = accelerator.unwrap_model(model).linear.weight.detach().cpu()
    want = reference.linear.weight.detach()
    if torch.allclose(got, want, atol=1e-6):
        return
    if torch.equal(got, initial):
        raise Incorrect("the weights did not change: call optimizer.step() inside the accumulate block (Accelerate "
                        "skips it until the k-th micro-batch).")
    raise Incorrect(f"after your {k} micro-batches the weights differ from one step on the whole batch by "
                    f"{float((got - want).abs().max()):.2e}: forward, accelerator.backward, optimizer.step and "
                    "optimizer.zero_grad all belong inside the accumulate block, once per micro-batch.")


def _check_bytes_for_32(answer, bytes_per_sample) -> None:
    from effitrain_helpers.training.efficiency import lesson_batches, lesson_model
    from effitrain_helpers.measure.saved_memory import saved_bytes

    per = as_number(bytes_per_sample)
    got = as_number(answer)
    want = saved_bytes(lesson_model(), lesson_batches(1, 32, 64)[0]).activation_bytes  # measured here
    if math.isclose(got, want, rel_tol=0.02):
        return
    if math.isclose(got, per, rel_tol=0.02):
        raise Incorrect("that is one sample's activations; the micro-batch holds 32 samples.")
    raise Incorrect(f"{got:.3g} bytes is not it: a batch of 32 measured {want:.3g} bytes. Activations grow in "
                    f"proportion to the micro-batch: about {per:.3g} bytes per sample here.")


q1 = Exercise(
    "3.1 q1: how many micro-batches?",
    _check_steps_for_batch,
    usage="q1.check(accumulation_steps)",
    hints=["One optimizer step sees micro-batch x processes x accumulation steps samples.",
           "64 / (8 x 2)."],
    solution_code="accumulation_steps = 64 // (8 * 2)\nq1.check(accumulation_steps)",
)
q2 = Exercise(
    "3.1 q2: one optimizer step from k micro-batches",
    _check_accumulate_fn,
    usage="q2.check(my_accumulated_step)",
    hints=["Loop over the micro-batches; for each, everything happens inside `with accelerator.accumulate(model):`.",
           "Inside: loss = model(**batch).loss; accelerator.backward(loss); optimizer.step(); optimizer.zero_grad(). "
           "Accelerate decides when the step really happens."],
    solution_code=(
        "def my_accumulated_step(model, micro_batches, optimizer, accelerator):\n"
        "    for batch in micro_batches:\n        with accelerator.accumulate(model):\n"
        "            loss = model(**batch).loss\n            accelerator.backward(loss)\n"
        "            optimizer.step()\n            optimizer.zero_grad()\n\nq2.check(my_accumulated_step)"
    ),
)
q3 = Exercise(
    "3.1 q3: activations of a bigger micro-batch",
    _check_bytes_for_32,
    usage="q3.check(bytes_for_32, bytes_per_sample)",
    hints=["Measured above: the activations of a micro-batch divided by its number of samples.",
           "Multiply the bytes per sample by 32."],
    solution_code="bytes_for_32 = 32 * bytes_per_sample\nq3.check(bytes_for_32, bytes_per_sample)",
)
