"""The ``effitrain`` command line: the lessons' measurements without opening a notebook.

    effitrain devices [--json]
    effitrain bench [--sizes 256,512,1024] [--dtypes float32,bfloat16] [--device cpu|cuda|mps|all]
                    [--repeats 5] [--json] [--plot FILE.png] [--best]
    effitrain shards [--processes N] [--samples M] [--batch-size B] [--uneven] [--json]
    effitrain train [--epochs E] [--n-train N] [--learning-rate LR] ... [--json]
    effitrain ddp-check [--processes N] [--json]
    effitrain model [NAME] [--json]
    effitrain efficiency [--processes N] [--accumulation-steps K] [--local-sgd-steps K] [--steps S] [--json]
    effitrain optimizers [--optimizers adamw,adafactor,adamw8bit] [--steps N] [--learning-rate LR] [--seed S]
                         [--plot FILE.png] [--json]
    effitrain fsdp [--processes N] [--steps S] [--batch-size B] [--json]
    effitrain memory --parameters P [--devices N] [--optimizer mixed|fp32|8bit]
                     [--layers L --hidden H --heads A --sequence S --micro-batch B] [--json]
    effitrain plan --parameters P --layers L --hidden H --heads A --seq S --vocab V --devices N --memory-gb M
                   --global-batch-tokens T [--devices-per-node 8] [--tp --pp --dp --cp --zero --recompute] [--json]
    effitrain resume [--processes N] [--dropout P] [--crash-at STEP] [--checkpoints DIR] [--json]
    effitrain resume --fsdp [--processes N] [--resume-processes M] [--crash-at STEP] [--checkpoints DIR] [--json]
    effitrain resume --torchrun [--processes N] [--dropout P] [--crash-at STEP] [--json]
    effitrain resume --latest DIR
    effitrain collectives [--processes N] [--sizes 1000,100000] [--repeats R] [--json]
    effitrain experts [--processes N] [--tokens 96,80] [--d D] [--hidden H] [--experts E] [--top-k K]
                      [--capacity-factor F] [--json]
    effitrain attention [--n N] [--d D] [--heads H] [--batch B] [--tile T] [--not-causal] [--json]
    effitrain editions --out DIR [--force] [--no-solutions] [--source DIR] [--lang en|pt-BR] [--json]
    effitrain editions --check [--source DIR]
    effitrain editions --for nbgrader --out DIR [--force] [--source DIR] [--lang en|pt-BR] [--json]
    effitrain prefetch [--dir DIR] [--check] [--json]
    effitrain workbook [--dir DIR] [--fresh LESSON] [--source DIR] [--lang en|pt-BR] [--json]
    effitrain progress [--json]
    effitrain grade SUBMISSIONS_DIR --out grades.csv [--feedback DIR] [--wide FILE.csv [--points-row]] [--deadline TIME] [--summary] [--timeout S] [--resume | --merge | --replace]

Bad input prints one line naming the value, what is allowed and how to fix it, and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

try:  # EFFITRAIN_SIZE and EFFITRAIN_LANG are read on import: a bad value is one line on every command, --help too
    from effitrain_helpers.core.settings import SETTINGS  # noqa: F401
except ValueError as _bad_setting:
    print(f"effitrain: error: {_bad_setting}", file=sys.stderr)
    raise SystemExit(2) from None
from effitrain_helpers.core.arguments import OneLineParser, not_empty
from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.core.outputs import check_output_file, check_output_folder

PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def _devices(args) -> int:
    from effitrain_helpers.core.devices import hardware_summary

    summary = hardware_summary()
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.describe())
    return 0


def _bench(args) -> int:
    from effitrain_helpers.measure import bench

    if args.plot:
        check_output_file(args.plot, "--plot", PLOT_SUFFIXES)
    results, notes = bench.run_benchmark(args.sizes, args.dtypes, args.device, args.repeats, progress=not args.json)
    for note in notes:
        print(tr("note: {note}", note=note), file=sys.stderr)
    if args.json:
        for r in results:
            print(json.dumps(r.to_dict()))
    else:
        print(bench.results_table(results))
        for row in bench.speedups(results):
            print(tr("{device} over cpu, {dtype}, n={size}: {speedup:.1f}x", **row))
    if args.best:
        for dev in sorted({r.device for r in results}):
            for dt in sorted({r.dtype for r in results if r.device == dev}):
                sweep = bench.best_achievable(dev, dt)
                eff = tr(", {share:.0%} of {peak:.0f} ({source})", share=sweep.efficiency, peak=sweep.peak_gflops,
                         source=sweep.peak_source) if sweep.peak_gflops else ""
                line = {"device": dev, "dtype": dt, "best_gflops": sweep.best_gflops, "best_size": sweep.best_size,
                        "median_gflops": sweep.median_gflops, "peak_gflops": sweep.peak_gflops}
                print(json.dumps(line) if args.json else
                      tr("best achievable {device} {dtype}: {best:.1f} GFLOP/s at n={size}{efficiency}", device=dev,
                         dtype=dt, best=sweep.best_gflops, size=sweep.best_size, efficiency=eff))
    if args.plot:
        from effitrain_helpers.teach.plots import plot_gflops, save_figure

        save_figure(plot_gflops(results), args.plot)
        print(tr("plot written to {path}", path=args.plot), file=sys.stderr)
    return 0


def _model(args) -> int:
    from effitrain_helpers.sources.models import choose_model

    choice = choose_model(args.name)
    if args.json:
        print(json.dumps({"path": choice.path, "source": choice.source, "reason": choice.reason}))
    else:
        print(choice)
    return 0


def _shards(args) -> int:
    from effitrain_helpers.processes.launch import launch, resolve_num_processes
    from effitrain_helpers.processes.sharding import shard_indices, summarize_shards, validate_request

    n = resolve_num_processes(args.processes, name="--processes")
    validate_request(args.samples, args.batch_size)
    reports = launch(shard_indices, args.samples, args.batch_size, not args.uneven, num_processes=n,
                     cpu=args.cpu, quiet=args.json)
    if args.json:
        for r in reports:
            print(json.dumps({k: r[k] for k in ("rank", "world_size", "indices")}))
        return 0
    for r in reports:
        print(tr("rank {rank} of {world_size}: {indices}", rank=r["rank"], world_size=r["world_size"],
                 indices=r["indices"]))
    summary = summarize_shards(reports, args.samples)
    print(tr("disjoint: {disjoint}; every sample seen: {covers_all}; repeated to even out the batches: {repeated}",
             disjoint=tr("yes") if summary.disjoint else tr("no"), covers_all=tr("yes") if summary.covers_all
             else tr("no"), repeated=summary.repeated or tr("no sample")))
    return 0


# What ``ddp-check`` prints for each key of its record (the JSON keeps the keys).
DDP_CHECK_LABELS = {"data_sharding": msg("data sharding"), "model_replication": msg("model replication"),
                    "gradient_aggregation": msg("gradient aggregation"),
                    "parameter_synchronization": msg("parameter synchronization"),
                    "max_grad_diff_vs_single_process": msg("max grad diff vs single process"),
                    "max_grad_diff_across_ranks": msg("max grad diff across ranks"),
                    "max_param_diff_across_ranks": msg("max param diff across ranks")}


def _ddp_check(args) -> int:
    from effitrain_helpers.training.ddp_checks import four_steps, summarize_four_steps
    from effitrain_helpers.processes.launch import launch, resolve_num_processes
    from effitrain_helpers.training.scaling import measure_scaling

    n = resolve_num_processes(args.processes, minimum=2, name="--processes",
                              why=msg("; a data-parallel check needs at least 2 processes"))
    summary = summarize_four_steps(launch(four_steps, global_batch=4 * n, num_processes=n, quiet=True), 4 * n)
    scaled = launch(measure_scaling, num_processes=n, quiet=True)[0]
    single = launch(measure_scaling, num_processes=1, quiet=True)[0]
    result = {
        "processes": n,
        "checks": {k: summary[k] for k in ("data_sharding", "model_replication", "gradient_aggregation",
                                           "parameter_synchronization")},
        "max_differences": {k: summary[k] for k in ("max_grad_diff_vs_single_process", "max_grad_diff_across_ranks",
                                                    "max_param_diff_across_ranks")},
        "samples_per_second": {"workbook": scaled["workbook_samples_per_s"], "ddp": scaled["ddp_samples_per_s"],
                               "one_process": single["workbook_samples_per_s"]},
        "workbook_over_ddp": scaled["workbook_samples_per_s"] / scaled["ddp_samples_per_s"],
        "communication_s_per_step": scaled["communication_s_per_step"],
        "compute_s_per_step": scaled["compute_s_per_step"],
        "allreduce_gb_per_s": scaled["allreduce_gb_per_s"],
    }
    if args.json:
        print(json.dumps(result))
        return 0
    for name, ok in result["checks"].items():
        print(f"{tr(DDP_CHECK_LABELS[name]):<26} {tr('OK') if ok else tr('FAILED')}")
    print(tr("max differences: {differences}", differences=", ".join(
        tr("{name} {value:.2e}", name=tr(DDP_CHECK_LABELS[k]), value=v) for k, v in result["max_differences"].items())))
    sps = result["samples_per_second"]
    print(tr("samples/s: workbook loop {workbook:.0f} with {n} processes, plain DDP {ddp:.0f} (ratio {ratio:.2f}), "
             "one process {one:.0f}", workbook=sps["workbook"], n=n, ddp=sps["ddp"], ratio=result["workbook_over_ddp"],
             one=sps["one_process"]))
    return 0


def _efficiency(args) -> int:
    from effitrain_helpers.processes.launch import resolve_num_processes
    from effitrain_helpers.training.efficiency import (chapter_records, chapter_table, check_options,
                                                      measure_chapter, precision_conclusion)
    from effitrain_helpers.training.local_sgd import LOCAL_SGD_NEEDS

    n = resolve_num_processes(args.processes, minimum=2, name="--processes", why=LOCAL_SGD_NEEDS)
    check_options(args.accumulation_steps, args.local_sgd_steps, args.steps)
    if not args.json:
        print(tr("measuring the four techniques of chapter 3 ({n} processes for local SGD; about a minute) ...", n=n))
    records = measure_chapter(n, accumulation_steps=args.accumulation_steps, local_sgd_steps=args.local_sgd_steps,
                              steps=args.steps)
    conclusion = precision_conclusion(records)
    if args.json:
        print(json.dumps(chapter_records(records, conclusion)))
    else:
        print(f"{chapter_table(records)}\n\n{conclusion.text}")
    return 0


def _optimizers(args) -> int:
    """Chapter 4: the fair comparison of AdamW, Adafactor and 8-bit AdamW, as a table or JSON records."""
    from effitrain_helpers.training.optimizer_compare import compare_optimizers, comparison_table

    if args.plot:
        check_output_file(args.plot, "--plot", PLOT_SUFFIXES)
    result = compare_optimizers(args.optimizers, steps=args.steps, learning_rate=args.learning_rate, seed=args.seed,
                                progress=not args.json)
    for note in result.notes:
        print(tr("note: {note}", note=note), file=sys.stderr)
    if args.json:
        for record in result.to_records():
            print(json.dumps(record))
    else:
        print(comparison_table(result))
    if args.plot:
        from effitrain_helpers.teach.plots import plot_optimizer_comparison, save_figure

        save_figure(plot_optimizer_comparison(result), args.plot)
        print(tr("plot written to {path}", path=args.plot), file=sys.stderr)
    return 0


def _fsdp(args) -> int:
    """Chapter 5, lesson 5.1: bytes per rank and communication per step, DDP against FSDP, and equivalence."""
    from effitrain_helpers.training.model_sharding import compare_ddp_fsdp, report_table, sharding_arguments

    sharding_arguments(args.processes, args.steps, args.batch_size)  # bad input: one line, before any work
    if not args.json:
        print(tr("training the same model with DDP and with fully_shard (FSDP2) in real CPU processes ..."))
    report = compare_ddp_fsdp(args.processes, steps=args.steps, batch_size=args.batch_size)
    print(json.dumps(report) if args.json else report_table(report))
    return 0


def _add_fsdp_parser(sub) -> None:
    p = sub.add_parser("fsdp", help="chapter 5: bytes per rank and communication per step, DDP against FSDP")
    p.add_argument("--processes", type=int, default=2, help="number of CPU processes, at least 2 (default 2)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps, 1 to 1000 (default: 3 small, 20 full)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per process and step (default: 8 small); "
                   "a run that would need more memory than is available is refused before it starts")
    p.add_argument("--json", action="store_true", help="one JSON record: bytes, theory, communication, differences")
    p.set_defaults(func=_fsdp)


def _memory(args) -> int:
    """Will it fit? Bytes per device under DDP and ZeRO 1-3, with the formulas (lesson 5.1)."""
    from effitrain_helpers.measure.memory_estimate import fit_table, will_it_fit

    shape = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "sequence", "micro_batch")}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < len(shape):
        missing = ", ".join("--" + k.replace("_", "-") for k, v in shape.items() if v is None)
        raise ValueError(tr("the transformer's shape needs all five of --layers, --hidden, --heads, --sequence, "
                            "--micro-batch; missing: {missing}. Fix: give them all, or none.", missing=missing))
    report = will_it_fit(args.parameters, args.devices, args.optimizer, shape if given else None)
    print(json.dumps(report) if args.json else fit_table(report))
    return 0


def _add_memory_parser(sub) -> None:
    p = sub.add_parser("memory", help="will it fit? bytes per device under DDP and ZeRO 1-3, with the formulas")
    p.add_argument("--parameters", required=True, help="number of parameters, e.g. 7.5e9")
    p.add_argument("--devices", type=int, default=1, help="number of devices (data-parallel ranks, default 1)")
    p.add_argument("--optimizer", default="mixed", help="mixed (2+2+12 bytes), fp32 (4+4+8) or 8bit (default mixed)")
    p.add_argument("--layers", type=int, default=None, help="transformer layers (with the other four: activations)")
    p.add_argument("--hidden", type=int, default=None, help="hidden size (with the other four: activations)")
    p.add_argument("--heads", type=int, default=None, help="attention heads (with the other four: activations)")
    p.add_argument("--sequence", type=int, default=None, help="sequence length (with the other four: activations)")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="sequences per device and step (with the other four: activations)")
    p.add_argument("--json", action="store_true", help="one JSON record: bytes per device by stage and kind, formulas")
    p.set_defaults(func=_memory)


def _plan(args) -> int:
    """Which parallel configuration fits, and how fast? Ranked configurations with memory per part (lesson 7.3)."""
    from effitrain_helpers.measure.memory_estimate import count_parameters
    from effitrain_helpers.measure.planner import Cluster, Model, plan, plan_table

    model = Model(count_parameters(args.parameters), args.layers, args.hidden, args.heads, args.seq, args.vocab)
    cluster = Cluster(args.devices, args.memory_gb, args.devices_per_node, args.intra_gbps, args.inter_gbps,
                      args.peak_tflops, args.efficiency)
    fixed = {k: getattr(args, k) for k in ("dp", "tp", "pp", "cp", "zero", "recompute")}
    report = plan(model, cluster, args.global_batch_tokens, fixed, args.optimizer)
    print(json.dumps(report) if args.json else plan_table(report, args.top))
    return 0


def _add_plan_parser(sub) -> None:
    from effitrain_helpers.measure import planner

    p = sub.add_parser("plan", help="which parallel configuration (DP, ZeRO, TP, PP, CP, recomputation) fits, and "
                                    "how fast? ranked, memory per device by part")
    p.add_argument("--parameters", type=float, required=True,
                   help="the model's parameters in all, embeddings included, e.g. 70e9")
    p.add_argument("--layers", type=int, required=True, help="transformer layers, e.g. 80")
    p.add_argument("--hidden", type=int, required=True, help="hidden size, e.g. 8192")
    p.add_argument("--heads", type=int, required=True, help="attention heads, e.g. 64")
    p.add_argument("--seq", type=int, required=True, help="sequence length in tokens, e.g. 4096")
    p.add_argument("--vocab", type=int, required=True, help="vocabulary size, e.g. 128256")
    p.add_argument("--devices", type=int, required=True, help="devices in all, e.g. 64")
    p.add_argument("--memory-gb", type=float, required=True, help="memory per device in GB (10^9 bytes), e.g. 80")
    p.add_argument("--global-batch-tokens", type=float, required=True,
                   help="tokens per optimizer step, all devices together, e.g. 4e6")
    p.add_argument("--devices-per-node", type=int, default=8, help="devices per node (default 8)")
    p.add_argument("--intra-gbps", type=float, default=planner.INTRA_GBPS,
                   help="GB/s a device sends inside its node (default 450: NVLink 4)")
    p.add_argument("--inter-gbps", type=float, default=planner.INTER_GBPS,
                   help="GB/s a device sends to other nodes (default 50: 400 Gb/s InfiniBand)")
    p.add_argument("--peak-tflops", type=float, default=planner.PEAK_TFLOPS,
                   help="16-bit peak TFLOP/s per device (default 989: H100 SXM, dense)")
    p.add_argument("--efficiency", type=float, default=planner.EFFICIENCY,
                   help="share of the peak the matrix products reach (default 0.6)")
    p.add_argument("--optimizer", default="mixed",
                   help="mixed (2+2+12 bytes per parameter), fp32 (4+4+8) or 8bit (default mixed)")
    p.add_argument("--dp", type=int, default=None, help="fix the data-parallel degree instead of searching it")
    p.add_argument("--tp", type=int, default=None,
                   help="fix the tensor-parallel degree (it divides --heads) instead of searching it")
    p.add_argument("--pp", type=int, default=None,
                   help="fix the pipeline stages (they divide --layers) instead of searching them")
    p.add_argument("--cp", type=int, default=None,
                   help="fix the context-parallel degree (it divides --seq) instead of searching it")
    p.add_argument("--zero", type=int, default=None, choices=range(4), help="fix the ZeRO stage: 0, 1, 2 or 3")
    p.add_argument("--recompute", default=None, choices=planner.RECOMPUTE,
                   help="fix activation recomputation: none, selective or full (all six fixed: judge that one)")
    p.add_argument("--top", type=int, default=10, help="configurations shown in the text table (default 10)")
    p.add_argument("--json", action="store_true",
                   help="one JSON record: every fitting configuration, ranked, with its memory per device in bytes "
                        "by part")
    p.set_defaults(func=_plan)


def _resume(args) -> int:
    """Chapter 5, lesson 5.3: crash a run, resume it, compare it with an uninterrupted one; or find the newest
    whole checkpoint under a folder (``--latest``)."""
    from pathlib import Path

    from effitrain_helpers.training.resume import (latest_checkpoint, restart_experiment, resume_experiment,
                                                   resume_sharded)

    if args.latest is not None:
        if not Path(args.latest).is_dir():
            raise ValueError(tr("--latest {path} is not a folder. Fix: name the folder that holds the step_<n> "
                                "checkpoints.", path=args.latest))
        folder = latest_checkpoint(args.latest, report=lambda line: print(line, file=sys.stderr))
        print(json.dumps({"latest": str(folder) if folder else None}) if args.json
              else folder or tr("no whole checkpoint under {path}", path=args.latest))
        return 0 if folder else 1
    if not args.json:
        print(tr("an uninterrupted run, a run whose rank 1 is killed, and its resume, in {n} CPU processes each ...",
                 n=args.processes))
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if args.torchrun:
        if args.fsdp or args.resume_processes is not None or args.checkpoints is not None:
            raise ValueError(tr("--torchrun runs the DDP experiment in temporary folders: leave out --fsdp, "
                                "--resume-processes and --checkpoints."))
        result = restart_experiment(args.processes, args.crash_at, 0.1 if args.dropout is None else args.dropout)
        print(json.dumps(result) if args.json else tr(
            "torchrun --max-restarts 1: rank 1 killed after {crash_at} steps, the group restarted ({attempts} "
            "attempts) and resumed from step {start} by itself; largest weight difference from an uninterrupted "
            "torchrun run: {got:.1e}", crash_at=result["crash_at"], attempts=result["attempts"],
            start=result["resumed_from"] or 0, got=result["max_difference"]))
        return 0
    if args.fsdp:
        if args.dropout is not None:
            raise ValueError(tr("--dropout applies to the DDP run; --fsdp trains lesson 5.1's model, which has "
                                "none. Fix: leave out --dropout."))
        result = resume_sharded(args.processes, 1 if args.resume_processes is None else args.resume_processes,
                                args.crash_at, args.checkpoints, report=say)
    elif args.resume_processes is not None:
        raise ValueError(tr("--resume-processes needs --fsdp: the DDP experiment resumes at the world size that "
                            "saved it (each rank's batches and random state are its own). Fix: add --fsdp."))
    else:
        result = resume_experiment(args.processes, 0.1 if args.dropout is None else args.dropout, args.crash_at,
                                   args.checkpoints, report=say)
    if args.json:
        print(json.dumps(result))
        return 0
    if args.fsdp:
        print(tr("sharded on {n}, rank 1 killed after {crash_at} steps, resumed on {m} from step {start}: largest "
                 "weight difference from the uninterrupted run {got:.1e}; between uninterrupted runs on {n} and "
                 "{m} (the tolerance) {floor:.1e}: {verdict}", n=result["processes"], m=result["resume_processes"],
                 crash_at=result["crash_at"], start=result["resumed_from"] or 0, got=result["max_difference"],
                 floor=result["tolerance"], verdict=tr("within") if result["within_tolerance"] else tr("beyond")))
        return 0
    print(tr("rank 1 killed after {crash_at} steps; resumed from step {start} ({lost} step(s) lost); "
             "largest difference from the uninterrupted run after {steps} steps: weights {model:.1e}, AdamW "
             "exp_avg {avg:.1e}, exp_avg_sq {sq:.1e} (dropout {dropout})", crash_at=result["crash_at"],
             start=result["resumed_from"] or 0, lost=result["lost_steps"], steps=result["steps"],
             model=result["max_difference"], avg=result["differences"]["exp_avg"],
             sq=result["differences"]["exp_avg_sq"], dropout=result["dropout"]))
    if args.checkpoints:
        print(tr("checkpoints kept in {path}", path=args.checkpoints))
    return 0


def _add_resume_parser(sub) -> None:
    p = sub.add_parser("resume", help="chapter 5: kill a rank, resume from the newest whole checkpoint, compare")
    p.add_argument("--processes", type=int, default=2, help="number of CPU processes, at least 2 (default 2)")
    p.add_argument("--dropout", type=float, default=None, help="dropout probability in [0, 1) (default 0.1)")
    p.add_argument("--crash-at", type=int, default=None, help="rank 1 is killed after this step (default 14 small)")
    p.add_argument("--fsdp", action="store_true", help="shard with fully_shard, save with torch.distributed.checkpoint")
    p.add_argument("--torchrun", action="store_true",
                   help="run under torchrun --max-restarts 1: the group restarts and resumes by itself")
    p.add_argument("--resume-processes", type=int, default=None,
                   help="with --fsdp: resume at this world size (default 1)")
    p.add_argument("--checkpoints", metavar="DIR", default=None,
                   help="a new or empty folder to keep the checkpoints in (default: a temporary one, removed)")
    p.add_argument("--latest", metavar="DIR", default=None,
                   help="only print the newest whole checkpoint under DIR, saying why others are passed over")
    p.add_argument("--json", action="store_true", help="one JSON record, with max_difference (0.0: bit-identical)")
    p.set_defaults(func=_resume)


def _nodes_outcome(run, as_json: bool) -> dict | int:
    """What ``effitrain nodes`` does with ``run()``: its result, to print as text, or the exit code when nothing
    is left to print (2 after one line on stderr naming the error; 0 after the result as one JSON record)."""
    try:
        result = run()
    except (PermissionError, TimeoutError, RuntimeError) as err:
        print(tr("effitrain {command}: error: {error}", command="nodes", error=err), file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(result))
        return 0
    return result


def _nodes(args) -> int:
    """Chapter 5, lesson 5.4: the course's training script across two nodes (namespaces as root, or loopback)."""
    from effitrain_helpers.core.validate import positive_number
    from effitrain_helpers.training.node_loss import lose_a_node
    from effitrain_helpers.training.nodes import namespace_refusal, run_nodes

    positive_number("--timeout", args.timeout, example="--timeout 300")
    form = args.form or ("loopback" if namespace_refusal() else "namespaces")
    if args.link_rates:
        return _link_rates(args)
    run = lose_a_node if args.lose_a_node else run_nodes
    result = _nodes_outcome(lambda: run(form, args.nproc_per_node, timeout=args.timeout), args.json)
    if isinstance(result, int):
        return result
    if args.lose_a_node:
        print(tr("{form}: world size {before}, node lost after step {lost_at}; re-formed with world size {after}, "
                 "resumed from step {resumed} and finished {steps} steps in {seconds:.1f} s; steps lost: {n} "
                 "(expected {expected})", form=form, before=result["world_sizes"][0], after=result["world_sizes"][1],
                 lost_at=result["lost_at"], resumed=result["resumed_from"], steps=result["steps"],
                 seconds=result["seconds"], n=result["steps_lost"], expected=result["expected_lost"]))
        return 0
    for rank in result["ranks"]:
        print(tr("rank {rank}: node {node}, local rank {local}, address {address}, {samples:,} samples seen",
                 rank=rank["rank"], node=rank["node"], local=rank["local_rank"], address=rank["address"],
                 samples=rank["samples_seen"]))
    print(tr("{form}: world size {n} on {nodes} nodes in {seconds:.1f} s; final weights identical on every rank: "
             "{identical}", form=form, n=result["world_size"], nodes=len(result["nodes"]),
             seconds=result["seconds"], identical=result["identical_weights"]))
    return 0


