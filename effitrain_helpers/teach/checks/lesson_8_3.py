"""Exercises of lesson 8.3 (sequence and context parallelism): the merge of two partial attentions by their
log-sum-exps (q1) and one hop of the ring (q2).

q1 runs the learner's ``merge(out_a, lse_a, out_b, lse_b)`` in this process on partial attentions of sizes the
lesson does not show (keys split unevenly, one case with scores near 100), against attention over all the keys.
q2 runs the learner's ``ring_step(k, v)`` in 3 real processes (with 2, the rank before and the rank after are the
same one, so a wrong neighbour would pass), twice in a row, each call watched by a clock: a step that has not
returned within ``STEP_SECONDS`` is a deadlock, and a second run with 2 processes tells a wrong neighbour (which
works there) from blocking calls in a deadlock-prone order (which hang there too). The lesson's own ``merge`` and
``ring_step`` are refused as answers.
"""

from __future__ import annotations

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, _unfinished, hands_over_to

ATOL = 1e-5
MERGE_CASES = ((3, 20, 5, 7), (1, 9, 12, 2), (2, 16, 4, 11))  # (batch, n queries, d, keys in the first part)
LARGE = 30.0  # queries scaled so scores reach about 100: exp(lse) overflows float32
STEP_WORLD, STEP_SECONDS, BLOCK = 3, 10.0, (2, 6, 4)


def answer_or_reference(answer, reference):
    """``answer`` once the learner has written it (no ``____`` left), else the workbook's ``reference`` (the
    lesson then says which one ran)."""
    return reference if _unfinished(answer) else answer


def _partials(batch: int, n: int, d: int, first: int, seed: int, scale: float = 1.0):
    """Queries against ``2 * first + 3`` keys: the attention over the first ``first`` keys, over the others, and
    over all of them, each as ``(out, lse)``."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n, d, generator=generator) * scale
    k, v = (torch.randn(batch, 2 * first + 3, d, generator=generator) for _ in range(2))

    def attend(keys, values):
        s = q @ keys.transpose(1, 2) / d ** 0.5
        return torch.softmax(s, -1) @ values, s.logsumexp(-1)

    return attend(k[:, :first], v[:, :first]), attend(k[:, first:], v[:, first:]), attend(k, v)


def _run_merge(merge, a, b):
    import torch

    got = merge(a[0].clone(), a[1].clone(), b[0].clone(), b[1].clone())
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
        raise Incorrect(tr("merge must return a pair (out, lse) of tensors; it returned {kind}.",
                           kind=type(got).__name__))
    out, lse = got
    if tuple(out.shape) != tuple(a[0].shape) or tuple(lse.shape) != tuple(a[1].shape):
        raise Incorrect(tr("for partials of shapes {out_shape} and {lse_shape} the merge must return the same "
                           "shapes; yours were {out} and {lse}.", out_shape=tuple(a[0].shape),
                           lse_shape=tuple(a[1].shape), out=tuple(out.shape), lse=tuple(lse.shape)))
    return out.detach(), lse.detach()


def _close(x, y) -> bool:
    import torch

    return bool(torch.allclose(x, y, atol=ATOL, rtol=1e-4))


def _name_the_merge_mistake(a, b, out, lse, want, want_lse) -> None:
    """:class:`Incorrect` naming the likely mistake behind a wrong merge, when one is seen."""
    import torch

    if _close(out, a[0] + b[0]) or _close(out, (a[0] + b[0]) / 2):
        raise Incorrect(tr("the two outputs were added (or averaged) without rescaling: each partial is "
                           "normalised over its own keys only, so weigh each by its share of the whole, "
                           "exp(lse_part - lse), before adding."))
    if _close(lse, torch.maximum(a[1], b[1])):
        raise Incorrect(tr("the merged log-sum-exp is the larger of the two, not their log-sum-exp: "
                           "log(exp(lse_a) + exp(lse_b)) is larger than both (torch.logaddexp computes it "
                           "without overflow)."))
    if _close(lse, want_lse):
        swapped = a[0] * torch.exp(b[1] - want_lse)[..., None] + b[0] * torch.exp(a[1] - want_lse)[..., None]
        if _close(out, swapped):
            raise Incorrect(tr("the weights are swapped: out_a must be weighted by exp(lse_a - lse) and out_b by "
                               "exp(lse_b - lse)."))
        raise Incorrect(tr("the log-sum-exp is right but the output is not: out = out_a * exp(lse_a - lse) + "
                           "out_b * exp(lse_b - lse), with lse the merged one (one weight per query: add a last "
                           "dimension to broadcast over d)."))


def _check_merge(merge) -> None:
    from effitrain_helpers.engines import ring_attention

    if not callable(merge):
        raise Incorrect(tr("pass your function itself: q1.check(merge); you gave {fn!r}.", fn=merge))
    if hands_over_to(merge, ring_attention.merge):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="merge"))
    for seed, (batch, n, d, first) in enumerate(MERGE_CASES):
        a, b, (want, want_lse) = _partials(batch, n, d, first, seed)
        out, lse = _run_merge(merge, a, b)
        if not (_close(out, want) and _close(lse, want_lse)):
            _name_the_merge_mistake(a, b, out, lse, want, want_lse)
            raise Incorrect(tr("(batch, n, d) = {shape}: your merge differs from attention over all the keys by up "
                               "to {gap:.1e} in the output and {lse_gap:.1e} in the log-sum-exp (tolerance "
                               "{atol:g}).", shape=(batch, n, d), gap=float((out - want).abs().max()),
                               lse_gap=float((lse - want_lse).abs().max()), atol=ATOL))
    a, b, (want, want_lse) = _partials(2, 8, 4, 5, 99, LARGE)
    out, lse = _run_merge(merge, a, b)
    if not (out.isfinite().all() and lse.isfinite().all()):
        raise Incorrect(tr("with scores near 100 your merge gives inf or NaN: exp(lse) overflows float32 (past "
                           "88.7). Work with differences, exp(lse_a - lse), where lse comes from torch.logaddexp "
                           "(or subtract the larger of the two first)."))
    if not (_close(out, want) and _close(lse, want_lse)):
        raise Incorrect(tr("with scores near 100 your merge is off by up to {gap:.1e}: compute the weights as "
                           "exp(lse_part - lse), never as exp(lse_part) / (exp(lse_a) + exp(lse_b)).",
                           gap=float((out - want).abs().max())))


q1 = Exercise(
    "8.3 q1: merge two partial attentions by their log-sum-exps",
    _check_merge,
    usage="q1.check(merge)",
    api=True,
    checked=("checked on partial attentions the lesson does not show (keys split unevenly, three shapes, one case "
             "with scores near 100): output and log-sum-exp equal to attention over all the keys."),
    hints=["Each partial output is a softmax-weighted average over its own keys only. Ask what share of the "
           "whole softmax each part holds: that share is what each output must be weighted by.",
           "The log-sum-exp of a part is the log of the sum of exp(score) over its keys. The sums of two parts "
           "add up to the sum over all keys; lesson 8.1's online softmax rescaled its running sum the same way.",
           "Keep everything in log space so nothing overflows: torch.logaddexp, and a weight per query that "
           "broadcasts over the last dimension of the output."],
    solution_code=(
        "def merge(out_a, lse_a, out_b, lse_b):\n"
        "    lse = torch.logaddexp(lse_a, lse_b)\n"
        "    out = out_a * torch.exp(lse_a - lse)[..., None] + out_b * torch.exp(lse_b - lse)[..., None]\n"
        "    return out, lse\n"
        "\n\nq1.check(merge)"
    ),
)


def _block(rank: int, which: int):
    """Rank ``rank``'s key (``which`` 0) or value (1) block for the check: every value encodes who made it."""
    import torch

    return torch.full(BLOCK, 10.0 * rank + 5.0 * which) + torch.arange(BLOCK[1])[None, :, None] * 0.01


