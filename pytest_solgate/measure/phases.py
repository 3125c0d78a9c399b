"""Measure: the phases of one timing, in order, on any backend (measure/capabilities.py).

1. ``warm_up``: call until the first call (which may compile or autotune) and then at least three
   more calls and ``warmup_time`` are done, counted from the end of the first call;
2. ``plan``: estimate the per-call time and, when one call is too short for the timer, decide how
   many calls a sample holds: on a backend that times cold memory (CUDA) still one, unless a
   rotation of buffer sets keeps every call of a sample cold (``calls_per_sample``); elsewhere
   several; and whether a batch is replayed as a CUDA graph (``graph_or_launches``);
3. ``take_samples``: samples in rounds, each sample after a cache flush, with one synchronization
   per round; on a backend with a memory probe (the CPU), each sample is followed by a timed
   probe, after its own flush, so that the probe reads the memory speed of the same moment. A
   sample taken while the device was throttled (its SM clock, measured over the sample, under
   75 % of the peak, as nvbench judges it; or NVML's reading of its round) is discarded and
   sampling goes on after a pause, up to MAX_RECOVERIES times; after that throttled samples are
   kept and the timing is flagged. When to stop is the stopping rule's (measure/stopping.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from pytest_solgate.measure import sm_clock
from pytest_solgate.measure.callables import ran_nothing
from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.kernel_trace import SampleKernels
from pytest_solgate.measure.stopping import StoppingRule
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError
from pytest_solgate.support.settings import SamplingSettings

Reading = dict[str, object]  # one NVML reading (telemetry.NvmlReader.read): clocks, power, throttle reasons
MAX_BATCH = 100_000
ROUND_SECONDS = 0.01  # how much work to queue between two synchronizations
MAX_ROUND = 100
GRAPH_BELOW = 20e-6  # per-call time under which --sol-cuda-graph=auto replays a CUDA graph
MAX_RECOVERIES = 5  # throttled rounds re-sampled before throttled samples are kept (and flagged)
RECOVERY_PAUSE = 0.05  # seconds to let clocks recover, as nvbench's throttle recovery delay
WARMUP_CALLS_AFTER_FIRST = 3  # calls after the first (which may compile) before sampling starts
# The timing mode of a measurement that would have been captured as a CUDA graph, taken with events
# because an earlier capture of the session failed (see graph_or_launches).
EVENTS_CAPTURE_OFF = "events-capture-off"


# --- 1. warm-up ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmUp:
    device_seconds: tuple[float, ...]  # each call's timed region
    wall_seconds: tuple[float, ...]  # each call's host time, the flush and the timer included
    clocks: tuple[float | None, ...] = ()  # each call's SM clock, where the backend measures it


def warm_up(fn: Callable[[], object], backend: Backend, settings: SamplingSettings, clock: Callable[[], float]) -> WarmUp:
    __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
    device: list[float] = []
    wall: list[float] = []
    clocks: list[float | None] = []
    first_done = None
    while True:
        call_start = clock()
        handle = timed_call(fn, backend, 1)
        backend.synchronize()
        device.append(backend.elapsed(handle))
        wall.append(clock() - call_start)
        clocks.append(backend.sample_clock_mhz(handle))
        # The first call may compile (Triton JIT, autotuning): the warm-up is counted from its end,
        # so a compile longer than the warm-up cannot leave the estimate to the compiling call.
        first_done = clock() if first_done is None else first_done
        since_first = clock() - first_done
        warm = len(device) > WARMUP_CALLS_AFTER_FIRST and since_first >= settings.warmup_time
        if warm or since_first >= settings.max_time:
            return WarmUp(tuple(device), tuple(wall), tuple(clocks))


# --- 2. the plan of a sample ---------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    estimate: float  # per-call seconds, from the warm-up's calls after the first
    batch: int  # kernels (calls of the user's callable) per sample
    timed: Callable[[], object]  # what each sample calls: the callable, or a graph's replay
    calls_per_sample: int  # calls of ``timed`` per sample (1 for a replay of ``batch`` calls)
    round_size: int  # samples between two synchronizations
    mode: str  # the timing mode the record names
    graph_notes: tuple[str, ...]  # why a batch was not captured, or capture failed
    batch_note: str  # why a sample holds the calls it holds ('' for one call)
    # The clock a sample's own SM clock is judged against: the peak (nvbench's), or under
    # --sol-lock-clocks the clock the SMs held in the warm-up (None: no sample clock to judge)
    reference_clock_mhz: float | None = None


def plan(fn: Callable[[], object], backend: Backend, settings: SamplingSettings, warm: WarmUp,
         rotation_sets: int, bytes_per_call: float) -> Plan:
    # Estimate from the calls after the first when there are any.
    estimate = max(stats.median(list(warm.device_seconds[1:] or warm.device_seconds)), 1e-9)
    wanted = 1
    if estimate < backend.min_sample_seconds:
        # A ratio a rounding error above a whole number (20 us over a 2 us call read from two
        # event timestamps: 10.000000000000002) is that number of calls, not one more.
        wanted = min(MAX_BATCH, math.ceil(backend.min_sample_seconds / estimate * (1 - 1e-9)))
    batch, batch_note = calls_per_sample(wanted, backend, rotation_sets, bytes_per_call)
    # A round is sized by wall time, the cache flush included: a flush can cost far more than a
    # short kernel, and the stopping rule is only checked between rounds.
    overhead = max(0.0, stats.median(list(warm.wall_seconds[1:] or warm.wall_seconds)) - estimate)
    round_size = max(1, min(MAX_ROUND, int(ROUND_SECONDS / (estimate * batch + overhead))))
    timed, mode, graph_notes = graph_or_launches(fn, backend, settings, estimate, batch, backend.timer)
    return Plan(estimate, batch, timed, 1 if mode == "cuda-graph" else batch, round_size, mode, tuple(graph_notes),
                batch_note, reference_clock(backend, warm))


def reference_clock(backend: Backend, warm: WarmUp) -> float | None:
    """What samples' SM clocks are judged against: the peak clock, as nvbench judges it; under a
    clock lock the clock the SMs held over the warm-up's calls after the first (a base lock holds
    them at 1355-1490 MHz on an H200, under 75 % of its 1980 MHz peak: every sample read as
    throttled against the peak)."""
    if not backend.clocks_locked:
        return backend.peak_clock_mhz
    held = [mhz for mhz in warm.clocks[1:] or warm.clocks if mhz is not None]
    return stats.median(held) if held else backend.peak_clock_mhz

def calls_per_sample(wanted: int, backend: Backend, rotation_sets: int, bytes_per_call: float) -> tuple[int, str]:
    """How many calls one sample times, when ``wanted`` would fill the backend's minimum sample,
    and the note that says so.

    Batched calls after one flush run warm: calls 2..N of a working set smaller than the cache
    read it from the cache, and a DRAM-bound kernel would be scored against DRAM bandwidth at
    cache speed (a false ``above-sol``, or a slower kernel that still passes). So a backend that
    times cold memory times one call per sample after each flush, as nvbench's cold mode does,
    unless the calls rotate through more buffer sets than a sample holds, and those sets together
    are larger than the cache: then every call of a sample reads a set that no other call of it
    touched, and the flush before the sample has evicted it.
    """
    if wanted <= 1:
        return 1, ""
    if not backend.capabilities.cold_each_call:
        return wanted, f"{wanted} calls per sample (one call is under the timer's resolution); only the first is cold"
    cache = backend.cache_bytes
    together = rotation_sets * bytes_per_call
    if rotation_sets > wanted and together > cache:
        return wanted, (
            f"{wanted} calls per sample on a rotation of {rotation_sets} buffer sets ({together / 1e6:.0f} MB together, "
            f"more than the {cache / 1e6:.0f} MB cache): each call of a sample reads a set no other call of it touched"
        )
    if rotation_sets > 1:
        why = (
            f"its {rotation_sets} buffer sets of {bytes_per_call / 1e6:.3g} MB are not more than the {wanted} calls a sample "
            f"would hold and larger than the {cache / 1e6:.0f} MB cache together"
        )
    else:
        why = f"pass more buffer sets than {wanted} (larger than the {cache / 1e6:.0f} MB cache together) to batch cold calls"
    return 1, f"one call per sample, each after a cache flush, though a call is under the timer's minimum sample: {why}"


def timed_call(fn: Callable[[], object], backend: Backend, batch: int, flush: bool = True) -> object:
    """``batch`` calls of ``fn`` timed as one sample; the backend's handle of it (its Handle type)."""
    __tracebackhide__ = True
    if flush:
        backend.flush()
    backend.hold(batch)
    token = backend.start()
    for _ in range(batch):
        result = fn()
    handle = backend.stop(token)
    problem = ran_nothing(result)  # a lambda around an async or generator function
    if problem:
        raise MeasureError(problem)
    return handle


