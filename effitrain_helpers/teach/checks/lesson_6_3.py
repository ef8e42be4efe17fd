"""Exercises of lesson 6.3 (ZeRO by hand: shard the optimizer state, the gradients, the parameters).

q1 assigns whole tensors to ranks, balanced by size (checked here, in this process, against the
largest-first greedy rule on sizes where the order matters); q2 is ZeRO-1,
``ShardedOptimizer(params, optimizer_class, **defaults)``, run in 2 and then 3 real processes against plain
``torch.optim.AdamW`` on every rank, after averaged gradients, on a model whose weights and biases alternate
(tensors that do not balance by accident), with a learning rate and weight decay that are not AdamW's defaults.
q2 judges what the class does, not the names it uses: the inner optimizers are the ones it builds from the
``optimizer_class`` it is given (recorded as they are made), their state bytes are measured per rank, and the
ranks' collective calls are compared call by call (:class:`~effitrain_helpers.measure.traffic.CollectiveAgreement`),
so a ``src`` that differs between the ranks is named at once instead of waiting forever. q3 is ZeRO-2's gradients,
``GradientShards(model, bucket_bytes)``: hooks that reduce-scatter each bucket during backward and free its full
gradients, run in 2 and 3 processes over two backward passes. They judge a function or class defined in a notebook
or in a script (``q2.evaluate(MyClass)``): the class travels to the workers by value.
"""

from __future__ import annotations

import re
import tempfile

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, hands_over_to, run_learner_in_processes

WORLDS = (2, 3)  # q2 runs in 2, then in 3 processes
STEPS, BATCH = 3, 6  # AdamW steps; samples per step in all (split among the ranks)
# q2's settings: not AdamW's defaults (lr=1e-3, weight_decay=1e-2), so that settings dropped on the way show
DEFAULTS = {"lr": 0.02, "weight_decay": 0.1}
WIDTH, LAYERS, CLASSES = 16, 4, 4  # q2's model: LAYERS Linear(WIDTH, WIDTH) + Tanh, then Linear(WIDTH, CLASSES)
TOLERANCE = 1e-6  # largest weight difference allowed against plain AdamW on every rank
TIMEOUT = 90.0  # seconds for one launch of q2 (per class judged)
AGREE_LIMIT = 20.0  # seconds a rank waits for the others' next collective call before naming the missing rank

# q1's cases: (sizes, world_size); each wrong version a learner writes fails at least one of them
BALANCE_CASES = (
    ([100, 1] * 4, 2),        # round-robin puts every big tensor on rank 0
    ([1] * 6 + [50] * 4, 2),  # cutting the list in halves by count puts every big one on rank 1
    ([1, 1, 1, 1, 4], 2),     # placed in the order given (not largest first), the big one lands on a full rank
    ([64000, 12288, 8192, 8192, 4096, 192, 128, 64, 64, 3], 3),  # lesson 5.1's model, roughly
    ([5, 5, 5, 5, 5], 4),     # more ranks than pairs: nobody may be left empty
)


def _greedy(sizes: list, world: int, order) -> list[int]:
    """Each tensor, in ``order``, to the rank holding the fewest values so far: the loads per rank."""
    loads = [0] * world
    for i in order:
        loads[loads.index(min(loads))] += sizes[i]
    return loads