def _link_rates(args) -> int:
    """``effitrain nodes --link-rates``: DDP against FSDP time per step over the rate-limited veth (root)."""
    from effitrain_helpers.training.link_rate import link_rate_steps

    result = _nodes_outcome(lambda: link_rate_steps(timeout=args.timeout), args.json)
    if isinstance(result, int):
        return result
    print(tr("bytes each rank sends per step: DDP {ddp:,.0f}, FSDP {fsdp:,.0f}", ddp=result["bytes_sent"]["DDP"],
             fsdp=result["bytes_sent"]["FSDP"]))
    for row in result["rows"]:
        rate = tr("unlimited") if row["rate"] is None else f"{row['rate'] / 1e6:,.0f} Mbit/s"
        print(tr("{rate}: DDP {ddp:.1f} ms (theory {ddp_t:.1f}), FSDP {fsdp:.1f} ms (theory {fsdp_t:.1f}), "
                 "FSDP / DDP {ratio:.2f}", rate=rate, ddp=1e3 * row["DDP"], ddp_t=1e3 * row["DDP theory"],
                 fsdp=1e3 * row["FSDP"], fsdp_t=1e3 * row["FSDP theory"], ratio=row["FSDP / DDP"]))
    print(tr("below about {ddp:,.0f} Mbit/s (DDP) and {fsdp:,.0f} Mbit/s (FSDP) the link takes longer than the "
             "rest of the step", ddp=result["balance"]["DDP"] / 1e6, fsdp=result["balance"]["FSDP"] / 1e6))
    return 0


