"""Lesson 8.1's checker with two right forwards written differently and the wrong ones a learner writes, each
named; and the house's FlashAttention against torch's scaled_dot_product_attention (outputs, log-sum-exp,
gradients) and its bytes saved for backward against the theory."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from effitrain_helpers.teach.checks.lesson_8_1 import forward_or_reference, q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.engines import flash_attention as fa
from effitrain_helpers.training import attention_memory
from verdicts import assert_verdict, mistake, right


def _forward(q, k, v, is_causal, tile, rescale_sum=True, rescale_out=True, subtract_max=True, diagonal=1,
             local_mask=False, full_tiles_only=False, whole=False, step=None):
    """A tiled forward; each keyword off makes one mistake a learner makes."""
    n, scale = q.shape[1], q.shape[-1] ** -0.5
    if whole:
        s = q @ k.transpose(1, 2) * scale
        if is_causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, -1) @ v, s.logsumexp(-1)
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
    stop = n - n % tile if full_tiles_only else n
    for i in range(0, stop, step or tile):
        qi = q[:, i:i + tile]
        m, l, acc = torch.full(qi.shape[:-1], float("-inf")), torch.zeros(qi.shape[:-1]), torch.zeros_like(qi)  # noqa: E741
        for j in range(0, stop, tile):
            s = qi @ k[:, j:j + tile].transpose(1, 2) * scale
            if is_causal:
                rows, cols = (0, 0) if local_mask else (i, j)
                later = torch.arange(cols, cols + s.shape[-1]) >= torch.arange(rows, rows + s.shape[-2])[:, None] \
                    + diagonal
                s = s.masked_fill(later, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1)) if subtract_max else torch.zeros_like(m)
            p = torch.exp(s - m_new[..., None])
            l = l * (torch.exp(m - m_new) if rescale_sum and subtract_max else 1) + p.sum(-1)  # noqa: E741
            keep = torch.exp(m - m_new)[..., None] if rescale_out and subtract_max else 1
            acc = acc * keep + p @ v[:, j:j + tile]
            m = m_new
        out[:, i:i + tile] = acc / l[..., None]
        lse[:, i:i + tile] = m + torch.log(l)
    return out, lse


def _in_log_space(q, k, v, is_causal, tile):
    """Right, written differently: the running log-sum-exp itself, merged with torch.logaddexp, keys outer."""
    n = q.shape[1]
    lse = torch.full(q.shape[:-1], float("-inf"))
    out = torch.zeros_like(q)
    for j in range(0, n, tile):
        s = torch.einsum("bqd,bkd->bqk", q, k[:, j:j + tile]) / q.shape[-1] ** 0.5
        if is_causal:
            s = torch.where(torch.arange(j, j + s.shape[-1])[None, :] <= torch.arange(n)[:, None], s, -torch.inf)
        tile_lse = s.logsumexp(-1)
        new = torch.logaddexp(lse, tile_lse)
        out = out * torch.exp(lse - new)[..., None] + torch.exp(s - new[..., None]).nan_to_num() @ v[:, j:j + tile]
        lse = new
    return out, lse



@pytest.mark.slow  # about 10 checker runs each (a few seconds on a busy 2-core CPU)
@pytest.mark.parametrize("forward", [
    right("8.1 q1", _forward, id="every-key-tile-masked"),  # no tile skipped, the mask by >= and a diagonal
    right("8.1 q1", _in_log_space, id="log-space-keys-outer"),
])
def test_a_forward_written_two_ways_is_correct(forward):
    result = q1.evaluate(forward)
    assert result.status == "correct", result.message


@pytest.mark.parametrize("slip, words", [
    mistake("8.1 q1", {"rescale_sum": False}, "running sum l is not rescaled"),
    mistake("8.1 q1", {"rescale_out": False}, "output must be rescaled"),
    mistake("8.1 q1", {"subtract_max": False}, "Subtract the running max"),
    mistake("8.1 q1", {"diagonal": 0}, "causal mask off by one"),
    mistake("8.1 q1", {"diagonal": 2}, "causal mask off by one"),
    mistake("8.1 q1", {"local_mask": True}, "global positions"),
    mistake("8.1 q1", {"full_tiles_only": True}, "the last tile is shorter"),
    mistake("8.1 q1", {"whole": True}, "the full n x n scores"),
    mistake("8.1 q1", {"step": 1}, "visited once"),
])
@pytest.mark.slow
def test_each_mistake_is_named(slip, words):
    result = q1.evaluate(lambda q, k, v, c, t: _forward(q, k, v, c, t, **slip))
    assert result.status == "incorrect" and words in result.message, result.message


@pytest.mark.parametrize("answer", [fa.flash_forward, lambda q, k, v, c, t: fa.flash_forward(q, k, v, c, t)])
def test_the_workbook_s_own_forward_is_not_an_answer(answer):
    result = q1.evaluate(answer)
    assert result.status == "incorrect" and "hands the work to flash_forward" in result.message, result.message


def test_a_wrong_form_and_a_blank_are_answered():
    assert "pair (output, lse)" in q1.evaluate(lambda q, k, v, c, t: q).message
    assert "(2, 40)" in q1.evaluate(lambda q, k, v, c, t: (q, q)).message

    def unfinished(q, k, v, is_causal, tile):
        return ____

    assert q1.evaluate(unfinished).status == "not attempted"
    assert forward_or_reference(unfinished) is fa.flash_forward and forward_or_reference(_forward) is _forward


@pytest.mark.parametrize("is_causal", [False, True])
def test_the_autograd_function_matches_sdpa_and_saves_the_lse(is_causal):
    class Small(fa.FlashAttention):
        tile = 16

    q, k, v = (torch.randn(3, 37, 8, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = Small.apply(q, k, v, is_causal)
    assert (3, 37) in saved and not any(s[-2:] == (37, 37) for s in saved)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    grad = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), grad), torch.autograd.grad(want, (q, k, v), grad)):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert torch.allclose(out, want, atol=1e-5, rtol=1e-4)
    assert torch.allclose(fa.flash_forward(q, k, v, is_causal, 16)[1], fa.sdpa_with_lse(q, k, v, is_causal)[1],
                          atol=1e-5, rtol=1e-4)


def test_bytes_saved_match_the_theory_n_squared_against_n():
    rows = {r["way"]: r for r in attention_memory.saved_bytes_compared(1, 2, 128, 16)}
    assert all(r["saved_bytes"] == r["theory_bytes"] for r in rows.values()), rows
    assert rows["plain"]["saved_bytes"] > 2 * rows["hand flash"]["saved_bytes"]


def test_bad_shapes_are_one_line():
    with pytest.raises(ValueError, match="Fold the heads"):
        fa.flash_forward(torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4))


@pytest.mark.parametrize("answer, words", [
    ((8576.0, 513.0), None),  # the solution's own values
    right("8.1 q2", (8576, 513.2), None),  # an int, and a float rounded
    right("8.1 q2", (np.float32(8576), torch.tensor(513.0)), None),  # a NumPy scalar and a 0-d tensor
    mistake("8.1 q2", (513.0, 8576.0), "swapped"),
    mistake("8.1 q2", (2144.0, 513.0), "values, not bytes"),
    mistake("8.1 q2", (8192.0, 513.0), "only the n x n probabilities"),
    mistake("8.1 q2", (8576.0, 385.0), "leaves out the output"),
    mistake("8.1 q2", (8576.0, 512.0), "leaves out the log-sum-exp"),
    ((8000.0, 513.0), "the math kernel's bytes"),
    ((8576.0, 500.0), "the flash kernel's bytes"),
])
def test_the_bytes_prediction_names_each_slip(answer, words):
    assert_verdict(q2, *answer, words=words)


def test_the_prediction_s_theory_is_what_the_hooks_measure():
    """q2's answer comes from saved_bytes_theory, which the saved-tensor hooks confirm at a small size."""
    rows = attention_memory.saved_bytes_compared(1, 2, 64, 16, function=fa.FlashAttention)
    assert [r["saved_bytes"] for r in rows] == [attention_memory.saved_bytes_theory(r["way"], 1, 2, 64, 16) for r in rows]
