"""Measure: one backend-agnostic sampling loop.

A backend supplies only a timed region (start/stop/elapsed), a cache flush, a synchronization and,
optionally, telemetry; the loop decides how many calls per sample and when to stop:

1. warm up until the first call (which may compile or autotune) and then at least three more calls
   and ``warmup_time`` are done, counted from the end of the first call;
2. estimate the per-call time and, when one call is too short for the timer, decide how many calls
   a sample holds: on a backend that times cold memory (CUDA) still one, unless a rotation of buffer
   sets keeps every call of a sample cold (``calls_per_sample``); elsewhere several;
3. take samples in rounds, each sample after a cache flush, with one synchronization per round;
   on a backend with a memory probe (the CPU), each sample is followed by a timed probe, after its
   own flush, so that the probe reads the memory speed of the same moment;
4. a sample taken while the device was throttled (its SM clock, measured over the sample, under
   75 % of the peak, as nvbench judges it; or NVML's reading of its round) is discarded and sampling
   goes on after a pause, up to MAX_RECOVERIES times; after that throttled samples are kept and
   the timing is flagged;
5. stop once there are ``min_samples`` samples, ``min_time`` has passed and the median's relative
   95 % confidence half-width is under ``noise``; or when ``max_time`` is spent (flagged noisy).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from pytest_solgate.measure import sm_clock
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError
from pytest_solgate.support.settings import SamplingSettings

MAX_BATCH = 100_000
ROUND_SECONDS = 0.01  # how much work to queue between two synchronizations
MAX_ROUND = 100
GRAPH_BELOW = 20e-6  # per-call time under which --sol-cuda-graph=auto replays a CUDA graph
MAX_RECOVERIES = 5  # throttled rounds re-sampled before throttled samples are kept (and flagged)
RECOVERY_PAUSE = 0.05  # seconds to let clocks recover, as nvbench's throttle recovery delay
WARMUP_CALLS_AFTER_FIRST = 3  # calls after the first (which may compile) before sampling starts
# The timing mode of a measurement that would have been captured as a CUDA graph, taken with events
# because an earlier capture of the session failed (see _graph_or_launches).
EVENTS_CAPTURE_OFF = "events-capture-off"


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


class Backend(Protocol):
    name: str
    min_sample_seconds: float  # a sample shorter than this is batched
    gated: bool  # whether its timings may pass or fail a test
    # True: every timed call must find a cold cache, so a short call is timed alone after its
    # flush rather than batched behind a warm one (see calls_per_sample); cache_bytes is that cache.
    cold_each_call: bool
    cache_bytes: int

    def flush(self) -> None: ...  # evict the cache the kernel's data could sit in
    def hold(self, batch: int) -> None: ...  # keep launch latency out of the timed region
    # Optional: ``begin()``, called before a measurement's first call, and ``steady()``, once its
    # warm-up is over (the CUDA hold forgets the compiling call; the CPU timer is chosen); and
    # ``probe``, a fixed callable of the backend's own, timed like a sample after each sample.
    def start(self) -> Any: ...
    def stop(self, token: Any) -> Any: ...
    def synchronize(self) -> None: ...
    def elapsed(self, handle: Any) -> float: ...
    def read_telemetry(self) -> dict[str, Any] | None: ...


# --- what can be timed: one rule for sol.measure's first argument ---------------------------------

PLAIN_CALLABLE = "pass a callable that runs the work when called"


def timeable(fn: Any, test: str) -> tuple[Callable[[], Any], int]:
    """The callable to time for ``sol.measure(fn, ...)``, and over how many buffer sets it rotates
    (0: none). ``fn`` is a zero-argument callable, or a non-empty list or tuple of them (rotating
    inputs). A function whose call only creates a coroutine or a generator is refused before
    anything runs: timing it would time the creation of an object, never the kernel's body."""
    if isinstance(fn, (list, tuple)):
        if not fn:
            raise MeasureError(
                f"{test}: sol.measure got an empty {type(fn).__name__} of buffer sets: give one zero-argument "
                "callable per buffer set, at least one (e.g. [lambda: add(x1, y1, o1), lambda: add(x2, y2, o2)])"
            )
        for position, call in enumerate(fn):
            _check_callable(call, test, f"buffer set {position} of the list")
        return rotating(fn), len(fn)
    _check_callable(fn, test, "")
    return fn, 0


