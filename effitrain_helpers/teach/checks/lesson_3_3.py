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
    if math.isclose(got, torch.finfo(torch.bfloat16).resolution, rel_tol=1e-6):
        raise Incorrect(tr("that is finfo's resolution, 10**-precision: the decimal digits bfloat16 keeps, rounded, "
                           "not the gap itself; the gap after 1 is another attribute of finfo."))
    if math.isclose(got, want / 2, rel_tol=1e-6):
        raise Incorrect(tr("that is 2**-8: bfloat16 stores 7 mantissa bits (the leading 1 is implicit and not "
                           "stored), so the next number after 1 is 1 + 2**-7."))
    raise Incorrect(tr("{got:,g} is not it: with m mantissa bits, the next number after 1 is 1 + 2**-m.", got=got))


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
        raise Incorrect(tr("{got:,g} works, but a smaller power of two already keeps 1e-8 from becoming 0.", got=got))
    if not (got > 0 and math.log2(got).is_integer()):
        raise Incorrect(tr("{got:,g} is not a power of two; GradScaler uses powers of two (exact to undo).", got=got))
    raise Incorrect(tr("with S = {got:,g}, 1e-8 x S still rounds to 0 in float16: try a larger power of two.",
                           got=got))


def _dtype_named_by_a_string(err: Exception) -> bool:
    """Whether ``err`` comes from a dtype's name given as a string: autocast's ``dtype='bfloat16'`` (a
    TypeError), or ``model.to('bfloat16')``, which takes the string for a device."""
    import re

    text = str(err)
    found = re.search(r"Invalid device string: '([^']*)'", text)
    return "must be torch.dtype, not str" in text or bool(found and re.search(r"16|float|half", found.group(1)))


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
    try:
        logits = fn(model, batch)
    except (RuntimeError, TypeError) as err:  # the two likeliest beginner errors, named instead of raised
        if layer.weight.dtype == torch.float32 and _dtype_named_by_a_string(err):
            raise Incorrect(tr("a dtype is a torch object, not its name in a string: write torch.bfloat16 (or "
                               "torch.float16), not 'bfloat16' ({error}: {message}).", error=type(err).__name__,
                               message=str(err).splitlines()[0])) from None
        if layer.weight.dtype == torch.float32:
            raise
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
    if logits.shape != reference.shape or not logits.is_floating_point():
        raise Incorrect(tr("you returned a {dtype} tensor of shape {shape}, not the logits ({rows} rows of {columns} "
                           "class scores, floating point): return model(**batch).logits itself, not a prediction "
                           "made from it.", dtype=logits.dtype, shape=tuple(logits.shape), rows=reference.shape[0],
                           columns=reference.shape[1]))
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
           "Start from the smallest scale and keep doubling it, testing each time whether 1e-8 times the "
           "scale survives as a float16 number; the first scale that survives is the answer."],
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
           "Pick the dtype from LOW, then run the model's forward pass inside autocast for DEVICE with that "
           "dtype and return its logits; the model itself stays in float32."],
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
           "Compute the loss inside autocast in float16 for the device of x, then the scaler's three calls of"
           " hint 2 in the order of hint 1 (the backward goes through the scaled loss), and clear the "
           "gradients last."],
    solution_code=("def fp16_step(model, optimizer, scaler, x):\n"
                   "    with torch.autocast(device_type=x.device.type, dtype=torch.float16):\n"
                   "        loss = model(x).sum()\n"
                   "    scaler.scale(loss).backward()\n"
                   "    scaler.step(optimizer)\n"
                   "    scaler.update()\n"
                   "    optimizer.zero_grad()\n\nq4.check(fp16_step)"),
)


BF16_BATCHES = 3  # batches of the checker's loader: a bf16 step is slow on a CPU without bf16 units, keep it tiny


