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
BYTES_MODELS = ({}, {"width": 32, "depth": 3, "classes": 5})  # q2: the lesson's model, and one of another shape
MODEL_NAMES = (msg("the lesson's model"), msg("the second model"))


def _local(tensor):
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _bytes(tensors, local: bool = True) -> int:
    return sum((_local(t) if local else t).numel() * t.element_size() for t in tensors)


def _run_bytes(count_fn) -> list[dict]:
    """In each rank, for each of :data:`BYTES_MODELS`: the model sharded block by block, one forward, backward
    and AdamW step (gradients kept), then the learner's ``count_fn(model, optimizer)``. Returns, per model,
    what it returned and what this rank holds by kind (local shards, and the global sizes of the sharded)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from effitrain_helpers.training.model_sharding import sharding_batches, sharding_model, theory_bytes

    rank, world = dist.get_rank(), dist.get_world_size()
    found = []
    for shape in BYTES_MODELS:
        model = sharding_model(**shape)
        unsharded = sum(theory_bytes([p.shape for p in model.parameters()], world, sharded=False).values())
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
        tokens, labels = sharding_batches(1, BATCH, classes=shape.get("classes", 3))[0]
        loss = torch.nn.functional.cross_entropy(model(tokens.chunk(world)[rank]), labels.chunk(world)[rank])
        loss.backward()
        optimizer.step()
        params = list(model.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        sharded = [v for v in state if isinstance(v, DTensor)]
        held = {"parameters": _bytes(params), "gradients": _bytes(grads), "sharded state": _bytes(sharded),
                "steps": _bytes([v for v in state if not isinstance(v, DTensor)]),
                "global parameters": _bytes(params, local=False), "global gradients": _bytes(grads, local=False),
                "global state": _bytes(sharded, local=False), "unsharded": unsharded,
                "theory": sum(theory_bytes([p.shape for p in params], world, sharded=True, rank=rank).values())}
        got = count_fn(model, optimizer)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        found.append({"rank": rank, "world": world, **held,
                      "got": got if isinstance(got, (int, float)) and not isinstance(got, bool)
                      else type(got).__name__})
    return found


def _mistakes(h: dict) -> dict[str, int]:
    """What a rank's count gives for each mistake the checker names, from what the rank holds (``h``)."""
    state = h["sharded state"] + h["steps"]
    truth = h["parameters"] + h["gradients"] + state
    return {
        "global": h["global parameters"] + h["global gradients"] + h["global state"] + h["steps"],
        "global gradients": h["parameters"] + h["global gradients"] + state,
        "global state": h["parameters"] + h["gradients"] + h["global state"] + h["steps"],
        "times N": truth * h["world"],
        "parameters only": h["parameters"],
        "no state": h["parameters"] + h["gradients"],
        "no gradients": h["parameters"] + state,
        "no steps": h["parameters"] + h["gradients"] + h["sharded state"],
    }


_MISTAKE_MESSAGES = {
    "global": msg("every rank returned the bytes of the whole model ({got:,} B for the lesson's): numel() of a "
                  "DTensor is the size of the global tensor; count the part this rank stores, t.to_local()."),
    "global gradients": msg("the gradients are counted whole: p.grad of a sharded parameter is a DTensor too; "
                            "count its local shard."),
    "global state": msg("AdamW's exp_avg and exp_avg_sq are counted whole: they are DTensors like the parameters "
                        "they belong to; count their local shards."),
    "times N": msg("that is this rank's bytes times {world} ({got:,} B for the lesson's model, which rank 0 holds "
                   "{want:,} B of): the question is what this one rank holds, about 1/{world} of DDP's {full:,}."),
    "parameters only": msg("only the parameters are counted: after a backward and a step the rank also holds "
                           "its gradient shards (p.grad) and AdamW's state (optimizer.state)."),
    "no state": msg("the optimizer's state is missing: optimizer.state[p] holds exp_avg, exp_avg_sq and step for "
                    "every parameter p (twice the parameters' bytes, and more)."),
    "no gradients": msg("the gradients are missing: after backward every parameter p holds its gradient shard "
                        "in p.grad."),
    "no steps": msg("{steps} B short on every rank: AdamW's state[p]['step'] is a 0-d tensor that is not "
                    "sharded (not a DTensor), and it is held too."),
}


def held_total(h: dict) -> int:
    """What a rank of :func:`_run_bytes` holds in all: local parameter, gradient and optimizer-state bytes."""
    return h["parameters"] + h["gradients"] + h["sharded state"] + h["steps"]


def _check_rank_bytes(count_fn) -> None:
    ranks = run_learner_in_processes(_run_bytes, count_fn, processes=PROCESSES)
    runs = [(model, run) for rank in ranks for model, run in zip(MODEL_NAMES, rank)]
    bad = next((run for _, run in runs if isinstance(run["got"], str)), None)
    if bad is not None:
        raise Incorrect(tr("your function returned {kind}: return the number of bytes (an int).", kind=bad["got"]))
    wrong = [(model, run) for model, run in runs if abs(run["got"] - held_total(run)) >= 0.5]
    if not wrong:
        return
    first, second = ranks[0][0], ranks[1][0]
    for mistake, message in _MISTAKE_MESSAGES.items():
        if all(abs(run["got"] - _mistakes(run)[mistake]) < 0.5 for _, run in runs):
            raise Incorrect(tr(message, got=first["got"], world=first["world"], want=held_total(first),
                               full=first["unsharded"], steps=first["steps"]))
    if len({run["got"] for _, run in runs}) == 1:
        raise Incorrect(tr("{got:,} B on every rank and for both models: the ranks hold different bytes "
                           "(rank 0 {want0:,}, rank 1 {want1:,} of the lesson's model); count the tensors of "
                           "the model you are given, not a number from the table above.", got=first["got"],
                           want0=held_total(first), want1=held_total(second)))
    model, run = wrong[0]
    raise Incorrect(tr("rank {rank}, {model}: {got:,} B, but the rank holds {want:,} B: {p:,} of parameters, "
                       "{g:,} of gradients and {s:,} of optimizer state (local shards).", rank=run["rank"],
                       model=tr(model), got=run["got"], want=held_total(run), p=run["parameters"],
                       g=run["gradients"], s=run["sharded state"] + run["steps"]))


