"""Exercises of lesson 4.3 (the three optimizers built for the comparison; 8-bit Adam: quantised states, block
statistics, small tensors in 32 bits)."""

from __future__ import annotations

import math

from effitrain_helpers.measure.optimizer_memory import adamw8bit_state_bytes, adamw8bit_tensor_bytes, state_bytes
from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import NOT_ATTEMPTED, CheckResult, Exercise, Incorrect, as_number
from effitrain_helpers.training.optimizer_compare import OPTIMIZER_NAMES, bitsandbytes_status, make_optimizer

Q1_RATES = (3e-3, 7e-4)  # exercise 1 builds at both (neither is the lesson's): a builder that ignores lr is caught
Q1_STEPS = 3
_BNB_8BIT_ADAMW = ("AdamW8bit", "PagedAdamW8bit")  # bitsandbytes' 8-bit AdamW, under its names


def q1_layer():
    """Exercise 1's model: nn.Linear(64, 64), a weight of exactly 4096 values (8-bit state under AdamW8bit) and a
    bias of 64 (32-bit state)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(64, 64)


def _after_steps(layer, optimizer) -> list:
    """The layer's weights after ``Q1_STEPS`` steps of ``optimizer`` on fixed random batches."""
    import torch

    batches = torch.Generator().manual_seed(1)
    for _ in range(Q1_STEPS):
        layer(torch.randn(8, 64, generator=batches)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach() for p in layer.parameters()]


def _check_8bit_kind(optimizer, kind: str) -> None:
    """For 'adamw8bit': bitsandbytes' AdamW with 8-bit states (AdamW8bit, its paged form, or AdamW(optim_bits=8))."""
    name = type(optimizer).__name__
    bits = getattr(getattr(optimizer, "args", None), "optim_bits", None)
    if name in _BNB_8BIT_ADAMW or (name in ("AdamW", "PagedAdamW") and kind.startswith("bitsandbytes") and bits == 8):
        return
    if name in ("AdamW", "PagedAdamW", "AdamW32bit"):
        raise Incorrect(tr("for 'adamw8bit' you built {kind}, whose states are 32-bit: the comparison measures "
                           "bitsandbytes' 8-bit AdamW.", kind=kind))
    if "Adam8bit" in name:
        raise Incorrect(tr("for 'adamw8bit' you built {kind}; the comparison's is bitsandbytes.optim.AdamW8bit "
                           "(bitsandbytes' Adam8bit defaults to weight_decay=0, AdamW8bit to 0.01).", kind=kind))
    raise Incorrect(tr("for 'adamw8bit' you built {kind}; the comparison's is bitsandbytes.optim.AdamW8bit.",
                       kind=kind))


def _check_kind(name: str, optimizer, want: type) -> None:
    """The optimizer built for ``name`` is the comparison's class ``want`` (that of the lesson's own, built by
    make_optimizer)."""
    import torch

    kind = f"{type(optimizer).__module__}.{type(optimizer).__name__}"
    if name == "adamw8bit":
        _check_8bit_kind(optimizer, kind)
        return
    if name == "adamw" and type(optimizer) is torch.optim.Adam:
        if optimizer.param_groups[0].get("decoupled_weight_decay"):
            raise Incorrect(tr("torch.optim.Adam with decoupled_weight_decay=True does AdamW's update, but the "
                               "comparison names torch.optim.AdamW: build that."))
        raise Incorrect(tr("for 'adamw' you built torch.optim.Adam: with weight_decay it adds the decay to the "
                           "gradient (L2), which Adam's moments then rescale; lesson 4.1's AdamW applies it to "
                           "the weights directly (decoupled)."))
    if name == "adafactor" and type(optimizer).__name__ == "Adafactor" and kind.startswith("torch."):
        raise Incorrect(tr("for 'adafactor' you built torch's own {kind}; its defaults and options differ from "
                           "transformers.Adafactor, the one lesson 4.2 and Trainer(optim='adafactor') use.",
                           kind=kind))
    if not isinstance(optimizer, want):
        raise Incorrect(tr("for {name!r} you built {kind}; the comparison's is {want}.", name=name, kind=kind,
                           want=f"{want.__module__}.{want.__name__}"))


