"""What does each rank hold, and what does a step exchange, under DDP and under FSDP? (lesson 5.1)

Lesson 5.1 trains the same small model in N real processes twice: replicated with
``DistributedDataParallel`` (every rank keeps full copies: ZeRO stage 0) and sharded with torch's
``fully_shard`` (FSDP2: every rank keeps about 1/N of the parameters, gradients and AdamW state: ZeRO
stage 3). The notebook types those calls itself; this module answers the questions around them:

- :func:`sharding_model` and :func:`sharding_batches`: the model (a small transformer classifier, torch only,
  so that a 2-process run starts in seconds) and its fixed batches;
- :func:`rank_bytes`: bytes this rank holds, by kind, counting only the *local shard* of a sharded tensor
  (FSDP2's parameters, gradients and AdamW state are ``DTensor`` s sharded on dimension 0);
- :func:`theory_bytes` and :func:`theory_communication`: what the two strategies should hold and exchange,
  from the parameter shapes alone;
- :func:`compare_ddp_fsdp`: both runs in one process group (what ``effitrain fsdp`` and the benchmark use).

How ``fully_shard`` splits a tensor (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``): dimension 0 is
cut with ``torch.chunk`` into N pieces of ``ceil(d / N)`` rows, the last ones shorter (or empty) when N does
not divide d. Each rank's all-gather input is padded to ``ceil(d / N)`` rows, so the collectives move
``N * ceil(d / N)`` rows per tensor, a little more than d when N does not divide it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch

from effitrain_helpers.core.language import msg, number, tr
from effitrain_helpers.core.validate import positive_int

KINDS = (msg("parameters"), msg("gradients"), msg("optimizer state"))  # keys; report_table shows them translated
FLOAT32_BYTES = 4
ADAMW_STATE_PER_VALUE = 2  # exp_avg and exp_avg_sq; plus a float32 0-d `step` tensor per parameter tensor
STEP_TENSOR_BYTES = 4
SHARDING_NEEDS = msg("; sharding across 1 process keeps everything whole: use 2 or more")
SEQ_LEN, WIDTH, DEPTH, HEADS = 16, 64, 2, 4  # the lesson's tokens per sample and model shape
MOST_STEPS = 1000  # fifty times the full lesson's 20


def sharding_model(seed: int = 0, width: int = WIDTH, depth: int = DEPTH, vocab: int = 1000, classes: int = 3):
    """A small transformer classifier with its blocks in ``model.blocks`` (what lesson 5.1 shards block by
    block): an embedding, ``depth`` ``torch.nn.TransformerEncoderLayer`` s (dropout off, so runs compare
    step by step) and a linear head over the mean of the tokens. Weights depend only on ``seed``.
    ``classes=3`` makes the head's weight 3 rows: with 2 ranks, one that does not divide evenly."""
    for name, value in (("width", width), ("depth", depth), ("vocab", vocab), ("classes", classes)):
        positive_int(name, value, example=f"{name}=2")
    torch.manual_seed(seed)
    return ShardingClassifier(width, depth, vocab, classes)


class ShardingClassifier(torch.nn.Module):
    """Embedding -> transformer blocks -> mean over the tokens -> linear head (see :func:`sharding_model`)."""

    def __init__(self, width: int, depth: int, vocab: int, classes: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, nhead=HEADS, dim_feedforward=2 * width, dropout=0.0,
                                             batch_first=True) for _ in range(depth))
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


def sharding_batches(n_batches: int, batch_size: int, seq_len: int = SEQ_LEN, vocab: int = 1000, classes: int = 3,
                     seed: int = 0) -> list[tuple]:
    """``n_batches`` fixed ``(tokens, labels)`` batches: random token sequences labelled by the class of
    their first token (``token % classes``), the same every call with the same ``seed``."""
    for name, value in (("n_batches", n_batches), ("batch_size", batch_size), ("seq_len", seq_len)):
        positive_int(name, value, example=f"{name}=4")
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (n_batches, batch_size, seq_len), generator=generator)
    return [(t, t[:, 0] % classes) for t in tokens]