def _check_owners(assign) -> None:
    from effitrain_helpers.engines.zero import balanced_owners

    if not callable(assign):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=assign))
    if hands_over_to(assign, balanced_owners):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own assignment: write the rule "
                           "yourself (the exercise is what that function does).", name="balanced_owners"))
    for sizes, world in BALANCE_CASES:
        owners = assign(list(sizes), world)
        try:
            owners = [int(o) for o in owners]
        except (TypeError, ValueError):
            raise Incorrect(tr("return a list with one rank (an int) per tensor; for sizes={sizes} you returned "
                               "{owners!r}.", sizes=sizes, owners=owners)) from None
        if len(owners) != len(sizes):
            raise Incorrect(tr("return one owner per tensor: {n} sizes gave {m} owners.", n=len(sizes),
                               m=len(owners)))
        bad = [o for o in owners if not 0 <= o < world]
        if bad:
            raise Incorrect(tr("rank {rank} does not exist among {world} ranks: owners go from 0 to {last}.",
                               rank=bad[0], world=world, last=world - 1))
        loads = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(world)]
        empty = [r for r in range(world) if r not in owners]
        if empty:
            raise Incorrect(tr("with {n} tensors and {world} ranks, rank {rank} owns nothing (loads {loads}): its "
                               "optimizer would get an empty parameter list.", n=len(sizes), world=world,
                               rank=empty[0], loads=loads))
        bound = max(_greedy(sizes, world, sorted(range(len(sizes)), key=lambda i: -sizes[i])))
        if max(loads) <= bound:
            continue
        if sorted(loads) == sorted(_greedy(sizes, world, range(len(sizes)))):
            raise Incorrect(tr("sizes={sizes} among {world} ranks: the ranks hold {loads} values. You gave each "
                               "tensor to the least-loaded rank in the order the tensors come; a big tensor "
                               "met last lands on a rank already full. Place the tensors largest first (the "
                               "largest share is then at most {bound:g}).", sizes=sizes, world=world,
                               loads=loads, bound=bound))
        raise Incorrect(tr("sizes={sizes} among {world} ranks: the ranks hold {loads} values, unbalanced (the "
                           "largest should be at most {bound:g}). Give each tensor, largest first, to the rank "
                           "that holds the fewest values so far.", sizes=sizes, world=world, loads=loads,
                           bound=bound))


def check_model():
    """q2's model: ``LAYERS`` square layers then a small one, so weights (large) and biases (small) alternate
    and an assignment that ignores sizes (round-robin) puts nearly all the state on one rank of 2."""
    import torch

    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, CLASSES))


def _train(model, make_optimizer, batches, rank: int, world: int) -> tuple:
    """``model`` trained on this rank's part of ``batches`` with averaged gradients: (the optimizer, the weights
    after each step, the indices of the parameters left with a nonzero gradient after ``zero_grad``)."""
    import torch

    from effitrain_helpers.engines.gradient_sync import average_gradients

    optimizer, after, left = make_optimizer(model.parameters()), [], set()
    params = list(model.parameters())
    for inputs, labels in batches:
        loss = torch.nn.functional.cross_entropy(model(inputs.chunk(world)[rank]), labels.chunk(world)[rank])
        loss.backward()
        average_gradients(model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        left |= {i for i, p in enumerate(params) if p.grad is not None and bool(p.grad.any())}
        after.append([p.detach().clone() for p in params])
    return optimizer, after, left


def _run_learners(cls, folder: str, *more) -> list[dict]:
    """In each rank, for each of the classes ``cls, *more``: :func:`check_model` trained ``STEPS`` steps with the class (given a
    recording subclass of AdamW as ``optimizer_class``, and :data:`DEFAULTS`), beside plain AdamW with the same
    settings and with its default ones. Each class's collectives are compared between the ranks call by call;
    a difference ends that class's run at once (``disagree``)."""
    import copy
    import gc
    import os
    import weakref

    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.traffic import CollectiveAgreement, CollectivesDisagree
    from effitrain_helpers.training.zero_stages import state_bytes

    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(BATCH, WIDTH, generator=gen), torch.randint(CLASSES, (BATCH,), generator=gen))
               for _ in range(STEPS)]
    torch.manual_seed(0)
    start = check_model()
    names = [name for name, _ in start.named_parameters()]
    references = {}
    for key, settings in (("reference", DEFAULTS), ("defaults_dropped", {})):
        optimizer, after, _ = _train(copy.deepcopy(start), lambda ps, s=settings: torch.optim.AdamW(ps, **s),
                                     batches, rank, world)
        references[key] = after[-1]
        references.setdefault("adamw_state", state_bytes(optimizer))
    records = []
    for k, cls in enumerate((cls, *more)):
        built = weakref.WeakSet()  # an optimizer the class built and let go is not its inner optimizer

        class Recorded(torch.optim.AdamW):
            """AdamW, each instance noted: the inner optimizers the learner's class builds."""

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                built.add(self)

        Recorded.__name__ = Recorded.__qualname__ = "AdamW"
        model = copy.deepcopy(start)
        params = list(model.parameters())
        os.makedirs(f"{folder}/{k}", exist_ok=True)
        try:
            with CollectiveAgreement(f"{folder}/{k}", wait_limit=AGREE_LIMIT):
                _, after, left = _train(model, lambda ps: cls(ps, Recorded, **DEFAULTS), batches, rank, world)
        except CollectivesDisagree as err:
            records.append({"disagree": {"index": err.index, "calls": err.calls}})
            continue
        gc.collect()
        held = {id(p) for opt in built for group in opt.param_groups for p in group["params"]}
        records.append({
            "built": len(built), "owned": [i for i, p in enumerate(params) if id(p) in held],
            "state": sum(state_bytes(opt) for opt in built), "left": sorted(left),
            "after_first": torch.cat([p.reshape(-1) for p in after[0]]),
            "weights": after[-1], "start": [p.detach().clone() for p in start.parameters()],
            "names": names, **references})
    return records


