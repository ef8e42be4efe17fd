"""What does splitting the sequence across ranks save, and what does it send? (lesson 8.3)

The runs of lesson 8.3, each inside every rank of a group started with
:func:`~effitrain_helpers.processes.launch.launch`, next to their theory:

- :func:`measured_sp_run`: one block (:class:`~effitrain_helpers.engines.sequence_parallel.Block`) whole, with
  tensor parallelism and with sequence parallelism: outputs and gradients against the whole block, the bytes of
  each collective, and the bytes kept for backward per rank (saved-tensor hooks), against :func:`sp_saved_theory`
  and :func:`sp_bytes_theory`;
- :func:`measured_ring_run`: ring attention
  (:mod:`~effitrain_helpers.engines.ring_attention`) on this rank's part of a sequence: output, log-sum-exp and
  gradients against attention on the whole sequence, the bytes this rank sends forward and backward
  (:func:`ring_bytes_theory`), and its work (query-key pairs attended, compute seconds).
"""

from __future__ import annotations

from typing import Any

import torch

from effitrain_helpers.engines import ring_attention as ring
from effitrain_helpers.engines.sequence_parallel import Block
from effitrain_helpers.training.tensor_parallel_run import mlp_block, tokens

FLOAT32_BYTES = 4
SP_COLLECTIVES = ("all_reduce", "all_gather_single", "reduce_scatter_single")


def sp_saved_theory(mode: str, n_tokens: int, width: int, hidden: int, world: int,
                    mask_bytes: int = FLOAT32_BYTES) -> dict[str, int]:
    """Bytes one rank keeps for backward in one block with dropout on (float32 values), by region:

    - ``norm and dropouts``: the norm's input (4 s h) and its mean and 1/std (4 s each), the two dropout masks
      (``mask_bytes`` s h each: on a CPU torch's dropout multiplies by a float32 mask, 4 bytes a value; on a GPU
      the fused ``native_dropout`` keeps a one-byte mask); s = the tokens this rank runs them on (all of them, or
      s/N with ``"sp"``);
    - ``mlp``: the first layer's input (4 s h, the whole sequence: with ``"sp"`` it is the gathered tensor), GELU's
      input and the second layer's input (4 s H/N each; H/1 for ``"whole"``)."""
    s = n_tokens // world if mode == "sp" else n_tokens
    share = hidden if mode == "whole" else hidden // world
    return {"norm and dropouts": FLOAT32_BYTES * s * width + 2 * FLOAT32_BYTES * s + 2 * mask_bytes * s * width,
            "mlp": FLOAT32_BYTES * n_tokens * width + 2 * FLOAT32_BYTES * n_tokens * share}


def sp_bytes_theory(mode: str, n_tokens: int, width: int, world: int) -> dict[str, Any]:
    """Payload bytes of one forward and backward of the block, per collective, and the bytes each rank sends
    over a ring: an all-reduce of P bytes sends 2 (N - 1)/N P, an all-gather or a reduce-scatter (N - 1)/N P."""
    payload = FLOAT32_BYTES * n_tokens * width
    if mode == "tp":
        by = {"all_reduce": 2 * payload}
        sent = 2 * 2 * (world - 1) / world * payload
    else:
        by = {"all_gather_single": 2 * payload, "reduce_scatter_single": 2 * payload}
        sent = 4 * (world - 1) / world * payload
    return {"by_collective": by, "sent_per_rank": sent}


def _saved_by_region(block: Block, x) -> dict[str, int]:
    """The bytes ``block`` keeps for backward on ``x``, split into its norm-and-dropout region and its MLP."""
    from effitrain_helpers.measure.saved_memory import SavedTensors

    from effitrain_helpers.engines.sequence_parallel import GatherSequence
    from effitrain_helpers.engines.tensor_parallel import CopyToRanks

    params = list(block.parameters())
    with SavedTensors(parameters=params) as total:
        block(x)
    h = block.drop_in(block.norm(x)).detach().requires_grad_()
    with SavedTensors(parameters=params) as mlp_only:  # the MLP alone, on the same input
        if block.mode == "whole":
            block.mlp(h)
        else:
            enter = CopyToRanks if block.mode == "tp" else GatherSequence
            block.down(torch.nn.functional.gelu(block.up(enter.apply(h))))
    return {"norm and dropouts": total.activation_bytes - mlp_only.activation_bytes, "mlp": mlp_only.activation_bytes}


