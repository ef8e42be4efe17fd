"""In what precision do the ranks compute and talk, and what does it cost or save? (lesson 7.1)

Lesson 7.1 trains lesson 5.1's model (``training/model_sharding.py``) in 2 real gloo processes, sharded with
``fully_shard`` under three ``MixedPrecisionPolicy`` s (none: float32; bfloat16 compute with a float32
reduction; bfloat16 for both) and replicated with DDP (float32 gradients, then bfloat16 ones through the
compression hook of ``engines/mixed_precision.py``). This module answers the questions around those runs:

- :func:`precision_run` and :func:`precision_runs`: one or all of the runs in each rank of a group, counting
  the bytes and dtypes of every collective (``measure/communication.py``), the dtype the parameters have while
  each module runs, what the rank holds after training (bytes and dtypes) and the first step's gradients;
- :func:`theory_communication`: what each run should move per step, from the parameter shapes and the dtypes;
- :func:`gaps`: losses and weights of each run against the float32 run on the same batches;
- :func:`ring_sum_error`: what summing N ranks' gradients in bfloat16, one rank at a time as a ring does,
  does to the sum (against float64), beside float32;
- :func:`observe_step`: one forward and backward of a sharded model, watched (what lesson 7.1's checkers judge).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from effitrain_helpers.core.language import msg
from effitrain_helpers.core.validate import positive_int

FSDP_RUNS = (msg("FSDP float32"), msg("FSDP bf16, float32 reduce"), msg("FSDP bf16, bf16 reduce"))
DDP_RUNS = (msg("DDP float32"), msg("DDP bf16 hook"))
BYTES = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}
TERMS = (*FSDP_RUNS, *DDP_RUNS, msg("run"), msg("collective"), msg("measured bytes per step"),
         msg("theory"), msg("measured / float32"), msg("dtype"), msg("part"), msg("bytes"),
         msg("parameters"), msg("gradients"), msg("optimizer state"), msg("largest loss difference"),
         msg("largest weight difference"), msg("weights apart / moved"), msg("ranks"))


class ForwardDtypes:
    """Records, before every forward of every module of ``model`` that has parameters of its own, the dtypes
    of those parameters at that moment (under FSDP: the gathered ones the module computes with), by module
    name (``""`` is the root). ``stop()`` removes the hooks."""

    def __init__(self, model):
        self.seen: dict[str, set] = {}
        self._handles = []
        for name, module in model.named_modules():
            if next(module.parameters(recurse=False), None) is not None:
                self._handles.append(module.register_forward_pre_hook(self._recorder(name)))

    def _recorder(self, name: str):
        def record(module, args):
            dtypes = {str(p.dtype).removeprefix("torch.") for p in module.parameters(recurse=False)}
            self.seen.setdefault(name, set()).update(dtypes)
        return record

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()


def _dtype_names(tensors) -> list[str]:
    return sorted({str(t.dtype).removeprefix("torch.") for t in tensors})


def precision_run(wrap: Callable, batches: list[tuple], hook: Callable | None = None, seed: int = 0) -> dict:
    """In each rank of a group: lesson 5.1's model (``seed``) wrapped by ``wrap`` (``fully_shard`` with a
    policy, or DDP; with ``hook``, DDP's communication hook), trained one AdamW step per batch on this rank's
    share of each batch while every collective is counted.

    Returns ``losses``; ``communication`` (payload bytes per step by collective) and ``collective_dtypes``;
    ``forward_dtypes`` (the parameters' dtypes while each module ran); ``held`` (bytes of parameters, gradients
    after the first backward, optimizer state after training) and ``held_dtypes``; ``gradients`` (this rank's
    gradient shards after the first step's reduction, as float32); ``groups`` (FSDP's) and ``weights`` (whole).
    """
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.training.model_sharding import (fsdp_groups, full_state, local_part, rank_bytes,
                                                           sharding_model, train_steps)

    rank, world = dist.get_rank(), dist.get_world_size()
    model = wrap(sharding_model(seed))
    if hook is not None:
        model.register_comm_hook(None, hook)  # its all_reduce is counted on torch.distributed
        counter = CommunicationCounter().watch()
    else:
        counter = CommunicationCounter().watch(model)  # DDP: a counting float32 hook; FSDP: its collectives
    forward = ForwardDtypes(model)
    first: dict[str, Any] = {}

    def after_backward(model, optimizer):
        if not first:
            first["gradients"] = rank_bytes(model, optimizer)["gradients"]
            first["gradient dtypes"] = _dtype_names(p.grad for p in model.parameters())
            first["values"] = {n.removeprefix("module."): local_part(p.grad).detach().float().clone()
                               for n, p in model.named_parameters()}

    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in batches]
    try:
        losses, optimizer = train_steps(model, mine, after_backward=after_backward)
    finally:
        counter.stop()
        forward.stop()
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {"rank": rank, "world": world, "losses": losses,
            "communication": {k: b // len(batches) for k, b in counter.summary().bytes_by_collective.items()},
            "collective_dtypes": {k: sorted(v) for k, v in counter.dtypes_by_collective.items()},
            "forward_dtypes": sorted(set().union(*forward.seen.values())),
            "held": {**rank_bytes(model, optimizer), "gradients": first["gradients"]},
            "held_dtypes": {"parameters": _dtype_names(params), "gradients": first["gradient dtypes"],
                            "optimizer state": _dtype_names(state)},
            "gradients": first["values"], "groups": fsdp_groups(model), "weights": full_state(model)}


def bf16_hook_refusal() -> str | None:
    """In a rank of a group: what ``register_comm_hook`` says when given torch's ``bf16_compress_hook`` itself
    (``TypeError: BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ ...`` without them), or
    None when DDP accepts it here."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    from effitrain_helpers.training.model_sharding import sharding_model, wrap_ddp

    try:
        wrap_ddp(sharding_model()).register_comm_hook(None, bf16_compress_hook)
    except TypeError as err:
        return f"TypeError: {err}"
    return None


