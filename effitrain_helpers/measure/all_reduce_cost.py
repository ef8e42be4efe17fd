"""What does an all-reduce cost each rank: a ring, gloo's own, a parameter server? (lesson 6.1, ``effitrain
collectives``)

:func:`compare_all_reduces` runs three ways of summing a float32 tensor over N real processes, over tensor
sizes, in one launch: a ring written with point-to-point calls (the learner's, or :func:`ring_all_reduce`
here), ``torch.distributed.all_reduce`` (gloo), and :func:`parameter_server_all_reduce` (everything to rank
0 and back). For each rank and size: the median time of a few repeats (each started together after a
barrier), the bytes the rank sent, and the theory. Bytes are measured twice where possible: counted at the
Python calls (:class:`~effitrain_helpers.measure.traffic.PointToPointCounter`; gloo's C++ collective is
invisible there) and as written to the sockets (:func:`~effitrain_helpers.measure.traffic.bytes_written`,
Linux: all three, with the transport's headers).

Theory, for a tensor of S bytes and N ranks: a ring sends 2(N-1)/N x S from every rank (reduce-scatter, then
all-gather, N-1 steps of 1/N each); a parameter server makes rank 0 send (N-1) x S and every other rank S.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from effitrain_helpers.core.language import msg, number, tr

METHODS = (msg("ring"), "gloo all_reduce", msg("parameter server"))  # keys; language.term shows them translated
# What the lesson's table of the rows is labelled with (language.styled shows them in the learner's language)
TABLE_TERMS = (*METHODS, msg("method"), msg("numel"), msg("socket_bytes"), msg("theory_bytes"))
NEEDS_A_GROUP = msg(": an all-reduce needs at least 2 processes")
MAX_NUMEL = 100_000_000  # 400 MB per tensor and rank, copied a few times: plenty for a laptop
TOLERANCE = 1e-5  # largest |difference| from gloo's sum accepted, relative to the sum's largest |value|


def ring_all_reduce(tensor) -> None:
    """The workbook's reference ring: sum ``tensor`` in place over the group with ``isend`` / ``recv`` only
    (measured when the learner's ring is not written yet; ``effitrain collectives``)."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(world - 1):
            offset = 0 if phase == "reduce-scatter" else 1
            send, got = (rank - step + offset) % world, (rank - step - 1 + offset) % world
            incoming = torch.empty_like(chunks[got])
            request = dist.isend(chunks[send], right)
            dist.recv(incoming, left)
            request.wait()
            chunks[got].add_(incoming) if phase == "reduce-scatter" else chunks[got].copy_(incoming)


def parameter_server_all_reduce(tensor) -> None:
    """Sum ``tensor`` in place through rank 0: every rank sends it the whole tensor, rank 0 adds them up and
    sends the sum back to each (the way before the ring)."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        incoming = torch.empty_like(tensor)
        for peer in range(1, world):
            dist.recv(incoming, peer)
            tensor.add_(incoming)
        requests = [dist.isend(tensor, peer) for peer in range(1, world)]
        for request in requests:
            request.wait()
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)


def parse_lengths(text: str) -> list[int]:
    """Tensor lengths from '1000,100000' (the command line's ``--sizes``), each a whole number in 1..MAX_NUMEL."""
    from effitrain_helpers.core.validate import positive_int

    out = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = item.strip()
        out.append(positive_int("--sizes", value, maximum=MAX_NUMEL, example="--sizes 1000,100000"))
    return out


def theory_bytes_sent(method: str, nbytes: int, world: int, rank: int) -> float:
    """Bytes rank ``rank`` of ``world`` sends to all-reduce a tensor of ``nbytes`` with ``method``."""
    if method not in METHODS:
        raise ValueError(tr("method={method!r} is not one of {methods}.", method=method, methods=', '.join(METHODS)))
    if method == "parameter server":
        return float(nbytes * (world - 1) if rank == 0 else nbytes)
    return 2 * (world - 1) / world * nbytes  # gloo's all_reduce on CPU tensors is a ring too (measured below)


def _one_rank(ring: Callable, sizes: list[int], repeats: int) -> list[dict]:
    """In each rank: every method on every size, checked against gloo's sum, counted once, then timed."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.measure.traffic import PointToPointCounter, bytes_written

    rank, world = dist.get_rank(), dist.get_world_size()
    ways = {"ring": ring, "gloo all_reduce": dist.all_reduce, "parameter server": parameter_server_all_reduce}
    rows = []
    for numel in sizes:
        data = torch.randn(numel, generator=torch.Generator().manual_seed(1000 * rank + numel))
        want = data.clone()
        dist.all_reduce(want)
        for method, fn in ways.items():
            work = data.clone()
            dist.barrier()
            before = bytes_written()
            with PointToPointCounter() as counter:
                fn(work)
            after = bytes_written()
            scale = float(want.abs().max()) or 1.0
            times = []
            for _ in range(repeats):
                work = data.clone()
                dist.barrier()
                start = time.perf_counter()
                fn(work)
                times.append(time.perf_counter() - start)
            rows.append({"method": method, "numel": numel, "rank": rank, "world": world,
                         "seconds": statistics.median(times), "times": times,
                         "counted_bytes": counter.bytes_sent if method != "gloo all_reduce" else None,
                         "socket_bytes": None if before is None else after - before,
                         "theory_bytes": theory_bytes_sent(method, numel * 4, world, rank),
                         "error": float((work - want).abs().max()) / scale})
    return rows


def compare_all_reduces(ring: Callable | None = None, sizes: list[int] | tuple = (1_000, 100_000, 1_000_000),
                        processes: int = 2, repeats: int = 5, timeout: float = 300.0) -> dict:
    """The three all-reduces measured in ``processes`` real processes: ``{"rows": one dict per method, size
    and rank (seconds, times, counted_bytes, socket_bytes, theory_bytes, error), "ring": "yours" or
    "reference", "notes": [lines to show], "busy": why timings may lie, or ""}``.

    ``ring`` is the learner's ``ring_all_reduce``; None measures the reference :func:`ring_all_reduce` instead
    (said in the notes).
    """
    from effitrain_helpers.core.validate import positive_int
    from effitrain_helpers.measure.bench import busy_reason, unreliable_advice
    from effitrain_helpers.processes.launch import launch, resolve_num_processes

    world = resolve_num_processes(processes, minimum=2, name="processes", why=NEEDS_A_GROUP)
    positive_int("repeats", repeats, example="repeats=5")
    sizes = [positive_int("sizes", s, maximum=MAX_NUMEL, example="sizes=(1000, 100000)") for s in sizes]
    notes, which = [], msg("yours")
    if ring is None:
        notes.append(tr("the ring measured is the workbook's reference ring_all_reduce (no ring of yours was "
                        "given, or it still holds ____)."))
        ring, which = ring_all_reduce, msg("reference")
    busy = busy_reason(threads=world)
    rows = [row for ranks in launch(_one_rank, ring, sizes, repeats, num_processes=world, cpu=True, quiet=True,
                                    threads_per_process=1, timeout=timeout) for row in ranks]
    wrong = [r for r in rows if r["error"] > TOLERANCE]
    if wrong:
        notes.append(tr("{method} gave sums off by up to {error:.1e} (relative) from gloo's: its times and "
                        "bytes are of a wrong answer.", method=wrong[0]["method"],
                        error=max(r["error"] for r in wrong)))
    if busy:
        notes.append(tr("the machine looks busy ({busy}): timings may be unreliable; {advice}", busy=busy,
                        advice=unreliable_advice()))
    return {"rows": rows, "ring": which, "notes": notes, "busy": busy}



def cost_table(cost: dict) -> str:
    """:func:`compare_all_reduces`'s result as lines of text: per size, method and rank, the median time and the
    bytes sent (to the sockets, counted at the Python calls, and in theory), then the notes."""
    rows = cost["rows"]
    world = rows[0]["world"]
    head = tr("{size:>10} {method:<17} {rank:>4} {ms:>9} {sockets:>12} {counted:>12} {theory:>12}",
              size=tr("values"), method=tr("method"), rank=tr("rank"), ms=tr("ms"), sockets=tr("sockets (B)"),
              counted=tr("counted (B)"), theory=tr("theory (B)"))
    lines = [tr("all-reduce of float32 tensors in {world} processes (gloo), ring: {ring}", world=world,
                ring=tr(cost["ring"])), head]
    show = lambda v: "-" if v is None else number(v, ",.0f")  # noqa: E731
    for r in sorted(rows, key=lambda r: (r["numel"], METHODS.index(r["method"]), r["rank"])):
        lines.append(f"{number(r['numel'], '>10,')} {tr(r['method']):<17} {r['rank']:>4} "
                     f"{number(r['seconds'] * 1e3, '>9.2f')} "
                     f"{show(r['socket_bytes']):>12} {show(r['counted_bytes']):>12} {show(r['theory_bytes']):>12}")
    lines += [tr("theory: a ring sends 2(N-1)/N of the tensor from every rank; a parameter server, N-1 times it "
                 "from rank 0 and once from every other rank.")]
    return "\n".join(lines + [tr("note: {note}", note=n) for n in cost["notes"]])
