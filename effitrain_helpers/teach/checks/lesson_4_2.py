"""Exercises of lesson 4.2 (Adafactor: row and column statistics instead of a full second moment)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.measure.optimizer_memory import adafactor_second_moment_numel

SHAPES = [(768, 3072), (30522, 768), (128,), (4, 8, 16), (1, 5)]


def _check_numel_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    for shape in SHAPES:
        got = fn(shape)
        want = adafactor_second_moment_numel(shape)
        got = as_number(got)
        if got == want:
            continue
        if got == math.prod(shape):
            raise Incorrect(f"for shape {shape} you gave the full size {got}: that is what Adam keeps. Adafactor "
                            "keeps one value per row plus one per column for tensors with 2 or more dimensions."
                            if len(shape) >= 2 else f"for shape {shape}: got {got}, want {want}.")
        if len(shape) == 1:
            raise Incorrect(f"a vector of shape {shape} cannot be factored: Adafactor keeps all {want} values.")
        if len(shape) > 2:
            raise Incorrect(f"for shape {shape} you gave {got:.0f}, Adafactor keeps {want}: the leading dimensions "
                            "are kept (rows: shape[:-1], columns: shape[:-2] + shape[-1:]).")
        raise Incorrect(f"for shape {shape} you gave {got:.0f}; a ({shape[0]}, {shape[1]}) matrix has "
                        f"{shape[0]} rows and {shape[1]} columns.")


def _check_trainer_like(optimizer) -> None:
    try:
        from transformers import Adafactor
    except ImportError as err:  # pragma: no cover - transformers is a dependency
        raise Incorrect(f"transformers is needed here ({err}).")
    if not isinstance(optimizer, Adafactor):
        raise Incorrect(f"build a transformers.Adafactor; you gave {type(optimizer).__name__}.")
    group = optimizer.param_groups[0]
    if group["relative_step"] or group["scale_parameter"]:
        raise Incorrect("with relative_step=True or scale_parameter=True, Adafactor computes its own step size "
                        "and ignores yours; Trainer sets both to False.")
    if group["lr"] is None or not math.isclose(group["lr"], 1e-3):
        raise Incorrect(f"learning rate {group['lr']!r}: the exercise asks for lr=1e-3.")
    if group["beta1"] is not None:
        raise Incorrect("beta1 adds a full first moment (4 bytes per parameter): leave it at None, as Trainer does.")


def _check_beta1_bytes(answer) -> None:
    got = as_number(answer)
    weight = 4 * (64 + 256) + 4 * 64 * 256 + 4  # rows + columns, exp_avg, RMS
    bias = 4 * 64 + 4 * 64 + 4  # full exp_avg_sq, exp_avg, RMS
    want = weight + bias
    if math.isclose(got, want):
        return
    if math.isclose(got, want - 8):
        raise Incorrect("almost: each tensor also keeps `RMS`, a float32 0-d tensor (4 bytes).")
    if math.isclose(got, want - 4 * (64 * 256 + 64)):
        raise Incorrect("with beta1 set, Adafactor also keeps exp_avg, a full float32 copy of each parameter.")
    if math.isclose(got, 4 * 2 * (64 * 256 + 64) + 8):
        raise Incorrect("that is AdamW's count: the weight's second moment is still factored (rows + columns).")
    raise Incorrect(f"{got:.0f} bytes is not it. nn.Linear(256, 64) has weight (64, 256) and bias (64,); add "
                    "their second-moment statistics, exp_avg, and one RMS each, 4 bytes per value.")


q1 = Exercise(
    "4.2 q1: Adafactor's second moment for any shape",
    _check_numel_fn,
    usage="q1.check(second_moment_numel)",
    hints=["A vector (one dimension) keeps all its values.",
           "With 2 or more dimensions: math.prod(shape[:-1]) row values + math.prod(shape[:-2]) * shape[-1] column values."],
    solution_code=(
        "def second_moment_numel(shape):\n    if len(shape) < 2:\n        return shape[0]\n"
        "    return math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]\n\nq1.check(second_moment_numel)"),
)
q2 = Exercise(
    "4.2 q2: Adafactor as Trainer builds it",
    _check_trainer_like,
    usage="q2.check(my_adafactor)",
    hints=["Trainer(optim='adafactor') uses your learning rate as it is.",
           "Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)."],
    solution_code=("my_adafactor = Adafactor(torch.nn.Linear(8, 8).parameters(), lr=1e-3, scale_parameter=False,\n"
                   "                         relative_step=False, warmup_init=False)\nq2.check(my_adafactor)"),
)
q3 = Exercise(
    "4.2 q3: Adafactor with a first moment",
    _check_beta1_bytes,
    usage="q3.check(state_bytes_with_beta1)",
    hints=["nn.Linear(256, 64): weight (64, 256), bias (64,).",
           "Per tensor: second moment (factored for the weight), exp_avg (full, because beta1 is set), RMS (one float)."],
    solution_code=("weight = 4 * (64 + 256) + 4 * 64 * 256 + 4\nbias = 4 * 64 + 4 * 64 + 4\n"
                   "state_bytes_with_beta1 = weight + bias\nq3.check(state_bytes_with_beta1)"),
)
