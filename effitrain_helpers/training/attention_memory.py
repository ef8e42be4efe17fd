"""How much does each way of computing attention keep for backward? (lesson 8.1's measurement)

- :func:`saved_bytes_theory`: the bytes plain attention, SDPA's math and flash kernels and the workbook's
  :class:`~effitrain_helpers.engines.flash_attention.FlashAttention` keep, from the shapes;
- :func:`saved_bytes_compared`: the same measured with saved-tensor hooks, each beside its theory.
"""

from __future__ import annotations

import torch

from effitrain_helpers.core.language import tr
from effitrain_helpers.engines.flash_attention import FlashAttention, attention_by_hand


def saved_bytes_theory(way: str, batch: int, heads: int, n: int, d: int, is_causal: bool = True) -> int:
    """Bytes a way of computing attention keeps for backward on float32 ``(batch, heads, n, d)`` inputs: q, k and
    v (3 n d values per head), then the ``n x n`` probabilities for ``"plain"`` and ``"sdpa math"`` (plain
    attention, causal, also keeps its ``n x n`` boolean mask: one byte each, saved by ``masked_fill``), or the
    output (n d) and the ``n`` log-sum-exps for ``"sdpa flash"`` and ``"hand flash"``."""
    heads_total, value = batch * heads, 4  # float32
    inputs = 3 * heads_total * n * d * value
    if way in ("plain", "sdpa math"):
        mask = n * n if way == "plain" and is_causal else 0
        return inputs + heads_total * n * n * value + mask
    if way in ("sdpa flash", "hand flash"):
        return inputs + heads_total * n * d * value + heads_total * n * value
    raise ValueError(tr("way={way!r} is not one of plain, sdpa math, sdpa flash, hand flash.", way=way))


def saved_bytes_compared(batch: int, heads: int, n: int, d: int, is_causal: bool = True,
                         function=None) -> list[dict]:
    """Bytes kept for backward (saved-tensor hooks, each storage once) by plain attention, SDPA with its math
    kernel, SDPA with its CPU flash kernel and ``function`` (default the house's :class:`FlashAttention`), on
    float32 ``(batch, heads, n, d)`` inputs; each row with its :func:`saved_bytes_theory`."""
    from torch.nn.attention import SDPBackend

    from effitrain_helpers.measure.saved_memory import SavedTensors

    function = function or FlashAttention
    ways = {
        "plain": lambda q, k, v: attention_by_hand(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), is_causal),
        "sdpa math": lambda q, k, v: _sdpa(q, k, v, is_causal, SDPBackend.MATH),
        "sdpa flash": lambda q, k, v: _sdpa(q, k, v, is_causal, SDPBackend.FLASH_ATTENTION),
        "hand flash": lambda q, k, v: function.apply(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), is_causal),
    }
    rows = []
    generator = torch.Generator().manual_seed(0)
    for name, run in ways.items():
        q, k, v = (torch.randn(batch, heads, n, d, generator=generator, requires_grad=True) for _ in range(3))
        with SavedTensors() as counter:
            out = run(q, k, v)
        del out
        rows.append({"way": name, "n": n, "saved_bytes": counter.activation_bytes,
                     "theory_bytes": saved_bytes_theory(name, batch, heads, n, d, is_causal)})
    return rows


def _sdpa(q, k, v, is_causal, backend):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
