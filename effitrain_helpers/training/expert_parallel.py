"""Does the expert-parallel layer compute what the one-process layer computes, how are tokens spread over the
experts, and how many bytes cross between ranks? (lesson 8.4, ``effitrain experts``)

:func:`run` starts ``processes`` real gloo ranks. Each builds the same :class:`~effitrain_helpers.engines.experts.
MoELayer` from one seed and every rank's batch (rank r has ``tokens[r]`` tokens, seeded by r), then:

- the **reference**: the whole layer in this one process, on each rank's batch in turn (each batch routed on its
  own, with its own capacity: GShard's groups), forward and backward of ``sum(out * g) + AUX * aux_loss``;
- the **expert-parallel** layer: its own batch only, its own experts only (an
  :class:`~effitrain_helpers.engines.experts.ExpertShard`), ``dispatch`` and ``combine`` over
  ``all_to_all_single``; the router's gradient summed over the ranks (it is replicated, as in data parallelism);
- the largest difference of the output and of every gradient against the reference, the tokens each expert was
  chosen for and kept, the rows each rank's experts received, and the bytes this process wrote to its sockets
  during dispatch, combine and backward (``/proc/self/io``), next to the exact count from the splits.
"""

from __future__ import annotations

from typing import Any

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.validate import positive_int, positive_number

AUX = 0.01  # the load-balancing loss's weight (Switch Transformer's alpha)
VALUE, COUNT = 4, 8  # bytes of a float32 row value and of an int64 count
# the labels of the lesson's and the command's tables, translated by core.language.styled
TERMS = [msg("rank"), msg("expert"), msg("chosen"), msg("kept"), msg("dropped"), msg("received"), msg("phase"),
         msg("measured bytes"), msg("theory bytes"), msg("even-routing estimate"), msg("difference"),
         msg("extra per message"), msg("dispatch"), msg("combine"), msg("backward"), msg("capacity factor"),
         msg("capacity"), msg("assignments"), msg("busiest expert"), msg("balancing loss"), msg("run"),
         msg("yours (forward)"), msg("workbook's"), msg("output"), msg("grad x"), msg("grad router"),
         msg("grad w1"), msg("grad w2")]


def batch(rank: int, tokens: int, d: int):
    """Rank ``rank``'s tokens: ``(tokens, d)`` float32, seeded by the rank (so any rank can rebuild any)."""
    import torch

    return torch.randn(tokens, d, generator=torch.Generator().manual_seed(1000 + rank))


