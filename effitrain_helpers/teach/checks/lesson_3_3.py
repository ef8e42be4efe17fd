"""Exercises of lesson 3.3 (mixed precision)."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number


def _check_bf16_gap(answer) -> None:
    import torch

    got = as_number(answer)
    want = torch.finfo(torch.bfloat16).eps
    if math.isclose(got, want, rel_tol=1e-6):
        return
    if math.isclose(got, torch.finfo(torch.float16).eps, rel_tol=1e-6):
        raise Incorrect(tr("that is float16's gap: float16 has 10 mantissa bits, bfloat16 only 7."))
    if math.isclose(got, torch.finfo(torch.float32).eps, rel_tol=1e-6):
        raise Incorrect(tr("that is float32's gap; bfloat16 keeps only 7 of float32's 23 mantissa bits."))
    raise Incorrect(tr("{got:g} is not it: with m mantissa bits, the next number after 1 is 1 + 2**-m.", got=got))


def smallest_surviving_scale(gradient: float = 1e-8) -> int:
    """The smallest power of two S for which ``gradient * S`` is not flushed to zero in float16."""
    import torch

    scale = 1
    while torch.tensor(gradient * scale, dtype=torch.float16).item() == 0:
        scale *= 2
    return scale


def _check_scale(answer) -> None:
    got = as_number(answer)
    want = smallest_surviving_scale()
    if got == want:
        return
    if got > want and math.log2(got).is_integer():
        raise Incorrect(tr("{got:g} works, but a smaller power of two already keeps 1e-8 from becoming 0.", got=got))
    if not (got > 0 and math.log2(got).is_integer()):
        raise Incorrect(tr("{got!r} is not a power of two; GradScaler uses powers of two (exact to undo).", got=got))
    raise Incorrect(tr("with S = {got:g}, 1e-8 x S still rounds to 0 in float16: try a larger power of two.",
                           got=got))


def _check_low_precision_forward(fn) -> None:
    import torch

    from effitrain_helpers.training.precision import TORCH_NAME, low_precision

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    want = getattr(torch, TORCH_NAME[low_precision(device)])
    class Classifier(torch.nn.Module):  # answers model(**batch).logits like a Hugging Face model
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 2)

        def forward(self, inputs):
            return type("Out", (), {"logits": self.linear(inputs)})()

    torch.manual_seed(0)
    model = Classifier().to(device)
    layer, seen = model.linear, []
    layer.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    batch = {"inputs": torch.randn(4, 16, device=device)}
    with torch.no_grad():
        reference = torch.nn.functional.linear(batch["inputs"], layer.weight, layer.bias)
    logits = fn(model, batch)
    if layer.weight.dtype != torch.float32:
        raise Incorrect(tr("the weights became {dtype}: mixed precision keeps float32 weights; let autocast make "
                           "16-bit copies for the matrix products instead of converting the model.",
                           dtype=layer.weight.dtype))
    if not isinstance(logits, torch.Tensor):
        raise Incorrect(tr("return the logits tensor; you returned {kind}.", kind=type(logits).__name__))
    if seen and seen[-1] == torch.float32:
        raise Incorrect(tr("the matrix product ran in float32: run the forward pass inside torch.autocast(...)."))
    if seen and device == "cpu" and seen[-1] == torch.float16:
        raise Incorrect(tr("the matrix product ran in float16 on a CPU: float16's narrow range needs a GradScaler to "
                           "keep small gradients from becoming 0, and a CPU's autocast type is {want}; pass "
                           "dtype={want}.", want=want))
    if seen and seen[-1] != want:
        raise Incorrect(tr("the matrix product ran in {got}, but the type this hardware ({device}) runs is {want}: "
                           "pass dtype={want}.", got=seen[-1], device=device, want=want))
    if not torch.allclose(logits.float(), reference, atol=0.05):
        raise Incorrect(tr("the logits are {dtype} but far from the float32 ones: return model(**batch).logits.",
                           dtype=logits.dtype))


q1 = Exercise(
    "3.3 q1: bfloat16's precision",
    _check_bf16_gap,
    usage="q1.check(bf16_gap)",
    hints=["The gap after 1.0 is set by the mantissa: with m stored mantissa bits, the next number is 1 + 2**-m. "
           "The figure above shows bfloat16's m.",
           "PyTorch describes each floating-point type with an object (PyTorch docs, 'Type Info'); one of its "
           "attributes is exactly this gap.",
           "Print that object for torch.float32 and find, among its attributes, the value of the float32 row "
           "of the table above; then ask the same of the type the question names."],
    solution_code="bf16_gap = torch.finfo(torch.bfloat16).eps\nq1.check(bf16_gap)",
)
q2 = Exercise(
    "3.3 q2: a loss scale that saves a tiny gradient",
    _check_scale,
    usage="q2.check(scale)",
    hints=["Try torch.tensor(1e-8 * S, dtype=torch.float16) for S = 1, 2, 4, ...: when is it not 0?",
           "float16's smallest positive number is about 6e-8; values below half of it round to 0. A while loop "
           "that doubles S until the float16 value is not 0 finds the smallest; a one-value tensor's Python "
           "number comes from one of its methods.",
           "Start the scale at 1, then:\n"
           "while torch.tensor(1e-8 * scale, dtype=____).____() == ____:\n"
           "    scale *= ____"],
    solution_code=("scale = 1\nwhile torch.tensor(1e-8 * scale, dtype=torch.float16).item() == 0:\n    scale *= 2\n"
                   "q2.check(scale)"),
)
q3 = Exercise(
    "3.3 q3: a forward pass in this hardware's 16-bit type",
    _check_low_precision_forward,
    usage="q3.check(low_precision_logits)",
    api=True,
    checked=("checked: float32 weights, the matrix product in this hardware's 16-bit type, and logits close to "
             "float32's."),
    hints=["Keep the model in float32 and let a context manager run its matrix products in 16 bits; which 16 "
           "bits depends on the hardware (LOW above: 'bf16' or 'fp16').",
           "PyTorch's automatic mixed precision has a context manager that takes a device type and a dtype "
           "(PyTorch docs, 'Automatic Mixed Precision package'); the types are torch.bfloat16 and torch.float16; "
           "DEVICE above is the device type.",
           "dtype = torch.bfloat16 if LOW == ____ else ____\n"
           "with torch.____(device_type=____, dtype=____):\n"
           "    return ____"],
    solution_code=("def low_precision_logits(model, batch):\n"
                   "    dtype = torch.bfloat16 if LOW == \"bf16\" else torch.float16\n"
                   "    with torch.autocast(device_type=DEVICE, dtype=dtype):\n"
                   "        return model(**batch).logits\n\nq3.check(low_precision_logits)"),
)


INIT_SCALE = 2.0**10  # the checker's initial loss scale (2**16, GradScaler's default, overflows x = 1 here)


def _scaled_run(step, device: str, batches: list) -> dict:
    """Run ``step(model, optimizer, scaler, x)`` once per batch on a fresh 4-to-1 layer with a float16 scaler
    (initial scale ``INIT_SCALE``) and record what happened: the methods of the scaler it called, the dtype the layer
    computed in, the weight change of each step, the scale after each step, and an error, if one was raised."""
    import torch

    from effitrain_helpers.teach.exercises import Spy

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = Spy(torch.amp.GradScaler(device, init_scale=INIT_SCALE), ("scale", "step", "update"))
    dtypes, changes, scales, error = [], [], [], None
    model.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    for x in batches:
        before = model.weight.detach().clone()
        try:
            step(model, optimizer, scaler, x)
        except (AssertionError, RuntimeError) as exc:  # GradScaler's own complaints about the call order
            error = str(exc)
            break
        changes.append((model.weight.detach() - before).abs().max().item())
        scales.append(scaler.get_scale())
    return {"calls": set(scaler.calls), "dtypes": dtypes, "changes": changes, "scales": scales, "error": error,
            "finite": bool(torch.isfinite(model.weight).all())}


def _reference_fp16_step(model, optimizer, scaler, x) -> None:
    """One float16 step with loss scaling, the way the lesson teaches it (the checker's reference)."""
    import torch

    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


def _check_fp16_step(fn) -> None:
    import math

    import torch

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ones, bad = torch.ones(2, 4, device=device), torch.full((2, 4), float("inf"), device=device)
    batches = [ones, bad, ones]
    want, got = _scaled_run(_reference_fp16_step, device, batches), _scaled_run(fn, device, batches)
    if got["error"] and "No inf checks" in got["error"]:
        raise Incorrect(tr("scaler.update() found no step to judge: call scaler.step(optimizer), not "
                           "optimizer.step(), so the scaler unscales the gradients and skips a step with inf."))
    if got["dtypes"] and got["dtypes"][0] != torch.float16:
        raise Incorrect(tr("the layer computed in {dtype}: run the forward pass and the loss inside "
                           "torch.autocast(device_type=x.device.type, dtype=torch.float16).",
                           dtype=got["dtypes"][0]))
    if "scale" not in got["calls"] and "step" not in got["calls"]:
        raise Incorrect(tr("your step never used the scaler: float16 without loss scaling lets small gradients "
                           "become 0 and an inf gradient reach the weights (here they are {state}).",
                           state=tr("finite") if got["finite"] else tr("inf or nan")))
    if "scale" not in got["calls"]:
        raise Incorrect(tr("loss.backward() ran on the unscaled loss: the scaler has no scale to undo and small "
                           "gradients can become 0 in float16; call backward on scaler.scale(loss)."))
    if got["error"] and "already been called since the last update" in got["error"]:
        raise Incorrect(tr("the second scaler.step(optimizer) refused to run: call scaler.update() after each "
                           "step, so the scale adapts (a skipped step halves it)."))
    if not got["finite"]:
        raise Incorrect(tr("the inf batch reached the weights: optimizer.step() ran on the scaled gradients; "
                           "let scaler.step(optimizer) unscale them and skip that step."))
    for number, (g, w) in enumerate(zip(got["changes"], want["changes"]), start=1):
        if not math.isclose(g, w, rel_tol=1e-3, abs_tol=1e-9):
            raise Incorrect(tr("at step {number} the weights moved differently from a scaled step's: zero the "
                               "gradients after each step and step once per batch.", number=number))


q4 = Exercise(
    "3.3 q4: a float16 step with loss scaling",
    _check_fp16_step,
    usage="q4.check(fp16_step)",
    api=True,
    checked=("checked: float16 forward, scaled backward, a batch of inf skipped (weights unchanged) and the "
             "scale halved, other steps equal to a reference scaled step."),
    hints=["Multiply the loss by the scale before backward, let the scaler take the optimizer's step (it "
           "unscales and skips a step whose gradients hold inf or nan), then let it adjust the scale.",
           "torch.amp.GradScaler has one method for each of those three jobs (PyTorch docs, 'Automatic Mixed "
           "Precision package', 'Gradient Scaling'); the loss-scaling cell of this lesson calls them.",
           "with torch.autocast(device_type=____, dtype=____):\n"
           "    loss = ____\n"
           "# backward, on the loss the scaler made larger\n"
           "# then the scaler's own step and its scale update, and zero the gradients"],
    solution_code=("def fp16_step(model, optimizer, scaler, x):\n"
                   "    with torch.autocast(device_type=x.device.type, dtype=torch.float16):\n"
                   "        loss = model(x).sum()\n"
                   "    scaler.scale(loss).backward()\n"
                   "    scaler.step(optimizer)\n"
                   "    scaler.update()\n"
                   "    optimizer.zero_grad()\n\nq4.check(fp16_step)"),
)
