"""Exercises of lesson 4.2 (Adafactor: row and column means instead of a full second moment; its state bytes)."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.measure.optimizer_memory import (adafactor_second_moment_numel, adamw_state_bytes,
                                                        state_bytes)

SHAPES = [(768, 3072), (30522, 768), (128,), (4, 8, 16), (1, 5)]


def _check_numel_fn(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    for shape in SHAPES:
        got = fn(shape)
        want = adafactor_second_moment_numel(shape)
        got = as_number(got)
        if got == want:
            continue
        if got == math.prod(shape):
            if len(shape) >= 2:
                raise Incorrect(tr("for shape {shape} you gave the full size {got}: that is what Adam keeps. "
                                   "Adafactor keeps one value per row plus one per column for tensors with 2 or "
                                   "more dimensions.", shape=shape, got=got))
            raise Incorrect(tr("for shape {shape}: got {got}, want {want}.", shape=shape, got=got, want=want))
        if len(shape) == 1:
            raise Incorrect(tr("a vector of shape {shape} cannot be factored: Adafactor keeps all {want} values.",
                               shape=shape, want=want))
        if len(shape) > 2:
            raise Incorrect(tr("for shape {shape} you gave {got:.0f}, Adafactor keeps {want}: the leading "
                               "dimensions are kept (rows: shape[:-1], columns: shape[:-2] + shape[-1:]).",
                               shape=shape, got=got, want=want))
        raise Incorrect(tr("for shape {shape} you gave {got:.0f}; a ({rows}, {columns}) matrix has {rows} "
                           "rows and {columns} columns.", shape=shape, got=got, rows=shape[0], columns=shape[1]))


Q2_LR = 1e-3  # q2's learning rate


def _adafactor_steps(make, steps: int = 3):
    """``steps`` steps of ``make(params)`` on a fresh Linear(16, 8) with fixed gradients: (optimizer, layer)."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    optimizer = make(layer.parameters())
    generator = torch.Generator().manual_seed(2)
    for _ in range(steps):
        for p in layer.parameters():
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()
    return optimizer, layer


def _check_make_adafactor(make_adafactor) -> None:
    """Judged by behaviour: three steps must move the weights exactly as Trainer's Adafactor (lr=1e-3, no
    relative step, no parameter scaling, no first moment) does, with a factored state for the matrix."""
    import torch

    try:
        from transformers import Adafactor
    except ImportError as err:  # pragma: no cover - transformers is a dependency
        raise Incorrect(tr("transformers is needed here ({err}).", err=err))
    if not callable(make_adafactor):
        raise Incorrect(tr("pass your function itself (make_adafactor, without calling it); you gave "
                           "{fn!r}.", fn=make_adafactor))
    try:
        optimizer, layer = _adafactor_steps(make_adafactor)
    except ValueError as err:
        if "relative_step" not in str(err):
            raise
        raise Incorrect(tr("Adafactor refused a learning rate with relative_step=True (its default): a relative "
                           "step means Adafactor picks the rate itself, so turn relative_step off to give lr."))
    if not isinstance(optimizer, Adafactor):
        raise Incorrect(tr("build a transformers.Adafactor; make_adafactor returned {kind}.",
                           kind=type(optimizer).__name__))
    _, reference = _adafactor_steps(lambda ps: Adafactor(ps, lr=Q2_LR, scale_parameter=False,
                                                         relative_step=False, warmup_init=False))
    if all(torch.allclose(a, b, rtol=1e-5, atol=1e-8) for a, b in zip(layer.parameters(), reference.parameters())):
        return
    group = optimizer.param_groups[0]
    if group["relative_step"] or group["scale_parameter"]:
        raise Incorrect(tr("the weights moved by a step size Adafactor chose itself: with relative_step=True or "
                           "scale_parameter=True it ignores (or rescales) your lr; Trainer sets both to False."))
    if "exp_avg" in optimizer.state[layer.weight]:
        raise Incorrect(tr("your optimizer keeps exp_avg, a full first moment (4 bytes per parameter): leave "
                           "beta1 at None, as Trainer does."))
    if group["lr"] != Q2_LR:
        raise Incorrect(tr("the weights moved by a step of lr={lr!r}; the exercise asks for lr={want}.",
                           lr=group['lr'], want=Q2_LR))
    raise Incorrect(tr("after three steps your weights differ from those of Trainer's Adafactor (lr=1e-3, "
                       "scale_parameter=False, relative_step=False, warmup_init=False, other settings at their "
                       "defaults)."))


