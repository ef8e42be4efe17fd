"""What hardware do I have? (lesson 1.1, and the first cell of every lesson that measures)

``hardware_summary()`` returns a :class:`HardwareSummary`: the CPU (model, cores, torch threads,
memory, whether it has bf16/fp16 matrix units) and every CUDA or MPS device (name, memory,
compute capability, whether bf16/fp16 are fast there). Missing hardware is reported, never an
error. ``effitrain devices [--json]`` prints the same summary.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field

import psutil
import torch

from effitrain_helpers.core.language import tr

GIB = 1024**3


@dataclass
class GPUDevice:
    """One GPU (CUDA) or Apple GPU (MPS)."""

    index: str  # torch device string: "cuda:0", "mps"
    name: str
    memory_gib: float | None
    compute_capability: str | None
    bf16_fast: bool
    fp16_fast: bool


@dataclass
class HardwareSummary:
    """The machine a lesson runs on. ``to_dict()`` is what ``effitrain devices --json`` prints."""

    cpu_model: str
    physical_cores: int | None
    logical_cores: int
    torch_threads: int
    memory_total_gib: float
    memory_available_gib: float
    cpu_isa: str
    cpu_bf16_fast: bool
    cpu_fp16_fast: bool
    torch_version: str
    gpus: list[GPUDevice] = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """A few readable lines, for notebooks and the terminal."""
        lines = [
            tr("CPU   : {model} ({physical} physical / {logical} logical cores, torch uses {threads} threads, "
               "{isa})", model=self.cpu_model, physical=self.physical_cores, logical=self.logical_cores,
               threads=self.torch_threads, isa=self.cpu_isa),
            tr("Memory: {total:.1f} GiB total, {available:.1f} GiB available", total=self.memory_total_gib,
               available=self.memory_available_gib),
            tr("CPU fast bf16 matmul: {bf16}; fast fp16 matmul: {fp16}", bf16=_yes(self.cpu_bf16_fast),
               fp16=_yes(self.cpu_fp16_fast)),
        ]
        for gpu in self.gpus:
            mem = f"{gpu.memory_gib:.1f} GiB" if gpu.memory_gib is not None else tr("shared memory")
            cc = tr(", compute capability {cc}", cc=gpu.compute_capability) if gpu.compute_capability else ""
            lines.append(tr("GPU {index}: {name} ({memory}{cc}); fast bf16: {bf16}, fast fp16: {fp16}",
                            index=gpu.index, name=gpu.name, memory=mem, cc=cc, bf16=_yes(gpu.bf16_fast),
                            fp16=_yes(gpu.fp16_fast)))
        if not self.gpus:
            lines.append(tr("GPU   : no GPU found (no CUDA or MPS device): lessons run on the CPU only"))
        lines.append(f"torch {self.torch_version}")
        return "\n".join(lines)


def _yes(flag: bool) -> str:
    return tr("yes") if flag else tr("no")


def parse_cpu_flags(cpuinfo: str) -> set[str]:
    """The CPU feature flags in the text of /proc/cpuinfo: the ``flags`` line on x86, ``Features`` on ARM."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _cpu_flags() -> set[str]:
    """CPU feature flags from /proc/cpuinfo (Linux); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return parse_cpu_flags(fh.read())
    except OSError:
        return set()


def _sysctl(name: str) -> str:
    """The value of a macOS ``sysctl`` key, or '' when it does not exist or sysctl cannot run."""
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model_name() -> str:
    """The CPU's marketing name, e.g. 'AMD EPYC' or 'Apple M2'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin" and _sysctl("machdep.cpu.brand_string"):
        return _sysctl("machdep.cpu.brand_string")
    return platform.processor() or platform.machine() or "unknown CPU"


# bf16 matrix instructions: x86 AVX512-BF16 and AMX; ARM FEAT_BF16 (Graviton3/4, Apple M2 and later), which
# Linux lists as "bf16" in /proc/cpuinfo's Features line ("asimdbf16" in some tools' naming).
_BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16", "asimdbf16"}
_FP16_FLAGS = {"avx512_fp16", "amx_fp16"}


def _cpu_half_precision() -> tuple[bool, bool]:
    """(bf16 fast, fp16 fast) on this CPU: true only with instructions for that type.

    x86: AVX512-BF16 / AMX-BF16 and AVX512-FP16 / AMX-FP16. ARM on Linux: the ``bf16`` feature (FEAT_BF16) and
    ``asimdhp`` (half-precision vector arithmetic). macOS on Apple silicon: ``hw.optional.arm.FEAT_BF16`` (M2 and
    later), and fp16 arithmetic on every Apple chip.
    """
    flags = _cpu_flags()
    bf16 = bool(flags & _BF16_FLAGS)
    fp16 = bool(flags & _FP16_FLAGS) or (platform.machine() in ("aarch64", "arm64") and "asimdhp" in flags)
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        bf16 = bf16 or _sysctl("hw.optional.arm.FEAT_BF16") == "1"
        fp16 = True  # Apple silicon has native fp16 arithmetic
    return bf16, fp16


def _cuda_devices() -> list[GPUDevice]:
    found = []
    if not torch.cuda.is_available():
        return found
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        major, minor = props.major, props.minor
        found.append(
            GPUDevice(
                index=f"cuda:{i}",
                name=props.name,
                memory_gib=round(props.total_memory / GIB, 1),
                compute_capability=f"{major}.{minor}",
                bf16_fast=major >= 8,  # Ampere and newer have bf16 tensor cores
                fp16_fast=major >= 7,  # Volta and newer have fp16 tensor cores
            )
        )
    return found


def _mps_devices() -> list[GPUDevice]:
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        return []
    return [GPUDevice("mps", f"Apple GPU ({cpu_model_name()})", None, None, False, True)]


def hardware_summary() -> HardwareSummary:
    """Describe this machine: CPU, memory and every GPU torch can see."""
    mem = psutil.virtual_memory()
    bf16, fp16 = _cpu_half_precision()
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "unknown")()
    return HardwareSummary(
        cpu_model=cpu_model_name(),
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        torch_threads=torch.get_num_threads(),
        memory_total_gib=round(mem.total / GIB, 1),
        memory_available_gib=round(mem.available / GIB, 1),
        cpu_isa=f"SIMD {capability}",
        cpu_bf16_fast=bf16,
        cpu_fp16_fast=fp16,
        torch_version=torch.__version__,
        gpus=_cuda_devices() + _mps_devices(),
    )


def available_devices() -> list[str]:
    """Torch device strings present here, CPU first: e.g. ['cpu'] or ['cpu', 'cuda:0', 'cuda:1']."""
    return ["cpu"] + [gpu.index for gpu in _cuda_devices() + _mps_devices()]
