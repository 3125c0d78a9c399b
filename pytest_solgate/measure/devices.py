"""Measure: the facts of the device a measurement runs on, in one place: which device (``--sol-device``
and xdist workers), its name and UUID, what torch reads off it (SM count, L2), and a CPU's
last-level cache. The backends flush caches of these sizes; calibration keys its cache by the UUID.

torch is imported here, lazily, and only when a measurement needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pytest_solgate.declare.profiles import DriverFacts
from pytest_solgate.measure import telemetry
from pytest_solgate.support.errors import OptionError
from pytest_solgate.support.settings import parse_device

if TYPE_CHECKING:
    import torch as torch_types

MIB = 1024 * 1024


def torch_or_none() -> ModuleType | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


def cuda_uuid(torch: ModuleType, device: int | torch_types.device | None) -> str | None:
    """The UUID torch reports for a CUDA device (an index or torch.device), or None."""
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "") or None


@dataclass(frozen=True)
class DeviceChoice:
    kind: str  # "cpu" or "cuda"
    index: int | None = None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def cuda_index(self) -> int:
        """The index of a CUDA device (choose_device always names one; a CPU has none)."""
        if self.index is None:
            raise ValueError(f"{self} is not a CUDA device")
        return self.index


def choose_device(spec: str, worker_index: int | None, worker_count: int | None = None,
                  torch: ModuleType | None = None) -> DeviceChoice:
    """Resolve ``--sol-device``; under xdist, worker N takes GPU N mod count with ``auto`` or ``cuda``.

    More xdist workers than GPUs is refused: the device lock keeps two timings apart, but not one
    worker's timing from another's multi-GB setup, reference GEMM or autotuning on the same GPU.
    """
    kind, index = parse_device(spec)
    if kind == "cpu":
        return DeviceChoice("cpu")
    torch = torch if torch is not None else torch_or_none()  # a test passes a stand-in's cuda
    has_cuda = torch is not None and torch.cuda.is_available()
    if kind == "auto" and not has_cuda:
        return DeviceChoice("cpu")
    if not has_cuda or torch is None:  # (no torch has no CUDA: said for the checker)
        raise OptionError(f"--sol-device={spec} but no CUDA device is available; use --sol-device=auto or cpu")
    count = torch.cuda.device_count()
    if worker_count is not None and (worker_count > count or (index is not None and worker_count > 1)):
        gpus = 1 if index is not None else count
        raise OptionError(
            f"pytest -n {worker_count} with {gpus} GPU(s) for --sol-device={spec}: workers sharing a GPU would time "
            f"kernels while another worker's setup runs on it; use -n {gpus} (one worker per GPU) or no -n"
        )
    if index is None:
        # Under xdist, plain `cuda` spreads the workers as `auto` does (all of them on the current
        # device, cuda:0, was the alternative, and a silent one).
        spread = kind == "auto" or worker_index is not None
        index = (worker_index or 0) % count if spread else torch.cuda.current_device()
    if index >= count:
        raise OptionError(f"--sol-device={spec} but this machine has {count} CUDA device(s)")
    return DeviceChoice("cuda", index)


def device_name(choice: DeviceChoice) -> str:
    """NVML's name when NVML is there, else torch's."""
    if choice.kind != "cuda":
        return "cpu"
    import torch

    uuid = cuda_uuid(torch, choice.index)
    return telemetry.nvml_device_name(choice.index or 0, uuid) or torch.cuda.get_device_name(choice.index)


def device_facts(choice: DeviceChoice) -> DriverFacts:
    """SM count, L2 size and arch as torch reads them off the device."""
    if choice.kind != "cuda":
        return {}
    import torch

    props = torch.cuda.get_device_properties(choice.index)
    return {
        "sm_count": getattr(props, "multi_processor_count", None),
        "l2_bytes": getattr(props, "L2_cache_size", None) or None,
        "arch": getattr(props, "gcnArchName", None),
        "total_memory": getattr(props, "total_memory", None),
    }


# No CPU holds more than this much last-level cache per core it shares it with (the largest,
# AMD's stacked-cache parts, hold 12 MiB); a VM whose few vCPUs report a whole host socket's L3
# (480 MiB for 2 vCPUs here) gets its share instead, not a flush of a gigabyte per sample.
MAX_CACHE_PER_CPU = 16 * MIB


def last_level_cache_bytes(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The largest cache the kernel reports for cpu0, at most MAX_CACHE_PER_CPU for each CPU that
    shares it (32 MiB when it reports none)."""
    sizes = []
    for index in cache_dir.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        size = cache_size_bytes(text)
        if size is not None:
            sizes.append(min(size, MAX_CACHE_PER_CPU * _sharing_cpus(index)))
    return max(sizes) if sizes else 32 * MIB


def cache_size_bytes(text: str) -> int | None:
    """A cache size as sysfs writes it ("32K", "1024K", "32M"), in bytes; None when unreadable."""
    scale = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def cpu_data_caches(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """cpu0's data (and unified) caches by level, {"L1": bytes, "L2": ..., "L3": ...}; empty when
    the kernel reports none."""
    levels = {}
    for index in cache_dir.glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = (index / "level").read_text().strip()
            size = cache_size_bytes((index / "size").read_text().strip())
        except OSError:
            continue
        if kind in ("Data", "Unified") and level.isdigit() and size:
            levels[f"L{level}"] = size
    return dict(sorted(levels.items()))


def _sharing_cpus(index: Path) -> int:
    """How many CPUs share this cache, from its shared_cpu_list ("0-1,4"); 1 when unreadable."""
    try:
        text = (index / "shared_cpu_list").read_text().strip()
    except OSError:
        return 1
    count = 0
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        if not (low.isdigit() and (high or low).isdigit()):
            return 1
        count += int(high or low) - int(low) + 1
    return max(count, 1)