Q3_LR, Q3_BETA1 = 1e-3, 0.9  # q3's settings (the bytes do not depend on them, only on beta1 being set)


def q3_model():
    """The model of exercise 3: nn.Linear(256, 64), a (64, 256) weight and a (64,) bias."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(256, 64)


def _frozen_model():
    """A model of the checker's own with a frozen part: its embedding has requires_grad False."""
    import torch

    torch.manual_seed(1)
    model = torch.nn.ModuleDict({"embedding": torch.nn.Embedding(200, 16), "linear": torch.nn.Linear(16, 8)})
    model["embedding"].requires_grad_(False)
    return model


def _conv_model():
    """A model of the checker's own with another shape: a Conv1d's 3-D weight (8, 4, 3) and a LayerNorm."""
    import torch

    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3), torch.nn.LayerNorm(8))


CHECK_MODELS = (q3_model, _frozen_model, _conv_model)


def _real_adafactor(model, beta1=Q3_BETA1, frozen_too: bool = False):
    """A real transformers.Adafactor over the model's trainable parameters (all of them with ``frozen_too``),
    after one step with zero gradients."""
    import torch
    from transformers import Adafactor

    params = [p for p in model.parameters() if p.requires_grad or frozen_too]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer = Adafactor(params, lr=Q3_LR, beta1=beta1, scale_parameter=False, relative_step=False,
                          warmup_init=False)
    optimizer.step()
    return optimizer


def _adafactor_truth(make) -> dict[str, int]:
    """What a real Adafactor with beta1 keeps for ``make()``'s model, and what the common slips give instead."""
    import torch

    optimizer = _real_adafactor(make())
    tensors = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    trainable = [p for p in make().parameters() if p.requires_grad]
    rms = sum(s["RMS"].numel() * s["RMS"].element_size() for s in optimizer.state.values())
    truth = state_bytes(optimizer)
    return {"truth": truth, "no_rms": truth - rms,
            "adamw": adamw_state_bytes(trainable, step_bytes=0), "adamw_step": adamw_state_bytes(trainable),
            "no_beta1": state_bytes(_real_adafactor(make(), beta1=None)),
            "frozen": state_bytes(_real_adafactor(make(), frozen_too=True)),
            "values": sum(t.numel() for t in tensors)}


_NAMED = [("adamw", msg("that is AdamW's count, two full copies of the parameters: Adafactor factors the second "
                        "moment of a matrix (rows + columns), and only exp_avg is a full copy.")),
          ("adamw_step", msg("that is AdamW's count, two full copies of the parameters: Adafactor factors the "
                             "second moment of a matrix (rows + columns), and only exp_avg is a full copy.")),
          ("no_beta1", msg("there is no exp_avg in that count: set beta1 (the exercise's Q3_BETA1) when you "
                           "build Adafactor, or it keeps no first moment.")),
          ("frozen", msg("that counts the frozen parameters too: those with requires_grad False get no "
                         "gradient and no state; build Adafactor over the trainable parameters only.")),
          ("values", msg("count bytes, not values: multiply each tensor's numel() by its element_size().")),
          ("no_rms", msg("close: RMS is in the state too, a 0-d tensor per parameter; count every tensor in "
                         "optimizer.state."))]


def _check_adafactor_state_bytes(fn) -> None:
    if not callable(fn):
        raise Incorrect(tr("pass your function itself (adafactor_state_bytes, without calling it); you gave "
                           "{fn!r}.", fn=fn))
    answers = []
    for make in CHECK_MODELS:
        try:
            answers.append(as_number(fn(make())))
        except AttributeError as err:
            if "'int' object" not in str(err):
                raise
            raise Incorrect(tr("{err}: Adafactor's `step` is a Python int, not a tensor; count only the values "
                               "of optimizer.state that are tensors (torch.is_tensor).", err=err)) from None
    if len(set(answers)) == 1 and answers[0] != 0:
        raise Incorrect(tr("{got:.0f} bytes for every model: the number must come from the model you are given "
                           "(its optimizer.state), not be written in.", got=answers[0]))
    for make, got in zip(CHECK_MODELS, answers):
        want = _adafactor_truth(make)
        if math.isclose(got, want["truth"]):
            continue
        if got == 0:
            raise Incorrect(tr("0 bytes: optimizer.state is empty until the first optimizer.step(); give the "
                               "trainable parameters zero gradients and take one step before counting."))
        for key, message in _NAMED:
            if want[key] != want["truth"] and math.isclose(got, want[key]):
                raise Incorrect(tr(message))
        raise Incorrect(tr("{got:.0f} bytes is not it for {model}(): a real Adafactor with beta1 set keeps "
                           "{want} bytes of tensors in its state after its first step.", got=got,
                           model=make.__name__.lstrip("_"), want=want["truth"]))