def _watched_loader():
    """The checker's loader: a DataLoader that notes when it is iterated itself (``prepare`` builds a new loader
    on the same dataset, so a loop over the prepared one never iterates this object)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Watched(DataLoader):
        iterated = False

        def __iter__(self):
            self.iterated = True
            return super().__iter__()

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4 * BF16_BATCHES, 8, generator=generator),
                         torch.randn(4 * BF16_BATCHES, 1, generator=generator))
    return Watched(data, batch_size=4)


def _bf16_run(fn) -> dict:
    """Run ``fn(model, optimizer, loader)`` on a fresh two-layer model with a clean Accelerate state (the notebook's
    own state is put back afterwards) and record what happened: the Accelerator's precision and device, the
    dtype the first layer computed in, what went to ``prepare``, the ``accelerator.backward`` calls, whether the
    original loader was iterated, and the final weights."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = _watched_loader()
    dtypes, prepared, backwards = [], [], []
    model[0].register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    original_prepare, original_backward = Accelerator.prepare, Accelerator.backward

    def prepare(self, *args, **kwargs):
        prepared.extend(id(a) for a in args)
        return original_prepare(self, *args, **kwargs)

    def backward(self, loss, **kwargs):
        backwards.append(1)
        return original_backward(self, loss, **kwargs)

    saved = dict(AcceleratorState._shared_state)  # the notebook's Accelerator (a process keeps one precision)
    AcceleratorState._shared_state.clear()
    Accelerator.prepare, Accelerator.backward = prepare, backward
    try:
        fn(model, optimizer, loader)
        state = dict(AcceleratorState._shared_state)
    finally:
        Accelerator.prepare, Accelerator.backward = original_prepare, original_backward
        AcceleratorState._shared_state.clear()
        AcceleratorState._shared_state.update(saved)
    return {"precision": state.get("_mixed_precision"), "device": getattr(state.get("device"), "type", None),
            "dtypes": dtypes, "backwards": len(backwards), "loader_iterated": loader.iterated,
            "prepared": {name: id(part) in prepared for name, part in
                         (("model", model), ("optimizer", optimizer), ("loader", loader))},
            "weights": [p.detach().cpu().float().clone() for p in model.parameters()]}


def _reference_bf16_training(model, optimizer, loader):
    """The lesson's bfloat16 loop with Accelerate (the checker's reference)."""
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def _check_bf16_training(fn) -> None:
    import torch

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    got = _bf16_run(fn)
    if got["precision"] is None:
        raise Incorrect(tr("your function never created an Accelerator: start with "
                           "accelerator = Accelerator(mixed_precision=...)."))
    if got["precision"] == "fp16" and got["device"] == "cpu":
        raise Incorrect(tr("mixed_precision='fp16' on a CPU: Accelerate turns autocast on for fp16 only on a GPU "
                           "(with a GradScaler), so here the layers ran in {dtype}, as in fp32; ask for 'bf16'.",
                           dtype=got["dtypes"][0] if got["dtypes"] else torch.float32))
    if got["precision"] != "bf16":
        raise Incorrect(tr("the Accelerator's mixed precision is {precision!r}: pass mixed_precision='bf16' when "
                           "you create it.", precision=got["precision"]))
    if not got["prepared"]["model"] or (got["dtypes"] and got["dtypes"][0] != torch.bfloat16):
        raise Incorrect(tr("the model's layers ran in {dtype}: the Accelerator's bf16 reaches the model only "
                           "through accelerator.prepare(model, ...), which wraps its forward in autocast; use "
                           "the model prepare returns.", dtype=got["dtypes"][0] if got["dtypes"] else "no pass"))
    if got["loader_iterated"] or not got["prepared"]["loader"]:
        raise Incorrect(tr("your loop went over the loader you were given: pass it to accelerator.prepare too "
                           "and loop over the one it returns (it moves batches to the device and, in several "
                           "processes, gives each its share)."))
    if got["backwards"] == 0:
        raise Incorrect(tr("the loss never went through accelerator.backward(loss); loss.backward() skips what "
                           "Accelerate adds (loss scaling in fp16, gradient accumulation)."))
    want = _bf16_run(_reference_bf16_training)
    if got["backwards"] != BF16_BATCHES or not all(
            torch.allclose(a, b, atol=1e-6) for a, b in zip(got["weights"], want["weights"])):
        raise Incorrect(tr("the weights differ from one bf16 epoch's ({batches} batches): one backward, one "
                           "optimizer.step() and one optimizer.zero_grad() per batch.", batches=BF16_BATCHES))


q5 = Exercise(
    "3.3 q5: a bfloat16 training loop with Accelerate",
    _check_bf16_training,
    usage="q5.check(bf16_training)",
    api=True,
    checked=("checked: an Accelerator in bf16, the model, optimizer and loader prepared, the layers run in "
             "bfloat16, accelerator.backward used, weights equal to a reference bf16 epoch."),
    hints=["The precision is an argument of the Accelerator itself, not of the loop; the loop is lesson 2.2's, "
           "with the parts that came back from prepare.",
           "Accelerate's docs ('Accelerator', the mixed_precision argument) list the values it takes; the "
           "'Accelerator(mixed_precision=...)' cell above uses one. Of the two 16-bit values, only one turns "
           "autocast on for a CPU.",
           "Create the Accelerator with the CPU's 16-bit value, prepare the model, the optimizer and the "
           "loader, and for each (x, y) of the prepared loader: the mean squared error of the model's output,"
           " its backward through the accelerator, the step and zero_grad."],
    solution_code=("def bf16_training(model, optimizer, loader):\n"
                   "    accelerator = Accelerator(mixed_precision=\"bf16\")\n"
                   "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
                   "    for x, y in loader:\n"
                   "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
                   "        accelerator.backward(loss)\n"
                   "        optimizer.step()\n"
                   "        optimizer.zero_grad()\n\nq5.check(bf16_training)"),
)
