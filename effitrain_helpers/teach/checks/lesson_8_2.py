"""Exercise of lesson 8.2 (activation memory): the bytes a block the lesson does not measure keeps for backward,
predicted as a function of its shape (q1).

The learner writes ``block_bytes(s, b, h, a, ffn)`` for :class:`~effitrain_helpers.engines.recomputation.SwiGLUBlock`
(pre-layer-norm, no dropout, a SwiGLU MLP of width ``ffn``), in float32. The checker measures that block with
saved-tensor hooks on shapes the lesson does not show, compares byte for byte, and names the likely slip from the
learner's numbers (the ``a s^2`` term left out, 2 bytes a value, values instead of bytes, the probabilities
counted twice, dropout masks this block has not, the layer norms' inputs or statistics left out, the MLP's width
taken as 4h, SwiGLU counted like GELU, the lesson's own block's formula).
"""

from __future__ import annotations

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect

# (s, b, h, a, ffn) the lesson never shows; the first separates every slip below from the answer
SHAPES = ((20, 3, 16, 2, 48), (40, 2, 24, 4, 56), (12, 5, 32, 8, 96))


def _measured(s: int, b: int, h: int, a: int, ffn: int) -> int:
    import torch

    from effitrain_helpers.engines.recomputation import SwiGLUBlock
    from effitrain_helpers.training.activation_memory import measured_bytes

    torch.manual_seed(0)
    return measured_bytes(SwiGLUBlock(h, a, ffn), s, b).activation_bytes


def _slips(s: int, b: int, h: int, a: int, ffn: int, want: int) -> list[tuple[float, str]]:
    """What each likely slip predicts for this shape, with its message (translated where raised)."""
    sbh, sbf, square, stats = s * b * h, s * b * ffn, a * s * s * b, 4 * s * b
    return [
        (want - 4 * square, msg("the a s² term is missing: softmax keeps its output, the probabilities, a x s x s "
                               "values per sequence (4 a s² b bytes). It is the term that grows fastest with s.")),
        (want / 2, msg("half the bytes: you counted 2 bytes a value (16-bit, the paper's count). This block runs "
                      "in float32: 4 bytes a value.")),
        (want / 4, msg("a quarter of the bytes: you counted values, not bytes. A float32 value takes 4 bytes.")),
        (want + 4 * square, msg("the probabilities are counted twice. With no dropout, the tensor softmax keeps "
                               "(its output) is the very tensor the product with v keeps: one storage, counted "
                               "once.")),
        (want + 4 * square + 8 * sbh, msg("this block has no dropout: no masks to keep (the lesson's block had "
                                         "three).")),
        (want + square + 2 * sbh, msg("this block has no dropout: no masks to keep (the lesson's block had three).")),
        (want - 4 * stats, msg("the layer norms' statistics are missing: each layer norm keeps a mean and 1/std per "
                              "row (2 x s x b float32 values each), besides its input.")),
        (want - 8 * sbh, msg("the layer norms' inputs are missing: each layer norm keeps its input (s b h values) "
                            "for backward.")),
        (want - 16 * sbf + 64 * sbh, msg("you took the MLP's width as 4h; this block's width is ffn.")),
        (want - 8 * sbf, msg("SwiGLU keeps four tensors of width ffn, not GELU's two: gate's output (silu's "
                            "input), silu's output and up's output (the product keeps both), and the product "
                            "(down's input).")),
        (want + 4 * sbh, msg("gate and up read the same tensor (the second layer norm's output): it is kept once.")),
        (72 * sbh + 12 * square + 4 * stats, msg("that is the lesson's block (dropout, GELU of width 4h). This one "
                                                 "has no dropout and a SwiGLU MLP of width ffn: list what each of "
                                                 "its operations keeps.")),
    ]


def _check(block_bytes) -> None:
    """``block_bytes(s, b, h, a, ffn)`` equal to the measured bytes on every held-back shape, slips named."""
    from effitrain_helpers.teach.exercises import as_number

    if not callable(block_bytes):
        raise Incorrect(tr("pass your function itself: q1.check(block_bytes); you gave {kind}.",
                           kind=type(block_bytes).__name__))
    for shape in SHAPES:
        got, want = as_number(block_bytes(*shape)), _measured(*shape)
        if abs(got - want) < 0.5:
            continue
        for slip, message in _slips(*shape, want):
            if abs(got - slip) < 0.5:
                raise Incorrect(tr(message))
        s, b, h, a, ffn = shape
        raise Incorrect(tr("for s={s}, b={b}, h={h}, a={a}, ffn={ffn} you predict {got:.0f} bytes; the block kept "
                           "{want} (measured). List each operation's saved tensors, in float32.",
                           s=s, b=b, h=h, a=a, ffn=ffn, got=got, want=want))


q1 = Exercise(
    "8.2 q1: predict the bytes another block keeps for backward",
    _check,
    usage="q1.check(block_bytes)",
    checked=("checked against the bytes the block kept for backward, measured with saved-tensor hooks on three "
             "shapes the lesson does not show."),
    hints=["Walk the block's forward operation by operation and write down what each one's backward needs: an "
           "input, an output, a mask, a statistic. Tensors that are one storage count once.",
           "The rules measured in the lesson: a linear layer keeps its input; layer norm its input and a mean and "
           "1/std per row; softmax its output; a product of two activations keeps both; silu and GELU keep their "
           "input. torch's tools/autograd/derivatives.yaml lists what each operation saves.",
           "Count in float32, 4 bytes a value, how many tensors of each size the block keeps: s x b x h, "
           "s x b x ffn, a x s x s x b and s x b (a per-row statistic). The lesson's traced table does the same "
           "count for its own block, row by row; a product with no dropout before it shares its input with "
           "softmax's output."],
    solution_code=(
        "def block_bytes(s, b, h, a, ffn):\n"
        "    return 4 * (s * b * (8 * h + 4 * ffn) + a * s * s * b + 4 * s * b)\n"
        "\n\nq1.check(block_bytes)"
    ),
)


