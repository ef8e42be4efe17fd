"""Lesson 8.4's checker with two right dispatch/combine pairs written differently and the wrong ones a learner
writes, each named (real gloo processes: slow); the expert-parallel layer against the one-process layer, forward
and gradients, and its bytes against the theory; the routing's capacity, drops and load-balancing loss."""

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from effitrain_helpers.engines import experts
from effitrain_helpers.teach.checks.lesson_8_4 import q1, q2
from effitrain_helpers.teach.exercises import ____
from effitrain_helpers.training import expert_parallel
from verdicts import assert_verdict, mistake, right


def _dispatch(rows, expert, num_experts, sort=True, exchange=True, equal_sizes=False, minlength=True):
    """The solution's dispatch; each keyword off makes one mistake a learner makes."""
    world = dist.get_world_size()
    order = torch.argsort(expert) if sort else torch.arange(len(expert))
    send = torch.bincount(expert, minlength=num_experts) if minlength else torch.bincount(expert)
    recv = torch.empty_like(send)
    if exchange:
        dist.all_to_all_single(recv, send)
    else:
        recv = send.clone()  # assumes every rank sends what it receives
    counts = recv.view(world, -1)
    send_splits, recv_splits = send.view(world, -1).sum(1).tolist(), counts.sum(1).tolist()
    received = rows.new_empty(sum(recv_splits), rows.shape[1])
    if equal_sizes:
        dist.all_to_all_single(received, rows[order])
    else:
        dist.all_to_all_single(received, rows[order], recv_splits, send_splits)
    return received, counts, (order, send_splits, recv_splits)


def _combine(y, plan, gate, token, num_tokens, gated=True, unpermute=True, swap=True):
    order, send_splits, recv_splits = plan
    back = y.new_empty(sum(send_splits), y.shape[1])
    if swap:
        dist.all_to_all_single(back, y, send_splits, recv_splits)
    else:
        dist.all_to_all_single(back, y, recv_splits, send_splits)
    where = order if unpermute else torch.arange(len(order))
    weight = gate[where, None] if gated else 1.0
    return y.new_zeros(num_tokens, y.shape[1]).index_add(0, token[where], weight * back)


def _dispatch_by_hand(rows, expert, num_experts):
    """Right, written differently: the counts exchanged as a (world, local) matrix, rows gathered expert by
    expert with a Python loop, the plan a dict holding the inverse permutation."""
    world = dist.get_world_size()
    local = num_experts // world
    pieces = [rows[expert == e] for e in range(num_experts)]
    mine = torch.tensor([[len(pieces[r * local + e]) for e in range(local)] for r in range(world)])
    theirs = torch.zeros_like(mine)
    dist.all_to_all_single(theirs, mine)
    order = torch.cat([torch.nonzero(expert == e).flatten() for e in range(num_experts)])
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order))
    out_sizes, in_sizes = theirs.sum(1).tolist(), mine.sum(1).tolist()
    received = torch.zeros(sum(out_sizes), rows.shape[1])
    dist.all_to_all_single(received, torch.cat(pieces), output_split_sizes=out_sizes, input_split_sizes=in_sizes)
    return received, theirs, {"inverse": inverse, "out": out_sizes, "in": in_sizes}


def _combine_by_hand(y, plan, gate, token, num_tokens):
    back = torch.zeros(sum(plan["in"]), y.shape[1])
    dist.all_to_all_single(back, y, output_split_sizes=plan["in"], input_split_sizes=plan["out"])
    rows = back[plan["inverse"]] * gate[:, None]  # back in the original order of the assignments
    out = torch.zeros(num_tokens, y.shape[1])
    for i, t in enumerate(token.tolist()):
        out[t] += rows[i]
    return out


