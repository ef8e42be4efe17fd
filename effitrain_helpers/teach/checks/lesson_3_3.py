"""Exercises of lesson 3.3 (mixed precision)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number


def _check_bf16_gap(answer) -> None:
    import torch

    got = as_number(answer)
    want = torch.finfo(torch.bfloat16).eps
    if math.isclose(got, want, rel_tol=1e-6):
        return
    if math.isclose(got, torch.finfo(torch.float16).eps, rel_tol=1e-6):
        raise Incorrect("that is float16's gap: float16 has 10 mantissa bits, bfloat16 only 7.")
    if math.isclose(got, torch.finfo(torch.float32).eps, rel_tol=1e-6):
        raise Incorrect("that is float32's gap; bfloat16 keeps only 7 of float32's 23 mantissa bits.")
    raise Incorrect(f"{got:g} is not it: with m mantissa bits, the next number after 1 is 1 + 2**-m.")


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
        raise Incorrect(f"{got:g} works, but a smaller power of two already keeps 1e-8 from becoming 0.")
    if not (got > 0 and math.log2(got).is_integer()):
        raise Incorrect(f"{got!r} is not a power of two; GradScaler uses powers of two (exact to undo).")
    raise Incorrect(f"with S = {got:g}, 1e-8 x S still rounds to 0 in float16: try a larger power of two.")


def _check_autocast_fn(fn) -> None:
    import torch

    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 2)

    def model(inputs):
        return type("Out", (), {"logits": layer(inputs)})()

    batch = {"inputs": torch.randn(4, 16)}
    logits = fn(model, batch)
    if not isinstance(logits, torch.Tensor):
        raise Incorrect(f"return the logits tensor; you returned {type(logits).__name__}.")
    if logits.dtype != torch.bfloat16:
        raise Incorrect(f"the logits are {logits.dtype}: compute them inside "
                        "`with torch.autocast(device_type='cpu', dtype=torch.bfloat16):`.")
    want = layer(batch["inputs"])
    if not torch.allclose(logits.float(), want, atol=0.05):
        raise Incorrect("the logits are bfloat16 but far from the float32 ones: call model(**batch).logits.")


q1 = Exercise(
    "3.3 q1: bfloat16's precision",
    _check_bf16_gap,
    usage="q1.check(bf16_gap)",
    hints=["torch.finfo(dtype).eps is the gap between 1 and the next representable number.",
           "torch.finfo(torch.bfloat16).eps, or 2**-7 (7 mantissa bits)."],
    solution_code="bf16_gap = torch.finfo(torch.bfloat16).eps\nq1.check(bf16_gap)",
)
q2 = Exercise(
    "3.3 q2: a loss scale that saves a tiny gradient",
    _check_scale,
    usage="q2.check(scale)",
    hints=["Try torch.tensor(1e-8 * S, dtype=torch.float16) for S = 1, 2, 4, ...: when is it not 0?",
           "float16's smallest positive number is about 6e-8; values below half of it round to 0."],
    solution_code=("scale = 1\nwhile torch.tensor(1e-8 * scale, dtype=torch.float16).item() == 0:\n    scale *= 2\n"
                   "q2.check(scale)"),
)
q3 = Exercise(
    "3.3 q3: logits under autocast",
    _check_autocast_fn,
    usage="q3.check(bf16_logits)",
    hints=["torch.autocast(device_type='cpu', dtype=torch.bfloat16) is a context manager.",
           "def bf16_logits(model, batch):\n    with torch.autocast(device_type='cpu', dtype=torch.bfloat16):\n"
           "        return model(**batch).logits"],
    solution_code=("def bf16_logits(model, batch):\n    with torch.autocast(device_type='cpu', dtype=torch.bfloat16):\n"
                   "        return model(**batch).logits\n\nq3.check(bf16_logits)"),
)
