"""Will it fit? The ZeRO paper's per-device bytes, the activation estimate, and ``effitrain memory`` (in this
process: ``cli.main``, quick)."""

import json

import pytest

from effitrain_helpers.cli import main
from effitrain_helpers.core.settings import SETTINGS
from effitrain_helpers.measure.memory_estimate import (GB, OPTIMIZERS, STAGES, activation_bytes, stage_bytes,
                                                       will_it_fit)


def test_the_zero_papers_example_7_5b_parameters_on_64_devices():
    # ZeRO paper, figure 1: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device
    totals = [stage_bytes(7.5e9, 64, stage)["total"] / GB for stage in STAGES]
    assert totals == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.05)


@pytest.mark.parametrize("optimizer, p, g, k", [("mixed", 2, 2, 12), ("fp32", 4, 4, 8),
                                                ("8bit", 2, 2, 4 + 2 * (1 + 4 / 256))])
def test_each_stage_shards_one_more_kind(optimizer, p, g, k):
    psi, n = 1e9, 8
    rows = {stage: stage_bytes(psi, n, stage, optimizer) for stage in STAGES}
    assert rows["DDP"] == {"parameters": p * psi, "gradients": g * psi, "optimizer state": k * psi,
                           "total": (p + g + k) * psi}
    assert rows["ZeRO-1"]["optimizer state"] == k * psi / n and rows["ZeRO-1"]["gradients"] == g * psi
    assert rows["ZeRO-2"]["gradients"] == g * psi / n and rows["ZeRO-2"]["parameters"] == p * psi
    assert rows["ZeRO-3"]["total"] == pytest.approx((p + g + k) * psi / n)
    assert (OPTIMIZERS[optimizer].parameter, OPTIMIZERS[optimizer].gradient) == (p, g)


def test_one_device_shards_nothing():
    assert len({stage_bytes(3e6, 1, stage, "fp32")["total"] for stage in STAGES}) == 1


def test_activations_follow_korthikanti_et_al():
    # per layer s*b*h*34 + 5*a*s^2*b bytes; 2 layers, s=128, b=4, h=256, a=4
    assert activation_bytes(2, 256, 4, 128, 4) == 2 * (128 * 4 * 256 * 34 + 5 * 4 * 128**2 * 4)
    report = will_it_fit(1e6, 2, shape={"layers": 2, "hidden": 256, "heads": 4, "sequence": 128, "micro_batch": 4})
    assert all(r["total with activations"] == r["total"] + r["activations"] for r in report["rows"])


def test_memory_json_gives_bytes_a_reader_can_check_against_the_formulas(capsys):
    assert main(["memory", "--parameters", "7.5e9", "--devices", "64", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    k = report["bytes_per_parameter"]
    psi, n = report["parameters"], report["devices"]
    by_stage = {r["stage"]: r for r in report["rows"]}
    assert by_stage["ZeRO-1"]["formula"] == "p·Ψ + g·Ψ + K·Ψ/N"
    assert by_stage["ZeRO-1"]["total"] == k["p"] * psi + k["g"] * psi + k["K"] * psi / n
    assert by_stage["ZeRO-3"]["total"] == pytest.approx((k["p"] + k["g"] + k["K"]) * psi / n)


def test_memory_text_shows_the_formulas_and_the_activation_source(capsys):
    assert main(["memory", "--parameters", "7.5e9", "--devices", "64", "--layers", "32", "--hidden", "4096",
                 "--heads", "32", "--sequence", "2048", "--micro-batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "(p + g + K)·Ψ/N" in out and "31.41" in out and "Korthikanti" in out and "L·s·b·h·(34" in out


@pytest.mark.parametrize("args, words", [
    (["--parameters", "abc"], "parameters='abc' must be a number of parameters from 1 to 1e+15"),
    (["--parameters", "0"], "parameters='0' must be a number of parameters from 1 to 1e+15"),
    (["--parameters", "inf"], "parameters='inf'"),
    (["--parameters", "1e308"], "parameters='1e308' must be a number of parameters from 1 to 1e+15"),
    (["--parameters", "1e9", "--devices", "0"], "devices=0 must be a whole number from 1 to 10000000. Fix: e.g. "
                                                "--devices 64"),
    (["--parameters", "1e9", "--devices", "10000000000"], "devices=10000000000 must be a whole number from 1"),
    (["--parameters", "1e9", "--optimizer", "adam"], "optimizer='adam' is not one of mixed, fp32, 8bit"),
    (["--parameters", "1e9", "--layers", "3"], "missing: --hidden, --heads, --sequence, --micro-batch"),
    (["--parameters", "1e9", "--layers", "0", "--hidden", "8", "--heads", "1", "--sequence", "4",
      "--micro-batch", "1"], "layers=0 must be a whole number from 1 to 100000"),
    (["--parameters", "1e9", "--layers", "8", "--hidden", "8", "--heads", "1", "--sequence", "10000000000",
      "--micro-batch", "1"], "sequence=10000000000 must be a whole number from 1 to 100000000"),
])
def test_memory_bad_input_is_one_line_and_exit_code_2(args, words, capsys):
    assert main(["memory", *args]) == 2
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], out.err
    assert out.out == ""


def test_memory_columns_stay_apart_for_the_widest_allowed_numbers(capsys):
    assert main(["memory", "--parameters", "1e15", "--devices", "1", "--layers", "100000", "--hidden", "10000000",
                 "--heads", "100000", "--sequence", "100000000", "--micro-batch", "1000000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("DDP", "ZeRO"))]
    assert rows and all(len(line.split()) >= 7 and "inf" not in line for line in rows), rows
    assert all(cell.count(".") == 1 for line in rows for cell in line.split()[1:7]), rows  # no two run together


def test_memory_speaks_portuguese(monkeypatch, capsys):
    monkeypatch.setattr(SETTINGS, "lang", "pt-BR")
    assert main(["memory", "--parameters", "1e9", "--optimizer", "adam"]) == 2
    assert "não é um de mixed, fp32, 8bit" in capsys.readouterr().err
    assert main(["memory", "--parameters", "1e9", "--devices", "8"]) == 0
    assert "GB por dispositivo" in capsys.readouterr().out