def theory_bytes(send_splits: list[int], recv_splits: list[int], rank: int, d: int, num_experts: int) -> dict:
    """What rank ``rank`` must send to the other ranks in each phase, from the splits: the counts (E / W int64
    to each other rank), the rows out (dispatch), the rows back (combine); backward sends each rows' gradients
    the other way."""
    world = len(send_splits)
    out = sum(s for r, s in enumerate(send_splits) if r != rank) * d * VALUE
    back = sum(s for r, s in enumerate(recv_splits) if r != rank) * d * VALUE
    counts = (world - 1) * (num_experts // world) * COUNT
    return {"dispatch": counts + out, "combine": back, "backward": back + out}


def _rank(config: dict, dispatch, combine) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from effitrain_helpers.engines import experts
    from effitrain_helpers.measure.traffic import bytes_written

    rank, world = dist.get_rank(), dist.get_world_size()
    d, tokens = config["d"], config["tokens"]
    layer = experts.MoELayer(d, config["hidden"], config["experts"], config["top_k"], config["capacity_factor"],
                             seed=config["seed"])
    xs = [batch(r, tokens[r], d).requires_grad_() for r in range(world)]
    gs = [torch.randn(tokens[r], d, generator=torch.Generator().manual_seed(2000 + r)) for r in range(world)]
    ref_loss, ref_out = 0.0, []
    for x, g in zip(xs, gs):
        out, routing = layer(x)
        ref_out.append(out.detach())
        ref_loss = ref_loss + (out * g).sum() + AUX * routing.aux_loss
    ref_loss.backward()

    shard = experts.ExpertShard(layer, rank, world)
    x = xs[rank].detach().clone().requires_grad_()
    plans = []

    def watched_dispatch(*args):
        received, counts, plan = (dispatch or experts.dispatch)(*args)
        plans.append((received.shape[0], counts))
        return received, counts, plan

    def timed_combine(*args):
        written.append(bytes_written())
        return (combine or experts.combine)(*args)

    dist.barrier()
    written = [bytes_written()]
    out, routing = shard(x, watched_dispatch, timed_combine)
    written.append(bytes_written())
    loss = (out * gs[rank]).sum() + AUX * routing.aux_loss
    dist.barrier()
    written.append(bytes_written())
    gradients = dispatch is None  # the learner's dispatch over all_to_all_single carries no gradient
    if gradients:
        loss.backward()
    written.append(bytes_written())
    gaps = {"output": (out.detach() - ref_out[rank]).abs().max().item()}
    scales = {"output": ref_out[rank].abs().max().item()}  # the largest reference value, for relative gaps
    if gradients:
        dist.all_reduce(shard.router.grad)  # a replicated router: its gradients summed, as data parallelism does
        local = slice(shard.first, shard.first + shard.local)
        gaps.update({"grad x": (x.grad - xs[rank].grad).abs().max().item(),
                     "grad router": (shard.router.grad - layer.router.grad).abs().max().item(),
                     "grad w1": (shard.w1.grad - layer.w1.grad[local]).abs().max().item(),
                     "grad w2": (shard.w2.grad - layer.w2.grad[local]).abs().max().item()})
        scales.update({"grad x": xs[rank].grad.abs().max().item(), "grad router": layer.router.grad.abs().max().item(),
                       "grad w1": layer.w1.grad[local].abs().max().item(),
                       "grad w2": layer.w2.grad[local].abs().max().item()})
    _, counts = plans[0]
    send_splits = torch.bincount(routing.expert, minlength=layer.num_experts).view(world, -1).sum(1).tolist()
    recv_splits = counts.sum(1).tolist()
    measured = {"dispatch": written[1] - written[0], "combine": written[2] - written[1]}
    if gradients:
        measured["backward"] = written[4] - written[3]
    return {"rank": rank, "world": world, "tokens": tokens[rank], "gaps": gaps, "scales": scales,
            "chosen": routing.wanted.tolist(), "kept": routing.kept.tolist(), "dropped": routing.dropped,
            "capacity": routing.capacity, "aux_loss": float(routing.aux_loss),
            "received": counts.sum(0).tolist(),
            "send_splits": send_splits, "recv_splits": recv_splits, "measured": measured,
            "theory": theory_bytes(send_splits, recv_splits, rank, d, layer.num_experts),
            "even": even_routing_bytes(tokens[rank], config["top_k"], d, world)}


def even_routing_bytes(tokens: int, top_k: int, d: int, world: int) -> int:
    """The rows one all-to-all sends from a rank of ``tokens`` tokens when the router spreads them evenly and
    drops none: ``tokens * top_k * (world - 1) / world`` rows of ``d`` float32 values."""
    return round(tokens * top_k * (world - 1) / world * d * VALUE)


def run(processes: int = 2, tokens: tuple[int, ...] = (96, 80), d: int = 32, hidden: int = 64, experts: int = 8,
        top_k: int = 2, capacity_factor: float = 1.25, seed: int = 0, dispatch=None, combine=None,
        timeout: float = 120.0) -> list[dict[str, Any]]:
    """The expert-parallel layer against the one-process layer in ``processes`` gloo ranks; one record per rank
    (see the module's docstring). ``dispatch`` and ``combine``: the learner's (forward only: gradients are
    compared with the workbook's, whose all-to-all is differentiable), default the workbook's."""
    from effitrain_helpers.processes.launch import launch

    positive_int("processes", processes, hint=msg("e.g. processes=2"))
    for name, value in (("d", d), ("hidden", hidden), ("experts", experts), ("top_k", top_k)):
        positive_int(name, value)
    positive_number("capacity_factor", capacity_factor, example="capacity_factor=1.25")
    if len(tokens) < processes:
        raise ValueError(tr("tokens gives {given} batch sizes for {processes} ranks: give one per rank, e.g. "
                            "tokens=(96, 80).", given=len(tokens), processes=processes))
    if top_k > experts:
        raise ValueError(tr("top_k={top_k} must be between 1 and the number of experts ({experts}).",
                            top_k=top_k, experts=experts))
    if experts % processes:
        raise ValueError(tr("{experts} experts do not split evenly over {world} ranks: choose a number of "
                            "experts that is a multiple of the number of ranks.", experts=experts, world=processes))
    config = {"tokens": list(tokens[:processes]), "d": d, "hidden": hidden, "experts": experts, "top_k": top_k,
              "capacity_factor": capacity_factor, "seed": seed}
    return launch(_rank, config, dispatch, combine, num_processes=processes, cpu=True, quiet=True, timeout=timeout)


def tokens_table(records: list[dict]):
    """Per rank and expert: the assignments that rank's tokens chose, kept and dropped, and the rows the
    expert received from all ranks (pandas, English keys; :data:`TERMS` translate them)."""
    import pandas as pd

    rows = []
    for r in records:
        local = len(r["received"])
        for e, (chosen, kept) in enumerate(zip(r["chosen"], r["kept"])):
            rows.append({"rank": r["rank"], "expert": e, "chosen": chosen, "kept": kept, "dropped": chosen - kept,
                         "received": records[e // local]["received"][e % local]})
    return pd.DataFrame(rows)


def imbalance(records: list[dict]) -> dict[str, float]:
    """How uneven the load is: the busiest expert's rows over the mean (1.0 is even), and the busiest rank's."""
    per_expert = [n for r in records for n in r["received"]]
    per_rank = [sum(r["received"]) for r in records]
    return {"expert": max(per_expert) / (sum(per_expert) / len(per_expert)),
            "rank": max(per_rank) / (sum(per_rank) / len(per_rank))}


def bytes_table(records: list[dict]):
    """Per rank and phase: bytes measured (written to sockets), the exact theory from the splits, and the
    even-routing estimate (pandas, English keys)."""
    import pandas as pd

    rows = []
    for r in records:
        for phase, measured in r["measured"].items():
            theory = r["theory"][phase]
            even = r["even"] * (2 if phase == "backward" else 1)
            rows.append({"rank": r["rank"], "phase": phase, "measured bytes": measured, "theory bytes": theory,
                         "even-routing estimate": even, "difference": measured - theory})
    return pd.DataFrame(rows)


def report(records: list[dict]) -> str:
    """:func:`run`'s records as lines of text, in the learner's language: exactness, tokens per expert per rank,
    imbalance, bytes against the theory."""
    from effitrain_helpers.core.language import number

    world = records[0]["world"]
    gaps = {k: max(r["gaps"][k] for r in records) for k in records[0]["gaps"]}
    lines = [tr("expert-parallel layer in {world} processes (gloo), against the same layer in one process: largest "
                "difference {gaps}", world=world,
                gaps=", ".join(f"{tr(k)} {number(v, '.1e')}" for k, v in gaps.items())),
             tr("tokens per expert: chosen / kept by each rank's tokens, and received by the expert")]
    table = tokens_table(records)
    lines.append(f"{tr('expert'):>8} " + " ".join(f"{tr('rank') + ' ' + str(r):>14}" for r in range(world))
                 + f" {tr('received'):>10}")
    for e, group in table.groupby("expert"):
        cells = [f"{str(c) + ' / ' + str(k):>14}" for c, k in zip(group["chosen"], group["kept"])]
        lines.append(f"{e:>8} " + " ".join(cells) + f" {group['received'].iloc[0]:>10}")
    share = imbalance(records)
    lines.append(tr("imbalance: busiest expert {expert} x the mean, busiest rank {rank} x the mean; dropped {dropped} "
                    "of {total} assignments", expert=number(share["expert"], ".2f"),
                    rank=number(share["rank"], ".2f"), dropped=sum(r["dropped"] for r in records),
                    total=sum(sum(r["chosen"]) for r in records)))
    lines.append(tr("{rank:>4} {phase:<9} {measured:>14} {theory:>14} {even:>14}", rank=tr("rank"), phase=tr("phase"),
                    measured=tr("measured (B)"), theory=tr("theory (B)"), even=tr("even routing (B)")))
    for _, r in bytes_table(records).iterrows():
        lines.append(f"{r['rank']:>4} {tr(r['phase']):<9} {number(r['measured bytes'], '>14,')} "
                     f"{number(r['theory bytes'], '>14,')} {number(r['even-routing estimate'], '>14,')}")
    lines.append(tr("theory: the rows that leave each rank (d float32 values each) and E/W int64 counts to every "
                    "other rank; measured: bytes this process wrote to its sockets, gloo's headers included."))
    return "\n".join(lines)
