"""How many bytes does each process send, to whom, and which process is stuck waiting for which? (lesson 6.1)

Two measurements, from inside each process of a group:

- :class:`PointToPointCounter` wraps ``torch.distributed``'s point-to-point calls (``send``, ``recv``,
  ``isend``, ``irecv``) as Python code calls them: bytes sent and received, by peer, and the collectives called
  (named in :data:`COLLECTIVES`; they still run). A blocking wait (``send``, ``recv``, or ``wait()`` on the
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
    collectives: list[str] = field(default_factory=list)
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

        def recorded(*args, **kwargs):
            self.collectives.append(name)
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
