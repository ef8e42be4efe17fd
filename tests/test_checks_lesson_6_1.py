"""Lesson 6.1's checkers with the right answers and the wrong ones a learner writes (each run in real processes:
slow), the byte counter's deadlock notes, and a learner's function from a plain script (launch by value)."""

import importlib.util
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from effitrain_helpers.measure.all_reduce_cost import ring_all_reduce
from effitrain_helpers.processes.launch import _unimportable_module
from effitrain_helpers.teach.checks.lesson_6_1 import q1, q2, ring_or_reference
from effitrain_helpers.teach.exercises import ____
from verdicts import mistake, right



def _ring(tensor, gather_offset=1):
    """A ring all-reduce; ``gather_offset=0`` starts the all-gather from the wrong chunk (off by one)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, world)
    for phase, offset in (("reduce", 0), ("gather", gather_offset)):
        for step in range(world - 1):
            send, got = (rank - step + offset) % world, (rank - step - 1 + offset) % world
            incoming = torch.empty_like(chunks[got])
            request = dist.isend(chunks[send], (rank + 1) % world)
            dist.recv(incoming, (rank - 1) % world)
            request.wait()
            chunks[got].add_(incoming) if phase == "reduce" else chunks[got].copy_(incoming)


def _off_by_a_chunk(tensor):
    _ring(tensor, gather_offset=0)


def _collective(tensor):
    dist.all_reduce(tensor)


def _parameter_server(tensor):
    world, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        incoming = torch.empty_like(tensor)
        for peer in range(1, world):
            dist.recv(incoming, peer)
            tensor += incoming
        for peer in range(1, world):
            dist.send(tensor, peer)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)


def _deadlock(tensor):
    """Every rank sends first with a blocking send: nobody receives."""
    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, world)
    for step in range(world - 1):
        incoming = torch.empty_like(chunks[(rank - step - 1) % world])
        dist.send(chunks[(rank - step) % world], (rank + 1) % world)
        dist.recv(incoming, (rank - 1) % world)
        chunks[(rank - step - 1) % world].add_(incoming)


def _new_tensor(tensor):
    out = tensor.clone()
    ring_all_reduce(out)
    return out


def _two_halves(tensor):
    world = dist.get_world_size()
    padded = torch.nn.functional.pad(tensor, (0, -len(tensor) % world))
    share = torch.empty(len(padded) // world)
    dist.reduce_scatter_tensor(share, padded)
    dist.all_gather_into_tensor(padded, share)
    tensor.copy_(padded[:len(tensor)])


def _no_padding(tensor):
    share = torch.empty(len(tensor) // dist.get_world_size())
    dist.reduce_scatter_tensor(share, tensor)
    dist.all_gather_into_tensor(tensor, share)


def _shard_kept(tensor):
    world = dist.get_world_size()
    padded = torch.nn.functional.pad(tensor, (0, -len(tensor) % world))
    share = torch.empty(len(padded) // world)
    dist.reduce_scatter_tensor(share, padded)
    dist.all_gather_into_tensor(padded, share)


def _direct_exchange(tensor):
    """Same bytes as a ring, but no ring: rank r sends chunk j straight to rank j, then every completed chunk
    straight to every rank."""
    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, world)
    for phase in ("reduce", "gather"):
        requests, incoming = [], {}
        for peer in range(world):
            if peer != rank:
                requests.append(dist.isend(chunks[peer] if phase == "reduce" else chunks[rank], peer))
                incoming[peer] = torch.empty_like(chunks[rank] if phase == "reduce" else chunks[peer])
                requests.append(dist.irecv(incoming[peer], peer))
        for request in requests:
            request.wait()
        for peer, values in incoming.items():
            chunks[rank].add_(values) if phase == "reduce" else chunks[peer].copy_(values)


def _ring_the_other_way(tensor):
    """Right: the ring runs leftwards, and each step's send and receive are ordered by rank parity with
    blocking calls (no isend)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor, world))
    to, source = (rank - 1) % world, (rank + 1) % world
    for step in range(2 * (world - 1)):
        out, got = (rank + step) % world, (rank + step + 1) % world  # the same indices in both phases
        buffer = torch.zeros_like(chunks[got])
        if rank % 2 == 0:
            dist.send(chunks[out], to)
            dist.recv(buffer, source)
        else:
            dist.recv(buffer, source)
            dist.send(chunks[out], to)
        if step < world - 1:
            chunks[got] += buffer
        else:
            chunks[got][:] = buffer


def _ring_receive_first(tensor):
    """Right: each step posts its receive first (dist.irecv), then sends with a blocking dist.send; the chunks
    are slices cut by hand, and the two phases are one loop of 2 (N - 1) steps."""
    world, rank = dist.get_world_size(), dist.get_rank()
    base, extra = divmod(tensor.numel(), world)
    bounds = [0]
    for i in range(world):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    chunk = [tensor[bounds[i]:bounds[i + 1]] for i in range(world)]
    for step in range(2 * (world - 1)):
        reducing = step < world - 1
        shift = step if reducing else step - (world - 1) - 1
        send, got = (rank - shift) % world, (rank - shift - 1) % world
        buffer = torch.empty_like(chunk[got])
        request = dist.irecv(buffer, (rank - 1) % world)
        dist.send(chunk[send], (rank + 1) % world)
        request.wait()
        if reducing:
            chunk[got] += buffer
        else:
            chunk[got].copy_(buffer)


