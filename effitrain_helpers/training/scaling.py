"""How fast is training with N processes, and where does the time go? (lesson 2.3, ``effitrain ddp-check``)

``measure_scaling`` runs inside each process of a group and times, on the same model, data and threads:

- the workbook's Accelerate loop (``accelerator.prepare`` + ``accelerator.backward``), in full and with
  gradient synchronisation switched off (``accelerator.no_sync``): the difference is communication;
- a plain PyTorch ``DistributedDataParallel`` loop, the reference the Accelerate loop must keep up with;
- the raw ``all_reduce`` of a buffer as large as the gradient: the communication floor.

Samples per second count every process's samples: ``world_size x batch_size x steps / seconds``.
"""

from __future__ import annotations

import statistics
import time


def _timed_steps(model, optimizer, batches, backward, sync_context, device) -> float:
    """Seconds for one optimizer step per batch (the slowest rank's time, as a synchronous step waits for it)."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.bench import synchronize

    synchronize(str(device))
    start = time.perf_counter()
    for batch in batches:
        with sync_context():
            backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
    synchronize(str(device))
    seconds = torch.tensor([time.perf_counter() - start], device=device)
    if dist.is_initialized():
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return float(seconds)


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


def measure_scaling(steps: int = 8, batch_size: int = 16, max_length: int = 64, rounds: int = 3, seed: int = 0) -> dict:
    """Time the workbook loop, its compute-only part, plain DDP and a raw all_reduce (see module docstring)."""
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
        _timed_steps(m, o, batches[:1], b, c, accelerator.device)
    times = {name: [] for name in loops}
    for _ in range(rounds):  # interleaved, so that a busy moment hits every loop alike
        for name, (m, o, b, c) in loops.items():
            times[name].append(_timed_steps(m, o, batches[1:], b, c, accelerator.device))
    total, compute, ddp_seconds = (statistics.median(times[k]) for k in ("workbook", "compute", "ddp"))
    if world == 1:  # nothing to communicate: any difference between the two timings is noise
        compute = total

    allreduce = _allreduce_seconds(numel, accelerator.device)
    samples = world * batch_size * steps
    return {
        "rank": rank, "world_size": world, "threads": torch.get_num_threads(), "steps": steps,
        "batch_size_per_process": batch_size, "gradient_mib": numel * 4 / 2**20,
        "workbook_samples_per_s": samples / total, "ddp_samples_per_s": samples / ddp_seconds,
        "compute_s_per_step": compute / steps, "communication_s_per_step": max(0.0, total - compute) / steps,
        "allreduce_s": allreduce, "allreduce_gb_per_s": numel * 4 / allreduce / 1e9 if allreduce else None,
    }