def _build(build, name: str, layer, lr: float):
    """``build(name, layer.parameters(), lr)``, with the usual ways it fails named."""
    import torch

    try:
        optimizer = build(name, layer.parameters(), lr)
    except ValueError as err:
        if "Cannot combine manual" in str(err):
            raise Incorrect(tr("Adafactor refused the lr you passed: with relative_step=True (its default) it "
                               "computes its own step size from the step count. The comparison gives every "
                               "optimizer its rate and schedule: turn relative_step off.")) from None
        if "warmup_init" in str(err):
            raise Incorrect(tr("warmup_init=True works only with Adafactor's own step size (relative_step=True); "
                               "leave warmup_init at its default, False.")) from None
        if "empty parameter list" in str(err):
            raise Incorrect(tr("params is a generator (net.parameters()), and an optimizer built before the one "
                               "{name!r} asks for used it up: build only the optimizer the name asks for.",
                               name=name)) from None
        raise Incorrect(tr("build_optimizer({name!r}, params, lr) raised ValueError: {err}", name=name,
                           err=err)) from None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise Incorrect(tr("build_optimizer({name!r}, params, lr) returned {got!r}, not an optimizer: return "
                           "the one you build.", name=name, got=optimizer))
    if not any(p is layer.weight for group in optimizer.param_groups for p in group["params"]):
        raise Incorrect(tr("the {name!r} optimizer does not hold the parameters it was given: build it on "
                           "params.", name=name))
    return optimizer


def _check_settings(name: str, group: dict, lr: float) -> None:
    """The learning rate passed in, weight decay 0.01 and, for Adafactor, an external rate (no scaling)."""
    got = group.get("lr")
    if got is None or not math.isclose(got, lr):
        raise Incorrect(tr("the {name!r} optimizer has lr={lr!r}, but build_optimizer was called with another "
                           "rate: use the lr argument (the comparison gives each optimizer its rate).",
                           name=name, lr=got))
    decay = group.get("weight_decay", 0.0)
    if not math.isclose(decay, 0.01):
        if name == "adafactor":
            raise Incorrect(tr("the 'adafactor' optimizer has weight_decay={decay}: all three use 0.01 in the "
                               "comparison (transformers.Adafactor's default is 0.0: pass weight_decay=0.01).",
                               decay=decay))
        raise Incorrect(tr("the {name!r} optimizer has weight_decay={decay}: all three use 0.01 in the "
                           "comparison.", name=name, decay=decay))
    if name == "adafactor" and group.get("scale_parameter"):
        raise Incorrect(tr("Adafactor's scale_parameter=True (its default) multiplies the step size by the "
                           "parameter's root mean square (RMS, at least 1e-3), so lr is not the step size; "
                           "Trainer(optim='adafactor') and the lesson turn it off."))


def _check_unknown_name(build) -> None:
    """An unknown name is refused with a ValueError that names it."""
    bad = "sgd"
    try:
        got = build(bad, q1_layer().parameters(), Q1_RATES[0])
    except ValueError as err:
        if bad not in str(err):
            raise Incorrect(tr("build_optimizer({bad!r}, ...) raised ValueError, but its message does not name "
                               "{bad!r}: say which name was wrong and which are allowed.", bad=bad)) from None
        return
    except KeyError:
        raise Incorrect(tr("build_optimizer({bad!r}, ...) raised KeyError: a bare key says neither what was "
                           "wrong nor what is allowed; raise ValueError naming it and the three names.",
                           bad=bad)) from None
    raise Incorrect(tr("build_optimizer({bad!r}, ...) returned {got!r}: an unknown name should raise "
                       "ValueError naming it (a None would fail later, far from the mistake).", bad=bad, got=got))


