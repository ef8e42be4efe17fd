"""Lesson 8.2's target: what one transformer block keeps for backward, measured with saved-tensor hooks, against
its formula (``engines/recomputation.py``: s b h (72 + 12 a s / h) + 16 s b bytes in float32 on a CPU, Korthikanti
et al.'s s b h (34 + 5 a s / h) in 16-bit), for no, selective and full recomputation and for one tensor-parallel
rank's share, on shapes larger than the lesson's. Target: every byte predicted (error 0).

``python benchmarks/activation_memory.py`` prints the same as the report's section.
"""

from __future__ import annotations

import time

SHAPES = ((128, 2, 64, 4), (512, 2, 128, 8), (1024, 1, 256, 8), (256, 4, 512, 16))  # s, b, h, a


def bytes_against_theory(shapes=SHAPES) -> dict:
    """Rows of ``s, b, h, a, mode, t, measured, predicted, paper`` (the paper's 16-bit count for the same
    block), and whether every measured byte was predicted."""
    from effitrain_helpers.training import activation_memory as am

    start, rows = time.perf_counter(), []
    for s, b, h, a in shapes:
        paper = s * b * h * (34 + 5 * a * s / h)
        for r in am.recomputation_compared(s, b, h, a):
            rows.append({"shape": (s, b, h, a), "mode": r["recompute"], "t": 1, "measured": r["measured"],
                         "predicted": r["predicted"], "paper": paper if r["recompute"] == "none" else None})
        for r in am.split_compared(s, b, h, a, degrees=(2, 4)):
            rows.append({"shape": (s, b, h, a), "mode": "none", "t": r["t"],
                         "measured": r["tensor parallel, measured"], "predicted": r["tensor parallel, predicted"],
                         "paper": None})
    return {"rows": rows, "seconds": time.perf_counter() - start,
            "ok": all(r["measured"] == r["predicted"] for r in rows)}


def report_lines(result: dict) -> list[str]:
    """The report's Markdown section."""
    lines = ["", "## Lesson 8.2: a block's bytes saved for backward against its formula (float32, CPU)", "",
             "| s, b, h, a | recompute | TP | measured B | formula B | paper's 16-bit B |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        paper = f"{r['paper']:,.0f}" if r["paper"] else ""
        lines.append(f"| {', '.join(map(str, r['shape']))} | {r['mode']} | {r['t']} | {r['measured']:,} | "
                     f"{r['predicted']:,} | {paper} |")
    lines += ["", f"target: every byte predicted: {'ok' if result['ok'] else 'MISSED'} ({result['seconds']:.1f} s)"]
    return lines


if __name__ == "__main__":
    print("\n".join(report_lines(bytes_against_theory())))
