"""Exercises of lesson 6.2 (data parallelism by hand), each judged in real processes: q1-q3 against torch's DDP
in 2 of them, and q2 (whose answer divides by the world size) in 2 and then 3, so that a literal 2 fails.

Every checker runs the learner's function through :func:`~effitrain_helpers.teach.exercises.run_learner_in_processes`
(a time limit; a rank that raises is named) and names the bug it recognises from what each rank recorded
(:class:`~effitrain_helpers.training.ddp_by_hand.ReplicaRecord`): the weights at step 0, the gradients of
step 1 before and after the sync, the collectives called and their bytes, the optimizer steps. The learner's
function may come from a notebook or from a plain script: it travels to the workers by value.

q4 is the overlapped, bucketed sync, ``OverlappedSync(model, bucket_bytes)`` with ``wait()``, run in 2 and then 3
processes on a model with a frozen layer, a tied weight and two branches whose gradients arrive in another order
on the odd ranks: every ``dist.all_reduce`` is recorded (during backward or not, asynchronous or not, a wait
during backward, which bucket it carried), the gradients after ``wait()`` are compared with the ranks' average
(recomputed in each rank), and a model with an unused branch must make ``wait()`` raise.
"""

from __future__ import annotations

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, run_learner_in_processes

PROCESSES, STEPS, K, TIMEOUT = 2, 3, 4, 90  # 2 ranks, 3 SGD steps (q3: 2 steps of K micro-batches), seconds
AVERAGE_WORLDS = (2, 3)  # q2 runs in 2, then in 3 processes
TOLERANCE = 1e-6  # largest allowed gap between the learner's final weights and DDP's


def _reference_broadcast(model) -> None:
    """Rank 0's weights into every rank (what q2's and q3's runs start from)."""
    from effitrain_helpers.engines.gradient_sync import broadcast_parameters

    broadcast_parameters(model.parameters())


def _reference_average(model) -> None:
    """The averaged gradient on every rank (what q1's run trains with)."""
    from effitrain_helpers.engines.gradient_sync import average_gradients

    average_gradients(model.parameters())


def _by_hand_and_ddp(broadcast, average, steps):
    """In each rank: the hand-written run, then DDP's on the same shards."""
    from effitrain_helpers.training.ddp_by_hand import train_by_hand, train_with_ddp

    return train_by_hand(broadcast, average, steps), train_with_ddp(steps)


def _accumulated_and_ddp(train, steps, k):
    from effitrain_helpers.training.ddp_by_hand import train_accumulated_by_hand, train_with_ddp

    return train_accumulated_by_hand(train, steps, k), train_with_ddp(steps, k)


def _run(worker, fn, *args, processes: int = PROCESSES) -> tuple[list, list]:
    """The learner's ``fn`` in ``processes`` processes: (each rank's record, each rank's DDP weights)."""
    try:
        ranks = run_learner_in_processes(worker, fn, *args, processes=processes, timeout=TIMEOUT)
    except TimeoutError as err:
        waiting = str(err).split("still running: ranks ", 1)[-1].split(")", 1)[0]
        raise Incorrect(tr("the {processes} processes were still waiting after {timeout} s (ranks {waiting}): a "
                           "collective that not every rank called, or called with a different src/dst, waits "
                           "forever. Every rank must make the same calls in the same order.",
                           processes=processes, timeout=TIMEOUT, waiting=waiting)) from None
    return [r[0] for r in ranks], [r[1] for r in ranks]


def _gap(a, b) -> float:
    return float((a - b).abs().max())


def _parameter_names(indices) -> list[str]:
    """The names of the parameters of ``sync_model`` that hold the flat positions ``indices``."""
    from effitrain_helpers.training.ddp_by_hand import sync_model

    names, start = [], 0
    for name, p in sync_model(0).named_parameters():
        if any(start <= i < start + p.numel() for i in indices):
            names.append(name)
        start += p.numel()
    return names


def _close(a, b, tol: float = 1e-5) -> bool:
    return _gap(a, b) <= tol * max(1.0, float(b.abs().max()))


def _compare_with_ddp(records, ddp, what: str) -> None:
    """Final weights of every rank within :data:`TOLERANCE` of DDP's, or Incorrect naming the gap."""
    gaps = [_gap(r.final, w) for r, w in zip(records, ddp)]
    drift = _gap(records[0].final, records[-1].final)
    if drift > TOLERANCE:
        raise Incorrect(tr("after {steps} steps the replicas' weights drift apart (rank 0 and rank {last} differ "
                           "by {drift:.1e}): {what}", steps=STEPS, last=len(records) - 1, drift=drift,
                           what=tr(what)))
    if max(gaps) > TOLERANCE:
        raise Incorrect(tr("after {steps} steps your weights differ from DistributedDataParallel's by {gap:.1e} "
                           "(allowed: {tol:g}): {what}", steps=STEPS, gap=max(gaps), tol=TOLERANCE,
                           what=tr(what)))


