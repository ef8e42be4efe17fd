"""Exercises of lesson 3.2 (gradient checkpointing and local SGD)."""

from __future__ import annotations

import math

from effitrain_helpers.teach.checks.tiny import tiny_model, tiny_rows, watch_stale_gradients
from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, as_number, run_learner_in_processes

LOCAL_STEPS, STEPS, PROCESSES, BATCH = 2, 4, 2, 4  # q4's run: average every 2 steps, 4 steps, 2 processes


def _gradients(model) -> dict:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _same_gradients(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4) for k in a)


def _gradients_of(model, batch) -> dict:
    """The gradients one forward + backward on ``batch`` gives (left cleared in the model)."""
    model.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    grads = _gradients(model)
    model.zero_grad(set_to_none=True)
    return grads


def _check_model_checkpointing(turn_on) -> None:
    from effitrain_helpers.measure.saved_memory import saved_bytes
    from effitrain_helpers.training.workload import lesson_batches, lesson_model

    if not callable(turn_on):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=turn_on))
    model, batch = lesson_model(), lesson_batches(1, 4, 32)[0]
    plain, plain_grads = saved_bytes(model, batch).activation_bytes, _gradients_of(model, batch)
    turn_on(model)
    if not model.training:
        raise Incorrect(tr("your function switched the model to eval mode; checkpointing only matters in "
                           "training."))
    try:
        checkpointed = saved_bytes(model, batch).activation_bytes
    except AttributeError as err:
        if "_gradient_checkpointing_func" not in str(err):
            raise
        raise Incorrect(tr("the layers' gradient_checkpointing flag was set by hand: the forward then finds no "
                           "function to recompute with. The model's method sets the flag in each layer together "
                           "with that function: call it instead.")) from None
    if checkpointed >= plain:
        if getattr(model.config, "gradient_checkpointing", False):
            raise Incorrect(tr("model.config.gradient_checkpointing = True on a model already built changes "
                               "nothing: transformers reads that old flag only while it builds a model (then deletes "
                               "it). Call the model's method that switches checkpointing on."))
        if vars(model).get("gradient_checkpointing"):
            raise Incorrect(tr("model.gradient_checkpointing = True sets an attribute no layer reads: call the "
                               "model's method, which switches checkpointing on in each layer."))
        raise Incorrect(tr("the model still keeps every activation for backward: switch checkpointing on in the "
                           "model itself (its method, not a TrainingArguments flag)."))
    if not _same_gradients(plain_grads, _gradients_of(model, batch)):
        raise Incorrect(tr("the gradients changed: checkpointing must only recompute, never change the result."))


def _blocks(seed: int = 0, n: int = 4, width: int = 64):
    import torch

    torch.manual_seed(seed)
    return [torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
            for _ in range(n)]


