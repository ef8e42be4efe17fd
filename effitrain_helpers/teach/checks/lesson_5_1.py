"""Exercises of lesson 5.1 (shard the model: FSDP against DDP)."""

from __future__ import annotations

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

PROCESSES, STEPS, BATCH = 2, 2, 8  # q1's run: 2 processes, 2 AdamW steps on batches of 8 (4 per process)
TOLERANCE = 1e-6  # largest weight difference allowed against DDP on the same batches
LEARNING_RATE = 1e-3  # train_steps' default: the DDP reference run's AdamW


def _run_learner(shard_fn) -> dict:
    """In each rank: the lesson model sharded by the learner's ``shard_fn(model)`` and trained, then the same
    model replicated with DDP and trained on the same batches. Returns the local shard of every parameter
    before training, the FSDP groups, and both runs' final weights (gathered whole)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from effitrain_helpers.training.model_sharding import (fsdp_groups, full_state, local_part, sharding_batches,
                                                           sharding_model, train_steps)

    rank, world = dist.get_rank(), dist.get_world_size()
    model = sharding_model()
    returned = shard_fn(model)
    if not (isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[1], torch.optim.Optimizer)):
        return {"returned": type(returned).__name__}
    model, optimizer = returned
    shards = {name.removeprefix("module."): local_part(p).detach().clone() for name, p in model.named_parameters()}
    in_model = {id(p) for p in model.parameters()}
    optimized = [p for group in optimizer.param_groups for p in group["params"]]
    seen = {"returned": "pair", "optimizer": type(optimizer).__name__, "lr": optimizer.param_groups[0]["lr"],
            "optimizes_model": sum(id(p) in in_model for p in optimized), "optimized": len(optimized),
            "shards": shards, "groups": fsdp_groups(model)}
    if seen["optimizes_model"] < len(in_model):
        return seen  # training would not move the model: nothing more to compare
    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in sharding_batches(STEPS, BATCH)]
    train_steps(model, mine, optimizer=optimizer)
    ddp = DistributedDataParallel(sharding_model())
    train_steps(ddp, mine)
    return {**seen, "weights": full_state(model), "ddp_weights": full_state(ddp)}


def _check_sharding(shard_fn) -> None:
    import torch

    from effitrain_helpers.training.model_sharding import sharding_model

    ranks = run_learner_in_processes(_run_learner, shard_fn, processes=PROCESSES)
    first = ranks[0]
    if first["returned"] != "pair":
        raise Incorrect(tr("shard returned {got}: return the pair (model, optimizer), the optimizer created "
                           "after fully_shard.", got=first["returned"]))
    whole = dict(sharding_model().named_parameters())
    names = list(ranks[0]["shards"])
    unsharded = [n for n in names if ranks[0]["shards"][n].shape == whole[n].shape and whole[n].shape[0] > 1]
    if len(unsharded) == len(names):
        raise Incorrect(tr("every rank still holds every parameter whole: call fully_shard on the model."))
    if unsharded:
        raise Incorrect(tr("{n} of {total} parameters are still whole on every rank (e.g. {name}): "
                           "fully_shard(model) on the root takes the ones no block took.",
                           n=len(unsharded), total=len(names), name=unsharded[0]))
    if first["optimizes_model"] == 0:
        raise Incorrect(tr("the optimizer holds none of the model's parameters: it was created before fully_shard, "
                           "which replaces every parameter with a sharded DTensor, so its steps would change "
                           "nothing the model uses. Create the optimizer after sharding."))
    if first["optimizes_model"] < len(names):
        raise Incorrect(tr("the optimizer holds {n} of the model's {total} parameters: create it after every "
                           "fully_shard call (each one replaces the parameters it shards).",
                           n=first["optimizes_model"], total=len(names)))
    if first["optimizer"] != "AdamW" or first["lr"] != LEARNING_RATE:
        raise Incorrect(tr("the optimizer is {name} with lr={lr!r}: DDP's reference run uses torch.optim.AdamW "
                           "with lr={want:g}.", name=first["optimizer"], lr=first["lr"], want=LEARNING_RATE))
    groups = ranks[0]["groups"]
    blocks = len(sharding_model().blocks)
    if len(groups) < blocks + 1:
        raise Incorrect(tr("the model has {groups} FSDP group(s), so all its parameters are gathered at once: "
                           "call fully_shard on each of the {blocks} blocks first, then on the model.",
                           groups=len(groups), blocks=blocks))
    for name in names:
        joined = torch.cat([r["shards"][name] for r in ranks], dim=0)
        if not torch.equal(joined, whole[name].detach()):
            raise Incorrect(tr("the ranks' shards of {name} do not put the parameter back together: each rank "
                               "must hold its own part (fully_shard shards dimension 0).", name=name))
    gap = max(float((r["weights"][k] - r["ddp_weights"][k]).abs().max()) for r in ranks for k in r["weights"])
    if gap > TOLERANCE:
        raise Incorrect(tr("after {steps} steps the weights differ from DDP's on the same batches by {gap:.1e} "
                           "(allowed {allowed:g}).", steps=STEPS, gap=gap, allowed=TOLERANCE))


GB = 1e9


def _check_bytes_per_gpu(answer) -> None:
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Incorrect(tr("answer with a pair: (ddp_gb, fsdp_gb)."))
    ddp, fsdp = (as_number(a) for a in answer)
    params, gpus = 1.5e9, 8
    full = params * (4 + 4 + 8) / GB  # float32 parameters, gradients, AdamW's two moments
    if abs(ddp - full) > 0.02 * full:
        for bytes_per, missing in ((4 + 8, msg("the gradients")), (4 + 4, msg("AdamW's two states")),
                                   (4, msg("gradients and AdamW's states"))):
            if abs(ddp - params * bytes_per / GB) <= 0.02 * full:
                raise Incorrect(tr("{ddp:g} GB leaves out {missing}: count 4 bytes of parameter, 4 of gradient and "
                                   "8 of AdamW state per parameter.", ddp=ddp, missing=tr(missing)))
        if abs(ddp - full / gpus) <= 0.02 * full:
            raise Incorrect(tr("DDP does not divide anything: every GPU keeps full copies."))
        raise Incorrect(tr("DDP: {ddp:g} GB per GPU is not what 1.5e9 parameters x bytes per parameter gives.",
                           ddp=ddp))
    if abs(fsdp - full) <= 0.02 * full:
        raise Incorrect(tr("FSDP holds 1/N of each: divide by the number of GPUs."))
    if abs(fsdp - full / gpus) > 0.02 * full / gpus:
        raise Incorrect(tr("FSDP: {fsdp:g} GB is not DDP's bytes divided among {gpus} GPUs.", fsdp=fsdp, gpus=gpus))


def _check_communication_ratio(answer) -> None:
    got = as_number(answer)
    if abs(got - 1.0) < 0.01:
        raise Incorrect(tr("that is the ratio when the parameters stay gathered until backward "
                           "(reshard_after_forward=False): here they are gathered a second time in backward."))
    if abs(got - 2 / 3) < 0.01:
        raise Incorrect(tr("upside down: FSDP sends more than DDP, not less."))
    if abs(got - 1.5) > 0.01:
        raise Incorrect(tr("{got:g}: count all-gathers and reduce-scatters in units of the model's bytes: an "
                           "all-reduce costs two of them.", got=got))


q1 = Exercise(
    "5.1 q1: shard the model with fully_shard, then make its optimizer, in 2 processes",
    _check_sharding,
    usage="q1.check(shard)",
    api=True,
    checked=("checked in 2 processes: every parameter sharded, one FSDP group per block plus the "
             "root, AdamW on the sharded parameters, and weights equal to DDP's after 2 steps."),
    hints=["FSDP2 shards a module's parameters when you call fully_shard on it. Call it bottom-up: each "
           "transformer layer of the ModuleList gets its own group (gathered only while that layer runs), then "
           "the root takes what is left (the embedding and the head). The optimizer comes last: fully_shard "
           "replaces the module's tensors with sharded ones, and an optimizer keeps the tensors it was given.",
           "torch.distributed.fsdp.fully_shard(module) works in place and returns the module; the layers are in "
           "model.blocks. The fully_shard docstring says to call it on sub-modules first. The optimizer is "
           "torch.optim.AdamW (its documentation: pytorch.org/docs, torch.optim).",
           "def shard(model):\n    for ____ in ____:\n        fully_shard(____)\n    ____\n"
           "    optimizer = torch.optim.AdamW(____, ____)\n    return model, optimizer"],
    solution_code=(
        "def shard(model):\n    for block in model.blocks:\n        fully_shard(block)\n"
        "    fully_shard(model)\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "    return model, optimizer\n\nq1.check(shard)"
    ),
)
q2 = Exercise(
    "5.1 q2: bytes per GPU for a 1.5B-parameter model",
    _check_bytes_per_gpu,
    usage="q2.check((ddp_gb, fsdp_gb))",
    hints=["Per parameter, float32 training with AdamW keeps the parameter, its gradient and two moments.",
           "That is 4 + 4 + 2 x 4 = 16 bytes per parameter; 1 GB = 1e9 bytes. FSDP divides all three among "
           "the GPUs, DDP divides none.",
           "ddp_gb = 1.5e9 * ____ / 1e9\nfsdp_gb = ____ / ____"],
    solution_code=("ddp_gb = 1.5e9 * (4 + 4 + 8) / 1e9\nfsdp_gb = ddp_gb / 8\n"
                   "q2.check((ddp_gb, fsdp_gb))"),
)
q3 = Exercise(
    "5.1 q3: how much more does FSDP send?",
    _check_communication_ratio,
    usage="q3.check(fsdp_over_ddp)",
    hints=["With ring algorithms, an all-gather and a reduce-scatter each make a rank send all of the "
           "tensor but one N-th of it; an all-reduce is a reduce-scatter followed by an all-gather.",
           "DDP: one all-reduce of the gradients per step. FSDP with every group resharded after forward: "
           "an all-gather in forward, another in backward, and a reduce-scatter of the gradients.",
           "fsdp_over_ddp = (____ + ____ + ____) / ____   # unit: what one all-gather of the model sends"],
    solution_code="fsdp_over_ddp = (1 + 1 + 1) / 2\nq3.check(fsdp_over_ddp)",
)


FIT_PARAMETERS, FIT_DEVICES = 7.5e9, 64  # q4: the ZeRO paper's example, mixed-precision Adam (2 + 2 + 12 bytes)


def _check_zero2_row(answer) -> None:
    from effitrain_helpers.measure.memory_estimate import STAGES, stage_bytes

    got = as_number(answer)
    want = {stage: stage_bytes(FIT_PARAMETERS, FIT_DEVICES, stage)["total"] / GB for stage in STAGES}
    if abs(got - want["ZeRO-2"]) <= 0.01 * want["ZeRO-2"]:
        return
    if abs(got / GB - want["ZeRO-2"]) <= 0.01 * want["ZeRO-2"]:
        raise Incorrect(tr("{got:g} is in bytes: answer in GB, 1 GB = 1e9 bytes.", got=got))
    mistakes = {"DDP": msg("nothing is sharded there"), "ZeRO-1": msg("only the optimizer state is sharded there: "
                                                                   "ZeRO-2 shards the gradients too"),
                "ZeRO-3": msg("the parameters are sharded there too: ZeRO-2 keeps the 16-bit parameters whole")}
    for stage, why in mistakes.items():
        if abs(got - want[stage]) <= 0.01 * want[stage]:
            raise Incorrect(tr("{got:g} GB is {stage}'s row ({why}).", got=got, stage=stage, why=tr(why)))
    raise Incorrect(tr("{got:g} GB: count 2 bytes of parameter per value on every device, and the 2 of gradient "
                       "plus the 12 of optimizer state divided among the {devices} devices.",
                       got=got, devices=FIT_DEVICES))


q4 = Exercise(
    "5.1 q4: will it fit? ZeRO-2's bytes per device for 7.5B parameters on 64 devices",
    _check_zero2_row,
    usage="q4.check(zero2_gb)",
    hints=["ZeRO-2 shards the gradients and the optimizer state among the devices; every device keeps the "
           "whole 16-bit parameters.",
           "The ZeRO paper's accounting, in effitrain_helpers/measure/memory_estimate.py (or `effitrain memory "
           "--help`): ZeRO-2 keeps p·Ψ + (g + K)·Ψ/N bytes per device; here p = g = 2 bytes.",
           "zero2_gb = (____ * 7.5e9 + (____ + ____) * 7.5e9 / ____) / 1e9"],
    solution_code="zero2_gb = (2 * 7.5e9 + (2 + 12) * 7.5e9 / 64) / 1e9\nq4.check(zero2_gb)",
)
