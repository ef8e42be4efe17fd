"""Exercises of lesson 7.2 (a mesh of devices).

q1 judges the learner's ``make_mesh(dp, tp)`` and tensor-parallel ``plan`` for the workbook's transformer block by
what they do in 4 real gloo processes, at a 2 x 2 and a 1 x 4 mesh (``training/device_mesh.plan_facts``): the
mesh's shape, names and tensor-parallel groups, how each linear layer came out split, the block's output and input
gradient against the unsplit block's, and the collectives on the ``tp`` group forward and backward. The likely
mistakes are named from what happened, not from the code: dimensions swapped or misnamed, two column-wise layers
in a row, a row-wise layer first, the output projection (or the MLP) left whole, outputs gathered when they need
not be; before any process starts, a plan entry parallelize_module cannot use (a key that names no layer of the
block, a style class not called, Hugging Face's "colwise" strings). q2 judges the learner's ``tp_bytes(batch, seq, hidden, dp, blocks)``, the bytes the ``tp`` dimension carries
per step, against ``device_mesh.tp_bytes_per_step`` on shapes the notebook does not show, naming the forward
counted alone, q, k and v fused into one all-reduce, the global batch instead of the data-parallel share, and
16-bit values.
"""

from __future__ import annotations

from effitrain_helpers.core.language import msg, tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, hands_over_to, run_learner_in_processes

SHAPES = ((2, 2), (1, 4))  # (dp, tp) meshes the answer is run at, in 4 processes
EXPECTED = {"q": "column", "k": "column", "v": "column", "out": "row", "up": "column", "down": "row"}
FIRST, SECOND = ("q", "k", "v", "up"), ("out", "down")  # each half's first (column) and second (row) layers
TOLERANCE = 1e-4  # largest gap to the unsplit block's output and input gradient (float32, sums in other orders)
PASSES = {"forward": msg("forward"), "backward": msg("backward")}  # how a message names each pass


