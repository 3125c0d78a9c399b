"""Measure: GPU telemetry through NVML (``nvidia-ml-py``, module ``pynvml``), read around measurements.

Telemetry is never an error: without NVML (no library, no NVIDIA GPU, an AMD device) the reader
is absent and ``note`` says why.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, TypeVar

from pytest_solgate.measure.sm_clock import MIN_CLOCK_FRACTION  # nvbench's throttle threshold

# Clock-event reasons that mean the GPU slowed itself down, by NVML bit.
THROTTLE_BITS = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}
POWER_CAP = "sw_power_cap"


Read = TypeVar("Read")


class NvmlReader:
    # pynvml ships no types: the module and the device's handle are Any.
    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._nvml = pynvml
        self._handle = handle
        # The peak SM clock: what nvbench judges throttling against (the CUDA clock rate, the same
        # peak on H100/H200). nvmlDeviceGetDefaultApplicationsClock, read here before, is deprecated
        # in nvidia-ml-py ("will be removed in CUDA 14.0") and is not called.
        self.sm_clock_max = self._safe(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        self.mem_clock_max = self._safe(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        self.power_limit_w = self._safe(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000)

    @staticmethod
    def _safe(read: Callable[[], Read]) -> Read | None:
        try:
            return read()
        except Exception:  # one unsupported query must not hide the others
            return None

    def energy_counter(self) -> Callable[[], float] | None:
        """A reader of the device's total-energy counter in millijoules (Volta and newer), or None
        where NVML does not have it (measure/block.py reads it around a block of calls)."""
        nvml, handle = self._nvml, self._handle
        if self._safe(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) is None:
            return None
        return lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)

    def other_processes(self, own_pid: int) -> list[str]:
        """The other compute processes NVML lists on the device ('pid 123 (python)'), for the
        energy counter counts their work too; [] where NVML cannot list them."""
        nvml, handle = self._nvml, self._handle
        running = self._safe(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        named = []
        for process in running:
            pid = getattr(process, "pid", None)
            if pid is None or pid == own_pid:
                continue
            name = self._safe(functools.partial(nvml.nvmlSystemGetProcessName, pid))
            name = name.decode() if isinstance(name, bytes) else name
            named.append(f"pid {pid}" + (f" ({name})" if name else ""))
        return named

    def nvml_handle(self) -> tuple[Any, Any]:
        """(pynvml, the device's handle), for the clock lock (measure/clocks.py)."""
        return self._nvml, self._handle

    def read(self) -> dict[str, object]:
        nvml, handle = self._nvml, self._handle
        # Only calls nvidia-ml-py does not mark deprecated (its ...ThrottleReasons and
        # nvmlDeviceGetTemperature "will be removed in CUDA 14.0"); tests/test_gpu_paths.py checks.
        reasons_mask = self._safe(lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        power = self._safe(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        reading = {
            "sm_clock_mhz": self._safe(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "sm_clock_max_mhz": self.sm_clock_max,
            "mem_clock_mhz": self._safe(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            "mem_clock_max_mhz": self.mem_clock_max,
            "temperature_c": self._safe(lambda: nvml.nvmlDeviceGetTemperatureV(handle, nvml.NVML_TEMPERATURE_GPU)),
            "power_w": None if power is None else power / 1000,
            "power_limit_w": self.power_limit_w,
            "throttle_reasons": [name for bit, name in THROTTLE_BITS.items() if reasons_mask and reasons_mask & bit],
        }
        return {k: v for k, v in reading.items() if v is not None}


def _handle(pynvml: Any, index: int, uuid: str | None) -> Any:
    """NVML's handle for a CUDA device: by UUID when known, since CUDA_VISIBLE_DEVICES renumbers
    CUDA devices and NVML does not; by index otherwise."""
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def open_reader(torch_device_index: int, uuid: str | None = None) -> tuple[NvmlReader | None, str]:
    """An NVML reader for the CUDA device, or None and the reason there is none."""
    try:
        import pynvml
    except ImportError:
        return None, "no telemetry: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, f"no telemetry: NVML did not start ({exc})"
    try:
        handle = _handle(pynvml, torch_device_index, uuid)
    except Exception as exc:
        return None, f"no telemetry: NVML does not know this device ({exc})"
    return NvmlReader(pynvml, handle), ""


def nvml_device_name(index: int, uuid: str | None = None) -> str | None:
    """The device name as NVML reports it (found by UUID when known), or None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(_handle(pynvml, index, uuid))
    except Exception:
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def throttle_reasons(reading: Mapping[str, object] | None) -> list[str]:
    """The reasons NVML gave for slowing the clock in a reading (``throttle_reasons``), [] where none."""
    reasons = (reading or {}).get("throttle_reasons")
    return [reason for reason in reasons if isinstance(reason, str)] if isinstance(reasons, (list, tuple)) else []


def is_throttled(reading: Mapping[str, object]) -> bool:
    """True when NVML's reading taken while a round ran shows a thermal or hardware slowdown, or,
    where it carries the SM clock, that clock under 75 % of the peak (``sm_clock_max_mhz``;
    nvbench's threshold and reference, see measure/sm_clock.py). The sampling loop leaves the NVML
    clock out of the reading it judges when each sample's own clock was measured: one instant of
    NVML says less than the clock over the sample. The software power cap alone is not throttling:
    dense tensor-core work on H100/H200 often runs at the power cap, and that is its ceiling, not a
    fault; it is reported as a fact (``throttle_reasons`` keeps ``sw_power_cap``)."""
    clock = reading.get("sm_clock_mhz")
    reference = reading.get("sm_clock_max_mhz")
    if isinstance(clock, (int, float)) and isinstance(reference, (int, float)) and clock and reference \
            and clock < MIN_CLOCK_FRACTION * reference:
        return True
    return any(reason != POWER_CAP for reason in throttle_reasons(reading))
