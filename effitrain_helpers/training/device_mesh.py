"""Does a run over a 2-D mesh train like the 1-D one, and what does each dimension carry? (lesson 7.2)

:func:`mesh_runs` runs, in each rank of a group, the same few training steps of
:class:`~effitrain_helpers.engines.mesh_parallel.TinyLM` wrapped several ways (the lesson's ``wraps``: 1-D FSDP,
FSDP x tensor parallelism, HSDP), each on the same global batch: a rank feeds the model its data-parallel share
of the batch (ranks that differ only on the ``tp`` dimension get the same rows). It records per step the loss (the
mean over the global batch), per mesh dimension the bytes the rank's collectives carried
(:class:`~effitrain_helpers.measure.group_traffic.GroupTraffic`), and the placements of a few parameters. A plain
run of the same model in one process is the reference every wrapped run is compared with.

:func:`expected_traffic` is the theory the measured bytes are set against, from the model's shapes alone.
:func:`plan_facts` runs a tensor-parallel plan and a mesh-making function (lesson 7.2's exercise) at several mesh
shapes and reports what they did, for the checker to judge.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch
import torch.nn.functional as F

from effitrain_helpers.core.language import msg
from effitrain_helpers.core.sizes import lesson_size
from effitrain_helpers.engines.mesh_parallel import Block, TinyLM, layer_splits
from effitrain_helpers.measure.group_traffic import GroupTraffic

FLOAT32 = 4
WATCHED = ("blocks.0.q.weight", "blocks.0.out.weight", "blocks.0.norm1.weight")  # placements shown per rank
TERMS = (msg("run"), msg("dimension"), msg("calls per step"), msg("measured bytes"), msg("theory bytes"),
         msg("measured / theory"), msg("same on every rank"), msg("rank"), msg("parameter"), msg("placements"),
         msg("step"), msg("plain"))  # table labels


def config() -> dict:
    """The lesson's model and batch for the current size (``EFFITRAIN_SIZE``)."""
    return dict(vars(lesson_size("7.2")))


def _model(cfg: dict) -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(cfg["vocab"], cfg["hidden"], cfg["heads"], cfg["layers"])


def batches(cfg: dict) -> list[torch.Tensor]:
    """The global batches, one per step: ``batch`` sequences of ``seq + 1`` tokens (inputs and next tokens)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g) for _ in range(cfg["steps"])]


def _loss(model, rows: torch.Tensor) -> torch.Tensor:
    logits = model(rows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))


def plain_losses(cfg: dict) -> list[float]:
    """The reference: the whole model in this process, every step on the whole batch."""
    model = _model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    losses = []
    for rows in batches(cfg):
        loss = _loss(model, rows)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def data_share(mesh) -> tuple[int, int]:
    """(this rank's index, number of shares) of the batch: one share per position on the mesh's dimensions
    other than ``tp`` (tensor-parallel ranks compute on the same rows)."""
    names = mesh.mesh_dim_names
    index, count = 0, 1
    for dim, name in enumerate(names):
        if name != "tp":
            index, count = index * mesh.size(dim) + mesh.get_local_rank(name), count * mesh.size(dim)
    return index, count


def _placements(model) -> dict[str, tuple[str, tuple]]:
    params = dict(model.named_parameters())
    return {name: (str(tuple(params[name].placements)) if hasattr(params[name], "placements") else "-",
                   tuple(params[name].to_local().shape) if hasattr(params[name], "to_local")
                   else tuple(params[name].shape)) for name in WATCHED}


def wrapped_run(wrap: Callable, cfg: dict) -> dict:
    """In one rank: ``mesh = wrap(model)`` (the wrapping under test, returning its mesh), then ``cfg["steps"]``
    AdamW steps on this rank's share of each global batch. Returns the mesh's shape and names, the global loss per
    step, the bytes and calls per mesh dimension of the whole run, this rank's coordinate on the mesh and
    :data:`WATCHED`'s placements with its local shapes."""
    import torch.distributed as dist

    model = _model(cfg)
    mesh = wrap(model)
    groups = {name: mesh[name].get_group() for name in mesh.mesh_dim_names}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    index, count = data_share(mesh)
    losses = []
    traffic = GroupTraffic(groups)
    for rows in batches(cfg):
        share = rows.chunk(count)[index]
        with traffic:
            loss = _loss(model, share)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)  # every rank's mean over its rows; tensor-parallel copies count once each share
        losses.append(total.item() / dist.get_world_size())
    return {"shape": tuple(mesh.shape), "names": tuple(mesh.mesh_dim_names), "coordinate": mesh.get_coordinate(),
            "losses": losses,
            "traffic": traffic.summary(), "placements": _placements(model)}


