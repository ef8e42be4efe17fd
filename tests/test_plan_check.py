"""The planner checks itself: each rank's parameter, gradient and optimizer bytes on a fake world of 64 ranks
(``torch.distributed``'s fake backend, no process started), and one layer's activation bytes in 2 real gloo
processes, against its own formulas (``training/plan_check.py``)."""

import pytest

from effitrain_helpers.measure.planner import Layout
from effitrain_helpers.training import plan_check

FAKE_TOLERANCE = 0.01  # norms and biases that TP replicates, FSDP's short last shard, AdamW's step counters
ACTIVATION_TOLERANCE = 0.005  # layer norms' float32 mean and 1/std per token, which the formula leaves out


@pytest.mark.slow
def test_a_fake_world_of_64_ranks_holds_what_the_planner_predicts():
    layout = Layout(dp=8, tp=4, pp=2, cp=1, zero=3, recompute="none")
    ranks = plan_check.fake_world(layout)
    assert [r["rank"] for r in ranks] == list(range(64))
    assert {r["stage"] for r in ranks} == {0, 1}
    stepped = [r for r in ranks if "gradients" in r["bytes"]]
    assert [r["rank"] for r in stepped] == plan_check.stepped_ranks(layout) == [0, 63]
    errors = plan_check.relative_errors(ranks)
    assert max(errors.values()) <= FAKE_TOLERANCE, errors
    # what the rank really holds differs from rank to rank only where the prediction says so (its stage) or by
    # FSDP's short last shard: never by a whole factor of a dimension
    assert all(r["bytes"]["parameters"] < 1.05 * min(q["bytes"]["parameters"] for q in ranks) for r in ranks)


@pytest.mark.slow
def test_the_fake_world_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="ZeRO 0 or 3 with CP 1"):
        plan_check.rank_bytes(Layout(dp=8, tp=4, pp=2, cp=1, zero=1, recompute="none"), 0)


@pytest.mark.slow
def test_two_gloo_ranks_keep_the_activations_the_formula_counts():
    from effitrain_helpers.processes.launch import launch

    ranks = launch(plan_check.activation_run, num_processes=2, cpu=True, quiet=True, timeout=240)
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        assert {(row["tp"], row["recompute"]) for row in rank["rows"]} == {
            (tp, rec) for tp in (1, 2) for rec in ("none", "selective", "full")}
        for row in rank["rows"]:
            gap = abs(row["measured"] - row["formula"]) / row["formula"]
            assert gap <= ACTIVATION_TOLERANCE, row