def graph_or_launches(
    fn: Callable[[], object], backend: Backend, settings: SamplingSettings, estimate: float, batch: int, mode: str
) -> tuple[Callable[[], object], str, list[str]]:
    """What each sample calls (``fn``, or the replay of a CUDA graph of ``batch`` calls), the timing
    mode and the notes. Under ~20 us a call, launch overhead and host jitter dominate a batch of
    Python launches, so a batch is captured once and its replays timed. A sample of one call is
    never captured: the hold already keeps its launch out of the timed region. After a failed
    capture, capture stays off for the rest of the session (the backend keeps why): on torch 2.11
    the failed capture stays in the caching allocator's captures_underway, and every later capture
    fails an internal assert; measurements that would have been captured say ``events-capture-off``."""
    wanted = settings.cuda_graph == "on" or (settings.cuda_graph == "auto" and estimate < GRAPH_BELOW)
    if not backend.capabilities.graphs or not wanted:
        return fn, mode, []
    if batch == 1:
        return fn, mode, (["one call per sample is not captured in a CUDA graph: the hold keeps its launch out of the "
                           "timed region"] if settings.cuda_graph == "on" else [])
    off = backend.capture_off_reason
    if off:
        if settings.cuda_graph == "on":
            raise MeasureError(f"--sol-cuda-graph=on but CUDA-graph capture is off for this session: an earlier "
                               f"capture failed ({off})")
        return fn, EVENTS_CAPTURE_OFF, []
    try:
        return backend.capture_graph(fn, batch), "cuda-graph", []
    except Exception as exc:  # a kernel that cannot be captured (a host sync, an allocation)
        if settings.cuda_graph == "on":
            raise MeasureError(f"--sol-cuda-graph=on but the kernel cannot be captured in a CUDA graph ({exc})") from None
        return fn, EVENTS_CAPTURE_OFF, [
            f"CUDA graph capture failed ({type(exc).__name__}); timed with events, and capture is off for the rest of "
            "this session (a failed capture leaves torch's caching allocator unable to capture again)"
        ]


