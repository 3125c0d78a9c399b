"""Measure: one synchronized block of back-to-back calls after a GPU measurement's samples.

It answers two questions the timed samples cannot (docs/measurement.md):

- **energy per call**: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules since the driver loaded, Volta and newer) read at the block's two ends, divided
  by its calls. The timed rounds are not used for it: their cache flushes and stream holds draw
  power too, and for a short kernel they are most of a round. The counter steps only every few
  to some tens of milliseconds on some GPUs, so the block lasts at least ENERGY_BLOCK_SECONDS and
  each end is aligned to a step of the counter (``_next_step``): the error is then at most one
  step's worth of idle power at the end, a few percent at most; a counter that did not step over
  the block gives no figure (absent, never zero).
- **work the events cannot see**: the block's host wall time (synchronize, launch, synchronize:
  every stream of the device) against the CUDA events' time on the current stream. A kernel that
  launches its work on another stream reads fast between the events; the device-wide wait shows
  the truth. ``hidden_work`` says when the gap is beyond launch overhead.

The calls run warm (no flush between them): for energy that is a kernel's steady state, which the
docs say; for the wall/events comparison it does not matter.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

ENERGY_BLOCK_SECONDS = 0.1  # long against the counter's step (a few to ~20 ms on the GPUs we know)
HIDDEN_BLOCK_SECONDS = 0.02  # without an energy counter, long enough against launch and sync latency
MAX_BLOCK_CALLS = 100_000
STEP_WAIT_SECONDS = 0.1  # how long to wait for the counter to step at each end
STEP_POLL_SECONDS = 0.0005
# The block's wall time beyond what launching and running it explain: more than HIDDEN_RATIO times
# the larger of the events' time and the host's time to queue the calls, plus HIDDEN_SLACK (the
# synchronize's own latency, OS jitter). Launch overhead on tiny kernels makes the queueing time,
# not the events', the floor of the wall time: so it is in the comparison.
HIDDEN_RATIO = 1.5
HIDDEN_SLACK_SECONDS = 0.002


@dataclass(frozen=True)
class BlockReading:
    calls: int
    wall_seconds: float  # host time from before the first launch to after the device-wide synchronize
    event_seconds: float  # the CUDA events' time around the calls, on the current stream
    enqueue_seconds: float  # host time to queue the calls (launch overhead)
    energy_mj: float | None = None  # the energy counter's rise over the block; None without one
    energy_note: str = ""  # why there is no energy figure, when there is none


def block_calls(per_call_seconds: float, with_energy: bool) -> int:
    target = ENERGY_BLOCK_SECONDS if with_energy else HIDDEN_BLOCK_SECONDS
    return max(1, min(MAX_BLOCK_CALLS, math.ceil(target / max(per_call_seconds, 1e-9))))


def _next_step(read: Callable[[], float], clock: Callable[[], float], pause: Callable[[float], None]) -> float | None:
    """The counter's value just after its next step (None when it did not step in STEP_WAIT_SECONDS)."""
    start_value, start = read(), clock()
    while clock() - start < STEP_WAIT_SECONDS:
        pause(STEP_POLL_SECONDS)
        value = read()
        if value != start_value:
            return value
    return None


def synchronized_block(
    fn: Callable[[], Any],
    backend: Any,
    per_call_seconds: float,
    read_energy: Callable[[], float] | None,
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[float], None] = time.sleep,
) -> BlockReading:
    """Call ``fn`` back to back on ``backend`` (the CUDA one) between two device-wide
    synchronizations, timed by the host clock and by events, with the energy counter read at
    both ends when ``read_energy`` is given."""
    calls = block_calls(per_call_seconds, read_energy is not None)
    cuda = backend.torch.cuda
    backend.synchronize()
    energy_start = _next_step(read_energy, clock, pause) if read_energy is not None else None
    # Events of the block's own, not backend.start()/stop(): those also size the backend's stream
    # hold from the host time they see, and thousands of queued calls would size the next holds.
    start, stop = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    wall_start = clock()
    start.record()
    for _ in range(calls):
        fn()
    queued = clock() - wall_start
    stop.record()
    backend.synchronize()
    wall = clock() - wall_start
    events = start.elapsed_time(stop) / 1e3  # milliseconds
    energy, note = None, ""
    if read_energy is not None:
        energy_end = _next_step(read_energy, clock, pause)
        if energy_start is None or energy_end is None or energy_end <= energy_start:
            note = (f"no energy figure: NVML's energy counter did not step within {STEP_WAIT_SECONDS * 1e3:g} ms "
                    f"around a {wall * 1e3:.3g} ms block")
        else:
            energy = energy_end - energy_start
    return BlockReading(calls, wall, events, queued, energy, note)


def hidden_work(reading: BlockReading) -> bool:
    """Whether the device worked far longer than the events saw: work on another stream."""
    explained = max(reading.event_seconds, reading.enqueue_seconds)
    return reading.wall_seconds > HIDDEN_RATIO * explained + HIDDEN_SLACK_SECONDS


def joules_per_call(reading: BlockReading) -> float | None:
    if reading.energy_mj is None or reading.calls <= 0:
        return None
    return reading.energy_mj / 1e3 / reading.calls


def hidden_work_message(test: str, name: str, reading: BlockReading) -> str:
    return (
        f"{test} '{name}': a synchronized block of {reading.calls} call(s) kept the device busy "
        f"{reading.wall_seconds * 1e3:.3g} ms (host wall time to a device-wide synchronize) but the CUDA events "
        f"on the current stream saw {reading.event_seconds * 1e3:.3g} ms: the kernel launches work the timer "
        "cannot see (on another stream?), so its time would read fast. Launch it on "
        "torch.cuda.current_stream(), or end the callable with torch.cuda.current_stream().wait_stream(side)"
    )
