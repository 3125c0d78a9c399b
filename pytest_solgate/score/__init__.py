"""Score: pure arithmetic from Work, a median time and a HardwareProfile to SOL, MFU and bound.

    T_SOL = max(bytes / memory_bandwidth, max_p flops[p] / peak_flops[p])
    SOL   = T_SOL / T_measured
    MFU   = max_p (flops[p] / T_measured) / peak_flops[p]

No torch, no pytest: this is tested in microseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.declare.work import Work
from pytest_solgate.support.errors import WorkError


@dataclass(frozen=True)
class Score:
    t_sol: float
    sol: float
    mfu: float
    bound: str  # "memory" or "compute"
    tflops: float  # achieved, all precisions together
    gbps: float  # achieved
    intensity: float | None  # FLOP per byte; None when no bytes are declared
    ridge: float | None  # the profile's ridge point for the dominant precision
    dominant_precision: str | None = None  # the precision whose time is largest; None without flops
    # SOL against ceilings scaled to the SM clock the device ran at (see ``sol_at_clock``); None
    # without a measured clock. Reported beside SOL; the gate uses ``sol``.
    sol_at_clock: float | None = None
    # The SM clock ``sol``'s compute peaks are at: None for the profile's own (its datasheet or
    # calibration clocks); under --sol-lock-clocks the clock the SMs held, so that a budget is
    # applied like with like (a kernel at base clock against peaks at base clock)
    sol_clock_mhz: float | None = None
    # The dominant precision's tensor-core class and the SOL its FLOPs read there, where the
    # profile has one (a bf16 GEMM declared "bf16" that ran on the tensor cores); not recorded.
    tensor_class: tuple[str, float] | None = None


# A vector precision class and the tensor-core class the same arithmetic runs at on a GPU.
TENSOR_CLASS = {"fp64": "fp64_tensor", "fp32": "tf32_tensor", "fp16": "fp16_tensor", "bf16": "bf16_tensor"}


@dataclass(frozen=True)
class Floor:
    """The speed of light of declared work on one profile, before anything is timed."""

    t_sol: float
    bound: str  # "memory" or "compute"
    intensity: float | None  # FLOP per byte; None when no bytes are declared
    ridge: float | None  # the profile's ridge point for the dominant precision
    dominant_precision: str | None  # the precision whose time is largest; None without flops
    memory_time: float = 0.0  # the bytes at the memory-bandwidth ceiling
    compute_time: float = 0.0  # the dominant precision's FLOPs at its peak (the longest of them)


def missing_precisions(work: Work, profile: HardwareProfile) -> list[str]:
    """The precisions ``work`` declares FLOPs in that ``profile`` has no roof for."""
    return [p for p in work.flops if p not in profile.peak_tflops]


def check_precisions(work: Work, profile: HardwareProfile) -> None:
    missing = missing_precisions(work, profile)
    if missing:
        raise WorkError(
            f"flops declared in {missing[0]!r}, which profile '{profile.id}' lacks; "
            f"it has: {', '.join(profile.peak_tflops)}"
        )


def speed_of_light(work: Work, profile: HardwareProfile) -> Floor:
    """T_SOL, bound, intensity and ridge of ``work`` on ``profile``: no timing needed."""
    check_precisions(work, profile)
    memory_time = work.bytes / profile.memory_bandwidth
    compute_times = {p: count / profile.peak_flops(p) for p, count in work.flops.items()}
    dominant = max(compute_times, key=compute_times.__getitem__) if compute_times else None
    compute_time = compute_times[dominant] if dominant else 0.0
    return Floor(
        t_sol=max(memory_time, compute_time),
        bound="memory" if memory_time >= compute_time else "compute",
        intensity=work.total_flops / work.bytes if work.bytes > 0 else None,
        ridge=profile.ridge_point(dominant) if dominant else None,
        dominant_precision=dominant,
        memory_time=memory_time,
        compute_time=compute_time,
    )


def score(work: Work, seconds: float, profile: HardwareProfile, sm_clock_mhz: float | None = None,
          clocks_locked: bool = False) -> Score:
    """``seconds`` is the measured median per-call time; it must be positive. ``sm_clock_mhz`` is
    the mean SM clock measured while the samples ran, when the backend reads one. With
    ``clocks_locked`` (--sol-lock-clocks) and a measured clock, the SOL is against peaks at that
    clock: a locked clock is the run's condition, not the kernel's fault."""
    if not seconds > 0:
        raise ValueError(f"measured time must be positive, got {seconds!r}")
    floor = speed_of_light(work, profile)
    at_clock = _sol_at_clock(work, floor, seconds, profile, sm_clock_mhz)
    boost = profile.device.boost_clock_mhz
    if clocks_locked and at_clock is not None and sm_clock_mhz and boost:  # (a SOL at the clock needs both)
        running = min(sm_clock_mhz, boost)
        compute_time = _compute_time_at(work, profile, running, boost)
        return Score(
            t_sol=at_clock * seconds, sol=at_clock, mfu=compute_time / seconds,
            bound="memory" if floor.memory_time >= compute_time else "compute",
            tflops=work.total_flops / seconds / 1e12, gbps=work.bytes / seconds / 1e9,
            intensity=floor.intensity, ridge=floor.ridge, dominant_precision=floor.dominant_precision,
            sol_at_clock=at_clock, sol_clock_mhz=running,
        )
    return Score(
        t_sol=floor.t_sol,
        sol=floor.t_sol / seconds,
        mfu=floor.compute_time / seconds,  # the largest FLOPs/peak ratio over the precisions
        bound=floor.bound,
        tflops=work.total_flops / seconds / 1e12,
        gbps=work.bytes / seconds / 1e9,
        intensity=floor.intensity,
        ridge=floor.ridge,
        dominant_precision=floor.dominant_precision,
        sol_at_clock=at_clock,
        tensor_class=_tensor_class(work, floor, seconds, profile),
    )


def _tensor_class(work: Work, floor: Floor, seconds: float, profile: HardwareProfile) -> tuple[str, float] | None:
    """The dominant precision's tensor-core class, and the SOL with its FLOPs counted there."""
    vector = floor.dominant_precision
    tensor = TENSOR_CLASS.get(vector or "")
    if vector is None or tensor is None or tensor not in profile.peak_tflops:
        return None
    flops = dict(work.flops)
    flops[tensor] = flops.get(tensor, 0) + flops.pop(vector)
    return tensor, speed_of_light(dataclasses.replace(work, flops=flops), profile).t_sol / seconds