def _gathered_whole(tensor):
    """Gathers every rank's whole tensor and sums it locally; the reduce-scatter is made but its result unused."""
    world = dist.get_world_size()
    padded = torch.nn.functional.pad(tensor, (0, -len(tensor) % world))
    dist.reduce_scatter_tensor(torch.empty(len(padded) // world), padded)
    everything = torch.empty(world * len(tensor))
    dist.all_gather_into_tensor(everything, tensor)
    tensor.copy_(everything.view(world, -1).sum(0))


def _two_halves_with_lists(tensor):
    """Right: zeros concatenated as padding, the list forms of both halves."""
    world = dist.get_world_size()
    padded = torch.cat([tensor, tensor.new_zeros(-len(tensor) % world)])
    share = torch.empty(len(padded) // world)
    dist.reduce_scatter(share, list(padded.chunk(world)))
    pieces = [torch.empty_like(share) for _ in range(world)]
    dist.all_gather(pieces, share)
    tensor[:] = torch.cat(pieces)[:len(tensor)]


def _two_halves_into_a_new_buffer(tensor):
    """Right: the padding written into a zeroed buffer, the sum named explicitly, the gather into a new tensor."""
    world = dist.get_world_size()
    padded = torch.zeros(-(-len(tensor) // world) * world)
    padded[:len(tensor)] = tensor
    share = torch.empty(len(padded) // world)
    dist.reduce_scatter_tensor(share, padded, op=dist.ReduceOp.SUM)
    gathered = torch.empty_like(padded)
    dist.all_gather_into_tensor(gathered, share)
    tensor.copy_(gathered[:len(tensor)])


def test_an_unwritten_ring_is_measured_as_the_reference():
    def starter(tensor):
        return ____

    assert ring_or_reference(starter) is None and ring_or_reference(_ring) is _ring


@pytest.mark.slow
@pytest.mark.parametrize("fn, words", [
    pytest.param(_ring, None, marks=pytest.mark.exhaustive),  # the notebook's nbval run checks its solution
    mistake("6.1 q1", _collective, "your ring called dist.all_reduce"),
    mistake("6.1 q1", _parameter_server, "a parameter server, not a ring: in 3 processes rank 0 sent 64 bytes, 2 times "
                 "the tensor"),
    mistake("6.1 q1", _off_by_a_chunk, "off by a chunk"),
    mistake("6.1 q1", _deadlock, "deadlock in 2 processes: ranks 0, 1 each waited 5 s in a blocking dist.send"),
    mistake("6.1 q1", _new_tensor, "returned the sum but left the tensor unchanged"),
    mistake("6.1 q1", _direct_exchange, "not a ring: in 3 processes rank 0 sent to ranks [1, 2] and received from "
                 "ranks [1, 2]"),
    right("6.1 q1", _ring_the_other_way, None, marks=pytest.mark.exhaustive),
    right("6.1 q1", _ring_receive_first, None, marks=pytest.mark.exhaustive),
], ids=["right", "collective", "parameter-server", "off-by-a-chunk", "deadlock", "not-in-place", "direct-exchange",
        "right-leftwards-blocking", "right-receive-first"])
def test_q1_names_each_mistake(fn, words):
    result = q1.evaluate(fn)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    if words:
        assert words in result.message and "\n" not in result.message, result.message


@pytest.mark.slow
@pytest.mark.parametrize("fn, words", [
    pytest.param(_two_halves, None, marks=pytest.mark.exhaustive),  # so does the notebook
    mistake("6.1 q2", _collective, "you called dist.all_reduce"),
    mistake("6.1 q2", _no_padding, "pad the tensor with zeros to a multiple of N"),
    mistake("6.1 q2", _shard_kept, "came back unchanged"),
    mistake("6.1 q2", _gathered_whole, "rank 0 all-gathered 32 bytes for a tensor of 32, then summed on its own"),
    right("6.1 q2", _two_halves_with_lists, None),
    right("6.1 q2", _two_halves_into_a_new_buffer, None, marks=pytest.mark.exhaustive),
], ids=["right", "all-reduce", "no-padding", "not-copied-back", "gathered-whole", "right-list-forms",
        "right-new-buffer"])
def test_q2_names_each_mistake(fn, words):
    result = q2.evaluate(fn)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    if words:
        assert words in result.message, result.message


@pytest.mark.slow
def test_a_function_from_a_plain_script_is_judged(tmp_path, monkeypatch):
    """A learner's script loaded from its file (no module of that name on the workers' path) travels by value."""
    script = tmp_path / "my_ring_script.py"
    script.write_text("import torch\nimport torch.distributed as dist\n\n\n" + textwrap.dedent('''
        def ring_all_reduce(tensor):
            world, rank = dist.get_world_size(), dist.get_rank()
            chunks = torch.tensor_split(tensor, world)
            for offset in (0, 1):
                for step in range(world - 1):
                    send, got = (rank - step + offset) % world, (rank - step - 1 + offset) % world
                    incoming = torch.empty_like(chunks[got])
                    request = dist.isend(chunks[send], (rank + 1) % world)
                    dist.recv(incoming, (rank - 1) % world)
                    request.wait()
                    chunks[got].add_(incoming) if offset == 0 else chunks[got].copy_(incoming)
    '''))
    spec = importlib.util.spec_from_file_location("my_ring_script", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "my_ring_script", module)
    spec.loader.exec_module(module)
    assert _unimportable_module(module.ring_all_reduce) is module
    assert _unimportable_module(ring_all_reduce) is None  # the workbook's own module: by reference
    result = q1.evaluate(module.ring_all_reduce)
    assert result.status == "correct", result.message