def _check_callable(fn: Any, test: str, which: str) -> None:
    where = f" ({which})" if which else ""
    if not callable(fn):
        raise MeasureError(
            f"{test}: sol.measure needs a zero-argument callable{where}, got {type(fn).__name__}: "
            f"{PLAIN_CALLABLE} (e.g. lambda: add(x, y, out))"
        )
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise MeasureError(
            f"{test}: sol.measure got an async function{where}; only its coroutine would be created, never run: "
            f"{PLAIN_CALLABLE} (e.g. lambda: asyncio.run(kernel()))"
        )
    takes = _required_arguments(fn)
    if takes:
        raise MeasureError(
            f"{test}: sol.measure needs a zero-argument callable{where}; {_name(fn)} takes {takes}: "
            f"{PLAIN_CALLABLE} with its arguments bound (e.g. lambda: add(x, y, out))"
        )
    if inspect.isgeneratorfunction(fn):
        raise MeasureError(
            f"{test}: sol.measure got a generator function{where}; calling it only creates a generator, and none "
            f"of its body runs: {PLAIN_CALLABLE} (e.g. lambda: list(kernel()), or a function that returns)"
        )


def _required_arguments(fn: Any) -> str:
    """The arguments ``fn`` cannot be called without, e.g. "an argument 'x'"; '' when it can be
    called with none (or its signature cannot be read, as for some builtins: then the call tells)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    required = [name for name, p in signature.parameters.items()
                if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if not required:
        return ""
    names = ", ".join(repr(name) for name in required)
    return f"an argument {names}" if len(required) == 1 else f"{len(required)} arguments ({names})"


def _name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return "the lambda" if name.endswith("<lambda>") else f"'{name}'"


def ran_nothing(result: Any) -> str | None:
    """Why the value a timed call returned shows that it ran nothing (a lambda around an async
    or generator function), or None. A coroutine is closed, so Python does not warn it was never awaited."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        return ("sol.measure's kernel returned an awaitable, so it only created a coroutine and ran nothing; "
                f"{PLAIN_CALLABLE} (e.g. lambda: asyncio.run(kernel()))")
    if inspect.isgenerator(result):
        result.close()
        return ("sol.measure's kernel returned a generator, so none of the generator's body ran; "
                f"{PLAIN_CALLABLE} (e.g. lambda: list(kernel()))")
    return None


def rotating(calls: Any) -> Callable[[], Any]:
    """One callable that calls each of ``calls`` in turn: the kernel on a fresh buffer set each
    time (SOL-ExecBench's rotating inputs), for kernels whose inputs are smaller than the cache."""
    calls = list(calls)
    position = [0]

    def call_next() -> Any:
        __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
        index = position[0]
        position[0] = (index + 1) % len(calls)
        return calls[index]()

    return call_next


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
    if not getattr(backend, "cold_each_call", False):
        return wanted, f"{wanted} calls per sample (one call is under the timer's resolution); only the first is cold"
    cache = getattr(backend, "cache_bytes", 0)
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


def _timed_call(fn: Callable[[], Any], backend: Backend, batch: int) -> Any:
    __tracebackhide__ = True
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


