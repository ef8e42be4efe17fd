"""Exercises of lesson 8.1 (attention that fits): FlashAttention-2's tiled forward with the online softmax
(q1), and the bytes SDPA's two CPU kernels keep for backward at a long context, predicted (q2).

The learner writes ``flash_forward(q, k, v, is_causal, tile)`` returning ``(output, lse)`` for ``(batch, n, d)``
float32 tensors. The checker runs it on sizes the lesson does not show (causal and not, ``n`` a multiple of the
tile and not, one tile and several, scores large enough to overflow ``exp`` unless the max is subtracted),
compares output and log-sum-exp with torch's own CPU flash kernel, refuses a forward that builds an ``n x n``
tensor or visits a tile more than once (every operation is watched with a ``TorchDispatchMode``), and names the likely mistake from
what it sees.
"""

from __future__ import annotations

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, _unfinished, hands_over_to

ATOL, RTOL = 1e-5, 1e-4  # float32 sums in another order than torch's kernel differ by about 1e-7
BATCH, D, TILE = 2, 8, 16
SIZES = (40, 48, 12)  # not a multiple of the tile, a multiple, one tile (the lesson shows other sizes)
LARGE = 30.0  # q scaled so scores reach ~100: exp(100) overflows float32 (max about exp(88.7))


def forward_or_reference(forward):
    """``forward`` once the learner has written it (no ``____`` left), else the house's
    :func:`~effitrain_helpers.engines.flash_attention.flash_forward` (the lesson then says so)."""
    from effitrain_helpers.engines.flash_attention import flash_forward

    return flash_forward if _unfinished(forward) else forward


def _inputs(n: int, seed: int, scale: float = 1.0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(BATCH, n, D, generator=generator) for _ in range(3))
    return q * scale, k, v


def _run(fn, q, k, v, is_causal: bool):
    """The learner's ``(output, lse)``, its form checked in one line each."""
    import torch

    got = fn(q.clone(), k.clone(), v.clone(), is_causal, TILE)
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
        raise Incorrect(tr("flash_forward must return a pair (output, lse) of tensors; it returned {kind}.",
                           kind=type(got).__name__))
    out, lse = got
    if tuple(out.shape) != tuple(q.shape) or tuple(lse.shape) != tuple(q.shape[:-1]):
        raise Incorrect(tr("for (batch, n, d) = {shape} the output must be {shape} and the log-sum-exp "
                           "{lse_shape}; yours were {out} and {lse}.", shape=tuple(q.shape),
                           lse_shape=tuple(q.shape[:-1]), out=tuple(out.shape), lse=tuple(lse.shape)))
    return out.detach(), lse.detach()


def _close(a, b) -> bool:
    import torch

    return torch.allclose(a, b, atol=ATOL, rtol=RTOL)


def _gap(a, b) -> str:
    return f"{float((a - b).abs().nan_to_num(float('inf')).max()):.2e}"