# ---------------------------------------------------------------- q1: broadcast_parameters
def _check_broadcast(broadcast_parameters) -> None:
    from effitrain_helpers.training.ddp_by_hand import flat_weights, sync_model

    records, ddp = _run(_by_hand_and_ddp, broadcast_parameters, _reference_average, STEPS)
    own = [flat_weights(sync_model(r.rank)) for r in records]
    starts = [r.start for r in records]
    sent = sum(records[0].start_calls.values())
    if all(_close(s, o) for s, o in zip(starts, own)):
        if not sent:
            raise Incorrect(tr("the ranks differ at step 0: nothing was sent, so each rank kept its own random "
                               "weights. Broadcast every parameter from rank 0."))
        raise Incorrect(tr("you made {calls} collective call(s), yet every rank still holds its own weights: a "
                           "collective writes into the tensor you pass it, so pass the parameter itself (not a "
                           "copy such as p.clone() or p.detach().clone()).", calls=sent))
    agree = all(_close(s, starts[0]) for s in starts)
    if agree and _close(starts[0], sum(own)):
        raise Incorrect(tr("the ranks agree, but on the SUM of their weights: all_reduce adds the ranks' "
                           "tensors; broadcast copies one rank's."))
    if agree and _close(starts[0], sum(own) / len(own)):
        raise Incorrect(tr("the ranks agree, but on the average of their weights: every rank must start from "
                           "rank 0's weights (a broadcast), as DistributedDataParallel does."))
    source = next((r for r, o in enumerate(own) if agree and _close(starts[0], o)), None)
    if source not in (None, 0):
        raise Incorrect(tr("the ranks agree on rank {source}'s weights, not rank 0's: broadcast from src=0.",
                           source=source))
    if not agree:
        differ = [i for i in range(len(starts[0])) if abs(float(starts[-1][i] - starts[0][i])) > 1e-6]
        raise Incorrect(tr("the ranks differ at step 0 in {names}: broadcast every tensor of "
                           "model.parameters(), not only some.", names=", ".join(_parameter_names(differ))))
    _compare_with_ddp(records, ddp, "the start was right; does your function change anything else?")


# ---------------------------------------------------------------- q2: average_gradients
def _check_average(average_gradients) -> None:
    for processes in AVERAGE_WORLDS:
        _check_average_in(average_gradients, processes)


def _check_average_in(average_gradients, processes: int) -> None:
    records, ddp = _run(_by_hand_and_ddp, _reference_broadcast, average_gradients, STEPS, processes=processes)
    world = len(records)
    local = [r.local_grads for r in records]
    synced = [r.synced_grads for r in records]
    mean = sum(local) / world
    calls = {name: n - records[0].start_calls.get(name, 0) for name, n in records[0].calls.items()}
    if all(_close(s, g) for s, g in zip(synced, local)):
        if not sum(calls.values()):
            raise Incorrect(tr("no gradient left its rank, so each replica trained on its own shard and the "
                               "weights drift apart: all-reduce each parameter's gradient."))
        raise Incorrect(tr("your {calls} collective call(s) left the gradients as they were: all-reduce p.grad "
                           "itself, in place (not p, and not a copy).", calls=sum(calls.values())))
    if all(_close(s, g / world) for s, g in zip(synced, local)):
        raise Incorrect(tr("each rank divided its own gradient by the world size but never exchanged it: "
                           "all-reduce first, then divide."))
    if all(_close(s, mean * world) for s in synced):
        raise Incorrect(tr("the gradients are {n} times too large: all_reduce SUMS the {n} ranks' gradients; "
                           "divide by the world size to get their average.", n=world))
    divisor = _divisor(synced[0], mean * world)
    if divisor not in (None, world) and all(_close(s, mean * world / divisor) for s in synced):
        raise Incorrect(tr("in {n} processes the summed gradients were divided by {divisor:g}, not by {n}: divide "
                           "by the number of ranks this run has, dist.get_world_size(), never by a number "
                           "written in.", n=world, divisor=divisor))
    off = [r for r, s in enumerate(synced) if not _close(s, mean)]
    if off and len(off) < world:
        via = (tr(" dist.reduce leaves the result on its dst rank only; all_reduce gives it to every rank.")
               if calls.get("reduce") else "")
        raise Incorrect(tr("rank(s) {ranks} did not get the averaged gradients while the others did, so the "
                           "weights drift apart.{via}", ranks=off, via=via))
    wrong = [i for i in range(len(mean)) if abs(float(synced[0][i] - mean[i])) > 1e-5 * max(1.0, abs(float(mean[i])))]
    if wrong:
        raise Incorrect(tr("the gradients of {names} are not the average over the ranks: average every "
                           "parameter's gradient.", names=", ".join(_parameter_names(wrong))))
    _compare_with_ddp(records, ddp, "the first step's gradients were right; are later steps synchronised too?")


