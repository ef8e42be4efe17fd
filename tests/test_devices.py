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


GRAVITON3_CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""
GRAVITON2_CPUINFO = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
"""
X86_CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16\n"


def test_cpu_flags_are_read_from_x86_and_arm_cpuinfo():
    assert {"avx2", "avx512_bf16"} <= devices.parse_cpu_flags(X86_CPUINFO)
    assert {"bf16", "asimdhp", "sve"} <= devices.parse_cpu_flags(GRAVITON3_CPUINFO)
    assert devices.parse_cpu_flags("processor\t: 0\n") == set()


def _on(monkeypatch, system, machine, cpuinfo, sysctl=None):
    monkeypatch.setattr(devices, "_cpu_flags", lambda: devices.parse_cpu_flags(cpuinfo))
    monkeypatch.setattr(devices.platform, "system", lambda: system)
    monkeypatch.setattr(devices.platform, "machine", lambda: machine)
    monkeypatch.setattr(devices, "_sysctl", lambda name: (sysctl or {}).get(name, ""))


def test_arm_cpus_with_bf16_instructions_are_fast_bf16(monkeypatch):
    _on(monkeypatch, "Linux", "aarch64", GRAVITON3_CPUINFO)  # Graviton3 (Neoverse V1): FEAT_BF16
    assert devices._cpu_half_precision() == (True, True)
    _on(monkeypatch, "Linux", "aarch64", GRAVITON2_CPUINFO)  # Graviton2 (Neoverse N1): no bf16
    assert devices._cpu_half_precision() == (False, True)
    _on(monkeypatch, "Linux", "aarch64", GRAVITON2_CPUINFO.replace("ssbs", "ssbs asimdbf16"))
    assert devices._cpu_half_precision()[0]


def test_apple_silicon_bf16_comes_from_sysctl(monkeypatch):
    _on(monkeypatch, "Darwin", "arm64", "", {"hw.optional.arm.FEAT_BF16": "1"})  # M2 and later
    assert devices._cpu_half_precision() == (True, True)
    _on(monkeypatch, "Darwin", "arm64", "", {"hw.optional.arm.FEAT_BF16": "0"})  # M1
    assert devices._cpu_half_precision() == (False, True)
    _on(monkeypatch, "Darwin", "x86_64", "", {"hw.optional.arm.FEAT_BF16": "1"})  # an Intel Mac: not asked
    assert devices._cpu_half_precision() == (False, False)
