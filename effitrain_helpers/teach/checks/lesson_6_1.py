"""Exercises of lesson 6.1 (collectives by hand): a ring all-reduce from point-to-point calls, and an all-reduce
from its two halves, each run in real processes and compared with ``torch.distributed.all_reduce``.

The checkers run the learner's function in 2 and 3 processes (gloo) on float32 tensors whose length the
number of processes does not divide, count the bytes every rank sends and the collectives it calls
(:class:`~effitrain_helpers.measure.traffic.PointToPointCounter`), and give every blocking wait a time limit,
so a deadlock ends as one line naming the waiting ranks.
"""

from __future__ import annotations

import tempfile

from effitrain_helpers.core.language import tr
from effitrain_helpers.teach.exercises import Exercise, Incorrect, _unfinished, run_learner_in_processes

RTOL = ATOL = 1e-5  # float32 sums in another order than gloo's differ by about 1e-7 relative
WAIT_LIMIT = 5.0  # seconds one blocking send / recv / wait may take before the checker calls it a deadlock
LENGTHS = {2: (7, 1001), 3: (8, 1000)}  # processes -> tensor lengths, none a multiple of the processes
LAUNCH_TIMEOUT = 120.0


def ring_or_reference(ring):
    """``ring`` if the learner has written it (no ``____`` left), else None: the measurement of the lesson
    then runs the workbook's reference ring and says so
    (:func:`~effitrain_helpers.measure.all_reduce_cost.compare_all_reduces`)."""
    return None if _unfinished(ring) else ring


def _run_in_ranks(fn, lengths: tuple, folder: str, wait_limit: float) -> dict:
    """In each rank: ``fn(tensor)`` on a float32 tensor of each length, watched (bytes, messages and peers of
    the sends and receives, collectives and the bytes put into each); gloo's sum of the same tensor."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.traffic import PointToPointCounter

    rank, world = dist.get_rank(), dist.get_world_size()
    runs, collectives = [], set()
    for numel in lengths:
        data = torch.randn(numel, generator=torch.Generator().manual_seed(7919 * rank + numel))
        want = data.clone()
        dist.all_reduce(want)  # the reference, before the counter watches
        work = data.clone()
        with PointToPointCounter(wait_limit=wait_limit, waiting_folder=folder) as counter:
            returned = fn(work)
        collectives |= set(counter.collectives)
        runs.append({"numel": numel, "input": data, "result": work, "want": want,
                     "returned": returned.detach().clone() if isinstance(returned, torch.Tensor) else None,
                     "sent": counter.bytes_sent, "messages": counter.sends, "to": _peers(counter.sent_to),
                     "from": _peers(counter.received_from), "collective_bytes": counter.collective_bytes})
    return {"rank": rank, "world": world, "runs": runs, "collectives": sorted(collectives)}


def _peers(by_peer: dict) -> list:
    """The ranks of ``by_peer`` in order, None (a receive from any rank) last."""
    return sorted(by_peer, key=lambda peer: (peer is None, peer or 0))


def _launch(fn, processes: int) -> list[dict]:
    """The learner's ``fn`` in ``processes`` ranks; a deadlock or a stuck rank as one :class:`Incorrect` line."""
    from effitrain_helpers.measure.traffic import waiting_ranks

    with tempfile.TemporaryDirectory(prefix="effitrain-6-1-") as folder:
        try:
            return run_learner_in_processes(_run_in_ranks, fn, LENGTHS[processes], folder, WAIT_LIMIT,
                                            processes=processes, timeout=LAUNCH_TIMEOUT)
        except (Incorrect, TimeoutError) as err:
            waiting = waiting_ranks(folder)
            if not waiting:
                if isinstance(err, TimeoutError):
                    raise Incorrect(tr("in {processes} processes, your function did not return within {limit:g} "
                                       "s (an endless loop?).", processes=processes, limit=LAUNCH_TIMEOUT)) from None
                raise
    ranks = ", ".join(str(r) for r in waiting)
    what = "; ".join(tr("rank {rank}: {what}", rank=r, what=w) for r, w in waiting.items())
    if len(waiting) == processes and all(w.startswith("a blocking send") for w in waiting.values()):
        raise Incorrect(tr("deadlock in {processes} processes: ranks {ranks} each waited {limit:g} s in a "
                           "blocking dist.send ({what}) while no rank was receiving. A blocking send returns "
                           "only once its peer has received: start the send with dist.isend, receive, then "
                           "wait for the send.", processes=processes, ranks=ranks, limit=WAIT_LIMIT, what=what))
    raise Incorrect(tr("in {processes} processes, ranks {ranks} were still waiting after {limit:g} s ({what}): "
                       "every send needs a matching receive in its peer, at the same step.",
                       processes=processes, ranks=ranks, limit=WAIT_LIMIT, what=what))