def _add_nodes_parser(sub) -> None:
    p = sub.add_parser("nodes", help="chapter 5: two torchrun agents, one per node (network namespaces or loopback)")
    p.add_argument("--form", choices=("namespaces", "loopback"), default=None,
                   help="namespaces (root: two namespaces joined by a veth pair) or loopback (default: namespaces "
                        "as root, else loopback)")
    p.add_argument("--processes-per-node", "--nproc-per-node", type=int, default=2, dest="nproc_per_node",
                   help="ranks per node (default 2: world size 4)")
    p.add_argument("--nodes", type=int, choices=(2,), default=2, help="nodes (the harness makes two)")
    p.add_argument("--link-rates", action="store_true",
                   help="root: DDP against FSDP time per step over the veth limited by tc tbf to 10 Mbit/s..10 Gbit/s")
    p.add_argument("--lose-a-node", action="store_true",
                   help="elastic --nnodes 1:2 --max-restarts 1: kill node 1 mid-run, carry on from the checkpoint")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before both agents are ended (default 300)")
    p.add_argument("--json", action="store_true", help="one JSON record: world_size, nodes, ranks, identical_weights")
    p.set_defaults(func=_nodes)


def _collectives(args) -> int:
    """Chapter 6, lesson 6.1: a ring, gloo's all_reduce and a parameter server, bytes and time per rank."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.core.validate import positive_int
    from effitrain_helpers.measure.all_reduce_cost import NEEDS_A_GROUP, compare_all_reduces, cost_table, parse_lengths
    from effitrain_helpers.processes.launch import resolve_num_processes

    processes = resolve_num_processes(args.processes, minimum=2, name="--processes", why=NEEDS_A_GROUP)
    sizes = parse_lengths(args.sizes) if args.sizes else lesson_size("6.1").sizes
    positive_int("--repeats", args.repeats, example="--repeats 5")
    if not args.json:
        print(tr("all-reducing float32 tensors three ways in {n} real CPU processes ...", n=processes))
    cost = compare_all_reduces(None, sizes=sizes, processes=processes, repeats=args.repeats)
    print(json.dumps(cost) if args.json else cost_table(cost))
    return 0


def _add_collectives_parser(sub) -> None:
    p = sub.add_parser("collectives", help="chapter 6: ring vs gloo all_reduce vs parameter server, bytes and time "
                                           "per rank")
    p.add_argument("--processes", type=int, default=3, help="number of CPU processes, at least 2 (default 3)")
    p.add_argument("--sizes", default=None, help="comma-separated tensor lengths (default: 1000,100000,1000000)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per method and size (default 5)")
    p.add_argument("--json", action="store_true", help="one JSON record: a row per size, method and rank, notes")
    p.set_defaults(func=_collectives)


def _experts(args) -> int:
    """Chapter 8, lesson 8.4: the expert-parallel layer in N gloo ranks, tokens per expert, bytes vs theory."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.core.validate import positive_int, positive_number
    from effitrain_helpers.processes.launch import resolve_num_processes
    from effitrain_helpers.training import expert_parallel

    size = lesson_size("8.4")
    processes = resolve_num_processes(args.processes, minimum=2, name="--processes",
                                      why=msg(": expert parallelism needs at least 2 processes"))
    tokens = tuple(size.tokens)
    if args.tokens is not None:
        tokens = tuple(positive_int("--tokens", _whole(item), maximum=100_000, example="--tokens 96,80")
                       for item in args.tokens.split(","))
        if len(tokens) not in (1, processes):
            raise ValueError(tr("--tokens {tokens} gives {given} batch sizes for {processes} processes: give one, "
                                "or one per process, e.g. --tokens 96,80.", tokens=args.tokens, given=len(tokens),
                                processes=processes))
    tokens = tokens * processes if len(tokens) == 1 else tokens
    for option, value, most in (("--d", args.d, 4096), ("--hidden", args.hidden, 16384),
                                ("--experts", args.experts, 256), ("--top-k", args.top_k, 256)):
        if value is not None:
            positive_int(option, value, maximum=most, example=f"{option} 2")
    if args.capacity_factor is not None:
        positive_number("--capacity-factor", args.capacity_factor, example="--capacity-factor 1.25")
    experts, top_k = args.experts or size.experts, args.top_k or size.top_k
    if experts % processes or top_k > experts:
        raise ValueError(tr("--experts {experts} --top-k {top_k} on {processes} processes: the experts must be a "
                            "multiple of the processes and --top-k at most --experts, e.g. --experts 8 --top-k 2.",
                            experts=experts, top_k=top_k, processes=processes))
    if not args.json:
        print(tr("routing tokens to experts spread over {n} real CPU processes ...", n=processes))
    records = expert_parallel.run(processes, tokens=tokens[:processes], d=args.d or size.d,
                                  hidden=args.hidden or size.hidden, experts=experts, top_k=top_k,
                                  capacity_factor=args.capacity_factor or size.capacity_factor)
    print(json.dumps(records) if args.json else expert_parallel.report(records))
    return 0