def _check_communication_ratio(answer) -> None:
    got = as_number(answer)
    if abs(got - 1.0) < 0.01:
        raise Incorrect(tr("that is the ratio when the parameters stay gathered until backward "
                           "(reshard_after_forward=False): here they are gathered a second time in backward."))
    if abs(got - 2 / 3) < 0.01:
        raise Incorrect(tr("upside down: FSDP sends more than DDP, not less."))
    if abs(got - 3) < 0.01:
        raise Incorrect(tr("3 is what FSDP sends, counted in all-gathers of the model; DDP's all-reduce is two of "
                           "those units: divide by what DDP sends."))
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
           "fully_shard each block of model.blocks in a loop, then the whole model; only then make AdamW over"
           " the model's parameters (their rate: the one the lesson's cells use), and return the model and "
           "the optimizer."],
    solution_code=(
        "def shard(model):\n    for block in model.blocks:\n        fully_shard(block)\n"
        "    fully_shard(model)\n    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "    return model, optimizer\n\nq1.check(shard)"
    ),
)
q2 = Exercise(
    "5.1 q2: count the bytes this rank really holds, in 2 processes",
    _check_rank_bytes,
    usage="q2.check(bytes_on_this_rank)",
    api=True,
    checked=("checked in 2 processes, on the lesson's model and a second one, after a backward and an AdamW "
             "step: every rank's count equals the bytes of its local parameter, gradient and state shards."),
    hints=["Between a backward and the next zero_grad a rank holds three kinds of tensor: the parameters, "
           "their gradients and the optimizer's state (one dict of tensors per parameter). Under FSDP2 most "
           "of them are DTensors: each knows the global tensor it is a piece of, but stores only its piece.",
           "A DTensor's to_local() returns the tensor this rank stores; numel() of the DTensor itself counts "
           "the global tensor (torch.distributed.tensor, documented at pytorch.org/docs). A tensor's bytes are "
           "its number of elements times the bytes of one element, both Tensor methods. The gradient is "
           "p.grad; optimizer.state maps each parameter to a dict whose values are its state tensors.",
           "Gather the three kinds of tensor of hint 1 in one list (the gradients that exist, every value of "
           "every state dict), take each one's local piece when it is a DTensor, and add up elements times "
           "bytes per element."],
    solution_code=(
        "from torch.distributed.tensor import DTensor\n\n\n"
        "def bytes_on_this_rank(model, optimizer):\n"
        "    params = list(model.parameters())\n"
        "    tensors = params + [p.grad for p in params if p.grad is not None]\n"
        "    tensors += [v for state in optimizer.state.values() for v in state.values()]\n"
        "    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]\n"
        "    total = sum(t.numel() * t.element_size() for t in local)\n"
        "    return total\n\n\nq2.check(bytes_on_this_rank)"
    ),
)
q3 = Exercise(
    "5.1 q3: how much more does FSDP send?",
    _check_communication_ratio,
    usage="q3.check(fsdp_over_ddp)",
    hints=["With ring algorithms, an all-gather and a reduce-scatter each make a rank send all of the "
           "tensor but one N-th of it; an all-reduce is a reduce-scatter followed by an all-gather.",
           "DDP: one all-reduce of the gradients per step. FSDP with every group resharded after forward: "
           "an all-gather in forward, another in backward, and a reduce-scatter of the gradients.",
           "Count in the unit of one all-gather of the model: add up what FSDP's three collectives send, then"
           " divide by what DDP's one all-reduce sends (hint 1 says how many all-gathers' worth that is)."],
    solution_code="fsdp_over_ddp = (1 + 1 + 1) / 2\nq3.check(fsdp_over_ddp)",
)


FIT_PARAMETERS, FIT_DEVICES = 7.5e9, 64  # q4: the ZeRO paper's example, mixed-precision Adam (2 + 2 + 12 bytes)


def _check_zero2_row(answer) -> None:
    from effitrain_helpers.measure.memory_estimate import STAGES, stage_bytes

    got = as_number(answer)
    want = {stage: stage_bytes(FIT_PARAMETERS, FIT_DEVICES, stage)["total"] / GB for stage in STAGES}
    if abs(got - want["ZeRO-2"]) <= 0.001 * want["ZeRO-2"]:  # the sharded part is 10% of it: 1% would let N or
        return  # a byte count be off by one
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
           "Put the exercise's numbers into hint 2's formula: Ψ is the number of parameters, N the devices, p"
           " and g 2 bytes each, K Adam's 12 bytes of state in mixed precision; then turn bytes into GB."],
    solution_code="zero2_gb = (2 * 7.5e9 + (2 + 12) * 7.5e9 / 64) / 1e9\nq4.check(zero2_gb)",
)