# --- 3. samples ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Samples:
    seconds: tuple[float, ...]  # per-call seconds of every kept sample
    probes: tuple[float, ...]  # the memory probe's time after each kept sample (none without one)
    clocks: tuple[float, ...]  # the SM clock of each kept sample (or NVML's, read while its round ran)
    telemetry: tuple[Reading, ...]  # NVML's readings of the kept rounds
    traced: tuple[SampleKernels | None, ...]  # each kept sample's device work (None without kernel timestamps)
    noisy: bool
    throttled: bool  # samples taken while throttled were kept (the recoveries ran out)
    recoveries: int
    dropped: int
    started_at: float  # wall-clock time.time()
    finished_at: float


def take_samples(plan: Plan, backend: Backend, settings: SamplingSettings, rule: StoppingRule,
                 throttle_check: Callable[[Reading], bool] | None,
                 clock: Callable[[], float], pause: Callable[[float], None]) -> Samples:
    __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
    kept = _Kept()
    started_at = time.time()
    with backend.tracing():  # one profiler session over all the rounds, where the device has kernel timestamps
        ended = _rounds(plan, backend, settings, rule, throttle_check, clock, pause, kept)
    return Samples(tuple(kept.samples), tuple(kept.probes), tuple(kept.clocks), tuple(kept.telemetry),
                   tuple(backend.kernel_times(kept.handles)), ended.noisy, ended.throttled, ended.recoveries,
                   ended.dropped, started_at, time.time())


