"""How many bytes does each process send, to whom, and which process is stuck waiting for which? (lesson 6.1)

Two measurements, from inside each process of a group:

- :class:`PointToPointCounter` wraps ``torch.distributed``'s point-to-point calls (``send``, ``recv``,
  ``isend``, ``irecv``) as Python code calls them: bytes and messages sent and received, by peer, and the
  collectives called (named in :data:`COLLECTIVES`; they still run), each with the bytes this rank put in. A blocking wait (``send``, ``recv``, or ``wait()`` on the
  request of ``isend`` / ``irecv``) gets a time limit: past it, :class:`PeerWaitTimeout` says what the rank
  waited for. While a rank waits, a one-line note of what it waits for sits in ``waiting_folder`` (when one
  is given), so that whoever ran the group can name every waiting rank after a deadlock
  (:func:`waiting_ranks`), even the ranks ended before their own limit came.
- :func:`bytes_written` reads what the kernel counted this process write, sockets included (``wchar`` of
  ``/proc/self/io``, Linux only): the bytes a C++ collective (gloo's ``all_reduce``) sent, which no Python
  wrapper sees, plus the transport's few headers and anything else the process writes at that time.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from effitrain_helpers.core.language import tr

# collectives a point-to-point exercise must not call (recorded, then run as usual)
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "scatter", "gather")
POINT_TO_POINT = ("send", "recv", "isend", "irecv")
# collective -> the argument holding what this rank puts in (a tensor or a list of tensors): its bytes are counted
CONTRIBUTIONS = {"all_reduce": "tensor", "broadcast": "tensor", "reduce": "tensor", "all_gather": "tensor",
                 "all_gather_into_tensor": "input_tensor", "reduce_scatter": "input_list",
                 "reduce_scatter_tensor": "input", "all_to_all": "input_tensor_list", "all_to_all_single": "input",
                 "scatter": "scatter_list", "gather": "tensor"}


def bytes_written() -> int | None:
    """Bytes this process has passed to write-like system calls so far (sockets included), or None where the
    kernel does not say (not Linux)."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class PeerWaitTimeout(RuntimeError):
    """A blocking point-to-point wait lasted longer than the counter's limit (the peer never answered)."""


@dataclass
class PointToPointCounter:
    """Counts the point-to-point traffic of this process while it is active (``with counter: ...``).

    ``wait_limit`` is the most seconds one blocking wait may take; ``waiting_folder`` (optional) is where
    the note ``rank{r}.waiting`` says what this rank waits for, while it waits.
    """

    wait_limit: float = 30.0
    waiting_folder: str | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    sends: int = 0
    sent_to: dict[int, int] = field(default_factory=dict)
    received_from: dict[int, int] = field(default_factory=dict)
    collectives: list[str] = field(default_factory=list)
    collective_bytes: list[tuple[str, int]] = field(default_factory=list)  # (name, bytes this rank put in)
    _originals: dict = field(default_factory=dict)

    def __enter__(self) -> "PointToPointCounter":
        import torch.distributed as dist

        for name in POINT_TO_POINT + COLLECTIVES:
            self._originals[name] = getattr(dist, name)
        dist.send = lambda *a, **k: self._blocking("isend", a, k)
        dist.recv = lambda *a, **k: self._blocking("irecv", a, k)
        dist.isend = lambda *a, **k: _LimitedWork(self, *self._start("isend", a, k))
        dist.irecv = lambda *a, **k: _LimitedWork(self, *self._start("irecv", a, k))
        for name in COLLECTIVES:
            setattr(dist, name, self._recorded(name))
        return self

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def _recorded(self, name: str):
        original = self._originals[name]
        signature = inspect.signature(original)

        def recorded(*args, **kwargs):
            self.collectives.append(name)
            given = signature.bind(*args, **kwargs).arguments.get(CONTRIBUTIONS[name])
            tensors = given if isinstance(given, (list, tuple)) else [] if given is None else [given]
            self.collective_bytes.append((name, sum(t.numel() * t.element_size() for t in tensors)))
            return original(*args, **kwargs)

        return recorded

    def _start(self, name: str, args: tuple, kwargs: dict):
        """Start ``isend`` or ``irecv``; count its bytes; return its request and what it is, in words."""
        original = self._originals[name]
        bound = inspect.signature(original).bind(*args, **kwargs).arguments
        tensor, peer = bound["tensor"], bound.get("dst", bound.get("src"))
        nbytes = tensor.numel() * tensor.element_size()
        if name == "isend":
            self.bytes_sent += nbytes
            self.sends += 1
            self.sent_to[peer] = self.sent_to.get(peer, 0) + nbytes
            what = f"send of {nbytes} bytes to rank {peer}"
        else:
            self.bytes_received += nbytes
            self.received_from[peer] = self.received_from.get(peer, 0) + nbytes
            what = f"receive of {nbytes} bytes from rank {peer}"
        return original(*args, **kwargs), what

    def _blocking(self, name: str, args: tuple, kwargs: dict) -> None:
        work, what = self._start(name, args, kwargs)
        self.wait(work, f"a blocking {what}")

    def wait(self, work, what: str) -> None:
        """Wait for ``work`` at most ``wait_limit`` seconds, with the note of ``what`` it is left meanwhile."""
        import torch.distributed as dist

        note = None
        if self.waiting_folder is not None:
            note = Path(self.waiting_folder) / f"rank{dist.get_rank()}.waiting"
            note.write_text(what)
        try:
            work.wait(timeout=timedelta(seconds=self.wait_limit))
        except RuntimeError as err:
            raise PeerWaitTimeout(tr("rank {rank} waited more than {wait_limit:g} s in {what} ({reason})", rank=dist.get_rank(),
                                     wait_limit=self.wait_limit, what=what, reason=str(err).splitlines()[0])) from None
        if note is not None:
            note.unlink(missing_ok=True)


