"""Lesson 8.2: the block's bytes kept for backward, measured tensor by tensor, equal to its formula (no, selective
and full recomputation; a tensor-parallel rank's share); the exercise's checker with two right predictions
written differently and each slip a learner makes, named."""

import pytest
import torch

from effitrain_helpers.engines import recomputation as rc
from effitrain_helpers.teach.checks.lesson_8_2 import SHAPES, q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.training import activation_memory as am
from verdicts import assert_correct, assert_not_attempted, assert_refused, mistake, right

SHAPE = (48, 2, 32, 4)  # s, b, h, a


@pytest.mark.parametrize("recompute", rc.RECOMPUTE)
def test_each_kept_tensor_is_its_term(recompute):
    rows = am.traced_terms(*SHAPE, recompute)
    assert rows and all(r["measured"] == r["predicted"] for r in rows), rows
    assert sum(r["measured"] for r in rows) == rc.block_bytes(*SHAPE, recompute)


def test_the_formula_in_closed_form():
    s, b, h, a = SHAPE
    assert rc.block_bytes(s, b, h, a) == s * b * h * (72 + 12 * a * s / h) + 16 * s * b
    assert rc.block_bytes(s, b, h, a, mask_bytes=1) == s * b * h * (66 + 9 * a * s / h) + 16 * s * b
    assert rc.block_bytes(s, b, h, a, "selective") == 72 * s * b * h + 16 * s * b
    assert rc.block_bytes(s, b, h, a, "full") == 4 * s * b * h


def test_recomputation_gives_the_same_gradients():
    x = torch.randn(2, 16, 32, requires_grad=True)
    grads = []
    for mode in rc.RECOMPUTE:
        torch.manual_seed(0)
        block = rc.Block(32, 4, recompute=mode)
        torch.manual_seed(1)  # the same dropout masks
        block(x).sum().backward()
        grads.append((x.grad.clone(), block.fc1.weight.grad.clone()))
        x.grad = None
    for other in grads[1:]:
        assert all(torch.allclose(g, o, atol=1e-5) for g, o in zip(grads[0], other))


def test_a_tensor_parallel_rank_keeps_its_share():
    rows = am.split_compared(*SHAPE, degrees=(1, 2, 4))
    assert all(r["tensor parallel, measured"] == r["tensor parallel, predicted"] for r in rows)
    one = rows[0]["sequence parallel too, predicted"]
    assert [r["sequence parallel too, predicted"] for r in rows] == [one, one // 2, one // 4]


@pytest.mark.parametrize("bad", [{"hidden": 30, "heads": 4}, {"hidden": 32, "heads": 4, "recompute": "some"},
                                 {"hidden": 32, "heads": 4, "tensor_parallel": 3}])
def test_a_bad_block_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="heads|recompute"):
        rc.Block(**bad)


def _right(s, b, h, a, ffn):
    return 4 * (s * b * (8 * h + 4 * ffn) + a * s * s * b + 4 * s * b)


def _by_tensor(s, b, h, a, ffn):
    """Right, written tensor by tensor."""
    value, rows = 4, s * b
    norms = 2 * (rows * h + 2 * rows)
    attention = rows * h + 3 * rows * h + a * s * s * b + rows * h
    mlp = rows * h + 4 * rows * ffn
    return float(value * (norms + attention + mlp))


def _by_operation(s, b, h, a, ffn):
    """Right, another way: (how many, size) of what each operation keeps, listed and summed, as a NumPy integer."""
    import numpy as np

    kept = [(2, s * b * h), (4, s * b),  # each layer norm: its input, then a mean and 1/std per row
            (4, s * b * h), (1, a * s * s * b), (1, s * b * h),  # q, k, v's input, q, k, v; probabilities; out's input
            (1, s * b * h), (4, s * b * ffn)]  # up's input; the MLP's four tensors of width ffn
    return np.int64(4) * sum(count * size for count, size in kept)


@pytest.mark.parametrize("fn", [_right, right("8.2 q1", _by_tensor), right("8.2 q1", _by_operation)],
                         ids=["the solution's formula", "tensor by tensor", "operation by operation"])
def test_two_right_predictions_are_correct(fn):
    assert_correct(q1, fn)


