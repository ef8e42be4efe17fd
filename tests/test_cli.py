"""The `effitrain` command line: run as a learner would run it (a real subprocess, ``slow``), and its answers to
bad input in this process (``cli.main``), which is quick."""

import json
import os
import subprocess
import sys

import pytest

from effitrain_helpers.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "effitrain_helpers.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_devices_json():
    out = run("devices", "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["logical_cores"] >= 1 and "gpus" in data


@pytest.mark.slow
def test_bench_json_has_one_record_per_measurement(tmp_path):
    plot = tmp_path / "bench.png"
    out = run("bench", "--sizes", "32,64", "--dtypes", "float32,bfloat16", "--device", "cpu", "--repeats", "2",
              "--json", "--plot", str(plot))
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["dtype"], r["size"]) for r in records] == [("float32", 32), ("float32", 64), ("bfloat16", 32), ("bfloat16", 64)]
    for r in records:
        assert {"device", "dtype", "size", "seconds", "gflops"} <= set(r) and r["gflops"] > 0
    assert plot.stat().st_size > 1000


@pytest.mark.slow
def test_bench_text_and_best():
    out = run("bench", "--sizes", "32", "--device", "all", "--repeats", "1", "--best")
    assert out.returncode == 0, out.stderr
    assert "GFLOP/s" in out.stdout and "best achievable cpu float32" in out.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["bench", "--sizes", "0"], "size '0' is not allowed"),
        (["bench", "--sizes", "-5"], "size '-5' is not allowed"),
        (["bench", "--sizes", "abc"], "size 'abc' is not allowed"),
        (["bench", "--dtypes", "int8"], "dtype 'int8' is not allowed"),
        (["bench", "--device", "tpu"], "device 'tpu' is not allowed"),
        (["bench", "--repeats", "0"], "repeats=0"),
        (["bench", "--repeats", "x"], "invalid int value: 'x'"),
        (["model", "no-such-model-anywhere"], "'no-such-model-anywhere' is neither a local folder"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["shards", "--processes", "0"], "--processes=0 must be a whole number from 1 to 64"),
        (["shards", "--processes", "65"], "--processes=65 must be a whole number from 1 to 64"),
        (["shards", "--samples", "-3"], "--samples=-3 must be a whole number from 1"),
        (["ddp-check", "--processes", "1"], "--processes=1 must be a whole number from 2 to 64"),
        (["ddp-check", "--processes", "0"], "a data-parallel check needs at least 2 processes"),
        (["train", "--batch-size", "0"], "batch_size=0 must be a whole number"),
        (["efficiency", "--local-sgd-steps", "0"], "--local-sgd-steps=0 must be a whole number from 1 to 256"),
        (["efficiency", "--accumulation-steps", "-1"], "--accumulation-steps=-1 must be a whole number from 1 to 64"),
        (["efficiency", "--processes", "1"], "local SGD needs a group of at least 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, words, capsys):
    try:
        code = main(args)
    except SystemExit as exit_:  # argparse's own errors (unknown command, not a number) exit
        code = exit_.code
    out = capsys.readouterr()
    assert code == 2
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], out.err
    assert out.out == ""


@pytest.mark.slow
def test_bad_input_from_the_real_command_is_one_line_and_exit_code_2():
    out = run("shards", "--samples", "-3")
    assert out.returncode == 2 and out.stdout == ""
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        "effitrain shards: error: --samples=-3 must be a whole number from 1 to 100000. Fix: e.g. --samples 10 --batch-size 2."]


