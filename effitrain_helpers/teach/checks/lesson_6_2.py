"""Exercises of lesson 6.2 (data parallelism by hand), each judged in real processes against torch's DDP: 2 of
them, and q2 (whose answer divides by the world size) in 2 and then 3, so that a literal 2 fails.

Every checker runs the learner's function through :func:`~effitrain_helpers.teach.exercises.run_learner_in_processes`
(a time limit; a rank that raises is named) and names the bug it recognises from what each rank recorded
(:class:`~effitrain_helpers.training.ddp_by_hand.ReplicaRecord`): the weights at step 0, the gradients of
step 1 before and after the sync, the collectives called and their bytes, the optimizer steps. The learner's
function may come from a notebook or from a plain script: it travels to the workers by value.
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
           "rank's values (PyTorch docs: 'Distributed communication package', collective functions). A "
           "collective writes into the tensor you pass it, outside autograd: pass the parameters themselves "
           "(or their .data), never copies.",
           "for ____ in model.____():\n    ____  # one collective: which tensor, and from which rank?"],
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
           "for ____ in model.____():\n    ____  # every rank's gradient summed into this rank's, in place\n"
           "    ____  # the sum turned into the mean"],
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
           "for ____, (inputs, targets) in ____(micro_batches):\n    (____ / ____).backward()\n    if ____:\n        ...  # synchronise (your function), step, zero the gradients"],
    solution_code=(
        "def train_accumulated(model, optimizer, micro_batches, k):\n"
        "    for i, (inputs, targets) in enumerate(micro_batches):\n"
        "        (loss_of(model, inputs, targets) / k).backward()\n"
        "        if (i + 1) % k == 0:  # the k-th micro-batch: one sync, one step\n"
        "            average_gradients(model)\n            optimizer.step()\n            optimizer.zero_grad()\n"
        "\nq3.check(train_accumulated)"
    ),
)