def judge_sharded_optimizers(classes: list) -> list[Incorrect | None]:
    """q2's verdict on each of ``classes``: None when right, else the :class:`Incorrect` saying why not. All are judged
    in one launch per world size (a class refused in 2 processes is not run in 3): q2's check judges one
    class so; the tests judge many at once, as the mutation harness may."""
    verdicts: list[Incorrect | None] = [None] * len(classes)
    for world in WORLDS:
        todo = [k for k, v in enumerate(verdicts) if v is None]
        if not todo:
            break
        with tempfile.TemporaryDirectory(prefix="effitrain-6-3-") as folder:
            first, *more = [classes[k] for k in todo]
            try:
                ranks = run_learner_in_processes(_run_learners, first, folder, *more, processes=world,
                                                 timeout=TIMEOUT * len(todo))
            except TimeoutError as err:
                stuck = re.search(r"still running: ranks \[[^\]]*\]", str(err))
                raise Incorrect(tr("in {world} processes nothing came back within {timeout:g} s ({stuck}); they "
                                   "were ended (an endless loop, or a wait outside torch.distributed's "
                                   "collectives?).", world=world, timeout=TIMEOUT * len(todo),
                                   stuck=stuck.group(0) if stuck else "?")) from None
        for j, k in enumerate(todo):
            try:
                _judge([r[j] for r in ranks], world)
            except Incorrect as err:
                verdicts[k] = err
    return verdicts


def _check_sharded_optimizer(cls) -> None:
    if not isinstance(cls, type):
        raise Incorrect(tr("pass your class itself (ShardedOptimizer, not ShardedOptimizer(...)); you gave "
                           "{fn!r}.", fn=cls))
    verdict = judge_sharded_optimizers([cls])[0]
    if verdict is not None:
        raise verdict


def _call(rank: int, call: dict | None) -> str:
    """One rank's collective call, as the disagreement message shows it."""
    from effitrain_helpers.measure.traffic import ROOTS

    if call is None:
        return tr("rank {rank}: no call within {limit:g} s", rank=rank, limit=AGREE_LIMIT)
    root = f"({ROOTS[call['name']]}={call['peer']})" if call["name"] in ROOTS else ""
    return tr("rank {rank}: {name}{root} of {numel} values", rank=rank, name=call["name"], root=root,
              numel=call["numel"])