class _LimitedWork:
    """The request of an ``isend`` / ``irecv``, whose ``wait()`` keeps to the counter's limit."""

    def __init__(self, counter: PointToPointCounter, work, what: str):
        self._counter, self._work, self._what = counter, work, what

    def wait(self, timeout=None) -> bool:
        self._counter.wait(self._work, f"a wait for the {self._what}")
        return True

    def __getattr__(self, name: str):
        return getattr(self._work, name)


def waiting_ranks(folder: str | os.PathLike) -> dict[int, str]:
    """What each rank was waiting for when the group stopped (the notes of :class:`PointToPointCounter`)."""
    notes = {}
    for note in Path(folder).glob("rank*.waiting"):
        notes[int(note.name[4:-len(".waiting")])] = note.read_text()
    return dict(sorted(notes.items()))


class CollectivesDisagree(RuntimeError):
    """The ranks' collective calls of one index differ (or a rank made none): ``index`` (0-based) and ``calls``,
    each rank's call as ``{"name", "peer", "numel"}``, or None for a rank that made no call in time."""

    def __init__(self, index: int, calls: dict[int, dict | None]):
        super().__init__(f"collective call {index} differs between the ranks: {calls}")
        self.index, self.calls = index, calls


# the argument naming a collective's root rank, where it has one
ROOTS = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst"}


@dataclass
class CollectiveAgreement:
    """While active (``with CollectiveAgreement(folder): ...``), every collective of :data:`COLLECTIVES` that
    this process calls is first compared with the other ranks' call of the same index: each rank writes what it
    calls (name, root rank, values put in) to ``folder`` and waits, at most ``wait_limit`` seconds, for every
    other rank's note. Calls that differ, or a rank that made no such call in time, raise
    :class:`CollectivesDisagree` at once, in every rank, before gloo is entered: a broadcast whose ``src``
    differs between the ranks would otherwise wait forever. Lesson 6.3's checker uses it."""

    folder: str
    wait_limit: float = 20.0
    calls: int = 0
    _originals: dict = field(default_factory=dict)

    def __enter__(self) -> "CollectiveAgreement":
        import torch.distributed as dist

        for name in COLLECTIVES:
            self._originals[name] = getattr(dist, name)
            setattr(dist, name, self._agreed(name))
        return self

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def _agreed(self, name: str):
        original = self._originals[name]
        signature = inspect.signature(original)

        def agreed(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            given = bound.get(CONTRIBUTIONS[name])
            tensors = given if isinstance(given, (list, tuple)) else [] if given is None else [given]
            peer = bound.get(ROOTS[name]) if name in ROOTS else None
            peer = int(peer) if isinstance(peer, (int, float)) or hasattr(peer, "__index__") else peer
            self.agree({"name": name, "peer": peer, "numel": sum(t.numel() for t in tensors)})
            return original(*args, **kwargs)

        return agreed

    def agree(self, call: dict) -> None:
        """Publish this rank's next ``call``; return once every rank published the same, else raise."""
        index = self.calls
        calls = self.exchange(call)
        if any(c != call for c in calls.values()):
            raise CollectivesDisagree(index, calls)

    def exchange(self, call: dict) -> dict[int, dict | None]:
        """Publish this rank's next ``call`` and return every rank's (None for a rank that published none
        within ``wait_limit`` seconds), without entering gloo. Lesson 8.4's checker compares all-to-all splits
        with it (they differ between ranks by design)."""
        import json
        import time

        import torch.distributed as dist

        rank, world, index = dist.get_rank(), dist.get_world_size(), self.calls
        self.calls += 1
        note, draft = (Path(self.folder) / f"call{index}.rank{rank}{end}" for end in ("", ".draft"))
        draft.write_text(json.dumps(call))
        draft.rename(note)  # whole or absent for the ranks that read it
        calls, deadline = {rank: call}, time.monotonic() + self.wait_limit
        while len(calls) < world and time.monotonic() < deadline:
            for other in range(world):
                path = Path(self.folder) / f"call{index}.rank{other}"
                if other not in calls and path.exists():
                    calls[other] = json.loads(path.read_text())
            time.sleep(0.002 if len(calls) < world else 0)
        return {r: calls.get(r) for r in range(world)}
