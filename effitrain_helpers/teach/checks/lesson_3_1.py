"""Exercises of lesson 3.1 (gradient accumulation)."""

from __future__ import annotations

from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows
from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

MICRO_BATCH, STEPS, PROCESSES = 4, 2, 2  # q2's workload: micro-batches of 4, 2 optimizer steps, 2 processes


def _run_by_hand(train_fn, k: int) -> dict:
    """In each process of the group: the learner's ``train_fn(ddp_model, optimizer, share, k)`` on a
    DistributedDataParallel model and this rank's share of the rows (its micro-batches of MICRO_BATCH, as
    Accelerate would hand them out), watched. Records, in micro-batches run so far, when DDP all-reduced the
    gradients (a comm hook that counts, then does DDP's own all-reduce) and when the optimizer stepped."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    model = tiny_model()
    forwards, syncs, steps = [], [], []
    model.register_forward_hook(lambda *_: forwards.append(1))
    ddp = DistributedDataParallel(model)

    def counting_hook(state, bucket):
        syncs.append(len(forwards))
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, counting_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    optimizer.register_step_post_hook(lambda *_: steps.append(len(forwards)))
    rows, rank = tiny_rows(PROCESSES * MICRO_BATCH * k * STEPS), dist.get_rank()
    share = [row for i, row in enumerate(rows) if (i // MICRO_BATCH) % PROCESSES == rank]
    train_fn(ddp, optimizer, share, k)
    return {"forwards": len(forwards), "syncs": syncs, "steps": steps,
            "weight": model.linear.weight.detach().cpu().clone()}


def _check_no_sync_by_hand(train_fn) -> None:
    k = 4
    ranks = run_learner_in_processes(_run_by_hand, train_fn, k, processes=PROCESSES)
    first, micro = ranks[0], STEPS * k
    if first["forwards"] != micro:
        raise Incorrect(tr("each process should run {micro} micro-batches of {micro_batch} (its share); yours ran "
                           "{count}: loop over DataLoader(dataset, batch_size={micro_batch}).", micro=micro,
                           micro_batch=MICRO_BATCH, count=first["forwards"]))
    if not first["syncs"]:
        drift = max(float((r["weight"] - first["weight"]).abs().max()) for r in ranks)
        raise Incorrect(tr("DDP never all-reduced the gradients, so the {processes} processes drifted apart "
                           "(their weights differ by {drift:.1e}): the k-th micro-batch's backward must run "
                           "outside model.no_sync().", processes=PROCESSES, drift=drift))
    if len(first["syncs"]) == micro:
        raise Incorrect(tr("DDP all-reduced at every one of the {micro} micro-batches, {k} times the "
                           "communication needed: run the forward and the backward of the first k-1 inside "
                           "model.no_sync() (DDP decides at the forward pass whether the next backward all-reduces).",
                           micro=micro, k=k))
    if first["syncs"] == [k * i + 1 for i in range(STEPS)]:
        raise Incorrect(tr("DDP all-reduced after micro-batches {syncs}: the first of every {k}, not the {k}-th. "
                           "enumerate counts from 0, so the k-th micro-batch is the one where (i + 1) is a multiple "
                           "of k.", syncs=first["syncs"], k=k))
    if first["syncs"] != [k * (i + 1) for i in range(STEPS)]:
        raise Incorrect(tr("DDP all-reduced after micro-batches {syncs}, not after every {k}-th only.",
                           syncs=first["syncs"], k=k))
    if not first["steps"]:
        raise Incorrect(tr("the weights never changed: call optimizer.step() after the k-th micro-batch."))
    if len(first["steps"]) == micro:
        raise Incorrect(tr("the optimizer stepped at every micro-batch: step (and zero_grad) only after the "
                           "k-th, once the gradients of all k are summed and all-reduced."))
    if first["steps"] != [k * (i + 1) for i in range(STEPS)]:
        raise Incorrect(tr("the optimizer stepped after micro-batches {steps}, not once every {k}.",
                           steps=first["steps"], k=k))
    tolerance = 1e-5
    gap = max(float((r["weight"] - _big_batch_weight(k)).abs().max()) for r in ranks)
    if gap <= tolerance:
        return
    if max(float((r["weight"] - _big_batch_weight(k, lr=0.1 * k)).abs().max()) for r in ranks) <= tolerance:
        raise Incorrect(tr("the weights moved as if the gradients were {k} times too large: divide each "
                           "micro-batch's loss by k before backward().", k=k))
    raise Incorrect(tr("the weights differ from {steps} steps on batches of {batch} by {gap:.1e} (tolerance "
                       "{tolerance:g}).", steps=STEPS, batch=PROCESSES * k * MICRO_BATCH, gap=gap,
                       tolerance=tolerance))


def _run_learner(train_fn, k: int) -> dict:
    """In each process of the group: the learner's ``train_fn(model, optimizer, dataset, k)``, watched. Records
    Accelerate's "synchronise now" flag at each forward pass, the all-reduces DDP really made (a counting comm
    hook on the DDP model ``accelerator.prepare`` builds) and the optimizer steps that really happened."""
    import torch
    from accelerate.state import GradientState
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    flags, steps, syncs = [], [], []
    model.register_forward_hook(lambda *_: flags.append(GradientState().sync_gradients))
    optimizer.register_step_post_hook(lambda *_: steps.append(len(flags)))

    def counting_hook(state, bucket):
        syncs.append(len(flags))
        return allreduce_hook(state, bucket)

    built = DistributedDataParallel.__init__

    def counted(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self.register_comm_hook(None, counting_hook)

    DistributedDataParallel.__init__ = counted
    try:
        train_fn(model, optimizer, tiny_rows(PROCESSES * MICRO_BATCH * k * STEPS), k)
    finally:
        DistributedDataParallel.__init__ = built
    return {"flags": flags, "steps": steps, "syncs": syncs, "weight": model.linear.weight.detach().cpu().clone()}


def _big_batch_weight(k: int, lr: float = 0.1):
    """The weights after STEPS plain SGD steps on batches of PROCESSES x k x MICRO_BATCH rows, in one process
    (q1's and q2's reference; ``lr`` k times larger stands for gradients k times too large)."""
    import torch

    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    rows = tiny_rows(PROCESSES * MICRO_BATCH * k * STEPS)
    size = PROCESSES * MICRO_BATCH * k
    for i in range(0, len(rows), size):
        batch = {key: torch.stack([r[key] for r in rows[i:i + size]]) for key in rows[0]}
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.linear.weight.detach()


def _check_accumulated_training(train_fn) -> None:
    import torch

    k = 4
    ranks = run_learner_in_processes(_run_learner, train_fn, k, processes=PROCESSES)
    first = ranks[0]
    micro = STEPS * k
    if len(first["flags"]) == PROCESSES * micro:
        raise Incorrect(tr("each process ran every micro-batch: pass the DataLoader to accelerator.prepare, so "
                           "that each process gets its own share of the data."))
    if len(first["flags"]) != micro:
        raise Incorrect(tr("each process should run {micro} micro-batches (its half of the data, in batches of "
                           "{micro_batch}); yours ran {count}: use DataLoader(dataset, "
                           "batch_size={micro_batch}).", micro=micro, micro_batch=MICRO_BATCH,
                           count=len(first['flags'])))
    if all(first["flags"]):
        raise Incorrect(tr("Accelerate synchronised at every micro-batch: create the Accelerator with "
                           "gradient_accumulation_steps=k and run each micro-batch inside "
                           "accelerator.accumulate(model)."))
    if first["flags"] != ([False] * (k - 1) + [True]) * STEPS:
        raise Incorrect(tr("the synchronisations came at micro-batches {synced}, not at every {k}-th: "
                           "gradient_accumulation_steps must be k.",
                           synced=[i + 1 for i, f in enumerate(first['flags']) if f], k=k))
    if first["syncs"] and first["syncs"] != [k * (i + 1) for i in range(STEPS)]:
        raise Incorrect(tr("Accelerate's flag said to synchronise at every {k}-th micro-batch, but DDP all-reduced "
                           "after micro-batches {syncs}: accelerator.accumulate keeps DDP from all-reducing only "
                           "for the models you give it; give it the prepared model.", k=k,
                           syncs=first["syncs"]))
    if not first["steps"]:
        raise Incorrect(tr("the weights never changed: call optimizer.step() inside the accumulate block "
                           "(Accelerate skips it until the k-th micro-batch)."))
    if first["steps"] != [k * (i + 1) for i in range(STEPS)]:
        raise Incorrect(tr("the optimizer stepped after micro-batches {steps}, not once every {k}.",
                           steps=first['steps'], k=k))
    want = _big_batch_weight(k)
    gap = max(float((r["weight"] - want).abs().max()) for r in ranks)
    if gap > 1e-5:
        hint = (tr(" The loss of each micro-batch must be divided by k: accelerator.backward(loss) does it.")
                if all(torch.allclose(r["weight"], ranks[0]["weight"]) for r in ranks) else "")
        raise Incorrect(tr("the weights differ from {steps} steps on batches of {batch} by {gap:.1e}.{hint}",
                           steps=STEPS, batch=PROCESSES * k * MICRO_BATCH, gap=gap, hint=hint))


def _check_fitting_micro_batch(answer, bytes_per_sample, budget) -> None:
    per, limit = as_number(bytes_per_sample), as_number(budget)
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        raise Incorrect(tr("answer with a pair: (micro_batch, accumulation_steps)."))
    micro, k = (as_number(a) for a in answer)
    fitting = [b for b in range(1, 65) if 64 % b == 0 and b * per <= limit]
    if not fitting:
        raise Incorrect(tr("not even one sample fits in {limit:.3g} bytes: pass the budget the exercise gives.",
                           limit=limit))
    if micro * per > limit:
        raise Incorrect(tr("a micro-batch of {micro:g} keeps about {mib:.1f} MiB of activations, more than the "
                           "{budget:.1f} MiB budget.", micro=micro, mib=micro * per / 2**20,
                           budget=limit / 2**20))
    if 64 % micro:
        raise Incorrect(tr("{micro:g} does not divide 64: k micro-batches must add up to the batch of 64 exactly.",
                           micro=micro))
    if micro != max(fitting):
        raise Incorrect(tr("{micro:g} fits, but a larger micro-batch that divides 64 fits too (bigger matrix "
                           "products are faster, and fewer accumulation steps).", micro=micro))
    if micro * k != 64:
        raise Incorrect(tr("{k:g} micro-batches of {micro:g} make {total:g} samples, not 64.", k=k, micro=micro,
                           total=micro * k))


q1 = Exercise(
    "3.1 q1: accumulation by hand with DDP's no_sync, in 2 processes",
    _check_no_sync_by_hand,
    usage="q1.check(train_by_hand)",
    api=True,
    checked=("checked in 2 real processes: DDP all-reduced and the optimizer stepped only at every k-th "
             "micro-batch, and the weights equal full-batch steps (within 1e-5)."),
    hints=["DDP all-reduces the gradients during every backward(), unless told not to: a context manager of "
           "the DDP model switches that off, around the forward and the backward of the micro-batches that "
           "only accumulate. The k-th backward runs "
           "outside it, so the summed gradients are averaged across the processes once, then the step.",
           "The context manager is a method of the DistributedDataParallel model (PyTorch docs: "
           "DistributedDataParallel, the context manager that disables gradient synchronisations). Number the "
           "micro-batches of DataLoader(dataset, batch_size=4) with a Python built-in, to know which is the "
           "k-th; the k summed gradients must average, not add up.",
           "Walk through the micro-batches with their numbers. Every micro-batch but the k-th runs its "
           "forward and backward (its loss divided by k) inside the context manager; the k-th runs them "
           "outside it, and only then does the optimizer step and the gradients get cleared."],
    solution_code=(
        "def train_by_hand(model, optimizer, dataset, k):\n"
        "    for i, batch in enumerate(DataLoader(dataset, batch_size=4)):\n"
        "        if (i + 1) % k:  # not the k-th: accumulate, no all-reduce\n"
        "            with model.no_sync():\n                (model(**batch).loss / k).backward()\n"
        "        else:  # the k-th: this backward all-reduces the summed gradients\n"
        "            (model(**batch).loss / k).backward()\n"
        "            optimizer.step()\n            optimizer.zero_grad()\n\nq1.check(train_by_hand)"
    ),
)
q2 = Exercise(
    "3.1 q2: gradient accumulation with Accelerate, in 2 processes",
    _check_accumulated_training,
    usage="q2.check(train_accumulated)",
    api=True,
    checked=("checked in 2 real processes: each ran its half of the micro-batches, synchronised and stepped "
             "every k-th, and reached the weights of full batches."),
    hints=["Accelerate needs to know k when it is created; each micro-batch then runs inside a block that tells "
           "it whether this is the k-th one (synchronise and step) or not. The data loader must be prepared too, "
           "so that each process gets its own share.",
           "Accelerator(gradient_accumulation_steps=...), accelerator.prepare(...) on the model, the optimizer "
           "and a DataLoader (from torch.utils.data), and accelerator.accumulate(...) as a `with` block around "
           "each micro-batch's forward, backward and step (Accelerate docs: 'Performing gradient accumulation').",
           "Create the Accelerator with k, prepare the model, the optimizer and a DataLoader of the dataset "
           "in batches of 4, then for each batch of the prepared loader run the forward, the backward through"
           " the accelerator, the step and zero_grad inside the accumulate block, given the prepared model."],
    solution_code=(
        "def train_accumulated(model, optimizer, dataset, k):\n"
        "    accelerator = Accelerator(gradient_accumulation_steps=k)\n"
        "    loader = DataLoader(dataset, batch_size=4)\n"
        "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "    for batch in loader:\n        with accelerator.accumulate(model):\n"
        "            loss = model(**batch).loss\n            accelerator.backward(loss)\n"
        "            optimizer.step()\n            optimizer.zero_grad()\n\nq2.check(train_accumulated)"
    ),
)
q3 = Exercise(
    "3.1 q3: the micro-batch that fits",
    _check_fitting_micro_batch,
    usage="q3.check((micro_batch, accumulation_steps), bytes_per_sample, budget)",
    hints=["Activations grow in proportion to the micro-batch: bytes_per_sample (measured above) per sample. "
           "Take the largest micro-batch that fits the budget and divides 64, then k makes up the rest.",
           "The micro-batches that divide the recipe's batch are its powers of two; one fits when b x "
           "bytes_per_sample <= budget. Python's max() over a generator picks the largest.",
           "Try every micro-batch size from 1 up to the recipe's batch; keep those that divide it exactly and"
           " whose activations (the size times bytes_per_sample) fit the budget. The largest one kept is the "
           "micro-batch; the recipe's batch divided by it is k."],
    solution_code=(
        "budget = 20 * bytes_per_sample\n"
        "micro_batch = max(b for b in range(1, 65) if 64 % b == 0 and b * bytes_per_sample <= budget)\n"
        "accumulation_steps = 64 // micro_batch\n"
        "q3.check((micro_batch, accumulation_steps), bytes_per_sample, budget)"
    ),
)