def _watch(fn, q, k, v, is_causal: bool) -> tuple[tuple, int]:
    """While ``fn`` runs (a TorchDispatchMode sees every torch operation): the shape of the largest result with
    two dimensions or more, and the floating-point operations of its matrix products."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    products = {torch.ops.aten.bmm.default, torch.ops.aten.mm.default}

    class Watch(TorchDispatchMode):
        shape: tuple = ()
        flops: int = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if func in products:
                Watch.flops += 2 * result.numel() * args[0].shape[-1]
            for t in tree_leaves(result):
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] * t.shape[-2] > \
                        (Watch.shape[-1] * Watch.shape[-2] if Watch.shape else 0):
                    Watch.shape = tuple(t.shape)
            return result

    with Watch():
        fn(q, k, v, is_causal, TILE)
    return Watch.shape, Watch.flops


def _name_the_mistake(fn, n: int, is_causal: bool, out, lse, want, want_lse) -> None:
    """:class:`Incorrect` naming the likely mistake behind a wrong result on ``n`` values, when one is seen."""
    import torch
    import torch.nn.functional as F

    from effitrain_helpers.engines.flash_attention import sdpa_with_lse

    if is_causal:
        q, k, v = _inputs(n, n)
        if torch.isnan(out[:, 0]).any() and not torch.isnan(out[:, 1:]).all():
            raise Incorrect(tr("causal mask off by one: the first query's row is NaN, so it saw no key at all. A "
                               "query at position i sees the keys at positions 0..i, its own included: mask "
                               "key > query, not key >= query."))
        ahead = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(n, n, dtype=torch.bool).tril(1))
        if _close(out, ahead):
            raise Incorrect(tr("causal mask off by one: each query also saw the key right after it. Mask the keys "
                               "whose position is greater than the query's (key > query)."))
        one_tile, one_lse = sdpa_with_lse(*_inputs(SIZES[-1], 1), True)
        got_one = _run(fn, *_inputs(SIZES[-1], 1), True)
        if _close(got_one[0], one_tile) and _close(got_one[1], one_lse):
            raise Incorrect(tr("causal: right within one tile ({one} values) but wrong over {n} values in tiles of "
                               "{tile}. The mask must compare global positions: query i + row with key j + column, "
                               "where i and j are where the two tiles start.", one=SIZES[-1], n=n, tile=TILE))
        return
    if n % TILE:
        multiple = _inputs(SIZES[1], 2)
        got, ref = _run(fn, *multiple, False), sdpa_with_lse(*multiple, False)
        if _close(got[0], ref[0]) and _close(got[1], ref[1]):
            raise Incorrect(tr("right when the tile divides n ({good} = {count} x {tile}) but wrong for n = {n}: the "
                               "last tile is shorter. Slice with x[:, i:i + tile] (Python stops at the end) and "
                               "never assume a full tile's length.", good=SIZES[1], count=SIZES[1] // TILE,
                               tile=TILE, n=n))
    unnormalised = _close(out * torch.exp(lse)[..., None], want * torch.exp(want_lse)[..., None])
    if (lse > want_lse + ATOL).any() and unnormalised:
        raise Incorrect(tr("the running sum l is not rescaled: when a tile raises the running max from m to m_new, "
                           "the sum so far was computed with exp(s - m) and must be multiplied by exp(m - m_new) "
                           "before the new tile's exp(s - m_new) are added; your l (and so the log-sum-exp) comes "
                           "out too large."))
    if _close(lse, want_lse):
        raise Incorrect(tr("the log-sum-exp is right but the output is not: the accumulated output must be rescaled "
                           "by exp(m - m_new) too, exactly like the running sum, before the new tile's p @ v is "
                           "added."))


def _check(fn) -> None:
    import torch

    from effitrain_helpers.engines.flash_attention import flash_forward, sdpa_with_lse

    if not callable(fn):
        raise Incorrect(tr("pass your function itself: q1.check(flash_forward); you gave {fn!r}.", fn=fn))
    if hands_over_to(fn, flash_forward):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="flash_forward"))
    n = SIZES[0]
    shape, flops = _watch(fn, *_inputs(n, 0), False)
    if shape and shape[-1] >= n and shape[-2] >= n:
        raise Incorrect(tr("for n = {n} your forward built a tensor of shape {shape}: the full n x n scores. A "
                           "tile loop only ever holds tile x tile scores ({tile} x {tile}): loop over tiles of "
                           "queries, and inside over tiles of keys.", n=n, shape=shape, tile=TILE))
    one_pass = 2 * 2 * BATCH * n * n * D  # q k^T and p v, each 2 n^2 d per batch row
    if flops > 1.5 * one_pass:
        raise Incorrect(tr("for n = {n} your forward's matrix products did {times:.1f} times the work of one pass "
                           "over the scores: each tile of queries (and of keys) must be visited once, stepping "
                           "by the tile: range(0, n, tile).", n=n, times=flops / one_pass))
    big = _inputs(SIZES[0], 3, LARGE)
    out, lse = _run(fn, *big, False)
    if not (torch.isfinite(out).all() and torch.isfinite(lse).all()):
        raise Incorrect(tr("with large scores (up to about 100) your output holds inf or NaN: exp(100) overflows "
                           "float32. Subtract the running max before exp: p = exp(s - m_new), and "
                           "lse = m + log(l)."))
    for is_causal in (False, True):
        for n in SIZES:
            q, k, v = _inputs(n, n)
            out, lse = _run(fn, q, k, v, is_causal)
            want, want_lse = sdpa_with_lse(q, k, v, is_causal)
            if _close(out, want) and _close(lse, want_lse):
                continue
            _name_the_mistake(fn, n, is_causal, out, lse, want, want_lse)
            where = tr("causal") if is_causal else tr("not causal")
            raise Incorrect(tr("{where}, n = {n}, tile = {tile}: your output differs from torch's "
                                      "scaled_dot_product_attention by up to {gap} and your log-sum-exp by up "
                                      "to {lse_gap} (tolerance: atol = {atol:g}, rtol = {rtol:g}).",
                                      where=where, n=n, tile=TILE, gap=_gap(out, want),
                                      lse_gap=_gap(lse, want_lse), atol=ATOL, rtol=RTOL))


q1 = Exercise(
    "8.1 q1: FlashAttention-2's tiled forward with the online softmax",
    _check,
    usage="q1.check(flash_forward)",
    api=True,
    checked=("checked on sizes the lesson does not show, causal and not, n a multiple of the tile and not: "
             "output and log-sum-exp equal to torch's CPU flash kernel, no n x n tensor built, each tile "
             "visited once, and no overflow with scores near 100."),
    hints=["Work one tile of queries at a time. For it keep three running quantities per query: the largest "
           "score seen so far, the sum of the exponentials of the scores minus that maximum, and the output "
           "weighted by those exponentials. Each tile of keys updates the three; divide at the very end.",
           "When a new tile raises the maximum, everything accumulated so far was computed against the old "
           "maximum: multiply it by exp(old - new) before adding the new tile's part. The log-sum-exp is the "
           "maximum plus the log of the sum. FlashAttention-2 paper (Dao 2023), Algorithm 1.",
           "For the causal case, a key is hidden from a query when its position is greater than the query's; "
           "positions are global (where the tile starts plus the row or column), and a tile of keys that lies "
           "entirely after the tile of queries can be skipped. torch.maximum, torch.exp, torch.log, "
           "Tensor.masked_fill and torch.arange are all you need."],
    solution_code=(
        "def flash_forward(q, k, v, is_causal, tile):\n"
        "    n, scale = q.shape[1], q.shape[-1] ** -0.5\n"
        "    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])\n"
        "    for i in range(0, n, tile):\n"
        "        qi = q[:, i:i + tile]\n"
        "        m, l = torch.full(qi.shape[:-1], -torch.inf), torch.zeros(qi.shape[:-1])\n"
        "        acc = torch.zeros_like(qi)\n"
        "        for j in range(0, min(n, i + tile) if is_causal else n, tile):\n"
        "            s = qi @ k[:, j:j + tile].transpose(1, 2) * scale\n"
        "            if is_causal:\n"
        "                later = torch.arange(j, j + s.shape[-1]) > torch.arange(i, i + s.shape[-2])[:, None]\n"
        "                s = s.masked_fill(later, -torch.inf)\n"
        "            m_new = torch.maximum(m, s.amax(-1))\n"
        "            p, rescale = torch.exp(s - m_new[..., None]), torch.exp(m - m_new)\n"
        "            l = l * rescale + p.sum(-1)\n"
        "            acc, m = acc * rescale[..., None] + p @ v[:, j:j + tile], m_new\n"
        "        out[:, i:i + tile], lse[:, i:i + tile] = acc / l[..., None], m + torch.log(l)\n"
        "    return out, lse\n"
        "\n\nq1.check(flash_forward)"
    ),
)


PREDICT = {"batch": 1, "heads": 32, "n": 8192, "d": 128}  # a long-context layer; causal, float32
MIB = 2**20


def _check_bytes(math_mib, flash_mib) -> None:
    """The MiB SDPA's math and flash kernels keep for backward at ``PREDICT``, from
    :func:`~effitrain_helpers.training.attention_memory.saved_bytes_theory` (measured equal at small n in the
    lesson), within 0.25 MiB; the usual slips named."""
    from effitrain_helpers.teach.exercises import as_number
    from effitrain_helpers.training.attention_memory import saved_bytes_theory

    math_mib, flash_mib = as_number(math_mib), as_number(flash_mib)
    b, h, n, d = PREDICT["batch"], PREDICT["heads"], PREDICT["n"], PREDICT["d"]
    math_want = saved_bytes_theory("sdpa math", b, h, n, d) / MIB
    flash_want = saved_bytes_theory("sdpa flash", b, h, n, d) / MIB
    near = lambda got, want: abs(got - want) <= 0.25  # noqa: E731
    if near(math_mib, flash_want) and near(flash_mib, math_want):
        raise Incorrect(tr("the two are swapped: the math kernel keeps the n x n probabilities, the flash kernel "
                           "only n log-sum-exps per head. Pass (math_mib, flash_mib)."))
    for got in (math_mib, flash_mib):
        if any(near(got * 4, want) for want in (math_want, flash_want)):
            raise Incorrect(tr("{got:g} is a quarter of the answer: you counted values, not bytes. A float32 value "
                               "takes 4 bytes.", got=got))
    square = b * h * n * n * 4 / MIB
    if near(math_mib, square):
        raise Incorrect(tr("{got:g} MiB is only the n x n probabilities: autograd also keeps q, k and v "
                           "(3 x n x d values per head) for backward.", got=math_mib))
    if not near(math_mib, math_want):
        raise Incorrect(tr("the math kernel's bytes: {got:g} MiB is not it. Count, per head, the n x n "
                           "probabilities and q, k and v, in float32.", got=math_mib))
    inputs = 3 * b * h * n * d * 4 / MIB
    if near(flash_mib, inputs + b * h * n * 4 / MIB):
        raise Incorrect(tr("{got:g} MiB leaves out the output: FlashAttention's backward needs O too "
                           "(D = rowsum(dO * O)), so it is kept with q, k, v and the log-sum-exp.", got=flash_mib))
    if near(flash_mib, flash_want - b * h * n * 4 / MIB):
        raise Incorrect(tr("{got:g} MiB leaves out the log-sum-exp: one float32 per query and head, what the "
                           "backward recomputes the probabilities from.", got=flash_mib))
    if not near(flash_mib, flash_want):
        raise Incorrect(tr("the flash kernel's bytes: {got:g} MiB is not it. Count, per head, q, k, v, the output "
                           "and the log-sum-exp, in float32.", got=flash_mib))


q2 = Exercise(
    "8.1 q2: predict what SDPA's two CPU kernels keep for backward at n = 8192",
    _check_bytes,
    usage="q2.check(math_mib, flash_mib)",
    checked=("checked against the theory that the lesson's measurement matched byte for byte, within "
             "0.25 MiB."),
    hints=["List what each kernel's backward needs. The math kernel keeps the probabilities; the flash kernel "
           "recomputes them from one number per query.",
           "Per head: q, k, v are n x d values each; the probabilities n x n; the output n x d; the log-sum-exp "
           "n. Multiply by the number of heads and the batch, and by the bytes of a float32.",
           "The table above the exercise holds the measured bytes at small n, and the theory next to them: "
           "the same counting, with n = 8192, d = 128 and 32 heads."],
    solution_code=(
        "heads, n, d, value = 32, 8192, 128, 4\n"
        "math_mib = heads * (3 * n * d + n * n) * value / 2**20\n"
        "flash_mib = heads * (4 * n * d + n) * value / 2**20\n"
        "q2.check(math_mib, flash_mib)"
    ),
)
