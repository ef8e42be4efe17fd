import math

import pytest
import torch

from effitrain_helpers.measure import bench
from effitrain_helpers.measure.bench import MatmulResult


@pytest.mark.parametrize("text, expected", [("256,512", [256, 512]), (" 64 ", [64]), ([128, 1024], [128, 1024])])
def test_parse_sizes_accepts(text, expected):
    assert bench.parse_sizes(text) == expected


@pytest.mark.parametrize("bad", ["0", "-5", "abc", "1.5", "40000", "", "256,,512", [True], [0]])
def test_parse_sizes_rejects_with_value_and_fix(bad):
    with pytest.raises(ValueError, match=r"(size .* not allowed.*Fix|no sizes given)"):
        bench.parse_sizes(bad)


def test_parse_dtypes():
    assert bench.parse_dtypes("float32,bfloat16") == ["float32", "bfloat16"]
    with pytest.raises(ValueError, match=r"'int8'.*float32, bfloat16, float16"):
        bench.parse_dtypes("int8")


@pytest.mark.parametrize("bad", ["tpu", "cpu:0", "", "gpu"])
def test_unknown_device_is_an_error(bad):
    with pytest.raises(ValueError, match="is not allowed; choose from cpu, cuda, mps, all"):
        bench.resolve_devices(bad)


def test_missing_gpu_is_reported(monkeypatch):
    monkeypatch.setattr(bench, "available_devices", lambda: ["cpu"])
    devices, notes = bench.resolve_devices("cuda")
    assert devices == ["cpu"] and "no cuda device found" in notes[0]
    devices, notes = bench.resolve_devices("all")
    assert devices == ["cpu"] and notes == ["no GPU found: showing CPU only"]


def test_time_matmul_measures_a_real_product():
    r = bench.time_matmul(64, "float32", "cpu", repeats=3)
    assert r.repeats == 3 and r.number >= 1
    assert 0 < r.seconds_min <= r.seconds <= r.seconds_max
    assert math.isclose(r.gflops, 2 * 64**3 / r.seconds / 1e9)
    assert set(r.to_dict()) >= {"device", "dtype", "size", "seconds", "gflops"}


def test_time_matmul_rejects_bad_repeats():
    with pytest.raises(ValueError, match="repeats=0"):
        bench.time_matmul(64, repeats=0)


def test_run_benchmark_covers_every_combination(monkeypatch):
    monkeypatch.setattr(bench, "available_devices", lambda: ["cpu"])
    results, notes = bench.run_benchmark([32, 64], ["float32", "bfloat16"], "cpu", repeats=1, check_load=False)
    assert [(r.dtype, r.size) for r in results] == [("float32", 32), ("float32", 64), ("bfloat16", 32), ("bfloat16", 64)]
    assert notes == []


def test_unsupported_dtype_is_an_error_for_one_device_and_a_skip_for_all(monkeypatch):
    monkeypatch.setattr(bench, "dtype_supported", lambda dev, dt: dt != "float16")
    with pytest.raises(ValueError, match=r"'float16' is not supported on cpu; allowed there: float32, bfloat16"):
        bench.run_benchmark([32], ["float16"], "cpu", repeats=1)
    results, notes = bench.run_benchmark([32], ["float16", "float32"], "all", repeats=1, check_load=False)
    assert [r.dtype for r in results] == ["float32"]
    assert "float16 is not supported on cpu: skipped" in notes


def test_dtype_supported_on_cpu():
    assert bench.dtype_supported("cpu", "float32")


def _result(device, dtype, size, seconds):
    return MatmulResult(device, device, dtype, size, seconds, seconds, seconds, 1, 1, bench.gflops(size, seconds))


def test_speedups_divide_cpu_by_gpu_time():
    results = [_result("cpu", "float32", 512, 0.01), _result("cuda:0", "float32", 512, 0.0001)]
    (row,) = bench.speedups(results)
    assert row["device"] == "cuda:0" and math.isclose(row["speedup"], 100)
    assert bench.speedups(results[:1]) == []


def test_gflops_formula():
    assert bench.gflops(1000, 1.0) == 2.0


def test_cpu_peak_from_cores_clock_and_isa(monkeypatch):
    import psutil

    from types import SimpleNamespace

    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(current=2000.0, min=0.0, max=0.0))
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    peak, source = bench.theoretical_peak_gflops("cpu", "float32")
    assert peak == 4 * 2.0 * 32 and "4 cores" in source
    assert bench.theoretical_peak_gflops("cpu", "bfloat16")[0] is None


def test_best_achievable_reports_the_best_of_the_sweep():
    sweep = bench.best_achievable("cpu", "float32", sizes=[32, 64], repeats=1)
    assert sweep.best_gflops == max(r.gflops for r in sweep.results)
    assert sweep.best_size in (32, 64)


def test_results_table_lists_each_measurement():
    table = bench.results_table([_result("cpu", "float32", 512, 0.01)])
    assert "512" in table and "GFLOP/s" in table


# ---------------------------------------------------------------- detecting an unreliable run (fake timings)

def _series(device, dtype, size, times, busy=""):
    import statistics

    median = statistics.median(times)
    return MatmulResult(device, device, dtype, size, median, min(times), max(times), len(times), 1,
                        bench.gflops(size, median), tuple(times), busy)


STEADY = [0.0100, 0.0101, 0.0099, 0.0100, 0.0102]
BURST = [0.0100, 0.0210, 0.0098, 0.0195, 0.0101]  # another program took the CPU in two of five repeats


