"""Lesson 6.2's checkers, each run in 2 real processes: the right answer, and every wrong version a learner
would write, each recognised with its own message. The wrong versions are built inside functions, so they
travel to the workers by value, as a notebook's or a script's functions do.

Each check is one launch (about 5 s on a quiet 2-core CPU; q2's right answers two, in 2 and 3 processes): the
default tier runs the right answer, one wrong version per exercise (q2: also the literal world size) and one right
answer written another way for q1, the ``exhaustive`` tier every other version."""

import subprocess
import sys
import textwrap

import pytest

from effitrain_helpers.teach.checks import lesson_6_2 as l62
from verdicts import mistake, right

EXHAUSTIVE = [pytest.mark.exhaustive]  # every further wrong version: one launch each



def broadcasts():
    import torch
    import torch.distributed as dist

    def right(model):
        for p in model.parameters():
            dist.broadcast(p.data, src=0)

    def forgotten(model):  # no broadcast: ranks differ at step 0
        pass

    def copies(model):  # broadcast into a copy: nothing changes
        for p in model.parameters():
            dist.broadcast(p.detach().clone(), src=0)

    def summed(model):  # all_reduce instead of broadcast: the sum of the replicas
        for p in model.parameters():
            dist.all_reduce(p.data)

    def from_rank_1(model):
        for p in model.parameters():
            dist.broadcast(p.data, src=1)

    def first_layer_only(model):
        for p in model[0].parameters():
            dist.broadcast(p.data, src=0)

    def under_no_grad(model):  # also right
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)

    def the_parameter_itself(model):  # also right: a collective writes a leaf that requires grad, no_grad or not
        for p in model.parameters():
            dist.broadcast(p, 0)

    def as_one_vector(model):  # also right: one broadcast of every weight, flattened, then written back
        vector = torch.nn.utils.parameters_to_vector(model.parameters())
        dist.broadcast(vector, src=0)
        torch.nn.utils.vector_to_parameters(vector, model.parameters())

    return locals()


def averages():
    import torch
    import torch.distributed as dist

    def right(model):
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()

    def divided_by_2(model):  # right in 2 processes only
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2

    def divided_first(model):  # also right: each rank's share of the mean, then summed
        world = dist.get_world_size()
        for p in model.parameters():
            p.grad.div_(world)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def averaged_by_the_collective(model):  # also right: ReduceOp.AVG (gloo has it in this torch)
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)

    def one_flat_bucket(model):  # also right: every gradient in one all-reduce, copied back
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))

    def not_divided(model):  # gradients N times too large
        for p in model.parameters():
            dist.all_reduce(p.grad)

    def not_synchronised(model):  # nothing exchanged: the weights drift apart
        pass

    def divided_only(model):
        for p in model.parameters():
            p.grad /= dist.get_world_size()

    def reduced_to_rank_0(model):  # rank 1 keeps its own gradient: drift
        for p in model.parameters():
            dist.reduce(p.grad, dst=0)
            p.grad /= dist.get_world_size()

    def copies(model):  # all-reduce of a copy: the gradients unchanged
        for p in model.parameters():
            dist.all_reduce(p.grad.clone())

    def weights_only(model):  # the biases left out
        for name, p in model.named_parameters():
            if name.endswith("weight"):
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()

    return locals()


