"""How fast is training with N processes, and where does the time go? (lesson 2.3, ``effitrain ddp-check``)

``measure_scaling`` runs inside each process of a group and times, on the same model, data and threads:

- the workbook's Accelerate loop (``accelerator.prepare`` + ``accelerator.backward``), in full and with
  gradient synchronisation switched off (``accelerator.no_sync``): the difference is communication;
- a plain PyTorch ``DistributedDataParallel`` loop, the reference the Accelerate loop must keep up with;
- the raw ``all_reduce`` of a buffer as large as the gradient: the communication floor.

Samples per second count every process's samples: ``world_size x batch_size x steps / seconds``. The batch
*per process* is fixed, so the global batch grows with N (each process does the same work per step).

A busy machine makes such timings lie (a one-process run slowed down 8x by another program looks like a great
speed-up). :func:`unreliable_reasons` says when a measurement cannot be trusted: repeats spread too far,
interleaved rounds disagree, or fewer idle cores than the threads the run needs (measured with psutil just
before timing); :func:`scaling_verdict` then states that instead of a conclusion.
"""

from __future__ import annotations

import os
import statistics
import time

from effitrain_helpers.core.language import tr

SPREAD_LIMIT = 0.25  # (slowest - fastest) / median of one loop's repeats
ROUNDS_LIMIT = 0.25  # how far apart the interleaved rounds' workbook / DDP time ratios may be (relative)
IDLE_MARGIN = 0.5  # a run needs at least (threads - this) idle cores
PLAUSIBLE_SPEEDUP = 1.25  # N processes on N x the cores at most N times as fast, with this margin


def idle_cores(interval: float = 0.3) -> float | None:
    """Cores (of those this process may use) that no program used during ``interval`` seconds, e.g. 1.0 when
    another program keeps one of 2 cores busy; None where psutil cannot tell."""
    try:
        import psutil

        busy = psutil.cpu_percent(interval=interval, percpu=True)
    except (ImportError, OSError):
        return None
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(len(busy))
    return sum(100.0 - busy[i] for i in mine if i < len(busy)) / 100.0


def unreliable_reasons(times: dict[str, list[float]], threads_needed: int, idle: float | None) -> list[str]:
    """Why timings taken in interleaved rounds cannot be trusted; an empty list when they look sound.

    ``times`` maps each timed loop to its seconds per round (the rounds interleave the loops, so a busy moment
    hits them alike); ``threads_needed`` is processes x threads; ``idle`` the idle cores seen before timing.
    """
    reasons = []
    for name, values in times.items():
        if len(values) >= 2 and min(values) > 0:
            spread = (max(values) - min(values)) / statistics.median(values)
            if spread > SPREAD_LIMIT:
                reasons.append(tr("the {name} loop's {count} repeats spread {spread:.0%} (more than {limit:.0%})",
                                  name=name, count=len(values), spread=spread, limit=SPREAD_LIMIT))
    if len(times.get("workbook", [])) >= 2 and len(times.get("ddp", [])) == len(times["workbook"]):
        ratios = [w / d for w, d in zip(times["workbook"], times["ddp"]) if d > 0]
        if ratios and max(ratios) / min(ratios) - 1 > ROUNDS_LIMIT:
            reasons.append(tr("the interleaved rounds disagree: workbook / DDP time went from {low:.2f} to "
                              "{high:.2f} between rounds", low=min(ratios), high=max(ratios)))
    if idle is not None and idle < threads_needed - IDLE_MARGIN:
        reasons.append(tr("only {idle:.1f} idle core(s) for {threads} thread(s): another program is using the CPU",
                          idle=idle, threads=threads_needed))
    return reasons


def scaling_verdict(one: dict, many: dict) -> tuple[bool, str]:
    """(reliable, text): how N processes compare with one, or why this run allows no conclusion (a line per
    reason), in lines of at most 100 characters or so, for a notebook's ``print``.

    ``one`` and ``many`` are :func:`measure_scaling` results with 1 and N processes. Besides each run's own
    :func:`unreliable_reasons`, a speed-up above N x ``PLAUSIBLE_SPEEDUP`` is flagged: N processes sharing the
    same cores cannot do that; the one-process run was disturbed.
    """
    n = many["world_size"]
    reasons = ([tr("1 process: {reason}", reason=r) for r in one["unreliable"]]
               + [tr("{n} processes: {reason}", n=n, reason=r) for r in many["unreliable"]])
    ratio = many["workbook_samples_per_s"] / one["workbook_samples_per_s"]
    if ratio > n * PLAUSIBLE_SPEEDUP:
        reasons.append(tr("{n} processes came out {ratio:.1f}x as fast as one, more than {n} processes can gain on "
                          "shared cores", n=n, ratio=ratio))
    if reasons:
        return False, (tr("Unreliable measurement, so no conclusion about speed-up:") + "\n"
                       + "".join(f"  - {r}\n" for r in reasons)
                       + tr("Close other programs (or wait) and run the cell again."))
    if ratio >= 1:
        conclusion = tr("{n} processes processed {ratio:.2f}x the samples per second of one process (faster).",
                        n=n, ratio=ratio)
    else:
        conclusion = tr("{n} processes processed {ratio:.2f}x the samples per second of one process (slower).",
                        n=n, ratio=ratio)
    return True, conclusion + "\n" + tr("Reliable: repeats and rounds consistent, enough idle cores.")


