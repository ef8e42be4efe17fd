import json
from pathlib import Path

from effitrain_helpers.core import devices


def test_summary_describes_this_machine():
    hw = devices.hardware_summary()
    assert hw.logical_cores >= 1 and hw.torch_threads >= 1
    assert hw.memory_total_gib > 0 and 0 <= hw.memory_available_gib <= hw.memory_total_gib
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.is_file() else []
    assert hw.cpu_model == (names[0] if names else devices.cpu_model_name()) and hw.cpu_model.strip()
    json.dumps(hw.to_dict())  # what `effitrain devices --json` prints
    text = hw.describe()
    assert "CPU" in text and "Memory" in text


def test_missing_gpu_is_reported_not_an_error(monkeypatch):
    monkeypatch.setattr(devices, "_cuda_devices", lambda: [])
    monkeypatch.setattr(devices, "_mps_devices", lambda: [])
    hw = devices.hardware_summary()
    assert not hw.has_gpu
    assert "no GPU found" in hw.describe()
    assert devices.available_devices() == ["cpu"]


def test_gpus_are_listed_with_name_memory_and_capability(monkeypatch):
    fake = devices.GPUDevice("cuda:0", "NVIDIA H200", 139.8, "9.0", True, True)
    monkeypatch.setattr(devices, "_cuda_devices", lambda: [fake])
    monkeypatch.setattr(devices, "_mps_devices", lambda: [])
    hw = devices.hardware_summary()
    assert hw.has_gpu
    line = hw.describe().splitlines()[3]
    assert "NVIDIA H200" in line and "139.8 GiB" in line and "9.0" in line and "fast bf16: yes" in line
    assert devices.available_devices() == ["cpu", "cuda:0"]


def test_cpu_half_precision_flags(monkeypatch):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: {"avx2", "amx_bf16"})
    monkeypatch.setattr(devices.platform, "system", lambda: "Linux")
    assert devices._cpu_half_precision() == (True, False)
    monkeypatch.setattr(devices, "_cpu_flags", lambda: {"avx2"})
    assert devices._cpu_half_precision() == (False, False)
