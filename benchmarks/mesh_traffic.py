"""Lesson 7.2's targets: a 2-D mesh trains like 1-D FSDP, and each dimension carries the bytes theory counts.

In 4 gloo CPU processes, ``training/device_mesh.mesh_runs`` trains the lesson's model (``lesson_size("7.2")``)
on the same global batches wrapped three ways: 1-D FSDP over 4 ranks (the baseline), FSDP x TP on a 2 x 2 mesh
(``parallelize_module`` with the block's plan over ``tp``, ``fully_shard`` over ``dp``) and HSDP (replicate x
shard). Targets:

- the loss at every step of every run, on every rank, within ``LOSS_MAX`` (relative) of the baseline's;
- per rank and mesh dimension, the payload bytes of the collectives counted on that dimension's process group
  (``measure/group_traffic.py``) equal to ``device_mesh.expected_traffic``, the count from the model's shapes
  (FSDP's padded all-gathers and reduce-scatters, TP's 2 + 4 activation all-reduces per block, HSDP's gradient
  shard all-reduced over ``replicate``), exactly.

``python benchmarks/mesh_traffic.py`` prints the same as the report's section.
"""

from __future__ import annotations

import time

LOSS_MAX = 1e-5


def _wraps() -> dict:
    """The lesson's three wrappings (the notebook writes them in plain sight; the same calls)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from effitrain_helpers.engines.mesh_parallel import block_plan

    def sharded(model, mesh, fsdp_mesh, plan_mesh=None):
        for block in model.blocks:
            if plan_mesh is not None:
                parallelize_module(block, plan_mesh, block_plan())
            fully_shard(block, mesh=fsdp_mesh)
        fully_shard(model, mesh=fsdp_mesh)
        return mesh

    def fsdp(model):
        mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
        return sharded(model, mesh, mesh)

    def fsdp_tp(model):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        return sharded(model, mesh, mesh["dp"], mesh["tp"])

    def hsdp(model):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        return sharded(model, mesh, mesh)

    return {"FSDP": fsdp, "FSDP x TP": fsdp_tp, "HSDP": hsdp}


def mesh_traffic() -> dict:
    """The three runs in 4 processes: rows of bytes per dimension against theory, the loss gap, the time taken."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training import device_mesh

    cfg = device_mesh.config()
    start = time.perf_counter()
    ranks = launch(device_mesh.mesh_runs, _wraps(), cfg, num_processes=4, cpu=True, quiet=True)
    rows = device_mesh.traffic_rows(ranks, cfg)
    gap = device_mesh.loss_gap(ranks, "FSDP")
    ok = gap <= LOSS_MAX and all(r["same on every rank"] and r["measured bytes"] == r["theory bytes"] for r in rows)
    return {"rows": rows, "loss_gap": gap, "steps": cfg["steps"], "seconds": time.perf_counter() - start, "ok": ok}


def report_lines(result: dict) -> list[str]:
    """The report's Markdown section."""
    lines = ["", "## Lesson 7.2: bytes per rank per mesh dimension, 4 gloo CPU processes", "",
             "| run | dimension | calls per step | measured B per step | theory B per step | every rank |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['run']} | {r['dimension']} | {r['calls per step']} | {r['measured bytes']:,.0f} | "
                     f"{r['theory bytes']:,.0f} | {'same' if r['same on every rank'] else 'DIFFERS'} |")
    lines += ["", f"largest relative loss gap to 1-D FSDP over {result['steps']} steps: {result['loss_gap']:.1e} "
              f"(target <= {LOSS_MAX:.0e}); bytes equal to theory: {'ok' if result['ok'] else 'MISSED'}; "
              f"{result['seconds']:.0f} s"]
    return lines


if __name__ == "__main__":
    print("\n".join(report_lines(mesh_traffic())))
