"""Exercises of lesson 6.4 (tensor and pipeline parallelism by hand).

q1 judges the learner's ``split_mlp`` in this process (each rank's share is plain arithmetic); q2 and q3 run
the learner's autograd functions (``CopyToRanks``, ``SumFromRanks``), each with the house's other one, in 2
real processes against the unsplit MLP; q4 checks the learner's order for each of 3 stages against 1F1B's exact
structure (warm-up, one forward and one backward in turn, the backwards left), then runs it in 3 real processes
against the unsplit model. The lesson's own ``split_mlp``, ``CopyToRanks``, ``SumFromRanks`` and
``pipeline.one_f_one_b`` are refused as answers. Each function or class may come from a notebook or a script.
"""

from __future__ import annotations

import re

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, hands_over_to, run_learner_in_processes

WIDTH, HIDDEN, TOLERANCE = 64, 256, 1e-5
TP_PROCESSES, PP_STAGES, PP_MICRO_BATCHES = 2, 3, 4
PP_SHAPE = {"size": 8, "width": 32, "hidden": 64, "blocks_per_stage": 1}  # small: the check is about order


def _gap(a, b) -> float:
    return float((a - b).abs().max())


def _shares(split_mlp, mlp, world: int) -> list[tuple]:
    import torch

    shares = []
    for rank in range(world):
        try:
            share = split_mlp(mlp, rank, world)
        except RuntimeError as err:
            if "leaf Variable that requires grad is being used in an in-place operation" not in str(err):
                raise
            raise Incorrect(tr("copying into a new layer's weight raised {error}: autograd refuses an in-place "
                               "change to a parameter that requires grad. Do the copies inside "
                               "with torch.no_grad(): (or build the weights with nn.Parameter).",
                               error=type(err).__name__)) from None
        except TypeError as err:
            if "torch.nn.Parameter or None expected" not in str(err):
                raise
            raise Incorrect(tr("assigning a slice to a layer's weight raised {error}: a slice of a parameter is a "
                               "plain tensor, and a module's weight must be an nn.Parameter. Wrap it, "
                               "nn.Parameter(slice.detach().clone()), or copy it into the weight with copy_ "
                               "under torch.no_grad().", error=type(err).__name__)) from None
        if not (isinstance(share, (tuple, list)) and len(share) == 2
                and all(isinstance(m, torch.nn.Linear) for m in share)):
            raise Incorrect(tr("split_mlp should return a pair of torch.nn.Linear, (up, down); for rank {rank} "
                               "it returned {kind}.", rank=rank, kind=type(share).__name__))
        shares.append(tuple(share))
    return shares