def _state_bound(sizes: list[int], world: int) -> int:
    """The largest state (bytes) a rank keeps when whole tensors are placed largest first on the least-loaded
    rank (AdamW: 8 bytes per value and a 4-byte step per tensor), plus one step per tensor of slack for ties."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    return max(_greedy([8 * s + 4 for s in sizes], world, order)) + 4 * len(sizes)


def _judge(ranks: list[dict], world: int) -> None:
    import torch

    disagree = next((r["disagree"] for r in ranks if "disagree" in r), None)
    if disagree:
        calls = "; ".join(_call(rank, call) for rank, call in sorted(disagree["calls"].items()))
        raise Incorrect(tr("in {world} processes the ranks' collective calls differ at call {index}: {calls}. "
                           "Every rank must make the same calls in the same order with the same src: compute "
                           "the owners from the sizes alone (the same list on every rank), and let every rank "
                           "call broadcast for every parameter, with src=its owner.", world=world,
                           index=disagree["index"] + 1, calls=calls))
    first = ranks[0]
    names, adamw, states = first["names"], first["adamw_state"], [r["state"] for r in ranks]
    if not any(r["built"] for r in ranks):
        raise Incorrect(tr("your class never built an optimizer from optimizer_class, the class it is given "
                           "(here AdamW): build the inner optimizer with it, over this rank's share, passing "
                           "**defaults on, so that whoever uses your class chooses the algorithm."))
    owners = [[k for k, r in enumerate(ranks) if i in r["owned"]] for i in range(len(names))]
    if min(states) >= 0.9 * adamw:
        raise Incorrect(tr("in {world} processes every rank steps every parameter: no memory is saved (each "
                           "rank's state is {state:,} bytes, AdamW's {adamw:,}). Build the inner optimizer "
                           "over this rank's share only.", world=world, state=min(states), adamw=adamw))
    shared = [i for i, o in enumerate(owners) if len(o) > 1]
    if shared:
        raise Incorrect(tr("in {world} processes the shares overlap: {name} is stepped by ranks {ranks}. Each "
                           "tensor must have exactly one owner.", world=world, name=names[shared[0]],
                           ranks=owners[shared[0]]))
    left = sorted({i for rank in ranks for i in rank["left"]})
    if left:
        raise Incorrect(tr("after zero_grad(), {name} still has a gradient: clear every parameter's gradient, "
                           "not only this rank's share.", name=names[left[0]]))
    spread = max(float((r["after_first"] - first["after_first"]).abs().max()) for r in ranks)
    if spread > 0:
        raise Incorrect(tr("in {world} processes the ranks' weights differ after step 1 (by up to {gap:.1e}): "
                           "each rank updated only its share. After stepping, broadcast every parameter from "
                           "its owner.", world=world, gap=spread))
    frozen = [i for i, (w, s) in enumerate(zip(first["weights"], first["start"])) if torch.equal(w, s)]
    if frozen:
        i = frozen[0]
        if owners[i]:
            raise Incorrect(tr("in {world} processes {name} never changed, although rank {owner} stepped it: a "
                               "broadcast from another rank then overwrote it with the old value. Broadcast "
                               "each parameter from the rank that owns it: src=owner.", world=world,
                               name=names[i], owner=owners[i][0]))
        if any(owners):
            raise Incorrect(tr("in {world} processes {n} parameter(s) are in no rank's share (e.g. {name}): they "
                               "are never updated. Every tensor needs an owner.", world=world, n=len(frozen),
                               name=names[i]))
        raise Incorrect(tr("in {world} processes {name} never changed: every value of every parameter needs an "
                           "owner that steps it and sends it to the other ranks.", world=world, name=names[i]))

    def gap(weights, other) -> float:
        return max(float((a - b).abs().max()) for a, b in zip(weights, other))

    if all(gap(r["weights"], r["defaults_dropped"]) <= TOLERANCE for r in ranks):
        raise Incorrect(tr("your weights are those of AdamW with its own default settings, not with {given}: "
                           "pass **defaults on to optimizer_class.", given=", ".join(
                               f"{k}={v:g}" for k, v in DEFAULTS.items())))
    worst = max(gap(r["weights"], r["reference"]) for r in ranks)
    if worst > TOLERANCE:
        raise Incorrect(tr("in {world} processes the weights differ from plain AdamW's by {gap:.1e} after "
                           "{steps} steps (allowed {allowed:g}): each parameter must be stepped once per step, "
                           "by its owner's optimizer_class(..., **defaults), then sent to every rank.",
                           world=world, gap=worst, steps=STEPS, allowed=TOLERANCE))
    bound = _state_bound([w.numel() for w in first["start"]], world)
    if max(states) > bound:
        raise Incorrect(tr("in {world} processes the ranks keep {states} bytes of state for AdamW's {adamw:,}: "
                           "the largest should be at most {bound:,} (the tensors placed largest first on the "
                           "least-loaded rank). Balance the shares by size, not by count.", world=world,
                           states=states, adamw=adamw, bound=bound))


q1 = Exercise(
    "6.3 q1: give each tensor an owner, balanced by size",
    _check_owners,
    usage="q1.check(assign_owners)",
    api=True,
    checked=("checked on 5 lists of sizes and rank counts: your own rule, one valid owner per tensor, no "
             "rank left empty, and the largest load no larger than placing the largest tensors first gives."),
    hints=["Whole tensors go to ranks, so the shares cannot be exactly equal; aim for the largest share to be "
           "as small as possible. Placing the big tensors first leaves the small ones to even things out.",
           "Keep a running total of values per rank; for each tensor, largest first (sorted(..., key=...)), "
           "pick the rank whose total is smallest (min(range(world_size), key=...)). "
           "ZeroRedundancyOptimizer._partition_parameters does the same.",
           "Visit the tensors by decreasing size; each goes to the rank holding the fewest values at that "
           "moment, whose total then grows by its size. The answer lists one rank per tensor, in the order the "
           "sizes were given (not the sorted order). ZeroRedundancyOptimizer._partition_parameters, in "
           "torch/distributed/optim/zero_redundancy_optimizer.py, is the rule in torch's own words."],
    solution_code=(
        "def assign_owners(sizes, world_size):\n    loads, owners = [0] * world_size, [0] * len(sizes)\n"
        "    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):\n"
        "        rank = min(range(world_size), key=lambda r: loads[r])\n        owners[i] = rank\n"
        "        loads[rank] += sizes[i]\n    return owners\n\nq1.check(assign_owners)"
    ),
)
q2 = Exercise(
    "6.3 q2: ZeRO-1, ShardedOptimizer, in 2 and 3 processes",
    _check_sharded_optimizer,
    usage="q2.check(ShardedOptimizer)",
    api=True,
    checked=("checked in 2 and 3 processes, on a model whose weights and biases alternate, with lr and "
             "weight_decay not AdamW's defaults: the same collective calls on every rank, each value "
             "stepped by exactly one rank, weights equal to plain AdamW's after 3 steps, and AdamW's "
             "state split by size, measured in bytes per rank."),
    hints=["Every rank still holds every parameter and the averaged gradient; only the optimizer (and so its "
           "state) is split. After its own step, a rank's share is new and the others' is stale: each owner "
           "sends its tensors to everyone.",
           "In __init__: keep the parameters in a list (params may be a generator), give them owners with "
           "assign_owners (sizes: p.numel()) and build optimizer_class(my_share, **defaults). In step(): the "
           "inner optimizer's step, then torch.distributed.broadcast(tensor, src=...) for each parameter "
           "(docs: torch.distributed).",
           "The owners must be one list, the same on every rank (computed from the sizes alone), so that every "
           "rank makes the same broadcasts in the same order, each with src = that tensor's owner. zero_grad() "
           "clears every parameter's gradient, not only this rank's share. ZeroRedundancyOptimizer.step() "
           "ends the same way: _sync_params in torch/distributed/optim/zero_redundancy_optimizer.py."],
    solution_code=(
        "class ShardedOptimizer:\n    def __init__(self, params, optimizer_class, **defaults):\n"
        "        self.params = list(params)\n"
        "        self.owners = assign_owners([p.numel() for p in self.params], dist.get_world_size())\n"
        "        mine = [p for p, o in zip(self.params, self.owners) if o == dist.get_rank()]\n"
        "        self.optimizer = optimizer_class(mine, **defaults)\n\n    def step(self):\n"
        "        self.optimizer.step()\n        for p, owner in zip(self.params, self.owners):\n"
        "            dist.broadcast(p.data, src=owner)\n\n    def zero_grad(self):\n"
        "        for p in self.params:\n            p.grad = None\n\n\nq2.check(ShardedOptimizer)"
    ),
)


# ---- q3: ZeRO-2's gradients, reduce-scattered bucket by bucket during backward ----------------------------------

Q3_LAYERS, Q3_WIDTH = 8, 32  # an MLP of equal layers: one bucket per layer, so 1/N + a bucket is far below all
Q3_BACKWARDS = 2  # a second backward catches counters never reset


def _q3_model():
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(Q3_LAYERS):
        layers += [torch.nn.Linear(Q3_WIDTH, Q3_WIDTH), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def _q3_run(cls) -> dict:
    """In each rank: the learner's ``cls(model, bucket_bytes)`` (one layer per bucket), ``Q3_BACKWARDS``
    backward passes on this rank's rows, each followed by nothing but ``p.grad = None`` for every parameter
    the learner left; what its ``shards`` held after each, against the slices of the averaged gradient (a
    plain all-reduce on a copy), the gradient bytes held at every hook during backward, and the collectives."""
    import math

    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.communication import CommunicationCounter
    from effitrain_helpers.engines.gradient_sync import gradient_buckets
    from effitrain_helpers.engines.zero import flat_pieces, gradient_bytes

    rank, world = dist.get_rank(), dist.get_world_size()
    model, reference = _q3_model(), _q3_model()
    layer_bytes = sum(p.numel() * p.element_size() for p in model[0].parameters())
    sync = cls(model, layer_bytes)
    buckets = gradient_buckets(model.parameters(), layer_bytes)
    params = [p for b in buckets for p in b]
    peak = [0]

    def sample(_):
        shards = [s for s in (getattr(sync, "shards", None) or []) if isinstance(s, torch.Tensor)]
        peak[0] = max(peak[0], gradient_bytes(params) + sum(s.numel() * s.element_size() for s in shards))

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(sample)  # after the learner's own hook on the same parameter
    out = {"backwards": [], "layer_bytes": layer_bytes,
           "total_bytes": sum(p.numel() * p.element_size() for p in params)}
    counter = CommunicationCounter(collectives=("all_reduce", "reduce_scatter", "reduce_scatter_single",
                                                "all_gather", "all_gather_single", "broadcast", "reduce")).watch()
    try:
        for step in range(Q3_BACKWARDS):
            generator = torch.Generator().manual_seed(100 * rank + step)
            x = torch.randn(4, Q3_WIDTH, generator=generator)
            before = dict(counter.bytes_by_collective)
            model(x).square().mean().backward()
            sent = {k: v - before.get(k, 0) for k, v in counter.bytes_by_collective.items() if v > before.get(k, 0)}
            left = sum(p.grad is not None for p in params)
            shards = list(getattr(sync, "shards", None) or [])
            got = [None if s is None else s.detach().reshape(-1).clone() for s in shards]
            for p in model.parameters():
                p.grad = None
            counter.stop()
            reference(x).square().mean().backward()
            want = []
            for bucket in gradient_buckets(reference.parameters(), layer_bytes):
                for p in bucket:
                    dist.all_reduce(p.grad)
                    p.grad /= world
                chunk = math.ceil(sum(p.numel() for p in bucket) / world)
                want.append(flat_pieces([p.grad for p in bucket], chunk, world)[0][rank].clone())
            for p in reference.parameters():
                p.grad = None
            counter.watch()
            out["backwards"].append({"sent": sent, "left": left, "got": got, "want": want})
    finally:
        counter.stop()
    out["peak"] = peak[0]
    return out


def _check_gradient_shards(cls) -> None:
    if not isinstance(cls, type):
        raise Incorrect(tr("pass your class itself (GradientShards, not GradientShards(...)); you gave {fn!r}.",
                           fn=cls))
    for world in WORLDS:
        try:
            ranks = run_learner_in_processes(_q3_run, cls, processes=world, timeout=TIMEOUT)
        except TimeoutError as err:
            stuck = re.search(r"still running: ranks \[[^\]]*\]", str(err))
            raise Incorrect(tr("in {world} processes nothing came back within {timeout:g} s ({stuck}); they were "
                               "ended. Every rank must reduce-scatter every bucket, in the same order.",
                               world=world, timeout=TIMEOUT, stuck=stuck.group(0) if stuck else "?")) from None
        _judge_gradient_shards(ranks, world)


def _judge_gradient_shards(ranks: list[dict], world: int) -> None:
    import torch

    for step, runs in enumerate(zip(*(r["backwards"] for r in ranks)), start=1):
        first = runs[0]
        if step > 1 and all(g is not None and p is not None and torch.equal(g, p) for g, p in
                            zip(first["got"], ranks[0]["backwards"][step - 2]["got"])):
            raise Incorrect(tr("in {world} processes, after backward {step}, self.shards still holds backward "
                               "{last}'s slices: start each bucket's count again once it is sent.", world=world,
                               step=step, last=step - 1))
        if "all_reduce" in first["sent"]:
            raise Incorrect(tr("in {world} processes backward {step} called all_reduce: every rank then receives "
                               "the whole sum. Use reduce_scatter so each rank receives only its slice.",
                               world=world, step=step))
        sent = [b for b, g in enumerate(first["got"]) if g is not None]
        if len(first["got"]) != len(first["want"]) or len(sent) < len(first["want"]):
            raise Incorrect(tr("in {world} processes, after backward {step}, self.shards holds {n} of the {m} "
                               "buckets' slices: each bucket must be reduce-scattered from the hooks, as soon as "
                               "its last gradient arrives (and the counts start again for the next backward).",
                               world=world, step=step, n=len(sent), m=len(first["want"])))
        if any(run["left"] for run in runs):
            raise Incorrect(tr("in {world} processes, after backward {step}, {n} parameter(s) still hold their "
                               "full gradient: set p.grad = None for each parameter of a bucket once it is sent.",
                               world=world, step=step, n=max(run["left"] for run in runs)))
        for rank, run in enumerate(runs):
            for b, (got, want) in enumerate(zip(run["got"], run["want"])):
                if got.numel() != want.numel():
                    raise Incorrect(tr("rank {rank}'s slice of bucket {b} holds {got} values, not {want}: a rank "
                                       "keeps 1/N of the bucket (padded), its own part of the reduce-scatter.",
                                       rank=rank, b=b, got=got.numel(), want=want.numel()))
                if torch.allclose(got, want * world, rtol=1e-5, atol=1e-6) and world > 1 and want.abs().max() > 0:
                    raise Incorrect(tr("the slices are the sum over the ranks, {world} times the average: divide "
                                       "by the world size.", world=world))
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                    raise Incorrect(tr("in {world} processes rank {rank}'s slice of bucket {b} is not the average "
                                       "of that part of the gradients (largest difference {gap:.1e}): each rank "
                                       "keeps slice number rank of the bucket's flat gradients.", world=world,
                                       rank=rank, b=b, gap=float((got - want).abs().max())))
    bound = ranks[0]["total_bytes"] / world + 2 * ranks[0]["layer_bytes"]
    peak = max(r["peak"] for r in ranks)
    if peak > bound:
        raise Incorrect(tr("in {world} processes a rank held up to {peak:,} bytes of gradients during backward "
                           "(every full gradient is {total:,}); at most {bound:,.0f} (1/N plus a bucket or two) "
                           "when each bucket is sent from the hooks and freed at once.", world=world, peak=peak,
                           total=ranks[0]["total_bytes"], bound=bound))


q3 = Exercise(
    "6.3 q3: ZeRO-2's gradients, reduce-scattered during backward",
    _check_gradient_shards,
    usage="q3.check(GradientShards)",
    api=True,
    checked=("checked in 2 and 3 processes over two backward passes: each rank's slice of every bucket equals "
             "the average of the ranks' gradients there, every full gradient is freed, and no rank ever holds "
             "more than 1/N of the gradients plus two buckets."),
    hints=["Nothing waits for backward to end: a hook on every parameter counts the gradients of its bucket; "
           "the bucket's last one sends the bucket at once, every rank keeping only its own slice of the sum, "
           "and the full gradients are dropped right away.",
           "Tensor.register_post_accumulate_grad_hook(hook) calls hook(p) once p.grad is complete; "
           "torch.distributed.reduce_scatter_single(output, input) sums input over the ranks and gives rank r "
           "the r-th of N equal pieces (input padded to N times the piece's length; docs: torch.distributed).",
           "Each bucket needs a count of its arrived gradients (started again once sent) and a slice length: "
           "its values divided by N, rounded up. When the count is full: the bucket's gradients, flattened and "
           "padded with zeros to N slices, are reduce-scattered into a new one-slice tensor, whose mean goes "
           "to self.shards[b]; then each of its parameters lets go of .grad. FSDP sends gradients this way: "
           "foreach_reduce in torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py."],
    solution_code=(
        "class GradientShards:\n    def __init__(self, model, bucket_bytes):\n"
        "        self.world = dist.get_world_size()\n"
        "        self.buckets = gradient_buckets(model.parameters(), bucket_bytes)  # last layer first\n"
        "        self.chunks = [-(-sum(p.numel() for p in b) // self.world) for b in self.buckets]\n"
        "        self.shards, self.arrived = [None] * len(self.buckets), [0] * len(self.buckets)\n"
        "        for b, p in [(b, p) for b, bucket in enumerate(self.buckets) for p in bucket]:\n"
        "            p.register_post_accumulate_grad_hook(lambda p, b=b: self.arrive(b))\n"
        "\n    def arrive(self, b):\n        self.arrived[b] += 1\n"
        "        if self.arrived[b] == len(self.buckets[b]):  # the bucket's last gradient: send it now\n"
        "            self.arrived[b] = 0  # ready for the next backward\n"
        "            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[b]])\n"
        "            padded = torch.cat([flat, flat.new_zeros(self.world * self.chunks[b] - flat.numel())])\n"
        "            mine = torch.empty(self.chunks[b])\n"
        "            dist.reduce_scatter_single(mine, padded)\n"
        "            self.shards[b] = mine / self.world\n"
        "            for p in self.buckets[b]:\n"
        "                p.grad = None  # sent: the full gradient goes\n\n\n"
        "q3.check(GradientShards)"
    ),
)
