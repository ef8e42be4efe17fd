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
        cores = f"{self.physical_cores} physical / {self.logical_cores} logical cores"
        lines = [
            f"CPU   : {self.cpu_model} ({cores}, torch uses {self.torch_threads} threads, {self.cpu_isa})",
            f"Memory: {self.memory_total_gib:.1f} GiB total, {self.memory_available_gib:.1f} GiB available",
            f"CPU fast bf16 matmul: {_yes(self.cpu_bf16_fast)}; fast fp16 matmul: {_yes(self.cpu_fp16_fast)}",
        ]
        for gpu in self.gpus:
            mem = f"{gpu.memory_gib:.1f} GiB" if gpu.memory_gib is not None else "shared memory"
            cc = f", compute capability {gpu.compute_capability}" if gpu.compute_capability else ""
            lines.append(
                f"GPU {gpu.index}: {gpu.name} ({mem}{cc}); fast bf16: {_yes(gpu.bf16_fast)}, "
                f"fast fp16: {_yes(gpu.fp16_fast)}"
            )
        if not self.gpus:
            lines.append("GPU   : no GPU found (no CUDA or MPS device): lessons run on the CPU only")
        lines.append(f"torch {self.torch_version}")
        return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _cpu_flags() -> set[str]:
    """CPU feature flags from /proc/cpuinfo (Linux); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model_name() -> str:
    """The CPU's marketing name, e.g. 'AMD EPYC' or 'Apple M2'."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_half_precision() -> tuple[bool, bool]:
    """(bf16 fast, fp16 fast) on this CPU: true only with matrix units for that type (AMX, AVX512-BF16/FP16)."""
    flags = _cpu_flags()
    bf16 = bool(flags & {"avx512_bf16", "amx_bf16"})
    fp16 = bool(flags & {"avx512_fp16", "amx_fp16"})
    if platform.system() == "Darwin" and platform.machine() == "arm64":
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
