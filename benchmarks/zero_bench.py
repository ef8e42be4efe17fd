"""Lesson 6.3's target: ZeRO state bytes per rank against 1/N, for the stages written by hand.

Run by ``run_benchmarks.py`` (target 10): lesson 5.1's model trained with ``lesson_size("5.1")`` in 2 and in
3 CPU processes by :func:`effitrain_helpers.training.zero_stages.zero_stages`. Targets, for each N:

- ZeRO-1 by hand: the ranks' optimizer state adds up to AdamW's exactly, and the largest rank holds at most
  1/N of it plus one tensor's state (whole tensors: the imbalance is reported); byte for byte the same as
  torch's ``ZeroRedundancyOptimizer``; the weights are plain AdamW's (largest difference <= 1e-6);
- peak bytes per rank (parameters and gradients at their most during a step, master copies counted) for
  AdamW with averaged gradients (DDP by hand), ZeRO-1, -2 and -3, against ``zero_stages.theory``;
- ZeRO-2 by hand: the largest rank's gradients *at the peak* at most 1/N plus one bucket (plus one piece
  copied where a bucket's slice spans the padding), below every full gradient (what DDP holds); it sends
  what an all-reduce sends (ring bytes within 1% of it);
- ZeRO-3 by hand: the peak of parameter bytes at most 1/N (padded) plus the largest unit;
- ZeRO-2, ZeRO-3 and ``fully_shard``: weights within 1e-4 of AdamW's (a reduce-scatter adds in another order).
"""

from __future__ import annotations

ZERO1_WEIGHTS_MAX_DIFF = 1e-6
REDUCE_SCATTER_WEIGHTS_MAX_DIFF = 1e-4
SAME_BYTES_AS_ALL_REDUCE_TOL = 0.01
RUN_NAMES = ("AdamW, averaged gradients", "ZeRO-1 by hand", "ZeRO-2 by hand", "ZeRO-3 by hand", "fully_shard")


def _one_world(n: int) -> dict:
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training.model_sharding import sharding_batches
    from effitrain_helpers.training.zero_stages import theory, zero_stages

    size = lesson_size("5.1")
    ranks = launch(zero_stages, sharding_batches(size.steps, n * size.batch_size), num_processes=n, cpu=True,
                   quiet=True, timeout=600)
    def got(name, kind):
        return [r["results"][name]["bytes"][kind] for r in ranks]
    adamw = got("AdamW, averaged gradients", "optimizer state")[0]
    grads = got("AdamW, averaged gradients", "gradients, peak")[0]
    biggest = max(ranks[0]["tensor_values"])
    state = got("ZeRO-1 by hand", "optimizer state")
    units = ranks[0]["unit_values"]
    shards = sum(4 * -(-sum(u) // n) for u in units)
    largest_unit = max(4 * n * -(-sum(u) // n) for u in units)
    peak = max(got("ZeRO-3 by hand", "parameters, peak"))
    comm = ranks[0]["results"]["ZeRO-2 by hand"]["communication"]
    sent = (n - 1) / n * (comm["reduce_scatter"] + comm["all_gather"])
    buckets = ranks[0]["bucket_values"]
    zero2_grads, piece = got("ZeRO-2 by hand", "gradients, peak"), 4 * max(-(-sum(b) // n) for b in buckets)
    zero2_theory = theory("ZeRO-2 by hand", n, units, buckets)["gradients, peak"]
    peaks = {name: {"measured": [r["results"][name]["bytes"] for r in ranks],
                    "theory": theory(name, n, units, buckets)} for name in RUN_NAMES}
    all_reduce_sent = 2 * (n - 1) / n * 4 * sum(ranks[0]["tensor_values"])
    gaps = {name: max(r["results"][name]["gap"] for r in ranks) for name in ranks[0]["results"]}
    checks = [
        {"target": f"N={n}: ZeRO-1 state covers AdamW's once, largest rank <= 1/N + one tensor",
         "ok": sum(state) == adamw and max(state) <= adamw / n + 8 * biggest + 4},
        {"target": f"N={n}: ZeRO-1 state = ZeroRedundancyOptimizer's",
         "ok": state == got("ZeroRedundancyOptimizer", "optimizer state")},
        {"target": f"N={n}: ZeRO-2 peak gradients <= 1/N + one bucket (+ one piece copied), < DDP's",
         "ok": max(zero2_grads) <= zero2_theory + piece and max(zero2_grads) < grads},
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
            "zero2_gradients": zero2_grads, "zero2_theory": zero2_theory, "gradients": grads, "peaks": peaks,
            "zero3_peak": peak, "zero3_theory": shards + largest_unit, "sent_over_all_reduce": sent / all_reduce_sent,
            "gaps": gaps, "checks": checks}


def zero_state_bytes(worlds=(2, 3)) -> dict:
    """Target 10 for each N in ``worlds``: one report per N and the list of checks."""
    rows = [_one_world(n) for n in worlds]
    return {"rows": rows, "checks": [c for r in rows for c in r["checks"]]}


def zero_lines(z: dict) -> list[str]:
    """The report's section for :func:`zero_state_bytes`."""
    from effitrain_helpers.training.zero_stages import HELD

    lines = ["", "## Lesson 6.3: ZeRO by hand, bytes per rank against 1/N (CPU processes)", "",
             "| N | AdamW state B | ZeRO-1 state per rank B | largest / (1/N) | ZeRO-2 peak gradients per rank B "
             "(theory; DDP's) | ZeRO-3 parameter peak B (theory) | ZeRO-2 sent / all-reduce's |",
             "|---|---|---|---|---|---|---|"]
    for r in z["rows"]:
        lines.append(f"| {r['processes']} | {r['adamw_state']:,} | {r['zero1_state']} | {r['imbalance']:.3f} | "
                     f"{r['zero2_gradients']} ({r['zero2_theory']:,}; {r['gradients']:,}) | {r['zero3_peak']:,} ({r['zero3_theory']:,}) | "
                     f"{r['sent_over_all_reduce']:.4f} |")
    lines += ["", "Peak bytes per rank (each kind at its most during a step; master copies counted), measured "
              "(ranks) / theory:", "", "| N | run | " + " | ".join(HELD) + " |",
              "|---|---|" + "---|" * len(HELD)]
    for r in z["rows"]:
        for name, p in r["peaks"].items():
            cells = [f"{[m[k] for m in p['measured']]} / {p['theory'][k]:,.0f}" for k in HELD]
            lines.append(f"| {r['processes']} | {name} | " + " | ".join(cells) + " |")
    lines += [f"- {c['target']}: {'ok' if c['ok'] else 'MISSED'}" for c in z["checks"]]
    return lines
