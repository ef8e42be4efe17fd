"""Which configuration fits, and how fast? The planner's formulas, search and ranking, and ``effitrain plan`` (in
this process: ``cli.main``, quick). Its check against real tensors is ``test_plan_check.py``."""

import json

import pytest

from effitrain_helpers.cli import build_parser, main
from effitrain_helpers.measure.memory_estimate import GB, layer_activation_bytes
from effitrain_helpers.measure.planner import (RESERVED, Cluster, Layout, Model, bubble, estimate,
                                               memory_per_device, parameters_per_rank, plan)

LLAMA_70B = Model(70e9, 80, 8192, 64, 4096, 128256)
LLAMA_7B = Model(7e9, 32, 4096, 32, 4096, 32000)
FLAGS = ["--parameters", "70e9", "--layers", "80", "--hidden", "8192", "--heads", "64", "--seq", "4096",
         "--vocab", "128256", "--devices", "64", "--memory-gb", "80", "--devices-per-node", "8",
         "--global-batch-tokens", "4e6"]


def test_korthikanti_per_layer_for_each_recomputation_and_split():
    s, b, h, a = 4096, 1, 8192, 64
    none = s * b * h * (34 + 5 * a * s / h)
    assert layer_activation_bytes(h, a, s, b) == none
    assert layer_activation_bytes(h, a, s, b, tp=8) == none / 8  # sequence parallelism splits everything
    assert layer_activation_bytes(h, a, s, b, tp=4, cp=2) == pytest.approx(none / 8)
    assert layer_activation_bytes(h, a, s, b, recompute="selective") == 34 * s * b * h
    assert layer_activation_bytes(h, a, s, b, recompute="full") == 2 * s * b * h
    # tensor parallelism without sequence parallelism: equation 2 of the paper
    assert layer_activation_bytes(h, a, s, b, tp=8, sequence_parallel=False) == s * b * h * (10 + 24 / 8 + 5 * a * s
                                                                                             / (h * 8))


def test_bubble_and_the_first_stage_holding_p_micro_batches():
    assert bubble(1, 8) == 0 and bubble(4, 8) == pytest.approx(3 / 11) and bubble(8, 1) == pytest.approx(7 / 8)
    layout = Layout(dp=2, tp=8, pp=4, cp=1, zero=1, recompute="selective")
    per_layer = layer_activation_bytes(8192, 64, 4096, 1, tp=8, recompute="selective")
    logits = 4 * 4096 * 128256 / 8
    for m, held in ((16, 4), (2, 2)):  # 1F1B: stage 0 holds min(p, m) micro-batches, the last one and the logits
        expected = max(20 * per_layer * held, 20 * per_layer + logits)
        assert memory_per_device(LLAMA_70B, layout, m)["activations"] == pytest.approx(expected)


def test_parameters_per_rank_put_the_embeddings_on_the_end_stages():
    layout = Layout(dp=1, tp=2, pp=4, cp=1, zero=0, recompute="none")
    embedding = 128256 * 8192
    stages = [parameters_per_rank(LLAMA_70B, layout, s) for s in range(4)]
    assert stages[0] == stages[3] == pytest.approx(((70e9 - 2 * embedding) / 4 + embedding) / 2)
    assert stages[1] == pytest.approx((70e9 - 2 * embedding) / 8)
    assert sum(stages) * 2 == pytest.approx(70e9)


def test_zero_shards_over_data_and_context_parallel_ranks():
    memory = memory_per_device(LLAMA_70B, Layout(dp=4, tp=8, pp=1, cp=2, zero=3, recompute="full"), 8)
    assert memory["parameters"] == pytest.approx(2 * 70e9 / 8 / 8)
    assert memory["optimizer state"] == pytest.approx(12 * 70e9 / 64)


def test_every_fitting_configuration_fits_and_they_are_ranked_fastest_first():
    report = plan(LLAMA_70B, Cluster(64, 80), 4e6)
    rows = report["configurations"]
    assert report["fitting"] == len(rows) > 10 and report["tried"] > len(rows)
    assert all(r["fits"] and r["total_bytes"] <= (1 - RESERVED) * 80 * GB for r in rows)
    assert [r["step_seconds"] for r in rows] == sorted(r["step_seconds"] for r in rows)
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 64 for r in rows)
    assert rows[0]["name"] in report["reason"] or "fastest" in report["reason"]
    assert sum(rows[0]["memory_bytes"].values()) == pytest.approx(rows[0]["total_bytes"])