def _check_builder(build) -> None:
    """Builds each optimizer with the learner's function and with the lesson's (make_optimizer) on the same
    layer, and compares class, settings, state kept and the weights after three steps; then an unknown name."""
    import torch

    if not callable(build):
        raise Incorrect(tr("pass your function itself (build_optimizer, without calling it); you gave "
                           "{fn!r}.", fn=build))
    code = getattr(build, "__code__", None)
    if code and "make_optimizer" in code.co_names + code.co_freevars:
        raise Incorrect(tr("build_optimizer calls the lesson's make_optimizer: write the three constructors "
                           "yourself."))
    names = [n for n in OPTIMIZER_NAMES if n != "adamw8bit" or bitsandbytes_status()[0]]
    for name in names:
        other = _build(build, name, q1_layer(), Q1_RATES[1])  # a second rate: lr must come from the argument
        _check_settings(name, other.param_groups[0], Q1_RATES[1])
        layer, reference = q1_layer(), q1_layer()
        optimizer = _build(build, name, layer, Q1_RATES[0])
        wanted = make_optimizer(name, reference.parameters(), Q1_RATES[0])
        _check_kind(name, optimizer, type(wanted))
        _check_settings(name, optimizer.param_groups[0], Q1_RATES[0])
        mine, want = _after_steps(layer, optimizer), _after_steps(reference, wanted)
        extra = set(optimizer.state[layer.weight]) - set(wanted.state[reference.weight])
        if name == "adafactor" and "exp_avg" in extra:
            raise Incorrect(tr("your 'adafactor' keeps exp_avg, a full first moment (beta1 is set): the "
                               "comparison's keeps none; leave beta1 at None."))
        gap = max((a - b).abs().max().item() for a, b in zip(mine, want))
        if extra or not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(mine, want)):
            raise Incorrect(tr("after {steps} steps on the same batches, your {name!r} optimizer differs from the "
                               "lesson's (weights by up to {gap:.2e}; extra state: {extra}): leave its other "
                               "settings at their defaults.", steps=Q1_STEPS, name=name, gap=gap,
                               extra=sorted(extra) or "none"))
    _check_unknown_name(build)