def _whole(text: str):
    """``text`` as an int when it is one, else as it is (so the check names it)."""
    try:
        return int(text.strip())
    except ValueError:
        return text.strip()


def _add_experts_parser(sub) -> None:
    p = sub.add_parser("experts", help="chapter 8: a mixture-of-experts layer spread over N processes with "
                                       "all_to_all_single: tokens per expert per rank, bytes against the theory")
    p.add_argument("--processes", type=int, default=2, help="number of CPU processes, at least 2 (default 2)")
    p.add_argument("--tokens", default=None,
                   help="tokens on each process, comma-separated, one value or one per process (default 96,80,72,64)")
    p.add_argument("--d", type=int, default=None, help="width of a token (default 32)")
    p.add_argument("--hidden", type=int, default=None, help="hidden width of each expert (default 64)")
    p.add_argument("--experts", type=int, default=None,
                   help="number of experts, a multiple of --processes (default 8)")
    p.add_argument("--top-k", type=int, default=None, help="experts per token, 1 to --experts (default 2)")
    p.add_argument("--capacity-factor", type=float, default=None,
                   help="each expert takes at most ceil(factor x tokens x k / experts) assignments (default 1.25)")
    p.add_argument("--json", action="store_true",
                   help="one JSON record per process: differences, tokens per expert, bytes measured and theory")
    p.set_defaults(func=_experts)