def _check_shapes(up, down, world: int) -> None:
    k = HIDDEN // world
    if tuple(up.weight.shape) == (HIDDEN, WIDTH // world):
        raise Incorrect(tr("up was split along the wrong dimension: it keeps all {hidden} output features and "
                           "1/{world} of the inputs. A column-parallel layer keeps {k} rows of the weight (its "
                           "output features) and every input: weight[rank * {k}:(rank + 1) * {k}].",
                           hidden=HIDDEN, world=world, k=k))
    if tuple(up.weight.shape) != (k, WIDTH):
        raise Incorrect(tr("up.weight has shape {shape}; with {world} ranks it should be ({k}, {width}).",
                           shape=tuple(up.weight.shape), world=world, k=k, width=WIDTH))
    if tuple(down.weight.shape) == (WIDTH // world, HIDDEN):
        raise Incorrect(tr("down was split along the wrong dimension: it keeps rows (output features) of the "
                           "weight. A row-parallel layer keeps the {k} columns that match up's features, "
                           "weight[:, rank * {k}:(rank + 1) * {k}], and every output.", k=k))
    if tuple(down.weight.shape) != (WIDTH, k):
        raise Incorrect(tr("down.weight has shape {shape}; with {world} ranks it should be ({width}, {k}).",
                           shape=tuple(down.weight.shape), world=world, width=WIDTH, k=k))
    if up.bias is None or tuple(up.bias.shape) != (k,):
        raise Incorrect(tr("up needs its share of the first bias too: bias[rank * {k}:(rank + 1) * {k}].", k=k))
    if down.bias is not None:
        raise Incorrect(tr("down has a bias: every rank would add it, so the sum over {world} ranks would hold "
                           "it {world} times. Make it Linear(..., bias=False): the block adds its bias once, "
                           "after the sum.", world=world))


def _check_split(split_mlp) -> None:
    import torch

    from effitrain_helpers.engines import tensor_parallel
    from effitrain_helpers.training.tensor_parallel_run import mlp_block, tokens

    if not callable(split_mlp):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=split_mlp))
    if hands_over_to(split_mlp, tensor_parallel.split_mlp):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own split: write the slicing "
                           "yourself (the exercise is what that function does).", name="split_mlp"))
    mlp, x = mlp_block(WIDTH, HIDDEN), tokens(16, WIDTH)
    want = mlp(x).detach()
    for world in (2, 4):
        shares = _shares(split_mlp, mlp, world)
        for up, down in shares:
            _check_shapes(up, down, world)
        if all(torch.equal(shares[0][0].weight, up.weight) for up, _ in shares):
            raise Incorrect(tr("all {world} ranks got the same share: use rank to pick rows rank * k to "
                               "(rank + 1) * k (k = hidden // world).", world=world))
        with torch.no_grad():
            got = sum(down(torch.nn.functional.gelu(up(x))) for up, down in shares) + mlp[2].bias
        if _gap(got, want) > TOLERANCE:
            raise Incorrect(tr("with {world} ranks the partial sums do not add up to the block's output (largest "
                               "difference {gap:.1e}): down must keep the columns that match the rows up keeps.",
                               world=world, gap=_gap(got, want)))


