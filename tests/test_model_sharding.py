"""Lesson 5.1's helpers: the theory of bytes per rank and communication (quick), and a real 2-process
comparison of DDP and FSDP against it (slow)."""

import math

import pytest
import torch

from effitrain_helpers.training.model_sharding import (
    KINDS, padded_values, rank_bytes, ring_bytes_sent, shard_rows, sharding_batches, sharding_model, summarize,
    theory_bytes, theory_communication)


def test_shard_rows_follow_torch_chunk():
    for rows in (1, 2, 3, 7, 64):
        for world in (1, 2, 3, 4):
            chunks = torch.arange(rows).chunk(world)
            want = [len(c) for c in chunks] + [0] * (world - len(chunks))
            assert [shard_rows(rows, world, r) for r in range(world)] == want


def test_theory_bytes_full_copies_and_shards():
    shapes = [(3, 4), (6,)]
    ddp = theory_bytes(shapes, 2, sharded=False)
    assert ddp == {"parameters": 18 * 4, "gradients": 18 * 4, "optimizer state": 18 * 8 + 2 * 4}
    ranks = [theory_bytes(shapes, 2, sharded=True, rank=r) for r in range(2)]
    assert ranks[0]["parameters"] == (2 * 4 + 3) * 4 and ranks[1]["parameters"] == (1 * 4 + 3) * 4
    assert sum(r["parameters"] for r in ranks) == ddp["parameters"]  # the shards cover the model once
    with pytest.raises(ValueError, match="world=0"):
        theory_bytes(shapes, 0, sharded=True)


def test_theory_communication_counts_padding_and_regathering():
    assert padded_values([(3, 4), (6,)], 2) == 4 * 4 + 6
    groups = [[(4, 2)], [(3, 1)]]  # a block of 8 values, a root of 3 rows padded to 4
    c = theory_communication(groups, 2, regathered=[True, False])
    assert c["DDP"] == {"all_reduce": 11 * 4}
    assert c["FSDP"] == {"all_gather_single": (8 + 8 + 4) * 4, "reduce_scatter_single": (8 + 4) * 4}
    assert ring_bytes_sent({"all_reduce": 100}, 4) == 150
    assert ring_bytes_sent({"all_gather_single": 100, "reduce_scatter_single": 100}, 2) == 100


def test_rank_bytes_of_a_plain_model_and_adamw():
    model = sharding_model(width=8, depth=1, vocab=10)
    tokens, labels = sharding_batches(1, 4, seq_len=3, vocab=10)[0]
    optimizer = torch.optim.AdamW(model.parameters())
    torch.nn.functional.cross_entropy(model(tokens), labels).backward()
    optimizer.step()
    held = rank_bytes(model, optimizer)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert held == theory_bytes(shapes, 1, sharded=False)
    assert set(held) == set(KINDS)


def test_model_and_batches_are_reproducible_and_checked():
    a, b = sharding_model(seed=1), sharding_model(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    first, again = sharding_batches(2, 4), sharding_batches(2, 4)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(first, again))
    assert first[0][0].shape == (4, 16) and int(first[0][1].max()) < 3
    with pytest.raises(ValueError, match="batch_size=0"):
        sharding_batches(1, 0)
    with pytest.raises(ValueError, match="depth=0"):
        sharding_model(depth=0)


@pytest.mark.slow
def test_ddp_and_fsdp_in_two_processes_match_the_theory_and_each_other():
    from effitrain_helpers.training.model_sharding import compare_ddp_fsdp, report_table

    report = compare_ddp_fsdp(2, steps=2, batch_size=4)
    for strategy in ("DDP", "FSDP"):
        assert report["bytes"][strategy] == report["theory_bytes"][strategy]
        assert report["communication"][strategy] == report["theory_communication"][strategy]
    fsdp = report["bytes"]["FSDP"]
    assert sum(r["parameters"] for r in fsdp) == report["bytes"]["DDP"][0]["parameters"]
    assert all(math.isclose(r, 0.5, rel_tol=0.05) for r in report["ratio"].values())
    assert report["max_weight_difference"] <= 1e-6
    assert "FSDP / DDP" in report_table(report)


def test_summarize_reads_rank_results():
    shapes = [(3, 2)]
    def rank(r, sharded):
        return {"bytes": theory_bytes(shapes, 2, sharded, r), "communication": {}, "groups": [shapes],
                "losses": [1.0], "weights": {"w": torch.zeros(3, 2)}}
    report = summarize([{"DDP": rank(r, False), "FSDP": rank(r, True)} for r in range(2)])
    assert report["parameters"] == 6 and report["max_weight_difference"] == 0.0
    assert report["ratio"]["parameters"] == 4 / 6  # rank 0 keeps 2 of the 3 rows


class _MemoryEvent:
    def __init__(self, start, nbytes, name="[memory]"):
        self._start, self._nbytes, self._name = start, nbytes, name

    def start_ns(self):
        return self._start

    def nbytes(self):
        return self._nbytes

    def name(self):
        return self._name


def test_allocation_peak_is_the_largest_running_sum_in_time_order():
    from effitrain_helpers.training.model_sharding import allocation_peak

    events = [_MemoryEvent(3, -100), _MemoryEvent(1, 100), _MemoryEvent(2, 50), _MemoryEvent(4, 80),
              _MemoryEvent(5, 999, name="aten::mm")]  # only [memory] events count
    assert allocation_peak(events) == 150
    assert allocation_peak([]) == 0


def test_peak_strategies_refuse_an_unknown_one():
    import pytest

    from effitrain_helpers.training.model_sharding import _wrap_for_peak, sharding_model

    with pytest.raises(ValueError, match="strategy='ZeRO-2' is not one of DDP, ZeRO-1, FSDP"):
        _wrap_for_peak("ZeRO-2", sharding_model())
