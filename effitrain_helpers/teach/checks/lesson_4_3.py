"""Exercises of lesson 4.3 (8-bit Adam: quantised states, block statistics, small tensors in 32 bits)."""

from __future__ import annotations

import math

from effitrain_helpers.measure.optimizer_memory import adamw8bit_state_bytes, adamw8bit_tensor_bytes, state_bytes
from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import NOT_ATTEMPTED, CheckResult, Exercise, Incorrect, as_number
from effitrain_helpers.training.optimizer_compare import bitsandbytes_status

NUMELS = [4096, 5000, 256 * 1000 + 1, 4095, 1, 768 * 3072]
Q2_SHAPES = {"0.weight": (64, 64), "0.bias": (64,), "1.weight": (4095, 1), "1.bias": (4095,), "2.weight": (10, 4095)}


def _check_tensor_bytes(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    for n in NUMELS:
        got, want = as_number(fn(n)), adamw8bit_tensor_bytes(n)
        if got == want:
            continue
        if n < 4096:
            raise Incorrect(tr("a tensor of {n} values is under min_8bit_size=4096: its two states stay float32 "
                               "({want} bytes); you gave {got:.0f}.", n=n, want=want, got=got))
        if got == 2 * n:
            raise Incorrect(tr("for {n} values you counted the uint8 states only; add the float32 absmax of each "
                               "block of 256 values, for each of the two states.", n=n))
        if got == 2 * n + 8 * (n // 256):
            raise Incorrect(tr("for {n} values: a last, partial block needs its absmax too (round the number of "
                               "blocks up: math.ceil(n / 256)).", n=n))
        raise Incorrect(tr("for {n} values bitsandbytes keeps {want} bytes; you gave {got:.0f}.", n=n, want=want,
                           got=got))


def _check_32bit_names(answer) -> None:
    want = {name for name, shape in Q2_SHAPES.items() if math.prod(shape) < 4096}
    if isinstance(answer, str) or not hasattr(answer, "__iter__"):
        raise Incorrect(tr("give a set of parameter names, e.g. {{'0.bias'}}; you gave {answer!r}.", answer=answer))
    got = set(answer)
    unknown = got - set(Q2_SHAPES)
    if unknown:
        raise Incorrect(tr("{unknown} are not parameter names of this model; names: {names}.",
                           unknown=sorted(unknown), names=sorted(Q2_SHAPES)))
    if "0.weight" in got:
        raise Incorrect(tr("0.weight has 64 x 64 = 4096 values: not under 4096, so its state is 8-bit."))
    if "2.weight" in got:
        raise Incorrect(tr("2.weight has 10 x 4095 = 40950 values: the rule counts values, not the length of one "
                           "side."))
    if got != want:
        raise Incorrect(tr("missing: {missing}. A tensor keeps 32-bit state when it has fewer than 4096 values.",
                           missing=sorted(want - got)))


def q3_layer():
    """The layer of exercise 3: nn.Linear(256, 64), a weight of 16,384 values and a bias of 64."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(256, 64)


def _check_adamw8bit(build_and_step) -> None:
    """Runs the learner's function on a fresh q3_layer and judges the optimizer it returns by its state."""
    import torch

    if not callable(build_and_step):
        raise Incorrect(tr("pass your function itself (adamw8bit_state, without calling it); you gave "
                           "{fn!r}.", fn=build_and_step))
    layer = q3_layer()
    answer = build_and_step(layer)
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Incorrect(tr("return two things, (optimizer, measured_bytes); you returned {kind}.",
                           kind=type(answer).__name__))
    optimizer, measured = answer
    if not hasattr(optimizer, "state") or not hasattr(optimizer, "param_groups"):
        raise Incorrect(tr("the first thing returned should be the optimizer; got {kind}.",
                           kind=type(optimizer).__name__))
    if not any(p is layer.weight for g in optimizer.param_groups for p in g["params"]):
        raise Incorrect(tr("the optimizer does not hold the layer's weight: build it on layer.parameters()."))
    state = optimizer.state.get(layer.weight, {})
    if not state:
        raise Incorrect(tr("the optimizer's state is empty: it is created at the first step; run a forward pass, "
                           "backward(), then optimizer.step()."))
    kept = state.get("state1", state.get("exp_avg"))
    if kept is None or kept.dtype != torch.uint8:
        dtype = getattr(kept, "dtype", "no state1")
        raise Incorrect(tr("the weight's first moment is {dtype}, not uint8: use bitsandbytes.optim.AdamW8bit "
                           "(its 16,384 values are over min_8bit_size, so their state is 8-bit).", dtype=dtype))
    if optimizer.state.get(layer.bias, {}).get("state1", torch.empty(0, dtype=torch.uint8)).dtype != torch.float32:
        raise Incorrect(tr("the bias (64 values) should keep float32 state: leave min_8bit_size at its default."))
    want = adamw8bit_state_bytes(layer)
    if state_bytes(optimizer) != want:
        raise Incorrect(tr("this optimizer keeps {have:,} bytes of state, the theory {want:,}: build it "
                           "with AdamW8bit's default settings.", have=state_bytes(optimizer), want=want))
    got = as_number(measured)
    if got != want:
        raise Incorrect(tr("measured_bytes={got:,.0f}, but the state holds {want:,} bytes: add the bytes of "
                           "every tensor in optimizer.state, the shared qmaps once (state_bytes does that).",
                           got=got, want=want))


class OptionalExercise(Exercise):
    """An exercise that needs bitsandbytes: where it cannot be imported, checking says so (Not attempted, with
    the reason) instead of judging."""

    def evaluate(self, *answers, **context) -> CheckResult:
        ok, why = bitsandbytes_status()
        if ok:
            return super().evaluate(*answers, **context)
        blanks_only = Exercise(self.name, lambda *_, **__: None, self.usage)  # finds ____ and bad calls only
        result = blanks_only.evaluate(*answers, **context)
        if result.status == NOT_ATTEMPTED:
            return result
        return CheckResult(self.name, NOT_ATTEMPTED, tr("not checked here: {why}", why=why))


def _check_8bit_args(args) -> None:
    try:
        from transformers import TrainingArguments
    except ImportError as err:  # pragma: no cover
        raise Incorrect(tr("transformers is needed here ({err}).", err=err))
    if not isinstance(args, TrainingArguments):
        raise Incorrect(tr("pass a TrainingArguments object; you gave {kind}.", kind=type(args).__name__))
    optim = str(getattr(args.optim, "value", args.optim))
    if optim not in ("adamw_bnb_8bit", "adamw_8bit"):
        raise Incorrect(tr("optim={optim!r} does not ask Trainer for bitsandbytes' 8-bit AdamW: use "
                           "optim='adamw_bnb_8bit'.", optim=optim))
    if not math.isclose(args.learning_rate, 1e-3):
        raise Incorrect(tr("learning_rate={learning_rate}: the exercise asks for 1e-3.",
                           learning_rate=args.learning_rate))
    if not math.isclose(args.weight_decay, 0.01):
        raise Incorrect(tr("weight_decay={weight_decay}: the exercise asks for 0.01 (Trainer's default is 0).",
                           weight_decay=args.weight_decay))


q1 = Exercise(
    "4.3 q1: 8-bit state bytes of one tensor",
    _check_tensor_bytes,
    usage="q1.check(adamw8bit_bytes)",
    hints=["Two cases: a small tensor keeps two float32 states; a large one keeps two uint8 states and, for each "
           "of them, one float32 absmax per block of 256 values (the last block may be partial).",
           "bitsandbytes/optim/optimizer.py, Optimizer2State.init_state: min_8bit_size decides the dtype (its "
           "default is in the signature of bitsandbytes.optim.AdamW8bit), and a partial last block counts as one.",
           "    if n < ____:\n"
           "        return ____ * n\n"
           "    return ____ * n + ____ * math.ceil(____)"],
    solution_code=("def adamw8bit_bytes(n):\n    if n < 4096:\n        return 8 * n\n"
                   "    return 2 * n + 2 * 4 * math.ceil(n / 256)\n\nq1.check(adamw8bit_bytes)"),
)
q2 = Exercise(
    "4.3 q2: which tensors keep 32-bit state",
    _check_32bit_names,
    usage="q2.check(names_in_32_bit)",
    hints=["The rule counts a tensor's values, not the length of one side: compare each shape's number of values "
           "with min_8bit_size.",
           "A shape's number of values is the product of its sides (Python's math module has a function for it); "
           "Optimizer2State.init_state compares p.numel() with min_8bit_size: read on which side a tensor of "
           "exactly min_8bit_size values falls.",
           "names_in_32_bit = {name for name, shape in Q2_SHAPES.items() if ____}"],
    solution_code=("print(Q2_SHAPES)\n"
                   "names_in_32_bit = {name for name, shape in Q2_SHAPES.items() if math.prod(shape) < 4096}\n"
                   "q2.check(names_in_32_bit)"),
)
q3 = OptionalExercise(
    "4.3 q3: AdamW8bit, built and measured",
    _check_adamw8bit,
    usage="q3.check(adamw8bit_state)",
    api=True,
    checked=("checked by its state after one step: uint8 moments for the weight, float32 for the bias, and your "
             "byte count."),
    hints=["Build the 8-bit optimizer on the layer's parameters, take one real training step (the state is "
           "created then), and add up the bytes of its state.",
           "bitsandbytes.optim has an 8-bit AdamW that takes the same arguments as torch.optim.AdamW "
           "(bitsandbytes documentation, Optimizers > AdamW: find its class name); state_bytes(optimizer) adds "
           "up optimizer.state.",
           "    optimizer = bnb.optim.____(layer.parameters(), lr=____)\n"
           "    layer(____).sum().____()\n"
           "    optimizer.____()\n"
           "    return optimizer, ____(____)"],
    solution_code=("def adamw8bit_state(layer):\n    import bitsandbytes as bnb\n\n"
                   "    optimizer = bnb.optim.AdamW8bit(layer.parameters(), lr=1e-3)\n"
                   "    layer(torch.randn(4, 256)).sum().backward()\n    optimizer.step()\n"
                   "    return optimizer, state_bytes(optimizer)\n\nq3.check(adamw8bit_state)"),
)
q4 = Exercise(
    "4.3 q4: 8-bit AdamW through Trainer",
    _check_8bit_args,
    usage="q4.check(my_args)",
    api=True,
    checked=("checked: the arguments ask Trainer for bitsandbytes' 8-bit AdamW with the exercise's settings."),
    hints=["TrainingArguments has an argument that names the optimizer Trainer builds; the learning rate and "
           "weight decay are arguments too.",
           "The names are listed in transformers.training_args.OptimizerNames; the bitsandbytes 8-bit AdamW is "
           "one of them. Also set output_dir, use_cpu=True and report_to='none'.",
           "TrainingArguments(output_dir=out.name, optim=____, learning_rate=____, "
           "weight_decay=____, use_cpu=True, report_to='none')"],
    solution_code=("my_args = TrainingArguments(output_dir=out.name, optim=\"adamw_bnb_8bit\",\n"
                   "                            learning_rate=1e-3, weight_decay=0.01, use_cpu=True,\n"
                   "                            report_to=\"none\")\n"
                   "q4.check(my_args)"),
)
