"""Lesson 6.3's checkers with right and wrong answers (q2 runs the learner's class in real processes: slow),
and the lesson's ZeRO stages by hand against plain AdamW (slow)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from effitrain_helpers.teach.checks import lesson_6_3
from effitrain_helpers.teach.checks.lesson_6_3 import q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.engines import zero
from effitrain_helpers.engines.zero import balanced_owners
from verdicts import mistake, right



def _round_robin(sizes, world_size):
    return [i % world_size for i in range(len(sizes))]


def _halves(sizes, world_size):
    per = -(-len(sizes) // world_size)
    return [i // per for i in range(len(sizes))]


def _in_the_order_given(sizes, world_size):
    """Greedy, but not largest first."""
    loads, owners = [0] * world_size, []
    for size in sizes:
        rank = loads.index(min(loads))
        owners.append(rank)
        loads[rank] += size
    return owners


def _largest_first(sizes, world_size):
    """Right: the lesson's rule in a loop, as a learner writes it. An independent copy of
    zero.balanced_owners on purpose: the checker refuses balanced_owners itself, so q1's right answers are
    learners' own code (and the spellings differ: reverse=True, loads.index(min(loads)))."""
    loads, owners = [0] * world_size, [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        rank = loads.index(min(loads))
        owners[i] = rank
        loads[rank] += sizes[i]
    return owners


def _with_a_heap(sizes, world_size):
    """Right, another way: a heap of (load, rank), the sizes sorted as (size, index) pairs."""
    import heapq

    heap, owners = [(0, r) for r in range(world_size)], [None] * len(sizes)
    for size, i in sorted(((s, i) for i, s in enumerate(sizes)), reverse=True):
        load, rank = heapq.heappop(heap)
        owners[i] = rank
        heapq.heappush(heap, (load + size, rank))
    return owners


@pytest.mark.parametrize("assign, words", [
    right("6.3 q1", _largest_first, None),
    right("6.3 q1", _with_a_heap, None),
    mistake("6.3 q1", balanced_owners, "hands the work to balanced_owners, the lesson's own assignment"),
    mistake("6.3 q1", lambda sizes, world_size: balanced_owners(sizes, world_size), "hands the work to balanced_owners"),
    mistake("6.3 q1", _in_the_order_given, "in the order the tensors come"),
    mistake("6.3 q1", _round_robin, "unbalanced"),
    mistake("6.3 q1", _halves, "unbalanced"),
    mistake("6.3 q1", lambda sizes, world_size: [0] * len(sizes), "owns nothing"),
    mistake("6.3 q1", lambda sizes, world_size: [world_size] * len(sizes), "does not exist"),
    mistake("6.3 q1", lambda sizes, world_size: [0], "one owner per tensor"),
    mistake("6.3 q1", lambda sizes, world_size: None, "one rank (an int) per tensor"),
])
def test_q1_names_each_wrong_assignment(assign, words):
    result = q1.evaluate(assign)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


def test_starter_code_is_not_attempted():
    def assign_owners(sizes, world_size):
        return ____

    class ShardedOptimizer:
        def step(self):
            return ____

    assert q1.evaluate(assign_owners).status == "not attempted"
    assert q2.evaluate(ShardedOptimizer).status == "not attempted"
    assert "pass your class itself" in q2.evaluate(object()).message


# q2's wrong answers below are the lesson's own ZeRO-1 (zero.ShardedOptimizer, judged right in SHARDED) with one
# thing changed, which each one's name says.


class _SubclassesOptimizer(torch.optim.Optimizer):
    """Right, another way: a torch.optim.Optimizer whose inner optimizer is not called self.optimizer, owners by
    a heap, zero_grad inherited."""

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        params = list(params)
        super().__init__(params, defaults)
        self.owners = _with_a_heap([p.numel() for p in params], dist.get_world_size())
        self.inner = optimizer_class([p for p, o in zip(params, self.owners) if o == dist.get_rank()], **defaults)

    @torch.no_grad()
    def step(self, closure=None):
        import torch.distributed as dist

        self.inner.step()
        for p, owner in zip(self.param_groups[0]["params"], self.owners):
            dist.broadcast(p, owner)


class _FlatSlices:
    """Right, another way: each rank owns one flat slice of all the values (a new parameter), stepped, then
    every slice all-gathered and copied back. Its flattening and padding are a learner's own on purpose (not
    zero.py's helpers): a right answer the engine did not write."""

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        world, rank = dist.get_world_size(), dist.get_rank()
        self.per = -(-sum(p.numel() for p in self.params) // world)
        self.piece = torch.nn.Parameter(self._flat([p.detach() for p in self.params])[rank * self.per:][:self.per])
        self.adam = optimizer_class([self.piece], **defaults)

    def _flat(self, tensors):
        import torch.distributed as dist

        flat = torch.cat([t.reshape(-1) for t in tensors])
        return torch.nn.functional.pad(flat, (0, self.per * dist.get_world_size() - len(flat))).clone()

    def step(self):
        import torch.distributed as dist

        rank = dist.get_rank()
        self.piece.grad = self._flat([p.grad for p in self.params])[rank * self.per:][:self.per]
        self.adam.step()
        gathered = torch.empty(self.per * dist.get_world_size())
        dist.all_gather_into_tensor(gathered, self.piece.detach())
        with torch.no_grad():
            sizes = [p.numel() for p in self.params]
            for p, values in zip(self.params, gathered[:sum(sizes)].split(sizes)):
                p.copy_(values.view_as(p))

    def zero_grad(self):
        for p in self.params:
            p.grad = None


class _DefaultsDropped(zero.ShardedOptimizer):
    def __init__(self, params, optimizer_class, **defaults):
        super().__init__(params, optimizer_class, **defaults)
        self.optimizer = optimizer_class(self.optimizer.param_groups[0]["params"])


class _RoundRobin(zero.ShardedOptimizer):
    """Owners by position, whatever the sizes: on weights and biases that alternate, 2 ranks hold 94% / 6%."""

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = [i % dist.get_world_size() for i in range(len(self.params))]
        mine = [p for p, o in zip(self.params, self.owners) if o == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **defaults)


class _BroadcastFromRank0(zero.ShardedOptimizer):
    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        for p in self.params:
            dist.broadcast(p.data, src=0)


class _OwnersDifferBetweenRanks(zero.ShardedOptimizer):
    """Each rank turns the owners by its own rank: the ranks disagree on every src."""

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        super().__init__(params, optimizer_class, **defaults)
        self.owners = [(o + dist.get_rank()) % dist.get_world_size() for o in self.owners]


class _AdamWWrittenIn(zero.ShardedOptimizer):
    """Ignores optimizer_class: AdamW written in."""

    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = balanced_owners([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, o in zip(self.params, self.owners) if o == dist.get_rank()]
        self.optimizer = torch.optim.AdamW(mine, **defaults)


class _NoBroadcast(zero.ShardedOptimizer):
    def step(self):
        self.optimizer.step()


class _EveryoneStepsEverything(zero.ShardedOptimizer):
    def __init__(self, params, optimizer_class, **defaults):
        super().__init__(params, optimizer_class, **defaults)
        self.optimizer = optimizer_class(self.params, **defaults)


class _Overlap(zero.ShardedOptimizer):
    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        super().__init__(params, optimizer_class, **defaults)
        if self.owners[0] != dist.get_rank():  # a second rank steps the first tensor too
            self.optimizer.add_param_group({"params": [self.params[0]]})


class _Missing(zero.ShardedOptimizer):
    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = balanced_owners([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, o in zip(self.params[1:], self.owners[1:]) if o == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **defaults)


class _ZeroGradOwnShare(zero.ShardedOptimizer):
    def zero_grad(self):
        self.optimizer.zero_grad()


class _BroadcastOnlyOnOwner(zero.ShardedOptimizer):
    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            if owner == dist.get_rank():
                dist.broadcast(p.data, src=owner)


SHARDED = {  # class -> None (right) or words of its message
    _SubclassesOptimizer: None,
    _FlatSlices: None,
    zero.ShardedOptimizer: None,  # the lesson's reference
    _DefaultsDropped: "AdamW with its own default settings, not with lr=0.02, weight_decay=0.1",
    _RoundRobin: "Balance the shares by size",
    _BroadcastFromRank0: "never changed, although rank 1 stepped it",
    _OwnersDifferBetweenRanks: "collective calls differ at call 11: rank 0: broadcast(src=0)",
    _AdamWWrittenIn: "never built an optimizer from optimizer_class",
    _NoBroadcast: "weights differ after step 1",
    _EveryoneStepsEverything: "no memory is saved",
    _Overlap: "shares overlap",
    _Missing: "in no rank's share",
    _ZeroGradOwnShare: "clear every parameter's gradient",
    _BroadcastOnlyOnOwner: "collective calls differ at call 11",
}


@pytest.fixture(scope="module")
def sharded_verdicts() -> dict:
    """Every class of SHARDED judged in one launch of 2 processes (and the right ones in one of 3): class ->
    its verdict."""
    return dict(zip(SHARDED, lesson_6_3.judge_sharded_optimizers(list(SHARDED))))


def _q2_case(cls):
    """A right class written another way, or a named mistake (the lesson's own class: neither)."""
    if cls is zero.ShardedOptimizer:
        return pytest.param(cls, id=cls.__name__)
    return (right if SHARDED[cls] is None else mistake)("6.3 q2", cls, id=cls.__name__)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [_q2_case(cls) for cls in SHARDED])
def test_q2_judges_right_and_wrong_sharded_optimizers_by_what_they_do(cls, sharded_verdicts):
    """Right ones in three forms accepted, each wrong one named (all judged in one launch: the fixture)."""
    words, verdict = SHARDED[cls], sharded_verdicts[cls]
    if words is None:
        assert verdict is None, (cls.__name__, verdict)
    else:
        assert verdict is not None and words in str(verdict), (cls.__name__, verdict)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_q2_check_runs_one_class_in_2_and_3_processes():
    assert q2.evaluate(_SubclassesOptimizer).status == "correct"
    result = q2.evaluate(_RoundRobin)
    assert result.status == "incorrect" and "in 2 processes the ranks keep" in result.message, result.message


@pytest.mark.slow
def test_q2_judges_a_class_defined_in_a_script(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(textwrap.dedent('''
        import torch.distributed as dist
        from effitrain_helpers.teach.checks.lesson_6_3 import q2

        class ShardedOptimizer:
            def __init__(self, params, optimizer_class, **defaults):
                self.params = list(params)
                self.optimizer = optimizer_class(self.params[dist.get_rank()::dist.get_world_size()],
                                                 **defaults)

            def step(self):
                self.optimizer.step()

            def zero_grad(self):
                for p in self.params:
                    p.grad = None

        print(q2.evaluate(ShardedOptimizer).message)
    '''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "weights differ after step 1" in done.stdout, done.stdout


@pytest.mark.slow
@pytest.mark.exhaustive  # the notebook's self-checks run the same under nbval
def test_zero_stages_by_hand_hold_their_share_and_train_adamws_weights():
    from effitrain_helpers.processes.launch import launch
    from effitrain_helpers.training.model_sharding import sharding_batches
    from effitrain_helpers.training.zero_stages import theory, zero_stages

    ranks = launch(zero_stages, sharding_batches(2, 8), num_processes=2, cpu=True, quiet=True, timeout=180)
    for r in ranks:
        got, plain = r["results"], r["results"]["AdamW, averaged gradients"]["bytes"]
        assert all(v["gap"] <= 1e-6 for v in got.values()), {k: v["gap"] for k, v in got.items()}
        for stage in ("ZeRO-1 by hand", "ZeRO-2 by hand", "ZeroRedundancyOptimizer"):
            assert got[stage]["bytes"]["optimizer state"] < 0.6 * plain["optimizer state"]
        assert got["ZeRO-1 by hand"]["bytes"]["optimizer state"] == got["ZeroRedundancyOptimizer"]["bytes"][
            "optimizer state"]
        zero2 = theory("ZeRO-2 by hand", 2, r["unit_values"], r["bucket_values"])
        assert got["ZeRO-2 by hand"]["bytes"]["gradients, peak"] == zero2["gradients, peak"]  # 1/N + one bucket
        assert got["ZeRO-2 by hand"]["bytes"]["gradients, peak"] < plain["gradients, peak"]
        assert got["ZeRO-2 by hand"]["bytes"]["parameters, between steps"] == zero2["parameters, between steps"]
        units = [4 * sum(u) for u in r["unit_values"]]
        shards = sum(4 * -(-sum(u) // 2) for u in r["unit_values"])
        assert got["ZeRO-3 by hand"]["bytes"]["parameters, peak"] <= shards + max(units) + 4
    comm = ranks[0]["results"]["ZeRO-2 by hand"]["communication"]
    assert comm["reduce_scatter"] == comm["all_gather"] >= 4 * sum(ranks[0]["tensor_values"])
    for stage in ("ZeRO-1 by hand", "ZeroRedundancyOptimizer"):  # every weight broadcast once, counted
        assert ranks[0]["results"][stage]["communication"]["broadcast"] == 4 * sum(ranks[0]["tensor_values"])


class _Shards:
    """q3's solution, as a learner writes it: its padding and slicing are its own on purpose, independent of
    zero.py's flat_pieces, which the checker's reference slices use (_ShardsFromPieces below uses the engine's)."""

    def __init__(self, model, bucket_bytes):
        import torch.distributed as dist

        from effitrain_helpers.engines.gradient_sync import gradient_buckets

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.buckets = gradient_buckets(model.parameters(), bucket_bytes)
        self.chunks = [-(-sum(p.numel() for p in b) // self.world) for b in self.buckets]
        self.shards, self.arrived = [None] * len(self.buckets), [0] * len(self.buckets)
        for b, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, b=b: self.arrive(b))

    def arrive(self, b):
        self.arrived[b] += 1
        if self.arrived[b] < len(self.buckets[b]):
            return
        self.arrived[b] = 0
        self.send(b)

    def send(self, b):
        import torch
        import torch.distributed as dist

        flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[b]])
        padded = torch.zeros(self.world * self.chunks[b])
        padded[:flat.numel()] = flat
        mine = torch.empty(self.chunks[b])
        dist.reduce_scatter_single(mine, padded)
        self.shards[b] = self.scale(mine)
        self.free(b)

    def scale(self, mine):
        return mine / self.world

    def free(self, b):
        for p in self.buckets[b]:
            p.grad = None


class _ShardsFromPieces(_Shards):
    """Right, written another way (zero.py's): a reduce_scatter of a list of pieces, views of the gradients
    where they can be, averaged in place."""

    def send(self, b):
        import torch

        from effitrain_helpers.engines.zero import reduce_scatter_gradients

        out = torch.empty(self.chunks[b])
        reduce_scatter_gradients(out, self.buckets[b], self.world)
        self.shards[b] = out
        self.free(b)


class _ShardsThroughTheTensorApi(_Shards):
    """Right, written another way: padded with torch.nn.functional.pad, reduce_scatter_tensor (the older name of
    reduce_scatter_single, deprecated but still in torch), averaged in place, and the hook a named function."""

    def __init__(self, model, bucket_bytes):
        import torch.distributed as dist

        from effitrain_helpers.engines.gradient_sync import gradient_buckets

        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.buckets = gradient_buckets(model.parameters(), bucket_bytes)
        self.chunks = [(sum(p.numel() for p in b) + self.world - 1) // self.world for b in self.buckets]
        self.shards, self.arrived = [None for _ in self.buckets], [0 for _ in self.buckets]

        def hook_for(b):
            def hook(p):
                self.arrive(b)
            return hook

        for b, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(hook_for(b))

    def send(self, b):
        import torch
        import torch.distributed as dist

        flat = torch.cat([p.grad.flatten() for p in self.buckets[b]])
        padded = torch.nn.functional.pad(flat, (0, self.world * self.chunks[b] - flat.numel()))
        mine = padded.new_empty(self.chunks[b])
        dist.reduce_scatter_tensor(mine, padded, op=dist.ReduceOp.SUM)
        self.shards[b] = mine.div_(self.world)
        self.free(b)


class _NoFree(_Shards):
    def free(self, b):
        pass


class _NoDivide(_Shards):
    def scale(self, mine):
        return mine


class _AllReduce(_Shards):
    def send(self, b):
        import torch
        import torch.distributed as dist

        flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[b]])
        dist.all_reduce(flat)
        self.shards[b] = (flat / self.world)[self.rank * self.chunks[b]:(self.rank + 1) * self.chunks[b]]
        self.free(b)


class _NeverReset(_Shards):
    def arrive(self, b):
        self.arrived[b] += 1
        if self.arrived[b] == len(self.buckets[b]):
            self.send(b)


class _FreedAtTheEnd(_Shards):
    def free(self, b):
        if b == len(self.buckets) - 1:  # the last bucket: only now every full gradient goes
            for bucket in self.buckets:
                for p in bucket:
                    p.grad = None


class _NoHooks(_Shards):
    def __init__(self, model, bucket_bytes):
        super().__init__(model, bucket_bytes)
        self.arrive = lambda b: None  # the hooks call self.arrive: nothing is sent in backward


@pytest.mark.slow
@pytest.mark.parametrize("cls, words", [
    (_Shards, None),
    right("6.3 q3", _ShardsFromPieces, None),
    right("6.3 q3", _ShardsThroughTheTensorApi, None, marks=pytest.mark.exhaustive),
    mistake("6.3 q3", _NoFree, "still hold their full gradient"),
    mistake("6.3 q3", _NoDivide, "divide by the world size", marks=pytest.mark.exhaustive),
    mistake("6.3 q3", _AllReduce, "called all_reduce", marks=pytest.mark.exhaustive),
    mistake("6.3 q3", _NeverReset, "start each bucket's count again"),
    mistake("6.3 q3", _FreedAtTheEnd, "bytes of gradients during backward"),
    mistake("6.3 q3", _NoHooks, "from the hooks", marks=pytest.mark.exhaustive),
])
def test_q3_names_each_wrong_in_backward_reduce_scatter(cls, words):
    from effitrain_helpers.teach.checks.lesson_6_3 import q3

    result = q3.evaluate(cls)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


def test_q3_starter_is_not_attempted():
    from effitrain_helpers.teach.checks.lesson_6_3 import q3

    class GradientShards:
        def __init__(self, model, bucket_bytes):
            ____

    assert q3.evaluate(GradientShards).status == "not attempted"
    assert "pass your class itself" in q3.evaluate(object()).message
