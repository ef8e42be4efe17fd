"""How does attention run when the sequence itself is split across ranks? Ring attention (lesson 8.3)

Context parallelism (Liu et al. 2023, "Ring Attention") splits a
sequence of ``n`` tokens over N ranks. Each rank keeps its own queries for the whole run; the key/value blocks
travel round the ring, one hop per step (rank r sends to r + 1 and receives from r - 1), so after N - 1 hops every
rank has seen every block. Each block gives a *partial* attention (an output and a log-sum-exp, FlashAttention-2's
contract from lesson 8.1), and two partials merge exactly by their log-sum-exps:

    lse = log(exp(lse_a) + exp(lse_b)),   out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse).

Causal attention makes the work uneven: with the sequence cut into N contiguous pieces, rank r's queries see
r + 1/2 pieces of keys (rank 0 half a piece, the last rank N - 1/2). The **zig-zag** split cuts the sequence into
2N chunks and gives rank r chunks r and 2N - 1 - r (as Llama 3's context parallelism does): every rank then
attends the same number of pairs.

Everything takes ``(batch, n, d)`` tensors (heads folded into the batch, as in lesson 8.1):

- :func:`merge`, :func:`ring_step`: the two pieces the learner writes (the exercise of lesson 8.3);
- :func:`chunk_ids`, :func:`split_sequence`, :func:`join_sequence`: which chunks of the sequence a rank holds;
- :func:`ring_forward`, :func:`ring_backward`: the ring, forward and backward (the gradients of the keys and
  values travel round the ring with their block and take one last hop home); :class:`RingAttention` joins them
  in a ``torch.autograd.Function``;
- :func:`attended_pairs`: the (query, key) pairs each rank attends, from the same block rules (the theory of the
  work each rank does).
"""

from __future__ import annotations

import time

import torch

from effitrain_helpers.core.language import tr
from effitrain_helpers.engines.flash_attention import TILE, flash_backward, flash_forward

LAYOUTS = ("contiguous", "zigzag")


def merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions of the same queries over two disjoint sets of keys, merged: ``(out, lse)``.

    ``out_*`` are ``(batch, n, d)``, ``lse_*`` ``(batch, n)``; each partial is normalised over its own keys, so
    each is weighted by its share of the total, exp(lse_part - lse)."""
    lse = torch.logaddexp(lse_a, lse_b)
    out = out_a * torch.exp(lse_a - lse)[..., None] + out_b * torch.exp(lse_b - lse)[..., None]
    return out, lse


def ring_step(k, v):
    """One hop of the ring for ``(k, v)``: send this rank's block to the next rank, receive the previous rank's,
    both posted before either is waited on (two blocking sends would wait for each other: a deadlock).
    Returns the received ``(k, v)``."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    after, before = (rank + 1) % world, (rank - 1) % world
    k_in, v_in = torch.empty_like(k), torch.empty_like(v)
    requests = [dist.isend(k.contiguous(), after), dist.isend(v.contiguous(), after),
                dist.irecv(k_in, before), dist.irecv(v_in, before)]
    for request in requests:
        request.wait()
    return k_in, v_in


def _check_layout(layout: str, n: int, world: int) -> int:
    """The number of chunks the sequence is cut into; a bad layout or length named in one line."""
    if layout not in LAYOUTS:
        raise ValueError(tr("layout={layout!r} is not one of {layouts}: choose 'contiguous' (one piece per rank) "
                            "or 'zigzag' (chunks r and 2N - 1 - r).", layout=layout, layouts=", ".join(LAYOUTS)))
    pieces = world if layout == "contiguous" else 2 * world
    if n % pieces:
        raise ValueError(tr("n={n} is not a multiple of {pieces} (the {layout} layout over {world} ranks cuts the "
                            "sequence into {pieces} equal chunks): choose n divisible by {pieces}.",
                            n=n, pieces=pieces, layout=layout, world=world))
    return pieces


def chunk_ids(rank: int, world: int, layout: str) -> tuple[int, ...]:
    """Which chunks of the sequence rank ``rank`` holds: ``(rank,)`` of N contiguous pieces, or
    ``(rank, 2N - 1 - rank)`` of 2N chunks for the zig-zag layout."""
    return (rank,) if layout == "contiguous" else (rank, 2 * world - 1 - rank)


def split_sequence(x, rank: int, world: int, layout: str):
    """Rank ``rank``'s part of ``x`` ``(batch, n, ...)`` along the sequence, its chunks side by side."""
    pieces = _check_layout(layout, x.shape[1], world)
    chunks = x.chunk(pieces, dim=1)
    return torch.cat([chunks[i] for i in chunk_ids(rank, world, layout)], dim=1)


def join_sequence(parts: list, layout: str):
    """The whole sequence back from every rank's part (rank order), the inverse of :func:`split_sequence`."""
    world = len(parts)
    if layout == "contiguous":
        return torch.cat(parts, dim=1)
    halves = [p.chunk(2, dim=1) for p in parts]
    return torch.cat([halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))], dim=1)


def _visible(q_chunk: int, k_chunk: int, is_causal: bool) -> str | None:
    """How a chunk of queries sees a chunk of keys: ``"all"``, ``"causal"`` (the same chunk: the diagonal) or
    None (every key after every query: skipped)."""
    if not is_causal or k_chunk < q_chunk:
        return "all"
    return "causal" if k_chunk == q_chunk else None


