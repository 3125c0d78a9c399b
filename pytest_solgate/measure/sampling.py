"""Measure: one timing of a callable, as a pipeline of phases on a backend that declares what it can do.

    backend.begin() -> warm_up -> backend.steady() -> plan -> take_samples(stopping rule) -> Timing

The phases are measure/phases.py's (warm-up, the plan of a sample, the sampling rounds with their
throttle recovery); when to stop is the stopping rule's (measure/stopping.py); what a backend can
do is its ``capabilities`` (measure/capabilities.py). What can be timed is measure/callables.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pytest_solgate.measure import phases
from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.stopping import NoiseTarget, StoppingRule
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError
from pytest_solgate.support.settings import SamplingSettings


@dataclass(frozen=True)
class Timing:
    """What the loop measured: per-call seconds of every kept sample, and how they were taken."""

    seconds: float  # median per-call time
    samples: tuple[float, ...]
    noise: float  # relative half-width of the median's 95 % confidence interval
    batch: int  # calls per sample (1 = every call timed alone, cold cache)
    warmup_calls: int
    noisy: bool  # the time budget ran out before the noise target was met
    backend: str
    started_at: float  # wall-clock time.time() when sampling began
    finished_at: float
    wall_seconds: float  # warm-up included
    throttled: bool = False
    dropped_samples: int = 0
    sm_clock_mhz: float | None = None  # mean SM clock over the kept samples (or NVML's readings of their rounds)
    # "events" (each sample's calls launched from Python) or "cuda-graph" on a GPU; on a CPU
    # "thread-cpu-time" (the calling thread's CPU time) or "perf-counter" (wall time)
    mode: str = "events"
    telemetry: dict[str, Any] | None = None
    telemetry_note: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The median time of the backend's memory probe, timed after each kept sample (None without one)
    probe_seconds: float | None = None


def take_timing(
    fn: Callable[[], Any],
    backend: Backend,
    settings: SamplingSettings,
    throttle_check: Callable[[dict[str, Any]], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[float], None] = time.sleep,
    rotation_sets: int = 1,
    bytes_per_call: float = 0.0,
    rule: StoppingRule | None = None,
) -> Timing:
    """Time ``fn`` (a zero-argument callable) on ``backend`` and return its ``Timing``.

    ``rotation_sets`` is how many buffer sets ``fn`` rotates through (callables.rotating) and
    ``bytes_per_call`` the bytes one call declares: together they say whether batched calls can
    each find a cold cache. ``rule`` decides when to stop (the settings' noise target by default)."""
    __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
    if not callable(fn):
        raise MeasureError(f"sol.measure needs a zero-argument callable, got {type(fn).__name__}")
    backend.begin()
    wall_start = clock()
    warm = phases.warm_up(fn, backend, settings, clock)
    backend.steady()
    plan = phases.plan(fn, backend, settings, warm, rotation_sets, bytes_per_call)
    taken = phases.take_samples(plan, backend, settings, rule or NoiseTarget.of(settings), throttle_check, clock, pause)
    return Timing(
        seconds=stats.median(list(taken.seconds)),
        samples=taken.seconds,
        noise=stats.relative_half_width(list(taken.seconds)),
        batch=plan.batch,
        warmup_calls=len(warm.device_seconds),
        noisy=taken.noisy,
        backend=backend.name,
        started_at=taken.started_at,
        finished_at=taken.finished_at,
        wall_seconds=clock() - wall_start,
        throttled=taken.throttled,
        dropped_samples=taken.dropped,
        sm_clock_mhz=stats.mean(list(taken.clocks)) if taken.clocks else None,
        mode=plan.mode,
        telemetry=phases.summarize_telemetry(list(taken.telemetry)),
        telemetry_note=backend.telemetry_note,
        notes=phases.notes(plan, backend, taken),
        probe_seconds=stats.median(list(taken.probes)) if taken.probes else None,
    )
