"""Exercises of lesson 4.2 (Adafactor: row and column means instead of a full second moment)."""

from __future__ import annotations

import math

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number
from effitrain_helpers.measure.optimizer_memory import adafactor_second_moment_numel

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


def _check_beta1_bytes(answer) -> None:
    got = as_number(answer)
    weight = 4 * (64 + 256) + 4 * 64 * 256 + 4  # rows + columns, exp_avg, RMS
    bias = 4 * 64 + 4 * 64 + 4  # full exp_avg_sq, exp_avg, RMS
    want = weight + bias
    if math.isclose(got, want):
        return
    if math.isclose(got, want - 8):
        raise Incorrect(tr("almost: each tensor also keeps `RMS`, a float32 0-d tensor (4 bytes)."))
    if math.isclose(got, want - 4 * (64 * 256 + 64)):
        raise Incorrect(tr("with beta1 set, Adafactor also keeps exp_avg, a full float32 copy of each parameter."))
    if math.isclose(got, 4 * 2 * (64 * 256 + 64) + 8):
        raise Incorrect(tr("that is AdamW's count: the weight's second moment is still factored (rows + columns)."))
    raise Incorrect(tr("{got:.0f} bytes is not it. nn.Linear(256, 64) has weight (64, 256) and bias (64,); add "
                       "their second-moment statistics, exp_avg, and one RMS each, 4 bytes per value.", got=got))


q1 = Exercise(
    "4.2 q1: Adafactor's second moment for any shape",
    _check_numel_fn,
    usage="q1.check(second_moment_numel)",
    hints=["A vector (one dimension) cannot be factored: it keeps all its values. A tensor with 2 or more "
           "dimensions keeps one mean per row and one per column.",
           "transformers/optimization.py, Adafactor.step, creates exp_avg_sq_row with shape grad_shape[:-1] and "
           "exp_avg_sq_col with shape grad_shape[:-2] + grad_shape[-1:]; math.prod multiplies a shape out.",
           "For a vector return ____; otherwise\n    return math.prod(____) + math.prod(____) * ____"],
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
           "    return Adafactor(params, lr=____, scale_parameter=____, relative_step=____,\n"
           "                     warmup_init=____)"],
    solution_code=("def make_adafactor(params):\n"
                   "    return Adafactor(params, lr=Q2_LR, scale_parameter=False, relative_step=False,\n"
                   "                     warmup_init=False)\n\nq2.check(make_adafactor)"),
)
q3 = Exercise(
    "4.2 q3: Adafactor with a first moment",
    _check_beta1_bytes,
    usage="q3.check(state_bytes_with_beta1)",
    hints=["Count each tensor separately: nn.Linear(in_features, out_features) has a weight of shape "
           "(out_features, in_features) and a bias of shape (out_features,); every value in the state is float32 "
           "(how many bytes is that?).",
           "Per tensor, Adafactor.step keeps: the second moment (row and column means for the weight, in full "
           "for the bias), exp_avg (a full copy, because beta1 is set) and RMS (one value).",
           "weight = B * (rows + columns) + B * rows * columns + B, with B the bytes of one float32 value; the "
           "bias likewise, with its second moment kept in full."],
    solution_code=("weight = 4 * (64 + 256) + 4 * 64 * 256 + 4   # rows + columns, exp_avg, RMS\n"
                   "bias = 4 * 64 + 4 * 64 + 4                    # full exp_avg_sq, exp_avg, RMS\n"
                   "state_bytes_with_beta1 = weight + bias\nq3.check(state_bytes_with_beta1)"),
)