def time_steps(accelerator, step, n: int) -> float:
    """Seconds per step of ``n`` calls of ``step()`` for the whole group: every process waits for the others
    before the clock starts and again before it stops, so each reports the slowest rank's time (lesson 2.3's
    exercise 2 has the learner write this timing; the lesson shows only a first, wrong try)."""
    accelerator.wait_for_everyone()
    start = time.perf_counter()
    for _ in range(n):
        step()
    accelerator.wait_for_everyone()
    return (time.perf_counter() - start) / n


def _timed_steps(model, optimizer, batches, backward, sync_context, accelerator, timer) -> float:
    """Seconds for one optimizer step per batch, as ``timer(accelerator, step, len(batches))`` measured them;
    each ``step()`` ends by synchronising the device, so that the clock sees finished work on a GPU too."""
    from effitrain_helpers.measure.bench import synchronize

    remaining = iter(batches)

    def step() -> None:
        with sync_context():
            backward(model(**next(remaining)).loss)
        optimizer.step()
        optimizer.zero_grad()
        synchronize(str(accelerator.device))

    return float(timer(accelerator, step, len(batches))) * len(batches)


def _allreduce_seconds(numel: int, device, repeats: int = 10) -> float:
    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.bench import synchronize

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return 0.0
    buffer = torch.zeros(numel, device=device)
    dist.all_reduce(buffer)  # warm-up
    dist.barrier()
    synchronize(str(device))
    start = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(buffer)
    synchronize(str(device))
    return (time.perf_counter() - start) / repeats


def measure_scaling(steps: int = 8, batch_size: int = 16, max_length: int = 64, rounds: int = 3, seed: int = 0,
                    timer=time_steps) -> dict:
    """Time the workbook loop, its compute-only part, plain DDP and a raw all_reduce (see module docstring).

    ``timer(accelerator, step, n)`` returns the seconds per step of ``n`` calls of ``step()`` for the whole
    group (:func:`time_steps`; tests pass others).

    Also returns ``seconds_per_round`` (each loop's rounds), ``idle_cores`` (seen just before timing) and
    ``unreliable``: the reasons, if any, not to trust these timings (:func:`unreliable_reasons`).
    """
    import contextlib

    import torch
    import torch.distributed as dist
    from accelerate import Accelerator
    from transformers import DataCollatorWithPadding, set_seed

    from effitrain_helpers.sources.models import load_classifier
    from effitrain_helpers.processes.group import cpu_group_requested
    from effitrain_helpers.training.runs import TrainConfig, build_data

    accelerator = Accelerator(cpu=cpu_group_requested())
    world, rank = accelerator.num_processes, accelerator.process_index
    set_seed(seed)
    model, tokenizer = load_classifier(verbose=False)
    n = (steps + 1) * batch_size * world
    data, _ = build_data(TrainConfig(n_train=n, n_validation=1, max_length=max_length), tokenizer)
    rows = data["train"].with_format("torch", columns=["input_ids", "attention_mask", "labels"])
    collate = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=max_length)
    mine = [rows[i] for i in range(rank, n, world)]  # this rank's share, the same for both loops
    batches = [collate(mine[i:i + batch_size]) for i in range(0, len(mine), batch_size)]
    batches = [{k: v.to(accelerator.device) for k, v in b.items()} for b in batches]
    numel = sum(p.numel() for p in model.parameters())

    plain_model = type(model)(model.config).to(accelerator.device)
    plain_model.load_state_dict(model.state_dict())
    model.train()  # from_pretrained returns eval mode; both loops train, dropout included
    plain_model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer = accelerator.prepare(model, optimizer)
    ddp = torch.nn.parallel.DistributedDataParallel(plain_model) if dist.is_initialized() else plain_model
    ddp_optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    loops = {  # name: (model, optimizer, backward, context)
        "workbook": (model, optimizer, accelerator.backward, contextlib.nullcontext),
        "compute": (model, optimizer, accelerator.backward, lambda: accelerator.no_sync(model)),
        "ddp": (ddp, ddp_optimizer, torch.Tensor.backward, contextlib.nullcontext),
    }
    for m, o, b, c in loops.values():  # warm-up
        _timed_steps(m, o, batches[:1], b, c, accelerator, timer)
    if dist.is_initialized():
        dist.barrier()  # every rank idle at once: what is busy now is other programs
    idle = idle_cores()
    times = {name: [] for name in loops}
    for _ in range(rounds):  # interleaved, so that a busy moment hits every loop alike
        for name, (m, o, b, c) in loops.items():
            times[name].append(_timed_steps(m, o, batches[1:], b, c, accelerator, timer))
    total, compute, ddp_seconds = (statistics.median(times[k]) for k in ("workbook", "compute", "ddp"))
    if world == 1:  # nothing to communicate: any difference between the two timings is noise
        compute = total

    allreduce = _allreduce_seconds(numel, accelerator.device)
    samples = world * batch_size * steps
    threads = torch.get_num_threads()
    return {
        "rank": rank, "world_size": world, "threads": threads, "steps": steps,
        "batch_size_per_process": batch_size, "gradient_mib": numel * 4 / 2**20,
        "workbook_samples_per_s": samples / total, "ddp_samples_per_s": samples / ddp_seconds,
        "compute_s_per_step": compute / steps, "communication_s_per_step": max(0.0, total - compute) / steps,
        "allreduce_s": allreduce, "allreduce_gb_per_s": numel * 4 / allreduce / 1e9 if allreduce else None,
        "seconds_per_round": times, "idle_cores": idle,
        "unreliable": unreliable_reasons(times, world * threads, idle),
    }