def local_part(tensor):
    """The part of ``tensor`` stored on this rank: a ``DTensor`` 's local shard, a plain tensor itself."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _nbytes(tensors: Iterable) -> int:
    return sum(local_part(t).numel() * t.element_size() for t in tensors)


def rank_bytes(model, optimizer) -> dict[str, int]:
    """Bytes this rank holds, by kind (:data:`KINDS`): its parameters, their gradients (after a backward and
    before ``zero_grad``) and every tensor in ``optimizer.state``, counting only local shards."""
    params = [p for p in model.parameters() if p.requires_grad]
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {"parameters": _nbytes(params), "gradients": _nbytes(p.grad for p in params if p.grad is not None),
            "optimizer state": _nbytes(state)}


def shard_rows(rows: int, world: int, rank: int) -> int:
    """Rows of a tensor with ``rows`` rows that ``rank`` of ``world`` keeps (``torch.chunk`` on dimension 0)."""
    chunk = math.ceil(rows / world)
    return max(0, min(chunk, rows - rank * chunk))


def theory_bytes(shapes: Iterable[tuple], world: int, sharded: bool, rank: int = 0) -> dict[str, int]:
    """What a rank should hold, by kind, for float32 parameters of ``shapes`` trained with AdamW: full copies
    (``sharded=False``, DDP) or ``rank`` 's chunk of dimension 0 of every tensor (``sharded=True``, FSDP).
    AdamW's state is 2 values per parameter value plus one float32 ``step`` per tensor, never sharded."""
    world = positive_int("world", world, hint=msg("e.g. world=2 (the number of processes)"))
    shapes = [tuple(s) for s in shapes]
    values = sum(_local_values(s, world, rank) if sharded else math.prod(s) for s in shapes)
    return {"parameters": values * FLOAT32_BYTES, "gradients": values * FLOAT32_BYTES,
            "optimizer state": values * ADAMW_STATE_PER_VALUE * FLOAT32_BYTES + len(shapes) * STEP_TENSOR_BYTES}


def _local_values(shape: tuple, world: int, rank: int) -> int:
    return shard_rows(shape[0], world, rank) * math.prod(shape[1:])


def padded_values(shapes: Iterable[tuple], world: int) -> int:
    """Values an FSDP collective moves for tensors of ``shapes``: ``world * ceil(d / world)`` rows each."""
    return sum(world * math.ceil(s[0] / world) * math.prod(s[1:]) for s in shapes)


def theory_communication(groups: list[list[tuple]], world: int, regathered: list[bool]) -> dict[str, dict]:
    """Payload bytes per training step (see ``measure/communication.py``) of DDP and of FSDP.

    ``groups`` holds the parameter shapes of each ``fully_shard`` call (e.g. one per block, then the root's
    own); ``regathered`` says which groups are gathered again in backward (``reshard_after_forward=True``; the
    root keeps its parameters by default). DDP: one all-reduce of every gradient. FSDP: every group
    all-gathered in forward, the regathered ones again in backward, every gradient reduce-scattered.
    """
    shapes = [s for g in groups for s in g]
    full = sum(math.prod(s) for s in shapes) * FLOAT32_BYTES
    padded = [padded_values(g, world) * FLOAT32_BYTES for g in groups]
    gathered = sum(padded) + sum(p for p, again in zip(padded, regathered) if again)
    return {"DDP": {"all_reduce": full},
            "FSDP": {"all_gather_single": gathered, "reduce_scatter_single": sum(padded)}}


def ring_bytes_sent(payload: dict[str, int], world: int) -> float:
    """Bytes one rank sends for these payloads with ring algorithms: an all-gather or a reduce-scatter sends
    ``(N-1)/N`` of its payload, an all-reduce (a reduce-scatter then an all-gather) twice that."""
    share = (world - 1) / world
    return sum(b * share * (2 if name == "all_reduce" else 1) for name, b in payload.items())