def _tp_run(copy, total):
    """In each process: the MLP split with ``copy`` and ``total`` against the unsplit one, then each function
    where autograd shares its tensor with another branch (``f(x) + x``): all_reduce works in place, so a
    function that reduces the tensor it was handed changes the other branch's value too."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.training.tensor_parallel_run import measured_tp_run

    found = measured_tp_run(copy, total, width=WIDTH, hidden=HIDDEN, n_tokens=32, repeats=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((4,), float(rank + 1), requires_grad=True)
    (copy.apply(x) + x).backward(torch.ones(4))  # right: every rank's 1 summed, plus the residual's 1
    found["shared_grad_ok"] = bool(torch.allclose(x.grad, torch.full((4,), world + 1.0)))
    partial = torch.full((4,), float(rank + 1), requires_grad=True) * 1
    summed = total.apply(partial) + partial  # right: 1 + 2 + ... + world, plus this rank's own partial sum
    found["shared_input_ok"] = bool(torch.allclose(summed, torch.full((4,), world * (world + 1) / 2 + rank + 1)))
    return found


def _check_copy(CopyToRanks) -> None:
    from effitrain_helpers.engines import tensor_parallel

    _refuse_the_house(CopyToRanks, tensor_parallel.CopyToRanks, "CopyToRanks")
    _check_pair(CopyToRanks, tensor_parallel.SumFromRanks, "CopyToRanks", CopyToRanks)


def _check_sum(SumFromRanks) -> None:
    from effitrain_helpers.engines import tensor_parallel

    _refuse_the_house(SumFromRanks, tensor_parallel.SumFromRanks, "SumFromRanks")
    _check_pair(tensor_parallel.CopyToRanks, SumFromRanks, "SumFromRanks", SumFromRanks)


def _refuse_the_house(answer, house: type, name: str) -> None:
    """The lesson's own ``house`` class (or a subclass that inherits its methods) is not the learner's answer."""
    if isinstance(answer, type) and issubclass(answer, house) and all(
            getattr(answer, f) is getattr(house, f) for f in ("forward", "backward")):
        raise Incorrect(tr("your {name} is the lesson's own (tensor_parallel.{name}): write its forward and "
                           "backward yourself (the exercise is what they do).", name=name))


def _check_pair(copy, total, name: str, answer) -> None:
    """The learner's ``answer`` (one of the pair, named ``name``), the house's other one, in 2 processes."""
    import torch

    from effitrain_helpers.training.tensor_parallel_run import mlp_block, theory_bytes_per_token

    if not (isinstance(answer, type) and issubclass(answer, torch.autograd.Function)):
        raise Incorrect(tr("{name} should be a torch.autograd.Function subclass (with forward and backward "
                           "static methods); you gave {fn!r}.", name=name, fn=answer))
    ranks = run_learner_in_processes(_tp_run, copy, total, processes=TP_PROCESSES, timeout=120)
    n, bias = TP_PROCESSES, mlp_block(WIDTH, HIDDEN)[2].bias.detach()
    first = ranks[0]
    if max(_gap(r["output"], r["full_output"]) for r in ranks) > TOLERANCE:
        partial = sum(r["output"] for r in ranks) - (n - 1) * bias
        if _gap(partial, first["full_output"]) <= TOLERANCE:
            raise Incorrect(tr("the outputs are partial sums: each rank's output is its own share of the sum. "
                               "SumFromRanks.forward must all-reduce its input (dist.all_reduce) before returning "
                               "it."))
        raise Incorrect(tr("the outputs differ from the unsplit MLP's by {gap:.1e}: SumFromRanks.forward sums the "
                           "ranks' partial outputs once; CopyToRanks.forward returns its input unchanged.",
                           gap=max(_gap(r["output"], r["full_output"]) for r in ranks)))
    if max(_gap(r["input_grad"], r["full_input_grad"]) for r in ranks) > TOLERANCE:
        partial = sum(r["input_grad"] for r in ranks)
        if _gap(partial, first["full_input_grad"]) <= TOLERANCE:
            raise Incorrect(tr("the input gradient is partial on every rank: each share of the layer contributes "
                               "part of it. CopyToRanks.backward must all-reduce the gradient (forward stays the "
                               "identity)."))
        raise Incorrect(tr("the input gradient differs from the unsplit MLP's by {gap:.1e}: only "
                           "CopyToRanks.backward all-reduces; SumFromRanks.backward returns the gradient as it "
                           "is.", gap=max(_gap(r["input_grad"], r["full_input_grad"]) for r in ranks)))
    weights = max(max(_gap(r["up_grad"], r["full_up_grad"]), _gap(r["down_grad"], r["full_down_grad"]))
                  for r in ranks)
    if weights > TOLERANCE:
        raise Incorrect(tr("the weights' gradients differ from the unsplit MLP's by {gap:.1e}: every rank already "
                           "holds the whole gradient of the output, so SumFromRanks.backward returns it as it is.",
                           gap=weights))
    if not all(r["shared_grad_ok"] for r in ranks):
        raise Incorrect(tr("CopyToRanks.backward reduced the gradient it was handed, in place (all_reduce writes "
                           "into its tensor): autograd may hand that same tensor to another branch, and with "
                           "f(x) + x the other branch got the reduced gradient too. All-reduce a copy."))
    if not all(r["shared_input_ok"] for r in ranks):
        raise Incorrect(tr("SumFromRanks.forward reduced the tensor it was handed, in place (all_reduce writes "
                           "into its tensor): the caller's partial sum became the total, and with g(x) + x the "
                           "other branch read the total. All-reduce a copy."))
    want = {k: v * first["tokens"] for k, v in theory_bytes_per_token(WIDTH).items()}
    if first["payload"] != want:
        raise Incorrect(tr("right values, but the all-reduces moved {got} bytes (forward, backward); one "
                           "all-reduce of the {tokens} x {width} activations each way is {want}.",
                           got=tuple(first["payload"].values()), tokens=first["tokens"], width=WIDTH,
                           want=tuple(want.values())))


def _pp_run(order):
    from effitrain_helpers.training.pipeline import run_schedule

    return run_schedule(order, PP_MICRO_BATCHES, **PP_SHAPE)


def _check_order(order, stage: int) -> list[tuple]:
    m = PP_MICRO_BATCHES
    ops = order(stage, PP_STAGES, m)
    try:
        ops = [(str(kind), int(i)) for kind, i in ops]
    except (TypeError, ValueError):
        raise Incorrect(tr("one_f_one_b should return a list of (\"F\", i) and (\"B\", i) pairs; for stage "
                           "{stage} it returned {ops!r}.", stage=stage, ops=ops)) from None
    every = sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
    if sorted(ops) != every:
        raise Incorrect(tr("stage {stage} of {stages} runs {ops}: every micro-batch 0 to {last} needs exactly "
                           "one forward (\"F\", i) and one backward (\"B\", i).", stage=stage, stages=PP_STAGES,
                           ops=ops, last=m - 1))
    for i in range(m):
        if ops.index(("B", i)) < ops.index(("F", i)):
            raise Incorrect(tr("stage {stage} runs the backward of micro-batch {i} before its forward.",
                               stage=stage, i=i))
    return ops


def _check_structure(ops: list[tuple], stage: int) -> None:
    """``ops`` is exactly 1F1B for ``stage``: ``stages - 1 - stage`` forwards (the warm-up), then one forward and
    one backward in turn, then the backwards left, micro-batches in order. A bound on the micro-batches in
    flight alone lets through no pipelining at all (``F0 B0 F1 B1 ...``) and a warm-up one forward short."""
    from effitrain_helpers.engines.pipeline import one_f_one_b

    m, want = PP_MICRO_BATCHES, min(PP_STAGES - 1 - stage, PP_MICRO_BATCHES)
    if ops == one_f_one_b(stage, PP_STAGES, m):
        return
    warm = next(k for k, (kind, _) in enumerate(ops) if kind == "B")  # forwards before the first backward
    first = min(want + 1, m)  # 1F1B's: the warm-up, then the forward of the first pair
    shown = " ".join(f"{kind}{i}" for kind, i in ops)
    if warm == m > first:
        raise Incorrect(tr("stage {stage} runs all {m} forwards before any backward, so it holds the activations "
                           "of {m} micro-batches at once. That is all-forward-all-backward: every forward before "
                           "any backward. 1F1B starts the backwards after stages - 1 - stage = {want} warm-up "
                           "forward(s) and one more.", stage=stage, m=m, want=want))
    if warm != first:
        raise Incorrect(tr("stage {stage} of {stages} runs {warm} forward(s) before its first backward ({order}); "
                           "1F1B runs {first}: a warm-up of stages - 1 - stage = {want} forward(s) to fill the "
                           "pipe, then the first forward-backward pair.", stage=stage, stages=PP_STAGES,
                           warm=warm, order=shown, first=first, want=want))
    raise Incorrect(tr("after its {want} warm-up forward(s), stage {stage} should run one forward and one backward "
                       "in turn, micro-batches in order, then the backwards left; it runs {order}.", want=want,
                       stage=stage, order=shown))


def _waiting(message: str) -> str:
    """The ranks still running and what each last said it waited for, from ``launch``'s TimeoutError."""
    ranks = re.search(r"still running: ranks \[([^\]]*)\]", message)
    said = re.findall(r"(stage \d+ waits for [^\n]*)", message)
    last = {}
    for line in said:
        last[line.split(" waits")[0]] = line
    return tr("ranks {ranks} still waiting; {said}", ranks=ranks.group(1) if ranks else "?",
              said="; ".join(last.values()) or "?")