def _source(t) -> tuple[int, int] | None:
    """``(rank, which)`` that made ``t`` with :func:`_block`, or None when it is not such a block."""
    import torch

    if tuple(t.shape) != BLOCK or t.dtype != torch.float32 or not torch.isfinite(t).all():
        return None
    base = float(t.reshape(-1)[0])
    if not 0 <= base < 10.0 * STEP_WORLD:
        return None
    rank, rest = divmod(round(base / 5.0), 2)
    made = _block(rank, rest)
    return (rank, rest) if torch.equal(t, made) else None


def _step_worker(ring_step) -> dict:
    """In each rank: two calls of the learner's ``ring_step``, each given ``STEP_SECONDS`` (in a thread: a hung
    call raises TimeoutError); what each received, and whether the blocks sent were left as they were."""
    import threading

    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    k, v = _block(rank, 0), _block(rank, 1)
    received = []
    for _ in range(2):
        box: dict = {}
        sent = (k.clone(), v.clone())

        def call(k=k, v=v, box=box):
            try:
                box["value"] = ring_step(k, v)
            except BaseException as err:  # reported by the rank, below
                box["error"] = err

        dist.barrier()
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(STEP_SECONDS)
        if thread.is_alive():
            raise TimeoutError(f"ring_step did not return within {STEP_SECONDS:g} s")
        if "error" in box:
            raise box["error"]
        got = box["value"]
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
            return {"rank": rank, "kind": type(got).__name__}
        if not (k.equal(sent[0]) and v.equal(sent[1])):
            return {"rank": rank, "overwritten": True}
        received.append(tuple(_source(t) for t in got))
        k, v = got
    return {"rank": rank, "received": received}