def _check_sums(ranks: list[dict]) -> None:
    """Every rank's tensor, in place, equals gloo's sum (to RTOL / ATOL); otherwise name what differs."""
    import torch

    for r in ranks:
        world = r["world"]
        for k, run in enumerate(r["runs"]):
            got, want = run["result"], run["want"]
            if torch.allclose(got, want, rtol=RTOL, atol=ATOL):
                continue
            numel, rank = run["numel"], r["rank"]
            returned = run["returned"]
            if torch.equal(got, run["input"]):
                if returned is not None and returned.shape == want.shape and torch.allclose(returned, want,
                                                                                            rtol=RTOL, atol=ATOL):
                    raise Incorrect(tr("your function returned the sum but left the tensor unchanged: it must sum "
                                       "in place (write into the tensor you were given, or into views of it)."))
                raise Incorrect(tr("rank {rank}'s tensor of {numel} values came back unchanged: the sum must be "
                                   "written into it, in place.", rank=rank, numel=numel))
            bad = _partial_chunks(got, [x["runs"][k]["input"] for x in ranks], world)
            if bad:
                raise Incorrect(tr("off by a chunk: in {world} processes, chunks {bad} of rank {rank}'s {world} "
                                   "hold only part of the sum (or another rank's chunk). A ring index is off: "
                                   "check which chunk each rank sends and which it adds into (or copies into) "
                                   "at each step of both phases.", world=world, bad=bad, rank=rank))
            gap = float((got - want).abs().max())
            raise Incorrect(tr("in {world} processes, rank {rank}'s result on {numel} values differs from "
                               "dist.all_reduce by up to {gap:.2e} (tolerance: rtol = atol = {tol:g}).",
                               world=world, rank=rank, numel=numel, gap=gap, tol=RTOL))


def _partial_chunks(got, inputs: list, world: int) -> list[int]:
    """The chunks of ``got`` that are wrong, when each wrong one holds a sum over only some of the ranks'
    ``inputs`` (what a wrong ring index leaves); [] when a wrong chunk is anything else."""
    import itertools

    import torch

    mine = torch.tensor_split(got, world)
    parts = [torch.tensor_split(x, world) for x in inputs]
    bad = []
    for i, chunk in enumerate(mine):
        full = sum(p[i] for p in parts)
        if torch.allclose(chunk, full, rtol=RTOL, atol=ATOL):
            continue
        subsets = (c for k in range(1, world) for c in itertools.combinations(range(world), k))
        if not any(torch.allclose(chunk, sum(parts[r][i] for r in s), rtol=RTOL, atol=ATOL) for s in subsets):
            return []
        bad.append(i)
    return bad


def _check_ring_bytes(ranks: list[dict]) -> None:
    """Every rank sent about 2(N-1)/N of the tensor (a ring), not rank 0 (N-1) times it (a parameter server)."""
    world = ranks[0]["world"]
    ring = 2 * (world - 1) / world
    for run_index, run in enumerate(ranks[0]["runs"]):
        size = run["numel"] * 4
        sent = [r["runs"][run_index]["sent"] for r in ranks]
        if world > 2 and sent[0] >= (world - 1) * size and all(s <= size for s in sent[1:]):
            raise Incorrect(tr("a parameter server, not a ring: in {world} processes rank 0 sent {first} bytes, "
                               "{times:.2g} times the tensor ({size} bytes), and the others {others}. A ring makes "
                               "every rank send the same 2(N-1)/N = {ring:.2f} times the tensor, in chunks of "
                               "1/N passed to its neighbour.", world=world, first=sent[0],
                               times=sent[0] / size, size=size, others=sent[1:], ring=ring))
        slack = 2 * (world - 1) * 4  # each of the 2(N-1) chunks may hold one value more or less than 1/N
        for rank, s in enumerate(sent):
            if abs(s - ring * size) > slack:
                raise Incorrect(tr("in {world} processes rank {rank} sent {sent} bytes for a tensor of {size}; a "
                                   "ring sends 2(N-1)/N x {size} = {want:.0f} bytes from every rank (N-1 chunks "
                                   "of about 1/N in each phase).", world=world, rank=rank, sent=s, size=size,
                                   want=ring * size))