def _sol_at_clock(
    work: Work, floor: Floor, seconds: float, profile: HardwareProfile, sm_clock_mhz: float | None
) -> float | None:
    """SOL against ceilings scaled to the SM clock the device really ran at: each compute peak
    scales from the clock it was quoted or measured at (``profile.roof_clock_mhz``: a measured
    profile's peaks from the clock calibration ran at, so they are not scaled twice; a datasheet's
    tensor peaks from their own clock) to the measured one; memory bandwidth does not scale. A run
    at 1.4 GHz on a 1.98 GHz datasheet is then explained, not blamed on the kernel. No credit
    above the boost clock. None without a measured clock or the profile's boost clock. The gate
    keeps using the configured ceilings; this is reported beside SOL."""
    boost = profile.device.boost_clock_mhz
    if not sm_clock_mhz or not boost:
        return None
    compute_time = _compute_time_at(work, profile, min(sm_clock_mhz, boost), boost)
    return max(floor.memory_time, compute_time) / seconds


def _compute_time_at(work: Work, profile: HardwareProfile, running_mhz: float, boost_mhz: float) -> float:
    """The declared FLOPs' time at peaks scaled from their own clocks (the boost clock ``boost_mhz``
    where the profile names none) to ``running_mhz``."""
    return max(
        (count / (profile.peak_flops(p) * running_mhz / (profile.roof_clock_mhz(p) or boost_mhz)) for p, count in work.flops.items()),
        default=0.0,
    )