def _wrong(**slip):
    """A prediction with one slip (counted in values, then times the bytes of a value)."""
    def fn(s, b, h, a, ffn):
        sbh, square, stats = s * b * h, a * s * s * b, s * b
        values = (2 * sbh if not slip.get("no_norm_inputs") else 0) + (4 * stats if not slip.get("no_stats") else 0)
        values += 6 * sbh + (square if not slip.get("no_square") else 0) + (sbh if slip.get("up_twice") else 0)
        values += square if slip.get("probs_twice") else 0
        width = 4 * h if slip.get("four_h") else ffn
        values += (2 if slip.get("gelu_like") else 4) * s * b * width
        masks = square + 2 * sbh if slip.get("masks") else 0  # 1 byte each, a GPU's masks
        return slip.get("value", 4) * values + masks
    return fn


def _lesson_block(s, b, h, a, ffn):
    return rc.block_bytes(s, b, h, a)


@pytest.mark.parametrize("fn, words", [
    mistake("8.2 q1", _wrong(no_square=True), "a s² term is missing"),
    mistake("8.2 q1", _wrong(value=2), "2 bytes a value"),
    mistake("8.2 q1", _wrong(value=1), "values, not bytes"),
    mistake("8.2 q1", _wrong(probs_twice=True), "counted twice"),
    mistake("8.2 q1", _wrong(masks=True), "no dropout"),
    mistake("8.2 q1", _wrong(no_stats=True), "statistics are missing"),
    mistake("8.2 q1", _wrong(no_norm_inputs=True), "inputs are missing"),
    mistake("8.2 q1", _wrong(four_h=True), "width as 4h"),
    mistake("8.2 q1", _wrong(gelu_like=True), "four tensors of width ffn"),
    mistake("8.2 q1", _wrong(up_twice=True), "kept once"),
    (_lesson_block, "the lesson's block"),
    (lambda s, b, h, a, ffn: 4 * (s * b * (8 * h + 4 * ffn) + a * s * s * b), "statistics are missing"),
    (lambda s, b, h, a, ffn: 12345, "List each operation's saved tensors"),
])
def test_each_slip_is_named(fn, words):
    assert_refused(q1, fn, words=words)


def test_not_attempted_and_not_a_function():
    def block_bytes(s, b, h, a, ffn):
        return ____
    assert_not_attempted(q1, block_bytes)
    assert_refused(q1, 97920, words="function itself")


def test_the_held_back_shapes_are_not_the_lessons():
    assert all(shape[:4] != SHAPE for shape in SHAPES)


def _core(q, k, v, dropout):
    """Right, written differently: the learner's own core (softmax, dropout, product with v), checkpointed."""
    import math

    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def core(q, k, v):
        probabilities = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1)
        return F.dropout(probabilities, dropout, True) @ v
    return checkpoint(core, q, k, v, use_reentrant=False)


def _checkpointed(*flags, reentrant=False, p=None, detach=False, **options):
    from torch.utils.checkpoint import checkpoint

    def fn(q, k, v, dropout):
        inputs = [t.detach() for t in (q, k, v)] if detach else [q, k, v]
        return checkpoint(rc.attention_core, *inputs, dropout if p is None else p, *(flags or (True,)),
                          use_reentrant=reentrant, **options)
    return fn


@pytest.mark.parametrize("fn", [_checkpointed(), right("8.2 q2", _checkpointed(reentrant=True)),
                                right("8.2 q2", _core)],
                         ids=["non-reentrant", "reentrant", "own core"])
def test_three_right_recomputations_are_correct(fn):
    assert_correct(q2, fn)


@pytest.mark.parametrize("fn, words", [
    mistake("8.2 q2", lambda q, k, v, dropout: rc.attention_core(q, k, v, dropout, True), "Wrap the call in"),
    mistake("8.2 q2", _checkpointed(preserve_rng_state=False), "preserve_rng_state"),
    mistake("8.2 q2", _checkpointed(False), "dropout was off"),
    mistake("8.2 q2", _checkpointed(p=0.1), "the function's argument dropout"),
    mistake("8.2 q2", _checkpointed(detach=True), "no gradient reached"),
    (lambda q, k, v, dropout: rc.attention_core(q, k, v, dropout, True).softmax(-1), "not attention's core"),
    (lambda q, k, v, dropout: q.sum(), "tensor of shape"),
])
def test_each_recomputation_mistake_is_named(fn, words):
    assert_refused(q2, fn, words=words)


def test_recomputation_not_attempted_and_not_a_function():
    def attention_recomputed(q, k, v, dropout):
        return ____
    assert_not_attempted(q2, attention_recomputed)
    assert_refused(q2, 3, words="function itself")