def _pairs(q_len: int, k_len: int, kind: str) -> int:
    return q_len * k_len if kind == "all" else q_len * (q_len + 1) // 2


def ring_forward(q, k, v, is_causal: bool = False, layout: str = "contiguous", step=ring_step, merge_fn=merge,
                 tile: int = TILE) -> tuple:
    """This rank's queries ``q`` against every rank's keys and values, the blocks travelling round the ring.

    ``q``, ``k``, ``v``: this rank's part ``(batch, n/N, d)`` (:func:`split_sequence`). Each step attends the
    block held (lesson 8.1's :func:`flash_forward`, per pair of chunks, causal on the diagonal, skipped above it),
    merges it into the running result with ``merge_fn``, then passes the block on with ``step``. Returns
    ``(out, lse, stats)``; ``stats``: ``pairs`` (query-key pairs attended), ``compute_seconds``,
    ``steps`` (hops made)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    ids = chunk_ids(rank, world, layout)
    qs = q.chunk(len(ids), dim=1)
    outs, lses = [None] * len(ids), [None] * len(ids)
    pairs, seconds, hops = 0, 0.0, 0
    for s in range(world):
        source = (rank - s) % world
        ks, vs = k.chunk(len(ids), dim=1), v.chunk(len(ids), dim=1)
        start = time.perf_counter()
        for i, q_chunk in enumerate(ids):
            for j, k_chunk in enumerate(chunk_ids(source, world, layout)):
                kind = _visible(q_chunk, k_chunk, is_causal)
                if kind is None:
                    continue
                out, lse = flash_forward(qs[i], ks[j], vs[j], kind == "causal", tile)
                pairs += q.shape[0] * _pairs(qs[i].shape[1], ks[j].shape[1], kind)
                outs[i], lses[i] = (out, lse) if outs[i] is None else merge_fn(outs[i], lses[i], out, lse)
        seconds += time.perf_counter() - start
        if s < world - 1:
            k, v = step(k, v)
            hops += 1
    stats = {"pairs": pairs, "compute_seconds": seconds, "steps": hops}
    return torch.cat(outs, dim=1), torch.cat(lses, dim=1), stats


def ring_backward(q, k, v, out, lse, grad_out, is_causal: bool = False, layout: str = "contiguous",
                  step=ring_step, tile: int = TILE) -> tuple:
    """The gradients of this rank's ``q``, ``k``, ``v``: the blocks travel round the ring again, and with each
    block the gradients of its keys and values, to which every rank adds its queries' share (lesson 8.1's
    :func:`flash_backward`, with the *final* log-sum-exp, so each probability comes out exact). After N - 1 hops
    a block's gradients are one hop short of their owner: one more hop takes them home. Returns
    ``(dq, dk, dv)``."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    ids = chunk_ids(rank, world, layout)
    split = lambda t: t.chunk(len(ids), dim=1)  # noqa: E731
    qs, outs, lses, grads = split(q), split(out), split(lse), split(grad_out)
    dqs = [torch.zeros_like(part) for part in qs]
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for s in range(world):
        source = (rank - s) % world
        ks, vs, dks, dvs = split(k), split(v), split(dk), split(dv)
        for i, q_chunk in enumerate(ids):
            for j, k_chunk in enumerate(chunk_ids(source, world, layout)):
                kind = _visible(q_chunk, k_chunk, is_causal)
                if kind is None:
                    continue
                dq_part, dk_part, dv_part = flash_backward(qs[i], ks[j], vs[j], outs[i], lses[i], grads[i],
                                                           kind == "causal", tile)
                dqs[i] += dq_part
                dks[j].add_(dk_part)  # views of dk, dv: added in place
                dvs[j].add_(dv_part)
        if s < world - 1:
            k, v = step(k, v)
        dk, dv = step(dk, dv)  # with their block; the last hop takes them home
    return torch.cat(dqs, dim=1), dk, dv


class RingAttention(torch.autograd.Function):
    """``RingAttention.apply(q, k, v, is_causal, layout)`` in each rank of a group: :func:`ring_forward`, and
    :func:`ring_backward` from what it saved (this rank's q, k, v, output and log-sum-exp)."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, layout="contiguous"):
        out, lse, _ = ring_forward(q, k, v, is_causal, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.layout = is_causal, layout
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*ring_backward(q, k, v, out, lse, grad_out.contiguous(), ctx.is_causal, ctx.layout), None, None)


def attended_pairs(n: int, world: int, layout: str, is_causal: bool = True, batch: int = 1) -> list[int]:
    """The (query, key) pairs each rank attends under ``layout`` (the same block rules as the ring: full blocks
    below the diagonal, the diagonal chunk's lower triangle, nothing above): the work theory, rank by rank."""
    pieces = _check_layout(layout, n, world)
    size = n // pieces
    return [batch * sum(_pairs(size, size, kind) for q_chunk in chunk_ids(r, world, layout)
                        for source in range(world) for k_chunk in chunk_ids(source, world, layout)
                        if (kind := _visible(q_chunk, k_chunk, is_causal)))
            for r in range(world)]