def take_timing(
    fn: Callable[[], Any],
    backend: Backend,
    settings: SamplingSettings,
    throttle_check: Callable[[dict[str, Any]], bool] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[float], None] = time.sleep,
    rotation_sets: int = 1,
    bytes_per_call: float = 0.0,
) -> Timing:
    """Run the sampling loop on ``fn`` (a zero-argument callable) and return its ``Timing``.

    ``rotation_sets`` is how many buffer sets ``fn`` rotates through (``rotating``) and
    ``bytes_per_call`` the bytes one call declares: together they say whether batched calls can
    each find a cold cache."""
    __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
    if not callable(fn):
        raise MeasureError(f"sol.measure needs a zero-argument callable, got {type(fn).__name__}")
    begin = getattr(backend, "begin", None)
    if begin is not None:
        begin()
    wall_start = clock()
    warmup: list[float] = []
    warmup_wall: list[float] = []  # per call, the flush and the timer included
    first_done = None
    while True:
        call_start = clock()
        handle = _timed_call(fn, backend, 1)
        backend.synchronize()
        warmup.append(backend.elapsed(handle))
        warmup_wall.append(clock() - call_start)
        # The first call may compile (Triton JIT, autotuning): the warm-up is counted from its end,
        # so a compile longer than the warm-up cannot leave the estimate to the compiling call.
        first_done = clock() if first_done is None else first_done
        since_first = clock() - first_done
        warm = len(warmup) > WARMUP_CALLS_AFTER_FIRST and since_first >= settings.warmup_time
        if warm or since_first >= settings.max_time:
            break
    steady = getattr(backend, "steady", None)
    if steady is not None:
        steady()
    # Estimate from the calls after the first when there are any.
    estimate = max(stats.median(warmup[1:] or warmup), 1e-9)
    wanted = 1
    if estimate < backend.min_sample_seconds:
        # A ratio a rounding error above a whole number (20 us over a 2 us call read from two
        # event timestamps: 10.000000000000002) is that number of calls, not one more.
        wanted = min(MAX_BATCH, math.ceil(backend.min_sample_seconds / estimate * (1 - 1e-9)))
    batch, batch_note = calls_per_sample(wanted, backend, rotation_sets, bytes_per_call)
    # A round is sized by wall time, the cache flush included: a flush can cost far more than a
    # short kernel, and the stopping rule is only checked between rounds.
    overhead = max(0.0, stats.median(warmup_wall[1:] or warmup_wall) - estimate)
    round_size = max(1, min(MAX_ROUND, int(ROUND_SECONDS / (estimate * batch + overhead))))

    mode = getattr(backend, "timer", "events")  # the CPU backend's, chosen by steady()
    timed, mode, graph_notes = _graph_or_launches(fn, backend, settings, estimate, batch, mode)
    sample_batch = 1 if mode == "cuda-graph" else batch  # calls of `timed` per sample; `batch` kernels either way

    samples: list[float] = []
    probe = getattr(backend, "probe", None)
    probe_samples: list[float] = []
    # Only readings taken while a kept round runs: one taken before sampling finds the device idle
    # (its clock parked, its power low) and describes no kernel; one of a round whose samples were
    # discarded as throttled describes samples that are not reported.
    telemetry_seen: list[dict[str, Any]] = []
    started_at = time.time()
    sampling_start = clock()
    noisy = False
    throttled = False  # samples taken while throttled were kept (the recoveries ran out)
    recoveries = 0
    dropped = 0
    clocks: list[float] = []  # the SM clock of each kept sample (or NVML's, read while its round ran)
    sample_clock = getattr(backend, "sample_clock_mhz", None)
    peak_mhz = getattr(backend, "peak_clock_mhz", None)
    while True:
        handles, probe_handles = [], []
        for _ in range(round_size):
            handles.append(_timed_call(timed, backend, sample_batch))
            if probe is not None:
                probe_handles.append(_timed_call(probe, backend, 1))
        # Read NVML while the GPU still runs the queued round, not after it went idle.
        reading = backend.read_telemetry()
        backend.synchronize()
        round_samples = [backend.elapsed(h) / batch for h in handles]
        round_probes = [backend.elapsed(h) for h in probe_handles]
        round_clocks = [sample_clock(h) if sample_clock else None for h in handles]
        flags = throttled_samples(round_clocks, peak_mhz, reading, throttle_check)
        discard = any(flags) and recoveries < MAX_RECOVERIES and clock() - sampling_start < settings.max_time
        if discard:
            # nvbench's throttle recovery: discard the throttled samples, let the clocks come back,
            # and sample on. Dropping them without sampling again would bias the median to the fastest.
            recoveries += 1
            dropped += sum(flags)
            pause(RECOVERY_PAUSE)
            kept = [i for i, flag in enumerate(flags) if not flag]
            round_samples = [round_samples[i] for i in kept]
            round_probes = [round_probes[i] for i in kept] if round_probes else []
            round_clocks = [round_clocks[i] for i in kept]
        else:
            throttled = throttled or any(flags)
            if reading is not None:
                telemetry_seen.append(reading)
        samples += round_samples
        probe_samples += round_probes
        measured_clocks = [c for c in round_clocks if c is not None]
        if measured_clocks:
            clocks += measured_clocks
        elif not discard and reading is not None and isinstance(reading.get("sm_clock_mhz"), (int, float)):
            clocks.append(reading["sm_clock_mhz"])
        if not round_samples:
            continue
        elapsed = clock() - sampling_start
        noise = stats.relative_half_width(samples)
        if len(samples) >= settings.min_samples and elapsed >= settings.min_time and noise <= settings.noise:
            break
        if elapsed >= settings.max_time:
            noisy = noise > settings.noise or len(samples) < settings.min_samples
            break
    finished_at = time.time()

    notes = list(graph_notes)
    if getattr(backend, "timer_note", ""):
        notes.append(backend.timer_note)
    if mode == "cuda-graph":
        notes.append(f"timed as replays of a CUDA graph of {batch} call(s), the L2 flushed outside each replay")
    if recoveries:
        notes.append(
            f"{dropped} throttled sample(s) in {recoveries} round(s) discarded and taken again after a "
            f"{RECOVERY_PAUSE * 1e3:g} ms pause each" + ("; later rounds stayed throttled and were kept" if throttled else "")
        )
    if batch_note:
        notes.append(batch_note)
    return Timing(
        seconds=stats.median(samples),
        samples=tuple(samples),
        noise=stats.relative_half_width(samples),
        batch=batch,
        warmup_calls=len(warmup),
        noisy=noisy,
        backend=backend.name,
        started_at=started_at,
        finished_at=finished_at,
        wall_seconds=clock() - wall_start,
        throttled=throttled,
        dropped_samples=dropped,
        sm_clock_mhz=stats.mean(clocks) if clocks else None,
        mode=mode,
        telemetry=summarize_telemetry(telemetry_seen),
        telemetry_note=getattr(backend, "telemetry_note", ""),
        notes=tuple(notes),
        probe_seconds=stats.median(probe_samples) if probe_samples else None,
    )


