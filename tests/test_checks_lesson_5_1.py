"""Lesson 5.1's checkers with right and wrong answers (q1 and q2 run the learner's function in 2 processes: slow)."""

import pytest

from effitrain_helpers.teach.checks.lesson_5_1 import q1, q2, q3, q4


def _local(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _nbytes(tensors, local=True):
    return sum((_local(t) if local else t).numel() * t.element_size() for t in tensors)


def _kinds(model, optimizer):
    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values()]
    return params, [p.grad for p in params if p.grad is not None], state


def _counted(model, optimizer):
    params, grads, state = _kinds(model, optimizer)
    return _nbytes(params + grads + state)


def _global_numel(model, optimizer):
    params, grads, state = _kinds(model, optimizer)
    return _nbytes(params + grads + state, local=False)


def _global_gradients(model, optimizer):
    params, grads, state = _kinds(model, optimizer)
    return _nbytes(params + state) + _nbytes(grads, local=False)


def _global_state(model, optimizer):
    params, grads, state = _kinds(model, optimizer)
    return _nbytes(params + grads) + _nbytes(state, local=False)


def _parameters_only(model, optimizer):
    return _nbytes(model.parameters())


def _no_state(model, optimizer):
    params, grads, _ = _kinds(model, optimizer)
    return _nbytes(params + grads)


def _no_gradients(model, optimizer):
    params, _, state = _kinds(model, optimizer)
    return _nbytes(params + state)


def _no_steps(model, optimizer):
    from torch.distributed.tensor import DTensor

    params, grads, state = _kinds(model, optimizer)
    return _nbytes(params + grads + [v for v in state if isinstance(v, DTensor)])


def _times_world(model, optimizer):
    import torch.distributed as dist

    return _counted(model, optimizer) * dist.get_world_size()


def _hard_coded(model, optimizer):
    return 1_049_740  # rank 0's total in the lesson's table, typed in


def _by_kind(model, optimizer):
    params, grads, state = _kinds(model, optimizer)
    return {"parameters": _nbytes(params), "gradients": _nbytes(grads), "optimizer state": _nbytes(state)}


def _one_off(model, optimizer):
    return _counted(model, optimizer) + 4


@pytest.mark.slow
@pytest.mark.parametrize("count, words", [
    (_counted, None),
    (_global_numel, "numel() of a DTensor is the size of the global tensor"),
    (_global_gradients, "p.grad of a sharded parameter is a DTensor too"),
    (_global_state, "exp_avg and exp_avg_sq are counted whole"),
    (_times_world, "that is this rank's bytes times 2"),
    (_parameters_only, "only the parameters are counted"),
    (_no_state, "the optimizer's state is missing"),
    (_no_gradients, "the gradients are missing"),
    (_no_steps, "is a 0-d tensor that is not sharded"),
    (_hard_coded, "on every rank and for both models"),
    (_by_kind, "your function returned dict"),
    (_one_off, "rank 0, the lesson's model"),
])
def test_q2_counts_the_bytes_this_rank_holds(count, words):
    result = q2.evaluate(count)
    if words is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and words in result.message, result.message


@pytest.mark.slow
def test_q2_truth_is_the_theory_and_about_one_nth():
    """What the checker takes as the truth is lesson 5.1's per-rank theory, and about 1/N of DDP's bytes."""
    from effitrain_helpers.teach.checks.lesson_5_1 import _run_bytes, held_total
    from effitrain_helpers.teach.exercises import run_learner_in_processes

    ranks = run_learner_in_processes(_run_bytes, _counted, processes=2)
    for rank in ranks:
        for run in rank:
            assert held_total(run) == run["theory"] == run["got"]
            assert abs(held_total(run) - run["unsharded"] / 2) <= 0.02 * run["unsharded"]
    assert held_total(ranks[0][0]) > held_total(ranks[1][0])  # rank 0's chunks round up


def test_q2_refuses_what_is_not_a_function():
    assert "pass your function itself" in q2.evaluate(1_049_740).message


def test_q3_communication_ratio():
    assert q3.evaluate(1.5).status == "correct"
    assert "reshard_after_forward=False" in q3.evaluate(1.0).message
    assert "upside down" in q3.evaluate(2 / 3).message
    assert q3.evaluate(3).status == "incorrect"


def _optimized(model):
    import torch

    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def _root_only(model):
    from torch.distributed.fsdp import fully_shard

    fully_shard(model)
    return _optimized(model)


def _blocks_only(model):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    return _optimized(model)


def _ddp(model):
    from torch.nn.parallel import DistributedDataParallel

    return _optimized(DistributedDataParallel(model))


def _right(model):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return _optimized(model)


def _optimizer_first(model):
    import torch
    from torch.distributed.fsdp import fully_shard

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model, optimizer


def _model_only(model):
    return _right(model)[0]


def _sgd(model):
    import torch

    model, _ = _right(model)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("shard, words", [
    (_right, None),
    (_root_only, "call fully_shard on each of the 2 blocks first"),
    (_blocks_only, "fully_shard(model) on the root takes the ones no block took"),
    (_ddp, "every rank still holds every parameter whole"),
    (_optimizer_first, "it was created before fully_shard"),
    pytest.param(_model_only, "return the pair (model, optimizer)", marks=pytest.mark.exhaustive),
    pytest.param(_sgd, "the optimizer is SGD with lr=0.001", marks=pytest.mark.exhaustive),
])
def test_q1_judges_the_sharding_by_what_it_does(shard, words):
    result = q1.evaluate(shard)
    if words is None:
        assert result.status == "correct", result.message
    else:
        assert result.status == "incorrect" and words in result.message, result.message


def test_q1_refuses_what_is_not_a_function():
    assert "pass your function itself" in q1.evaluate("shard").message


def test_q4_zero2_row():
    assert q4.evaluate(16.64).status == "correct"
    assert "ZeRO-1's row" in q4.evaluate(31.41).message
    assert "ZeRO-3's row" in q4.evaluate(1.875).message
    assert "DDP's row" in q4.evaluate(120).message
    assert "in bytes" in q4.evaluate(16.64e9).message
    assert "divided among the 64 devices" in q4.evaluate(15).message
    assert q4.evaluate((2 + (2 + 12) / 64) * 7.5).status == "correct"  # right, another way: bytes per parameter
    assert q4.evaluate(16.6406).status == "correct"
    for off_by_one in (2 * 7.5 + 14 * 7.5 / 65, 2 * 7.5 + 15 * 7.5 / 64):  # mutants accepted before (issue 41)
        assert "divided among the 64 devices" in q4.evaluate(off_by_one).message
