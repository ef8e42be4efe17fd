"""What does each way of computing attention keep for backward at a given n and d, and is the tiled one exact?
(lesson 8.1, ``effitrain attention``)

:func:`compare` measures, on float32 ``(batch, heads, n, d)`` inputs, the bytes plain attention, SDPA's math and
CPU flash kernels and the workbook's tiled FlashAttention-2 keep for backward (saved-tensor hooks), each next to
its theory, and the largest difference of the tiled version's output, log-sum-exp and gradients against SDPA's.
"""

from __future__ import annotations

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_int
from effitrain_helpers.training import flash_attention as fa

# the ways ``flash_attention.saved_bytes_compared`` measures -> how the report names them (translated by tr)
WAYS = {"plain": msg("plain"), "sdpa math": msg("sdpa math"), "sdpa flash": msg("sdpa flash"),
        "hand flash": msg("hand flash")}


def compare(batch: int = 1, heads: int = 2, n: int = 512, d: int = 32, is_causal: bool = True,
            tile: int = fa.TILE) -> dict:
    """``{"rows": [...], "gaps": {...}}``: per way, the bytes saved for backward (measured and theory); and the
    tiled FlashAttention's largest differences from SDPA (output, lse, gradients of q, k, v)."""
    import torch
    import torch.nn.functional as F

    for name, value in (("batch", batch), ("heads", heads), ("n", n), ("d", d), ("tile", tile)):
        positive_int(name, value)

    class Tiled(fa.FlashAttention):
        pass

    Tiled.tile = tile
    rows = fa.saved_bytes_compared(batch, heads, n, d, is_causal=is_causal, function=Tiled)
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch * heads, n, d, generator=generator, requires_grad=True) for _ in range(3))
    out = Tiled.apply(q, k, v, is_causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    grad = torch.randn(out.shape, generator=generator)
    mine = torch.autograd.grad(out, (q, k, v), grad)
    theirs = torch.autograd.grad(want, (q, k, v), grad)
    plain = [t.detach() for t in (q, k, v)]
    lse = fa.flash_forward(*plain, is_causal, tile)[1]
    gaps = {"output": (out - want).abs().max().item(),
            "lse": (lse - fa.sdpa_with_lse(*plain, is_causal)[1]).abs().max().item()}
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