def measured_sp_run(width: int = 64, hidden: int = 256, n_tokens: int = 64, dropout: float = 0.1) -> dict:
    """In each rank: the block whole, with tensor parallelism and with sequence parallelism.

    With dropout off (so the three compute the same function): the largest difference of each split block's
    output and input gradient from the whole block's (this rank's tokens), and the payload bytes of each
    collective in one forward and backward. With ``dropout`` on: the bytes each kept for backward, by region.
    Returns ``rank``, ``world``, ``gap`` and ``grad_gap`` by mode, ``payload`` (by mode, by collective),
    ``saved`` (by mode, by region)."""
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    x, mlp = tokens(n_tokens, width), mlp_block(width, hidden)
    mine = slice(rank * n_tokens // world, (rank + 1) * n_tokens // world)
    result: dict[str, Any] = {"rank": rank, "world": world, "gap": {}, "grad_gap": {}, "payload": {}, "saved": {}}
    whole_x = x.clone().requires_grad_()
    whole = Block(mlp, 0.0)(whole_x)
    whole.pow(2).sum().backward()
    for mode in ("tp", "sp"):
        block = Block(mlp, 0.0, mode, rank, world)
        inputs = (x[mine] if mode == "sp" else x).clone().requires_grad_()
        counter = CommunicationCounter(collectives=SP_COLLECTIVES).watch()
        try:
            out = block(inputs)
            out.pow(2).sum().backward()
        finally:
            counter.stop()
        rows = slice(None) if mode == "sp" else mine
        result["gap"][mode] = float((out[rows] - whole[mine]).detach().abs().max())
        result["grad_gap"][mode] = float((inputs.grad[rows] - whole_x.grad[mine]).abs().max())
        result["payload"][mode] = dict(counter.bytes_by_collective)
    for mode in ("whole", "tp", "sp"):
        block = Block(mlp, dropout, mode, rank, world)
        inputs = (x[mine] if mode == "sp" else x).clone().requires_grad_()
        result["saved"][mode] = _saved_by_region(block, inputs)
    return result


def ring_bytes_theory(n: int, d: int, world: int, batch: int = 1) -> dict[str, int]:
    """Bytes one rank sends (float32): a key block and a value block, ``batch x n/N x d`` each, per hop; N - 1
    hops forward; backward, N - 1 hops of the blocks and N hops of their gradients (the last one home)."""
    block = 2 * FLOAT32_BYTES * batch * (n // world) * d
    return {"per_step": block, "forward": (world - 1) * block, "backward": (world - 1) * block + world * block}


def measured_ring_run(n: int = 96, d: int = 16, batch: int = 2, is_causal: bool = True, layout: str = "contiguous",
                      step=ring.ring_step, merge_fn=ring.merge, backward: bool = True, seed: int = 0) -> dict:
    """In each rank: ring attention on this rank's part (``layout``) of a ``(batch, n, d)`` sequence drawn from
    ``seed`` (the same on every rank), the hops made with ``step`` and the partials merged with ``merge_fn``.

    Returns ``rank``, ``world``, ``layout``; ``out_gap`` and ``lse_gap`` (largest difference from SDPA's CPU flash
    kernel on the whole sequence, this rank's rows); ``pairs`` and ``compute_seconds`` (its work);
    ``forward_bytes`` (what it sent, counted on ``isend``); with ``backward``, ``grad_gaps`` (q, k, v against
    autograd through SDPA on the whole sequence) and ``backward_bytes``."""
    import torch.distributed as dist
    import torch.nn.functional as F

    from effitrain_helpers.engines.flash_attention import sdpa_with_lse
    from effitrain_helpers.measure.communication import CommunicationCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, n, d, generator=generator) for _ in range(3))
    part = lambda t: ring.split_sequence(t, rank, world, layout)  # noqa: E731
    want, want_lse = sdpa_with_lse(q, k, v, is_causal)
    ring.ring_forward(part(q), part(k), part(v), is_causal, layout, step, merge_fn)  # warm-up: not timed
    counter = CommunicationCounter(collectives=("isend",)).watch()
    try:
        out, lse, stats = ring.ring_forward(part(q), part(k), part(v), is_causal, layout, step, merge_fn)
        forward_bytes = counter.bytes
        result = {"rank": rank, "world": world, "layout": layout, "n": n, "d": d, "batch": batch,
                  "out_gap": float((out - part(want)).abs().max()), "lse_gap": float((lse - part(want_lse)).abs().max()),
                  "pairs": stats["pairs"], "compute_seconds": stats["compute_seconds"], "steps": stats["steps"],
                  "forward_bytes": forward_bytes}
        if backward:
            grad = torch.randn(batch, n, d, generator=generator)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            whole = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, is_causal=is_causal), leaves, grad)
            mine = [part(t).requires_grad_() for t in (q, k, v)]
            out = ring.RingAttention.apply(*mine, is_causal, layout)
            before = counter.bytes
            grads = torch.autograd.grad(out, mine, part(grad))
            result["backward_bytes"] = counter.bytes - before
            result["grad_gaps"] = {name: float((g - part(w)).abs().max()) for name, g, w in zip("qkv", grads, whole)}
    finally:
        counter.stop()
    return result