@pytest.mark.slow
def test_model_reports_the_offline_build():
    out = run("model", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["source"] in {"offline-build", "cache"}


@pytest.mark.slow
def test_shards_json_has_one_record_per_rank():
    out = run("shards", "--processes", "2", "--samples", "7", "--batch-size", "2", "--json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["rank"], r["world_size"]) for r in records] == [(0, 2), (1, 2)]
    assert set(records[0]["indices"]) | set(records[1]["indices"]) == set(range(7))


@pytest.mark.slow
@pytest.mark.exhaustive  # every run: tests/test_train.py proves the same four checks, lesson 2.2 runs them
def test_ddp_check_json_reports_the_four_checks_and_throughput():
    out = run("ddp-check", "--processes", "2", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["checks"] == {"data_sharding": True, "model_replication": True, "gradient_aggregation": True,
                                "parameter_synchronization": True}
    assert result["max_differences"]["max_grad_diff_vs_single_process"] <= 1e-5
    assert set(result["samples_per_second"]) == {"workbook", "ddp", "one_process"}


@pytest.mark.slow
@pytest.mark.exhaustive  # every run: tests/test_efficiency.py measures each technique, lesson 3.3 the table
def test_efficiency_json_has_one_record_per_technique_with_measured_and_expected_figures():
    out = run("efficiency", "--json", "--steps", "4", "--local-sgd-steps", "2", "--accumulation-steps", "2")
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert [r["technique"].split(" (")[0] for r in records] == ["gradient accumulation", "gradient checkpointing",
                                                                "local SGD", "mixed precision"]
    for r in records:
        for key in ("memory", "time", "sync"):
            assert r[f"{key}_ratio"] > 0 and r[f"{key}_expected"] > 0
        assert any(word in r["verdict"] for word in (": as expected (", ": differs from theory (", ": UNRELIABLE")), r
        assert set(r["judged"]) <= {"memory", "time", "synchronisations"} and r["judged"], r
    accumulation, checkpointing, local_sgd, mixed = records
    assert mixed["conclusion"]["text"] and mixed["conclusion"]["device"] in {"cpu", "gpu"}  # as the text prints
    for exact in (accumulation, local_sgd):  # counted, not timed: these verdicts must agree with theory
        assert "synchronisations: as expected (" in exact["verdict"] and "time: not judged" in exact["verdict"], exact
    assert accumulation["memory_ratio"] == pytest.approx(0.5, rel=0.03) and accumulation["sync_ratio"] == 1
    assert checkpointing["memory_ratio"] < 0.6
    assert local_sgd["sync_ratio"] == local_sgd["sync_expected"] == 0.5


# --- chapter 4: effitrain optimizers ----------------------------------------------------------------------------

@pytest.mark.slow
def test_optimizers_json_has_one_record_per_optimizer():
    out = run("optimizers", "--steps", "4", "--json")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["name"] for r in records] == ["adamw", "adafactor", "adamw8bit"]
    for r in records:
        assert {"state_bytes", "expected_state_bytes", "seconds_per_step", "final_loss"} <= set(r)
        assert abs(r["state_bytes"] / r["expected_state_bytes"] - 1) < 0.05 and r["seconds_per_step"] > 0


@pytest.mark.slow
def test_optimizers_text_table(tmp_path):
    plot = tmp_path / "opt.png"
    out = run("optimizers", "--optimizers", "adafactor", "--steps", "3", "--plot", str(plot))
    assert out.returncode == 0, out.stderr
    assert "state MiB" in out.stdout and "adafactor" in out.stdout and plot.stat().st_size > 1000


@pytest.mark.parametrize("args, words", [
    (["optimizers", "--optimizers", "sgd"], "optimizer 'sgd' is not known; allowed: adamw, adafactor, adamw8bit"),
    (["optimizers", "--learning-rate", "0"], "learning_rate=0.0 must be a positive number"),
    (["optimizers", "--learning-rate=-1e-3"], "learning_rate=-0.001 must be a positive number"),
    (["optimizers", "--steps", "0"], "steps=0 must be a whole number from 1 to 4000"),
])
def test_optimizers_bad_input_is_one_line_and_exit_code_2(args, words, capsys):
    test_bad_input_is_one_line_and_exit_code_2(args, words, capsys)


@pytest.mark.parametrize("args, words", [
    (["fsdp", "--processes", "1"], "--processes=1 must be a whole number from 2 to 64"),
    (["fsdp", "--processes", "0"], "sharding across 1 process keeps everything whole"),
    (["fsdp", "--steps", "0"], "--steps=0 must be a whole number from 1 to 1000"),
    (["fsdp", "--batch-size", "-2"], "--batch-size=-2 must be a whole number >= 1"),
])
def test_fsdp_bad_input_is_one_line_and_exit_code_2(args, words, capsys):
    test_bad_input_is_one_line_and_exit_code_2(args, words, capsys)


@pytest.mark.slow
def test_fsdp_json_reports_bytes_per_rank_communication_and_equivalence():
    out = run("fsdp", "--processes", "2", "--steps", "2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["processes"] == 2
    for strategy in ("DDP", "FSDP"):
        assert report["bytes"][strategy] == report["theory_bytes"][strategy]
        assert report["communication"][strategy] == report["theory_communication"][strategy]
    assert all(abs(r - 0.5) <= 0.025 for r in report["ratio"].values())
    assert report["max_weight_difference"] <= 1e-6 and report["max_loss_difference"] <= 1e-6


@pytest.mark.parametrize(
    "args, words",
    [
        (["experts", "--processes", "1"], "expert parallelism needs at least 2 processes"),
        (["experts", "--tokens", "3,x"], "--tokens='x' must be a whole number from 1 to 100000"),
        (["experts", "--tokens", "3,4,5"], "gives 3 batch sizes for 2 processes"),
        (["experts", "--experts", "6", "--processes", "4"], "the experts must be a multiple of the processes"),
        (["experts", "--top-k", "9"], "--top-k at most --experts"),
        (["experts", "--capacity-factor", "0"], "--capacity-factor=0.0 must be a positive number"),
        (["experts", "--d", "0"], "--d=0 must be a whole number"),
        (["attention", "--n", "0"], "--n=0 must be a whole number from 1 to 8192"),
        (["attention", "--tile", "-4"], "--tile=-4 must be a whole number"),
        (["attention", "--heads", "x"], "invalid int value: 'x'"),
    ],
)
def test_chapter_8_demos_refuse_bad_input_in_one_line(args, words, capsys):
    test_bad_input_is_one_line_and_exit_code_2(args, words, capsys)


@pytest.mark.parametrize("command", ["experts", "attention"])
def test_chapter_8_demos_document_every_option(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    options = {"experts": ["--processes", "--tokens", "--d", "--hidden", "--experts", "--top-k", "--capacity-factor",
                           "--json"],
               "attention": ["--n", "--d", "--heads", "--batch", "--tile", "--not-causal", "--json"]}[command]
    assert all(option in shown for option in options) and "(default" in shown, shown


@pytest.mark.slow  # 2 gloo processes
def test_experts_prints_tokens_per_expert_and_bytes_against_theory():
    out = run("experts", "--processes", "2", "--tokens", "24,16", "--d", "8", "--hidden", "8", "--experts", "4")
    assert out.returncode == 0, out.stderr
    assert "largest difference output 0.0e+00" in out.stdout and "busiest expert" in out.stdout, out.stdout
    assert out.stdout.count("dispatch") == 2 and "theory (B)" in out.stdout


def test_attention_reports_bytes_and_exactness(capsys):
    assert main(["attention", "--n", "96", "--d", "8", "--tile", "32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert all(r["saved_bytes"] == r["theory_bytes"] for r in result["rows"])
    assert max(result["gaps"].values()) < 1e-4 and len(result["rows"]) == 4
