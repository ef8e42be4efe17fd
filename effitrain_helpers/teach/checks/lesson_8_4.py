"""Exercise of lesson 8.4 (experts): expert parallelism's dispatch and combine, written with
``torch.distributed.all_to_all_single`` (q1).

The learner writes ``dispatch(rows, expert, num_experts)`` returning ``(received, counts, plan)`` and
``combine(y, plan, gate, token, num_tokens)``. The checker runs them in 2 and then 3 real gloo processes on sizes
the lesson does not show (batches of different sizes per rank, experts dropping assignments past their capacity),
plays the experts itself between the two (chunk ``i`` of ``received``, ``counts.flatten()[i]`` rows long, through
local expert ``i % (E / world)``), and compares every rank's output with the one-process layer's. Before any
``all_to_all_single`` enters gloo, every rank's split sizes are compared (each rank publishes them in a folder):
sizes that do not match between sender and receiver are named at once instead of hanging or failing inside gloo.
"""

from __future__ import annotations

import tempfile

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import (Exercise, Incorrect, _unfinished, hands_over_to,
                                               run_learner_in_processes)

ATOL = 1e-5  # the same float32 products in the same order: equal in practice; 1e-5 leaves room for BLAS paths
WAIT_LIMIT = 10.0  # seconds a rank waits for the others' split sizes before calling it a mismatch
LAUNCH_TIMEOUT = 90.0
CASES = {  # processes -> the held-back layer: tokens per rank, d, hidden, experts, top_k, capacity factor
    # (with 3: rank 1 has one token, so it sends no row to its last experts; some splits are 0)
    2: {"tokens": (13, 7), "d": 5, "hidden": 6, "experts": 4, "top_k": 2, "capacity_factor": 1.0, "seed": 11},
    3: {"tokens": (9, 1, 11), "d": 3, "hidden": 4, "experts": 6, "top_k": 2, "capacity_factor": 1.5, "seed": 12},
}


def functions_or_reference(dispatch, combine) -> tuple:
    """The learner's ``(dispatch, combine)`` once both are written (no ``____`` left), else ``(None, None)``:
    the lesson's run then uses the workbook's :mod:`~effitrain_helpers.engines.experts` and says so."""
    return (None, None) if _unfinished(dispatch) or _unfinished(combine) else (dispatch, combine)