def _needs_an_input_with_grad(forward, blocks, x) -> bool:
    """Whether ``forward(blocks, x)``, whose output had no gradient, gives one when x itself needs a gradient:
    what the reentrant checkpoint does (its output needs a gradient only if an input does), and what running the
    blocks under torch.no_grad() never does."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reentrant checkpoint's own warnings, already seen once
        out = forward(blocks, x.detach().clone().requires_grad_(True))
    return getattr(out, "requires_grad", False)


def _check_module_checkpointing(checkpointed_forward) -> None:
    import torch

    from effitrain_helpers.measure.saved_memory import SavedTensors

    if not callable(checkpointed_forward):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.",
                           fn=checkpointed_forward))
    blocks = _blocks()
    parameters = [p for b in blocks for p in b.parameters()]
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))

    def run(forward):
        for p in parameters:
            p.grad = None
        with SavedTensors(parameters) as saved:
            out = forward(blocks, x)
        if not isinstance(out, torch.Tensor):
            raise Incorrect(tr("return the output tensor of the last block; you returned {kind}.",
                               kind=type(out).__name__))
        if not out.requires_grad:
            if forward is not plain and _needs_an_input_with_grad(forward, blocks, x):
                raise Incorrect(tr("the output has no gradient: the reentrant checkpoint (use_reentrant=True, "
                                   "also what checkpoint does when use_reentrant is not passed) gives none when its "
                                   "input needs none, as x here: pass use_reentrant=False."))
            raise Incorrect(tr("the output has no gradient: do not run the blocks under torch.no_grad(); "
                               "checkpointing keeps the graph and recomputes inside it."))
        out.pow(2).mean().backward()
        return saved.activation_bytes, out.detach(), [torch.zeros_like(p) if p.grad is None else p.grad.clone()
                                                      for p in parameters]

    def plain(blocks, x):
        for block in blocks:
            x = block(x)
        return x

    plain_bytes, plain_out, plain_grads = run(plain)
    mine_bytes, mine_out, mine_grads = run(checkpointed_forward)
    if not torch.allclose(mine_out, plain_out, atol=1e-5):
        raise Incorrect(tr("the output differs from running the blocks one after the other: pass each block's "
                           "output on to the next block."))
    if not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(mine_grads, plain_grads)):
        raise Incorrect(tr("the gradients differ from the plain forward pass."))
    inputs_only = len(blocks) * x.numel() * x.element_size()
    if mine_bytes >= plain_bytes:
        raise Incorrect(tr("backward still keeps {mine_bytes} bytes, as without checkpointing: call "
                           "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) for each block.",
                           mine_bytes=mine_bytes))
    if mine_bytes > inputs_only:
        raise Incorrect(tr("{mine_bytes} bytes kept for backward, more than the {inputs_only} bytes of the "
                           "blocks' inputs: checkpoint every block.", mine_bytes=mine_bytes,
                           inputs_only=inputs_only))


def _check_layer_inputs(answer, config) -> None:
    for name in ("n_layers", "dim"):
        if not hasattr(config, name):
            raise Incorrect(tr("pass the model's config as the second argument (it needs .{name}).", name=name))
    got = as_number(answer)
    want = config.n_layers * 8 * 64 * config.dim * 4
    if math.isclose(got, want, rel_tol=1e-9):
        return
    if math.isclose(got, want / 4, rel_tol=1e-9):
        raise Incorrect(tr("that counts numbers, not bytes: a float32 takes 4 bytes."))
    if math.isclose(got, want / config.n_layers, rel_tol=1e-9):
        raise Incorrect(tr("that is one layer's input; the model has {n_layers} layers.", n_layers=config.n_layers))
    raise Incorrect(tr("{got:g} is not it: each layer keeps one tensor of batch x length x dim float32 numbers.",
                       got=got))


def _run_local_sgd(train_fn) -> dict:
    """In each process of the group: the learner's ``train_fn(model, optimizer, dataset, k)``, watched. After
    each step (and the averaging that follows it) records the bytes all-reduced so far and a fingerprint of
    the weights; the last record is taken when the function returns (after LocalSGD's closing average)."""
    import torch

    from effitrain_helpers.measure.communication import CommunicationCounter

    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    counter, records, rows = CommunicationCounter().watch(), [], []
    stale = watch_stale_gradients(model)

    def record():
        records.append((counter.bytes, model.linear.weight.detach().clone()))

    def before_forward(module, args, kwargs):  # the state the previous step left behind, and this batch's rows
        record()
        rows.append(len(kwargs["inputs"] if "inputs" in kwargs else args[0]))

    model.register_forward_pre_hook(before_forward, with_kwargs=True)
    try:
        train_fn(model, optimizer, tiny_rows(PROCESSES * BATCH * STEPS), LOCAL_STEPS)
    finally:
        counter.stop()
    record()
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    averages = [(b - a) / parameter_bytes for (a, _), (b, _) in zip(records, records[1:])]
    return {"forwards": len(records) - 1, "averages": averages, "weights": [w for _, w in records[1:]],
            "rows": rows, "stale": sum(stale[1:])}


def _check_local_sgd_loop(train_fn) -> None:
    import torch

    ranks = run_learner_in_processes(_run_local_sgd, train_fn, processes=PROCESSES)
    first = ranks[0]
    if first["forwards"] == PROCESSES * STEPS:
        raise Incorrect(tr("each process trained on every batch: pass the DataLoader to accelerator.prepare, so "
                           "that each process gets its own share."))
    if first["forwards"] != STEPS:
        raise Incorrect(tr("each process should take {steps} steps (its half of the data, batches of {batch}); "
                           "yours took {forwards}.", steps=STEPS, batch=BATCH, forwards=first['forwards']))
    if set(first["rows"]) != {BATCH}:
        raise Incorrect(tr("the steps took batches of {rows} rows; the exercise's batches are {batch}: "
                           "DataLoader(dataset, batch_size={batch}).", rows=sorted(set(first["rows"])), batch=BATCH))
    if first["stale"]:
        raise Incorrect(tr("{count} of {steps} backward passes began with the gradients of earlier batches still "
                           "in the parameters, so they add up from step to step: clear them once per optimizer "
                           "step (optimizer.zero_grad()).", count=first["stale"], steps=STEPS))
    agree = [all(torch.equal(r["weights"][s], first["weights"][s]) for r in ranks) for s in range(STEPS)]
    averages = [round(a) for a in first["averages"]]
    want = [1 if (s + 1) % LOCAL_STEPS == 0 else 0 for s in range(STEPS)]
    want[-1] += 1  # the closing average when the `with LocalSGD(...)` block ends
    if averages == [0] * STEPS and all(agree):
        raise Incorrect(tr("the replicas agreed after every step without any parameter average: that is plain "
                           "data parallelism (gradients all-reduced each step). Run the loop inside `with "
                           "LocalSGD(...)`."))
    if averages == [0] * (STEPS - 1) + [1]:
        raise Incorrect(tr("only the closing average happened: call local_sgd.step() after each optimizer step."))
    if sum(averages) == 0:
        raise Incorrect(tr("no parameter was ever averaged: use LocalSGD(accelerator=..., model=..., "
                           "local_sgd_steps=k) as a `with` block around the loop."))
    if averages != want:
        raise Incorrect(tr("parameter averages after each step: {averages}; with k={k} expected {want} "
                           "(every k-th step, plus the closing one): pass local_sgd_steps=k.", averages=averages,
                           k=LOCAL_STEPS, want=want))
    if agree != [a > 0 for a in want]:
        raise Incorrect(tr("the replicas agreed after steps {agreed}: between averages each process must train on "
                           "its own, with the gradients not all-reduced.",
                           agreed=[s + 1 for s, a in enumerate(agree) if a]))


q1 = Exercise(
    "3.2 q1: gradient checkpointing on a transformers model",
    _check_model_checkpointing,
    usage="q1.check(turn_on_checkpointing)",
    api=True,
    checked=("checked: in training mode, the model now keeps fewer activations for backward, with the same gradients."),
    hints=["transformers models switch gradient checkpointing on with one method of the model; it must then be "
           "in training mode (as the lesson model is).",
           "transformers 5 calls it activation checkpointing (gradient checkpointing is the older name, kept as "
           "a deprecated alias): look for the method that enables it among PreTrainedModel's methods, in the "
           "'Model' reference of the docs.",
           "One call on the model does it: the enabling method of hint 2, called with no argument; the model "
           "stays in training mode."],
    solution_code=("def turn_on_checkpointing(model):\n    model.activation_checkpointing_enable()\n\n"
                   "q1.check(turn_on_checkpointing)"),
)
q2 = Exercise(
    "3.2 q2: what checkpointing keeps",
    _check_layer_inputs,
    usage="q2.check(layer_input_bytes, model.config)",
    hints=["With checkpointing, each transformer layer keeps only its input: batch x sequence length x dim numbers.",
           "The config says how many layers (n_layers) and how wide (dim); a float32 takes 4 bytes.",
           "Multiply the number of layers by one layer's input in bytes: the batch size and the sequence "
           "length of this lesson's run (above), the width from the config, and the bytes of one float32."],
    solution_code=("layer_input_bytes = model.config.n_layers * 8 * 64 * model.config.dim * 4\n"
                   "q2.check(layer_input_bytes, model.config)"),
)
q3 = Exercise(
    "3.2 q3: checkpointing a plain nn.Module",
    _check_module_checkpointing,
    usage="q3.check(checkpointed_forward)",
    api=True,
    checked=("checked: same output and gradients as the plain forward pass, keeping only each block's input for "
             "backward."),
    hints=["Run the blocks one after the other, but through a function that keeps only each block's input and "
           "recomputes the block during backward.",
           "torch.utils.checkpoint.checkpoint(function, *inputs, ...) (PyTorch docs, 'torch.utils.checkpoint') "
           "returns what function(*inputs) returns; the docs ask you to set one keyword argument explicitly: "
           "choose the non-reentrant variant they recommend.",
           "Loop over the blocks you were given, each time replacing x with what the checkpoint function "
           "returns for that block and x (with the keyword of hint 2), and return the last x."],
    solution_code=("def checkpointed_forward(blocks, x):\n    for block in blocks:\n"
                   "        x = checkpoint(block, x, use_reentrant=False)\n    return x\n\n"
                   "q3.check(checkpointed_forward)"),
)
q4 = Exercise(
    "3.2 q4: a local SGD loop, in 2 processes",
    _check_local_sgd_loop,
    usage="q4.check(train_local_sgd)",
    api=True,
    checked=("checked in 2 real processes: each trained on its half, and the parameters were averaged every k "
             "steps only."),
    hints=["The loop of lesson 2.2 (prepared model, optimizer and loader), inside a LocalSGD block, with one "
           "extra call after each optimizer step that averages the parameters every k-th time.",
           "accelerate.local_sgd.LocalSGD(accelerator=..., model=..., local_sgd_steps=...) is a context manager; "
           "its .step() counts steps and averages (Accelerate docs, 'Using Local SGD with Accelerate').",
           "Prepare the model, the optimizer and a DataLoader in batches of 4 as in lesson 2.2; open the "
           "LocalSGD block with the accelerator, the prepared model and k; inside it, for each batch: the "
           "forward, the backward through the accelerator, the step, zero_grad, then the LocalSGD's own step."],
    solution_code=(
        "def train_local_sgd(model, optimizer, dataset, k):\n"
        "    accelerator = Accelerator()\n    loader = DataLoader(dataset, batch_size=4)\n"
        "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k) as local_sgd:\n"
        "        for batch in loader:\n            loss = model(**batch).loss\n"
        "            accelerator.backward(loss)\n            optimizer.step()\n            optimizer.zero_grad()\n"
        "            local_sgd.step()\n\nq4.check(train_local_sgd)"
    ),
)
