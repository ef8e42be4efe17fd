"""Lesson 7.1's targets: the bytes mixed precision moves and keeps, measured against theory
(``training/precision_across_ranks.py``).

Lesson 5.1's model trained 4 AdamW steps in 2 gloo processes, under three ``MixedPrecisionPolicy`` s (float32;
bfloat16 compute with a float32 reduction; bfloat16 for both) and with DDP (float32, then the bfloat16
compression hook). Targets, per run:

- payload bytes per step of every collective (all-gather, reduce-scatter, all-reduce) equal to the theory (the
  parameter shapes, padded as FSDP pads them, times the dtype's bytes) to the byte; the all-gathers' bytes under
  bfloat16 compute exactly half of float32's, and the bfloat16 hook's all-reduce half of DDP's;
- the bytes a rank holds between steps (parameters, gradients, optimizer state) the same under every policy,
  all float32 (master weights);
- the loss gap to float32 after 4 steps below 0.05, recorded.

``python benchmarks/precision_bytes.py`` prints the same as the report's section.
"""

from __future__ import annotations

import time

STEPS, BATCH, PROCESSES = 4, 8, 2
LOSS_GAP_MAX = 0.05


def precision_bytes() -> dict:
    """The five runs of lesson 7.1, measured against theory; ``checks`` (each with ``ok``) and the rows."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training import precision_across_ranks as pa
    from effitrain_helpers.training.model_sharding import full_state, sharding_batches, sharding_model

    policies = {"FSDP float32": MixedPrecisionPolicy(),
                "FSDP bf16, float32 reduce": MixedPrecisionPolicy(torch.bfloat16, torch.float32),
                "FSDP bf16, bf16 reduce": MixedPrecisionPolicy(torch.bfloat16, torch.bfloat16)}
    start = time.perf_counter()
    result = launch(pa.precision_runs, policies, sharding_batches(STEPS, PROCESSES * BATCH),
                    num_processes=PROCESSES, cpu=True, quiet=True)
    seconds = time.perf_counter() - start
    ranks = [r["runs"] for r in result]
    runs = ranks[0]
    theory = pa.theory_communication(runs["FSDP float32"]["groups"], PROCESSES, policies)
    rows = pa.communication_rows(runs, theory)
    gaps = pa.gaps(ranks, full_state(sharding_model()))
    reference = runs["FSDP float32"]["held"]
    checks = [{"name": f"{r['run']} {r['collective']}: measured = theory", "ok": r["measured bytes per step"]
               == r["theory"]} for r in rows]
    halves = [("FSDP bf16, float32 reduce", "all_gather_single"), ("DDP bf16 hook", "all_reduce")]
    checks += [{"name": f"{run} {collective}: half of float32's", "ok": next(
        r["measured / float32"] for r in rows if (r["run"], r["collective"]) == (run, collective)) == 0.5}
        for run, collective in halves]
    checks += [{"name": f"{name}: a rank holds float32's bytes, all float32",
                "ok": (run["held"] == reference or name.startswith("DDP"))
                and {d for ds in run["held_dtypes"].values() for d in ds} == {"float32"}}
               for name, run in runs.items()]
    checks.append({"name": f"loss gap below {LOSS_GAP_MAX}", "ok": max(g["loss"] for g in gaps.values())
                   < LOSS_GAP_MAX})
    return {"rows": rows, "gaps": gaps, "refused": result[0]["refused"], "seconds": seconds, "checks": checks}


def report_lines(record: dict) -> list[str]:
    """The report's Markdown section."""
    lines = ["", f"## Lesson 7.1: bytes of mixed precision across {PROCESSES} gloo ranks ({STEPS} AdamW steps, "
             f"{record['seconds']:.0f} s)", "",
             "| run | collective | dtype | measured B/step | theory B/step | / float32 |", "|---|---|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['run']} | {r['collective']} | {r['dtype']} | {r['measured bytes per step']:,} | "
                     f"{r['theory']:,} | {r['measured / float32']:.3f} |")
    lines += ["", "| run | largest loss gap | largest weight gap | weights apart / moved |", "|---|---|---|---|"]
    for name, g in record["gaps"].items():
        lines.append(f"| {name} | {g['loss']:.2e} | {g['weight']:.2e} | {g['relative']:.2e} |")
    missed = [c["name"] for c in record["checks"] if not c["ok"]]
    lines += ["", f"DDP's register_comm_hook with bf16_compress_hook itself: {record['refused'] or 'accepted'}",
              "", f"targets ({len(record['checks'])}): " + ("ok" if not missed else "MISSED: " + "; ".join(missed))]
    return lines


if __name__ == "__main__":
    print("\n".join(report_lines(precision_bytes())))
