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
    results, notes = bench.run_benchmark([32, 64], ["float32", "bfloat16"], "cpu", repeats=1)
    assert [(r.dtype, r.size) for r in results] == [("float32", 32), ("float32", 64), ("bfloat16", 32), ("bfloat16", 64)]
    assert notes == []


def test_unsupported_dtype_is_an_error_for_one_device_and_a_skip_for_all(monkeypatch):
    monkeypatch.setattr(bench, "dtype_supported", lambda dev, dt: dt != "float16")
    with pytest.raises(ValueError, match=r"'float16' is not supported on cpu; allowed there: float32, bfloat16"):
        bench.run_benchmark([32], ["float16"], "cpu", repeats=1)
    results, notes = bench.run_benchmark([32], ["float16", "float32"], "all", repeats=1)
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