def _dispatch_by_sort(rows, expert, num_experts):
    """Right, another way: a stable torch.sort for the order, one_hot for the counts, the splits as ints by
    keyword, the rows taken with index_select."""
    world = dist.get_world_size()
    _, order = torch.sort(expert, stable=True)
    send = torch.nn.functional.one_hot(expert, num_experts).sum(dim=0)
    recv = torch.zeros_like(send)
    dist.all_to_all_single(recv, send)
    counts = recv.reshape(world, num_experts // world)
    out_splits = [int(c) for c in counts.sum(dim=1)]
    in_splits = [int(c) for c in send.reshape(world, -1).sum(dim=1)]
    received = torch.empty(sum(out_splits), rows.shape[1], dtype=rows.dtype)
    dist.all_to_all_single(received, rows.index_select(0, order), output_split_sizes=out_splits,
                           input_split_sizes=in_splits)
    return received, counts, (order, in_splits, out_splits)


def _combine_by_inverse(y, plan, gate, token, num_tokens):
    """Right, another way: the rows put back in the assignments' order by the inverse permutation (argsort of
    the order), weighted, then added in place with index_add_."""
    order, in_splits, out_splits = plan
    back = torch.empty(sum(in_splits), y.shape[1], dtype=y.dtype)
    dist.all_to_all_single(back, y, output_split_sizes=in_splits, input_split_sizes=out_splits)
    out = torch.zeros(num_tokens, y.shape[1], dtype=y.dtype)
    out.index_add_(0, token, back[torch.argsort(order)] * gate.unsqueeze(1))
    return out


def _unsorted(rows, expert, num_experts):
    return _dispatch(rows, expert, num_experts, sort=False)


def _not_exchanged(rows, expert, num_experts):
    return _dispatch(rows, expert, num_experts, exchange=False)


def _equal_sizes(rows, expert, num_experts):
    return _dispatch(rows, expert, num_experts, equal_sizes=True)


def _counts_only_up_to_the_last_expert_used(rows, expert, num_experts):
    return _dispatch(rows, expert, num_experts, minlength=False)


def _ungated(y, plan, gate, token, num_tokens):
    return _combine(y, plan, gate, token, num_tokens, gated=False)


def _ungated_by_hand(y, plan, gate, token, num_tokens):
    return _combine_by_hand(y, plan, torch.ones_like(gate), token, num_tokens)


def _not_unpermuted(y, plan, gate, token, num_tokens):
    return _combine(y, plan, gate, token, num_tokens, unpermute=False)


def _splits_not_swapped(y, plan, gate, token, num_tokens):
    return _combine(y, plan, gate, token, num_tokens, swap=False)


@pytest.mark.slow  # each verdict starts 2, then 3 processes (about 10 s on a busy 2-core CPU)
@pytest.mark.parametrize("dispatch, combine, words", [
    right("8.4 q1", _dispatch_by_hand, _combine_by_hand, None, id="right-by-hand"),
    right("8.4 q1", _dispatch_by_sort, _combine_by_inverse, None, id="right-by-sort",
          marks=pytest.mark.exhaustive),
    mistake("8.4 q1", _unsorted, _combine, "must be sorted by expert", id="not-sorted"),
    pytest.param(_dispatch_by_hand, _ungated_by_hand, "without their gates", id="no-gates-by-hand",
                 marks=pytest.mark.exhaustive),
    mistake("8.4 q1", _dispatch, _ungated, "without their gates", id="no-gates"),
    mistake("8.4 q1", _dispatch, _not_unpermuted, "undo the permutation", id="not-unpermuted"),
    mistake("8.4 q1", _not_exchanged, _combine, "Exchange the counts first", id="counts-not-exchanged",
            marks=pytest.mark.exhaustive),
    mistake("8.4 q1", _equal_sizes, _combine, "Pass output_split_sizes", id="no-split-sizes",
            marks=pytest.mark.exhaustive),
    mistake("8.4 q1", _dispatch, _splits_not_swapped, "does not add up", id="combine-splits-not-swapped",
            marks=pytest.mark.exhaustive),
    mistake("8.4 q1", _counts_only_up_to_the_last_expert_used, _combine, "send one count per expert",
            id="no-minlength", marks=pytest.mark.exhaustive),  # the mutant that survived a checker without a rank
    # of 1 token
    pytest.param(_dispatch, _combine, None, id="right", marks=pytest.mark.exhaustive),  # the notebook runs it too
])
def test_q1_names_each_mistake(dispatch, combine, words):
    result = q1.evaluate(dispatch, combine)
    if words is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and words in result.message, result.message


def test_blanks_and_the_workbook_s_own_functions_are_answered():
    def unfinished(rows, expert, num_experts):
        return ____

    assert q1.evaluate(unfinished, _combine).status == "not attempted"
    assert "hands the work to experts.dispatch" in q1.evaluate(experts.dispatch, _combine).message
    assert "hands the work to experts.combine" in q1.evaluate(
        _dispatch, lambda *a: experts.combine(*a)).message
    assert "pass your two functions" in q1.evaluate(_dispatch, 3).message


def test_routing_capacity_drops_and_the_balancing_loss():
    layer = experts.MoELayer(8, 16, 4, top_k=2, capacity_factor=1.0, seed=3)
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(0))
    out, routing = layer(x)
    assert routing.capacity == math.ceil(30 * 2 / 4) == experts.capacity(30, 4, 2, 1.0)
    assert int(routing.wanted.sum()) == 60 and (routing.kept <= routing.capacity).all()
    assert routing.dropped == int((routing.wanted - routing.capacity).clamp(min=0).sum())
    even = experts.route(torch.eye(8), torch.eye(4, 8) + torch.eye(4, 8).roll(4, 1), 1, 1.0)  # 2 tokens each
    assert even.wanted.tolist() == [2, 2, 2, 2] and even.dropped == 0
    assert abs(float(even.aux_loss) - 1.0) < 1e-6  # E * sum(f * P) is 1 when perfectly even
    router = torch.zeros(4, 8)
    router[1] = 10.0
    skewed = experts.route(torch.ones(8, 8), router, 1, 1.0)  # every token to expert 1, capacity 2
    assert skewed.wanted.tolist() == [0, 8, 0, 0] and skewed.kept.tolist() == [0, 2, 0, 0]
    assert skewed.dropped == 6 and float(skewed.aux_loss) > 3.9  # towards E = 4
    loose = experts.MoELayer(8, 16, 4, top_k=2, capacity_factor=4.0, seed=3)(x)[1]
    assert loose.dropped == 0
    with pytest.raises(ValueError, match="top_k=5"):
        experts.route(x, layer.router, 5, 1.0)