def _check_ring_pattern(ranks: list[dict]) -> None:
    """Every rank sends only to one neighbour and receives only from the other (either way round the ring; a
    receive from any rank counts as from the other), one chunk per step: 2(N-1) messages. A direct exchange (rank r sends chunk j to rank j) moves the same
    bytes, but to every rank."""
    world = ranks[0]["world"]
    for r in ranks:
        rank = r["rank"]
        right, left = (rank + 1) % world, (rank - 1) % world
        for run in r["runs"]:
            side = {right: left, left: right}.get(run["to"][0]) if len(run["to"]) == 1 else None
            # a receive from any rank (None) can only get the other neighbour's chunk, the one rank sending here
            if side is None or not set(run["from"]) <= {side, None}:
                raise Incorrect(tr("not a ring: in {world} processes rank {rank} sent to ranks {to} and received "
                                   "from ranks {got}. In a ring every rank sends only to its neighbour on one "
                                   "side, (rank + 1) % N = {right}, and receives only from the other, (rank - 1) "
                                   "% N = {left}: each chunk travels around the ring.", world=world, rank=rank,
                                   to=run["to"], got=run["from"], right=right, left=left))
            if run["messages"] != 2 * (world - 1):
                raise Incorrect(tr("in {world} processes rank {rank} sent {n} messages for a tensor of {numel} "
                                   "values; a ring takes 2(N-1) = {steps} steps, one chunk passed to the "
                                   "neighbour at each (N-1 to sum, N-1 to share the sums).", world=world,
                                   rank=rank, n=run["messages"], numel=run["numel"], steps=2 * (world - 1)))


def _check_ring(fn) -> None:
    """Sums and bytes in 2, then 3 processes; then the ring's pattern in both (so that a parameter server, whose
    pattern in 2 processes is also wrong, is named by its bytes in 3)."""
    runs = []
    for processes in (2, 3):
        ranks = _launch(fn, processes)
        runs.append(ranks)
        used = sorted({c for r in ranks for c in r["collectives"]})
        if used:
            raise Incorrect(tr("your ring called {names}: a ring uses only dist.send, dist.recv, dist.isend "
                               "and dist.irecv (the collectives are what you are building).",
                               names=", ".join(f"dist.{c}" for c in used)))
        if not any(run["sent"] for r in ranks for run in r["runs"]):
            raise Incorrect(tr("no rank sent anything through dist.send or dist.isend: pass chunks to the next "
                               "rank with them (called as dist.send(...), so the checker sees them)."))
        _check_sums(ranks)
        _check_ring_bytes(ranks)
    for ranks in runs:
        _check_ring_pattern(ranks)


HALVES = {"reduce_scatter_tensor": ("reduce_scatter_tensor", "reduce_scatter"),
          "all_gather_into_tensor": ("all_gather_into_tensor", "all_gather")}  # each half, in either form


