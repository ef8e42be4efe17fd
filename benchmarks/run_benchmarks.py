"""Measure the workbook's performance claims and write a report (JSON and a readable table).

    python benchmarks/run_benchmarks.py [--out benchmarks/results] [--skip-notebooks]

Targets (checked here, never in timed tests):

1. the helper's matmul GFLOP/s agree with ``torch.utils.benchmark`` on the same shapes in the same run:
   median ratio over interleaved rounds >= 0.95 (the harness adds no overhead); the ratio of the best
   repeats is reported too, and is noisier (the reference's blocks are short, so its best is a lucky one);
2. every lesson notebook, executed headless in the default size on a 2-core CPU, takes under 45 s in the
   course's chapters 1-4 (and the start page), under 120 s in chapters 5-8 (several runs of real processes each);
   ``--lesson-times`` runs each quiet and then with one core burnt (the README's lesson times, both stated);
3. ``import effitrain_helpers`` imports neither transformers, accelerate nor datasets;
4. the workbook's sharded Accelerate loop reaches at least 0.9 x the samples per second of a plain PyTorch
   ``DistributedDataParallel`` loop with the same number of processes (same model, data and threads);
5. activation checkpointing on the lesson model (lesson 3.2): at least 40% fewer activation bytes saved for
   backward, at most 50% more time per forward + backward, at every sequence length measured.
6. chapter 4, on the default comparison (``effitrain optimizers``: lesson model, 150 steps, seed 0): each
   optimizer's measured state bytes are within 5% of the theory; 8-bit AdamW's state is at most 0.3 x AdamW's;
   the three final losses are within 10% of each other (max / min - 1);
7. ``effitrain editions`` builds the student and instructor editions of every notebook in under 20 s;
8. the verdict lines stay true on a busy machine: with a second process burning one core, each verdict of
   lesson 1.1 (bfloat16 vs float32, workbook timer vs ``torch.utils.benchmark``) either says UNRELIABLE or
   states what the hardware predicts (bfloat16 slower than float32 on an x86 CPU without bf16 units; timers
   agree), and lesson 2.3's speed-up verdict (N processes vs one) either says unreliable or agrees with the
   same measurement taken just before on the quiet machine (same side of 1, within 30%).
   ``--busy-only`` runs this one alone.
9. lesson 5.1 (``effitrain fsdp``: 2 CPU processes, ``lesson_size("5.1")``): the bytes the largest FSDP rank
   holds over the bytes a DDP rank holds is within 5% of 1/N for parameters and for optimizer state (AdamW),
   and FSDP trains DDP's weights (largest difference <= 1e-6).
10. lesson 6.3 (ZeRO by hand, 2 and 3 CPU processes): optimizer state bytes per rank against 1/N of AdamW's,
   gradients, ZeRO-3's parameter peak and the weights (``benchmarks/zero_bench.py`` states each target).
11. lesson 6.1 (``benchmarks/collectives_bench.py``, 3 CPU processes): on the largest tensor, every rank of a
   ring and of gloo's all_reduce writes within 5% of 2(N-1)/N of the tensor to its sockets, the parameter
   server's rank 0 within 5% of N-1 times it; times per rank reported beside them, without a target.
12. lesson 6.2 (``hand_ddp.py``): data parallelism written by hand trains DDP's weights (largest difference
    <= 1e-6); its time per step next to DDP's is recorded without a target.
13. lesson 7.3 (``plan_accuracy.py``): the planner's prediction error on a fake world of 64 ranks (at most 1%
    by part) and against the activation bytes one block saves in 2 gloo processes (at most 0.5%).
14. lesson 7.1 (``precision_bytes.py``): the bytes every collective moves under three mixed-precision policies
    and DDP's bfloat16 hook equal to the theory to the byte (bfloat16 all-gathers and the hook's all-reduce
    exactly half of float32's), a rank's held bytes unchanged and all float32, the loss gap below 0.05.
15. lesson 7.2 (``mesh_traffic.py``, 4 CPU processes): FSDP x TP on a 2 x 2 mesh and HSDP follow 1-D FSDP's
    loss within 1e-5 (relative) on the same batches, and every mesh dimension's bytes per rank equal theory.
16. lesson 8.2 (``activation_memory.py``): a float32 block's bytes saved for backward (no, selective and full
    recomputation; a tensor-parallel rank's share at t = 2 and 4) on shapes up to s = 1024, h = 512, against its
    formula: every byte predicted.
17. lesson 8.3 (``long_context.py``): sequence parallelism's collective payloads and bytes kept for backward
    per rank equal theory (the norm and dropout region 1/N of tensor parallelism's); ring attention, causal, over
    2-4 processes: bytes sent forward and backward and query-key pairs per rank equal theory, values within 1e-5
    of attention on the whole sequence, zig-zag's imbalance exactly 1 and the contiguous split's above it.
18. lesson 8.4 (``experts_bench.py``, 2 and 4 CPU processes): the expert-parallel layer equals the one-process
    layer (output and gradients within 1e-5, relative above 1), and every rank's socket bytes per phase are within 1% of the
    theory from its splits; the imbalance and the even-routing estimate are reported without a target.
19. waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``, set by the package, the kernels' spec and the Makefile):
    100 small training steps with one core burnt take at most 3x their quiet time (OpenMP's default, measured
    beside it: 4x on a quiet machine, 45x seen; a spinning thread keeps the core its partner needs).

Also measured, without a target: the launch overhead (seconds to start N processes, form the group and
return), next to the time to start one bare ``python -c "import torch"`` (the floor any launcher pays).

Exit code 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zero_bench import zero_lines, zero_state_bytes  # benchmarks/, next to this script
import long_context  # lesson 8.3's targets, in their own module
import experts_bench  # lesson 8.4's targets (benchmarks/ is this script's folder)
import split_parallelism  # lesson 6.4's targets, in their own module (benchmarks/ is this script's folder)
import plan_accuracy  # lesson 7.3's targets: the planner against real tensors
import precision_bytes  # lesson 7.1's targets: mixed precision's bytes against theory
import mesh_traffic  # lesson 7.2's targets: a 2-D mesh against 1-D FSDP, bytes per dimension
from collectives_bench import all_reduce_costs, collectives_lines  # benchmarks/, beside this script
import hand_ddp  # lesson 6.2 (benchmarks/ is this script's folder)
import activation_memory  # lesson 8.2: a block's bytes against its formula

ROOT = Path(__file__).resolve().parents[1]
HARNESS_RATIO_MIN = 0.95
NOTEBOOK_MAX_S = {"course": 45.0, "beyond": 120.0}  # chapters 1-4 and the start page; chapters 5-6
DDP_RATIO_MIN = 0.9
STATE_VS_THEORY_TOL = 0.05
EIGHT_BIT_OVER_ADAMW_MAX = 0.3
FINAL_LOSS_SPREAD_MAX = 0.10
EDITIONS_MAX_S = 20.0
SHARDED_VS_ONE_OVER_N_TOL = 0.05
SHARDED_WEIGHTS_MAX_DIFF = 1e-6


def harness_vs_torch_benchmark(sizes=(128, 256, 512, 1024), rounds: int = 7) -> list[dict]:
    """Helper GFLOP/s over torch.utils.benchmark GFLOP/s, same product, interleaved rounds."""
    from effitrain_helpers.measure.bench import gflops, time_matmul, torch_benchmark_seconds

    rows = []
    for n in sizes:
        ours, ref, ours_best, ref_best = [], [], [], []
        for _ in range(rounds):
            mine = time_matmul(n, "float32", "cpu", repeats=5)
            ours.append(mine.gflops)
            ours_best.append(mine.gflops_best)
            ref.append(gflops(n, torch_benchmark_seconds(n, "float32", "cpu", min_run_time=0.3)))
            ref_best.append(gflops(n, torch_benchmark_seconds(n, "float32", "cpu", min_run_time=0.3, best=True)))
        ratio = statistics.median(o / r for o, r in zip(ours, ref))
        rows.append({"size": n, "dtype": "float32", "device": "cpu", "helper_gflops": statistics.median(ours),
                     "torch_benchmark_gflops": statistics.median(ref),
                     "best_ratio": max(ours_best) / max(ref_best), "best_helper_gflops": max(ours_best), "best_torch_benchmark_gflops": max(ref_best),
                     "ratio": ratio, "ok": ratio >= HARNESS_RATIO_MIN})
    return rows


SCALING_AGREE_TOL = 0.30  # a reliable busy speed-up within 30% of the quiet one (and on the same side of 1)


def verdicts_under_load(sizes=(128, 256, 512)) -> dict:
    """Lesson 1.1's verdicts measured while a second process burns one core (issue 13: under such load the
    lesson once printed "bfloat16 runs at 20.51x the float32 rate" and "agree")."""
    import platform

    from effitrain_helpers.core.devices import hardware_summary
    from effitrain_helpers.measure import bench

    with bench.one_core_burnt():
        results, notes = bench.run_benchmark(list(sizes), ["float32", "bfloat16"], "cpu", repeats=5)
        n = max(sizes)
        ratio = bench.dtype_ratio(results, "cpu", n)
        reference = bench.reference_check(next(r for r in results if (r.dtype, r.size) == ("float32", n)))
    slow_bf16_expected = not hardware_summary().cpu_bf16_fast and platform.machine() in ("x86_64", "AMD64")
    rows = [
        {"verdict": str(ratio), "reliable": ratio.reliable,
         "ok": not ratio.reliable or not slow_bf16_expected or ratio.value < 1},
        {"verdict": str(reference), "reliable": reference.reliable,
         "ok": not reference.reliable or "agree" in str(reference)},
    ]
    rows.append(scaling_under_load())
    rows.append(wait_policy_under_load())
    return {"notes": notes, "rows": rows, "ok": all(r["ok"] for r in rows)}


WAIT_POLICY_MAX_SLOWDOWN = 3.0  # with one core busy, a small training step at most this much slower (passive)
_STEPS = """
import sys, time, torch
from effitrain_helpers.measure.bench import one_core_burnt
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
x, optimizer = torch.randn(32, 64), torch.optim.AdamW(model.parameters())
def steps(n=100):
    began = time.perf_counter()
    for _ in range(n):
        optimizer.zero_grad(); model(x).sum().backward(); optimizer.step()
    return time.perf_counter() - began
