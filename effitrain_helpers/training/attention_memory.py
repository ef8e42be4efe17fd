"""How much does each way of computing attention keep for backward? (lesson 8.1's measurement)

- :func:`saved_bytes_theory`: the bytes plain attention, SDPA's math and flash kernels and the workbook's
  :class:`~effitrain_helpers.engines.flash_attention.FlashAttention` keep, from the shapes;
- :func:`saved_bytes_compared`: the same measured with saved-tensor hooks, each beside its theory;
- :func:`compare` and :func:`report`: ``effitrain attention``: those bytes at one n and d, and the tiled
  FlashAttention-2's largest differences from SDPA (output, log-sum-exp, gradients of q, k, v).
"""

from __future__ import annotations

import torch

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.engines.flash_attention import (TILE, FlashAttention, attention_by_hand, flash_forward,
                                                      sdpa_with_lse)

# the ways :func:`saved_bytes_compared` measures -> how :func:`report` names them (translated by tr)
WAYS = {"plain": msg("plain"), "sdpa math": msg("sdpa math"), "sdpa flash": msg("sdpa flash"),
        "hand flash": msg("hand flash")}


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


def compare(batch: int = 1, heads: int = 2, n: int = 512, d: int = 32, is_causal: bool = True,
            tile: int = TILE) -> dict:
    """``{"rows": [...], "gaps": {...}}``: per way, the bytes saved for backward (measured and theory); and the
    tiled FlashAttention's largest differences from SDPA (output, lse, gradients of q, k, v)."""
    import torch
    import torch.nn.functional as F

    for name, value in (("batch", batch), ("heads", heads), ("n", n), ("d", d), ("tile", tile)):
        positive_int(name, value)

    class Tiled(FlashAttention):
        pass

    Tiled.tile = tile
    rows = saved_bytes_compared(batch, heads, n, d, is_causal=is_causal, function=Tiled)
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch * heads, n, d, generator=generator, requires_grad=True) for _ in range(3))
    out = Tiled.apply(q, k, v, is_causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    grad = torch.randn(out.shape, generator=generator)
    mine = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(want, (q, k, v), grad)
    plain = [t.detach() for t in (q, k, v)]
    lse = flash_forward(*plain, is_causal, tile)[1]
    gaps = {"output": (out - want).abs().max().item(),
            "lse": (lse - sdpa_with_lse(*plain, is_causal)[1]).abs().max().item()}
    gaps.update({f"grad {x}": (a - b).abs().max().item() for x, a, b in zip("qkv", mine, theirs)})
    return {"batch": batch, "heads": heads, "n": n, "d": d, "causal": is_causal, "tile": tile, "rows": rows,
            "gaps": gaps}


def report(result: dict) -> str:
    """:func:`compare`'s result as lines of text, in the learner's language."""
    lines = [tr("attention on float32 (batch, heads, n, d) = ({batch}, {heads}, {n}, {d}), {causal}, tiles of {tile}: "
                "bytes kept for backward", batch=result["batch"], heads=result["heads"], n=result["n"], d=result["d"],
                causal=tr("causal") if result["causal"] else tr("not causal"), tile=result["tile"]),
             tr("{way:<12} {measured:>14} {theory:>14} {mib:>10}", way=tr("way"), measured=tr("measured (B)"),
                theory=tr("theory (B)"), mib="MiB")]
    for r in result["rows"]:
        lines.append(f"{tr(WAYS[r['way']]):<12} {number(r['saved_bytes'], '>14,')} {number(r['theory_bytes'], '>14,')} "
                     f"{number(r['saved_bytes'] / 2**20, '>10.3f')}")
    lines.append(tr("the tiled FlashAttention-2 against SDPA, largest difference: {gaps}", gaps=", ".join(
        f"{tr(k)} {number(v, '.1e')}" for k, v in result["gaps"].items())))
    lines.append(tr("theory: plain attention and SDPA's math kernel keep q, k, v and the n x n probabilities; the "
                    "flash ones keep q, k, v, the output and n log-sum-exps per head."))
    return "\n".join(lines)
