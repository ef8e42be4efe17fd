"""Lesson 7.3's targets: the planner's prediction error against real tensors (``training/plan_check.py``).

- Fake world: DP 8 x TP 4 x PP 2 with ZeRO-3, 64 ranks on ``torch.distributed``'s fake backend: every rank's
  parameter bytes, and the gradient and AdamW state bytes of the first and the last rank after one step, against
  the planner's prediction for that rank. Target: the largest relative error at most 1% (what the planner leaves
  out: norms and biases that TP replicates, AdamW's step counters).
- Activations: one Megatron block (bfloat16, dropout) in 2 gloo processes, TP 1 and TP 2, recomputation none,
  selective and full: bytes saved for backward against Korthikanti et al.'s formula. Target: at most 0.5% (the
  layer norms' float32 statistics).

``python benchmarks/plan_accuracy.py`` prints the same as the report's section.
"""

from __future__ import annotations

import time

FAKE_MAX, ACTIVATION_MAX = 0.01, 0.005


def fake_world_error() -> dict:
    """Every rank of the fake world against the plan: the largest relative error by part, and the time taken."""
    from effitrain_helpers.measure.planner import Layout
    from effitrain_helpers.training import plan_check

    layout = Layout(dp=8, tp=4, pp=2, cp=1, zero=3, recompute="none")
    start = time.perf_counter()
    ranks = plan_check.fake_world(layout)
    errors = plan_check.relative_errors(ranks)
    return {"layout": layout.name(), "ranks": len(ranks), "stepped": plan_check.stepped_ranks(layout),
            "errors": errors, "seconds": time.perf_counter() - start, "ok": max(errors.values()) <= FAKE_MAX}


def activation_error() -> dict:
    """One block's saved bytes in 2 gloo processes against the formula, each TP and recomputation."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training import plan_check

    ranks = launch(plan_check.activation_run, num_processes=2, cpu=True, quiet=True)
    rows = [{"rank": r["rank"], **row, "error": abs(row["measured"] - row["formula"]) / row["formula"]}
            for r in ranks for row in r["rows"]]
    return {"rows": rows, "ok": max(r["error"] for r in rows) <= ACTIVATION_MAX}


def report_lines(fake: dict, activations: dict) -> list[str]:
    """The report's Markdown section for both."""
    errors = ", ".join(f"{part} {error:.2%}" for part, error in fake["errors"].items())
    lines = ["", f"## Lesson 7.3: the planner on a fake world ({fake['layout']}, {fake['ranks']} ranks)", "",
             f"largest relative error: {errors} (target <= {FAKE_MAX:.0%}: {'ok' if fake['ok'] else 'MISSED'}); "
             f"gradients and optimizer state after a step on ranks {fake['stepped']}; {fake['seconds']:.0f} s",
             "", "## Lesson 7.3: activation bytes in 2 gloo processes against Korthikanti et al.", "",
             "| rank | TP | recompute | measured B | formula B | error |", "|---|---|---|---|---|---|"]
    for r in activations["rows"]:
        lines.append(f"| {r['rank']} | {r['tp']} | {r['recompute']} | {r['measured']:,} | {r['formula']:,.0f} | "
                     f"{r['error']:.3%} |")
    lines += ["", f"target <= {ACTIVATION_MAX:.1%}: {'ok' if activations['ok'] else 'MISSED'}"]
    return lines


if __name__ == "__main__":
    print("\n".join(report_lines(fake_world_error(), activation_error())))
