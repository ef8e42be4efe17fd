"""Chapter 3's measurements: bad input, the equivalence checks, and each technique against theory."""

import json

import pytest
import torch

from effitrain_helpers.training import accumulation, checkpointing, local_sgd, precision, techniques, workload
from effitrain_helpers.training.techniques import Techniques


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4", None])
def test_step_counts_must_be_whole_numbers_from_one(bad):
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=.* whole number >= 1"):
        workload.check_steps("gradient_accumulation_steps", bad)


def test_techniques_refuse_bad_settings_by_name():
    with pytest.raises(ValueError, match="local_sgd_steps=0"):
        Techniques(local_sgd_steps=0)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=-1"):
        Techniques(accumulation_steps=-1)
    with pytest.raises(ValueError, match="precision='fp8' is unknown: use one of fp32, bf16, fp16"):
        Techniques(precision="fp8")
    with pytest.raises(ValueError, match="multiple of 3"):
        Techniques(accumulation_steps=3, batch_size=8)
    with pytest.raises(ValueError, match="learning_rate=0"):
        Techniques(learning_rate=0)
    with pytest.raises(TypeError, match="techniques.Techniques"):
        techniques.measure_techniques({"precision": "bf16"})


def test_precisions_a_device_cannot_run_are_reported_or_refused():
    assert techniques.resolve_precision("bf16", "cpu") == ("bf16", "")
    effective, note = techniques.resolve_precision("fp16", "cpu")
    assert effective == "fp32" and "fp16 on a CPU" in note
    with pytest.raises(ValueError, match="device='tpu' is unknown"):
        techniques.resolve_precision("bf16", "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            techniques.resolve_precision("fp16", "cuda")


def test_split_batches_and_agreeing_steps():
    batch = {"x": torch.arange(8), "labels": torch.arange(8)}
    parts = workload.split_batches([batch], 4)
    assert [p["x"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(ValueError, match="cannot be cut into 3"):
        workload.split_batches([batch], 3)

    class Run:
        def __init__(self, prints):
            self.fingerprints = prints

    assert local_sgd.agreeing_steps([Run(["a", "b", "c"]), Run(["a", "x", "c"])]) == [1, 3]


def test_lesson_rows_need_only_the_tokenizer(monkeypatch):
    from effitrain_helpers.sources import models

    def no_model(*args, **kwargs):
        raise AssertionError("lesson_rows loaded the whole model")

    monkeypatch.setattr(models, "load_classifier", no_model)
    rows = workload.lesson_rows(4, seq_len=16)
    assert len(rows) == 4 and rows[0]["input_ids"].shape == (16,)


@pytest.mark.slow  # trains for many steps in this process
def test_accumulation_keeps_a_kth_of_the_activations_and_gives_the_big_batch_weights():
    result = accumulation.measure_accumulation(micro_batch=2, accumulation_steps=2, seq_len=16, repeats=1)
    assert result.activation_ratio == pytest.approx(result.expected_ratio, rel=0.03)
    assert result.seconds_accumulated > 0 and result.seconds_full_batch > 0
    work = dict(steps=2, batch_size=4, seq_len=16)
    whole = techniques.run_techniques(Techniques(**work))
    pieces = techniques.run_techniques(Techniques(accumulation_steps=2, **work))
    assert workload.max_difference(whole.state_dict, pieces.state_dict) <= 1e-5
    assert whole.activation_bytes / pieces.activation_bytes == pytest.approx(2, rel=0.03)
    assert len(whole.losses) == len(pieces.losses) == 2


@pytest.mark.slow
def test_accumulation_in_two_processes_matches_one_process_with_the_whole_batch():
    from effitrain_helpers.processes.launch import launch

    work = dict(steps=2, seq_len=16)
    ranks = launch(techniques.run_techniques, Techniques(accumulation_steps=2, batch_size=4, **work),
                   num_processes=2, quiet=True)
    single = techniques.run_techniques(Techniques(batch_size=8, **work))
    assert ranks[0].world_size == 2 and ranks[0].communication.synchronisations == 2  # once per step
    assert workload.max_difference(ranks[0].state_dict, single.state_dict) <= 1e-5


def test_checkpointing_saves_memory_close_to_theory():
    (row,) = checkpointing.measure_checkpointing((16,), batch_size=4, repeats=1)
    assert row.memory_saved >= 0.4
    assert row.activation_bytes_on == pytest.approx(row.activation_bytes_on_expected, rel=0.05)
    assert row.step_seconds_on > 0 and row.step_seconds_off > 0
    if torch.cuda.is_available():
        assert 0 < row.peak_bytes_on < row.peak_bytes_off
    else:  # a CPU keeps no peak count: reported as missing, never as a number
        assert row.peak_bytes_off is None and row.peak_saved is None


@pytest.mark.slow
def test_local_sgd_synchronises_k_times_less_and_ends_with_identical_replicas():
    summary = local_sgd.measure_local_sgd(local_sgd_steps=2, steps=4, num_processes=2, batch_size=4)
    dp, ls, none = summary["data_parallel"], summary["local_sgd"], summary["no_communication"]
    assert ls.local_sgd_enabled and not dp.local_sgd_enabled
    assert (dp.synchronisations, ls.synchronisations, none.synchronisations) == (4, 2, 0)
    assert ls.synchronised_steps == ls.agreeing_steps == [2, 4]
    assert dp.agreeing_steps == [1, 2, 3, 4] and none.agreeing_steps == [] and not none.final_agree
    assert dp.bytes_per_rank == 2 * ls.bytes_per_rank and ls.closing_bytes == ls.parameter_bytes
    assert ls.final_agree
    with pytest.raises(ValueError, match="local SGD needs a group of at least 2"):
        local_sgd.measure_local_sgd(num_processes=1)


@pytest.mark.slow
def test_precisions_run_in_fresh_processes_and_fp16_on_a_cpu_is_reported_as_fp32():
    runs = precision.measure_precision(("fp32", "bf16", "fp16"), steps=2, batch_size=4, seq_len=16)
    assert runs["bf16"].compute_dtype == ["bfloat16"] and runs["fp32"].compute_dtype == ["float32"]
    assert all(r.parameter_dtype == "float32" and r.state_dict is None for r in runs.values())
    ratio = runs["bf16"].activation_bytes / runs["fp32"].activation_bytes  # halved, plus 16-bit weight copies
    assert ratio == pytest.approx(precision.low_precision_memory_ratio(runs["fp32"]), rel=0.25)
    if not torch.cuda.is_available():
        assert runs["fp16"].precision_effective == "fp32" and runs["fp16"].note
        assert runs["fp16"].losses == runs["fp32"].losses


def _precision_row(time_ratio, matmul_ratio=1.0):
    from effitrain_helpers.training.efficiency import ChapterRow

    return [ChapterRow("gradient checkpointing", 0.5, 0.5, 1.3, 4 / 3, 1, 1, ""),
            ChapterRow("mixed precision (bf16)", 0.55, 0.5, time_ratio, matmul_ratio, 1, 1, "")]


def _cpu(isa, bf16_fast):
    from effitrain_helpers.core.devices import HardwareSummary

    return HardwareSummary("Test CPU", 2, 2, 2, 8.0, 4.0, isa, bf16_fast, False, torch.__version__)


def test_efficiency_names_the_cpus_isa_and_concludes_what_holds_on_it():
    from effitrain_helpers.training.efficiency import precision_conclusion

    avx2 = precision_conclusion(_precision_row(12.0, 40.0), _cpu("SIMD AVX2", False))
    assert (avx2.device, avx2.name, avx2.isa, avx2.low, avx2.fast_units, avx2.outcome) == (
        "cpu", "Test CPU", "SIMD AVX2", "bf16", False, "costs_time")
    assert "Test CPU, SIMD AVX2" in avx2.text and "fast bf16 instructions" in avx2.text and ": no." in avx2.text
    assert "costs time here (12.00x" in avx2.text and "train in fp32 on this machine" in avx2.text
    amx = precision_conclusion(_precision_row(0.6, 0.3), _cpu("SIMD AVX512", True))
    assert amx.outcome == "pays" and ": yes." in amx.text and "So bf16 pays here: 0.60x" in amx.text
    small = precision_conclusion(_precision_row(1.1, 0.5), _cpu("SIMD AVX512", True))
    assert small.outcome == "not_faster_at_this_size"
    assert "not faster at this size" in small.text and "EFFITRAIN_SIZE=full" in small.text
    odd = precision_conclusion(_precision_row(0.9, 20.0), _cpu("SIMD AVX2", False))
    assert odd.outcome == "faster_without_units" and "measure again" in odd.text
    here = precision_conclusion(_precision_row(1.0))  # this machine's own summary
    assert ("this GPU" if torch.cuda.is_available() else "this CPU") in here.text


def test_efficiency_json_carries_the_conclusion_the_text_prints(monkeypatch, capsys):
    """``effitrain efficiency --json``: the mixed-precision record's ``conclusion`` is the text's last
    paragraph, with the CPU, its instruction set and whether bf16 is fast as fields (measurements faked)."""
    from effitrain_helpers.cli import main
    from effitrain_helpers.core import devices
    from effitrain_helpers.training import efficiency

    monkeypatch.setattr(efficiency, "measure_chapter", lambda *args, **kwargs: _precision_row(12.0, 40.0))
    monkeypatch.setattr(devices, "hardware_summary", lambda: _cpu("SIMD AVX2", False))
    assert main(["efficiency", "--processes", "2", "--json"]) == 0
    checkpointing, mixed = json.loads(capsys.readouterr().out)
    assert "conclusion" not in checkpointing
    conclusion = mixed["conclusion"]
    assert {k: conclusion[k] for k in ("technique", "device", "name", "isa", "low", "fast_units", "outcome")} == {
        "technique": "mixed precision (bf16)", "device": "cpu", "name": "Test CPU", "isa": "SIMD AVX2",
        "low": "bf16", "fast_units": False, "outcome": "costs_time"}
    assert main(["efficiency", "--processes", "2"]) == 0
    assert capsys.readouterr().out.rstrip("\n").endswith("\n\n" + conclusion["text"])