class _Splits:
    """While active, ``dist.all_to_all_single`` first publishes this rank's split sizes and compares them with
    every other rank's; a mismatch is recorded in ``problem`` and raised as ``RuntimeError`` before gloo."""

    def __init__(self, folder: str, num_experts: int):
        from effitrain_helpers.measure.traffic import CollectiveAgreement

        self.agreement = CollectiveAgreement(folder, WAIT_LIMIT)
        self.num_experts = num_experts
        self.problem: dict | None = None

    def __enter__(self):
        import torch.distributed as dist

        self.original = dist.all_to_all_single
        dist.all_to_all_single = self._checked
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist

        dist.all_to_all_single = self.original

    def _checked(self, output, input, output_split_sizes=None, input_split_sizes=None, **kwargs):
        import torch.distributed as dist

        world = dist.get_world_size()
        sizes = {}
        for name, tensor, given in (("in", input, input_split_sizes), ("out", output, output_split_sizes)):
            rows = tensor.shape[0]
            sizes[name] = [int(s) for s in given] if given else ([rows // world] * world if rows % world == 0
                                                                  else None)
            sizes[name + "_rows"], sizes[name + "_given"] = rows, bool(given)
        sizes["counts"] = not input.is_floating_point() and not input_split_sizes  # the counts' exchange
        sizes["numel"] = input.numel()  # E counts, as a vector or as a (world, E / world) matrix
        calls = self.agreement.exchange(sizes)
        self.problem = _mismatch(calls, self.num_experts)
        if self.problem:
            raise RuntimeError("all_to_all_single: split sizes do not match")  # the checker names it
        return self.original(output, input, output_split_sizes, input_split_sizes, **kwargs)


def _mismatch(calls: dict, num_experts: int) -> dict | None:
    """The first disagreement between the ranks' all-to-all sizes, or None; every rank finds the same one (so
    every rank stops, none enters gloo alone)."""
    if any(c is None for c in calls.values()):
        return {"kind": "missing", "ranks": [r for r, c in calls.items() if c is None]}
    for rank, mine in calls.items():
        if mine["counts"] and mine["numel"] != num_experts:
            return {"kind": "counts", "rank": rank, "rows": mine["numel"], "experts": num_experts}
    for rank, mine in calls.items():
        for name in ("in", "out"):
            if mine[name] is None:
                return {"kind": "indivisible", "side": name, "rows": mine[name + "_rows"], "world": len(calls)}
            if sum(mine[name]) != mine[name + "_rows"] or len(mine[name]) != len(calls):
                return {"kind": "sum", "side": name, "sizes": mine[name], "rows": mine[name + "_rows"]}
    for rank, mine in calls.items():
        for other, theirs in calls.items():
            if mine["out"][other] != theirs["in"][rank]:
                return {"kind": "pair", "rank": rank, "other": other, "expects": mine["out"][other],
                        "sent": theirs["in"][rank]}
    return None


def _run_in_ranks(dispatch, combine, case: dict, folder: str) -> dict:
    """In each rank: the learner's dispatch, the experts played by the checker, the learner's combine; what is
    needed to name a mistake."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.engines import experts
    from effitrain_helpers.training.expert_parallel import batch

    rank, world = dist.get_rank(), dist.get_world_size()
    layer = experts.MoELayer(case["d"], case["hidden"], case["experts"], case["top_k"], case["capacity_factor"],
                             seed=case["seed"]).requires_grad_(False)
    x = batch(rank, case["tokens"][rank], case["d"])
    routing = experts.route(x, layer.router, layer.top_k, layer.capacity_factor)
    rows = x[routing.token]
    shard = experts.ExpertShard(layer, rank, world).requires_grad_(False)
    report = {"rank": rank, "world": world}
    want_received, want_counts, _ = experts.dispatch(rows, routing.expert, case["experts"])  # before the learner's
    splits = _Splits(folder, case["experts"])  # one for both functions: its calls are numbered across them
    with splits:
        try:
            got = dispatch(rows.clone(), routing.expert.clone(), case["experts"])
        except RuntimeError:
            if splits.problem:
                return {**report, "splits": splits.problem, "step": "dispatch"}
            raise
    if not (isinstance(got, tuple) and len(got) == 3):
        return {**report, "form": "dispatch", "kind": type(got).__name__}
    received, counts, plan = got
    report["counts_ok"] = isinstance(counts, torch.Tensor) and counts.shape == want_counts.shape \
        and bool((counts == want_counts).all())
    report["want_counts"] = want_counts.tolist()
    report["counts"] = counts.tolist() if isinstance(counts, torch.Tensor) else repr(counts)
    if not report["counts_ok"] or not isinstance(received, torch.Tensor) \
            or tuple(received.shape) != tuple(want_received.shape):
        report["received_shape"] = tuple(getattr(received, "shape", ()))
        report["want_shape"] = tuple(want_received.shape)
        return report
    chunks = want_counts.reshape(-1).tolist()
    report["received_ok"] = all(_same_rows(a, b) for a, b in zip(received.split(chunks), want_received.split(chunks)))
    report["received_as_set"] = _same_rows(received, want_received)
    y = experts.run_experts(received, chunks, shard.w1, shard.w2)
    with splits:
        try:
            out = combine(y, plan, routing.gate.clone(), routing.token.clone(), x.shape[0])
            # a probe: experts that return their input, gates of 1: each token gets back its rows, summed
            probe = combine(received.clone(), plan, torch.ones_like(routing.gate), routing.token.clone(),
                            x.shape[0])
        except RuntimeError:
            if splits.problem:
                return {**report, "splits": splits.problem, "step": "combine"}
            raise
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
        return {**report, "form": "combine", "kind": tuple(getattr(out, "shape", ())) or type(out).__name__,
                "want": tuple(x.shape)}
    want = layer(x)[0]
    each = [experts.expert_ffn(r, layer.w1[e], layer.w2[e]) for r, e in zip(rows, routing.expert)]
    ungated = x.new_zeros(x.shape).index_add(0, routing.token, torch.stack(each) if each else rows)
    copies = torch.bincount(routing.token, minlength=x.shape[0])[:, None] * x
    close = lambda a, b: bool(torch.allclose(a, b, atol=ATOL))  # noqa: E731
    report.update({"out_ok": close(out, want), "ungated": close(out, ungated),
                   "returned_home": isinstance(probe, torch.Tensor) and probe.shape == x.shape and close(probe, copies),
                   "gap": float((out - want).abs().max()) if out.numel() else 0.0})
    return report


def _same_rows(a, b) -> bool:
    """Whether ``a`` and ``b`` hold the same rows, in any order."""
    import torch

    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    key = torch.arange(1, a.shape[1] + 1, dtype=a.dtype)
    return bool(torch.allclose(a[torch.argsort(a @ key)], b[torch.argsort(b @ key)]))


def _verdict(reports: list[dict], processes: int) -> None:
    """:class:`Incorrect` naming the first mistake seen in any rank, or nothing."""
    for r in reports:
        if r.get("step") == "dispatch":
            _splits_message(r["splits"], "dispatch", processes)
        if r.get("form") == "dispatch":
            raise Incorrect(tr("dispatch must return three things, (received, counts, plan); it returned "
                               "{kind}.", kind=r["kind"]))
    for r in reports:
        if not r["counts_ok"]:
            raise Incorrect(tr("in {processes} processes, rank {rank}'s counts were {counts}; they should be "
                               "{want}: counts[s][e] is the number of rows rank s sent to this rank's local "
                               "expert e, the counts the other ranks sent you (exchanged with "
                               "all_to_all_single before the rows).", processes=processes, rank=r["rank"],
                               counts=r["counts"], want=r["want_counts"]))
        if "received_ok" not in r:
            raise Incorrect(tr("in {processes} processes, rank {rank} received rows of shape {shape}; it should "
                               "receive {want}.", processes=processes, rank=r["rank"], shape=r["received_shape"],
                               want=r["want_shape"]))
    for r in reports:
        if r.get("step") == "combine":
            _splits_message(r["splits"], "combine", processes)
        if r.get("form") == "combine":
            raise Incorrect(tr("combine must return one row per token of this rank, shape {want}; it returned "
                               "{kind}.", want=r["want"], kind=r["kind"]))
    for r in reports:
        if not r["received_ok"]:
            raise Incorrect(tr("in {processes} processes, rank {rank}'s experts received the wrong rows: "
                               "all_to_all_single sends the first input_split_sizes[0] rows to rank 0, the next "
                               "input_split_sizes[1] to rank 1, and so on, so the rows must be sorted by expert "
                               "(experts are numbered rank by rank) before they are sent, and their order "
                               "kept for combine.", processes=processes, rank=r["rank"]))
    for r in reports:
        if r["out_ok"]:
            continue
        if r["ungated"]:
            raise Incorrect(tr("in {processes} processes, rank {rank}'s output is the experts' outputs summed "
                               "without their gates: multiply each row coming back by its gate (the router's "
                               "probability of that expert) before adding it to its token.",
                               processes=processes, rank=r["rank"]))
        if not r["returned_home"]:
            raise Incorrect(tr("in {processes} processes, rank {rank}'s rows did not return to their own "
                               "tokens (with experts that return their input and gates of 1, each token should get "
                               "back its own rows): they come back in the order dispatch sorted them, so undo the "
                               "permutation (the order you sorted by) before adding each row to its token.",
                               processes=processes, rank=r["rank"]))
        raise Incorrect(tr("in {processes} processes, rank {rank}'s output differs from the one-process layer by "
                           "up to {gap:.2e} (tolerance {atol:g}).", processes=processes, rank=r["rank"],
                           gap=r["gap"], atol=ATOL))


def _splits_message(problem: dict, step: str, processes: int) -> None:
    if problem["kind"] == "missing":
        raise Incorrect(tr("in {processes} processes, during {step}, ranks {ranks} made no all_to_all_single "
                           "call while the others waited in one: every rank must make the same calls, in the "
                           "same order.", processes=processes, step=step, ranks=problem["ranks"]))
    if problem["kind"] == "counts":
        raise Incorrect(tr("in {processes} processes, during {step}, rank {rank} exchanged {rows} counts: send one "
                           "count per expert ({experts}), zeros included for the experts it sends nothing to, so "
                           "that every rank receives the counts of its own experts.", processes=processes, step=step,
                           rank=problem["rank"], rows=problem["rows"], experts=problem["experts"]))
    if problem["kind"] == "indivisible":
        raise Incorrect(tr("in {processes} processes, during {step}, an all_to_all_single without split sizes "
                           "got {rows} rows, which {world} ranks do not divide: without sizes it splits evenly. "
                           "Pass output_split_sizes and input_split_sizes.", processes=processes, step=step,
                           rows=problem["rows"], world=problem["world"]))
    if problem["kind"] == "sum":
        side = "input_split_sizes" if problem["side"] == "in" else "output_split_sizes"
        raise Incorrect(tr("in {processes} processes, during {step}, {side} = {sizes} does not add up to the "
                           "tensor's {rows} rows (one size per rank, summing to its rows).",
                           processes=processes, step=step, side=side, sizes=problem["sizes"], rows=problem["rows"]))
    raise Incorrect(tr("in {processes} processes, during {step}, rank {rank} expected {expects} rows from rank "
                       "{other}, which sends it {sent}: the receive sizes must be what the other ranks send. Exchange "
                       "the counts first (an all_to_all_single of the counts per expert) and take "
                       "output_split_sizes from what you received.", processes=processes, step=step,
                       rank=problem["rank"], expects=problem["expects"], other=problem["other"],
                       sent=problem["sent"]))


def _check(dispatch, combine) -> None:
    from effitrain_helpers.engines import experts

    for fn, name in ((dispatch, "dispatch"), (combine, "combine")):
        if not callable(fn):
            raise Incorrect(tr("pass your two functions themselves: q1.check(dispatch, combine); {name} was {fn!r}.",
                               name=name, fn=fn))
        if hands_over_to(fn, getattr(experts, name)):
            raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                               "yourself (the exercise is what that function does).", name="experts." + name))
    for processes, case in CASES.items():
        with tempfile.TemporaryDirectory(prefix="effitrain-8-4-") as folder:
            try:
                reports = run_learner_in_processes(_run_in_ranks, dispatch, combine, case, folder,
                                                   processes=processes, timeout=LAUNCH_TIMEOUT)
            except TimeoutError:
                raise Incorrect(tr("in {processes} processes, your functions did not return within {limit:g} s "
                                   "(a rank waiting in a collective the others never called?).",
                                   processes=processes, limit=LAUNCH_TIMEOUT)) from None
        _verdict(reports, processes)


q1 = Exercise(
    "8.4 q1: expert parallelism's dispatch and combine with all_to_all_single",
    _check,
    usage="q1.check(dispatch, combine)",
    api=True,
    checked=("checked in 2 and 3 real processes on layers the lesson does not show (batches of different sizes, "
             "assignments dropped past capacity): the counts each rank received, the rows each expert received, "
             "and every rank's output equal to the one-process layer's."),
    hints=["Before rows can move, each rank must know how many it will receive from every other rank, so the "
           "counts travel first, in a small exchange of their own. The rows then travel grouped by destination. "
           "combine is the same trip back, after which each row must find its token again.",
           "torch.bincount with minlength counts the rows per expert; experts are numbered rank by rank, so those "
           "counts grouped per rank are what each rank is sent. torch.distributed.all_to_all_single exchanges "
           "equal slices by default, and uneven ones with output_split_sizes and input_split_sizes (lists of "
           "ints): pytorch.org/docs/stable/distributed.html.",
           "Sorting by expert is a permutation (torch.argsort, stable or not); keep it in the plan. On the way "
           "back the two lists of split sizes swap roles; then each row goes to the token it came from, times its "
           "gate, and the rows of one token add up (Tensor.index_add)."],
    solution_code=(
        "def dispatch(rows, expert, num_experts):\n"
        "    world = dist.get_world_size()\n"
        "    order = torch.argsort(expert)\n"
        "    send = torch.bincount(expert, minlength=num_experts)\n"
        "    recv = torch.empty_like(send)\n"
        "    dist.all_to_all_single(recv, send)\n"
        "    counts = recv.view(world, -1)\n"
        "    send_splits, recv_splits = send.view(world, -1).sum(1).tolist(), counts.sum(1).tolist()\n"
        "    received = rows.new_empty(sum(recv_splits), rows.shape[1])\n"
        "    dist.all_to_all_single(received, rows[order], recv_splits, send_splits)\n"
        "    return received, counts, (order, send_splits, recv_splits)\n"
        "\n\n"
        "def combine(y, plan, gate, token, num_tokens):\n"
        "    order, send_splits, recv_splits = plan\n"
        "    back = y.new_empty(sum(send_splits), y.shape[1])\n"
        "    dist.all_to_all_single(back, y, send_splits, recv_splits)\n"
        "    out = y.new_zeros(num_tokens, y.shape[1])\n"
        "    return out.index_add(0, token[order], gate[order, None] * back)\n"
        "\n\nq1.check(dispatch, combine)"
    ),
)


TOLERANCE_MIB = 0.01  # the answer is exact (109.375 MiB); one token or one value more is 0.027 MiB more
PREDICT = {"experts": 64, "top_k": 2, "capacity_factor": 1.25, "ranks": 8, "tokens": 4000, "d": 4096, "value": 2}
MIB = 2**20


def _check_prediction(capacity, forward_mib) -> None:
    """One expert's capacity and the MiB one rank sends in a forward (dispatch and combine, even routing, nothing
    dropped, the counts left out) for :data:`PREDICT`, from :func:`~effitrain_helpers.engines.experts.capacity`
    and :func:`~effitrain_helpers.training.expert_parallel.even_routing_bytes` (the lesson measured the rows
    sent against the same counting); the usual slips named."""
    import math

    from effitrain_helpers.engines.experts import capacity as capacity_of
    from effitrain_helpers.teach.exercises import as_number
    from effitrain_helpers.training.expert_parallel import VALUE, even_routing_bytes

    capacity, forward_mib = as_number(capacity), as_number(forward_mib)
    p = PREDICT
    want_capacity = capacity_of(p["tokens"], p["experts"], p["top_k"], p["capacity_factor"])
    share = p["capacity_factor"] * p["tokens"] * p["top_k"] / p["experts"]
    if capacity == math.floor(share) and capacity != want_capacity:
        raise Incorrect(tr("{got:g} rounds {share:g} down: an expert's buffer must hold the whole share, so the "
                           "capacity is rounded up (ceil).", got=capacity, share=share))
    if capacity == math.ceil(share / p["top_k"]):
        raise Incorrect(tr("{got:g} leaves out k: every token makes {k} assignments, so the experts share "
                           "tokens x k of them.", got=capacity, k=p["top_k"]))
    if capacity != want_capacity:
        raise Incorrect(tr("the capacity: {got:g} is not it. It is capacity factor x tokens x k / experts, "
                           "rounded up.", got=capacity))
    one_way = even_routing_bytes(p["tokens"], p["top_k"], p["d"], p["ranks"]) * p["value"] / VALUE / MIB
    near = lambda got, want: abs(got - want) <= TOLERANCE_MIB  # noqa: E731
    if near(forward_mib, 2 * one_way):
        return
    if near(forward_mib, one_way):
        raise Incorrect(tr("{got:g} MiB is half the answer: a forward sends the rows out (dispatch) and their "
                           "results back (combine), each the same number of rows, or k was left out.",
                           got=forward_mib))
    if near(forward_mib, 2 * one_way * p["ranks"] / (p["ranks"] - 1)):
        raise Incorrect(tr("{got:g} MiB counts every row, but the rows whose expert is on this rank stay "
                           "here: with even routing only (W - 1) / W of them leave.", got=forward_mib))
    if near(forward_mib, 4 * one_way):
        raise Incorrect(tr("{got:g} MiB is twice the answer: the rows travel in bfloat16, 2 bytes a value.",
                           got=forward_mib))
    raise Incorrect(tr("the bytes of one forward: {got:g} MiB is not it. Count the rows that leave the rank in "
                       "dispatch and come back in combine, d values of 2 bytes each.", got=forward_mib))


q2 = Exercise(
    "8.4 q2: predict an expert's capacity and the bytes one rank sends in a forward",
    _check_prediction,
    usage="q2.check(capacity, forward_mib)",
    checked=("checked against the workbook's capacity and its even-routing count of the rows sent, the counting "
             "the lesson measured, within 0.01 MiB."),
    hints=["The capacity is an even share of the assignments, stretched by the capacity factor. The bytes are "
           "the rows that leave the rank, out and back.",
           "Every token makes k assignments; with even routing a fraction (W - 1) / W of them goes to experts on "
           "other ranks; each row is d values. The section on bytes above counts the same things.",
           "A buffer cannot hold a fraction of a row: round the capacity the safe way. bfloat16 takes 2 bytes a "
           "value, and a MiB is 2**20 bytes."],
    solution_code=(
        "capacity = math.ceil(1.25 * 4000 * 2 / 64)\n"
        "forward_mib = 2 * 4000 * 2 * (8 - 1) / 8 * 4096 * 2 / 2**20\n"
        "q2.check(capacity, forward_mib)"
    ),
)
