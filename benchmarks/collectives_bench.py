"""Lesson 6.1's benchmark: ring vs gloo's all_reduce vs a parameter server, bytes and time per rank.

Target (bytes; times are reported with the theory beside them, never targeted: on one CPU the "network" is
loopback and the processes share the cores): on the largest tensor, every rank of the ring and of gloo's
all_reduce writes to its sockets within 5% of 2(N-1)/N of the tensor, and the parameter server's rank 0
within 5% of N-1 times it (Linux, where the kernel counts what a process writes; counted at the Python calls
elsewhere, gloo then unmeasured). Run alone: ``python benchmarks/collectives_bench.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BYTES_VS_THEORY_TOL = 0.05


def all_reduce_costs(processes: int = 3, sizes=(1_000, 100_000, 1_000_000, 4_000_000), repeats: int = 5) -> dict:
    """The three all-reduces in ``processes`` CPU processes: per size and method, the slowest rank's median
    time and the busiest rank's bytes, with the theory; checks on the largest size."""
    from effitrain_helpers.measure.all_reduce_cost import METHODS, compare_all_reduces

    cost = compare_all_reduces(None, sizes=sizes, processes=processes, repeats=repeats)
    rows, checks = [], []
    for numel in sizes:
        for method in METHODS:
            ranks = [r for r in cost["rows"] if r["numel"] == numel and r["method"] == method]
            sent = [r["socket_bytes"] if r["socket_bytes"] is not None else r["counted_bytes"] for r in ranks]
            row = {"numel": numel, "method": method, "ms_slowest_rank": max(r["seconds"] for r in ranks) * 1e3,
                   "bytes_per_rank": sent, "theory_per_rank": [r["theory_bytes"] for r in ranks]}
            rows.append(row)
            if numel == max(sizes):
                measured = [(s, t) for s, t in zip(sent, row["theory_per_rank"]) if s is not None]
                worst = max(abs(s / t - 1) for s, t in measured) if measured else None
                checks.append({"target": f"{method}: bytes per rank within 5% of theory", "worst": worst,
                               "ok": worst is not None and worst <= BYTES_VS_THEORY_TOL})
    return {"processes": processes, "rows": rows, "checks": checks, "notes": cost["notes"]}


def collectives_lines(c: dict) -> list[str]:
    """The report's section for :func:`all_reduce_costs`."""
    lines = ["", f"## Lesson 6.1: all-reduce, ring vs gloo vs parameter server ({c['processes']} CPU processes)",
             "", "| float32 values | method | ms (slowest rank, median) | bytes sent per rank | theory per rank |",
             "|---|---|---|---|---|"]
    for r in c["rows"]:
        sent = ", ".join("-" if s is None else f"{s:,}" for s in r["bytes_per_rank"])
        theory = ", ".join(f"{t:,.0f}" for t in r["theory_per_rank"])
        lines.append(f"| {r['numel']:,} | {r['method']} | {r['ms_slowest_rank']:.2f} | {sent} | {theory} |")
    for check in c["checks"]:
        worst = "n/a" if check["worst"] is None else f"{check['worst']:.2%}"
        lines.append(f"{check['target']}: worst {worst} ({'ok' if check['ok'] else 'MISSED'})")
    return lines + [f"note: {n}" for n in c["notes"]]


if __name__ == "__main__":
    result = all_reduce_costs()
    print("\n".join(collectives_lines(result)))
    print(json.dumps(result["checks"]))
    sys.exit(0 if all(c["ok"] for c in result["checks"]) else 1)