@dataclass
class _Kept:
    """What the kept rounds gave, filled in place by ``_rounds``."""

    samples: list[float] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)
    clocks: list[float] = field(default_factory=list)
    # Only readings taken while a kept round runs: one taken before sampling finds the device idle
    # (its clock parked, its power low) and describes no kernel; one of a round whose samples were
    # discarded as throttled describes samples that are not reported.
    telemetry: list[Reading] = field(default_factory=list)
    handles: list[object] = field(default_factory=list)

    def add(self, taken: _Round, discarded: bool) -> None:
        """A round's samples (its throttled ones taken out where it was ``discarded``); its
        telemetry and, without a clock per sample, the telemetry's clock only where it was not."""
        if not discarded and taken.reading is not None:
            self.telemetry.append(taken.reading)
        self.samples += taken.samples
        self.handles += taken.handles
        self.probes += taken.probes
        measured_clocks = [c for c in taken.clocks if c is not None]
        nvml_clock = taken.reading.get("sm_clock_mhz") if taken.reading is not None else None
        if measured_clocks:
            self.clocks += measured_clocks
        elif not discarded and isinstance(nvml_clock, (int, float)):
            self.clocks.append(nvml_clock)


@dataclass(frozen=True)
class _Round:
    """One round as the backend timed it: each sample's time, handle and SM clock, the memory
    probe's times, and NVML's reading taken while it ran."""

    samples: list[float]
    probes: list[float]
    clocks: list[float | None]
    handles: list[object]  # the backend's handles (its Handle type)
    reading: Reading | None

    def without(self, flags: list[bool]) -> _Round:
        """The round with its flagged (throttled) samples taken out."""
        keep = [i for i, flag in enumerate(flags) if not flag]
        return _Round([self.samples[i] for i in keep], [self.probes[i] for i in keep] if self.probes else [],
                      [self.clocks[i] for i in keep], [self.handles[i] for i in keep], self.reading)


@dataclass(frozen=True)
class _Ended:
    noisy: bool
    throttled: bool
    recoveries: int
    dropped: int


def _rounds(plan: Plan, backend: Backend, settings: SamplingSettings, rule: StoppingRule,
            throttle_check: Callable[[Reading], bool] | None, clock: Callable[[], float],
            pause: Callable[[float], None], kept: _Kept) -> _Ended:
    """Sampling rounds until the rule says stop."""
    __tracebackhide__ = True
    probe = backend.probe if backend.capabilities.memory_probe else None
    # A rule may act between samples, outside every timed region (the integrity checks' new input values)
    after_sample = getattr(rule, "after_sample", None)
    sampling_start = clock()
    throttled = False
    recoveries = dropped = 0
    while True:
        taken = _take_round(plan, backend, probe, after_sample)
        flags = throttled_samples(taken.clocks, plan.reference_clock_mhz, taken.reading, throttle_check,
                                  backend.clocks_locked)
        discard = any(flags) and recoveries < MAX_RECOVERIES and clock() - sampling_start < settings.max_time
        if discard:
            # nvbench's throttle recovery: discard the throttled samples, let the clocks come back,
            # and sample on. Dropping them without sampling again would bias the median to the fastest.
            recoveries += 1
            dropped += sum(flags)
            pause(RECOVERY_PAUSE)
            taken = taken.without(flags)
        else:
            throttled = throttled or any(flags)
        kept.add(taken, discard)
        if not taken.samples:
            continue
        stop = rule.decide(kept.samples, clock() - sampling_start)
        if stop is not None:
            return _Ended(stop.noisy, throttled, recoveries, dropped)