NUMELS = [4096, 5000, 256 * 1000 + 1, 4095, 1, 768 * 3072]
Q3_SHAPES = {"0.weight": (64, 64), "0.bias": (64,), "1.weight": (4095, 1), "1.bias": (4095,), "2.weight": (10, 4095)}


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
        if got == 8 * n:
            if n == 4096 and as_number(fn(2 * n)) != 16 * n:  # 8-bit above 4096: only the boundary is wrong
                raise Incorrect(tr("a tensor of exactly 4096 values is not under min_8bit_size=4096: its states "
                                   "are 8-bit (the 32-bit side is n < 4096); you counted two float32 states."))
            raise Incorrect(tr("for {n} values you counted two float32 states (8 bytes a value), the 32-bit "
                               "state of a small tensor: from min_8bit_size=4096 values on, each state is one "
                               "uint8 a value plus a float32 absmax per block of 256.", n=n))
        if got == n + 4 * math.ceil(n / 256):
            raise Incorrect(tr("for {n} values you counted one state; AdamW keeps two (exp_avg and exp_avg_sq), "
                               "each with its own uint8 values and absmax.", n=n))
        if got == 2 * n:
            raise Incorrect(tr("for {n} values you counted the uint8 states only; add the float32 absmax of each "
                               "block of 256 values, for each of the two states.", n=n))
        if got == 2 * n + 8 * (n // 256):
            raise Incorrect(tr("for {n} values: a last, partial block needs its absmax too (round the number of "
                               "blocks up: math.ceil(n / 256)).", n=n))
        raise Incorrect(tr("for {n} values bitsandbytes keeps {want} bytes; you gave {got:.0f}.", n=n, want=want,
                           got=got))


def _check_32bit_names(answer) -> None:
    want = {name for name, shape in Q3_SHAPES.items() if math.prod(shape) < 4096}
    if isinstance(answer, str) or not hasattr(answer, "__iter__"):
        raise Incorrect(tr("give a set of parameter names, e.g. {{'0.bias'}}; you gave {answer!r}.", answer=answer))
    got = set(answer)
    unknown = got - set(Q3_SHAPES)
    if unknown:
        raise Incorrect(tr("{unknown} are not parameter names of this model; names: {names}.",
                           unknown=sorted(unknown), names=sorted(Q3_SHAPES)))
    if "0.weight" in got:
        raise Incorrect(tr("0.weight has 64 x 64 = 4096 values: not under 4096, so its state is 8-bit."))
    if "2.weight" in got:
        raise Incorrect(tr("2.weight has 10 x 4095 = 40950 values: the rule counts values, not the length of one "
                           "side."))
    if got != want:
        raise Incorrect(tr("missing: {missing}. A tensor keeps 32-bit state when it has fewer than 4096 values.",
                           missing=sorted(want - got)))


def q4_layer():
    """The layer of exercise 4: nn.Linear(256, 64), a weight of 16,384 values and a bias of 64."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(256, 64)


def _check_adamw8bit(build_and_step) -> None:
    """Runs the learner's function on a fresh q4_layer and judges the optimizer it returns by its state."""
    import torch

    if not callable(build_and_step):
        raise Incorrect(tr("pass your function itself (adamw8bit_state, without calling it); you gave "
                           "{fn!r}.", fn=build_and_step))
    layer = q4_layer()
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
    rates = sorted({g.get("lr") for g in optimizer.param_groups})
    if rates != [1e-3]:
        raise Incorrect(tr("the optimizer's learning rate is {rates}: the exercise asks for 1e-3 (pass lr=).",
                           rates=rates))
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
    if optim not in ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit"):  # Trainer's names for it (paged or not)
        raise Incorrect(tr("optim={optim!r} does not ask Trainer for bitsandbytes' 8-bit AdamW: use "
                           "optim='adamw_bnb_8bit'.", optim=optim))
    if not math.isclose(args.learning_rate, 1e-3):
        raise Incorrect(tr("learning_rate={learning_rate}: the exercise asks for 1e-3.",
                           learning_rate=args.learning_rate))
    if not math.isclose(args.weight_decay, 0.01):
        raise Incorrect(tr("weight_decay={weight_decay}: the exercise asks for 0.01 (Trainer's default is 0).",
                           weight_decay=args.weight_decay))
    if not args.use_cpu:
        raise Incorrect(tr("use_cpu is left False: on a machine with a GPU this Trainer would train there; the "
                           "exercise asks for the CPU."))
    if args.report_to:
        raise Incorrect(tr("report_to={report_to}: the exercise reports to no tracker (report_to='none').",
                           report_to=args.report_to))


q1 = Exercise(
    "4.3 q1: build the three optimizers of the comparison",
    _check_builder,
    usage="q1.check(build_optimizer)",
    api=True,
    checked=("checked: each optimizer's class, learning rate and weight decay, and its weights after 3 steps equal "
             "to the lesson's (8-bit AdamW where bitsandbytes imports); an unknown name is refused by name."),
    hints=["One branch per name, each returning a new optimizer over params with the lr it is given and the "
           "comparison's weight decay; any other name is an error that says what was wrong and what is allowed.",
           "AdamW is torch's (lesson 4.1), Adafactor is transformers' (lesson 4.2), the 8-bit AdamW is in "
           "bitsandbytes.optim (the state table above built it). Adafactor takes its step size from the rate you "
           "pass only with two of its own options turned off: its docstring names them, and "
           "Trainer(optim=\"adafactor\") sets them.",
           "For 'adafactor', the Adafactor of lesson 4.2's exercise 2 with the rate given and the "
           "comparison's weight decay; for a name that is none of the three, raise ValueError with a message "
           "that names it and lists the three allowed."],
    solution_code=("def build_optimizer(name, params, lr):\n"
                   "    \"\"\"Chapter 4's three optimizers, each over params with learning rate lr.\"\"\"\n"
                   "    if name == \"adamw\":\n"
                   "        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)\n"
                   "    if name == \"adafactor\":  # stepping by the lr you pass\n"
                   "        return transformers.Adafactor(params, lr=lr, scale_parameter=False, relative_step=False,\n"
                   "                                      weight_decay=0.01)\n"
                   "    if name == \"adamw8bit\":\n"
                   "        import bitsandbytes as bnb\n\n"
                   "        return bnb.optim.AdamW8bit(params, lr=lr, weight_decay=0.01)\n"
                   "    raise ValueError(f\"unknown optimizer {name!r}: choose adamw, adafactor or adamw8bit\")\n\n"
                   "q1.check(build_optimizer)"),
)
q2 = Exercise(
    "4.3 q2: 8-bit state bytes of one tensor",
    _check_tensor_bytes,
    usage="q2.check(adamw8bit_bytes)",
    hints=["Two cases: a small tensor keeps two float32 states; a large one keeps two uint8 states and, for each "
           "of them, one float32 absmax per block of 256 values (the last block may be partial).",
           "bitsandbytes/optim/optimizer.py, Optimizer2State.init_state: min_8bit_size decides the dtype (its "
           "default is in the signature of bitsandbytes.optim.AdamW8bit), and a partial last block counts as one.",
           "Below min_8bit_size values: two float32 states of n values each. From it on: two states of one "
           "byte per value, plus for each state one float32 per block of 256 values, the last partial block "
           "counted as a whole one."],
    solution_code=("def adamw8bit_bytes(n):\n    if n < 4096:\n        return 8 * n\n"
                   "    return 2 * n + 2 * 4 * math.ceil(n / 256)\n\nq2.check(adamw8bit_bytes)"),
)
q3 = Exercise(
    "4.3 q3: which tensors keep 32-bit state",
    _check_32bit_names,
    usage="q3.check(names_in_32_bit)",
    hints=["The rule counts a tensor's values, not the length of one side: compare each shape's number of values "
           "with min_8bit_size.",
           "A shape's number of values is the product of its sides (Python's math module has a function for it); "
           "Optimizer2State.init_state compares p.numel() with min_8bit_size: read on which side a tensor of "
           "exactly min_8bit_size values falls.",
           "Build the set with a comprehension over Q3_SHAPES, keeping the names whose number of values falls"
           " on the 32-bit side of min_8bit_size (its value: hint 2's signature)."],
    solution_code=("print(Q3_SHAPES)\n"
                   "names_in_32_bit = {name for name, shape in Q3_SHAPES.items() if math.prod(shape) < 4096}\n"
                   "q3.check(names_in_32_bit)"),
)
q4 = OptionalExercise(
    "4.3 q4: AdamW8bit, built and measured",
    _check_adamw8bit,
    usage="q4.check(adamw8bit_state)",
    api=True,
    checked=("checked by its state after one step: uint8 moments for the weight, float32 for the bias, and your "
             "byte count."),
    hints=["Build the 8-bit optimizer on the layer's parameters, take one real training step (the state is "
           "created then), and add up the bytes of its state.",
           "bitsandbytes.optim has an 8-bit AdamW that takes the same arguments as torch.optim.AdamW "
           "(bitsandbytes documentation, Optimizers > AdamW: find its class name); state_bytes(optimizer) adds "
           "up optimizer.state.",
           "Build the 8-bit AdamW on the layer's parameters with the exercise's learning rate; run the layer "
           "on the random batch the exercise gives, backward from the sum of its outputs, one optimizer step;"
           " return the optimizer and what state_bytes counts."],
    solution_code=("def adamw8bit_state(layer):\n    import bitsandbytes as bnb\n\n"
                   "    optimizer = bnb.optim.AdamW8bit(layer.parameters(), lr=1e-3)\n"
                   "    layer(torch.randn(4, 256)).sum().backward()\n    optimizer.step()\n"
                   "    return optimizer, state_bytes(optimizer)\n\nq4.check(adamw8bit_state)"),
)
q5 = Exercise(
    "4.3 q5: 8-bit AdamW through Trainer",
    _check_8bit_args,
    usage="q5.check(my_args)",
    api=True,
    checked=("checked: the arguments ask Trainer for bitsandbytes' 8-bit AdamW with the exercise's settings."),
    hints=["TrainingArguments has an argument that names the optimizer Trainer builds; the learning rate and "
           "weight decay are arguments too.",
           "The names are listed in transformers.training_args.OptimizerNames; the bitsandbytes 8-bit AdamW is "
           "one of them. Also set output_dir, use_cpu=True and report_to='none'.",
           "One TrainingArguments call: the optimizer by its name from OptimizerNames, the exercise's "
           "learning rate and weight decay, and the three settings of hint 2."],
    solution_code=("my_args = TrainingArguments(output_dir=out.name, optim=\"adamw_bnb_8bit\",\n"
                   "                            learning_rate=1e-3, weight_decay=0.01, use_cpu=True,\n"
                   "                            report_to=\"none\")\n"
                   "q5.check(my_args)"),
)