def _check_one_f_one_b(one_f_one_b, timeout: float = 60.0) -> None:
    from effitrain_helpers.engines import pipeline
    from effitrain_helpers.training.pipeline import unsplit_loss

    if not callable(one_f_one_b):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=one_f_one_b))
    if hands_over_to(one_f_one_b, pipeline.one_f_one_b) or hands_over_to(one_f_one_b, pipeline.SCHEDULES):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own schedule: write the order "
                           "yourself (the exercise is what that function does).", name="pipeline.one_f_one_b"))
    orders = [_check_order(one_f_one_b, stage) for stage in range(PP_STAGES)]
    one_by_one = [op for i in range(PP_MICRO_BATCHES) for op in (("F", i), ("B", i))]
    if all(ops == one_by_one for ops in orders):
        raise Incorrect(tr("no pipelining: every stage runs {order}, each micro-batch through the whole pipe "
                           "before the next one starts, so only one stage works at a time. Let each stage first "
                           "run stages - 1 - stage forwards (stage 0: {want}) to fill the pipe.",
                           order=" ".join(f"{kind}{i}" for kind, i in one_by_one), want=PP_STAGES - 1))
    for stage, ops in enumerate(orders):
        _check_structure(ops, stage)
    try:
        ranks = run_learner_in_processes(_pp_run, one_f_one_b, processes=PP_STAGES, timeout=timeout)
    except TimeoutError as err:
        raise Incorrect(tr("the {stages} stages did not finish within {timeout:g} s ({waiting}), although the "
                           "orders your function returned here are 1F1B: does it return the same order each "
                           "time it is called? Each process calls it again.", stages=PP_STAGES,
                           timeout=timeout, waiting=_waiting(str(err)))) from None
    loss, grads = unsplit_loss(PP_MICRO_BATCHES, PP_STAGES, **PP_SHAPE)
    got = ranks[-1]["loss"]
    if abs(got - loss) > TOLERANCE:
        raise Incorrect(tr("the pipeline's loss {got:.6f} differs from the unsplit model's {want:.6f}.",
                           got=got, want=loss))
    mine = [g for r in ranks for g in r["grads"]]
    if max(_gap(a, b) for a, b in zip(mine, grads)) > TOLERANCE:
        raise Incorrect(tr("the loss is right but the gradients differ from the unsplit model's."))