steps(10); quiet = steps()
with one_core_burnt(seconds=120.0):
    busy = steps()
print(quiet, busy)
"""


def wait_policy_under_load() -> dict:
    """Small training steps (2 threads) quiet, then with a second process burning one core, in a process whose
    waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``, the workbook's setting: effitrain_helpers/__init__.py) and
    in one with OpenMP's default, for reference. Target: passive, busy at most WAIT_POLICY_MAX_SLOWDOWN x quiet."""
    ratios = {}
    for policy in ("PASSIVE", None):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        env.update({"OMP_WAIT_POLICY": policy} if policy else {})
        out = subprocess.run([sys.executable, "-c", _STEPS], env=env, capture_output=True, text=True, timeout=600,
                             check=True).stdout.split()
        quiet, busy = float(out[-2]), float(out[-1])
        ratios[policy or "default"] = (quiet, busy)
    (pq, pb), (dq, db) = ratios["PASSIVE"], ratios["default"]
    return {"verdict": f"100 small training steps, one core busy: {pb / pq:.1f}x the quiet time with waiting "
                       f"threads asleep (PASSIVE: {pq:.2f} s quiet, {pb:.2f} s busy); OpenMP's default "
                       f"{db / dq:.1f}x ({dq:.2f} s, {db:.2f} s)",
            "reliable": True, "ok": pb / pq <= WAIT_POLICY_MAX_SLOWDOWN}