def _divisor(got, total) -> float | None:
    """The whole number ``d`` with ``got == total / d`` (a learner's literal divisor), else None."""
    big = int(total.abs().argmax())
    if float(got[big]) == 0:
        return None
    ratio = float(total[big] / got[big])
    return round(ratio) if round(ratio) > 0 and abs(ratio - round(ratio)) < 1e-4 else None


# ---------------------------------------------------------------- q3: accumulation, one sync per k
def _check_accumulated(train_accumulated) -> None:
    records, ddp = _run(_accumulated_and_ddp, train_accumulated, STEPS - 1, K)
    steps, first = STEPS - 1, records[0]
    if first.optimizer_steps == steps * K:
        raise Incorrect(tr("the optimizer stepped at every micro-batch ({n} steps): accumulate k = {k} "
                           "micro-batches, then step once.", n=first.optimizer_steps, k=K))
    if first.optimizer_steps != steps:
        raise Incorrect(tr("the optimizer stepped {n} times for {micro} micro-batches and k = {k}; expected "
                           "{steps}.", n=first.optimizer_steps, micro=steps * K, k=K, steps=steps))
    sent, once = first.bytes_per_step[0], first.parameter_bytes * steps
    if sent == 0:
        raise Incorrect(tr("nothing was exchanged: each replica stepped on its own gradients and the weights "
                           "drift apart; synchronise the gradients before each optimizer step."))
    if sent == K * once:
        raise Incorrect(tr("you synchronised at every micro-batch: {sent} bytes for {steps} steps, k = {k} times "
                           "what no_sync needs. Synchronise once per k micro-batches, just before the step.",
                           sent=sent, steps=steps, k=K))
    if sent != once:
        raise Incorrect(tr("{sent} bytes were exchanged for {steps} steps; one synchronisation per step is "
                           "{once} bytes (every gradient once).", sent=sent, steps=steps, once=once))
    drift = _gap(records[0].final, records[-1].final)
    gap = max(_gap(r.final, w) for r, w in zip(records, ddp))
    if drift <= TOLERANCE and gap > TOLERANCE:
        if _close(records[0].final, _accumulated(steps, loss_scale=1.0, last_only=False), 1e-5):
            raise Incorrect(tr("the step was k = {k} times too large: divide each micro-batch's loss by k, so "
                               "the k gradients add up to their average.", k=K))
        if _close(records[0].final, _accumulated(steps, loss_scale=1 / K, last_only=True), 1e-5):
            raise Incorrect(tr("only the last micro-batch counted: zero the gradients after the optimizer step, "
                               "not at each micro-batch (backward adds into .grad)."))
    _compare_with_ddp(records, ddp, "compare your loop with DDP's: no_sync on k - 1 micro-batches, loss / k.")


def _accumulated(steps: int, loss_scale: float, last_only: bool):
    """The weights a known slip gives, rebuilt in this process on the same shards: each loss times
    ``loss_scale`` (1: not divided by k), and only the last micro-batch's gradient kept when ``last_only``."""
    import torch

    from effitrain_helpers.training.ddp_by_hand import LR, flat_weights, loss_of, shard, sync_model

    model = sync_model(0)
    params = list(model.parameters())
    for step in range(steps):
        micro = [K - 1] if last_only else range(K)
        grads = [torch.autograd.grad(sum(loss_of(model, *shard(r, step, i)) * loss_scale for i in micro), params)
                 for r in range(PROCESSES)]
        with torch.no_grad():
            for p, *g in zip(params, *grads):
                p -= LR * sum(g) / PROCESSES
    return flat_weights(model)


