"""How long does a message take here, and what does that predict for a ring, a tree and a parameter server
as N grows? (lesson 6.1)

The latency-bandwidth (alpha-beta, or Hockney) model: sending ``n`` bytes in one message costs
``alpha + n * beta``, ``alpha`` the fixed cost of a message (latency: the call, the wake-up, the network's
round) and ``beta`` the seconds per byte (1 / bandwidth). An algorithm that takes ``steps`` messages one
after another, each of ``b`` bytes, costs ``steps * (alpha + b * beta)``.

- :func:`ping_pong`: run in 2 processes, the median one-way time of a message of each size (gloo, here);
- :func:`fit_alpha_beta`: ``alpha`` and ``beta`` from the smallest and the largest message;
- :func:`model_seconds`: an all-reduce of ``n`` bytes over N ranks, by algorithm (:data:`ALGORITHMS`):
  a **ring**, 2(N-1) steps of n/N bytes (its bytes per rank stay below 2n whatever N, but its steps, and
  so its latency, grow with N); a binomial **tree**, a reduce up and a broadcast down, 2 ceil(log2 N) steps
  of the whole message; a **parameter server** (direct), rank 0 receiving and then sending N-1 whole
  messages one after another;
- :func:`crossover_bytes`: the message size above which the ring beats the tree at N ranks.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Sequence

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.validate import positive_int

ALGORITHMS = (msg("ring"), msg("tree"), msg("parameter server"))  # keys; language.term shows them translated


def ping_pong(sizes: Sequence[int], repeats: int = 20) -> dict[int, float]:
    """In each of 2 ranks: for every size (bytes), ``repeats`` round trips of a uint8 message between rank 0
    and rank 1 (``send`` then ``recv``), after one untimed; the median one-way seconds (half a round trip),
    measured on rank 0 (rank 1 returns an empty dict)."""
    import torch
    import torch.distributed as dist

    if dist.get_world_size() != 2:
        raise ValueError(tr("ping_pong runs in 2 processes, not {n}: launch it with num_processes=2.",
                            n=dist.get_world_size()))
    rank, out = dist.get_rank(), {}
    for size in sizes:
        buffer, seconds = torch.zeros(positive_int("size", size, example="sizes=[8, 2**20]"),
                                      dtype=torch.uint8), []
        for i in range(repeats + 1):
            start = time.perf_counter()
            if rank == 0:
                dist.send(buffer, 1)
                dist.recv(buffer, 1)
            else:
                dist.recv(buffer, 0)
                dist.send(buffer, 0)
            if i:
                seconds.append((time.perf_counter() - start) / 2)
        if rank == 0:
            out[size] = statistics.median(seconds)
    return out


def fit_alpha_beta(times: dict[int, float]) -> tuple[float, float]:
    """``(alpha, beta)`` of ``seconds = alpha + bytes * beta`` through the smallest and the largest size of
    ``times`` ({bytes: seconds}, at least two sizes): the smallest message is nearly all latency, the largest
    nearly all bandwidth, so the line through them is not pulled by the middle sizes' noise."""
    if len(times) < 2:
        raise ValueError(tr("fit_alpha_beta needs times for at least 2 message sizes, got {n}: measure a small "
                            "and a large one.", n=len(times)))
    small, large = min(times), max(times)
    beta = (times[large] - times[small]) / (large - small)
    return times[small] - small * beta, beta


def _steps(algorithm: str, nbytes: float, world: int) -> tuple[int, float]:
    """``(messages one after another, bytes in each)`` of an all-reduce of ``nbytes`` over ``world`` ranks."""
    if algorithm == "ring":
        return 2 * (world - 1), nbytes / world
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(world)), nbytes
    if algorithm == "parameter server":
        return 2 * (world - 1), nbytes
    raise ValueError(tr("algorithm={value!r} is not one of {allowed}.", value=algorithm,
                        allowed=", ".join(ALGORITHMS)))


def model_seconds(algorithm: str, nbytes: float, world: int, alpha: float, beta: float) -> float:
    """The alpha-beta model's time of an all-reduce of ``nbytes`` over ``world`` ranks (see the module)."""
    world = positive_int("world", world, example="world=8")
    if world == 1:
        return 0.0
    steps, each = _steps(algorithm, nbytes, world)
    return steps * (alpha + each * beta)


def crossover_bytes(world: int, alpha: float, beta: float) -> float:
    """The message size (bytes) at which a ring and a binomial tree take the same time over ``world`` ranks:
    below it the tree's fewer steps win, above it the ring's fewer bytes; ``inf`` where the tree always wins
    (never here for N > 2) and 0 where the ring always does (N <= 2: the same steps)."""
    ring_steps, tree_steps = 2 * (world - 1), 2 * math.ceil(math.log2(world))
    extra_latency = (ring_steps - tree_steps) * alpha            # what the ring's extra steps cost
    saved_per_byte = (tree_steps - ring_steps / world) * beta    # what its smaller messages save, per byte
    if extra_latency <= 0:
        return 0.0
    return extra_latency / saved_per_byte if saved_per_byte > 0 else math.inf
