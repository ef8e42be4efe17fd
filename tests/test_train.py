"""Chapter 2 helpers: training config and data checks, the two loops, evaluation, the four checks,
the scaling measurement, and the training script under torchrun."""

import json
import os
import subprocess
import sys

import pytest
import torch

from effitrain_helpers.training import train
from effitrain_helpers.training.ddp_checks import four_steps, summarize_four_steps
from effitrain_helpers.processes.launch import launch
from effitrain_helpers.measure.metrics import accuracy_f1, majority_rate, trainer_metrics
from effitrain_helpers.training.scaling import measure_scaling, time_steps

SMALL = dict(n_train=160, n_validation=37, epochs=1, batch_size=8)


@pytest.mark.parametrize("bad, words", [
    (dict(learning_rate=0), "learning_rate=0 must be a positive number"),
    (dict(learning_rate=-1e-3), "learning_rate=-0.001"),
    (dict(learning_rate=float("nan")), "learning_rate=nan"),
    (dict(learning_rate="fast"), "learning_rate='fast'"),
    (dict(batch_size=0), "batch_size=0 must be a whole number >= 1"),
    (dict(epochs=-1), "epochs=-1"),
    (dict(warmup_steps=-5), "warmup_steps=-5"),
])
def test_bad_config_is_named(bad, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        train.TrainConfig(**bad)


def test_preflight_catches_bad_data_before_any_process(tmp_path):
    with pytest.raises(ValueError, match="label_column='paraphrase' is not a column"):
        train.preflight(train.TrainConfig(label_column="paraphrase", n_train=20), 2)
    one_class = tmp_path / "one_class.csv"
    one_class.write_text("label,sentence1,sentence2\n" + "".join(f"1,A{i} ran.,B{i} ran.\n" for i in range(20)))
    with pytest.raises(ValueError, match=r"only one class \(\[1\]\)"):
        train.preflight(train.TrainConfig(data=str(one_class)), 1)
    with pytest.raises(ValueError, match="3 processes but only 2 validation samples"):
        train.preflight(train.TrainConfig(n_train=20, n_validation=2), 3)
    with pytest.raises(ValueError, match="num_processes=0"):
        train.preflight(train.TrainConfig(n_train=20), 0)


@pytest.mark.slow  # trains for many steps in this process
def test_both_loops_train_and_agree_in_one_process():
    config = train.TrainConfig(**SMALL)
    plain, accelerated = train.train_plain(config), train.train_accelerate(config)
    assert plain["history"][0]["accuracy"] == accelerated["history"][0]["accuracy"]
    assert accelerated["history"][0]["n_evaluated"] == 37 and accelerated["world_size"] == 1


@pytest.mark.slow
def test_training_in_two_processes_ends_with_identical_weights_and_full_evaluation(tmp_path):
    config = train.TrainConfig(**SMALL, output_dir=str(tmp_path))
    runs = launch(train.train_accelerate, config, num_processes=2, quiet=True)
    assert [r["world_size"] for r in runs] == [2, 2] and runs[0]["fingerprint"] == runs[1]["fingerprint"]
    assert runs[0]["history"][0]["n_evaluated"] == 37
    assert (tmp_path / "config.json").is_file() and (tmp_path / "tokenizer.json").is_file()
    single = train.evaluate_checkpoint(str(tmp_path), 37, 8)
    right, wrong = zip(*launch(lambda p: (train.evaluate_checkpoint(p, 37, 8),
                                          train.evaluate_checkpoint(p, 37, 8, drop_repeats=False)),
                               str(tmp_path), num_processes=2, quiet=True))
    assert {k: right[0][k] for k in ("accuracy", "f1", "n_evaluated")} == {k: single[k] for k in ("accuracy", "f1", "n_evaluated")}
    assert single["n_evaluated"] == 37 and wrong[0]["n_evaluated"] > 37


@pytest.mark.slow
def test_four_steps_hold_and_a_broken_replica_is_caught():
    healthy = summarize_four_steps(launch(four_steps, global_batch=8, num_processes=2, quiet=True), 8)
    assert all(healthy[k] for k in ("data_sharding", "model_replication", "gradient_aggregation",
                                    "parameter_synchronization"))
    assert healthy["max_grad_diff_vs_single_process"] <= 1e-5 and healthy["shards"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    broken = summarize_four_steps(launch(four_steps, global_batch=8, break_replica=True, num_processes=2, quiet=True), 8)
    assert not broken["model_replication"] and not broken["parameter_synchronization"]
    unsynced = summarize_four_steps(launch(four_steps, global_batch=8, skip_gradient_sync=True, num_processes=2,
                                           quiet=True), 8)
    assert unsynced["model_replication"] and not unsynced["gradient_aggregation"]
    assert not unsynced["parameter_synchronization"]


def test_validation_does_not_move_with_the_training_size():
    from effitrain_helpers.sources.pairs import make_pairs

    assert make_pairs(20, 30)["validation"][:] == make_pairs(500, 30)["validation"][:]


def test_summary_flags_each_failure():
    base = {"shard": [0, 1], "initial_fingerprint": "a", "grad_vs_single_process": 0.0,
            "grad_spread_across_ranks": 0.0, "param_spread_after_step": 0.0}
    other = {**base, "shard": [2, 3]}
    assert summarize_four_steps([base, other], 4)["data_sharding"]
    assert not summarize_four_steps([base, {**other, "shard": [1, 3]}], 4)["data_sharding"]
    assert not summarize_four_steps([base, {**other, "grad_vs_single_process": 1e-3}], 4)["gradient_aggregation"]
    assert not summarize_four_steps([base, {**other, "param_spread_after_step": 1e-4}], 4)["parameter_synchronization"]


@pytest.mark.slow
def test_scaling_measures_both_loops_and_the_collective():
    timed = []

    def timer(accelerator, step, n):  # the lesson's timing, recording what it was asked to time
        timed.append(n)
        return time_steps(accelerator, step, n)

    one = measure_scaling(steps=2, rounds=1, timer=timer)
    assert timed == [1, 1, 1, 2, 2, 2], "a warm-up step, then the steps, of each of the three loops"
    assert one["world_size"] == 1 and one["communication_s_per_step"] == 0 and one["allreduce_s"] == 0
    two = launch(measure_scaling, steps=2, rounds=1, num_processes=2, quiet=True)[0]
    assert two["world_size"] == 2 and two["threads"] >= 1 and two["allreduce_gb_per_s"] > 0
    assert two["workbook_samples_per_s"] > 0 and two["ddp_samples_per_s"] > 0
    assert two["gradient_mib"] == pytest.approx(one["gradient_mib"])


def test_metrics_offline():
    assert accuracy_f1([1, 0, 1, 1], [1, 0, 0, 1]) == {"accuracy": 0.75, "f1": pytest.approx(0.8)}
    assert trainer_metrics((torch.tensor([[0.0, 1.0], [2.0, 1.0]]).numpy(), [1, 0]))["accuracy"] == 1.0
    assert majority_rate([1, 1, 0]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="got 2 predictions for 3 labels"):
        accuracy_f1([1, 0], [1, 0, 1])


@pytest.mark.slow
def test_the_script_runs_under_torchrun_with_two_processes(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run([torchrun, "--nproc_per_node", "2", "-m", "effitrain_helpers.training.train", "--epochs", "1",
                          "--n-train", "64", "--n-validation", "21", "--json"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)})  # its torchelastic_* logs
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["identical_weights"] and len(summary["fingerprints"]) == 2
    assert summary["history"][0]["n_evaluated"] == 21


def test_the_script_refuses_bad_values(capsys):
    assert train.main(["--learning-rate", "0"]) == 2  # what `python -m effitrain_helpers.training.train` returns
    assert "learning_rate=0.0 must be a positive number" in capsys.readouterr().err