# q2: (batch, heads, s, d) and a dropout probability the lesson does not use
Q2_SHAPE, Q2_DROPOUT, Q2_SEED = (2, 3, 20, 8), 0.25, 7


def _q2_inputs():
    import torch

    generator = torch.Generator().manual_seed(1)
    return [torch.randn(*Q2_SHAPE, generator=generator, requires_grad=True) for _ in range(3)]


def _q2_run(fn):
    """``fn``'s output, the bytes it kept for backward and the gradients of q, k, v (the random state moved on
    between forward and backward, as other layers would)."""
    import torch

    from effitrain_helpers.measure.saved_memory import SavedTensors

    q, k, v = _q2_inputs()
    torch.manual_seed(Q2_SEED)
    with SavedTensors() as counter:
        out = fn(q, k, v, Q2_DROPOUT)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != Q2_SHAPE:
        raise Incorrect(tr("attention_recomputed must return the attention's output, a tensor of shape {shape}; "
                           "it returned {got}.", shape=Q2_SHAPE, got=getattr(out, "shape", type(out).__name__)))
    torch.manual_seed(Q2_SEED + 1)
    if out.grad_fn is not None:
        out.backward(torch.ones_like(out))
    return out.detach(), counter.activation_bytes, [t.grad for t in (q, k, v)]


def _check_recomputed(attention_recomputed) -> None:
    """The learner's attention core under checkpoint: the reference's output and gradients (the same dropout
    masks), and only q, k and v kept for backward."""
    import torch

    from effitrain_helpers.engines.recomputation import attention_core

    if not callable(attention_recomputed):
        raise Incorrect(tr("pass your function itself: q2.check(attention_recomputed); you gave {kind}.",
                           kind=type(attention_recomputed).__name__))
    out, kept, grads = _q2_run(attention_recomputed)
    want, plain, want_grads = _q2_run(lambda q, k, v, p: attention_core(q, k, v, p, True))
    inputs = 3 * out.numel() * 4
    if not torch.allclose(out, want, atol=1e-6):
        if torch.allclose(out, _q2_run(lambda q, k, v, p: attention_core(q, k, v, p, False))[0], atol=1e-6):
            raise Incorrect(tr("dropout was off: the core runs in training, so pass training=True to "
                               "rc.attention_core (the fifth argument)."))
        if torch.allclose(out, _q2_run(lambda q, k, v, p: attention_core(q, k, v, 0.1, True))[0], atol=1e-6):
            raise Incorrect(tr("you used dropout 0.1, the lesson's; use the function's argument dropout (the check "
                               "passes {p}).", p=Q2_DROPOUT))
        raise Incorrect(tr("the output is not attention's core: call rc.attention_core(q, k, v, dropout, True) "
                           "inside the checkpoint."))
    if any(g is None for g in grads):
        raise Incorrect(tr("no gradient reached q, k or v: nothing may be detached or run under torch.no_grad(); "
                           "checkpoint recomputes the core in backward and needs the graph to its inputs."))
    if kept >= plain:
        raise Incorrect(tr("{kept} bytes were kept for backward, as many as without recomputation ({plain}): the "
                           "probabilities and the dropout mask are still saved. Wrap the call in "
                           "torch.utils.checkpoint.checkpoint.", kept=kept, plain=plain))
    if kept != inputs:
        raise Incorrect(tr("{kept} bytes were kept for backward; selective recomputation keeps only q, k and v "
                           "({inputs} bytes): checkpoint the whole core, softmax, dropout and the product with v.",
                           kept=kept, inputs=inputs))
    if not all(torch.allclose(g, w, atol=1e-5) for g, w in zip(grads, want_grads)):
        raise Incorrect(tr("the gradients differ from the core's: the dropout masks recomputed in backward are not "
                           "the forward's. Let checkpoint restore the random state (preserve_rng_state, on by "
                           "default)."))


q2 = Exercise(
    "8.2 q2: selective recomputation with torch.utils.checkpoint",
    _check_recomputed,
    usage="q2.check(attention_recomputed)",
    api=True,
    checked=("checked with a dropout probability and a shape the lesson does not use: the core's output and "
             "gradients (the same dropout masks, the random state moved on before backward), and only q, k and v "
             "kept for backward."),
    hints=["Selective recomputation keeps the inputs of attention's core and nothing inside it; backward runs the "
           "core again to get the probabilities back.",
           "torch.utils.checkpoint.checkpoint(function, *args), with use_reentrant=False, runs function without "
           "saving what it would save, keeps its arguments, and reruns it in backward (PyTorch documentation, "
           "torch.utils.checkpoint).",
           "The function to hand over is the lesson's attention core, printed at the top of the lesson (in the "
           "module rc); its arguments follow it, and dropout is on while training."],
    solution_code=(
        "def attention_recomputed(q, k, v, dropout):\n"
        "    return torch.utils.checkpoint.checkpoint(rc.attention_core, q, k, v, dropout, True,\n"
        "                                             use_reentrant=False)\n"
        "\n\nq2.check(attention_recomputed)"
    ),
)
