"""FlashAttention-2's tiles on the CPU: attention that never holds the n x n scores (lesson 8.1)

Everything here takes ``(batch, n, d)`` float tensors (one head per batch row, as FlashAttention-2's own
kernels see them once heads are folded into the batch) and scales the scores by ``1/sqrt(d)``.

- :func:`attention_by_hand`: softmax(q k^T / sqrt(d)) v with the full ``n x n`` matrix of scores;
- :func:`flash_forward`: the tiled forward with the online softmax (a running max and a running sum per query,
  rescaled when the max grows); it returns the output and the log-sum-exp of each query's scores;
- :func:`flash_backward`: the gradients recomputed tile by tile from q, k, v, the output and the log-sum-exp;
- :class:`FlashAttention`: the two as a ``torch.autograd.Function``, ``FlashAttention.apply(q, k, v,
  is_causal)``, which saves for backward q, k, v, the output and the log-sum-exp ``(batch, n)``, never
  ``n x n``;
- :func:`sdpa_with_lse`: torch's own CPU flash kernel, for its output and log-sum-exp (the reference).

What each way keeps for backward is measured in :mod:`effitrain_helpers.training.attention_memory`.
"""

from __future__ import annotations

import math

import torch

from effitrain_helpers.core.language import tr

TILE = 64  # queries (and keys) per tile: FlashAttention-2's block sizes on a GPU are 64 or 128


def _check_inputs(q, k, v) -> None:
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(tr("q, k and v must be (batch, n, d) tensors of one shape; got {shapes}. Fold the heads "
                            "into the batch first: x.reshape(batch * heads, n, d).",
                            shapes=", ".join(str(tuple(t.shape)) for t in (q, k, v))))


def attention_by_hand(q, k, v, is_causal: bool = False):
    """Plain attention: the ``n x n`` scores, masked above the diagonal when causal, softmax, times v."""

    _check_inputs(q, k, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _masked(scores, rows: int, cols: int, is_causal: bool):
    """``scores`` of queries from ``rows`` and keys from ``cols`` (global positions), -inf where a key comes
    after its query when causal."""

    if not is_causal:
        return scores
    later = torch.arange(cols, cols + scores.shape[-1]) > torch.arange(rows, rows + scores.shape[-2])[:, None]
    return scores.masked_fill(later, float("-inf"))


def flash_forward(q, k, v, is_causal: bool = False, tile: int = TILE):
    """FlashAttention-2's forward: for each tile of queries, one pass over the tiles of keys with a running max
    ``m``, a running sum ``l`` and an unnormalised output ``acc``, rescaled by exp(m_old - m_new) when the max
    grows; divided by ``l`` at the end. Returns ``(output, lse)``, lse = m + log(l), shape ``(batch, n)``."""

    _check_inputs(q, k, v)
    n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for i in range(0, n, tile):
        qi = q[:, i:i + tile]
        m = torch.full(qi.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros(qi.shape[:-1], dtype=q.dtype)  # noqa: E741 (FlashAttention-2's name for the sum)
        acc = torch.zeros_like(qi)
        for j in range(0, min(n, i + tile) if is_causal else n, tile):
            s = _masked(qi @ k[:, j:j + tile].transpose(-1, -2) * scale, i, j, is_causal)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            rescale = torch.exp(m - m_new)
            l = l * rescale + p.sum(-1)  # noqa: E741
            acc = acc * rescale[..., None] + p @ v[:, j:j + tile]
            m = m_new
        out[:, i:i + tile] = acc / l[..., None]
        lse[:, i:i + tile] = m + torch.log(l)
    return out, lse


def flash_backward(q, k, v, out, lse, grad_out, is_causal: bool = False, tile: int = TILE):
    """FlashAttention-2's backward: the probabilities of each tile recomputed as exp(s - lse) (no ``n x n``
    kept), D = rowsum(dO * O), dS = P * (dP - D); returns ``(dq, dk, dv)``."""

    n, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (grad_out * out).sum(-1)
    for j in range(0, n, tile):
        kj, vj = k[:, j:j + tile], v[:, j:j + tile]
        for i in range(j // tile * tile if is_causal else 0, n, tile):
            qi, doi = q[:, i:i + tile], grad_out[:, i:i + tile]
            s = _masked(qi @ kj.transpose(-1, -2) * scale, i, j, is_causal)
            p = torch.exp(s - lse[:, i:i + tile, None])
            dv[:, j:j + tile] += p.transpose(-1, -2) @ doi
            ds = p * (doi @ vj.transpose(-1, -2) - D[:, i:i + tile, None])
            dq[:, i:i + tile] += ds @ kj * scale
            dk[:, j:j + tile] += ds.transpose(-1, -2) @ qi * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """``FlashAttention.apply(q, k, v, is_causal)``: :func:`flash_forward`, then :func:`flash_backward` from what
    it saved: q, k, v, the output and the log-sum-exp ``(batch, n)``. A subclass may set ``forward_pass`` to
    another forward with the same contract (the learner's) and ``tile`` to another tile size."""

    forward_pass = staticmethod(flash_forward)
    tile = TILE

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        cls = ctx._forward_cls
        out, lse = cls.forward_pass(q, k, v, is_causal, cls.tile)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.tile = is_causal, cls.tile
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*flash_backward(q, k, v, out, lse, grad_out, ctx.is_causal, ctx.tile), None)


def sdpa_with_lse(q, k, v, is_causal: bool = False):
    """torch's CPU flash kernel on ``(batch, n, d)`` tensors: ``(output, lse)``, the reference for both."""

    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q[:, None], k[:, None], v[:, None], 0.0, is_causal)[:2]
    return out[:, 0], lse[:, 0]