def throttled_samples(
    clocks: list[float | None],
    peak_mhz: float | None,
    reading: dict[str, Any] | None,
    throttle_check: Callable[[dict[str, Any]], bool] | None,
) -> list[bool]:
    """Which samples of a round ran throttled. A sample whose SM clock was measured over it is
    judged by that clock (under 75 % of the peak, nvbench's rule); NVML's reading of the round
    judges every sample by its slowdown reasons, and by its one instant of the SM clock only where
    no sample's own clock was measured."""
    measured = any(c is not None for c in clocks)
    nvml_throttled = False
    if reading is not None and throttle_check is not None:
        judged = {k: v for k, v in reading.items() if k != "sm_clock_mhz"} if measured else reading
        nvml_throttled = bool(throttle_check(judged))
    return [nvml_throttled or sm_clock.is_below_threshold(c, peak_mhz) for c in clocks]


def _graph_or_launches(
    fn: Callable[[], Any], backend: Backend, settings: SamplingSettings, estimate: float, batch: int, mode: str
) -> tuple[Callable[[], Any], str, list[str]]:
    """What each sample calls (``fn``, or the replay of a CUDA graph of ``batch`` calls), the timing
    mode and the notes. Under ~20 us a call, launch overhead and host jitter dominate a batch of
    Python launches, so a batch is captured once and its replays timed. A sample of one call is
    never captured: the hold already keeps its launch out of the timed region. After a failed
    capture, capture stays off for the rest of the session (the backend keeps why): on torch 2.11
    the failed capture stays in the caching allocator's captures_underway, and every later capture
    fails an internal assert; measurements that would have been captured say ``events-capture-off``."""
    capture = getattr(backend, "capture_graph", None)
    wanted = settings.cuda_graph == "on" or (settings.cuda_graph == "auto" and estimate < GRAPH_BELOW)
    if capture is None or not wanted:
        return fn, mode, []
    if batch == 1:
        return fn, mode, (["one call per sample is not captured in a CUDA graph: the hold keeps its launch out of the "
                           "timed region"] if settings.cuda_graph == "on" else [])
    off = getattr(backend, "capture_off_reason", "")
    if off:
        if settings.cuda_graph == "on":
            raise MeasureError(f"--sol-cuda-graph=on but CUDA-graph capture is off for this session: an earlier "
                               f"capture failed ({off})")
        return fn, EVENTS_CAPTURE_OFF, []
    try:
        return capture(fn, batch), "cuda-graph", []
    except Exception as exc:  # a kernel that cannot be captured (a host sync, an allocation)
        if settings.cuda_graph == "on":
            raise MeasureError(f"--sol-cuda-graph=on but the kernel cannot be captured in a CUDA graph ({exc})") from None
        return fn, EVENTS_CAPTURE_OFF, [
            f"CUDA graph capture failed ({type(exc).__name__}); timed with events, and capture is off for the rest of "
            "this session (a failed capture leaves torch's caching allocator unable to capture again)"
        ]


def summarize_telemetry(readings: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Min/max of each numeric reading and the union of throttle reasons over the measurement."""
    if not readings:
        return None
    summary: dict[str, Any] = {"readings": len(readings)}
    numeric = sorted({k for r in readings for k, v in r.items() if isinstance(v, (int, float))})
    for key in numeric:
        values = [r[key] for r in readings if isinstance(r.get(key), (int, float))]
        summary[key] = {"min": min(values), "max": max(values)}
    reasons = sorted({reason for r in readings for reason in r.get("throttle_reasons", ())})
    summary["throttle_reasons"] = reasons
    return summary