def fsdp_groups(model) -> list[list[tuple]]:
    """The parameter shapes of each FSDP group of ``model`` (its sub-modules that ``fully_shard`` wrapped,
    innermost first, each without the parameters of groups inside it), and of nothing else."""
    from torch.distributed.fsdp import FSDPModule

    wrapped = [m for m in model.modules() if isinstance(m, FSDPModule)][::-1]
    seen: set[int] = set()
    groups = []
    for module in wrapped:
        own = [p for p in module.parameters() if id(p) not in seen]
        seen.update(id(p) for p in own)
        groups.append([tuple(p.shape) for p in own])
    return groups


def train_steps(model, batches: list[tuple], learning_rate: float = 1e-3, after_backward: Callable | None = None,
                optimizer=None):
    """Train ``model`` one AdamW step per batch of :func:`sharding_batches`; returns ``(losses, optimizer)``.

    ``after_backward(model, optimizer)`` runs after each backward, before the step (to measure gradients);
    ``optimizer``: one made by the caller (after the wrap), else AdamW at ``learning_rate``."""
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=learning_rate)
    losses = []
    for tokens, labels in batches:
        loss = torch.nn.functional.cross_entropy(model(tokens), labels)
        loss.backward()
        if after_backward is not None:
            after_backward(model, optimizer)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses, optimizer


