"""Which expert does each token go to, and how do tokens reach experts on other ranks? (lesson 8.4)

A mixture-of-experts (MoE) layer replaces one feed-forward block by ``E`` of them (the experts) and a router
that sends each token to ``top_k`` of them:

- :func:`route`: the router's softmax, the top-k experts of each token, the capacity of each expert
  (:func:`capacity`, GShard's and Switch Transformer's ``ceil(capacity_factor * tokens * k / E)``), the
  assignments past it dropped (first choices before second choices, each in token order, as GShard orders
  them), and Switch Transformer's load-balancing loss ``E * sum_e f_e * P_e`` (Fedus et al. 2022, eq. 4;
  ``f_e`` counts all ``k`` choices, before capacity, over ``n * k``, so an even router gives 1 for any k).
  The gate of an assignment is the router's probability of that expert (Switch's form, not renormalised
  over the k chosen);
- :class:`MoELayer`: the layer in one process: every kept assignment through its expert, the outputs
  weighted by their gates and summed per token (a dropped assignment adds nothing: the residual connection
  around the layer carries that token on);
- expert parallelism: rank r holds experts ``r*E/W ... (r+1)*E/W - 1`` (:class:`ExpertShard`), routes its
  own tokens, and :func:`dispatch` sends each kept assignment to the rank of its expert, :func:`combine`
  brings the results back. Both use ``torch.distributed.all_to_all_single`` through :func:`all_to_all`, an
  autograd Function whose backward is the all-to-all back, with the splits swapped.

Weights: expert ``e`` is ``relu(x @ w1[e]) @ w2[e]``; the router is ``x @ router.T``; all float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from effitrain_helpers.core.language import tr
from effitrain_helpers.core.validate import positive_int


def capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """The most assignments one expert takes from ``tokens`` tokens: ``ceil(capacity_factor * tokens * top_k /
    num_experts)``; a factor of 1.0 is exactly an even share."""
    return math.ceil(capacity_factor * tokens * top_k / num_experts)


@dataclass
class Routing:
    """Where a batch of ``n`` tokens goes: one entry per kept assignment (``token``, ``expert``, ``gate``), and
    per expert the assignments wanted (before capacity) and kept."""

    token: torch.Tensor  # (m,) which token each kept assignment carries
    expert: torch.Tensor  # (m,) to which expert
    gate: torch.Tensor  # (m,) the router's probability of that expert for that token (differentiable)
    wanted: torch.Tensor  # (E,) assignments each expert was chosen for
    kept: torch.Tensor  # (E,) assignments each expert takes, at most ``capacity``
    capacity: int
    aux_loss: torch.Tensor  # Switch Transformer's load-balancing loss, 1.0 when perfectly even

    @property
    def dropped(self) -> int:
        """Assignments past their expert's capacity (each one token's choice left out)."""
        return int(self.wanted.sum() - self.kept.sum())


def route(x: torch.Tensor, router: torch.Tensor, top_k: int, capacity_factor: float) -> Routing:
    """Route the ``(n, d)`` tokens ``x`` with the ``(E, d)`` router weights: see the module's docstring."""
    num_experts = router.shape[0]
    if not 1 <= top_k <= num_experts:
        raise ValueError(tr("top_k={top_k} must be between 1 and the number of experts ({experts}).",
                            top_k=top_k, experts=num_experts))
    n = x.shape[0]
    probs = torch.softmax(x @ router.T, dim=-1)  # (n, E)
    gates, choices = probs.topk(top_k, dim=-1)  # (n, k)
    expert = choices.T.reshape(-1)  # all first choices in token order, then all second choices, ...
    token = torch.arange(n).repeat(top_k)
    gate = gates.T.reshape(-1)
    one_hot = F.one_hot(expert, num_experts)
    position = (one_hot.cumsum(0) - 1).gather(1, expert[:, None]).squeeze(1)  # place in the expert's queue
    cap = capacity(n, num_experts, top_k, capacity_factor)
    keep = position < cap
    wanted = one_hot.sum(0)
    share = wanted.float() / max(n * top_k, 1)  # f_e
    aux = num_experts * (share * probs.mean(0)).sum() if n else probs.sum() * 0
    return Routing(token[keep], expert[keep], gate[keep], wanted, torch.bincount(expert[keep], minlength=num_experts),
                   cap, aux)