def _check_mesh(facts: list[dict], dp: int, tp: int) -> None:
    """The mesh of every rank at one shape: made, shaped (dp, tp), named ("dp", "tp"), tp groups of neighbours."""
    for rank, fact in enumerate(facts):
        if fact.get("stage") == "mesh" and "error" in fact:
            raise Incorrect(tr("make_mesh({dp}, {tp}) raised {error} on rank {rank}.", dp=dp, tp=tp,
                               error=fact["error"], rank=rank))
    fact = facts[0]
    if fact["shape"] != (dp, tp):
        swapped = fact["shape"] == (tp, dp)
        raise Incorrect(tr("make_mesh({dp}, {tp}) made a mesh of shape {shape}; it should be ({dp}, {tp}): {why}",
                           dp=dp, tp=tp, shape=fact["shape"],
                           why=tr("the dimensions are swapped: data parallelism first, tensor parallelism last.")
                           if swapped else tr("one dimension of dp ranks, one of tp ranks.")))
    if fact["names"] != ("dp", "tp"):
        raise Incorrect(tr("the mesh's dimensions are named {names}; name them (\"dp\", \"tp\") in that order "
                           "(mesh_dim_names), so mesh[\"tp\"] is the inner one.", names=fact["names"]))
    for rank, fact in enumerate(facts):
        want = [rank // tp * tp + i for i in range(tp)]
        if fact["tp_ranks"] != want:
            raise Incorrect(tr("at {dp} x {tp}, rank {rank}'s tensor-parallel group is {got}, not its neighbours "
                               "{want}: the dimensions are swapped. Tensor parallelism talks at every layer, so "
                               "its ranks must be neighbours (one node's fast links): tp is the mesh's last "
                               "dimension.", dp=dp, tp=tp, rank=rank, got=fact["tp_ranks"], want=want))


def _check_splits(splits: dict[str, str]) -> None:
    """How each linear layer came out, against column-wise q, k, v, up and row-wise out, down."""
    if splits == EXPECTED:
        return
    whole = [name for name in EXPECTED if splits.get(name) == "whole"]
    if "out" in whole and not any(splits.get(n) == "whole" for n in ("q", "k", "v")):
        raise Incorrect(tr("the output projection (out) is whole on every rank: after column-wise q, k and v each "
                           "rank holds only its own heads, so out must be row-wise (each rank multiplies the "
                           "features of its heads; one all-reduce sums the partial outputs)."))
    if whole:
        raise Incorrect(tr("{names} stay whole on every rank: the plan must split every linear layer of the block, "
                           "attention (q, k, v, out) and the MLP (up, down).", names=", ".join(whole)))
    rows_first = [n for n in FIRST if splits[n] == "row"]
    cols_second = [n for n in SECOND if splits[n] == "column"]
    if rows_first and cols_second:
        raise Incorrect(tr("row before column: {first} row-wise and {second} column-wise. Each half starts with "
                           "the whole hidden vector on every rank, so its first layers split their outputs "
                           "(column-wise) and the last one splits its inputs (row-wise) and sums.",
                           first=", ".join(rows_first), second=", ".join(cols_second)))
    if cols_second:
        raise Incorrect(tr("{names}: column-wise after a column-wise layer. Its input is already split (each rank "
                           "holds its share of the features), so it must be row-wise: each rank multiplies its "
                           "share and one all-reduce sums the partial outputs.", names=", ".join(cols_second)))
    raise Incorrect(tr("{names}: row-wise, but its input is the whole hidden vector on every rank; the first "
                       "layers of each half are column-wise (each rank computes its own heads, its own hidden "
                       "features, with no communication).", names=", ".join(rows_first)))


def _raised(facts: list[dict], stage: str, where: str, dp: int, tp: int) -> None:
    for rank, fact in enumerate(facts):
        if "error" in fact and fact["stage"] == stage:
            raise Incorrect(tr("at {dp} x {tp}, {where} raised {error} on rank {rank}.", dp=dp, tp=tp, where=where,
                               error=fact["error"], rank=rank))


def _check_run(facts: list[dict], dp: int, tp: int) -> None:
    """The plan applied (each layer's split first: a wrong split often fails later), run, compared, counted."""
    _raised(facts, "plan", tr("parallelize_module(block, mesh[\"tp\"], plan)"), dp, tp)
    fact = facts[0]
    _check_splits(fact["splits"])
    _raised(facts, "run", tr("the split block's forward and backward"), dp, tp)
    gap = max(max(f["output_gap"], f["grad_gap"]) for f in facts)
    if gap > TOLERANCE:
        raise Incorrect(tr("at {dp} x {tp} the split block's output or input gradient differs from the unsplit "
                           "block's by {gap:.1e}.", dp=dp, tp=tp, gap=gap))
    activation = fact["activation_bytes"]
    for direction, reduces in (("forward", 2), ("backward", 4)):
        seen = fact["traffic"][direction]
        if seen["calls"] != {"all_reduce": reduces} or seen["bytes"] != reduces * activation:
            raise Incorrect(tr("right values, but at {dp} x {tp} the {direction} pass ran {calls} on the tp group "
                               "({got} bytes) where {want} all-reduces of the activations ({bytes} bytes) do: keep "
                               "the column-wise outputs split and give them to the row-wise layers as they are "
                               "(the styles' default layouts), with nothing gathered in between.", dp=dp, tp=tp,
                               direction=tr(PASSES[direction]), calls=seen["calls"], got=seen["bytes"], want=reduces,
                               bytes=reduces * activation))


def _check_plan_entries(plan: dict) -> None:
    """Before any process starts: every key names a layer of the block (parallelize_module matches the keys
    against the block's submodule names, fnmatch patterns allowed, and skips one that matches none with only a
    warning), and every value is a ParallelStyle object (a class not called, or Hugging Face's "colwise" string,
    fails inside parallelize_module with a library error)."""
    from fnmatch import fnmatch

    from torch.distributed.tensor.parallel import ParallelStyle

    for key, style in plan.items():
        if not isinstance(key, str) or not any(fnmatch(layer, key) for layer in EXPECTED):
            raise Incorrect(tr("plan[{key!r}] names no layer of the block: parallelize_module matches each key "
                               "against the names of the block's own layers, {layers} (Block in "
                               "engines/mesh_parallel.py), and skips a key that matches none with only a warning.",
                               key=key, layers=", ".join(EXPECTED)))
        if isinstance(style, type) and issubclass(style, ParallelStyle):
            raise Incorrect(tr("plan[{key!r}] is the class {style}, not a style: call it, {style}(), to make one "
                               "(its arguments choose the layouts; the defaults are the ones this block needs).",
                               key=key, style=style.__name__))
        if isinstance(style, str):
            raise Incorrect(tr("plan[{key!r}] is the string {style!r} (how a Hugging Face tp_plan names a style): "
                               "parallelize_module takes ParallelStyle objects, ColwiseParallel() or "
                               "RowwiseParallel().", key=key, style=style))
        if not isinstance(style, ParallelStyle):
            raise Incorrect(tr("plan[{key!r}] is {kind}: each layer's entry is a ParallelStyle, ColwiseParallel() "
                               "or RowwiseParallel().", key=key, kind=type(style).__name__))


def _check_mesh_and_plan(make_mesh, plan) -> None:
    from effitrain_helpers.engines import mesh_parallel
    from effitrain_helpers.training.device_mesh import plan_facts

    if hands_over_to(make_mesh, mesh_parallel.make_mesh):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="make_mesh"))
    if isinstance(plan, mesh_parallel.LessonPlan):
        raise Incorrect(tr("this plan is the lesson's own (block_plan()): write the dict yourself, a ParallelStyle "
                           "for each layer of the block (the exercise is which style each layer gets, and why)."))
    if not isinstance(plan, dict) or not plan:
        raise Incorrect(tr("plan should be a dict from each layer's name in the block to a ParallelStyle "
                           "(ColwiseParallel() or RowwiseParallel()); you gave {kind}.", kind=type(plan).__name__))
    _check_plan_entries(plan)
    ranks = run_learner_in_processes(plan_facts, make_mesh, plan, SHAPES, processes=4)
    for i, (dp, tp) in enumerate(SHAPES):
        facts = [rank[i] for rank in ranks]
        _check_mesh(facts, dp, tp)
        _check_run(facts, dp, tp)


