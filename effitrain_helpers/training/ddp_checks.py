"""Does data parallelism really do its four steps? Checked with numbers, in every process (lesson 2.2).

``four_steps`` runs inside each process of a group (started by ``launch`` or ``torchrun``). On one global
batch it records what a lesson asserts:

1. data sharding: which samples of the global batch this rank received;
2. model replication: a fingerprint of the weights each rank starts from;
3. gradient aggregation: after ``accelerator.backward``, the largest difference between this rank's gradient
   and the gradient one process computes on the whole global batch, and between ranks;
4. parameter synchronisation: after ``optimizer.step()``, the largest difference between ranks' weights.

Dropout is off (``model.eval()``) so that every process computes the very same function. ``break_replica=True``
perturbs rank 1's weights after ``prepare``, and ``skip_gradient_sync=True`` lets every process step with its own
gradient (``accelerator.no_sync``): the checks must catch both. ``summarize_four_steps`` turns the
reports into four booleans with their measured maximum differences.
"""

from __future__ import annotations

import contextlib
import copy

from effitrain_helpers.core.language import tr

TOLERANCE = 1e-5


def _flat_grads(model):
    import torch

    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters() if p.grad is not None])


def _spread_across_ranks(vector) -> float:
    """Largest elementwise difference of ``vector`` between any two ranks (0 in a single process)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return 0.0
    high, low = vector.clone(), vector.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float(torch.max(high - low))


def four_steps(global_batch: int = 8, max_length: int = 64, seed: int = 0, break_replica: bool = False,
               skip_gradient_sync: bool = False) -> dict:
    """One data-parallel training step on ``global_batch`` samples, measured (see module docstring)."""
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding, set_seed

    from effitrain_helpers.sources.models import load_classifier
    from effitrain_helpers.processes.group import cpu_group_requested
    from effitrain_helpers.training.runs import TrainConfig, build_data, weights_fingerprint

    accelerator = Accelerator(cpu=cpu_group_requested())
    world, rank = accelerator.num_processes, accelerator.process_index
    if global_batch % world:
        raise ValueError(tr("global_batch={global_batch} does not split evenly over {world} processes; use a multiple "
                            "of {world}.", global_batch=global_batch, world=world))
    set_seed(seed)
    model, tokenizer = load_classifier(verbose=False)
    data, _ = build_data(TrainConfig(n_train=global_batch, n_validation=1, max_length=max_length), tokenizer)
    rows = data["train"].with_format("torch", columns=["input_ids", "attention_mask", "labels", "idx"])
    collate = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=max_length)
    twin = copy.deepcopy(model)  # the single-process reference, same initial weights
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(rows, batch_size=global_batch // world, collate_fn=collate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if break_replica and rank == 1:
        with torch.no_grad():
            next(model.parameters()).add_(1e-3)
    report = {"rank": rank, "world_size": world, "initial_fingerprint": weights_fingerprint(accelerator.unwrap_model(model))}

    model.eval()  # no dropout: every process computes exactly the same function
    batch = next(iter(loader))
    report["shard"] = batch.pop("idx").tolist()
    with accelerator.no_sync(model) if skip_gradient_sync else contextlib.nullcontext():
        accelerator.backward(model(**batch).loss)
    grads = _flat_grads(model)

    twin.to(accelerator.device).eval()
    full = collate([rows[i] for i in range(global_batch)])
    full.pop("idx")
    twin(**{k: v.to(accelerator.device) for k, v in full.items()}).loss.backward()
    report["grad_vs_single_process"] = float((grads - _flat_grads(twin)).abs().max())
    report["grad_spread_across_ranks"] = _spread_across_ranks(grads)

    optimizer.step()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    report["param_spread_after_step"] = _spread_across_ranks(params)
    report["final_fingerprint"] = weights_fingerprint(accelerator.unwrap_model(model))
    return report


def summarize_four_steps(reports: list[dict], global_batch: int = 8) -> dict:
    """The four checks as booleans, each with the measured quantity it rests on."""
    shards = [set(r["shard"]) for r in reports]
    disjoint = all(not (a & b) for i, a in enumerate(shards) for b in shards[i + 1:])
    covered = set().union(*shards) == set(range(global_batch))
    grad_diff = max(r["grad_vs_single_process"] for r in reports)
    grad_spread = max(r["grad_spread_across_ranks"] for r in reports)
    param_spread = max(r["param_spread_after_step"] for r in reports)
    return {
        "world_size": len(reports),
        "data_sharding": disjoint and covered,
        "shards": [sorted(s) for s in shards],
        "model_replication": len({r["initial_fingerprint"] for r in reports}) == 1,
        "initial_fingerprints": [r["initial_fingerprint"] for r in reports],
        "gradient_aggregation": grad_diff <= TOLERANCE and grad_spread <= TOLERANCE,
        "max_grad_diff_vs_single_process": grad_diff,
        "max_grad_diff_across_ranks": grad_spread,
        "parameter_synchronization": param_spread <= TOLERANCE,
        "max_param_diff_across_ranks": param_spread,
    }


def main() -> None:
    """One rank under torchrun (lesson 5.4: across two nodes): :func:`four_steps` on a global batch of 2 samples
    per rank; rank 0 prints one JSON line: ``world_size``, each rank's report with where it ran (node, local
    rank, address), the four checks (:func:`summarize_four_steps`) and ``identical_weights``."""
    import json
    import os

    import torch.distributed as dist
    from accelerate.utils import gather_object

    from effitrain_helpers.training.train import where_this_rank_runs

    world = int(os.environ.get("WORLD_SIZE", "1"))
    report = four_steps(global_batch=2 * world)
    reports = gather_object([{**report, **where_this_rank_runs()}])
    if report["rank"] == 0:
        print(json.dumps({"world_size": len(reports), "ranks": reports,
                          "checks": summarize_four_steps(reports, 2 * world),
                          "identical_weights": len({r["final_fingerprint"] for r in reports}) == 1}))
    dist.destroy_process_group()


if __name__ == "__main__":
    from effitrain_helpers.processes.ending import exit_without_teardown

    main()
    exit_without_teardown(0)