def _launch_steps(ring_step, processes: int):
    """The workers' results, or ``"hung"`` when a step did not return in time."""
    from effitrain_helpers.processes.launch import RankFailed, launch

    try:
        return launch(_step_worker, ring_step, num_processes=processes, cpu=True, quiet=True, timeout=120)
    except RankFailed as err:
        if err.exc_type == "TimeoutError":
            return "hung"
        raise Incorrect(tr("in the {processes} processes, rank {rank} raised {exc_type}: {message}",
                           processes=processes, rank=err.rank, exc_type=err.exc_type,
                           message=str(err).splitlines()[0].split(": ", 1)[-1])) from None


def _check_step(ring_step) -> None:
    from effitrain_helpers.engines import ring_attention

    if not callable(ring_step):
        raise Incorrect(tr("pass your function itself: q2.check(ring_step); you gave {fn!r}.", fn=ring_step))
    if hands_over_to(ring_step, ring_attention.ring_step):
        raise Incorrect(tr("your function hands the work to {name}, the lesson's own answer: write the rule "
                           "yourself (the exercise is what that function does).", name="ring_step"))
    results = _launch_steps(ring_step, STEP_WORLD)
    if results == "hung":
        if _launch_steps(ring_step, 2) == "hung":
            raise Incorrect(tr("deadlock: your ring step did not return within {seconds:g} s, with 2 processes as "
                               "with 3. Every rank waits in a blocking send (or receive) for a peer that is itself "
                               "waiting: post the send and the receive together (dist.isend and dist.irecv, then "
                               "wait on both), or order them so one side of each pair receives first.",
                               seconds=STEP_SECONDS))
        raise Incorrect(tr("wrong neighbour: your ring step works with 2 processes (where the rank before and the "
                           "rank after are the same) but hangs with 3. Send to (rank + 1) % world and receive "
                           "from (rank - 1) % world."))
    for result in results:
        rank = result["rank"]
        if "kind" in result:
            raise Incorrect(tr("ring_step must return the pair (k, v) it received; it returned {kind}.",
                               kind=result["kind"]))
        if result.get("overwritten"):
            raise Incorrect(tr("your step changed the block it sent (rank {rank}'s k or v): receive into new "
                               "tensors (torch.empty_like) and leave the ones you send alone.", rank=rank))
        after = (rank + 1) % STEP_WORLD
        for hop, got in enumerate(result["received"], start=1):
            want = ((rank - hop) % STEP_WORLD, 0), ((rank - hop) % STEP_WORLD, 1)
            if got == want:
                continue
            if got == (want[1], want[0]):
                raise Incorrect(tr("k and v arrive swapped: return them in the order (k, v)."))
            if hop == 1 and got == ((after, 0), (after, 1)):
                raise Incorrect(tr("wrong neighbour: the blocks travel the wrong way round the ring (rank {rank} "
                                   "received rank {after}'s). Send to (rank + 1) % world and receive from "
                                   "(rank - 1) % world.", rank=rank, after=after))
            if hop == 1 and got == ((rank, 0), (rank, 1)):
                raise Incorrect(tr("rank {rank} got its own block back: nothing travelled. Send it to the next "
                                   "rank and return what the previous one sent.", rank=rank))
            if None in got:
                raise Incorrect(tr("rank {rank} returned tensors that hold no rank's block: receive into them and "
                                   "wait for each request (request.wait()) before returning them.", rank=rank))
            raise Incorrect(tr("after {hop} step(s) rank {rank} holds the block of rank {got}; it should hold rank "
                               "{want}'s (one hop per step: from rank - 1).", hop=hop, rank=rank,
                               got=got[0][0], want=want[0][0]))


q2 = Exercise(
    "8.3 q2: one step of the ring, with send and receive",
    _check_step,
    usage="q2.check(ring_step)",
    api=True,
    checked=("checked in 3 real processes, two steps in a row, each with a 10 s clock: every rank receives the "
             "previous rank's key and value blocks, leaves its own untouched, and no call waits forever (a "
             "deadlock is told from a wrong neighbour by a second run in 2 processes)."),
    hints=["In a ring every rank does the same thing at once: give its block to the rank after it and take the "
           "block of the rank before it. Think about what each rank is waiting for while it sends.",
           "A blocking send waits until the peer receives; if every rank sends first, nobody is receiving. "
           "torch.distributed has non-blocking point-to-point calls that return a request to wait on "
           "(the 'Point-to-point communication' section of torch.distributed's documentation).",
           "The neighbours wrap round: the rank after the last one is rank 0. Receive into fresh tensors of "
           "the same shape as the ones you send."],
    solution_code=(
        "def ring_step(k, v):\n"
        "    rank, world = dist.get_rank(), dist.get_world_size()\n"
        "    k_in, v_in = torch.empty_like(k), torch.empty_like(v)\n"
        "    requests = [dist.isend(k, (rank + 1) % world), dist.isend(v, (rank + 1) % world),\n"
        "                dist.irecv(k_in, (rank - 1) % world), dist.irecv(v_in, (rank - 1) % world)]\n"
        "    for request in requests:\n"
        "        request.wait()\n"
        "    return k_in, v_in\n"
        "\n\nq2.check(ring_step)"
    ),
)
