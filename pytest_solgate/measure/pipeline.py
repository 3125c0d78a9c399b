"""Measure: one measurement, as a pipeline a reader sees in one screen.

    take the device's lock -> extras' before() -> time once -> extras' after()   (holds_device)
    -> again if an extra found the attempt disturbed (CONTENTION_RETAKES), keep the calmest
    -> give the lock back -> the other extras' before()/after() (e.g. --sol-ncu's child run)

"Time once" is the caller's: a kernel's is ``time_once`` (sampling.take_timing on the context's
backend; in a Triton-interpreter session a callable that launches a Triton kernel is timed briefly,
its timing meaning nothing and not gated, and one that launches none, a torch reference, is timed
again on the real CPU backend); a whole step's is its profiled runs (engine/steps.py). Either
returns its Timing and what else it read (a step's profile), kept beside the timing of the attempt
that stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

from pytest_solgate.measure import backends, locking, sampling, telemetry
from pytest_solgate.measure.context import Context
from pytest_solgate.measure.extras import Extra, Findings, Taken, merged
from pytest_solgate.measure.stopping import NoiseTarget, StoppingRule
from pytest_solgate.support.errors import MeasureError
from pytest_solgate.support.settings import SamplingSettings

# Interpreter timings are not gated: spend as little time on them as honesty allows.
INTERPRETER_SAMPLING = SamplingSettings(
    min_time=0.0, max_time=0.5, noise=0.05, min_samples=3, warmup_time=0.0, cuda_graph="off"
)
# A disturbed (contended) measurement is taken again this many times, unless it already spent
# more than its time budget (a long kernel's retake would double its cost); the calmest is kept.
CONTENTION_RETAKES = 1

Read = TypeVar("Read")  # what an attempt read beside its Timing (None for a kernel, a step's profile)


@dataclass(frozen=True)
class Measured(Generic[Read]):
    timing: sampling.Timing
    findings: Findings
    read: Read


def measure(test: str, name: str, fn: Callable[[], object], context: Context,
            attempt: Callable[[], tuple[sampling.Timing, Read]], extras: Sequence[Extra], holder: str,
            max_time: float) -> Measured[Read]:
    """One ``attempt`` (timing once) under the device's lock and the extras, taken again while disturbed and the
    attempt's wall time stays within 1.5 ``max_time`` (the --sol-max-time budget)."""
    __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
    held = [extra for extra in extras if extra.holds_device]
    best: tuple[sampling.Timing, Read, Findings] | None = None
    for _ in range(1 + CONTENTION_RETAKES):
        with locking.device_lock(context.lock_key, holder) as waited_for, context.scope():
            for extra in held:
                extra.before()
            timing, read = attempt()
            taken = Taken(test, name, fn, context, timing, waited_for)
            found = merged([extra.after(taken) for extra in held])
        if best is None or (best[2].retake and found.rank < best[2].rank):
            best = (timing, read, found)
        if not found.retake or timing.wall_seconds > max_time * 1.5:
            break
    assert best is not None  # the loop runs at least once
    timing, read, found = best
    if found.error:
        raise MeasureError(found.error)
    after_lock = [extra for extra in extras if not extra.holds_device]
    for extra in after_lock:
        extra.before()
    taken = Taken(test, name, fn, context, timing, "")
    return Measured(timing, merged([found, *(extra.after(taken) for extra in after_lock)]), read)


def time_once(fn: Callable[[], object], context: Context, settings: SamplingSettings,
              rotation_sets: int = 1, bytes_per_call: float = 0.0,
              rule: Callable[[StoppingRule], StoppingRule] | None = None) -> sampling.Timing:
    """``rule`` wraps the stopping rule of a gated timing (the integrity check between rounds)."""
    __tracebackhide__ = True
    backend = context.backend
    if backend.gated:
        return sampling.take_timing(fn, backend, settings, telemetry.is_throttled,
                                    rotation_sets=rotation_sets, bytes_per_call=bytes_per_call,
                                    rule=rule(NoiseTarget.of(settings)) if rule else None)
    with backends.counting_triton_launches() as launched:
        timing = sampling.take_timing(fn, backend, INTERPRETER_SAMPLING, telemetry.is_throttled)
    if launched() or context.cpu_fallback is None:
        return timing
    return sampling.take_timing(fn, context.cpu_fallback, settings, telemetry.is_throttled,
                                rule=rule(NoiseTarget.of(settings)) if rule else None)
