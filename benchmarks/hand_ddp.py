"""Lesson 6.2's claim, measured: data parallelism by hand (a broadcast, then every gradient all-reduced and
divided by the world size after backward) against torch's ``DistributedDataParallel``, time per step.

Same model (``lesson_size("6.2")``'s MLP), same shards, same processes and threads; the ways alternate
within each round, so a load that comes and goes hits all of them. Target: the hand-written run trains
DDP's weights (largest difference <= 1e-6 after the timed steps). The times have no target: they are
recorded, with the spread of the repeats and a flag when the machine was busy (then they say nothing).
"""

from __future__ import annotations

SAME_WEIGHTS_MAX_DIFF = 1e-6


def _hand_vs_ddp(steps: int, rounds: int) -> dict:
    """In each rank: seconds per step of the hand-written loop and of DDP, ``rounds`` interleaved rounds of
    ``steps`` steps, and the largest gap between their weights at the end."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.training.ddp_by_hand import flat_weights, loss_of, shard, sync_model, time_steps

    size, rank = lesson_size("6.2"), dist.get_rank()
    hand = sync_model(seed=rank, width=size.width, depth=size.depth)
    for p in hand.parameters():
        dist.broadcast(p.data, src=0)
    ddp = DistributedDataParallel(sync_model(seed=rank, width=size.width, depth=size.depth))
    optimizers = {"by hand": torch.optim.SGD(hand.parameters(), lr=0.01),
                  "DDP": torch.optim.SGD(ddp.parameters(), lr=0.01)}
    data = shard(rank, 0, batch=size.batch_size, width=size.width)

    def by_hand():
        loss_of(hand, *data).backward()
        for p in hand.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        optimizers["by hand"].step()
        optimizers["by hand"].zero_grad()

    def with_ddp():
        loss_of(ddp, *data).backward()
        optimizers["DDP"].step()
        optimizers["DDP"].zero_grad()

    seconds = {"by hand": [], "DDP": []}
    for _ in range(rounds):
        seconds["by hand"] += time_steps(by_hand, steps, warmup=1)
        seconds["DDP"] += time_steps(with_ddp, steps, warmup=1)
    gap = float((flat_weights(hand) - flat_weights(ddp.module)).abs().max())
    return {"seconds": seconds, "gap": gap, "threads": torch.get_num_threads(),
            "parameters": sum(p.numel() for p in hand.parameters())}


def hand_ddp_vs_ddp(processes: int = 2, steps: int = 10, rounds: int = 3) -> dict:
    """Median ms per step, by hand and with DDP, in ``processes`` CPU processes; the weights compared."""
    import statistics

    from effitrain_helpers.measure.bench import busy_reason, unreliable_reason
    from effitrain_helpers.processes.launch import launch, usable_cores

    busy = busy_reason(threads=usable_cores())
    ranks = launch(_hand_vs_ddp, steps, rounds, num_processes=processes, cpu=True, quiet=True)
    first = ranks[0]
    ms = {way: statistics.median(s) * 1e3 for way, s in first["seconds"].items()}
    doubt = "; ".join(dict.fromkeys(filter(None, [busy] + [unreliable_reason(s) for s in first["seconds"].values()])))
    gap = max(r["gap"] for r in ranks)
    return {"processes": processes, "threads_per_process": first["threads"], "parameters": first["parameters"],
            "ms_per_step": ms, "hand_over_ddp": ms["by hand"] / ms["DDP"], "unreliable": doubt,
            "max_weight_difference": gap,
            "checks": [{"target": "hand-written data parallelism trains DDP's weights", "difference": gap,
                        "ok": gap <= SAME_WEIGHTS_MAX_DIFF}]}


def report_lines(h: dict) -> list[str]:
    """The report's section for :func:`hand_ddp_vs_ddp`'s result."""
    ms = h["ms_per_step"]
    verdict = f"UNRELIABLE ({h['unreliable']})" if h["unreliable"] else "reliable"
    return ["", f"## Lesson 6.2: data parallelism by hand vs DDP ({h['parameters']:,} parameters, {h['processes']} "
            f"CPU processes x {h['threads_per_process']} thread(s))", "",
            f"ms per step (median): by hand {ms['by hand']:.1f}, DDP {ms['DDP']:.1f}; by hand / DDP "
            f"{h['hand_over_ddp']:.2f} (no target; measurement {verdict}). DDP overlaps bucketed all-reduces "
            "with backward; the hand-written loop all-reduces each parameter after backward.",
            f"largest weight difference {h['max_weight_difference']:.1e} (target <= {SAME_WEIGHTS_MAX_DIFF:g}: "
            f"{'ok' if h['checks'][0]['ok'] else 'MISSED'})"]