q1 = Exercise(
    "4.2 q1: Adafactor's second moment for any shape",
    _check_numel_fn,
    usage="q1.check(second_moment_numel)",
    hints=["A vector (one dimension) cannot be factored: it keeps all its values. A tensor with 2 or more "
           "dimensions keeps one mean per row and one per column.",
           "transformers/optimization.py, Adafactor.step, creates exp_avg_sq_row with shape grad_shape[:-1] and "
           "exp_avg_sq_col with shape grad_shape[:-2] + grad_shape[-1:]; math.prod multiplies a shape out.",
           "A vector keeps one value per entry: its length. Otherwise add the two shapes of hint 2, each "
           "multiplied out: the row statistics (every dimension but the last) and the column statistics "
           "(every dimension but the one before last)."],
    solution_code=(
        "def second_moment_numel(shape):\n    if len(shape) < 2:\n        return shape[0]\n"
        "    return math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]\n\nq1.check(second_moment_numel)"),
)
q2 = Exercise(
    "4.2 q2: Adafactor as Trainer builds it",
    _check_make_adafactor,
    usage="q2.check(make_adafactor)",
    api=True,
    checked=("checked by three real steps: the same weights as Trainer's Adafactor, with no first moment."),
    hints=["Adafactor's defaults pick their own step size; to give it a learning rate, as Trainer("
           "optim='adafactor') does, two options must be off, and warm-up init too.",
           "transformers.Adafactor(params, lr=..., scale_parameter=..., relative_step=..., warmup_init=...): "
           "see the Adafactor page of the transformers documentation (Optimization), or "
           "transformers/trainer_optimizer.py, _get_adafactor.",
           "Return an Adafactor over params with the exercise's learning rate and the three options of hint 1"
           " each set so that the rate you pass is the one it steps by; _get_adafactor shows the values "
           "Trainer passes."],
    solution_code=("def make_adafactor(params):\n"
                   "    return Adafactor(params, lr=Q2_LR, scale_parameter=False, relative_step=False,\n"
                   "                     warmup_init=False)\n\nq2.check(make_adafactor)"),
)
q3 = Exercise(
    "4.2 q3: Adafactor's state bytes with a first moment",
    _check_adafactor_state_bytes,
    usage="q3.check(adafactor_state_bytes)",
    api=True,
    checked=("checked on q3_model(), a model with a frozen part and one with a 3-D weight: the bytes of every "
             "tensor in a real Adafactor's state with beta1 set, after one step."),
    hints=["Measure, do not compute: build a real transformers.Adafactor with a first moment over the "
           "parameters that train, make its state exist with one step, then add up the bytes of the tensors "
           "it keeps.",
           "Adafactor(params, lr=Q3_LR, beta1=Q3_BETA1, ...) with the three options q2 turned off. Its state "
           "is empty until a step, and a step needs gradients (zeros will do) on the trainable parameters "
           "only. Per parameter, Adafactor.step (transformers/optimization.py) keeps exp_avg_sq_row and "
           "exp_avg_sq_col (a matrix or more) or exp_avg_sq (a vector), exp_avg, and RMS, a 0-d tensor; "
           "its step is a Python int, not a tensor.",
           "After the step, for each state dict s in optimizer.state.values(), add\n"
           "t.numel() * t.element_size() for every value t of s that is a tensor (torch.is_tensor(____)). "
           "Which parameters got gradients, and which did the optimizer get?"],
    solution_code=(
        "def adafactor_state_bytes(model):\n"
        "    trainable = [p for p in model.parameters() if p.requires_grad]\n"
        "    for p in trainable:\n        p.grad = torch.zeros_like(p)\n"
        "    optimizer = Adafactor(trainable, lr=Q3_LR, beta1=Q3_BETA1, scale_parameter=False,\n"
        "                          relative_step=False, warmup_init=False)\n    optimizer.step()\n"
        "    return sum(value.numel() * value.element_size() for state in optimizer.state.values()\n"
        "               for value in state.values() if torch.is_tensor(value))\n\n"
        "q3.check(adafactor_state_bytes)"),
)
