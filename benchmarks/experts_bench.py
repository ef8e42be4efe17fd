"""Lesson 8.4's benchmark: the expert-parallel layer in 2 and 4 CPU processes, bytes against the theory, imbalance.

Targets, on ``lesson_size("8.4", "full")`` (tokens 2048, 1792, 1536, 1280 on the ranks, d 256, 8 experts, top-2,
capacity factor 1.25), for each N:

- exact: the output and the gradients of the tokens, router and experts within 1e-5 of the same layer run in
  one process (``effitrain_helpers.training.expert_parallel.run``), relative to the tensor's largest value when
  that is above 1 (the router's gradient, summed over the ranks in another order, reaches ~1e-5 absolute at
  N = 4 in the full size);
- bytes: every rank's bytes written to its sockets in dispatch, combine and backward within 1% of the theory
  counted from that rank's splits (the rows that leave it, and the counts; gloo adds a small header per message).

Reported without a target: the imbalance (busiest expert's rows over the mean, busiest rank's), the assignments
dropped, and the even-routing estimate beside the bytes. Run alone: ``python benchmarks/experts_bench.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EXACT_MAX_DIFF = 1e-5
BYTES_VS_THEORY_TOL = 0.01


def expert_parallel_bytes(worlds=(2, 4)) -> dict:
    """Per world size: the largest differences, bytes per rank and phase (measured, theory, even estimate),
    imbalance and drops; the checks."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.training import expert_parallel as ep

    size = lesson_size("8.4", "full")
    runs, checks = [], []
    for n in worlds:
        records = ep.run(n, tokens=size.tokens, d=size.d, hidden=size.hidden, experts=size.experts,
                         top_k=size.top_k, capacity_factor=size.capacity_factor, timeout=600)
        gap = max(g / max(1.0, r["scales"][k]) for r in records for k, g in r["gaps"].items())
        table = ep.bytes_table(records)
        worst = float((table["difference"] / table["theory bytes"]).abs().max())
        runs.append({"world": n, "max_difference": gap, "imbalance": ep.imbalance(records),
                     "dropped": sum(r["dropped"] for r in records),
                     "assignments": sum(sum(r["chosen"]) for r in records),
                     "bytes": table.to_dict("records"), "worst_bytes_vs_theory": worst})
        checks.append({"target": f"N={n}: output and gradients within {EXACT_MAX_DIFF:g} of one process "
                                 "(relative above 1)",
                       "ok": gap <= EXACT_MAX_DIFF})
        checks.append({"target": f"N={n}: bytes per rank and phase within 1% of the splits' theory",
                       "ok": worst <= BYTES_VS_THEORY_TOL})
    return {"runs": runs, "checks": checks}


def report_lines(result: dict) -> list[str]:
    """The report's section: a table per world size, then the checks."""
    lines = ["", "## Lesson 8.4: expert parallelism, bytes against the theory and imbalance", ""]
    for run in result["runs"]:
        share = run["imbalance"]
        lines += [f"N={run['world']}: largest difference {run['max_difference']:.1e} (relative above 1); busiest expert "
                  f"{share['expert']:.2f} x the mean, busiest rank {share['rank']:.2f} x the mean; dropped "
                  f"{run['dropped']} of {run['assignments']} assignments", "",
                  "| rank | phase | measured B | theory B | even-routing estimate B |", "|---|---|---|---|---|"]
        lines += [f"| {r['rank']} | {r['phase']} | {r['measured bytes']} | {r['theory bytes']} | "
                  f"{r['even-routing estimate']} |" for r in run["bytes"]]
        lines.append("")
    lines += [f"{c['target']}: {'ok' if c['ok'] else 'MISSED'}" for c in result["checks"]]
    return lines


if __name__ == "__main__":
    result = expert_parallel_bytes()
    print("\n".join(report_lines(result)))
    print(json.dumps({"checks": result["checks"]}))
    sys.exit(0 if all(c["ok"] for c in result["checks"]) else 1)