def _speedup(processes: int) -> tuple[bool, str, float]:
    """Lesson 2.3's measurement: (reliable, verdict, samples/s of N processes over one)."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training.scaling import measure_scaling, scaling_verdict

    one = measure_scaling()
    many = launch(measure_scaling, num_processes=processes, quiet=True)[0]
    reliable, verdict = scaling_verdict(one, many)
    return reliable, verdict, many["workbook_samples_per_s"] / one["workbook_samples_per_s"]


def scaling_under_load(processes: int = 2) -> dict:
    """Lesson 2.3's speed-up verdict with a second process burning one core (issue 13: under such load one
    process came out 8x slower than two). The truth is the same measurement taken just before on the quiet
    machine: a reliable busy verdict must agree with it (same side of 1, within ``SCALING_AGREE_TOL``); a busy
    run that says "unreliable" is true by construction, and when the quiet run was itself unreliable only
    "unreliable" is accepted."""
    from effitrain_helpers.measure.bench import one_core_burnt

    quiet_ok, _, quiet = _speedup(processes)
    with one_core_burnt():
        busy_ok, verdict, busy = _speedup(processes)
    agrees = quiet_ok and (busy >= 1) == (quiet >= 1) and abs(busy / quiet - 1) <= SCALING_AGREE_TOL
    return {"verdict": f"{verdict.splitlines()[0]} (quiet run just before: {quiet:.2f}x, "
                       f"{'reliable' if quiet_ok else 'unreliable'})",
            "reliable": busy_ok, "ok": not busy_ok or agrees}


def notebook_times(busy: bool = False) -> list[dict]:
    """Wall time of each lesson notebook executed headless, offline, in the small size; with ``busy``, while a
    second process burns one core (a learner's laptop running other programs)."""
    import contextlib

    import nbformat
    from nbclient import NotebookClient

    from effitrain_helpers.measure.bench import one_core_burnt

    env = {"HF_HUB_OFFLINE": "1", "EFFITRAIN_SIZE": "small"}
    os.environ.update(env)
    rows = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory() as tmp, (one_core_burnt(seconds=900.0) if busy
                                                    else contextlib.nullcontext()):
            start = time.perf_counter()
            NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
            seconds = time.perf_counter() - start
        limit = NOTEBOOK_MAX_S["course" if path.name[0] in "01234" else "beyond"]
        rows.append({"notebook": path.name, "seconds": seconds, "limit": limit, "busy": busy,
                     "load": os.getloadavg()[0], "ok": busy or seconds < limit})
    return rows


def lesson_times() -> int:
    """``--lesson-times``: every lesson quiet, then with one core busy, as the README's lesson table states them
    (each with the load average, over a minute, when it ended: a quiet run shows about 1-2 on 2 cores)."""
    quiet, busy = notebook_times(), notebook_times(busy=True)
    print("| notebook | quiet (s) | load | one core busy (s) | load |\n|---|---|---|---|---|")
    for q, b in zip(quiet, busy):
        print(f"| {q['notebook']} | {q['seconds']:.0f} | {q['load']:.1f} | {b['seconds']:.0f} | {b['load']:.1f} |")
    return 0 if all(r["ok"] for r in quiet) else 1


def editions_build() -> dict:
    """Wall time of building the classroom editions (student and instructor) of every notebook."""
    from effitrain_helpers.teach.editions import build_editions

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        summary = build_editions(Path(tmp) / "editions")
        seconds = time.perf_counter() - start
    return {"notebooks": summary["notebooks"], "exercises": sum(summary["exercises"].values()),
            "seconds": seconds, "ok": seconds < EDITIONS_MAX_S}


def _return_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def launch_overhead(rounds: int = 3) -> dict:
    """Median wall time of launch() for 1 and 2 processes, beside a bare interpreter importing torch."""
    from effitrain_helpers.processes.launch import launch

    def timed(fn) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    bare = timed(lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True))
    rows = {n: timed(lambda n=n: launch(_return_rank, num_processes=n, quiet=True)) for n in (1, 2)}
    return {"python_import_torch_s": bare, "launch_s": {str(n): s for n, s in rows.items()}}


