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
