"""Measure: one timing of a callable, as a pipeline of phases on a backend that declares what it can do.

    backend.begin() -> warm_up -> backend.steady() -> plan -> take_samples(stopping rule) -> Timing

The phases are measure/phases.py's (warm-up, the plan of a sample, the sampling rounds with their
throttle recovery); when to stop is the stopping rule's (measure/stopping.py); what a backend can
do is its ``capabilities`` (measure/capabilities.py). What can be timed is measure/callables.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from pytest_solgate.measure import phases
from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.kernel_trace import SampleKernels
from pytest_solgate.measure.stopping import NoiseTarget, StoppingRule
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError
from pytest_solgate.support.settings import SamplingSettings

# A backend's own tokens and handles: only handed back to it
Token = TypeVar("Token")
Handle = TypeVar("Handle")


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
    telemetry: Mapping[str, object] | None = None
    telemetry_note: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The median time of the backend's memory probe, timed after each kept sample (None without one)
    probe_seconds: float | None = None
    # Timed from the device's kernel timestamps (mode "kernel-timestamps"): the events' median per
    # call beside it (the cross-check), and the median span from a call's first kernel start to its
    # last kernel end and the gaps inside it (host time), per call
    events_seconds: float | None = None
    span_seconds: float | None = None
    gap_seconds: float | None = None
    # Why part of a sample's device work ran outside the timed stream's region ('' if none)
    hidden_work: str = ""
    # Whether the timing may pass or fail a test: its backend's ``gated`` (False for the Triton interpreter's)
    gated: bool = True


KERNEL_TIMESTAMPS = "kernel-timestamps"
# Kernel timestamps that add up to more than the events around them saw, beyond this, are not
# trusted (missing markers, a clock mix-up): the events time the measurement, and a note says why.
CROSS_CHECK_RATIO, CROSS_CHECK_SLACK = 1.05, 1e-6


@dataclass(frozen=True)
class KernelTimed:
    samples: tuple[float, ...]
    mode: str
    note: str = ""
    events_seconds: float | None = None
    span_seconds: float | None = None
    gap_seconds: float | None = None
    hidden_work: str = ""


def kernel_timed(events_samples: tuple[float, ...], traced: tuple[SampleKernels | None, ...], batch: int,
                 mode: str) -> KernelTimed:
    """The samples from the device's kernel timestamps where every kept sample has them and they
    pass the cross-check against the events; else the events' samples, with why (pure)."""
    if not traced or all(t is None for t in traced):
        return KernelTimed(events_samples, mode)
    hidden = next((t.hidden for t in traced if t is not None and t.hidden), "")
    events_median = stats.median(list(events_samples))
    if any(t is None for t in traced):
        missing = sum(t is None for t in traced)
        return KernelTimed(events_samples, mode, f"timed with events: {missing} of {len(traced)} samples had no kernel "
                           "timestamps in the profiler's trace", hidden_work=hidden)
    every = [t for t in traced if t is not None]  # each sample's, none missing (checked above)
    samples = tuple(t.busy_seconds / batch for t in every)
    median = stats.median(list(samples))
    if median > events_median * CROSS_CHECK_RATIO + CROSS_CHECK_SLACK:
        return KernelTimed(events_samples, mode, f"timed with events: the kernel timestamps add up to {median * 1e6:.3g} us "
                           f"a call, more than the {events_median * 1e6:.3g} us the events saw around them", hidden_work=hidden)
    return KernelTimed(samples, KERNEL_TIMESTAMPS, "", events_median,
                       stats.median([t.span_seconds / batch for t in every]),
                       stats.median([t.gap_seconds / batch for t in every]), hidden)


def take_timing(
    fn: Callable[[], object],
    backend: Backend[Token, Handle],  # any backend: its tokens and handles are only handed back to it
    settings: SamplingSettings,
    throttle_check: Callable[[Mapping[str, object]], bool] | None = None,
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
    timed = kernel_timed(taken.seconds, taken.traced, plan.batch, plan.mode)
    return timing_of(timed, taken, plan, len(warm.device_seconds), backend, clock() - wall_start)


def timing_of(timed: KernelTimed, taken: phases.Samples, plan: phases.Plan, warmup_calls: int, backend: Backend[Token, Handle],
              wall_seconds: float) -> Timing:
    """The ``Timing`` of a measurement from its samples (``timed``, as ``kernel_timed`` read them),
    what the sampling loop took (``phases.take_samples``) and its plan (``phases.plan``)."""
    return Timing(
        seconds=stats.median(list(timed.samples)),
        samples=timed.samples,
        noise=stats.relative_half_width(list(timed.samples)),
        batch=plan.batch,
        warmup_calls=warmup_calls,
        noisy=taken.noisy,
        backend=backend.name,
        started_at=taken.started_at,
        finished_at=taken.finished_at,
        wall_seconds=wall_seconds,
        throttled=taken.throttled,
        dropped_samples=taken.dropped,
        sm_clock_mhz=stats.mean(list(taken.clocks)) if taken.clocks else None,
        mode=timed.mode,
        telemetry=phases.summarize_telemetry(list(taken.telemetry)),
        telemetry_note=backend.telemetry_note,
        notes=phases.notes(plan, backend, taken) + ((timed.note,) if timed.note else ()),
        probe_seconds=stats.median(list(taken.probes)) if taken.probes else None,
        events_seconds=timed.events_seconds,
        span_seconds=timed.span_seconds,
        gap_seconds=timed.gap_seconds,
        hidden_work=timed.hidden_work,
        gated=backend.gated,
    )