def accumulations():
    import torch.distributed as dist

    from effitrain_helpers.training.ddp_by_hand import loss_of

    def average(model):
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()

    def right(model, optimizer, micro_batches, k):
        for i, (inputs, targets) in enumerate(micro_batches):
            (loss_of(model, inputs, targets) / k).backward()
            if (i + 1) % k == 0:
                average(model)
                optimizer.step()
                optimizer.zero_grad()

    def sync_every_micro_batch(model, optimizer, micro_batches, k):  # right weights, k times the bytes
        for i, (inputs, targets) in enumerate(micro_batches):
            (loss_of(model, inputs, targets) / k).backward()
            average(model)
            if (i + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()

    def loss_not_divided(model, optimizer, micro_batches, k):
        for i, (inputs, targets) in enumerate(micro_batches):
            loss_of(model, inputs, targets).backward()
            if (i + 1) % k == 0:
                average(model)
                optimizer.step()
                optimizer.zero_grad()

    def step_every_micro_batch(model, optimizer, micro_batches, k):
        for inputs, targets in micro_batches:
            (loss_of(model, inputs, targets) / k).backward()
            average(model)
            optimizer.step()
            optimizer.zero_grad()

    def zeroed_each_micro_batch(model, optimizer, micro_batches, k):
        for i, (inputs, targets) in enumerate(micro_batches):
            optimizer.zero_grad()
            (loss_of(model, inputs, targets) / k).backward()
            if (i + 1) % k == 0:
                average(model)
                optimizer.step()

    def counted_by_hand(model, optimizer, micro_batches, k):  # also right: a counter, set_to_none=False
        done = 0
        for inputs, targets in micro_batches:
            loss = loss_of(model, inputs, targets)
            (loss * (1 / k)).backward()
            done += 1
            if done == k:
                average(model)
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
                done = 0

    def in_groups_of_k(model, optimizer, micro_batches, k):  # also right: the micro-batches sliced k at a time
        batches = list(micro_batches)
        for start in range(0, len(batches), k):
            for inputs, targets in batches[start:start + k]:
                (loss_of(model, inputs, targets) / k).backward()
            average(model)
            optimizer.step()
            optimizer.zero_grad()

    def never_synchronised(model, optimizer, micro_batches, k):
        for i, (inputs, targets) in enumerate(micro_batches):
            (loss_of(model, inputs, targets) / k).backward()
            if (i + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()

    return locals()


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [
    ("right", None),
    mistake("6.2 q1", "forgotten", "differ at step 0: nothing was sent"),
    mistake("6.2 q1", "copies", "not a copy", marks=EXHAUSTIVE),
    mistake("6.2 q1", "summed", "SUM of their weights", marks=EXHAUSTIVE),
    mistake("6.2 q1", "from_rank_1", "rank 1's weights, not rank 0's", marks=EXHAUSTIVE),
    mistake("6.2 q1", "first_layer_only", "differ at step 0 in 2.weight, 2.bias", marks=EXHAUSTIVE),
])
def test_q1_broadcast_parameters(name, expected):
    result = l62.q1.evaluate(broadcasts()[name])
    if expected is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and expected in result.message, result.message


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    right("6.2 q1", "the_parameter_itself"),
    right("6.2 q1", "under_no_grad", marks=EXHAUSTIVE),
    right("6.2 q1", "as_one_vector", marks=EXHAUSTIVE),
])
def test_q1_right_written_another_way(name):
    result = l62.q1.evaluate(broadcasts()[name])
    assert result.status == "correct", result.message


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [right("6.2 q2", name)
                                  for name in ("divided_first", "one_flat_bucket", "averaged_by_the_collective")])
def test_q2_right_written_another_way(name):
    result = l62.q2.evaluate(averages()[name])
    assert result.status == "correct", result.message


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", [right("6.2 q3", name)
                                  for name in ("counted_by_hand", "in_groups_of_k")])
def test_q3_right_written_another_way(name):
    result = l62.q3.evaluate(accumulations()[name])
    assert result.status == "correct", result.message


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [
    ("right", None),
    mistake("6.2 q2", "not_divided", "2 times too large"),
    mistake("6.2 q2", "divided_by_2", "in 3 processes the summed gradients were divided by 2, not by 3"),
    mistake("6.2 q2", "not_synchronised", "no gradient left its rank", marks=EXHAUSTIVE),
    mistake("6.2 q2", "divided_only", "never exchanged it", marks=EXHAUSTIVE),
    mistake("6.2 q2", "reduced_to_rank_0", "rank(s) [1] did not get the averaged gradients", marks=EXHAUSTIVE),
    mistake("6.2 q2", "copies", "left the gradients as they were", marks=EXHAUSTIVE),
    mistake("6.2 q2", "weights_only", "gradients of 0.bias, 2.bias", marks=EXHAUSTIVE),
])
def test_q2_average_gradients(name, expected):
    result = l62.q2.evaluate(averages()[name])
    if expected is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and expected in result.message, result.message
    if name == "reduced_to_rank_0":
        assert "dist.reduce" in result.message


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [
    ("right", None),
    mistake("6.2 q3", "sync_every_micro_batch", "k = 4 times what no_sync needs"),
    mistake("6.2 q3", "loss_not_divided", "k = 4 times too large", marks=EXHAUSTIVE),
    mistake("6.2 q3", "step_every_micro_batch", "stepped at every micro-batch", marks=EXHAUSTIVE),
    mistake("6.2 q3", "zeroed_each_micro_batch", "only the last micro-batch counted", marks=EXHAUSTIVE),
    mistake("6.2 q3", "never_synchronised", "nothing was exchanged", marks=EXHAUSTIVE),
])
def test_q3_accumulation_by_hand(name, expected):
    result = l62.q3.evaluate(accumulations()[name])
    if expected is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and expected in result.message, result.message


@pytest.mark.slow
def test_a_collective_only_one_rank_calls_is_named_within_the_time_limit(monkeypatch):
    import torch.distributed as dist

    def rank_0_only(model):  # rank 1 never joins: rank 0 waits in the broadcast
        if dist.get_rank() == 0:
            for p in model.parameters():
                dist.broadcast(p.data, src=0)

    monkeypatch.setattr(l62, "TIMEOUT", 15)
    result = l62.q1.evaluate(rank_0_only)
    assert result.status == "incorrect" and "still waiting after 15 s" in result.message, result.message


