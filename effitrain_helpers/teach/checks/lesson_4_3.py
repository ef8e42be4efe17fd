"""Exercises of lesson 4.3 (8-bit Adam: quantised states, block statistics, small tensors in 32 bits)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.measure.optimizer_memory import adamw8bit_tensor_bytes

NUMELS = [4096, 5000, 256 * 1000 + 1, 4095, 1, 768 * 3072]
Q2_SHAPES = {"0.weight": (64, 64), "0.bias": (64,), "1.weight": (4095, 1), "1.bias": (4095,), "2.weight": (10, 4095)}


def _check_tensor_bytes(fn) -> None:
    if not callable(fn):
        raise Incorrect(f"pass your function itself; you gave {fn!r}.")
    for n in NUMELS:
        got, want = as_number(fn(n)), adamw8bit_tensor_bytes(n)
        if got == want:
            continue
        if n < 4096:
            raise Incorrect(f"a tensor of {n} values is under min_8bit_size=4096: its two states stay float32 "
                            f"({want} bytes); you gave {got:.0f}.")
        if got == 2 * n:
            raise Incorrect(f"for {n} values you counted the uint8 states only; add the float32 absmax of each block "
                            "of 256 values, for each of the two states.")
        if got == 2 * n + 8 * (n // 256):
            raise Incorrect(f"for {n} values: a last, partial block needs its absmax too (round the number of "
                            "blocks up: math.ceil(n / 256)).")
        raise Incorrect(f"for {n} values bitsandbytes keeps {want} bytes; you gave {got:.0f}.")


def _check_32bit_names(answer) -> None:
    want = {name for name, shape in Q2_SHAPES.items() if math.prod(shape) < 4096}
    if isinstance(answer, str) or not hasattr(answer, "__iter__"):
        raise Incorrect(f"give a set of parameter names, e.g. {{'0.bias'}}; you gave {answer!r}.")
    got = set(answer)
    unknown = got - set(Q2_SHAPES)
    if unknown:
        raise Incorrect(f"{sorted(unknown)} are not parameter names of this model; names: {sorted(Q2_SHAPES)}.")
    if "0.weight" in got:
        raise Incorrect("0.weight has 64 x 64 = 4096 values: not under 4096, so its state is 8-bit.")
    if "2.weight" in got:
        raise Incorrect("2.weight has 10 x 4095 = 40950 values: the rule counts values, not the length of one side.")
    if got != want:
        raise Incorrect(f"missing: {sorted(want - got)}. A tensor keeps 32-bit state when it has fewer than 4096 values.")


def _check_8bit_args(args) -> None:
    try:
        from transformers import TrainingArguments
    except ImportError as err:  # pragma: no cover
        raise Incorrect(f"transformers is needed here ({err}).")
    if not isinstance(args, TrainingArguments):
        raise Incorrect(f"pass a TrainingArguments object; you gave {type(args).__name__}.")
    optim = str(getattr(args.optim, "value", args.optim))
    if optim not in ("adamw_bnb_8bit", "adamw_8bit"):
        raise Incorrect(f"optim={optim!r} does not ask Trainer for bitsandbytes' 8-bit AdamW: use optim='adamw_bnb_8bit'.")
    if not math.isclose(args.learning_rate, 1e-3):
        raise Incorrect(f"learning_rate={args.learning_rate}: the exercise asks for 1e-3.")
    if not math.isclose(args.weight_decay, 0.01):
        raise Incorrect(f"weight_decay={args.weight_decay}: the exercise asks for 0.01 (Trainer's default is 0).")


q1 = Exercise(
    "4.3 q1: 8-bit state bytes of one tensor",
    _check_tensor_bytes,
    usage="q1.check(adamw8bit_bytes)",
    hints=["Under 4096 values: two float32 states, 8 bytes per value.",
           "Otherwise: two uint8 states (2 bytes per value) + 2 float32 absmax per block: 2 * 4 * math.ceil(n / 256)."],
    solution_code=("def adamw8bit_bytes(n):\n    if n < 4096:\n        return 8 * n\n"
                   "    return 2 * n + 2 * 4 * math.ceil(n / 256)\n\nq1.check(adamw8bit_bytes)"),
)
q2 = Exercise(
    "4.3 q2: which tensors keep 32-bit state",
    _check_32bit_names,
    usage="q2.check(names_in_32_bit)",
    hints=["Compute the number of values of each shape in Q2_SHAPES.", "The rule is numel < 4096 (4096 itself is 8-bit)."],
    solution_code=("names_in_32_bit = {name for name, shape in Q2_SHAPES.items() if math.prod(shape) < 4096}\n"
                   "q2.check(names_in_32_bit)"),
)
q3 = Exercise(
    "4.3 q3: 8-bit AdamW through Trainer",
    _check_8bit_args,
    usage="q3.check(my_args)",
    hints=["TrainingArguments has an `optim` argument naming the optimizer.",
           "TrainingArguments(output_dir=..., optim='adamw_bnb_8bit', learning_rate=1e-3, weight_decay=0.01, "
           "use_cpu=True, report_to='none')."],
    solution_code=("my_args = TrainingArguments(output_dir=tempfile.mkdtemp(), optim='adamw_bnb_8bit', learning_rate=1e-3,\n"
                   "                            weight_decay=0.01, use_cpu=True, report_to='none')\nq3.check(my_args)"),
)