def _attention(args) -> int:
    """Chapter 8, lesson 8.1: bytes kept for backward by plain, SDPA math, SDPA flash and tiled attention."""
    from effitrain_helpers.training import attention_memory

    from effitrain_helpers.core.validate import positive_int

    for option, value, most in (("--n", args.n, 8192), ("--d", args.d, 1024), ("--heads", args.heads, 64),
                                ("--batch", args.batch, 64), ("--tile", args.tile, 8192)):
        positive_int(option, value, maximum=most, example=f"{option} 64")
    if not args.json:
        print(tr("measuring what each attention keeps for backward at n = {n} ...", n=args.n))
    result = attention_memory.compare(args.batch, args.heads, args.n, args.d, not args.not_causal, args.tile)
    print(json.dumps(result) if args.json else attention_memory.report(result))
    return 0


def _add_attention_parser(sub) -> None:
    p = sub.add_parser("attention", help="chapter 8: bytes kept for backward by plain attention, SDPA's math and "
                                         "flash kernels and the tiled FlashAttention-2, with its exactness")
    p.add_argument("--n", type=int, default=512, help="sequence length (default 512)")
    p.add_argument("--d", type=int, default=32, help="width of a head (default 32)")
    p.add_argument("--heads", type=int, default=2, help="heads (default 2)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--tile", type=int, default=64, help="queries and keys per tile of the tiled version (default 64)")
    p.add_argument("--not-causal", action="store_true", help="no causal mask (default: causal)")
    p.add_argument("--json", action="store_true",
                   help="one JSON record: bytes per way (measured and theory) and the differences from SDPA")
    p.set_defaults(func=_attention)


