"""Lesson 6.3's target: ZeRO state bytes per rank against 1/N, for the stages written by hand.

Run by ``run_benchmarks.py`` (target 10): lesson 5.1's model trained with ``lesson_size("5.1")`` in 2 and in
3 CPU processes by :func:`effitrain_helpers.training.zero.zero_stages`. Targets, for each N:

- ZeRO-1 by hand: the ranks' optimizer state adds up to AdamW's exactly, and the largest rank holds at most
  1/N of it plus one tensor's state (whole tensors: the imbalance is reported); byte for byte the same as
  torch's ``ZeroRedundancyOptimizer``; the weights are plain AdamW's (largest difference <= 1e-6);
- ZeRO-2 by hand: the largest rank's gradients at most 1/N plus one tensor; it sends what an all-reduce
  sends (ring bytes within 1% of it);
- ZeRO-3 by hand: the peak of parameter bytes at most 1/N (padded) plus the largest unit;
- ZeRO-2, ZeRO-3 and ``fully_shard``: weights within 1e-4 of AdamW's (a reduce-scatter adds in another order).
"""

from __future__ import annotations

ZERO1_WEIGHTS_MAX_DIFF = 1e-6
REDUCE_SCATTER_WEIGHTS_MAX_DIFF = 1e-4
SAME_BYTES_AS_ALL_REDUCE_TOL = 0.01


def _one_world(n: int) -> dict:
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training.model_sharding import sharding_batches
    from effitrain_helpers.training.zero import zero_stages

    size = lesson_size("5.1")
    ranks = launch(zero_stages, sharding_batches(size.steps, n * size.batch_size), num_processes=n, cpu=True,
                   quiet=True, timeout=600)
    def got(name, kind):
        return [r["results"][name]["bytes"][kind] for r in ranks]
    adamw = got("AdamW, averaged gradients", "optimizer state")[0]
    grads = got("AdamW, averaged gradients", "gradients")[0]
    biggest = max(ranks[0]["tensor_values"])
    state = got("ZeRO-1 by hand", "optimizer state")
    units = ranks[0]["unit_values"]
    shards = sum(4 * -(-sum(u) // n) for u in units)
    largest_unit = max(4 * n * -(-sum(u) // n) for u in units)
    peak = max(got("ZeRO-3 by hand", "parameters"))
    comm = ranks[0]["results"]["ZeRO-2 by hand"]["communication"]
    sent = (n - 1) / n * (comm["reduce_scatter_single"] + comm["all_gather_single"])
    all_reduce_sent = 2 * (n - 1) / n * 4 * sum(ranks[0]["tensor_values"])
    gaps = {name: max(r["results"][name]["gap"] for r in ranks) for name in ranks[0]["results"]}
    checks = [
        {"target": f"N={n}: ZeRO-1 state covers AdamW's once, largest rank <= 1/N + one tensor",
         "ok": sum(state) == adamw and max(state) <= adamw / n + 8 * biggest + 4},
        {"target": f"N={n}: ZeRO-1 state = ZeroRedundancyOptimizer's",
         "ok": state == got("ZeroRedundancyOptimizer", "optimizer state")},
        {"target": f"N={n}: ZeRO-2 gradients <= 1/N + one tensor",
         "ok": max(got("ZeRO-2 by hand", "gradients")) <= grads / n + 4 * biggest},
        {"target": f"N={n}: ZeRO-2 sends an all-reduce's bytes (within 1%)",
         "ok": abs(sent / all_reduce_sent - 1) <= SAME_BYTES_AS_ALL_REDUCE_TOL},
        {"target": f"N={n}: ZeRO-3 parameter peak <= 1/N + largest unit", "ok": peak <= shards + largest_unit},
        {"target": f"N={n}: ZeRO-1 broadcasts, counted, = the model's bytes (theory: every weight once)",
         "ok": all(ranks[0]["results"][k]["communication"].get("broadcast") == 4 * sum(ranks[0]["tensor_values"])
                   for k in ("ZeRO-1 by hand", "ZeroRedundancyOptimizer"))},
        {"target": f"N={n}: ZeRO-1 trains AdamW's weights", "ok": gaps["ZeRO-1 by hand"] <= ZERO1_WEIGHTS_MAX_DIFF},
        {"target": f"N={n}: ZeRO-2, ZeRO-3, fully_shard within 1e-4 of AdamW's weights",
         "ok": all(gaps[k] <= REDUCE_SCATTER_WEIGHTS_MAX_DIFF
                   for k in ("ZeRO-2 by hand", "ZeRO-3 by hand", "fully_shard"))},
    ]
    return {"processes": n, "adamw_state": adamw, "zero1_state": state, "imbalance": max(state) / (adamw / n),
            "zero2_gradients": got("ZeRO-2 by hand", "gradients"), "gradients": grads,
            "zero3_peak": peak, "zero3_theory": shards + largest_unit, "sent_over_all_reduce": sent / all_reduce_sent,
            "gaps": gaps, "checks": checks}


def zero_state_bytes(worlds=(2, 3)) -> dict:
    """Target 10 for each N in ``worlds``: one report per N and the list of checks."""
    rows = [_one_world(n) for n in worlds]
    return {"rows": rows, "checks": [c for r in rows for c in r["checks"]]}


def zero_lines(z: dict) -> list[str]:
    """The report's section for :func:`zero_state_bytes`."""
    lines = ["", "## Lesson 6.3: ZeRO by hand, bytes per rank against 1/N (CPU processes)", "",
             "| N | AdamW state B | ZeRO-1 state per rank B | largest / (1/N) | ZeRO-2 gradients per rank B "
             "(AdamW's) | ZeRO-3 parameter peak B (theory) | ZeRO-2 sent / all-reduce's |",
             "|---|---|---|---|---|---|---|"]
    for r in z["rows"]:
        lines.append(f"| {r['processes']} | {r['adamw_state']:,} | {r['zero1_state']} | {r['imbalance']:.3f} | "
                     f"{r['zero2_gradients']} ({r['gradients']:,}) | {r['zero3_peak']:,} ({r['zero3_theory']:,}) | "
                     f"{r['sent_over_all_reduce']:.4f} |")
    lines += [f"- {c['target']}: {'ok' if c['ok'] else 'MISSED'}" for c in z["checks"]]
    return lines