@pytest.mark.slow
def test_a_function_from_a_plain_script_is_judged(tmp_path):
    script = tmp_path / "my_ddp.py"
    script.write_text(textwrap.dedent("""
        import torch.distributed as dist
        from effitrain_helpers.teach.checks.lesson_6_2 import q2

        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()

        print(q2.evaluate(average_gradients).status)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.stdout.strip().splitlines()[-1] == "correct", out.stdout + out.stderr


def test_a_collective_the_counter_cannot_count_is_refused_in_one_line():
    from effitrain_helpers.measure.communication import CommunicationCounter

    with pytest.raises(ValueError, match=r"collectives=\['gather'\] cannot be counted"):
        CommunicationCounter(collectives=("gather",)).watch()


def test_the_overlap_timeline_draws_one_bar_per_all_reduce_and_refuses_an_empty_trace():
    import matplotlib.pyplot as plt

    from effitrain_helpers.teach import plots

    overlap = {"ended": 50.0, "issued": [20.0, 40.0], "ran": [(20.5, 60.0), (41.0, 70.0)]}
    fig = plots.plot_overlap_timeline(overlap, [2**21, 2**20])
    assert len(fig.axes[0].patches) == 3  # backward + 2 all-reduces
    plt.close(fig)
    with pytest.raises(ValueError, match=r"overlap\['ran'\] is empty"):
        plots.plot_overlap_timeline({**overlap, "ran": []}, [2**21])


# ---------------------------------------------------------------- q4: the overlapped, bucketed sync

def overlapped_syncs() -> dict:
    """q4's answers: the right one, two right ones written another way, and each named mistake (with the words
    its message must hold), built here so that they travel to the workers by value."""
    import torch
    import torch.distributed as dist

    from effitrain_helpers.engines.gradient_sync import gradient_buckets

    class Right:
        def __init__(self, model, bucket_bytes):
            self.buckets = gradient_buckets(model.parameters(), bucket_bytes)
            self.hook(model)
            self.reset()

        def hook(self, model):
            for b, bucket in enumerate(self.buckets):
                for p in bucket:
                    p.register_post_accumulate_grad_hook(lambda p, b=b: self.arrive(b))

        def reset(self):
            self.arrived, self.pending = [0] * len(self.buckets), []

        def ready(self) -> list[int]:  # the buckets to launch now: the next ones in order, once complete
            n, found = len(self.pending), []
            while n < len(self.buckets) and self.arrived[n] == len(self.buckets[n]):
                found.append(n)
                n += 1
            return found

        def arrive(self, b):
            self.arrived[b] += 1
            for n in self.ready():
                self.launch(n)

        def launch(self, n):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[n]])
            self.pending.append((n, flat, dist.all_reduce(flat, async_op=True)))

        def finish(self, n, flat, work):
            work.wait()
            for p, g in zip(self.buckets[n], flat.split([p.numel() for p in self.buckets[n]])):
                p.grad.copy_(g.view_as(p) / dist.get_world_size())

        def wait(self):
            for n, flat, work in self.pending:
                self.finish(n, flat, work)
            sent = len(self.pending)
            self.reset()
            if sent < len(self.buckets):
                raise RuntimeError(f"bucket {sent} was never launched")

    class PerParameter(Right):  # right: each gradient divided, then all-reduced in place, one call per tensor
        def launch(self, n):
            works = []
            for p in self.buckets[n]:
                p.grad /= dist.get_world_size()
                works.append(dist.all_reduce(p.grad, async_op=True))
            self.pending.append((n, None, works))

        def finish(self, n, flat, works):
            for work in works:
                work.wait()

    class DividedFirst(Right):  # right: the flat bucket divided before it is sent
        def launch(self, n):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[n]]) / dist.get_world_size()
            self.pending.append((n, flat, dist.all_reduce(flat, async_op=True)))

        def finish(self, n, flat, work):
            work.wait()
            for p, g in zip(self.buckets[n], flat.split([p.numel() for p in self.buckets[n]])):
                p.grad.copy_(g.view_as(p))

    class AfterBackward(Right):  # every bucket launched in wait(): no overlap
        def arrive(self, b):
            self.arrived[b] += 1

        def wait(self):
            for n in self.ready():
                self.launch(n)
            super().wait()

    class Blocking(Right):  # a blocking all-reduce in the hook
        def launch(self, n):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[n]])
            dist.all_reduce(flat)
            self.pending.append((n, flat, None))

        def finish(self, n, flat, work):
            for p, g in zip(self.buckets[n], flat.split([p.numel() for p in self.buckets[n]])):
                p.grad.copy_(g.view_as(p) / dist.get_world_size())

    class WaitInHook(Right):  # async, then waited at once, still in the hook
        def launch(self, n):
            super().launch(n)
            self.pending[-1][2].wait()

    class ArrivalOrder(Right):  # each bucket launched as soon as it is complete, whatever came before
        def arrive(self, b):
            self.arrived[b] += 1
            if self.arrived[b] == len(self.buckets[b]):
                self.launch(b)

    class NeverWaited(Right):  # the sums read without waiting for them
        def finish(self, n, flat, work):
            for p, g in zip(self.buckets[n], flat.split([p.numel() for p in self.buckets[n]])):
                p.grad.copy_(g.view_as(p) / dist.get_world_size())

    class NotDivided(Right):
        def finish(self, n, flat, work):
            work.wait()
            for p, g in zip(self.buckets[n], flat.split([p.numel() for p in self.buckets[n]])):
                p.grad.copy_(g.view_as(p))

    class LastNeverLaunched(Right):  # the last bucket is never launched (its wait() then raises)
        def ready(self):
            return [n for n in super().ready() if n < len(self.buckets) - 1]

    class CountsNeverReset(Right):  # the counts of the first backward stay: nothing leaves in the second
        def wait(self):
            for n, flat, work in self.pending:
                self.finish(n, flat, work)

    class EveryParameterHooked(Right):  # a hook on every parameter: a frozen one refuses it
        def hook(self, model):
            where = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket}
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(lambda p: self.arrive(where[id(p)]))

    class ReturnsWithoutAllBuckets(Right):  # a bucket never launched, and wait() says nothing
        def wait(self):
            for n, flat, work in self.pending:
                self.finish(n, flat, work)
            self.reset()

    return {Right: None, PerParameter: None, DividedFirst: None,
            AfterBackward: "no all-reduce was launched during backward",
            Blocking: "without async_op=True", WaitInHook: "a work.wait() ran during backward",
            ArrivalOrder: "the ranks launched the buckets in different orders (rank 0: 0, 1, 2; rank 1: 1, 0, 2)",
            NeverWaited: "3 of the 3 all-reduces launched with async_op=True were never waited for",
            NotDivided: "the gradients are 2 times too large",
            LastNeverLaunched: "bucket 2 (embed.weight) was never all-reduced",
            CountsNeverReset: "nothing was launched in backward 2",
            EveryParameterHooked: "a frozen parameter (requires_grad=False) gets no gradient and takes no hook",
            ReturnsWithoutAllBuckets: "yet wait() returned"}


@pytest.fixture(scope="module")
def overlapped_verdicts() -> dict:
    """Every class of overlapped_syncs() judged in one launch of 2 processes (and the right ones in one of 3):
    its name -> (the words its message must hold, or None when right; the verdict)."""
    answers = overlapped_syncs()
    verdicts = l62.judge_overlapped_syncs(list(answers))
    return {cls.__name__: (words, verdict) for (cls, words), verdict in zip(answers.items(), verdicts)}


Q4_RIGHT_ANOTHER_WAY = ("PerParameter", "DividedFirst")
Q4_MISTAKES = ("AfterBackward", "Blocking", "WaitInHook", "ArrivalOrder", "NeverWaited", "NotDivided",
               "LastNeverLaunched", "CountsNeverReset", "EveryParameterHooked", "ReturnsWithoutAllBuckets")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Right",
                                  *(right("6.2 q4", n) for n in Q4_RIGHT_ANOTHER_WAY),
                                  *(mistake("6.2 q4", n) for n in Q4_MISTAKES)])
def test_q4_judges_right_and_wrong_overlapped_syncs_by_what_they_do(name, overlapped_verdicts):
    """The right class in three forms accepted, each named mistake recognised by its own message (all judged in
    one launch: the fixture)."""
    words, verdict = overlapped_verdicts[name]
    if words is None:
        assert verdict is None, (name, verdict)
    else:
        assert verdict is not None and words in str(verdict), (name, verdict)


def test_q4_cases_name_every_class_once():
    assert [cls.__name__ for cls in overlapped_syncs()] == ["Right", *Q4_RIGHT_ANOTHER_WAY, *Q4_MISTAKES]


def test_q4_refuses_the_lessons_own_class_and_an_instance_without_a_process():
    from effitrain_helpers.engines.gradient_sync import OverlappedSync

    mine = type("OverlappedSync", (OverlappedSync,), {})
    result = l62.q4.evaluate(mine)
    assert result.status == "incorrect" and "is the lesson's own (gradient_sync.OverlappedSync)" in result.message
    result = l62.q4.evaluate(object())
    assert result.status == "incorrect" and "pass your class itself" in result.message