def test_tensor_parallelism_across_nodes_costs_more_than_inside_one():
    inside = estimate(LLAMA_70B, Cluster(64, 80), Layout(8, 8, 1, 1, 3, "selective"), 4e6)
    across = estimate(LLAMA_70B, Cluster(64, 80), Layout(4, 16, 1, 1, 3, "selective"), 4e6)
    assert (inside.links["tp"], across.links["tp"]) == ("intra", "inter")
    assert across.communication_seconds["tp"] > 5 * inside.communication_seconds["tp"]
    assert across.mfu < inside.mfu


def test_a_7b_model_needs_no_model_parallelism_on_64_devices():
    first = plan(LLAMA_7B, Cluster(64, 80), 4e6, {"cp": 1})["configurations"][0]
    assert (first["tp"], first["pp"], first["dp"]) == (1, 1, 64)


def test_all_six_fixed_judge_one_configuration_even_when_it_does_not_fit():
    fixed = {"dp": 64, "tp": 1, "pp": 1, "cp": 1, "zero": 0, "recompute": "none"}
    report = plan(LLAMA_70B, Cluster(64, 80), 4e6, fixed)
    assert report["judged"] and len(report["configurations"]) == 1
    assert not report["configurations"][0]["fits"] and report["reason"].startswith("does not fit")


@pytest.mark.parametrize("call, words", [
    (lambda: plan(LLAMA_70B, Cluster(8, 80), 4e6), "do not fit on 8 devices"),
    (lambda: Cluster(0, 80), "devices=0"),
    (lambda: Model(70e9, 80, 8192, 60, 4096, 128256), "not a multiple of heads=60"),
    (lambda: Model(1e6, 80, 8192, 64, 4096, 128256), "leave nothing for the layers"),
    (lambda: plan(LLAMA_70B, Cluster(64, 80), 4e6, {"tp": 3}), "no layout of 64 devices"),
    (lambda: plan(LLAMA_70B, Cluster(64, 80), 4e6, {"dp": 2, "tp": 8, "pp": 3, "cp": 1, "zero": 1,
                                                     "recompute": "full"}), "not the 64 devices"),
    (lambda: plan(LLAMA_7B, Cluster(64, 80), 1000, {"tp": 1, "pp": 1, "cp": 1}), "fewer than the data-parallel"),
])
def test_bad_input_is_one_line(call, words):
    with pytest.raises(ValueError, match=words) as err:
        call()
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)


def test_the_command_prints_json_with_bytes_by_part(capsys):
    assert main(["plan", *FLAGS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    first = report["configurations"][0]
    assert set(first["memory_bytes"]) == {"parameters", "gradients", "optimizer state", "activations"}
    assert report["model"]["parameters"] == 70e9 and report["cluster"]["devices"] == 64


def test_the_command_fixes_dimensions_and_judges_one(capsys):
    assert main(["plan", *FLAGS, "--tp", "8"]) == 0
    assert "TP8" in capsys.readouterr().out
    assert main(["plan", *FLAGS, "--json", "--tp", "8", "--pp", "4", "--dp", "2", "--cp", "1", "--zero", "1",
                 "--recompute", "selective"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["judged"] and report["configurations"][0]["name"].startswith("DP2 TP8 PP4 CP1 ZeRO-1")


def test_the_command_says_bad_input_in_one_line(capsys):
    assert main(["plan", *FLAGS[:-6], "--devices-per-node", "8", "--global-batch-tokens", "4e6",
                 "--memory-gb", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("effitrain plan: error:") and err.count("\n") == 1


def test_help_documents_every_input():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["plan"]
    documented = {a.option_strings[0]: a.help for a in sub._actions if a.option_strings}
    for flag in ("--parameters", "--layers", "--hidden", "--heads", "--seq", "--vocab", "--devices", "--memory-gb",
                 "--devices-per-node", "--global-batch-tokens", "--intra-gbps", "--inter-gbps", "--peak-tflops",
                 "--efficiency", "--optimizer", "--tp", "--pp", "--dp", "--cp", "--zero", "--recompute", "--json"):
        assert documented.get(flag), f"{flag} has no help"