q1 = Exercise(
    "7.2 q1: a mesh and the block's tensor-parallel plan",
    _check_mesh_and_plan,
    usage="q1.check(make_mesh, plan)",
    api=True,
    checked=("checked in 4 processes at a 2 x 2 and a 1 x 4 mesh: the mesh's shape, names and tensor-parallel "
             "groups, each layer's split, the output and input gradient against the unsplit block, and two "
             "all-reduces forward and four backward on the tp group."),
    hints=["Two questions: which ranks share a layer (neighbours: the inner dimension of the grid), and for each "
           "half of the block (attention, MLP), which layer splits its outputs and which its inputs. Lesson "
           "6.4's MLP is the pattern.",
           "init_device_mesh(device_type, mesh_shape, mesh_dim_names=...) makes the grid; parallelize_module "
           "takes a dict from each layer's name to a style: ColwiseParallel() (split the output features) or "
           "RowwiseParallel() (split the input features, sum the partial outputs); "
           "torch.distributed.tensor.parallel documents both.",
           "The grid's shape lists its outer dimension first, and the names follow the same order: data "
           "parallelism outside, tensor parallelism inside ('A grid of ranks' above). In each half, the layers "
           "that read the whole hidden vector split their outputs; the layer fed their split features splits "
           "its inputs and sums. The placements table above shows how TP cut q's and out's weights on the tp "
           "dimension (Shard(0): rows, Shard(1): columns); lesson 6.4's up and down are cut the same way."],
    solution_code=(
        "def make_mesh(dp, tp):\n"
        "    return init_device_mesh(\"cpu\", (dp, tp), mesh_dim_names=(\"dp\", \"tp\"))\n\n\n"
        "plan = {\"q\": ColwiseParallel(), \"k\": ColwiseParallel(), \"v\": ColwiseParallel(),  # its own heads\n"
        "        \"out\": RowwiseParallel(),  # its heads' features in, partial sums out: all-reduce\n"
        "        \"up\": ColwiseParallel(), \"down\": RowwiseParallel()}  # 6.4's MLP pair\n"
        "q1.check(make_mesh, plan)"
    ),
)


