"""Exercises of lesson 1.1 (prepare models with AutoModel and Accelerator)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number

_ORDER = ("data sharding", "model replication", "gradient aggregation", "parameter synchronization")
STEP_NAMES = tuple(sorted(_ORDER))  # alphabetical: the order is the exercise
_WHY = {
    0: "before anything else, each device must get its own slice of the batch",
    1: "a device can only compute gradients once it holds a copy of the model",
    2: "the gradients of all devices are combined before any weight changes",
    3: "the last step makes every copy hold the same updated weights",
}


def _close(answer: float, want: float) -> bool:
    """Equal up to 0.1 %, or to rounding at one decimal."""
    return math.isclose(answer, want, rel_tol=1e-3) or abs(answer - want) <= 0.05


def _check_head_width(answer, config) -> None:
    width = as_number(answer)
    dim, heads = config.hidden_size, config.num_attention_heads
    if _close(width, dim):
        raise Incorrect(f"{dim} is the whole token vector; each of the {heads} heads works on a slice of it.")
    if _close(width, heads):
        raise Incorrect("that is the number of heads, not the width of one head.")
    if not _close(width, dim / heads):
        raise Incorrect(f"{answer!r} is not the width of one attention head of this model: compare `dim` and `n_heads`.")


def _check_training_mib(answer, model) -> None:
    mib = as_number(answer)
    count = sum(p.numel() for p in model.parameters())
    per_param = {4: "only the weights", 8: "weights and gradients, but not AdamW's two moving averages",
                 12: "three of the four float32 copies"}
    if _close(mib, count * 16 / 2**20):
        return
    if _close(mib, count * 16 / 1e6):
        raise Incorrect("that is megabytes (10^6 bytes); a MiB is 2^20 = 1,048,576 bytes.")
    for size, what in per_param.items():
        if _close(mib, count * size / 2**20):
            raise Incorrect(f"that counts {what}: training keeps weights, gradients and two AdamW states.")
    if _close(mib, count * 16):
        raise Incorrect("that is bytes; divide by 2**20 for MiB.")
    raise Incorrect(f"{mib:.3f} MiB is not what training this model's {count:,} parameters keeps in float32.")


def _check_gflops_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself (no parentheses); you gave {fn!r}.")
    got = fn(1000, 1.0)
    if got is None:
        raise Incorrect("your function returns None: add a `return`.")
    if math.isclose(got, 2.0, rel_tol=1e-6):
        for n, t in ((512, 0.002), (64, 1e-5)):
            want = 2 * n**3 / t / 1e9
            if not math.isclose(fn(n, t), want, rel_tol=1e-6):
                raise Incorrect(f"right for n=1000, but for n={n}, t={t} s it gives {fn(n, t)!r} instead of {want:.4g}.")
        return
    if math.isclose(got, 1.0, rel_tol=1e-6):
        raise Incorrect("off by a factor of 2: each of the n^3 multiply-adds counts as 2 floating-point operations.")
    if math.isclose(got, 2e9, rel_tol=1e-6):
        raise Incorrect("that is FLOP/s; divide by 1e9 to get GFLOP/s.")
    raise Incorrect(f"for n=1000 and 1 s your function gives {got!r}; expected 2.0 GFLOP/s.")


def _check_steps(steps) -> None:
    if not isinstance(steps, (list, tuple)) or len(steps) != 4:
        raise Incorrect(f"give a list of the 4 step names; you gave {steps!r}.")
    norm = [str(s).strip().lower().replace("synchronisation", "synchronization") for s in steps]
    unknown = [s for s in norm if s not in _ORDER]
    if unknown:
        raise Incorrect(f"{unknown[0]!r} is not one of the four steps; use the names in `STEP_NAMES`.")
    if sorted(norm) != sorted(_ORDER):
        raise Incorrect("each step should appear exactly once.")
    wrong = next((i for i, (a, b) in enumerate(zip(norm, _ORDER)) if a != b), None)
    if wrong is not None:
        raise Incorrect(f"position {wrong + 1} is wrong: {_WHY[wrong]}.")


q1 = Exercise(
    "1.1 q1: width of one attention head",
    _check_head_width,
    usage="q1.check(head_width, model.config)",
    hints=[
        "Each attention head works on an equal slice of the token vector.",
        "Divide the width of the token vector (`hidden_size`) by the number of heads (`num_attention_heads`).",
    ],
    solution_code="head_width = model.config.hidden_size // model.config.num_attention_heads\n"
    "q1.check(head_width, model.config)",
)
q2 = Exercise(
    "1.1 q2: memory to train the model",
    _check_training_mib,
    usage="q2.check(train_mib, model)",
    hints=[
        "Training with AdamW in float32 keeps four numbers per parameter: the weight, its gradient and two moving averages.",
        "That is 4 x 4 = 16 bytes per parameter; count parameters with `p.numel()`; one MiB is 2**20 bytes.",
    ],
    solution_code="train_mib = sum(p.numel() for p in model.parameters()) * 16 / 2**20\nq2.check(train_mib, model)",
)
q3 = Exercise(
    "1.1 q3: GFLOP/s from a timing",
    _check_gflops_fn,
    usage="q3.check(my_gflops)",
    hints=[
        "An n x n by n x n product does n^3 multiply-adds.",
        "A multiply-add is 2 floating-point operations; 1 GFLOP is 1e9 of them.",
    ],
    solution_code="def my_gflops(n, seconds):\n    return 2 * n**3 / seconds / 1e9\n\nq3.check(my_gflops)",
)
q4 = Exercise(
    "1.1 q4: the four steps in order",
    _check_steps,
    usage="q4.check(steps)",
    hints=[
        "A device needs its data and its own copy of the model before it can compute anything.",
        "Gradients must be combined before the updated weights can be shared.",
    ],
    solution_code=(
        'steps = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]\n'
        "q4.check(steps)"
    ),
)