@pytest.mark.slow  # one 2-process launch
def test_expert_parallel_equals_one_process_and_bytes_match_the_splits():
    records = expert_parallel.run(2, tokens=(24, 16), d=8, hidden=12, experts=4, capacity_factor=1.0)
    for r in records:
        assert all(gap <= 1e-5 for gap in r["gaps"].values()), r["gaps"]
        assert set(r["gaps"]) == {"output", "grad x", "grad router", "grad w1", "grad w2"}
        for phase, measured in r["measured"].items():  # gloo adds a small header per message
            assert 0 <= measured - r["theory"][phase] <= 1024, (phase, measured, r["theory"])
    assert sum(r["dropped"] for r in records) > 0
    table = expert_parallel.tokens_table(records)
    assert (table["chosen"] - table["kept"] == table["dropped"]).all()
    assert table.groupby("expert")["kept"].sum().tolist() == table.groupby("expert")["received"].first().tolist()


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("processes", [3, 4])
def test_expert_parallel_on_more_ranks(processes):
    records = expert_parallel.run(processes, tokens=(20, 12, 16, 9), d=6, hidden=8, experts=12)
    assert all(gap <= 1e-5 for r in records for gap in r["gaps"].values())


def test_bad_settings_are_one_line():
    with pytest.raises(ValueError, match="multiple of the number of ranks"):
        expert_parallel.run(3, tokens=(4, 4, 4), experts=8)
    with pytest.raises(ValueError, match="one per rank"):
        expert_parallel.run(2, tokens=(4,))
    with pytest.raises(ValueError, match="multiple of the number of ranks"):
        experts.ExpertShard(experts.MoELayer(4, 4, 6), 0, 4)


@pytest.mark.parametrize("answer, words", [
    ((157, 109.375), None),  # the solution's own values
    right("8.4 q2", (157.0, 109.38), None),  # a float capacity, the MiB rounded
    right("8.4 q2", (np.int64(157), torch.tensor(109.375)), None),  # a NumPy integer and a 0-d tensor
    mistake("8.4 q2", (156, 109.375), "rounds 156.25 down"),
    mistake("8.4 q2", (79, 109.375), "leaves out k"),
    ((150, 109.375), "the capacity: 150"),
    mistake("8.4 q2", (157, 54.6875), "half the answer"),
    mistake("8.4 q2", (157, 125.0), "counts every row"),
    mistake("8.4 q2", (157, 218.75), "twice the answer"),
    ((157, 100.0), "the bytes of one forward"),
])
def test_q2_names_each_slip(answer, words):
    assert_verdict(q2, *answer, words=words)
