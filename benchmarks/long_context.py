"""Lesson 8.3's targets: sequence parallelism's bytes and activations, ring attention's bytes and work per rank.

- SP: the block of ``engines/sequence_parallel.py`` in N processes: the payload of each collective and the bytes
  kept for backward per rank must equal ``training/long_context.py``'s theory exactly (the norm and dropout
  region 1/N of tensor parallelism's), outputs and input gradients within 1e-5 of the whole block;
- ring attention (``engines/ring_attention.py``), causal, over 2, 3 and 4 processes, contiguous and zig-zag:
  bytes each rank sends forward and backward equal to the theory, output, log-sum-exp and gradients within 1e-5
  of attention on the whole sequence, the query-key pairs per rank equal to the theory; the imbalance (busiest
  rank's pairs over the mean) above 1 for the contiguous split and exactly 1 for zig-zag. Each rank's compute
  seconds are reported next to the pairs, not targeted (other programs share the cores).

``python benchmarks/long_context.py`` prints the same as the report's section.
"""

from __future__ import annotations

MAX_DIFF = 1e-5
RING = {"n": 192, "d": 32, "batch": 4}  # n divisible by 2N for N = 2, 3, 4
WORLDS = (2, 3, 4)


def _both_layouts(n: int, d: int, batch: int) -> list[dict]:
    from effitrain_helpers.engines import ring_attention as ring
    from effitrain_helpers.training import long_context as lc

    return [lc.measured_ring_run(n, d, batch, True, layout) for layout in ring.LAYOUTS]


def ring_targets(worlds=WORLDS) -> dict:
    """Per world size and layout: bytes sent against theory, the largest difference, pairs and seconds per rank."""
    from effitrain_helpers.engines import ring_attention as ring
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training import long_context as lc

    rows = []
    for world in worlds:
        ranks = launch(_both_layouts, RING["n"], RING["d"], RING["batch"], num_processes=world, cpu=True, quiet=True)
        theory = lc.ring_bytes_theory(RING["n"], RING["d"], world, RING["batch"])
        for i, layout in enumerate(ring.LAYOUTS):
            runs = [rank[i] for rank in ranks]
            pairs = [r["pairs"] for r in runs]
            gap = max(max(r["out_gap"], r["lse_gap"], *r["grad_gaps"].values()) for r in runs)
            sent_ok = all((r["forward_bytes"], r["backward_bytes"]) == (theory["forward"], theory["backward"])
                          for r in runs)
            theory_pairs = ring.attended_pairs(RING["n"], world, layout, batch=RING["batch"])
            rows.append({"world": world, "layout": layout, "pairs": pairs, "theory_pairs": theory_pairs,
                         "imbalance": max(pairs) / (sum(pairs) / world),
                         "compute_ms": [1e3 * r["compute_seconds"] for r in runs],
                         "forward_bytes": runs[0]["forward_bytes"], "backward_bytes": runs[0]["backward_bytes"],
                         "theory": theory, "difference": gap,
                         "ok": sent_ok and gap <= MAX_DIFF and pairs == theory_pairs})
    checks = [{"target": f"N={r['world']} {r['layout']}: bytes, pairs and values equal theory", "ok": r["ok"]}
              for r in rows]
    checks += [{"target": f"N={w}: zig-zag balanced (1.0), contiguous not",
                "ok": all((r["imbalance"] == 1.0) == (r["layout"] == "zigzag") for r in rows if r["world"] == w)}
               for w in worlds]
    return {"rows": rows, "checks": checks}


def sp_targets(processes: int = 2, width: int = 64, hidden: int = 256, tokens: int = 64) -> dict:
    """Sequence parallelism's bytes and activations per rank against theory, and the largest difference."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training import long_context as lc

    ranks = launch(lc.measured_sp_run, width, hidden, tokens, num_processes=processes, cpu=True, quiet=True)
    r = ranks[0]
    saved_theory = {m: lc.sp_saved_theory(m, tokens, width, hidden, 1 if m == "whole" else processes)
                    for m in ("whole", "tp", "sp")}
    payload_theory = {m: lc.sp_bytes_theory(m, tokens, width, processes)["by_collective"] for m in ("tp", "sp")}
    gap = max(max(*x["gap"].values(), *x["grad_gap"].values()) for x in ranks)
    ok = all(x["saved"] == saved_theory and x["payload"] == payload_theory for x in ranks) and gap <= MAX_DIFF
    return {"processes": processes, "tokens": tokens, "width": width, "hidden": hidden, "saved": r["saved"],
            "payload": r["payload"], "difference": gap, "ok": ok}


def report_lines(sp: dict, ring_report: dict) -> list[str]:
    """The report's Markdown section for both."""
    lines = ["", f"## Lesson 8.3: sequence parallelism ({sp['processes']} CPU processes, {sp['tokens']} tokens, "
             f"width {sp['width']}, hidden {sp['hidden']})", "",
             "| way | payload bytes by collective | kept for backward per rank: norm and dropouts / mlp |",
             "|---|---|---|"]
    for m in ("whole", "tp", "sp"):
        saved = sp["saved"][m]
        lines.append(f"| {m} | {sp['payload'].get(m, '-')} | {saved['norm and dropouts']} / {saved['mlp']} |")
    lines += ["", f"{'ok' if sp['ok'] else 'MISSED'}: every figure equals its theory; largest difference from "
              f"the whole block {sp['difference']:.1e}", "",
              f"## Lesson 8.3: ring attention, causal (n = {RING['n']}, d = {RING['d']}, batch {RING['batch']})", "",
              "| N | layout | pairs per rank (theory equal) | busiest / mean | compute ms per rank | bytes sent fwd / "
              "bwd (theory) | largest difference |", "|---|---|---|---|---|---|---|"]
    for r in ring_report["rows"]:
        lines.append(f"| {r['world']} | {r['layout']} | {r['pairs']} ({'yes' if r['pairs'] == r['theory_pairs'] else 'no'})"
                     f" | {r['imbalance']:.3f} | {', '.join(f'{x:.2f}' for x in r['compute_ms'])} | "
                     f"{r['forward_bytes']} / {r['backward_bytes']} ({r['theory']['forward']} / "
                     f"{r['theory']['backward']}) | {r['difference']:.1e} |")
    lines += [""] + [f"{'ok' if c['ok'] else 'MISSED'}: {c['target']}" for c in ring_report["checks"]]
    return lines


if __name__ == "__main__":
    print("\n".join(report_lines(sp_targets(), ring_targets())))