q1 = Exercise(
    "6.4 q1: split the MLP, column then row",
    _check_split,
    usage="q1.check(split_mlp)",
    api=True,
    checked=("checked with 2 and 4 ranks: each share's weight shapes, and the ranks' partial "
             "outputs plus the bias equal to the unsplit MLP's output."),
    hints=["The first layer's output features are cut among the ranks (each computes its own hidden features, "
           "and GELU needs nothing from the others); the second layer's inputs are cut the same way, so each "
           "rank computes a partial sum of the output.",
           "nn.Linear stores weight as (out_features, in_features): the first layer's rows, the second layer's "
           "columns. Copy the slices into new layers under torch.no_grad() (or build them from the slices with "
           "nn.Parameter); the second layer's bias is added once after the sum, not by each rank.",
           "Each rank keeps k = hidden / world consecutive hidden features, starting at rank times k: build "
           "the first layer with k outputs and copy its slice of rows of the weight and of the bias; build "
           "the second with k inputs and no bias, and copy the same slice as columns of its weight."],
    solution_code=(
        "def split_mlp(mlp, rank, world):\n"
        "    k = mlp[0].out_features // world\n"
        "    rows = slice(rank * k, (rank + 1) * k)\n"
        "    up = nn.Linear(mlp[0].in_features, k)\n"
        "    down = nn.Linear(k, mlp[2].out_features, bias=False)\n"
        "    with torch.no_grad():\n"
        "        up.weight.copy_(mlp[0].weight[rows])\n"
        "        up.bias.copy_(mlp[0].bias[rows])\n"
        "        down.weight.copy_(mlp[2].weight[:, rows])\n"
        "    return up, down\n\nq1.check(split_mlp)"
    ),
)
q2 = Exercise(
    "6.4 q2: CopyToRanks (f), in 2 processes",
    _check_copy,
    usage="q2.check(CopyToRanks)",
    api=True,
    checked=("checked in 2 processes with the house's SumFromRanks: output, input gradient and "
             "weight gradients equal to the unsplit MLP's, and the bytes the all-reduces moved."),
    hints=["Every rank's share of the first layer reads the whole input, and each contributes part of the "
           "input's gradient: the full gradient is the sum over the ranks. Forward has nothing to exchange.",
           "In backward(ctx, grad) of a torch.autograd.Function (torch docs: 'Extending torch.autograd'), "
           "torch.distributed.all_reduce(t) sums t in place over the ranks. Work on a copy: the tensor autograd "
           "hands you may be used elsewhere.",
           "forward returns its input as it is (a view, so autograd sees a new tensor); backward makes a copy"
           " of the incoming gradient, sums the copy over the ranks with the collective of hint 2, and "
           "returns it."],
    solution_code=(
        "class CopyToRanks(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return x.view_as(x)\n\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        grad = grad.clone()\n"
        "        dist.all_reduce(grad)\n        return grad\n\n\nq2.check(CopyToRanks)"
    ),
)
q3 = Exercise(
    "6.4 q3: SumFromRanks (g), in 2 processes",
    _check_sum,
    usage="q3.check(SumFromRanks)",
    api=True,
    checked=("checked in 2 processes with the house's CopyToRanks: output, input gradient and "
             "weight gradients equal to the unsplit MLP's, and the bytes the all-reduces moved."),
    hints=["After the row-parallel layer each rank holds a partial sum of the output; the output is the sum over "
           "the ranks. In backward every rank already holds the whole gradient of the output: nothing to "
           "exchange.",
           "forward(ctx, x) of a torch.autograd.Function may call a collective: torch.distributed.all_reduce(t) "
           "sums t in place over the ranks (torch.distributed docs). Sum a copy, not the tensor passed in.",
           "forward makes a copy of this rank's partial sum, sums the copy over the ranks with the collective"
           " of hint 2, and returns it; backward returns the gradient as it came."],
    solution_code=(
        "class SumFromRanks(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        x = x.clone()\n"
        "        dist.all_reduce(x)\n        return x\n\n"
        "    @staticmethod\n    def backward(ctx, grad):\n        return grad\n\n\nq3.check(SumFromRanks)"
    ),
)
q4 = Exercise(
    "6.4 q4: a 1F1B schedule, in 3 processes",
    _check_one_f_one_b,
    usage="q4.check(one_f_one_b)",
    api=True,
    checked=("checked for each of 3 stages: stages - 1 - stage forwards first, then one forward and one "
             "backward in turn, then the backwards left; then run in 3 processes, loss and gradients "
             "equal to the unsplit model's."),
    hints=["Stage s cannot run a backward until the gradient comes back from the last stage, which first needs "
           "the forwards of the stages after s. So the stages nearer the start fill the pipe with a few forwards, "
           "then alternate one forward and one backward, then finish the backwards left.",
           "The order is a list of (\"F\", i) and (\"B\", i) pairs. The number of filling forwards falls by one "
           "per stage and is 0 for the last stage (which can start each backward at once); min() keeps it at "
           "most m.",
           "Build the list in three parts: the filling forwards (their number from hint 2), then one forward "
           "and one backward in turn for as long as forwards remain, then the backwards that are left, in "
           "order."],
    solution_code=(
        "def one_f_one_b(stage, stages, m):\n"
        "    warm = min(stages - 1 - stage, m)\n"
        "    order = [(\"F\", i) for i in range(warm)]\n"
        "    for i in range(m - warm):\n"
        "        order += [(\"F\", warm + i), (\"B\", i)]\n"
        "    return order + [(\"B\", i) for i in range(m - warm, m)]\n\nq4.check(one_f_one_b)"
    ),
)
