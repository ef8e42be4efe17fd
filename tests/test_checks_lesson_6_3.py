"""Lesson 6.3's checkers with right and wrong answers (q2 runs the learner's class in real processes: slow),
and the lesson's ZeRO stages by hand against plain AdamW (slow)."""

import subprocess
import sys
import textwrap

import pytest

from effitrain_helpers.teach.checks import lesson_6_3
from effitrain_helpers.teach.checks.lesson_6_3 import q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.training.zero import balanced_owners


def _round_robin(sizes, world_size):
    return [i % world_size for i in range(len(sizes))]


def _halves(sizes, world_size):
    per = -(-len(sizes) // world_size)
    return [i // per for i in range(len(sizes))]


@pytest.mark.parametrize("assign, words", [
    (balanced_owners, None),
    (_round_robin, "unbalanced"),
    (_halves, "unbalanced"),
    (lambda sizes, world_size: [0] * len(sizes), "owns nothing"),
    (lambda sizes, world_size: [world_size] * len(sizes), "does not exist"),
    (lambda sizes, world_size: [0], "one owner per tensor"),
    (lambda sizes, world_size: None, "one rank (an int) per tensor"),
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


class _Right:
    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = balanced_owners([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, o in zip(self.params, self.owners) if o == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **defaults)

    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            dist.broadcast(p.data, src=owner)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


class _NoBroadcast(_Right):
    def step(self):
        self.optimizer.step()


class _EveryoneStepsEverything(_Right):
    def __init__(self, params, optimizer_class, **defaults):
        super().__init__(params, optimizer_class, **defaults)
        self.optimizer = optimizer_class(self.params, **defaults)


class _Overlap(_Right):
    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        super().__init__(params, optimizer_class, **defaults)
        if self.owners[0] != dist.get_rank():  # a second rank steps the first tensor too
            self.optimizer.add_param_group({"params": [self.params[0]]})


class _Missing(_Right):
    def __init__(self, params, optimizer_class, **defaults):
        import torch.distributed as dist

        self.params = list(params)
        self.owners = balanced_owners([p.numel() for p in self.params], dist.get_world_size())
        mine = [p for p, o in zip(self.params[1:], self.owners[1:]) if o == dist.get_rank()]
        self.optimizer = optimizer_class(mine, **defaults)


class _ZeroGradOwnShare(_Right):
    def zero_grad(self):
        self.optimizer.zero_grad()


class _BroadcastOnlyOnOwner(_Right):
    def step(self):
        import torch.distributed as dist

        self.optimizer.step()
        for p, owner in zip(self.params, self.owners):
            if owner == dist.get_rank():
                dist.broadcast(p.data, src=owner)


@pytest.mark.slow
@pytest.mark.parametrize("cls, words", [
    (_Right, None),
    (_NoBroadcast, "weights differ after step 1"),
    (_EveryoneStepsEverything, "no memory is saved"),
    (_Overlap, "shares overlap"),
    (_Missing, "in no rank's share"),
    pytest.param(_ZeroGradOwnShare, "clear every parameter's gradient", marks=pytest.mark.exhaustive),
])
def test_q2_names_each_wrong_sharded_optimizer(cls, words):
    result = q2.evaluate(cls)
    assert result.status == ("correct" if words is None else "incorrect"), result.message
    assert words is None or words in result.message, result.message


@pytest.mark.slow
def test_q2_names_the_stuck_ranks_of_a_broadcast_only_the_owner_calls(monkeypatch):
    monkeypatch.setattr(lesson_6_3, "TIMEOUT", 20.0)
    result = q2.evaluate(_BroadcastOnlyOnOwner)
    assert result.status == "incorrect"
    assert "still running: ranks [" in result.message and "every rank must call broadcast" in result.message


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
    from effitrain_helpers.training.zero import theory, zero_stages

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
