"""Lesson 5.1's checkers with right and wrong answers (q1 runs the learner's function in 2 processes: slow)."""

import pytest

from effitrain_helpers.teach.checks.lesson_5_1 import q1, q2, q3, q4


def test_q2_bytes_per_gpu():
    assert q2.evaluate((24, 3)).status == "correct"
    assert "leaves out the gradients" in q2.evaluate((18, 2.25)).message
    assert "divide by the number of GPUs" in q2.evaluate((24, 24)).message
    assert "every GPU keeps full copies" in q2.evaluate((3, 3)).message
    assert q2.evaluate(24).status == "incorrect"


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