def test_relative_iqr_of_steady_and_disturbed_series():
    assert bench.relative_iqr(STEADY) < 0.05
    assert bench.relative_iqr(BURST) > bench.SPREAD_MAX
    assert bench.relative_iqr([0.01]) == 0.0 and bench.relative_iqr([]) == 0.0


def test_unreliable_reason_names_the_spread_and_the_busy_cpu():
    assert bench.unreliable_reason(STEADY) == ""
    assert "repeats spread by" in bench.unreliable_reason(BURST)
    busy = bench.busy_reason(threads=2, idle=1.0)
    assert busy.startswith("only 1.0 idle cores for 2 threads")
    assert bench.busy_reason(threads=2, idle=1.8) == "" and bench.busy_reason(threads=1, idle=0.6) == ""
    assert bench.unreliable_reason(STEADY, busy) == busy
    assert _series("cpu", "float32", 256, STEADY).unreliable == ""
    assert _series("cpu", "float32", 256, STEADY, busy).unreliable == busy


def test_idle_cores_is_a_share_of_this_process_cores(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu: [100.0] * 64)
    assert bench.idle_cores(0.0) == 0.0
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval, percpu: [0.0] * 64)
    assert 1 <= bench.idle_cores(0.0) <= 64


def test_dtype_ratio_concludes_only_from_a_steady_run():
    f32 = _series("cpu", "float32", 256, STEADY)
    bf16 = _series("cpu", "bfloat16", 256, [t * 3 for t in STEADY])  # bf16 three times slower, every round
    verdict = bench.dtype_ratio([f32, bf16], "cpu", 256)
    assert verdict.reliable and math.isclose(verdict.value, 1 / 3, rel_tol=1e-6)
    assert "bfloat16 is slower than float32 here" in str(verdict)


def test_dtype_ratio_from_the_issue_a_busy_float32_round_is_no_20x_speedup():
    """Lesson 1.1 under load once printed 'bfloat16 runs at 20.51x the float32 rate': float32 dipped."""
    f32 = _series("cpu", "float32", 512, [0.010, 0.600, 0.011, 0.650, 0.010])
    bf16 = _series("cpu", "bfloat16", 512, [0.030, 0.031, 0.030, 0.032, 0.030])
    verdict = bench.dtype_ratio([f32, bf16], "cpu", 512)
    assert not verdict.reliable and "UNRELIABLE, no conclusion" in str(verdict)
    assert "faster" not in str(verdict) and "slower" not in str(verdict)


def test_dtype_ratio_sees_rounds_that_disagree_even_when_each_series_looks_steady():
    f32 = _series("cpu", "float32", 256, [0.010, 0.010, 0.010, 0.0108, 0.0108])
    bf16 = _series("cpu", "bfloat16", 256, [0.0108, 0.0108, 0.010, 0.010, 0.010])
    assert f32.unreliable == "" and bf16.unreliable == ""
    verdict = bench.dtype_ratio([f32, bf16], "cpu", 256)
    assert not verdict.reliable and "interleaved rounds disagree" in str(verdict)


def test_dtype_ratio_without_both_dtypes_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no bfloat16 and float32 results at n=256 on cpu"):
        bench.dtype_ratio([_series("cpu", "float32", 256, STEADY)], "cpu", 256)


class _FakeMeasurement:
    def __init__(self, times):
        import statistics

        self.times, self.median = times, statistics.median(times)


@pytest.mark.parametrize("ours, theirs, busy, expected", [
    (STEADY, STEADY, "", "agree"),
    (STEADY, [t * 2 for t in STEADY], "", "disagree although both runs were steady"),
    (BURST, STEADY, "", "UNRELIABLE (repeats spread"),
    (STEADY, BURST, "", "UNRELIABLE (repeats spread"),
    (STEADY, STEADY, "only 0.9 idle cores for 2 threads", "UNRELIABLE (only 0.9 idle cores"),
])
def test_reference_check_agrees_only_when_both_timings_are_steady(monkeypatch, ours, theirs, busy, expected):
    monkeypatch.setattr(bench, "torch_benchmark", lambda *a, **k: _FakeMeasurement(theirs))
    verdict = bench.reference_check(_series("cpu", "float32", 256, ours, busy))
    assert expected in str(verdict) and verdict.reliable == (not expected.startswith("UNRELIABLE"))


def test_run_benchmark_interleaves_dtypes_and_records_the_load(monkeypatch):
    monkeypatch.setattr(bench, "available_devices", lambda: ["cpu"])
    monkeypatch.setattr(bench, "idle_cores", lambda window_s=0: 0.2)
    results, notes = bench.run_benchmark([32], ["float32", "bfloat16"], "cpu", repeats=3)
    assert [len(r.times) for r in results] == [3, 3]
    assert all(r.busy.startswith("only 0.2 idle cores") and r.unreliable for r in results)
    assert any("the machine looks busy" in n for n in notes)
    results, notes = bench.run_benchmark([32], ["float32"], "cpu", repeats=2, check_load=False)
    assert results[0].busy == "" and notes == []


def test_results_frame_has_one_row_per_result_with_its_trust():
    frame = bench.results_frame([_series("cpu", "float32", 256, STEADY), _series("cpu", "float32", 512, BURST)])
    assert list(frame["reliable"]) == ["yes", "no"] and list(frame["n"]) == [256, 512]