def _check_halves_bytes(ranks: list[dict]) -> None:
    """Every rank reduce-scatters its whole (padded) tensor and all-gathers only its 1/N share of the sum, not
    the whole tensor to sum locally (the same result, N times the bytes gathered)."""
    world = ranks[0]["world"]
    for r in ranks:
        for run in r["runs"]:
            size, share = run["numel"] * 4, -(-run["numel"] // world) * 4
            scattered = sum(b for name, b in run["collective_bytes"] if name in HALVES["reduce_scatter_tensor"])
            gathered = sum(b for name, b in run["collective_bytes"] if name in HALVES["all_gather_into_tensor"])
            if scattered < size:
                raise Incorrect(tr("rank {rank}'s reduce-scatter was given {got} bytes for a tensor of {size}: "
                                   "hand it the whole tensor (padded), so that each rank gets the sum of its "
                                   "share.", rank=r["rank"], got=scattered, size=size))
            if gathered > 1.5 * share:
                raise Incorrect(tr("rank {rank} all-gathered {got} bytes for a tensor of {size}, then summed on "
                                   "its own: that is gathering whole tensors, N times the traffic. The "
                                   "reduce-scatter already summed this rank's share: all-gather only that share "
                                   "({share} bytes from each rank).", rank=r["rank"], got=gathered, size=size,
                                   share=share))


def _check_two_halves(fn) -> None:
    ranks = _launch(fn, 3)
    used = sorted({c for r in ranks for c in r["collectives"]})
    if "all_reduce" in used:
        raise Incorrect(tr("you called dist.all_reduce: build it from its two halves, "
                           "dist.reduce_scatter_tensor then dist.all_gather_into_tensor."))
    missing = [half for half, forms in HALVES.items() if not set(forms) & set(used)]
    if missing:
        raise Incorrect(tr("your function never called {names}: the exercise is the two halves, "
                           "dist.reduce_scatter_tensor then dist.all_gather_into_tensor.",
                           names=", ".join(f"dist.{c}" for c in missing)))
    _check_halves_bytes(ranks)
    _check_sums(ranks)


def _padding_hint(fn) -> None:
    """:func:`_check_two_halves`, with the likely cause named when a rank raised on a length N does not divide."""
    try:
        _check_two_halves(fn)
    except Incorrect as err:
        if "raised" in str(err) and any(w in str(err).lower() for w in ("divisible", "size", "shape")):
            raise Incorrect(tr("{error} The lengths here ({lengths}) are not multiples of 3: pad the tensor with "
                               "zeros to a multiple of N first, and keep only the first numel values of the "
                               "result.", error=err, lengths=", ".join(map(str, LENGTHS[3])))) from None
        raise


q1 = Exercise(
    "6.1 q1: a ring all-reduce from send and receive, in 2 and 3 processes",
    _check_ring,
    usage="q1.check(ring_all_reduce)",
    api=True,
    checked=("checked in 2 and 3 processes: only send and receive used, every rank's tensor equal "
             "to gloo's sum, every rank sent 2(N-1)/N of the tensor in 2(N-1) messages, only to one "
             "neighbour, and received only from the other."),
    hints=["Cut the tensor into N chunks, one per rank. Phase 1 (reduce-scatter), N-1 steps: every rank passes "
           "one chunk to its right neighbour and adds the chunk arriving from its left into its own copy of that "
           "chunk; afterwards each rank holds the full sum of one chunk. Phase 2 (all-gather), N-1 more steps: "
           "pass the completed chunks around the same ring, copying instead of adding.",
           "torch.tensor_split(tensor, N) gives N views that write through into the tensor (lengths differ by at "
           "most one). dist.isend(chunk, dst) starts a send and returns a request whose wait() finishes it; "
           "dist.recv(buffer, src) blocks until the data arrived. Careful: if every rank starts with a blocking "
           "dist.send, all of them wait forever. Docs: torch.distributed, 'Point-to-point communication'.",
           "Work out, for step k of phase 1, which chunk this rank sends (it starts with its own, then the "
           "one it has just added into) and which one it receives (the left neighbour's choice); start the "
           "send, receive into a fresh buffer of that chunk's size, wait for the send, add. Phase 2 is the "
           "same loop, starting from the chunk this rank completed, copying instead of adding."],
    solution_code=(
        "def ring_all_reduce(tensor):\n"
        "    world, rank = dist.get_world_size(), dist.get_rank()\n"
        "    chunks = torch.tensor_split(tensor, world)\n"
        "    right, left = (rank + 1) % world, (rank - 1) % world\n"
        "    for step in range(world - 1):\n"
        "        send, got = (rank - step) % world, (rank - step - 1) % world\n"
        "        incoming = torch.empty_like(chunks[got])\n"
        "        request = dist.isend(chunks[send], right)\n"
        "        dist.recv(incoming, left)\n"
        "        request.wait()\n"
        "        chunks[got].add_(incoming)\n"
        "    for step in range(world - 1):\n"
        "        send, got = (rank - step + 1) % world, (rank - step) % world\n"
        "        incoming = torch.empty_like(chunks[got])\n"
        "        request = dist.isend(chunks[send], right)\n"
        "        dist.recv(incoming, left)\n"
        "        request.wait()\n"
        "        chunks[got].copy_(incoming)\n"
        "\n\nq1.check(ring_all_reduce)"
    ),
)
q2 = Exercise(
    "6.1 q2: all-reduce = reduce-scatter + all-gather, with torch's collectives, in 3 processes",
    _padding_hint,
    usage="q2.check(all_reduce_in_two)",
    api=True,
    checked=("checked in 3 processes: reduce_scatter_tensor and all_gather_into_tensor called, no "
             "all_reduce, the whole tensor reduce-scattered and only a 1/N share all-gathered, and "
             "every rank's tensor equal to gloo's sum, for lengths not divisible by 3."),
    hints=["An all-reduce is its two halves: after a reduce-scatter each rank holds the sum of its 1/N share; an "
           "all-gather then gives every rank every share. Both need a length that N divides.",
           "dist.reduce_scatter_tensor(output, input) sums input over the ranks and leaves rank r's share in "
           "output (input has N times output's length); dist.all_gather_into_tensor(output, input) concatenates "
           "every rank's input into output. Pad with torch.nn.functional.pad(x, (0, extra)). Docs: "
           "torch.distributed, 'Collective functions'.",
           "Pad the tensor up to the next multiple of the world size, reduce-scatter it into an empty share "
           "of 1/N of that length, all-gather the shares back into the padded tensor, and copy its first "
           "values (the tensor's own length) into the tensor, in place."],
    solution_code=(
        "def all_reduce_in_two(tensor):\n"
        "    world = dist.get_world_size()\n"
        "    padded = torch.nn.functional.pad(tensor, (0, -len(tensor) % world))\n"
        "    share = torch.empty(len(padded) // world)\n"
        "    dist.reduce_scatter_tensor(share, padded)\n"
        "    dist.all_gather_into_tensor(padded, share)\n"
        "    tensor.copy_(padded[:len(tensor)])\n"
        "\n\nq2.check(all_reduce_in_two)"
    ),
)
