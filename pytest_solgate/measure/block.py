"""Measure: one synchronized block of back-to-back calls after a GPU measurement's samples.

It answers two questions the timed samples cannot (docs/measurement.md):

- **energy per call**: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules since the driver loaded, Volta and newer), over a window between two of its steps
  seen while the device was busy with back-to-back calls throughout (``_energy_window``): the
  mean power of the calls' steady state, without the flush, the hold or an idle tail, times one
  call's device time. The counter steps only every few to some tens of milliseconds, so the window
  lasts at least ENERGY_WINDOW_SECONDS and STEPS_PER_WINDOW of its periods; a counter that did not
  step twice gives no figure (absent, never zero). The timed rounds are not used: their cache
  flushes and stream holds draw power too, and for a short kernel they are most of a round.
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
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # a block runs on a GPU, through torch
    import torch

HIDDEN_BLOCK_SECONDS = 0.02  # long enough against launch and sync latency for the hidden-work comparison
MAX_BLOCK_CALLS = 100_000
STEP_WAIT_SECONDS = 0.25  # how long to wait for the counter's first steps (its period is found from them)
STEP_POLL_SECONDS = 0.0005
# The energy window: at least this long, and at least STEPS_PER_WINDOW of the counter's periods,
# so that the host's lag in seeing a step (one poll, one chunk) is a small part of it
ENERGY_WINDOW_SECONDS = 0.25
STEPS_PER_WINDOW = 10
MAX_ENERGY_WINDOW_SECONDS = 2.0
CHUNK_SECONDS = 0.002  # device work queued per chunk; the counter is polled between chunks
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
    energy_mj: float | None = None  # the energy of one call's time at the window's mean power, x calls; None without
    energy_note: str = ""  # why there is no energy figure, when there is none
    power_w: float | None = None  # the mean power between two steps of the counter, the device busy throughout
    window_seconds: float = 0.0  # the host time between those two steps


def block_calls(per_call_seconds: float, with_energy: bool) -> int:
    target = HIDDEN_BLOCK_SECONDS if not with_energy else CHUNK_SECONDS
    return max(1, min(MAX_BLOCK_CALLS, math.ceil(target / max(per_call_seconds, 1e-9))))


def synchronized_block(
    fn: Callable[[], object],
    backend: Any,  # backends.CudaBackend, which Context holds as the Backend protocol (no .torch there)
    per_call_seconds: float,
    read_energy: Callable[[], float] | None,
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[float], None] = time.sleep,
) -> BlockReading:
    """Call ``fn`` back to back on ``backend`` (the CUDA one) between two device-wide
    synchronizations, timed by the host clock and by events; with ``read_energy``, for as long as
    the energy window needs (``_energy_window``)."""
    cuda = backend.torch.cuda
    backend.synchronize()
    # Events of the block's own, not backend.start()/stop(): those also size the backend's stream
    # hold from the host time they see, and thousands of queued calls would size the next holds.
    start, stop = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    wall_start = clock()
    start.record()
    if read_energy is None:
        calls = block_calls(per_call_seconds, False)
        for _ in range(calls):
            fn()
        window: tuple[float, float, str] = (0.0, 0.0, "")
    else:
        calls, window = _energy_window(fn, cuda, per_call_seconds, read_energy, clock, pause)
    queued = clock() - wall_start
    stop.record()
    backend.synchronize()
    wall = clock() - wall_start
    events = start.elapsed_time(stop) / 1e3  # milliseconds
    energy_j, window_seconds, note = window
    if read_energy is None or note:
        return BlockReading(calls, wall, events, queued, None, note)
    power = energy_j / window_seconds
    # The window's mean power over one call's device time back to back, times the calls: no flush,
    # no hold and no idle tail in it (the first version read the counter at the block's ends and
    # counted the idle time to the counter's next step: 0.17 J/GB for a 1 GiB copy the counter
    # puts at 0.146 over 2 s)
    return BlockReading(calls, wall, events, queued, power * events * 1e3, "", power, window_seconds)


def _energy_window(fn: Callable[[], object], cuda: ModuleType, per_call_seconds: float, read_energy: Callable[[], float],
                   clock: Callable[[], float], pause: Callable[[float], None]) -> tuple[int, tuple[float, float, str]]:
    """Keep the device busy with chunks of calls (at most two queued ahead) while polling NVML's
    total-energy counter between them; the window runs from a step of the counter seen while the
    device was busy to a later one, at least ENERGY_WINDOW_SECONDS and STEPS_PER_WINDOW of the
    counter's periods apart. Returns the calls and (joules, window seconds, why none)."""
    chunk = block_calls(per_call_seconds, True)
    calls = 0
    ends: list[torch.cuda.Event] = []
    steps: list[tuple[float, float]] = []  # (host time, counter value) at each step seen
    last = None  # read once the first chunk is queued: a step seen after that, the device was busy at
    began = clock()
    while True:
        for _ in range(chunk):
            fn()
        calls += chunk
        ended = cuda.Event()
        ended.record()
        ends.append(ended)
        if len(ends) > 2:
            ends.pop(0).synchronize()  # two chunks stay queued: the device never idles
        value = read_energy()
        if last is not None and value != last:
            steps.append((clock(), value))
        last = value
        elapsed = clock() - began
        if len(steps) >= 2:
            period = steps[1][0] - steps[0][0]
            span = steps[-1][0] - steps[0][0]
            if span >= max(ENERGY_WINDOW_SECONDS, STEPS_PER_WINDOW * period) or elapsed > MAX_ENERGY_WINDOW_SECONDS:
                return calls, ((steps[-1][1] - steps[0][1]) / 1e3, span, "")
        elif elapsed > STEP_WAIT_SECONDS:
            return calls, (0.0, 0.0, f"no energy figure: NVML's energy counter did not step twice within "
                                     f"{STEP_WAIT_SECONDS * 1e3:g} ms of back-to-back calls")


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
