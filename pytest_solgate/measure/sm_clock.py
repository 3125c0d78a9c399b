"""Measure: the SM clock over each timed sample, as nvbench measures it.

nvbench (``nvbench/detail/timestamps_kernel.cu``, ``gpu_frequency.cxx``, ``measure_cold.cu``)
launches a tiny kernel before and after each trial; the block that lands on SM 0 writes the global
timer (nanoseconds) and SM 0's cycle counter (``clock64``). Cycles over nanoseconds is the clock
the SM ran at across the trial. A trial whose clock is under ``throttle_threshold`` (0.75) of the
device's default SM clock rate (``cudaDeviceProp::clockRate``, which on H100/H200 is the 1980 MHz
peak) is discarded, and nvbench sleeps ``throttle_recovery_delay`` (0.05 s) before the next one,
growing the delay when more than two trials in a row were throttled.

Here the same two stamps bracket each sample (after the launch hold, around the CUDA events), from a
Triton kernel: Triton is already the suite's kernel language, and its ``inline_asm_elementwise``
reads the PTX registers ``%smid``, ``%globaltimer`` and ``%clock64`` without a C++ build. Where the
kernel cannot run (no Triton, an AMD device), ``open_stamps`` says why, and NVML's reading taken
while each round runs stands in (measure/telemetry.py).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is handed in by the CUDA backend
    import torch as torch_types

MIN_CLOCK_FRACTION = 0.75  # nvbench's default throttle_threshold
RING_SLOTS = 1024  # stamps kept on the device: two per sample, far more than one round's samples
# %globaltimer may tick only every microsecond (finer under a profiler): over a shorter interval
# than this the clock it gives is off by more than 2 %, enough to read a short sample as throttled.
# Such samples are not judged by their own clock; NVML's reading of their round judges them.
MIN_STAMPED_NANOSECONDS = 50_000


def clock_mhz(start: tuple[int, int] | list[int], stop: tuple[int, int] | list[int]) -> float | None:
    """The SM clock between two (globaltimer ns, clock64 cycles) stamps, in MHz; None when the
    stamps are missing or out of order (the kernel did not run on SM 0, a counter wrapped), or
    too close together for the global timer's resolution (MIN_STAMPED_NANOSECONDS)."""
    nanoseconds, cycles = stop[0] - start[0], stop[1] - start[1]
    if nanoseconds < MIN_STAMPED_NANOSECONDS or cycles <= 0 or not start[0]:
        return None
    return cycles / nanoseconds * 1e3


def is_below_threshold(mhz: float | None, peak_mhz: float | None) -> bool:
    """nvbench's rule: the clock over the timed region under 75 % of the peak (default) SM clock."""
    return mhz is not None and peak_mhz is not None and bool(peak_mhz) and mhz < MIN_CLOCK_FRACTION * peak_mhz


def peak_clock_mhz(torch: ModuleType, device: torch_types.device, nvml_max_mhz: float | None, fallback_mhz: float | None) -> float | None:
    """The reference clock throttling is judged against: the device's clock rate as CUDA reports it
    (``cudaDevAttrClockRate``, which torch exposes as ``clock_rate`` in kHz where it has it), else
    NVML's maximum SM clock (the same peak on H100/H200; not the deprecated default applications
    clock), else the profile's boost clock."""
    try:
        khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", None)
    except Exception:  # a fake or partial torch: the other references stand in
        khz = None
    if isinstance(khz, (int, float)) and khz > 0:
        return khz / 1e3
    return nvml_max_mhz or fallback_mhz


@functools.lru_cache(maxsize=None)
def _build_stamp_kernel() -> Any:  # Any: a Triton kernel (triton ships no types)
    """The Triton kernel, defined once per process (every CUDA backend shares it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def clock_stamp(out_ptr):
        # One program per SM; the one on SM 0 writes (nvbench's get_timestamps_kernel): clock64 is a
        # per-SM counter, so both stamps of a sample must come from the same SM.
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        if sm == 0:
            nanoseconds = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                                    is_pure=False, pack=1)
            cycles = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
            tl.store(out_ptr, nanoseconds)
            tl.store(out_ptr + 1, cycles)

    return clock_stamp


class TritonClockStamps:
    """A ring of (globaltimer, clock64) stamps on the device, written by ``stamp()`` on the current
    stream and read back once per round, after the round's synchronize."""

    def __init__(self, torch: ModuleType, device: torch_types.device) -> None:
        self.kernel = _build_stamp_kernel()
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.buffer = torch.zeros((RING_SLOTS, 2), dtype=torch.int64, device=device)
        self.next_slot = 0
        self._host: list[list[int]] | None = None

    def stamp(self) -> int:
        slot, self.next_slot = self.next_slot, (self.next_slot + 1) % RING_SLOTS
        self._host = None
        self.kernel[(self.sms,)](self.buffer[slot])
        return slot

    def read(self, slot: int) -> list[int]:
        """One stamp; call after the device reached it (the round's synchronize)."""
        if self._host is None:
            self._host = self.buffer.tolist()  # one copy for the whole round
        return self._host[slot]

    def mhz(self, start_slot: int, stop_slot: int) -> float | None:
        return clock_mhz(self.read(start_slot), self.read(stop_slot))


def open_stamps(torch: ModuleType, device: torch_types.device) -> tuple[TritonClockStamps | None, str]:
    """The per-sample SM clock stamps for ``device``, or None and why there are none."""
    try:
        stamps = TritonClockStamps(torch, device)
        first = stamps.stamp()
        torch.cuda.synchronize(device)
        if stamps.read(first)[0] == 0:
            raise RuntimeError("no block of the stamp kernel ran on SM 0")
    except Exception as exc:  # no Triton, no NVIDIA PTX, a driver that refuses: NVML stands in
        return None, f"SM clock per sample unavailable ({type(exc).__name__}: {exc}); NVML read during each round stands in"
    return stamps, ""
