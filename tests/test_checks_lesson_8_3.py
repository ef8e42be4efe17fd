"""Lesson 8.3's checkers with right answers written differently and the wrong ones a learner writes, each named;
the ring attention and sequence-parallel engines against the whole computation (exhaustive: 3 and 4 ranks)."""

import pytest
import torch
import torch.distributed as dist

from effitrain_helpers.engines import ring_attention as ring
from effitrain_helpers.teach.checks.lesson_8_3 import answer_or_reference, q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.training import long_context as lc
from verdicts import assert_correct, assert_not_attempted, assert_refused, mistake, right


def _weights(lse_a, lse_b, lse):
    return torch.exp(lse_a - lse)[..., None], torch.exp(lse_b - lse)[..., None]


def _in_log_space(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    wa, wb = _weights(lse_a, lse_b, lse)
    return out_a * wa + out_b * wb, lse


def _with_sigmoid(out_a, lse_a, out_b, lse_b):
    """Right, written as some ring-attention libraries write it: a sigmoid of the difference."""
    out = out_a - torch.sigmoid(lse_b - lse_a)[..., None] * (out_a - out_b)
    return out, lse_a - torch.nn.functional.logsigmoid(lse_a - lse_b)


def _max_shifted(out_a, lse_a, out_b, lse_b):
    """Right: the larger log-sum-exp subtracted before exp (the online softmax's trick)."""
    m = torch.maximum(lse_a, lse_b)
    ea, eb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    return (out_a * ea[..., None] + out_b * eb[..., None]) / (ea + eb)[..., None], m + torch.log(ea + eb)


@pytest.mark.parametrize("merge", [_in_log_space, right("8.3 q1", _with_sigmoid), right("8.3 q1", _max_shifted)],
                         ids=["_in_log_space", "_with_sigmoid", "_max_shifted"])
def test_a_merge_written_three_ways_is_correct(merge):
    assert_correct(q1, merge)


def _added(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)


def _averaged(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def _max_not_logsumexp(out_a, lse_a, out_b, lse_b):
    lse = torch.maximum(lse_a, lse_b)
    wa, wb = _weights(lse_a, lse_b, lse)
    return out_a * wa + out_b * wb, lse


def _swapped(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    wa, wb = _weights(lse_a, lse_b, lse)
    return out_a * wb + out_b * wa, lse


def _overflowing(out_a, lse_a, out_b, lse_b):
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)
    return (out_a * ea[..., None] + out_b * eb[..., None]) / (ea + eb)[..., None], torch.log(ea + eb)


def _output_not_rescaled(out_a, lse_a, out_b, lse_b):
    return out_a * torch.exp(lse_a - lse_b)[..., None] + out_b, torch.logaddexp(lse_a, lse_b)


@pytest.mark.parametrize("merge, words", [
    mistake("8.3 q1", _added, "without rescaling"),
    mistake("8.3 q1", _averaged, "without rescaling"),
    mistake("8.3 q1", _max_not_logsumexp, "the larger of the two, not their log-sum-exp"),
    mistake("8.3 q1", _swapped, "weights are swapped"),
    mistake("8.3 q1", _overflowing, "overflows float32"),
    mistake("8.3 q1", _output_not_rescaled, "the log-sum-exp is right but the output is not"),
    (lambda a, la, b, lb: (a, la), "differs from attention over all the keys"),
    (lambda a, la, b, lb: a, "must return a pair"),
    (lambda a, la, b, lb: (a[:, :1], la), "the same shapes"),
    (ring.merge, "the lesson's own answer"),
    (42, "pass your function itself"),
])
def test_each_wrong_merge_is_named(merge, words):
    assert_refused(q1, merge, words=words)


def test_an_unwritten_answer_is_not_attempted_and_the_reference_runs_instead():
    def merge(out_a, lse_a, out_b, lse_b):
        return ____

    assert_not_attempted(q1, merge)
    assert answer_or_reference(merge, ring.merge) is ring.merge
    assert answer_or_reference(_in_log_space, ring.merge) is _in_log_space


def test_the_house_merge_is_exact_on_real_partials():
    q, k, v = (torch.randn(2, 10, 4) for _ in range(3))
    s = q @ k.transpose(1, 2) / 2
    parts = [(torch.softmax(p, -1) @ v[:, sl], p.logsumexp(-1)) for p, sl in
             ((s[..., :3], slice(0, 3)), (s[..., 3:], slice(3, 10)))]
    out, lse = ring.merge(*parts[0], *parts[1])
    assert torch.allclose(out, torch.softmax(s, -1) @ v, atol=1e-6)
    assert torch.allclose(lse, s.logsumexp(-1), atol=1e-6)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("layout", ring.LAYOUTS)
def test_layouts_split_and_join_the_sequence_and_balance_the_causal_work(world, layout):
    x = torch.arange(2 * 48 * 3, dtype=torch.float32).reshape(2, 48, 3)
    parts = [ring.split_sequence(x, r, world, layout) for r in range(world)]
    assert torch.equal(ring.join_sequence(parts, layout), x)
    pairs = ring.attended_pairs(48, world, layout)
    assert sum(pairs) == 48 * 49 // 2  # every causal pair, once
    if layout == "zigzag":
        assert len(set(pairs)) == 1, pairs
    else:
        assert pairs == sorted(pairs) and pairs[-1] > pairs[0]
    assert sum(ring.attended_pairs(48, world, layout, is_causal=False)) == 48 * 48


@pytest.mark.parametrize("layout, n, words", [("diagonal", 48, "not one of"), ("zigzag", 50, "not a multiple")])
def test_a_bad_layout_or_length_is_named(layout, n, words):
    with pytest.raises(ValueError, match=words):
        ring.split_sequence(torch.zeros(1, n, 2), 0, 2, layout)


def test_the_theories_count_what_each_rank_keeps_and_sends():
    assert lc.ring_bytes_theory(96, 16, 2, 2) == {"per_step": 12288, "forward": 12288, "backward": 36864}
    tp, sp = (lc.sp_saved_theory(m, 64, 64, 256, 2) for m in ("tp", "sp"))
    assert sp["norm and dropouts"] * 2 == tp["norm and dropouts"] and sp["mlp"] == tp["mlp"]
    assert lc.sp_bytes_theory("tp", 64, 64, 4)["sent_per_rank"] == lc.sp_bytes_theory("sp", 64, 64, 4)["sent_per_rank"]


# ------------------------------------------------------------------ q2: in real processes

def _posted_together(k, v):
    rank, world = dist.get_rank(), dist.get_world_size()
    k_in, v_in = torch.empty_like(k), torch.empty_like(v)
    ops = [dist.P2POp(dist.isend, k, (rank + 1) % world), dist.P2POp(dist.isend, v, (rank + 1) % world),
           dist.P2POp(dist.irecv, k_in, (rank - 1) % world), dist.P2POp(dist.irecv, v_in, (rank - 1) % world)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_in, v_in


def _even_ranks_send_first(k, v):
    """Right with blocking calls: even ranks send first, odd ranks receive first (no cycle of waits)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k_in, v_in = torch.empty_like(k), torch.empty_like(v)
    send = lambda: (dist.send(k, (rank + 1) % world), dist.send(v, (rank + 1) % world))  # noqa: E731
    receive = lambda: (dist.recv(k_in, (rank - 1) % world), dist.recv(v_in, (rank - 1) % world))  # noqa: E731
    for phase in ((send, receive) if rank % 2 == 0 else (receive, send)):
        phase()
    return k_in, v_in


@pytest.mark.slow
@pytest.mark.exhaustive  # 3 processes per answer
@pytest.mark.parametrize("step", [right("8.3 q2", _posted_together), right("8.3 q2", _even_ranks_send_first)],
                         ids=["_posted_together", "_even_ranks_send_first"])
def test_a_ring_step_written_two_more_ways_is_correct(step):
    assert_correct(q2, step)


def _step(k, v, to=1, frm=-1, blocking=False, wait=True, into_sent=False, swap=False):
    """A ring step; each keyword off its default makes one mistake a learner makes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k_in, v_in = (k, v) if into_sent else (torch.empty_like(k), torch.empty_like(v))
    if blocking:
        dist.send(k, (rank + to) % world)
        dist.send(v, (rank + to) % world)
        dist.recv(k_in, (rank + frm) % world)
        dist.recv(v_in, (rank + frm) % world)
    else:
        sends = [dist.isend(k.clone(), (rank + to) % world), dist.isend(v.clone(), (rank + to) % world)]
        receives = [dist.irecv(k_in, (rank + frm) % world), dist.irecv(v_in, (rank + frm) % world)]
        for request in sends + (receives if wait else []):
            request.wait()
    return (v_in, k_in) if swap else (k_in, v_in)


@pytest.mark.slow
@pytest.mark.exhaustive  # a deadlock costs the 10 s clock, then a second run
@pytest.mark.parametrize("options, words", [
    mistake("8.3 q2", {"blocking": True}, "deadlock"),
    mistake("8.3 q2", {"frm": 1}, "works with 2 processes"),
    mistake("8.3 q2", {"to": -1, "frm": 1}, "the wrong way round"),
    mistake("8.3 q2", {"swap": True}, "arrive swapped"),
    mistake("8.3 q2", {"into_sent": True}, "changed the block it sent"),
])
def test_each_wrong_ring_step_is_named(options, words):
    assert_refused(q2, lambda k, v: _step(k, v, **options), words=words)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_step_that_returns_before_its_receives_arrive_is_refused():
    assert_refused(q2, lambda k, v: (torch.empty_like(k), torch.empty_like(v)), words="hold no rank's block")


def _ring_everywhere(n, d, batch):
    return [lc.measured_ring_run(n, d, batch, causal, layout) for causal in (False, True) for layout in ring.LAYOUTS]


@pytest.mark.slow
@pytest.mark.exhaustive  # 3 and 4 real processes (the lesson runs 2)
@pytest.mark.parametrize("world", [3, 4])
def test_ring_attention_is_exact_with_its_bytes_and_work_at_three_and_four_ranks(world):
    from effitrain_helpers.processes.launch import launch

    n, d, batch = 48 * world, 8, 2
    theory = lc.ring_bytes_theory(n, d, world, batch)
    for rank_runs in launch(_ring_everywhere, n, d, batch, num_processes=world, cpu=True, quiet=True):
        for r in rank_runs:
            assert max(r["out_gap"], r["lse_gap"], *r["grad_gaps"].values()) < 1e-5, r
            assert (r["forward_bytes"], r["backward_bytes"]) == (theory["forward"], theory["backward"])
            assert r["steps"] == world - 1


@pytest.mark.slow
@pytest.mark.exhaustive
def test_sequence_parallelism_matches_the_whole_block_at_four_ranks():
    from effitrain_helpers.processes.launch import launch

    for r in launch(lc.measured_sp_run, 32, 128, 64, num_processes=4, cpu=True, quiet=True):
        assert max(r["gap"].values()) < 1e-5 and max(r["grad_gap"].values()) < 1e-5
        for mode in ("whole", "tp", "sp"):
            assert r["saved"][mode] == lc.sp_saved_theory(mode, 64, 32, 128, 1 if mode == "whole" else 4)
        assert r["payload"]["sp"] == lc.sp_bytes_theory("sp", 64, 32, 4)["by_collective"]