def ddp_ratio(processes: int = 2) -> dict:
    """Workbook loop over plain DDP, samples per second, with ``processes`` processes (long run, 5 rounds)."""
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training.scaling import measure_scaling

    from effitrain_helpers.processes.launch import usable_cores

    r = launch(measure_scaling, steps=16, rounds=5, num_processes=processes, quiet=True)[0]
    ratio = r["workbook_samples_per_s"] / r["ddp_samples_per_s"]
    # the overhead the launcher removes: every process with a thread per core, fighting over the cores
    crowded = launch(measure_scaling, steps=8, rounds=3, num_processes=processes, quiet=True,
                     threads_per_process=usable_cores())[0]
    return {"processes": processes, "threads_per_process": r["threads"], "workbook_samples_per_s": r["workbook_samples_per_s"],
            "ddp_samples_per_s": r["ddp_samples_per_s"], "ratio": ratio, "ok": ratio >= DDP_RATIO_MIN,
            "oversubscribed_threads": crowded["threads"], "oversubscribed_samples_per_s": crowded["workbook_samples_per_s"]}


def import_cost() -> dict:
    """Time to import the package alone and with the lesson-1.1 helpers, and which heavy libraries came along."""
    code = (
        "import time, sys\nt = time.perf_counter()\nimport effitrain_helpers\nbare = time.perf_counter() - t\n"
        "import effitrain_helpers.sources.models, effitrain_helpers.teach.exercises, effitrain_helpers.measure.bench, effitrain_helpers.cli\n"
        "full = time.perf_counter() - t\n"
        "heavy = [m for m in ('transformers', 'accelerate', 'datasets') if m in sys.modules]\n"
        "print(bare, full, ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    heavy = out[2].split(",") if len(out) > 2 else []
    return {"package_s": float(out[0]), "with_lesson_helpers_s": float(out[1]), "heavy_imported": heavy,
            "ok": not heavy}


CHECKPOINT_MEMORY_SAVED_MIN, CHECKPOINT_TIME_ADDED_MAX = 0.40, 0.50


def checkpointing_tradeoff(seq_lens=(64, 128, 256), repeats: int = 5) -> list[dict]:
    """Lesson 3.2's trade-off, with more repeats than the lesson uses."""
    from dataclasses import asdict

    from effitrain_helpers.training.checkpointing import measure_checkpointing

    return [{**asdict(r), "memory_saved": r.memory_saved, "time_added": r.time_added,
             "ok": r.memory_saved >= CHECKPOINT_MEMORY_SAVED_MIN and r.time_added <= CHECKPOINT_TIME_ADDED_MAX}
            for r in measure_checkpointing(seq_lens, batch_size=8, repeats=repeats)]


def optimizer_targets(steps: int | None = None, seed: int = 0) -> dict:
    """Chapter 4's targets on the default comparison: state vs theory, 8-bit vs AdamW, final-loss spread."""
    from effitrain_helpers.training.optimizer_compare import compare_optimizers

    comparison = compare_optimizers(steps=steps, seed=seed)
    runs = {r.name: r for r in comparison.runs}
    rows = [{"optimizer": r.name, "state_bytes": r.state_bytes, "expected_state_bytes": r.expected_state_bytes,
             "state_vs_theory": r.state_vs_theory, "seconds_per_step": r.seconds_per_step,
             "optimizer_seconds_per_step": r.optimizer_seconds_per_step, "final_loss": r.final_loss,
             "ok": abs(r.state_vs_theory - 1) <= STATE_VS_THEORY_TOL} for r in comparison.runs]
    finals = [r.final_loss for r in comparison.runs]
    spread = max(finals) / min(finals) - 1
    checks = rows + [{"target": "final losses within 10%", "spread": spread, "ok": spread <= FINAL_LOSS_SPREAD_MAX}]
    if "adamw8bit" in runs and "adamw" in runs:
        ratio = runs["adamw8bit"].state_bytes / runs["adamw"].state_bytes
        checks.append({"target": "8-bit state <= 0.3x AdamW", "ratio": ratio, "ok": ratio <= EIGHT_BIT_OVER_ADAMW_MAX})
    else:  # bitsandbytes missing: reported, and the 8-bit target counts as missed
        checks.append({"target": "8-bit state <= 0.3x AdamW", "ratio": None, "ok": False})
    return {"steps": comparison.steps, "seed": seed, "device": comparison.device, "notes": comparison.notes,
            "rows": rows, "final_loss_spread": spread, "eight_bit_over_adamw": checks[-1]["ratio"],
            "checks": checks}


def fsdp_bytes_per_rank(processes: int = 2) -> dict:
    """Lesson 5.1: FSDP's bytes per rank over DDP's, for parameters and optimizer state, against 1/N."""
    from effitrain_helpers.training.model_sharding import compare_ddp_fsdp

    report = compare_ddp_fsdp(processes)
    rows = [{"kind": kind, "ratio": report["ratio"][kind], "one_over_n": 1 / processes,
             "ok": abs(report["ratio"][kind] * processes - 1) <= SHARDED_VS_ONE_OVER_N_TOL}
            for kind in ("parameters", "gradients", "optimizer state")]
    same = report["max_weight_difference"] <= SHARDED_WEIGHTS_MAX_DIFF
    checks = [r for r in rows if r["kind"] != "gradients"] + [
        {"target": "FSDP trains DDP's weights", "difference": report["max_weight_difference"], "ok": same}]
    return {"processes": processes, "parameters": report["parameters"], "rows": rows,
            "communication": report["ring_bytes_sent"], "max_weight_difference": report["max_weight_difference"],
            "checks": checks}


def _fsdp_lines(f: dict) -> list[str]:
    lines = ["", f"## Lesson 5.1: bytes per rank, FSDP / DDP ({f['parameters']:,} parameters, {f['processes']} "
             "CPU processes)", "", "| kind | largest FSDP rank / DDP rank | 1/N | target within 5% of 1/N |",
             "|---|---|---|---|"]
    for r in f["rows"]:
        target = "(no target)" if r["kind"] == "gradients" else ("ok" if r["ok"] else "MISSED")
        lines.append(f"| {r['kind']} | {r['ratio']:.4f} | {r['one_over_n']:.4f} | {target} |")
    sent = f["communication"]
    lines += ["", f"bytes each rank sends per step (ring collectives): DDP {sent['DDP']:,.0f}, FSDP "
              f"{sent['FSDP']:,.0f} (ratio {sent['FSDP'] / sent['DDP']:.2f}); largest weight difference "
              f"{f['max_weight_difference']:.1e} (target <= {SHARDED_WEIGHTS_MAX_DIFF:g}: "
              f"{'ok' if f['checks'][-1]['ok'] else 'MISSED'})"]
    return lines


def _optimizer_lines(o: dict) -> list[str]:
    lines = ["", f"## Chapter 4 optimizers ({o['steps']} steps, seed {o['seed']}, {o['device']})", "",
             "| optimizer | state bytes | theory bytes | measured / theory (target within 5%) | ms per step | "
             "optimizer.step() ms | final loss |", "|---|---|---|---|---|---|---|"]
    for r in o["rows"]:
        lines.append(f"| {r['optimizer']} | {r['state_bytes']:,} | {r['expected_state_bytes']:,} | "
                     f"{r['state_vs_theory']:.4f} ({'ok' if r['ok'] else 'MISSED'}) | {r['seconds_per_step'] * 1e3:.1f} | "
                     f"{r['optimizer_seconds_per_step'] * 1e3:.1f} | {r['final_loss']:.4f} |")
    ratio = o["eight_bit_over_adamw"]
    lines += ["", f"8-bit state over AdamW's: {'n/a' if ratio is None else f'{ratio:.3f}'} (target <= "
              f"{EIGHT_BIT_OVER_ADAMW_MAX}: {'ok' if o['checks'][-1]['ok'] else 'MISSED'}); final losses within "
              f"{o['final_loss_spread']:.1%} of each other (target <= 10%: "
              f"{'ok' if o['final_loss_spread'] <= FINAL_LOSS_SPREAD_MAX else 'MISSED'})"]
    lines += [f"note: {n}" for n in o["notes"]]
    return lines


def write_report(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    lines = [f"# effitrain benchmarks ({report['hardware']})", "", "## Matmul harness vs torch.utils.benchmark", "",
             "| size | helper GFLOP/s (median / best) | torch.utils.benchmark GFLOP/s (median / best) | ratio "
             "(median, target >= 0.95) | ratio of bests | verdict |", "|---|---|---|---|---|---|"]
    for r in report["harness"]:
        lines.append(f"| {r['size']} | {r['helper_gflops']:.1f} / {r['best_helper_gflops']:.1f} | "
                     f"{r['torch_benchmark_gflops']:.1f} / {r['best_torch_benchmark_gflops']:.1f} | "
                     f"{r['ratio']:.3f} | {r['best_ratio']:.3f} | {'ok' if r['ok'] else 'MISSED'} |")
    lines += ["", "## Notebooks, headless, small size", "", "| notebook | seconds | target | |", "|---|---|---|---|"]
    for r in report["notebooks"]:
        lines.append(f"| {r['notebook']} | {r['seconds']:.1f} | < {r['limit']:.0f} s | {'ok' if r['ok'] else 'MISSED'} |")
    d = report["ddp"]
    lines += ["", "## Workbook loop vs plain DDP", "",
              f"{d['processes']} processes x {d['threads_per_process']} thread(s): workbook {d['workbook_samples_per_s']:.0f} "
              f"samples/s, plain DDP {d['ddp_samples_per_s']:.0f} samples/s, ratio {d['ratio']:.3f} "
              f"(target >= {DDP_RATIO_MIN}: {'ok' if d['ok'] else 'MISSED'})",
              f"the same loop with {d['oversubscribed_threads']} threads in each process (a thread per core, the "
              f"processes fighting over the cores): {d['oversubscribed_samples_per_s']:.0f} samples/s, "
              f"{d['ddp_samples_per_s'] / d['oversubscribed_samples_per_s']:.1f}x slower than plain DDP with cores / N threads"]
    lines += ["", "## Activation checkpointing on the lesson model (batch 8)", "",
              f"| sequence length | activation MiB without / with | memory saved (target >= "
              f"{CHECKPOINT_MEMORY_SAVED_MIN:.0%}) | ms without / with | time added (target <= "
              f"{CHECKPOINT_TIME_ADDED_MAX:.0%}) | verdict |", "|---|---|---|---|---|---|"]
    for r in report["checkpointing"]:
        lines.append(f"| {r['seq_len']} | {r['activation_bytes_off'] / 2**20:.2f} / {r['activation_bytes_on'] / 2**20:.2f} | "
                     f"{r['memory_saved']:.0%} | {r['step_seconds_off'] * 1e3:.0f} / {r['step_seconds_on'] * 1e3:.0f} | "
                     f"{r['time_added']:+.0%} | {'ok' if r['ok'] else 'MISSED'} |")
    lo = report["launch"]
    lines += ["", "## Launch overhead (no target)", "",
              f"bare `python -c 'import torch'`: {lo['python_import_torch_s']:.2f} s; "
              + "; ".join(f"launch with {n} process(es): {sec:.2f} s" for n, sec in lo["launch_s"].items())]
    imp = report["import"]
    lines += ["", "## Import cost", "",
              f"`import effitrain_helpers`: {imp['package_s'] * 1e3:.1f} ms; with the lesson 1.1 helpers "
              f"(torch included): {imp['with_lesson_helpers_s']:.2f} s; heavy libraries imported: "
              f"{', '.join(imp['heavy_imported']) or 'none'} ({'ok' if imp['ok'] else 'MISSED'})"]
    if "optimizers" in report:
        lines += _optimizer_lines(report["optimizers"])
    if "fsdp" in report:
        lines += _fsdp_lines(report["fsdp"])
    if "zero" in report:
        lines += zero_lines(report["zero"])
    if "split" in report:
        lines += split_parallelism.report_lines(report["split"]["tp"], report["split"]["pp"])
    if "long_context" in report:
        lines += long_context.report_lines(report["long_context"]["sp"], report["long_context"]["ring"])
    if "plan" in report:
        lines += plan_accuracy.report_lines(report["plan"]["fake"], report["plan"]["activations"])
    if "precision" in report:
        lines += precision_bytes.report_lines(report["precision"])
    if "mesh" in report:
        lines += mesh_traffic.report_lines(report["mesh"])
    if "activations" in report:
        lines += activation_memory.report_lines(report["activations"])
    if "collectives" in report:
        lines += collectives_lines(report["collectives"])
    if "hand_ddp" in report:
        lines += hand_ddp.report_lines(report["hand_ddp"])
    if "experts" in report:
        lines += experts_bench.report_lines(report["experts"])
    if "busy" in report:
        lines += ["", "## Verdicts with a second process burning one core (lessons 1.1 and 2.3)", "",
                  "| verdict line | reliable | true (target) |", "|---|---|---|"]
        for r in report["busy"]["rows"]:
            lines.append(f"| {r['verdict']} | {'yes' if r['reliable'] else 'no'} | {'ok' if r['ok'] else 'MISSED'} |")
        lines += [f"note: {n}" for n in report["busy"]["notes"]]
    if "editions" in report:
        e = report["editions"]
        lines += ["", "## Classroom editions", "",
                  f"{e['notebooks']} notebooks ({e['exercises']} exercises) built in {e['seconds']:.1f} s "
                  f"(target < {EDITIONS_MAX_S:.0f} s: {'ok' if e['ok'] else 'MISSED'})"]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure the workbook's performance claims.")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--skip-notebooks", action="store_true", help="skip executing the notebooks")
    parser.add_argument("--busy-only", action="store_true", help="only target 8: verdicts with one core burnt")
    parser.add_argument("--lesson-times", action="store_true",
                        help="only target 2, each notebook quiet and then with one core burnt (the README's times)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from effitrain_helpers.core.devices import hardware_summary

    hw = hardware_summary()
    if args.lesson_times:
        return lesson_times()
    if args.busy_only:
        busy = verdicts_under_load()
        for row in busy["rows"]:
            print(f"{'ok' if row['ok'] else 'MISSED'}: {row['verdict']}")
        return 0 if busy["ok"] else 1
    report = {
        "hardware": f"{hw.cpu_model}, {hw.logical_cores} logical cores, torch {hw.torch_version}",
        "harness": harness_vs_torch_benchmark(),
        "notebooks": [] if args.skip_notebooks else notebook_times(),
        "launch": launch_overhead(),
        "ddp": ddp_ratio(),
        "import": import_cost(),
        "checkpointing": checkpointing_tradeoff(),
        "optimizers": optimizer_targets(),
        "editions": editions_build(),
        "fsdp": fsdp_bytes_per_rank(),
        "zero": zero_state_bytes(),
        "split": {"tp": split_parallelism.tp_bytes_per_token(), "pp": split_parallelism.pipeline_bubble()},
        "long_context": {"sp": long_context.sp_targets(), "ring": long_context.ring_targets()},
        "plan": {"fake": plan_accuracy.fake_world_error(), "activations": plan_accuracy.activation_error()},
        "precision": precision_bytes.precision_bytes(),
        "mesh": mesh_traffic.mesh_traffic(),
        "activations": activation_memory.bytes_against_theory(),
        "collectives": all_reduce_costs(),
        "hand_ddp": hand_ddp.hand_ddp_vs_ddp(),
        "experts": experts_bench.expert_parallel_bytes(),
        "busy": verdicts_under_load(),
    }
    write_report(report, args.out)
    print((args.out / "report.md").read_text())
    checks = (report["harness"] + report["notebooks"] + [report["ddp"], report["import"], report["editions"]]
              + [report["busy"]]
              + report["checkpointing"] + report["optimizers"]["checks"] + report["fsdp"]["checks"]
              + report["zero"]["checks"] + [report["split"]["tp"]] + report["split"]["pp"]["checks"]
              + [report["long_context"]["sp"]] + report["long_context"]["ring"]["checks"]
              + [report["plan"]["fake"], report["plan"]["activations"], report["mesh"], report["activations"]]
              + report["precision"]["checks"]
              + report["collectives"]["checks"]
              + report["hand_ddp"]["checks"] + report["experts"]["checks"])
    missed = [r for r in checks if not r["ok"]]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