def _add_optimizers_parser(sub) -> None:
    p = sub.add_parser("optimizers", help="AdamW vs Adafactor vs 8-bit AdamW: state bytes, time per step, loss")
    p.add_argument("--optimizers", default="adamw,adafactor,adamw8bit",
                   help="comma-separated, from adamw, adafactor, adamw8bit (default: all three)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps per optimizer, 1 to 4000 (default: 150 small, 400 full)")
    p.add_argument("--learning-rate", type=float, default=None, help="one rate for all (default: each one's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the batch order (default 0)")
    p.add_argument("--plot", metavar="FILE.png", help="also save the comparison figure")
    p.add_argument("--json", action="store_true", help="one JSON record per optimizer")
    p.set_defaults(func=_optimizers)
def _editions(args) -> int:
    import time

    from effitrain_helpers.teach.editions import build_editions, check_markers

    if args.check:
        counts = check_markers(args.source)
        print(json.dumps(counts) if args.json else
              tr("markers OK: {n} exercises in {notebooks} notebooks", n=sum(counts.values()), notebooks=len(counts)))
        return 0
    if args.out is None:
        raise ValueError(tr("--out DIR is missing: where to write the editions (or --check to only check the markers)."))
    check_output_folder(args.out, "--out")
    start = time.perf_counter()
    if args.target == "nbgrader":
        return _nbgrader_source(args, start)
    summary = build_editions(args.out, source=args.source, force=args.force, solutions=not args.no_solutions,
                             lang=args.lang)
    summary["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(summary))
        return 0
    n = sum(summary["exercises"].values())
    print(tr("wrote {notebooks} notebooks ({n} exercises) to {out}/student and {out}/instructor in {seconds:.1f} s; "
             "solution() in the student edition: {solutions}", notebooks=summary["notebooks"], n=n, out=args.out,
             seconds=summary["seconds"], solutions=tr("on") if summary["solutions_in_student_edition"]
             else tr("off (graded class)"))
          + (tr("; in {language}: {n} notebooks translated, the others in English", language=args.lang,
                n=len(summary["translated"])) if args.lang != "en" else ""))
    return 0


def _nbgrader_source(args, start: float) -> int:
    """``editions --for nbgrader``: the nbgrader course folder (:mod:`~effitrain_helpers.teach.nbgrader_source`)."""
    import time

    from effitrain_helpers.teach.nbgrader_source import build_nbgrader

    if args.no_solutions:
        raise ValueError(tr("--no-solutions does not go with --for nbgrader: nbgrader's release never holds the "
                            "solutions. Fix: leave --no-solutions out."))
    summary = build_nbgrader(args.out, source=args.source, force=args.force, lang=args.lang)
    summary["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(summary))
        return 0
    print(tr("wrote {n} nbgrader assignments ({tests} autograded cells, {points} points) to {out}/source in "
             "{seconds:.1f} s; then, in {out}: nbgrader generate_assignment {first}", n=len(summary["assignments"]),
             tests=summary["test_cells"], points=summary["points"], out=args.out, seconds=summary["seconds"],
             first=summary["assignments"][0]))
    return 0


def _prefetch(args) -> int:
    from effitrain_helpers.sources import kit

    if args.check:
        text = kit.describe_kit(args.dir)
        broken = text.startswith("Offline kit: broken") or "BROKEN" in text
        print(json.dumps({"kit": text, "ok": not broken}) if args.json else text)
        return 1 if broken else 0
    summary = kit.prefetch(args.dir, progress=not args.json)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(tr("kit ready in {kit} ({seconds:.0f} s): {items}", kit=summary["kit"], seconds=summary["seconds"],
             items=", ".join(summary["items"])))
    print(tr("Copy that folder to each student machine and set {env}=<its path> (or put it at {default}); check it "
             "there with `effitrain prefetch --check`.", env=kit.KIT_ENV, default=kit.SETTINGS.cache_dir / "kit"))
    return 0


def _workbook(args) -> int:
    from effitrain_helpers.teach.workbook import FRESH, Workbook, describe

    book = Workbook(args.dir, args.source, args.lang)
    try:
        report = [book.fresh(args.fresh)] if args.fresh else book.sync()
    except TimeoutError:  # another run held the folder too long: its own line names it
        raise
    except OSError as err:
        raise ValueError(tr("cannot write your workbook in {folder!r} ({reason}). Fix: make it writable, or choose "
                            "another folder with --dir (or EFFITRAIN_WORKBOOK).", folder=str(book.folder),
                            reason=err.strerror)) from None
    if args.json:
        print(json.dumps({"folder": str(book.folder), "notebooks": [vars(c) for c in report]}))
    elif args.fresh:
        (copy,) = report
        kept = tr("; yours is kept as {path}", path=copy.kept_as) if copy.kept_as else ""
        print(tr("{fresh} of {notebook} in {folder}{kept}", fresh=tr(FRESH), notebook=copy.notebook,
                 folder=book.folder, kept=kept))
    else:
        print(describe(report, book.folder))
    return 0


def _progress(args) -> int:
    from effitrain_helpers.teach.progress import progress_table
    from effitrain_helpers.teach.verdicts import verdicts_file

    table = progress_table()
    print(json.dumps(table.to_records()) if args.json else
          f"{table!r}\n" + tr("(verdicts of check() in {path})", path=verdicts_file()))
    if args.json and table.skipped:
        print(tr("note: {n} lines of {path} could not be read and were skipped", n=table.skipped,
                 path=str(verdicts_file())), file=sys.stderr)
    return 0


def _grade(args) -> int:
    from collections import Counter

    from effitrain_helpers.teach.grade import grade

    mode = next((m for m in ("resume", "merge", "replace") if getattr(args, m)), None)
    rows = grade(args.submissions, args.out, args.timeout, source=args.source, roster=args.roster, mode=mode,
                 unsafe=args.unsafe, feedback=args.feedback, wide=args.wide, deadline=args.deadline,
                 jobs=args.jobs, points_row=args.points_row)
    counts = Counter(r.status for r in rows)
    print(tr("wrote {rows} rows for {students} students to {out}: {counts}", rows=len(rows),
             students=len({r.student for r in rows}), out=args.out,
             counts=", ".join(tr("{n} {status}", n=n, status=tr(status)) for status, n in sorted(counts.items()))))
    if args.summary:
        from pathlib import Path

        from effitrain_helpers.teach.grade import read_gradebook
        from effitrain_helpers.teach.reports import summary_table

        print(summary_table(read_gradebook(Path(args.out).expanduser())))
    return 0


def _grade_seconds(text: str) -> float:
    """``--timeout`` of ``grade``: refused at once unless :func:`~effitrain_helpers.teach.grade.check_timeout`
    accepts it (seconds, a fraction allowed, > 0 and at most a day)."""
    from effitrain_helpers.teach.grade import check_timeout

    try:
        value = float(text)
    except ValueError:
        value = text
    try:
        return check_timeout(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _grade_jobs(text: str) -> int:
    """``-j`` of ``grade``: a whole number from 1 to :data:`~effitrain_helpers.teach.grade.MAX_JOBS`."""
    from effitrain_helpers.teach.grade import check_jobs

    try:
        value = int(text)
    except ValueError:
        value = text
    try:
        return check_jobs(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _deadline(text: str) -> str:
    """``--deadline`` of ``grade``: refused at once unless it reads as an ISO 8601 time."""
    from effitrain_helpers.teach.grade import check_deadline

    try:
        check_deadline(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _language(text: str) -> str:
    from effitrain_helpers.core.settings import check_lang

    try:
        return check_lang(text, "")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_lang(p) -> None:
    from effitrain_helpers.core.settings import LANGUAGES, SETTINGS

    p.add_argument("--lang", type=_language, default=SETTINGS.lang,
                   help=tr("language of the notebooks: {languages} (default: $EFFITRAIN_LANG, else en); a lesson "
                           "not translated yet comes in English", languages=", ".join(LANGUAGES)))


def add_learner_commands(sub) -> None:
    """The learner's ``workbook`` (their own copy) and ``progress``, the instructor's ``grade``."""
    p = sub.add_parser("workbook", help="write or update your own copy of the lessons (blank exercises); "
                                        "never overwrites a notebook you changed")
    p.add_argument("--dir", type=not_empty("--dir"), default=None, help="your workbook folder (default: $EFFITRAIN_WORKBOOK, else my-workbook/)")
    p.add_argument("--fresh", metavar="LESSON", type=not_empty("--fresh"), default=None,
                   help="a fresh copy of one lesson (e.g. 2.2, or start); yours is kept, renamed *_mine-<time>")
    p.add_argument("--source", type=not_empty("--source"), default=None,
                   help="folder of solved notebooks (default: the workbook's notebooks/)")
    _add_lang(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=_workbook)
    p = sub.add_parser("progress", help="per lesson: exercises correct, attempted, not attempted (this machine)")
    p.add_argument("--json", action="store_true", help="one JSON record per lesson")
    p.set_defaults(func=_progress)
    p = sub.add_parser("grade", help="grade every submitted notebook in a sandbox and write one CSV row per student "
                                     "and exercise",
                       description="Runs each submission's lesson from the instructor's source with only the "
                                   "student's answer lines in it, in a bubblewrap sandbox (no network, no view of "
                                   "other submissions or the gradebook; everything it starts ends with it), and "
                                   "appends its verdicts to a CSV file as each notebook finishes. Submissions are "
                                   "never modified.")
    p.add_argument("submissions", metavar="SUBMISSIONS_DIR", type=not_empty("SUBMISSIONS_DIR"),
                   help="folder of submissions: NAME.ipynb per student, or one folder per student")
    p.add_argument("--out", required=True, type=not_empty("--out"), help="the CSV file to write (student, notebook, lesson, exercise, "
                                                "status, detail, submitted, late)")
    p.add_argument("--feedback", metavar="DIR", type=not_empty("--feedback"), default=None,
                   help="also write DIR/STUDENT.html per student: each exercise's verdict, message and points, "
                        "each failed cell (offline HTML)")
    p.add_argument("--wide", metavar="FILE.csv", type=not_empty("--wide"), default=None,
                   help="also write one row per student: a column per exercise (e.g. '1.1 q2'), per lesson total, "
                        "total, late; for Canvas, Moodle, Gradescope")
    p.add_argument("--points-row", action="store_true",
                   help="with --wide: a first row 'Points Possible' (what each column is worth), as Canvas's "
                        "gradebook import reads it")
    p.add_argument("--deadline", type=_deadline, default=None,
                   help="ISO 8601 time (e.g. 2026-12-01T23:59, this machine's zone when none): rows of notebooks "
                        "handed in later (timestamp.txt beside it, else the file's time) are marked late")
    p.add_argument("-j", "--jobs", type=_grade_jobs, default=1,
                   help="notebooks graded at once, each in its own sandbox (default 1; about one per CPU core)")
    p.add_argument("--summary", action="store_true",
                   help="print per exercise how many students were correct, incorrect, did not attempt it")
    p.add_argument("--timeout", type=_grade_seconds, default=300.0,
                   help="seconds each notebook may run before its kernel and everything it started are stopped: "
                        "a number > 0 (fractions allowed), at most 86400 (default 300)")
    p.add_argument("--source", type=not_empty("--source"), default=None,
                   help="folder of the instructor's solved notebooks (default: the workbook's notebooks/)")
    p.add_argument("--roster", type=not_empty("--roster"), default=None,
                   help="CSV with columns file,student: the student of each file (path under SUBMISSIONS_DIR)")
    keep = p.add_mutually_exclusive_group()
    keep.add_argument("--resume", action="store_true", help="--out holds an interrupted run: grade only the rest")
    keep.add_argument("--merge", action="store_true", help="keep --out's rows of other notebooks, replace the rest")
    keep.add_argument("--replace", action="store_true", help="start --out over (its rows are dropped)")
    p.add_argument("--unsafe", action="store_true", help="without bubblewrap: run the submissions with your "
                                                         "permissions, outside any sandbox")
    p.set_defaults(func=_grade)


def add_classroom_commands(sub) -> None:
    """The instructor's commands: ``editions`` (student/instructor notebooks) and ``prefetch`` (offline kit)."""
    p = sub.add_parser("editions", help="write the student and instructor editions of the notebooks")
    p.add_argument("--out", type=not_empty("--out"), default=None, help="output folder (gets student/ and instructor/)")
    p.add_argument("--check", action="store_true", help="only check the exercise markers of the source notebooks")
    p.add_argument("--for", dest="target", choices=["nbgrader"], default=None,
                   help="nbgrader: write an nbgrader course folder instead (DIR/source/LESSON/LESSON.ipynb, one "
                        "assignment per lesson: read-only cells, answer cells, test cells worth the exercise's points)")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out: replace the notebooks a "
                   "build wrote (student/ and instructor/; with --for nbgrader, source/), keep every other file")
    p.add_argument("--no-solutions", action="store_true", help="turn q.solution() off in the student edition (graded class)")
    p.add_argument("--source", type=not_empty("--source"), default=None,
                   help="folder of solved notebooks (default: the workbook's notebooks/)")
    _add_lang(p)
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=_editions)
    p = sub.add_parser("prefetch", help="download the real model, processors and GLUE MRPC into an offline kit")
    p.add_argument("--dir", type=not_empty("--dir"), default=None, help="kit folder (default: $EFFITRAIN_KIT, else ~/.cache/effitrain/kit)")
    p.add_argument("--check", action="store_true", help="download nothing: say what the kit holds and if it is usable")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(func=_prefetch)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="effitrain", description="Efficient AI model training workbook: measurements from a terminal.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    p = sub.add_parser("devices", help="what hardware this machine has")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_devices)
    p = sub.add_parser("bench", help="matrix-multiplication throughput over sizes x dtypes x devices")
    p.add_argument("--sizes", default=None, help="comma-separated matrix sizes (default: each device's lesson sizes)")
    p.add_argument("--dtypes", default="float32", help="comma-separated: float32,bfloat16,float16")
    p.add_argument("--device", default="all", help="cpu, cuda, cuda:N, mps or all (default)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement, 1 to 1000 (default 5)")
    p.add_argument("--json", action="store_true", help="one JSON record per measurement")
    p.add_argument("--plot", metavar="FILE.png", help="also save a GFLOP/s plot")
    p.add_argument("--best", action="store_true", help="also sweep sizes for the best achievable rate")
    p.set_defaults(func=_bench)
    p = sub.add_parser("shards", help="which samples each of N real processes receives from accelerator.prepare")
    p.add_argument("--processes", type=int, default=None, help="number of processes (default: every GPU, or 2)")
    p.add_argument("--samples", type=int, default=10, help="dataset size (default 10)")
    p.add_argument("--batch-size", type=int, default=2, help="batch size per process (default 2)")
    p.add_argument("--uneven", action="store_true", help="even_batches=False: no samples repeated at the end")
    p.add_argument("--cpu", action="store_true", help="run the processes on the CPU even with GPUs")
    p.add_argument("--json", action="store_true", help="one JSON record per rank: rank, world_size, indices")
    p.set_defaults(func=_shards)
    sub.add_parser("train", help="fine-tune with the chapter 2 Accelerate loop (see effitrain train --help)")
    p = sub.add_parser("ddp-check", help="prove the four steps of data parallelism and measure scaling")
    p.add_argument("--processes", type=int, default=None, help="number of processes (default: every GPU, or 2)")
    p.add_argument("--json", action="store_true", help="one JSON record: the checks, differences, samples/s")
    p.set_defaults(func=_ddp_check)
    p = sub.add_parser("model", help="which model the lessons would load, and why")
    p.add_argument("name", nargs="?", type=not_empty("NAME"), default=None, help="a local folder or Hub id (default: the course's model)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_model)
    p = sub.add_parser("efficiency", help="chapter 3: accumulation, checkpointing, local SGD, bf16, measured vs theory")
    p.add_argument("--processes", type=int, default=None, help="processes for local SGD (default: every GPU, or 2)")
    p.add_argument("--accumulation-steps", type=int, default=4,
                   help="micro-batches per optimizer step, 1 to 64 (default 4)")
    p.add_argument("--local-sgd-steps", type=int, default=4,
                   help="steps between parameter averages, 1 to --steps (default 4)")
    p.add_argument("--steps", type=int, default=16,
                   help="optimizer steps of the local SGD runs, 1 to 256 (default 16; about a minute)")
    p.add_argument("--json", action="store_true", help="one JSON record per technique, measured and expected ratios")
    p.set_defaults(func=_efficiency)
    _add_optimizers_parser(sub)
    _add_fsdp_parser(sub)
    _add_memory_parser(sub)
    _add_plan_parser(sub)
    _add_resume_parser(sub)
    _add_collectives_parser(sub)
    _add_experts_parser(sub)
    _add_attention_parser(sub)
    _add_nodes_parser(sub)
    add_classroom_commands(sub)
    add_learner_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``effitrain`` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:  # its options belong to the training script's own parser
        from effitrain_helpers.training.train import main as train_main

        return train_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # the helpers' errors for bad input: one line naming the value and the fix
        print(tr("effitrain {command}: error: {error}", command=args.command, error=err), file=sys.stderr)
        return 2
    except BrokenPipeError:  # the output went to a reader that stopped early (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit does not fail
        return 0
    except OSError as err:  # a file or folder the user named (or the cache) cannot be read or written
        print(tr("effitrain {command}: error: {error}", command=args.command, error=_os_error(err)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the launcher and grade have already ended what they started
        print(tr("effitrain {command}: interrupted", command=args.command), file=sys.stderr)
        return 130


def _os_error(err: OSError) -> str:
    """An ``OSError`` in one line: what failed on which path, and what to check (a ``TimeoutError`` says its own)."""
    if isinstance(err, TimeoutError) and str(err):
        return str(err)
    what = err.strerror or (str(err).strip().splitlines() or [type(err).__name__])[0]
    where = f" ({err.filename})" if err.filename else ""
    return tr("{what}{where}. Fix: check that the path exists, is the kind of file expected and can be read (or "
              "written, for an output).", what=what, where=where)


if __name__ == "__main__":
    sys.exit(main())