TP_CASES = ((16, 32, 64, 2, 3), (12, 8, 48, 3, 1), (8, 128, 256, 1, 4))  # (batch, seq, hidden, dp, blocks)


def _check_tp_bytes(fn) -> None:
    from effitrain_helpers.training.device_mesh import tp_bytes_per_step

    if not callable(fn):
        raise Incorrect(tr("pass your function itself; you gave {fn!r}.", fn=fn))
    if hands_over_to(fn, tp_bytes_per_step):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="tp_bytes_per_step"))
    for batch, seq, hidden, dp, blocks in TP_CASES:
        got, want = fn(batch, seq, hidden, dp, blocks), tp_bytes_per_step(batch, seq, hidden, dp, blocks)
        if got == want:
            continue
        one = want // 6  # bytes of one all-reduce, every block
        named = {
            one * 2: tr("that is the forward's two all-reduces alone: backward adds one for the input gradient of "
                        "each column-wise layer (q, k, v and up)."),
            one * 4: tr("q, k and v are three layers here, each with its own input-gradient all-reduce in "
                        "backward (a fused qkv layer would need one)."),
            want * dp: tr("a tp group computes on its data-parallel share of the batch: batch / dp rows, not the "
                          "global batch."),
            want // 2: tr("the activations are float32 here: 4 bytes a value."),
        }
        raise Incorrect(tr("for batch {batch}, seq {seq}, hidden {hidden}, dp {dp} and {blocks} block(s) you give "
                           "{got!r} bytes; the tp dimension carries {want} per step. {detail}", batch=batch,
                           seq=seq, hidden=hidden, dp=dp, blocks=blocks, got=got, want=want,
                           detail=named.get(got, tr("count the all-reduces per block, forward and backward, and "
                                                    "the bytes of each."))))


q2 = Exercise(
    "7.2 q2: the bytes on the tp dimension",
    _check_tp_bytes,
    usage="q2.check(tp_bytes)",
    checked="checked on 3 shapes you did not see (dp 1 to 3, 1 to 4 blocks), to the byte.",
    hints=["Count, for one block and one step, the all-reduces that run on the tp group, and how big each is; "
           "the table above shows what to expect for the lesson's own model.",
           "Forward: one after each row-wise layer. Backward: one for the input gradient of each column-wise "
           "layer. Each carries the activations of this rank's rows of the batch.",
           "Count the row-wise and the column-wise layers of exercise 1's plan; each all-reduce carries the "
           "activations of the rows one tp group computes on (its data-parallel share of the global batch), "
           "in the dtype the lesson trains in. 'Bytes per rank, per dimension' above states the rule, and the "
           "table's tp (2) row is your function's answer for the lesson's own case."],
    solution_code=(
        "def tp_bytes(batch, seq, hidden, dp, blocks):\n"
        "    activations = 4 * (batch // dp) * seq * hidden  # float32 values of this rank's rows\n"
        "    all_reduces = 2 + 4  # forward: after out and down; backward: inputs of q, k, v and up\n"
        "    return activations * all_reduces * blocks\n\n\nq2.check(tp_bytes)"
    ),
)
