"""Exercises of lesson 1.1 (prepare models with AutoModel and Accelerator)."""

from __future__ import annotations

import math

from ..exercises import Exercise, Incorrect

FOUR_STEPS = ("data sharding", "model replication", "gradient aggregation", "parameter synchronization")


def _check_config(answer, config) -> None:
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Incorrect(f"answer should be a tuple (layers, width); you gave {answer!r}.")
    layers, width = answer
    want = (config.num_hidden_layers, config.hidden_size)
    if (layers, width) == want[::-1]:
        raise Incorrect("the two numbers are swapped: layers first, then the width of a token vector.")
    if layers != want[0]:
        raise Incorrect(f"{layers!r} is not the number of transformer blocks of this model: look at `n_layers`.")
    if width != want[1]:
        raise Incorrect(f"{width!r} is not the width of a token vector: look at `dim` (alias `hidden_size`).")


def _check_param_mib(answer, model) -> None:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Incorrect(f"answer should be a number of MiB; you gave {type(answer).__name__} {answer!r}.")
    count = sum(p.numel() for p in model.parameters())
    want = count * 4 / 2**20
    if math.isclose(answer, count * 4 / 1e6, rel_tol=0.01) and not math.isclose(answer, want, rel_tol=0.01):
        raise Incorrect("that is megabytes (10^6 bytes); a MiB is 2^20 = 1,048,576 bytes.")
    if math.isclose(answer, count / 2**20, rel_tol=0.01):
        raise Incorrect("you counted parameters, not bytes: each float32 parameter takes 4 bytes.")
    if math.isclose(answer, count * 2 / 2**20, rel_tol=0.01):
        raise Incorrect("that is the size in 16-bit precision; the model is stored in float32 (4 bytes each).")
    if not math.isclose(answer, want, rel_tol=0.01):
        raise Incorrect(f"{answer:.3f} MiB is not what this model's {count:,} float32 parameters take.")


def _check_gflops_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself (no parentheses); you gave {fn!r}.")
    got = fn(1000, 1.0)
    if got is None:
        raise Incorrect("your function returns None: add a `return`.")
    if math.isclose(got, 2.0, rel_tol=1e-6):
        for n, t, want in ((512, 0.002, 2 * 512**3 / 0.002 / 1e9), (64, 1e-5, 2 * 64**3 / 1e-5 / 1e9)):
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
    unknown = [s for s in norm if s not in FOUR_STEPS]
    if unknown:
        raise Incorrect(f"{unknown[0]!r} is not one of the four steps; use the names in `FOUR_STEPS`.")
    if sorted(norm) != sorted(FOUR_STEPS):
        raise Incorrect("each step should appear exactly once.")
    if norm != list(FOUR_STEPS):
        first_wrong = next(i for i, (a, b) in enumerate(zip(norm, FOUR_STEPS)) if a != b)
        raise Incorrect(f"position {first_wrong + 1} is wrong: what must exist before a device can compute gradients?")


q1 = Exercise(
    "1.1 q1: read the config",
    _check_config,
    hints=[
        "Everything about the architecture is in `model.config`; print it.",
        "DistilBERT names them `n_layers` and `dim`; every config also answers to `num_hidden_layers` and `hidden_size`.",
    ],
    solution_code="answer = (model.config.n_layers, model.config.dim)\nq1.check(answer, model.config)",
)
q2 = Exercise(
    "1.1 q2: the model's weight in memory",
    _check_param_mib,
    hints=[
        "Count the parameters with `p.numel()` over `model.parameters()`.",
        "A float32 number takes 4 bytes; one MiB is 2**20 bytes.",
    ],
    solution_code="param_mib = sum(p.numel() for p in model.parameters()) * 4 / 2**20\nq2.check(param_mib, model)",
)
q3 = Exercise(
    "1.1 q3: GFLOP/s from a timing",
    _check_gflops_fn,
    hints=[
        "An n x n by n x n product does n^3 multiply-adds.",
        "A multiply-add is 2 floating-point operations; 1 GFLOP is 1e9 of them.",
    ],
    solution_code="def my_gflops(n, seconds):\n    return 2 * n**3 / seconds / 1e9\n\nq3.check(my_gflops)",
)
q4 = Exercise(
    "1.1 q4: the four steps in order",
    _check_steps,
    hints=[
        "A device needs its data and its own copy of the model before it can compute anything.",
        "Gradients must be combined before the updated weights can be shared.",
    ],
    solution_code=(
        'steps = ["data sharding", "model replication", "gradient aggregation", "parameter synchronization"]\n'
        "q4.check(steps)"
    ),
)