def mesh_runs(wraps: dict[str, Callable], cfg: dict | None = None) -> dict:
    """In each rank of a group (``launch(mesh_runs, wraps, num_processes=4, cpu=True)``): :func:`wrapped_run`
    of each of ``wraps`` (name -> wrap) one after the other, and the plain reference's losses."""
    import torch.distributed as dist

    cfg = cfg or config()
    return {"rank": dist.get_rank(), "plain": plain_losses(cfg),
            "runs": {name: wrapped_run(wrap, cfg) for name, wrap in wraps.items()}}


def _padded(numel_dim0: int, rest: int, shards: int) -> int:
    """Values FSDP all-gathers for one parameter: dim 0 padded to a multiple of ``shards``."""
    return math.ceil(numel_dim0 / shards) * shards * rest


def _tp_local(name: str, shape: tuple, tp: int) -> tuple:
    """A block parameter's shape on one tensor-parallel rank under the reference plan."""
    layer, kind = name.split(".")[-2:]
    if layer in ("q", "k", "v", "up"):
        return (shape[0] // tp,) + tuple(shape[1:])
    if layer in ("out", "down") and kind == "weight":
        return (shape[0], shape[1] // tp)
    return tuple(shape)


def tp_bytes_per_step(batch: int, seq: int, hidden: int, dp: int, blocks: int) -> int:
    """Payload bytes a rank's ``tp`` dimension carries per training step under :func:`block_plan`: per block,
    2 all-reduces forward (after ``out`` and ``down``) and 4 backward (the input gradients of ``q``, ``k``, ``v``
    and ``up``), each of the activations of the rank's ``batch / dp`` rows, ``seq·hidden`` float32 values a row
    (lesson 7.2's exercise 2)."""
    return FLOAT32 * (batch // dp) * seq * hidden * (2 + 4) * blocks


def expected_traffic(cfg: dict, shape: dict[str, int]) -> dict[str, int]:
    """Payload bytes per rank per dimension, for the whole run (``cfg["steps"]`` steps), of :class:`TinyLM`
    wrapped on a mesh ``shape`` (name -> size, in order): ``{"dp": n}`` is 1-D FSDP, ``{"dp": a, "tp": b}`` FSDP
    over ``dp`` and the reference plan over ``tp``, ``{"replicate": a, "shard": b}`` HSDP.

    FSDP (each block and the root its own unit): every unit's parameters (the tensor-parallel share, dim 0 padded
    to equal shards) all-gathered before forward, the blocks' again before backward (``reshard_after_forward``;
    the root keeps its own), and their gradients reduce-scattered once, in float32. HSDP: the same on ``shard``,
    and the reduce-scattered gradient shard all-reduced over ``replicate``. Tensor parallelism: per block two
    all-reduces of the activations (``b·s·h`` values of this rank's rows) forward, four backward (the input
    gradients of ``q``, ``k``, ``v`` and ``up``)."""
    with torch.device("meta"):
        model = TinyLM(cfg["vocab"], cfg["hidden"], cfg["heads"], cfg["layers"])
    tp = shape.get("tp", 1)
    shards = shape.get("shard", shape.get("dp", 1))
    rows = cfg["batch"] // math.prod(size for name, size in shape.items() if name != "tp")
    out = {name: 0 for name in shape}
    for unit in [*model.blocks, model]:
        params = unit.named_parameters() if unit is not model else (
            (n, p) for n, p in model.named_parameters() if not n.startswith("blocks."))
        values = 0
        for name, p in params:
            local = _tp_local(name, tuple(p.shape), tp) if isinstance(unit, Block) else tuple(p.shape)
            values += _padded(local[0], math.prod(local[1:]), shards)
        gathers = 2 if isinstance(unit, Block) else 1
        fsdp = "shard" if "shard" in shape else "dp"
        out[fsdp] += FLOAT32 * values * (gathers + 1)
        if "replicate" in shape:
            out["replicate"] += FLOAT32 * values // shards
    if "tp" in shape:
        out["tp"] += tp_bytes_per_step(cfg["batch"], cfg["seq"], cfg["hidden"], cfg["batch"] // rows, cfg["layers"])
    return {name: b * cfg["steps"] for name, b in out.items()}


def plan_facts(make_mesh: Callable, plan: dict, shapes=((2, 2), (1, 4)), hidden: int = 32, heads: int = 4) -> list:
    """In each rank of a 4-rank group, for each ``(dp, tp)`` in ``shapes``: ``mesh = make_mesh(dp, tp)``, then one
    :class:`Block` split by ``parallelize_module(block, mesh["tp"], plan)``, run forward and backward on this
    rank's data-parallel rows and compared with the unsplit block. Returns one dict per shape: the mesh's
    shape and names and this rank's ``tp`` group, each linear layer's split (:func:`layer_splits`), the largest gaps
    of the output and the input gradient, and the collectives on the ``tp`` group, forward and backward; or
    ``error``, the first error raised, with how far it got (``stage``)."""
    import torch.distributed as dist
    from torch.distributed.tensor.parallel import parallelize_module

    facts = []
    for dp, tp in shapes:
        fact: dict = {"dp": dp, "tp": tp, "stage": "mesh"}
        facts.append(fact)
        try:
            mesh = make_mesh(dp, tp)
            fact.update(shape=tuple(mesh.shape), names=tuple(mesh.mesh_dim_names or ()))
            if "tp" not in fact["names"]:
                continue
            fact["tp_ranks"] = mesh["tp"].mesh.tolist()  # this rank's tensor-parallel group
            fact["stage"] = "plan"
            torch.manual_seed(0)
            whole = Block(hidden, heads)
            block = copy.deepcopy(whole)
            parallelize_module(block, mesh["tp"], plan)
            fact["splits"] = layer_splits(block)
            fact["stage"] = "run"
            g = torch.Generator().manual_seed(10 + dist.get_rank() // tp)
            x = torch.randn(2, 8, hidden, generator=g)
            x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
            with GroupTraffic({"tp": mesh["tp"].get_group()}) as forward:
                y = block(x1)
            y = y.full_tensor() if hasattr(y, "full_tensor") else y
            with GroupTraffic({"tp": mesh["tp"].get_group()}) as backward:
                y.pow(2).sum().backward()
            traffic = {"forward": forward.summary().get("tp", {"calls": {}, "bytes": 0}),
                       "backward": backward.summary().get("tp", {"calls": {}, "bytes": 0})}
            want = whole(x2)
            want.pow(2).sum().backward()
            fact.update(output_gap=(y - want).abs().max().item() if y.shape == want.shape else float("inf"),
                        grad_gap=(x1.grad - x2.grad).abs().max().item(), traffic=traffic,
                        activation_bytes=FLOAT32 * x.numel(), stage="done")
        except Exception as err:  # the checker names what went wrong; the rank must answer, not fail
            fact["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return facts


def run_shape(run: dict) -> dict[str, int]:
    """A run's mesh as ``{dimension: size}``, in order."""
    return dict(zip(run["names"], run["shape"]))


def traffic_rows(ranks: list[dict], cfg: dict) -> list[dict]:
    """One row per run and mesh dimension: the group's size, rank 0's collectives and bytes per step, and
    :func:`expected_traffic`'s; ``same on every rank`` says whether every rank measured rank 0's bytes."""
    rows = []
    for name, run in ranks[0]["runs"].items():
        theory = expected_traffic(cfg, run_shape(run))
        for dim, size in run_shape(run).items():
            seen = run["traffic"].get(dim, {"bytes": 0, "calls": {}})
            rows.append({"run": name, "dimension": f"{dim} ({size})",
                         "calls per step": ", ".join(f"{n // cfg['steps']} {c}" for c, n in seen["calls"].items()),
                         "measured bytes": seen["bytes"] / cfg["steps"], "theory bytes": theory[dim] / cfg["steps"],
                         "same on every rank": all(r["runs"][name]["traffic"].get(dim, {}).get("bytes", 0)
                                                   == seen["bytes"] for r in ranks)})
    return rows


def placement_rows(ranks: list[dict], runs: tuple[str, ...]) -> list[dict]:
    """One row per run and watched parameter: its placements (the same on every rank) and each rank's local
    shape."""
    rows = []
    for name in runs:
        for parameter in WATCHED:
            row = {"run": name, "parameter": parameter,
                   "placements": ranks[0]["runs"][name]["placements"][parameter][0]}
            for r in ranks:
                row[f"rank {r['rank']}"] = str(r["runs"][name]["placements"][parameter][1])
            rows.append(row)
    return rows


def loss_gap(ranks: list[dict], baseline: str) -> float:
    """The largest relative gap between any rank's loss at any step of any run and ``baseline``'s on rank 0."""
    base = ranks[0]["runs"][baseline]["losses"]
    return max(abs(a - b) / abs(b) for r in ranks for run in r["runs"].values()
               for a, b in zip(run["losses"], base))