def expert_ffn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert: ``relu(x @ w1) @ w2``."""
    return torch.relu(x @ w1) @ w2


def run_experts(x: torch.Tensor, counts: list[int], w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """``x`` in consecutive chunks of ``counts`` rows, chunk ``i`` through expert ``i % len(w1)`` (the layout
    :func:`dispatch` delivers: by source rank, then by local expert)."""
    pieces = x.split(list(counts))
    return torch.cat([expert_ffn(p, w1[i % len(w1)], w2[i % len(w1)]) for i, p in enumerate(pieces)])


class MoELayer(torch.nn.Module):
    """A mixture-of-experts feed-forward layer in one process; ``forward(x)`` returns ``(output, routing)``.
    Built from ``seed`` alone, so every rank can build the same one."""

    def __init__(self, d: int, hidden: int, num_experts: int, top_k: int = 2, capacity_factor: float = 1.25,
                 seed: int = 0):
        super().__init__()
        for name, value in (("d", d), ("hidden", hidden), ("num_experts", num_experts), ("top_k", top_k)):
            positive_int(name, value)
        generator = torch.Generator().manual_seed(seed)
        self.top_k, self.capacity_factor = top_k, capacity_factor
        self.router = torch.nn.Parameter(torch.randn(num_experts, d, generator=generator) / d**0.5)
        self.w1 = torch.nn.Parameter(torch.randn(num_experts, d, hidden, generator=generator) / d**0.5)
        self.w2 = torch.nn.Parameter(torch.randn(num_experts, hidden, d, generator=generator) / hidden**0.5)

    @property
    def num_experts(self) -> int:
        return self.router.shape[0]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Routing]:
        routing = route(x, self.router, self.top_k, self.capacity_factor)
        out = x.new_zeros(x.shape)
        for e in range(self.num_experts):
            mine = routing.expert == e
            token = routing.token[mine]
            y = expert_ffn(x[token], self.w1[e], self.w2[e])
            out = out.index_add(0, token, routing.gate[mine, None] * y)
        return out, routing


class ExpertShard(torch.nn.Module):
    """This rank's experts of ``layer`` (a copy: rank ``rank`` of ``world`` holds experts
    ``rank * E / world`` to ``(rank + 1) * E / world - 1``) and a replica of its router."""

    def __init__(self, layer: MoELayer, rank: int, world: int):
        super().__init__()
        if layer.num_experts % world:
            raise ValueError(tr("{experts} experts do not split evenly over {world} ranks: choose a number of "
                                "experts that is a multiple of the number of ranks.",
                                experts=layer.num_experts, world=world))
        local = layer.num_experts // world
        self.first, self.local, self.num_experts = rank * local, local, layer.num_experts
        self.top_k, self.capacity_factor = layer.top_k, layer.capacity_factor
        self.router = torch.nn.Parameter(layer.router.detach().clone())
        self.w1 = torch.nn.Parameter(layer.w1.detach()[self.first:self.first + local].clone())
        self.w2 = torch.nn.Parameter(layer.w2.detach()[self.first:self.first + local].clone())

    def forward(self, x: torch.Tensor, dispatch=None, combine=None) -> tuple[torch.Tensor, Routing]:
        """This rank's tokens ``x`` through the whole layer: route here, experts wherever they live. Every rank
        of the group must call it (``dispatch`` and ``combine``: the learner's, or this module's)."""
        dispatch, combine = dispatch or globals()["dispatch"], combine or globals()["combine"]
        routing = route(x, self.router, self.top_k, self.capacity_factor)
        received, counts, plan = dispatch(x[routing.token], routing.expert, self.num_experts)
        y = run_experts(received, counts.reshape(-1).tolist(), self.w1, self.w2)
        return combine(y, plan, routing.gate, routing.token, x.shape[0]), routing


class AllToAll(torch.autograd.Function):
    """``torch.distributed.all_to_all_single`` with a gradient: forward sends ``input_splits[r]`` rows to rank
    r and receives ``output_splits[r]`` from it; backward sends the gradients back the same way reversed
    (the splits swapped)."""

    @staticmethod
    def forward(ctx, x, output_splits, input_splits):
        import torch.distributed as dist

        ctx.splits = output_splits, input_splits
        out = x.new_empty(sum(output_splits), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        output_splits, input_splits = ctx.splits
        back = grad.new_empty(sum(input_splits), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), input_splits, output_splits)
        return back, None, None


def all_to_all(x: torch.Tensor, output_splits: list[int], input_splits: list[int]) -> torch.Tensor:
    """:class:`AllToAll` applied: the rows of ``x`` exchanged, differentiable."""
    return AllToAll.apply(x, list(output_splits), list(input_splits))


@dataclass
class Plan:
    """What :func:`combine` needs from :func:`dispatch`: the permutation that sorted the assignments by expert,
    and the rows sent to and received from each rank."""

    order: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]


def dispatch(rows: torch.Tensor, expert: torch.Tensor, num_experts: int):
    """Send each row to the rank holding its expert. Returns ``(received, counts, plan)``: the rows this rank's
    experts must process, by source rank then by local expert; ``counts[s, e]`` of them came from rank s for
    local expert e; ``plan`` for :func:`combine`. First the counts (one all-to-all of E integers), then the
    rows (one all-to-all with uneven splits)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    order = torch.argsort(expert, stable=True)  # grouped by expert, so by destination rank
    send = torch.bincount(expert, minlength=num_experts)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)  # E / world counts to each rank, E / world from each
    counts = recv.view(world, -1)
    send_splits, recv_splits = send.view(world, -1).sum(1).tolist(), counts.sum(1).tolist()
    received = all_to_all(rows[order], recv_splits, send_splits)
    return received, counts, Plan(order, send_splits, recv_splits)


def combine(y: torch.Tensor, plan: Plan, gate: torch.Tensor, token: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """The experts' outputs ``y`` (in the order :func:`dispatch` delivered) back to the ranks they came from,
    un-permuted, weighted by their gates and summed per token: ``(num_tokens, d)``."""
    back = all_to_all(y, plan.send_splits, plan.recv_splits)
    out = y.new_zeros(num_tokens, y.shape[1])
    return out.index_add(0, token[plan.order], gate[plan.order, None] * back)