q1 = Exercise(
    "6.2 q1: every rank starts from rank 0's weights",
    _check_broadcast,
    usage="q1.check(broadcast_parameters)",
    api=True,
    checked="checked: in 2 processes started from different seeds, every rank held rank 0's weights before step 1.",
    hints=["Each rank built its model from its own seed. Before the first step, copy one rank's values into "
           "every other rank's parameters, in place, so that all replicas start equal.",
           "torch.distributed.broadcast(tensor, src=...) overwrites `tensor` on every rank with the source "
           "rank's values (PyTorch docs: 'Distributed communication package', collective functions). It writes "
           "into the very tensor you pass, so pass the parameters themselves (or their .data), never copies. A "
           "parameter that requires grad can be passed as it is, with no torch.no_grad(): autograd does not "
           "record what a collective writes.",
           "One broadcast per tensor of model.parameters(), every rank making the same calls in the same order, "
           "each from the rank whose weights everyone keeps. DistributedDataParallel does exactly this when it "
           "is built: read the call to _sync_module_states in DistributedDataParallel.__init__ "
           "(torch/nn/parallel/distributed.py)."],
    solution_code=("def broadcast_parameters(model):\n    for p in model.parameters():\n"
                   "        dist.broadcast(p.data, src=0)\n\nq1.check(broadcast_parameters)"),
)
q2 = Exercise(
    "6.2 q2: average the gradients after backward",
    _check_average,
    usage="q2.check(average_gradients)",
    api=True,
    checked=("checked: in 2 and in 3 processes on their own shards, your gradients trained DDP's weights "
             "(within 1e-6)."),
    hints=["After loss.backward() each rank holds the gradient of its own shard. Data parallelism replaces it, "
           "on every rank, by the mean over the ranks, so that every replica takes the same step.",
           "torch.distributed.all_reduce(tensor) sums `tensor` over the ranks, in place, and leaves the sum on "
           "every rank (PyTorch docs: 'Distributed communication package'); dist.get_world_size() is the number "
           "of ranks in this run, whatever it is.",
           "For each parameter, hint 2's collective on its gradient itself (every rank's gradient summed into "
           "this rank's, in place), then that sum turned into the mean: divide by the number of ranks this run "
           "has, asked from torch.distributed, never written in (the check runs in 2 and then in 3 processes). "
           "DDP's default comm hook does it per bucket, dividing first: _allreduce_fut in "
           "torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py."],
    solution_code=("def average_gradients(model):\n    for p in model.parameters():\n        dist.all_reduce(p.grad)\n"
                   "        p.grad /= dist.get_world_size()\n\nq2.check(average_gradients)"),
)
q3 = Exercise(
    "6.2 q3: gradient accumulation by hand, one sync per k micro-batches",
    _check_accumulated,
    usage="q3.check(train_accumulated)",
    api=True,
    checked=("checked: in 2 processes, one all-reduce per parameter every k micro-batches, and the weights of "
             "DDP with no_sync (within 1e-6)."),
    hints=["Backward adds into .grad, so k backward passes accumulate the gradients of k micro-batches on each "
           "rank with no communication at all. Only the sum needs averaging over the ranks, once, just before "
           "the optimizer step: that is what DDP's no_sync() arranges.",
           "Scale each micro-batch's loss so the k gradients add up to their mean; after the k-th backward, "
           "call your average_gradients, then the optimizer's step and zero_grad methods. Python's enumerate() "
           "gives each micro-batch's index.",
           "Number the micro-batches as you loop over them. Each loss is divided by k before its backward; "
           "after the micro-batch that closes a group of k (its position, counted from 1, is a multiple of k), "
           "your q2 function runs once, then the optimizer steps and the gradients are zeroed. Nothing else "
           "communicates: what DDP's no_sync() arranges (its docstring in torch/nn/parallel/distributed.py)."],
    solution_code=(
        "def train_accumulated(model, optimizer, micro_batches, k):\n"
        "    for i, (inputs, targets) in enumerate(micro_batches):\n"
        "        (loss_of(model, inputs, targets) / k).backward()\n"
        "        if (i + 1) % k == 0:  # the k-th micro-batch: one sync, one step\n"
        "            average_gradients(model)\n            optimizer.step()\n            optimizer.zero_grad()\n"
        "\nq3.check(train_accumulated)"
    ),
)


# ---------------------------------------------------------------- q4: the overlapped, bucketed sync
SYNC_WORLDS = (2, 3)  # q4 runs in 2, then in 3 processes
SYNC_STEPS, SYNC_LR = 3, 0.1  # backward passes (each followed by wait() and an SGD step), learning rate
SYNC_WIDTH, SYNC_VOCAB = 8, 12
SYNC_BUCKET_BYTES = (SYNC_WIDTH * SYNC_WIDTH + SYNC_WIDTH) * 4  # one branch (weight and bias) per bucket


def _sync_model(unused: bool = False):
    """q4's model: an embedding tied to the output head, a frozen layer, then two branches of one shape whose
    outputs are added (on other inputs and with other weights, so that no two gradients are equal). ``forward(tokens, swap)`` computes the branches in the other order when ``swap`` (so their
    gradients arrive in the other order); with ``unused`` the right branch is never used (it gets no gradient).
    Its buckets, last layer first: the right branch, the left branch, the tied embedding."""
    import torch

    class SyncModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(SYNC_VOCAB, SYNC_WIDTH)
            self.frozen = torch.nn.Linear(SYNC_WIDTH, SYNC_WIDTH).requires_grad_(False)
            self.left = torch.nn.Linear(SYNC_WIDTH, SYNC_WIDTH)
            self.right = torch.nn.Linear(SYNC_WIDTH, SYNC_WIDTH)
            self.head = torch.nn.Linear(SYNC_WIDTH, SYNC_VOCAB, bias=False)
            self.head.weight = self.embed.weight  # tied: one parameter, one gradient

        def forward(self, tokens, swap=False):
            hidden = self.frozen(self.embed(tokens))
            if unused:
                mixed = self.left(hidden)
            elif swap:  # the right branch computed first: its gradients arrive last
                right = self.right(torch.tanh(hidden))
                mixed = self.left(hidden) + 0.7 * right
            else:
                left = self.left(hidden)
                mixed = left + 0.7 * self.right(torch.tanh(hidden))
            return self.head(torch.tanh(mixed))

    torch.manual_seed(0)
    return SyncModel()