def full_state(model) -> dict:
    """Every parameter of ``model`` as a full plain tensor (``full_tensor()`` gathers a sharded one: every
    rank must call it), keyed by name without DDP's ``module.`` prefix."""
    from torch.distributed.tensor import DTensor

    return {name.removeprefix("module."): (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for name, p in model.named_parameters()}


def measured_run(wrap: Callable, batches: list[tuple], seed: int = 0) -> dict[str, Any]:
    """In each rank of a group: build :func:`sharding_model`, ``wrap`` it (DDP or ``fully_shard``), train on
    this rank's share of ``batches`` (every batch split by rank) while counting bytes and collectives.

    Returns ``losses`` (this rank's), ``bytes`` (:func:`rank_bytes` after the first backward for gradients,
    after training for parameters and state), ``communication`` (payload bytes per step by collective),
    ``groups`` (FSDP groups' shapes, empty for DDP) and ``weights`` (:func:`full_state`).
    """
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    model = wrap(sharding_model(seed))
    counter = CommunicationCounter().watch(model)
    seen: dict[str, int] = {}

    def measure_gradients(model, optimizer):
        seen.setdefault("gradients", rank_bytes(model, optimizer)["gradients"])

    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in batches]
    try:
        losses, optimizer = train_steps(model, mine, after_backward=measure_gradients)
    finally:
        counter.stop()
    held = {**rank_bytes(model, optimizer), **seen}
    per_step = {name: b // len(batches) for name, b in counter.summary().bytes_by_collective.items()}
    return {"rank": rank, "world": world, "wrapper": type(model).__name__, "losses": losses, "bytes": held,
            "communication": per_step, "groups": fsdp_groups(model), "weights": full_state(model)}


def wrap_ddp(model):
    """``model`` wrapped in ``DistributedDataParallel`` (lessons 5.1, 5.4; needs a process group)."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def wrap_fsdp(model):
    """``model`` sharded with ``fully_shard``: each block, then the root (lessons 5.1, 5.3, 5.4, 6.3); returns it."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def _both_runs(batches: list[tuple]) -> dict[str, dict]:
    return {"DDP": measured_run(wrap_ddp, batches), "FSDP": measured_run(wrap_fsdp, batches)}


def sharding_arguments(processes: int | None = 2, steps: int | None = None,
                       batch_size: int | None = None) -> tuple[int, int, int]:
    """``(processes, steps, batch_size)`` checked (``ValueError`` naming the bad one), defaults from
    ``lesson_size("5.1")``: the one home of :func:`compare_ddp_fsdp` 's argument checks."""
    from effitrain_helpers.core.sizes import lesson_size
    from effitrain_helpers.processes.launch import resolve_num_processes

    n = resolve_num_processes(processes, minimum=2, name="--processes", why=SHARDING_NEEDS)
    size = lesson_size("5.1")
    steps = positive_int("--steps", size.steps if steps is None else steps, maximum=MOST_STEPS, example="--steps 3")
    batch_size = positive_int("--batch-size", size.batch_size if batch_size is None else batch_size,
                              example="--batch-size 8")
    _check_memory(n, steps, batch_size)
    return n, steps, batch_size


def estimated_bytes(processes: int, steps: int, batch_size: int) -> int:
    """A rough estimate of the memory :func:`compare_ddp_fsdp` needs, made before anything is allocated: the
    int64 token batches (built here, one copy sent to each rank) and, per rank, the float32 activations a
    ``TransformerEncoderLayer`` keeps for the backward pass (about 13 values of the width per token, plus the
    attention weights, per layer). Weights and optimizer state are a few hundred kB: left out."""
    tokens = steps * batch_size * processes * SEQ_LEN
    batches = tokens * 8 * (1 + processes)
    per_token = DEPTH * (13 * WIDTH + HEADS * SEQ_LEN) * FLOAT32_BYTES
    return batches + processes * batch_size * SEQ_LEN * per_token


def _check_memory(processes: int, steps: int, batch_size: int) -> None:
    """Refuse (one line) a run whose :func:`estimated_bytes` exceed the memory available now."""
    import psutil

    need, have = estimated_bytes(processes, steps, batch_size), psutil.virtual_memory().available
    if need > have:
        raise ValueError(tr("--batch-size {batch} with --steps {steps} and {n} processes would need about {need:.1f} "
                            "GB of memory (the batches and each process's activations); this machine has {have:.1f} "
                            "GB available. Fix: a smaller --batch-size or --steps, e.g. --batch-size 8.",
                            batch=batch_size, steps=steps, n=processes, need=need / 1e9, have=have / 1e9))


def compare_ddp_fsdp(processes: int | None = 2, steps: int | None = None,
                     batch_size: int | None = None) -> dict[str, Any]:
    """DDP and FSDP (each block sharded, then the root) trained on the same batches in ``processes`` real
    CPU processes (``steps`` batches of ``batch_size`` per process; default: ``lesson_size("5.1")``): bytes
    per rank measured and in theory, payload per step measured and in theory, the largest loss and weight
    differences. What ``effitrain fsdp`` prints and the benchmark checks."""
    from effitrain_helpers.processes.launch import launch

    n, steps, batch_size = sharding_arguments(processes, steps, batch_size)
    batches = sharding_batches(steps, batch_size * n)
    ranks = launch(_both_runs, batches, num_processes=n, cpu=True, quiet=True)
    return summarize(ranks)


def summarize(ranks: list[dict[str, dict]]) -> dict[str, Any]:
    """The per-rank results of DDP and FSDP runs (rank order) as one report: bytes per rank (measured and in
    theory, by kind), payload bytes per step (measured and in theory), bytes each rank sends with ring
    collectives, the largest weight and loss differences between DDP and FSDP."""
    n = len(ranks)
    first = ranks[0]
    groups = first["FSDP"]["groups"]
    shapes = [s for g in groups for s in g]
    report: dict[str, Any] = {"processes": n, "parameters": sum(math.prod(s) for s in shapes), "bytes": {},
                              "theory_bytes": {}, "communication": {}, "theory_communication": {}}
    for strategy in ("DDP", "FSDP"):
        sharded = strategy == "FSDP"
        report["bytes"][strategy] = [r[strategy]["bytes"] for r in ranks]
        report["theory_bytes"][strategy] = [theory_bytes(shapes, n, sharded, rank) for rank in range(n)]
        report["communication"][strategy] = first[strategy]["communication"]
    report["theory_communication"] = theory_communication(groups, n, [True] * (len(groups) - 1) + [False])
    report["ring_bytes_sent"] = {s: ring_bytes_sent(c, n) for s, c in report["communication"].items()}
    weights = [(r["DDP"]["weights"], r["FSDP"]["weights"]) for r in ranks]
    report["max_weight_difference"] = max(float((d[k] - f[k]).abs().max()) for d, f in weights for k in d)
    report["max_loss_difference"] = max(abs(a - b) for r in ranks for a, b in zip(r["DDP"]["losses"],
                                                                                     r["FSDP"]["losses"]))
    report["ratio"] = {kind: max(r["bytes"][kind] for r in report_rows(report, "FSDP"))
                       / report["bytes"]["DDP"][0][kind] for kind in KINDS}
    return report


def report_rows(report: dict, strategy: str) -> list[dict]:
    """One row per rank of ``report`` for ``strategy``: ``{"bytes": measured, "theory": theory}``."""
    return [{"bytes": b, "theory": t} for b, t in zip(report["bytes"][strategy], report["theory_bytes"][strategy])]


def report_table(report: dict[str, Any]) -> str:
    """:func:`compare_ddp_fsdp` 's report as lines of text: bytes per rank by kind (measured / theory),
    payload per step by collective (measured / theory), bytes sent per rank with ring collectives, and the
    loss and weight differences between DDP and FSDP."""
    n = report["processes"]
    lines = [tr("{parameters:,} parameters (float32) trained with AdamW in {n} processes",
                parameters=report["parameters"], n=n),
             "", f"{tr('bytes held'):<32}" + "".join(f"{tr(kind):>22}" for kind in KINDS)]
    for strategy in ("DDP", "FSDP"):
        for rank, row in enumerate(report_rows(report, strategy)):
            cells = "".join(f"{number(row['bytes'][k], '>12,')} / {number(row['theory'][k], '<,')}".rjust(22)
                            for k in KINDS)
            label = tr("{strategy} rank {rank} (measured / theory)", strategy=strategy, rank=rank)
            lines.append(f"{label:<32}{cells}")
    lines.append(f"{tr('FSDP / DDP, largest rank'):<32}" + "".join(number(report['ratio'][k], ">22.4f") for k in KINDS)
                 + f"   (1/N = {number(1 / n, '.4f')})")
    lines += ["", tr("payload per step (bytes, measured / theory)")]
    for strategy in ("DDP", "FSDP"):
        theory = report["theory_communication"][strategy]
        cells = ", ".join(f"{name} {number(report['communication'][strategy].get(name, 0), ',')} / {number(want, ',')}"
                          for name, want in theory.items())
        lines.append("  " + tr("{strategy:<5} {cells}; sent per rank (ring): {sent:,.0f}", strategy=strategy,
                               cells=cells, sent=report["ring_bytes_sent"][strategy]))
    lines += ["", tr("DDP vs FSDP: largest loss difference {loss:.2e}, largest weight difference {weight:.2e}",
                     loss=report["max_loss_difference"], weight=report["max_weight_difference"])]
    return "\n".join(lines)


# --- Memory where it peaks: one step of DDP, ZeRO-1 and FSDP measured inside, per rank (lesson 5.1) ---

PEAK_STRATEGIES = ("DDP", "ZeRO-1", "FSDP", "FSDP, reshard_after_forward=False")


def _wrap_for_peak(strategy: str, model):
    """``model`` wrapped for ``strategy`` (:data:`PEAK_STRATEGIES`) and its optimizer, created *after* the wrap
    (``fully_shard`` replaces the module's parameters by sharded ``DTensor`` s)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if strategy not in PEAK_STRATEGIES:
        raise ValueError(tr("strategy={value!r} is not one of {allowed}.", value=strategy,
                            allowed=", ".join(PEAK_STRATEGIES)))
    if strategy in ("DDP", "ZeRO-1"):
        model = wrap_ddp(model)
    else:
        options = {} if strategy == "FSDP" else {"reshard_after_forward": False}
        for block in model.blocks:
            fully_shard(block, **options)
        fully_shard(model, **options)  # default for the root: it keeps its parameters from forward to backward
    if strategy == "ZeRO-1":
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


class FullParameterWatch:
    """Records, at every forward and backward of every leaf module, the bytes of FSDP groups whose full
    parameters exist on this rank: gathered and registered (``is_unsharded``) or being gathered (a prefetch:
    ``_all_gather_result`` pending), read from torch 2.13's ``FSDPParamGroup`` (``_fsdp_param_group.py``).
    ``peak_bytes`` is the largest such sum, ``peak_groups`` the names of the groups full at that moment."""

    def __init__(self, model):
        from torch.distributed.fsdp import FSDPModule

        self.groups = {name or "root": module._get_fsdp_state()._fsdp_param_group
                       for name, module in model.named_modules() if isinstance(module, FSDPModule)}
        self.group_bytes = {name: sum(p.padded_sharded_param_size.numel() for p in g.fsdp_params) * FLOAT32_BYTES
                            * g.mesh_info.shard_mesh_size for name, g in self.groups.items()}
        self.peak_bytes, self.peak_groups = 0, []
        leaves = [m for m in model.modules() if not list(m.children())]
        self._handles = [h for m in leaves for h in (
            m.register_forward_pre_hook(lambda *_: self.sample()), m.register_forward_hook(lambda *_: self.sample()),
            m.register_full_backward_pre_hook(lambda *_: self.sample()))]

    def sample(self) -> None:
        full = [n for n, g in self.groups.items() if g.is_unsharded or g._all_gather_result is not None]
        held = sum(self.group_bytes[n] for n in full)
        if held > self.peak_bytes:
            self.peak_bytes, self.peak_groups = held, full

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()


def allocation_peak(events) -> int:
    """The largest sum of allocations minus frees, in time order, of the profiler's ``[memory]`` events
    (``prof.profiler.kineto_results.events()``): bytes allocated above the level at the start of the record."""
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    level = peak = 0
    for _, nbytes in memory:
        level += nbytes
        peak = max(peak, level)
    return peak


def peak_run(strategy: str, batches: list[tuple], seed: int = 0) -> dict[str, Any]:
    """In each rank of a group: :func:`sharding_model` wrapped for ``strategy``, one warm-up AdamW step (the
    optimizer state exists from then on), then one step recorded by ``torch.profiler`` with
    ``profile_memory=True`` while counting collectives and (FSDP) the full groups.

    Returns ``rest`` (:func:`rank_bytes` between steps: parameters and optimizer state, no gradients),
    ``in_step`` (the profiler's allocation peak above that level: gradients, activations, gathered
    parameters, buffers), ``full_parameters`` and ``full_groups`` (FSDP's most full-parameter bytes at once, and
    which groups), ``communication`` (payload bytes by collective in the recorded step) and ``world``."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from effitrain_helpers.measure.communication import CommunicationCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = _wrap_for_peak(strategy, sharding_model(seed))
    mine = [(t.chunk(world)[rank], y.chunk(world)[rank]) for t, y in batches[:2]]

    def step(tokens, labels):
        torch.nn.functional.cross_entropy(model(tokens), labels).backward()
        optimizer.step()
        optimizer.zero_grad()

    counter = CommunicationCounter().watch(model)  # DDP's comm hook must come before its first backward
    try:
        step(*mine[0])
        warm_up = dict(counter.summary().bytes_by_collective)
        rest = rank_bytes(model, getattr(optimizer, "optim", optimizer))  # ZeroRedundancyOptimizer: local part
        watch = FullParameterWatch(model) if strategy.startswith("FSDP") else None
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(*mine[1])
        if watch is not None:
            watch.stop()
    finally:
        counter.stop()
    recorded = {k: b - warm_up.get(k, 0) for k, b in counter.summary().bytes_by_collective.items()}
    return {"rank": rank, "world": world, "strategy": strategy, "rest": rest,
            "in_step": allocation_peak(prof.profiler.kineto_results.events()),
            "full_parameters": watch.peak_bytes if watch else rest["parameters"],
            "full_groups": watch.peak_groups if watch else [], "group_bytes": watch.group_bytes if watch else {},
            "communication": recorded}


def peak_runs(batches: list[tuple]) -> dict[str, dict]:
    """:func:`peak_run` for every strategy of :data:`PEAK_STRATEGIES`, one after the other in this group."""
    return {strategy: peak_run(strategy, batches) for strategy in PEAK_STRATEGIES}