def precision_runs(policies: dict, batches: list[tuple]) -> dict[str, dict]:
    """:func:`precision_run` for each of :data:`FSDP_RUNS` (``policies`` maps each name to its
    ``MixedPrecisionPolicy``; ``engines.mixed_precision.shard_in_precision`` wraps) and for DDP in float32
    and with ``engines.mixed_precision.bf16_compress`` (:data:`DDP_RUNS`), one after the other in this group;
    under ``"refused"``, :func:`bf16_hook_refusal`."""
    from effitrain_helpers.engines.mixed_precision import bf16_compress, shard_in_precision
    from effitrain_helpers.training.model_sharding import wrap_ddp

    runs = {name: precision_run(lambda m, p=policy: shard_in_precision(m, p), batches)
            for name, policy in policies.items()}
    runs["DDP float32"] = precision_run(wrap_ddp, batches)
    runs["DDP bf16 hook"] = precision_run(wrap_ddp, batches, hook=bf16_compress)
    return {"runs": runs, "refused": bf16_hook_refusal()}


def theory_communication(groups: list[list[tuple]], world: int, policies: dict) -> dict[str, dict[str, int]]:
    """Payload bytes per step of every run, from FSDP's groups (``groups``, see ``model_sharding.fsdp_groups``)
    and the dtypes: FSDP all-gathers in ``param_dtype`` (each block again in backward; the root keeps its
    parameters) and reduce-scatters in ``reduce_dtype`` (``param_dtype`` when it is None); DDP all-reduces every
    gradient, 4 bytes a value, 2 through the bfloat16 hook."""
    from effitrain_helpers.training.model_sharding import theory_communication as float32_theory

    fp32 = float32_theory(groups, world, [True] * (len(groups) - 1) + [False])
    found = {}
    for name, policy in policies.items():
        gather = BYTES[policy.param_dtype or torch.float32]
        reduce = BYTES[policy.reduce_dtype or policy.param_dtype or torch.float32]
        found[name] = {"all_gather_single": fp32["FSDP"]["all_gather_single"] * gather // 4,
                       "reduce_scatter_single": fp32["FSDP"]["reduce_scatter_single"] * reduce // 4}
    found["DDP float32"] = {"all_reduce": fp32["DDP"]["all_reduce"]}
    found["DDP bf16 hook"] = {"all_reduce": fp32["DDP"]["all_reduce"] // 2}
    return found


def gaps(ranks: list[dict[str, dict]], start: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Each run against its float32 reference on the same batches (FSDP's against ``FSDP float32``, DDP's against
    ``DDP float32``), over every rank: the largest loss difference, the largest weight difference, and the
    weights' distance from the float32 run over the distance the float32 run moved from ``start`` (the initial
    weights): how much of training's movement the precision changed."""
    found = {}
    for name in ranks[0]:
        reference = "DDP float32" if name.startswith("DDP") else "FSDP float32"
        loss = max(abs(a - b) for r in ranks for a, b in zip(r[name]["losses"], r[reference]["losses"]))
        ours, theirs = ranks[0][name]["weights"], ranks[0][reference]["weights"]
        weight = max(float((ours[k] - theirs[k]).abs().max()) for k in ours)
        apart = math.sqrt(sum(float((ours[k] - theirs[k]).pow(2).sum()) for k in ours))
        moved = math.sqrt(sum(float((theirs[k] - start[k]).pow(2).sum()) for k in ours))
        found[name] = {"loss": loss, "weight": weight, "relative": apart / moved}
    return found


def gradient_error(ranks: list[dict[str, dict]], name: str, reference: str) -> float:
    """The first step's reduced gradients of run ``name`` against ``reference``'s, all ranks' shards together:
    ``‖g - g_ref‖ / ‖g_ref‖``."""
    diff = ref = 0.0
    for r in ranks:
        for k, g in r[name]["gradients"].items():
            want = r[reference]["gradients"][k]
            diff += float((g - want).pow(2).sum())
            ref += float(want.pow(2).sum())
    return math.sqrt(diff / ref)


def ring_sum_error(ranks: int, dtype: torch.dtype, values: int = 4096, seed: int = 0) -> float:
    """Relative error ``‖s - s64‖ / ‖s64‖`` of the sum of ``ranks`` gradients added one rank at a time in
    ``dtype`` (a ring's reduce-scatter: each hop adds the next rank's values to the partial sum it received, in
    the collective's dtype), against the same sum in float64. Each rank's gradient is ``values`` numbers: a
    part every rank shares (normal, scale 1e-3) plus its own noise (normal, scale 1e-3), made in ``dtype``."""
    ranks = positive_int("ranks", ranks, example="ranks=8")
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randn(values, generator=generator, dtype=torch.float64) * 1e-3
    grads = [(shared + torch.randn(values, generator=generator, dtype=torch.float64) * 1e-3).to(dtype)
             for _ in range(ranks)]
    partial = grads[0].clone()
    for g in grads[1:]:
        partial = partial + g  # rounded to dtype at every hop
    exact = torch.stack([g.double() for g in grads]).sum(dim=0)
    return float((partial.double() - exact).norm() / exact.norm())


def observe_step(model, tokens, labels) -> dict[str, Any]:
    """One forward and backward of ``model`` (sharded already, in a process group), watched: ``forward``
    (parameter dtypes by module name while it ran), ``reduced`` (the dtypes every reduce-scatter or all-reduce
    moved), ``gathered`` (the all-gathers' dtypes), ``master`` (the stored parameters' dtypes), ``output`` (the
    model's output dtype) and ``error`` (what the forward or backward raised,
    or None). What lesson 7.1's checkers judge."""
    from effitrain_helpers.measure.communication import CommunicationCounter

    counter = CommunicationCounter().watch()
    forward = ForwardDtypes(model)
    error = output = None
    try:
        out = model(tokens)
        output = str(out.dtype).removeprefix("torch.")
        torch.nn.functional.cross_entropy(out.float(), labels).backward()
    except Exception as exc:  # the learner's wrapping may make the forward fail: say what it raised
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        counter.stop()
        forward.stop()
    dtypes = counter.dtypes_by_collective
    return {"forward": {k: sorted(v) for k, v in forward.seen.items()},
            "reduced": sorted(set().union(*(dtypes.get(k, set()) for k in ("reduce_scatter_single",
                                                                          "all_reduce")))),
            "gathered": sorted(dtypes.get("all_gather_single", set())),
            "master": _dtype_names(model.parameters()), "output": output, "error": error}


def communication_rows(runs: dict[str, dict], theory: dict[str, dict[str, int]]) -> list[dict]:
    """One row per run and collective: the payload bytes per step measured (rank 0's ``runs``), in theory, the
    dtype moved, and measured over the float32 run's same collective (FSDP's or DDP's)."""
    rows = []
    for name, run in runs.items():
        reference = runs["DDP float32" if name.startswith("DDP") else "FSDP float32"]["communication"]
        for collective, measured in run["communication"].items():
            rows.append({"run": name, "collective": collective,
                         "dtype": ", ".join(run["collective_dtypes"][collective]),
                         "measured bytes per step": measured, "theory": theory[name][collective],
                         "measured / float32": measured / reference[collective]})
    return rows


def held_rows(runs: dict[str, dict]) -> list[dict]:
    """One row per run and part (parameters, gradients, optimizer state): the bytes rank 0 holds, and their
    dtypes."""
    return [{"run": name, "part": part, "bytes": run["held"][part], "dtype": ", ".join(run["held_dtypes"][part])}
            for name, run in runs.items() for part in ("parameters", "gradients", "optimizer state")]