def _sync_loss(model, rank: int, step: int):
    """Rank ``rank``'s loss at ``step`` (odd ranks compute the branches in the other order)."""
    import torch

    tokens = torch.randint(0, SYNC_VOCAB, (4, 3), generator=torch.Generator().manual_seed(100 * rank + step))
    logits = model(tokens, swap=rank % 2 == 1)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, SYNC_VOCAB), tokens.reshape(-1))


class _Launches:
    """While active, every ``dist.all_reduce`` this rank calls is recorded: the step, whether backward was
    running, ``async_op``, and which bucket it carried (its values against the gradients as they arrived,
    snapshot by hooks registered before the learner's); the work handle an asynchronous call returns notes a
    ``wait()`` made during backward."""

    def __init__(self, model, buckets):
        self.buckets, self.local, self.calls = buckets, {}, []
        self.step, self.in_backward, self.waits_in_backward = 0, False, 0
        for bucket in buckets:
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p: self.local.__setitem__(id(p), p.grad.detach().clone()))

    def __enter__(self):
        import inspect

        import torch.distributed as dist

        self.original = dist.all_reduce
        signature = inspect.signature(self.original)

        def all_reduce(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            asynchronous = bool(bound.get("async_op", False))
            call = {"step": self.step, "backward": self.in_backward, "async": asynchronous,
                    "bucket": self._bucket_of(bound["tensor"]), "waited": False}
            self.calls.append(call)
            work = self.original(*args, **kwargs)
            return _Work(work, self, call) if asynchronous and work is not None else work

        dist.all_reduce = all_reduce
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist

        dist.all_reduce = self.original

    def _bucket_of(self, tensor) -> int | None:
        """The bucket whose gradients (or one of whose gradients) ``tensor`` holds, in any order, as they are or
        already divided by the world size; None when it matches none."""
        import torch
        import torch.distributed as dist

        values = tensor.detach().reshape(-1).sort().values
        world = dist.get_world_size()
        for b, bucket in enumerate(self.buckets):
            grads = [self.local.get(id(p)) for p in bucket]
            candidates = [torch.cat([g.reshape(-1) for g in grads])] if all(g is not None for g in grads) else []
            candidates += [g.reshape(-1) for g in grads if g is not None]
            for flat in candidates:
                if flat.numel() == values.numel():
                    want = flat.sort().values
                    if torch.allclose(values, want, atol=1e-7) or torch.allclose(values * world, want, atol=1e-7):
                        return b
        return None


class _Work:
    """An asynchronous all-reduce's work handle, noting that it was waited for (``wait()``, or its future
    taken), and a ``wait()`` made while backward runs."""

    def __init__(self, work, launches: _Launches, call: dict):
        self._work, self._launches, self._call = work, launches, call

    def wait(self, *args, **kwargs):
        self._call["waited"] = True
        if self._launches.in_backward:
            self._launches.waits_in_backward += 1
        return self._work.wait(*args, **kwargs)

    def get_future(self):
        self._call["waited"] = True
        return self._work.get_future()

    def __getattr__(self, name):
        return getattr(self._work, name)


def _q4_run(cls) -> dict:
    """In each rank: q4's model with the learner's ``cls(model, SYNC_BUCKET_BYTES)``, ``SYNC_STEPS`` backward
    passes on this rank's tokens, each followed by ``wait()`` and an SGD step; after each ``wait()`` the
    gradients against their average over the ranks (recomputed here, with no communication, from every rank's
    tokens on a copy that follows the right steps), and the all-reduces recorded. Then a model whose right
    branch gets no gradient: does ``wait()`` raise?"""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.engines.gradient_sync import gradient_buckets

    rank, world = dist.get_rank(), dist.get_world_size()
    model, reference = _sync_model(), _sync_model()
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    params = [p for p in model.parameters() if p.requires_grad]
    buckets = gradient_buckets(model.parameters(), SYNC_BUCKET_BYTES)
    bucket_of = {id(p): b for b, bucket in enumerate(buckets) for p in bucket}
    out = {"names": names, "buckets": [bucket_of[id(p)] for p in params], "steps": [], "error": None}
    launches = _Launches(model, buckets)
    try:
        sync = cls(model, SYNC_BUCKET_BYTES)
    except Exception as err:  # noqa: BLE001 - named for the learner below
        out["error"] = ("init", f"{type(err).__name__}: {err}")
        return out
    optimizer = torch.optim.SGD(params, lr=SYNC_LR)
    with launches:
        for step in range(SYNC_STEPS):
            launches.step, launches.in_backward = step, True
            _sync_loss(model, rank, step).backward()
            launches.in_backward = False
            try:
                sync.wait()
            except Exception as err:  # noqa: BLE001
                out["error"] = ("wait", f"{type(err).__name__}: {err}", step)
                break
            want = _average_gradients(reference, step, world)
            out["steps"].append({"got": [None if p.grad is None else p.grad.detach().clone() for p in params],
                                 "want": want})
            launches.local = {}
            optimizer.step()
            optimizer.zero_grad()
            with torch.no_grad():
                for p, g in zip((p for p in reference.parameters() if p.requires_grad), want):
                    p -= SYNC_LR * g
    out["calls"] = launches.calls
    out["waits_in_backward"] = launches.waits_in_backward
    out["unused_raised"] = _unused_raises(cls) if out["error"] is None else None
    return out


def _average_gradients(reference, step: int, world: int) -> list:
    """The average over the ``world`` ranks of their gradients at ``step`` on ``reference`` (computed here)."""
    import torch

    params = [p for p in reference.parameters() if p.requires_grad]
    grads = [torch.autograd.grad(_sync_loss(reference, r, step), params) for r in range(world)]
    return [sum(g) / world for g in zip(*grads)]


def _unused_raises(cls) -> bool | str:
    """Whether ``wait()`` raises after a backward in which the right branch got no gradient (its bucket, the
    first, is never launched); a message when building the class raised."""
    import torch.distributed as dist

    model = _sync_model(unused=True)
    try:
        sync = cls(model, SYNC_BUCKET_BYTES)
    except Exception as err:  # noqa: BLE001
        return f"{type(err).__name__}: {err}"
    _sync_loss(model, dist.get_rank(), 0).backward()
    try:
        sync.wait()
    except Exception:  # noqa: BLE001 - any error: the learner's own words
        return True
    return False


def _q4_runs(cls, *more) -> list[dict]:
    """In each rank: :func:`_q4_run` for each of the classes ``cls, *more``, one after the other."""
    return [_q4_run(c) for c in (cls, *more)]


def judge_overlapped_syncs(classes: list) -> list[Incorrect | None]:
    """q4's verdict on each of ``classes``: None when right, else the :class:`Incorrect` saying why not. All are
    judged in one launch per world size (a class refused in 2 processes is not run in 3): q4's check judges one
    class so; the tests judge many at once."""
    verdicts: list[Incorrect | None] = [None] * len(classes)
    for world in SYNC_WORLDS:
        todo = [k for k, v in enumerate(verdicts) if v is None]
        if not todo:
            break
        first, *more = [classes[k] for k in todo]
        try:
            ranks = run_learner_in_processes(_q4_runs, first, *more, processes=world, timeout=TIMEOUT * len(todo))
        except TimeoutError as err:
            waiting = str(err).split("still running: ranks ", 1)[-1].split(")", 1)[0]
            raise Incorrect(tr("in {world} processes nothing came back within {timeout} s (ranks {waiting} still "
                               "waiting): a rank waits for an all-reduce that another rank never launched. Every "
                               "rank must launch every bucket, once per backward, in the same order.",
                               world=world, timeout=TIMEOUT * len(todo), waiting=waiting)) from None
        for j, k in enumerate(todo):
            try:
                _judge_overlapped([r[j] for r in ranks], world)
            except Incorrect as err:
                verdicts[k] = err
    return verdicts


def _check_overlapped(cls) -> None:
    from effitrain_helpers.engines.gradient_sync import OverlappedSync

    if not isinstance(cls, type):
        raise Incorrect(tr("pass your class itself (OverlappedSync, not OverlappedSync(...)); you gave {fn!r}.",
                           fn=cls))
    if issubclass(cls, OverlappedSync):
        raise Incorrect(tr("your class is the lesson's own (gradient_sync.OverlappedSync): write the hooks, the "
                           "launches and wait() yourself (the exercise is what that class does)."))
    verdict = judge_overlapped_syncs([cls])[0]
    if verdict is not None:
        raise verdict


def _judge_overlapped(ranks: list[dict], world: int) -> None:
    first = ranks[0]
    error = next((r["error"] for r in ranks if r["error"]), None)
    if error and error[0] == "init":
        if "require" in error[1] and "grad" in error[1]:
            raise Incorrect(tr("building your class raised {error}: a frozen parameter (requires_grad=False) "
                               "gets no gradient and takes no hook. Hook only the parameters of "
                               "gradient_buckets(model.parameters(), bucket_bytes), which leaves frozen ones out.",
                               error=error[1]))
        raise Incorrect(tr("building your class on a model with a frozen layer and a tied weight raised {error}.",
                           error=error[1]))
    if any(r["waits_in_backward"] for r in ranks):
        raise Incorrect(tr("a work.wait() ran during backward: backward then stops until that bucket is summed, "
                           "and nothing overlaps. Wait only in wait(), after loss.backward()."))
    steps = len(first["steps"])
    for step in range(SYNC_STEPS):
        calls = [[c for c in r["calls"] if c["step"] == step] for r in ranks]
        _judge_launches(calls, step)
        if step >= steps:
            _never_launched(first, {c["bucket"] for c in calls[0]}, step, world)
            raise Incorrect(tr("in {world} processes wait() raised {error} after backward {step}, although every "
                               "parameter got its gradient.", world=world, error=error[1], step=step + 1))
        _judge_step(ranks, calls, step, world)
    verdicts = [r["unused_raised"] for r in ranks]
    built = next((v for v in verdicts if isinstance(v, str)), None)
    if built:
        raise Incorrect(tr("building your class on a model whose right branch is unused raised {error}.",
                           error=built))
    if not all(verdicts):
        raise Incorrect(tr("a parameter got no gradient (a branch unused in forward), so its bucket was never "
                           "launched, yet wait() returned: the ranks would step with gradients that were never "
                           "averaged and drift apart. Raise an error in wait() when a bucket was not launched, "
                           "as DDP raises 'Expected to have finished reduction'."))


def _judge_launches(calls: list[list[dict]], step: int) -> None:
    """What each rank's all-reduces of backward ``step`` (0-based) show: overlap, and one order on every rank."""
    during = [c for c in calls[0] if c["backward"]]
    if step == 0 and not during:
        if calls[0]:
            raise Incorrect(tr("no all-reduce was launched during backward: they all started in wait(), after "
                               "backward, so nothing overlaps. Launch each bucket from the hooks, as soon as it "
                               "is complete."))
        raise Incorrect(tr("nothing was all-reduced in backward {step}: each rank kept its own gradients. Hook "
                           "the parameters of each bucket and all-reduce the bucket once it is complete.",
                           step=step + 1))
    if any(c["backward"] and not c["async"] for c in calls[0]):
        raise Incorrect(tr("an all-reduce during backward without async_op=True: each hook then waits until its "
                           "bucket is summed, and backward stops meanwhile (no overlap). Launch with "
                           "async_op=True, keep the work handle, and wait in wait()."))
    orders = [[c["bucket"] for c in rank_calls] for rank_calls in calls]
    if any(order != orders[0] for order in orders):
        shown = "; ".join(tr("rank {rank}: {order}", rank=r, order=", ".join("?" if b is None else str(b) for b in o))
                          for r, o in enumerate(orders))
        raise Incorrect(tr("in backward {step} the ranks launched the buckets in different orders ({orders}): each "
                           "launched a bucket as soon as its gradients arrived, and the odd ranks here compute the "
                           "two branches in the other order. All-reduces are matched by the order each rank "
                           "calls them, so different buckets were added together. Launch bucket b only after "
                           "buckets 0 to b - 1, on every rank.", step=step + 1, orders=shown))
    unwaited = sum(c["async"] and not c["waited"] for c in calls[0])
    if unwaited:
        raise Incorrect(tr("in backward {step}, {n} of the {m} all-reduces launched with async_op=True were never "
                           "waited for: their result may not be in the tensor yet when it is read. In wait(), "
                           "call wait() on every work handle before using its tensor.", step=step + 1,
                           n=unwaited, m=sum(c["async"] for c in calls[0])))
    if step > 0 and not calls[0]:
        raise Incorrect(tr("backward 1 was synchronised, but nothing was launched in backward {step}: start "
                           "each bucket's count again once it is launched (or in wait()), ready for the next "
                           "backward.", step=step + 1))


def _never_launched(first: dict, launched: set, step: int, world: int) -> None:
    """Incorrect naming the first bucket missing from ``launched`` (the buckets seen all-reduced in ``step``)."""
    missing = [b for b in range(max(first["buckets"]) + 1) if b not in launched]
    if missing and None not in launched:
        names = [name for name, b in zip(first["names"], first["buckets"]) if b == missing[0]]
        raise Incorrect(tr("in {world} processes, backward {step}: bucket {b} ({names}) was never all-reduced, "
                           "although all its gradients had arrived. Every bucket must be launched once it is "
                           "complete, the last one included.", world=world, step=step + 1, b=missing[0],
                           names=", ".join(names)))


def _judge_step(ranks: list[dict], calls: list[list[dict]], step: int, world: int) -> None:
    """The gradients each rank holds after ``wait()`` in ``step``, against the ranks' average."""
    import torch

    first, run = ranks[0], [r["steps"][step] for r in ranks]
    got, want = run[0]["got"], run[0]["want"]
    _never_launched(first, {c["bucket"] for c in calls[0]}, step, world)
    missing = [first["names"][i] for i, g in enumerate(got) if g is None]
    if missing:
        raise Incorrect(tr("after wait() {names} had no gradient: write the averaged values back into each "
                           "parameter's .grad.", names=", ".join(missing)))
    if all(torch.allclose(g, w * world, rtol=1e-5, atol=1e-7) for g, w in zip(got, want)):
        raise Incorrect(tr("the gradients are {n} times too large: all_reduce SUMS the {n} ranks' gradients; "
                           "divide by the world size to get their average.", n=world))
    for r, rank_run in enumerate(run):
        wrong = [i for i, (g, w) in enumerate(zip(rank_run["got"], rank_run["want"]))
                 if not torch.allclose(g, w, rtol=1e-5, atol=1e-7)]
        if wrong:
            gap = max(float((rank_run["got"][i] - rank_run["want"][i]).abs().max()) for i in wrong)
            raise Incorrect(tr("in {world} processes, after wait() in step {step}, rank {rank}'s gradients of "
                               "{names} are not the average over the ranks (largest difference {gap:.1e}).",
                               world=world, step=step + 1, rank=r, gap=gap,
                               names=", ".join(first["names"][i] for i in wrong)))


q4 = Exercise(
    "6.2 q4: overlap the sync with backward, bucket by bucket",
    _check_overlapped,
    usage="q4.check(OverlappedSync)",
    api=True,
    checked=("checked in 2 and 3 processes, on a model with a frozen layer, a tied weight and two branches "
             "whose gradients arrive in another order on odd ranks: every bucket launched during backward, "
             "asynchronously, in one order on every rank, the ranks' average in every gradient after wait() for "
             "3 steps, and an error from wait() when a parameter got no gradient."),
    hints=["Backward produces the last layers' gradients first. Count the gradients of each bucket as they "
           "arrive; once a bucket is complete, start its all-reduce without waiting for it, and let backward go "
           "on. Every rank must start the buckets in the same order, whatever order its gradients come in; "
           "only wait() waits, after backward.",
           "Tensor.register_post_accumulate_grad_hook(hook) calls hook(p) once p.grad holds this backward's "
           "gradient; dist.all_reduce(tensor, async_op=True) returns a work handle at once, whose wait() "
           "returns once tensor holds the sum (docs: torch.distributed). torch.cat flattens a bucket's "
           "gradients into one tensor; Tensor.split cuts it back.",
           "Keep, for one backward, how many gradients of each bucket have arrived and which buckets were "
           "launched, with their tensors and work handles. The hook counts one more for its bucket, then "
           "launches every next bucket (in bucket order) that is now complete; wait() waits on each handle, "
           "writes each bucket's mean back into its parameters' .grad, starts the counts again and raises when "
           "a bucket was never launched. DDP's Reducer is built this way: mark_variable_ready, "
           "mark_bucket_ready and next_bucket_ in torch/include/torch/csrc/distributed/c10d/reducer.hpp."],
    solution_code=(
        "class OverlappedSync:\n"
        "    def __init__(self, model, bucket_bytes):\n"
        "        self.buckets = gradient_buckets(model.parameters(), bucket_bytes)  # last layer first\n"
        "        self.arrived, self.sent = [0] * len(self.buckets), []\n"
        "        for b, p in [(b, p) for b, bucket in enumerate(self.buckets) for p in bucket]:\n"
        "            p.register_post_accumulate_grad_hook(lambda p, b=b: self.arrive(b))\n"
        "    def arrive(self, b):  # during backward: launch the next buckets, in order, once complete\n"
        "        self.arrived[b] += 1\n"
        "        while (n := len(self.sent)) < len(self.buckets) and self.arrived[n] == len(self.buckets[n]):\n"
        "            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[n]])\n"
        "            self.sent.append((flat, dist.all_reduce(flat, async_op=True)))\n"
        "    def wait(self):  # after backward, before the optimizer step\n"
        "        for bucket, (flat, work) in zip(self.buckets, self.sent):\n"
        "            work.wait()\n"
        "            for p, g in zip(bucket, flat.split([p.numel() for p in bucket])):\n"
        "                p.grad.copy_(g.view_as(p) / dist.get_world_size())\n"
        "        sent, self.arrived, self.sent = len(self.sent), [0] * len(self.buckets), []\n"
        "        if sent < len(self.buckets):\n"
        "            raise RuntimeError(f\"bucket {sent} was never launched: a parameter got no gradient\")\n"
        "\n"
        "q4.check(OverlappedSync)"
    ),
)