def _take_round(plan: Plan, backend: Backend, probe: Callable[[], None] | None,
                after_sample: Callable[[object, int], None] | None = None) -> _Round:
    """``plan.round_size`` samples queued, each after the memory probe's where there is one, then read;
    ``after_sample`` acts between samples, outside the timed region (the integrity checks' new values)."""
    __tracebackhide__ = True
    handles: list[object] = []
    probe_handles: list[object] = []
    for _ in range(plan.round_size):
        # The memory probe streams twice the cache (after its own flush): the next sample finds
        # the cache evicted, and a flush of its own would only double the cost of a sample (on a
        # VM that reports a 480 MiB L3, a 960 MB write), leaving fewer samples in the budget.
        handles.append(timed_call(plan.timed, backend, plan.calls_per_sample, flush=not probe_handles))
        if after_sample is not None:
            after_sample(handles[-1], plan.batch)
        if probe is not None:
            probe_handles.append(timed_call(probe, backend, 1))
    # Read NVML while the GPU still runs the queued round, not after it went idle.
    reading = backend.read_telemetry()
    backend.synchronize()
    return _Round([backend.elapsed(h) / plan.batch for h in handles], [backend.elapsed(h) for h in probe_handles],
                  [backend.sample_clock_mhz(h) for h in handles], handles, reading)


def notes(plan: Plan, backend: Backend, taken: Samples) -> tuple[str, ...]:
    """What a timing says about how it was taken, in the record's order."""
    said = [*plan.graph_notes, backend.timer_note]
    if plan.mode == "cuda-graph":
        said.append(f"timed as replays of a CUDA graph of {plan.batch} call(s), the L2 flushed outside each replay")
    if taken.recoveries:
        said.append(f"{taken.dropped} throttled sample(s) in {taken.recoveries} round(s) discarded and taken again "
                    f"after a {RECOVERY_PAUSE * 1e3:g} ms pause each" + ("; later rounds stayed throttled and were kept" if taken.throttled else ""))
    said.append(plan.batch_note)
    return tuple(note for note in said if note)


def throttled_samples(
    clocks: list[float | None],
    peak_mhz: float | None,
    reading: Reading | None,
    throttle_check: Callable[[Reading], bool] | None,
    clocks_locked: bool = False,
) -> list[bool]:
    """Which samples of a round ran throttled. A sample whose SM clock was measured over it is
    judged by that clock (under 75 % of the peak, nvbench's rule); NVML's reading of the round
    judges every sample by its slowdown reasons, and by its one instant of the SM clock only where
    no sample's own clock was measured and the clocks are not locked (NVML judges its clock against
    the maximum: a locked clock is not throttling; under a lock its reasons still tell)."""
    measured = any(c is not None for c in clocks)
    nvml_throttled = False
    if reading is not None and throttle_check is not None:
        judged = {k: v for k, v in reading.items() if k != "sm_clock_mhz"} if measured or clocks_locked else reading
        nvml_throttled = bool(throttle_check(judged))
    return [nvml_throttled or sm_clock.is_below_threshold(c, peak_mhz) for c in clocks]


def summarize_telemetry(readings: list[Reading]) -> dict[str, object] | None:
    """Min/max of each numeric reading and the union of throttle reasons over the measurement."""
    if not readings:
        return None
    summary: dict[str, object] = {"readings": len(readings)}
    numeric = sorted({k for r in readings for k, v in r.items() if isinstance(v, (int, float))})
    for key in numeric:
        values = [value for r in readings if isinstance(value := r.get(key), (int, float))]
        summary[key] = {"min": min(values), "max": max(values)}
    reasons = sorted({reason for r in readings for reason in _throttle_reasons(r)})
    summary["throttle_reasons"] = reasons
    return summary


def _throttle_reasons(reading: Reading) -> list[str]:
    listed = reading.get("throttle_reasons", ())
    return list(listed) if isinstance(listed, (list, tuple)) else []
