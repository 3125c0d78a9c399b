"""Measure: a GPU sample's time from the device's own kernel timestamps (CUPTI activity records,
read through torch.profiler: no dependency beyond torch).

CUDA events around a short kernel read about 3 us too long on an H200 (issue 35: a 1.66 us add
read 4.7 us), whatever the hold before them; the kernel's own start and end, which CUPTI stamps
on the device, do not. During the sampling phase the CUDA backend keeps one profiler session open
over all its rounds (not one per sample, so the wall time stays that of the events), and marks
on the host:

- each sample's launches with a ``record_function`` range named ``solgate-sample-N``;
- the hold before each sample (``solgate-hold-N``): the timed region starts when it ends;
- the timed stream with a tiny marker kernel after each sample's stop event (``solgate-done-N``):
  it runs once the timed stream is done with the sample (any wait on another stream included).

When the session ends, ``sample_kernels`` gives each sample the device activities (kernels,
memsets, memcopies) whose launch lies inside its range, joined by CUPTI's correlation id: their
summed duration is the sample's time, the span from the first start to the last end and the gaps
inside that span (host time: launches, Python between kernels) are recorded beside it; and an
activity that starts before the hold ended or ends after the done-marker started ran outside the
timed region, on a stream the timed stream never waited for (``SampleKernels.hidden``): work on a
side stream, however small.

Limits (docs/measurement.md): the profiler's own launch overhead lands on the host, not the
device; a launch is given to the sample whose range holds it in time (kineto may number the threads
of ranges and of runtime calls differently), so a kernel another host thread launches during a
sample counts in it; a graph replay's kernels carry the graph launch's correlation id (CUPTI), so a
replayed batch is summed whole.
"""

from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from pytest_solgate.support import stats

if TYPE_CHECKING:  # torch is imported where a session records
    from torch._C._autograd import _KinetoEvent

SAMPLE = "solgate-sample-"
HOLD = "solgate-hold-"  # the hold before a sample: the timed region starts when it ends
DONE = "solgate-done-"
# Host calls that put work on the device: their correlation id is the activity's (CUPTI; on ROCm,
# roctracer's, and the calls are HIP's: hipLaunchKernel, hipExtModuleLaunchKernel, hipMemcpyWithStream).
LAUNCHES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cudaMemset", "cuMemcpy",
            "cuMemset", "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch", "hipGraphLaunch",
            "hipMemcpy", "hipMemset")


@dataclass(frozen=True)
class TraceEvent:
    """One profiler event, in the fields torch.profiler's kineto events give (``from_kineto``)."""

    name: str
    on_device: bool  # a CUDA activity (kernel, memset, memcpy); else a host event
    start_ns: int
    end_ns: int
    correlation: int  # CUPTI's: joins a host launch to the device activity it queued
    resource: int  # the stream of a device activity; the thread of a host event


@dataclass(frozen=True)
class SampleKernels:
    """What the device ran for one sample."""

    kernels: int
    busy_seconds: float  # the activities' summed durations (their union where streams overlap)
    span_seconds: float  # first start to last end
    gap_seconds: float  # time inside the span with no activity running: the host's
    streams: tuple[int, ...]
    hidden: str = ""  # why part of the sample's work ran outside the timed stream's view ('' if none)


def from_kineto(events: Iterable[_KinetoEvent]) -> list[TraceEvent]:
    """torch.profiler's kineto events (``prof.profiler.kineto_results.events()``) as TraceEvents."""
    found = []
    for event in events:
        on_device = str(event.device_type()).rsplit(".", 1)[-1] == "CUDA"
        resource = event.device_resource_id() if on_device else event.start_thread_id()
        found.append(TraceEvent(event.name(), on_device, int(event.start_ns()), int(event.end_ns()),
                                int(event.correlation_id()), int(resource)))
    return found


def from_dicts(rows: Iterable[Mapping[str, Any]]) -> list[TraceEvent]:  # Any: JSON read back, converted here
    """TraceEvents from their fields (a recorded trace under tests/data/: JSON, its values converted here)."""
    return [TraceEvent(str(r["name"]), bool(r["on_device"]), int(r["start_ns"]), int(r["end_ns"]),
                       int(r["correlation"]), int(r["resource"])) for r in rows]


@dataclass(frozen=True)
class _Ranges:
    """The host ranges of one kind (sample, hold, done), sorted by start, for a bisection per launch."""

    starts: list[int]
    ranges: list[tuple[int, TraceEvent]]  # (sample number, its range)

    @classmethod
    def named(cls, events: Sequence[TraceEvent], prefix: str) -> _Ranges:
        found = sorted(((e.start_ns, int(e.name[len(prefix):]), e) for e in events
                        if not e.on_device and e.name.startswith(prefix) and e.name[len(prefix):].isdigit()),
                       key=lambda item: item[0])
        return cls([start for start, _, _ in found], [(sample, e) for _, sample, e in found])

    def owner(self, launch: TraceEvent) -> int | None:
        """The sample whose range holds the launch's start, or None. By time only: kineto may
        number the threads of CPU ops (the ranges) and of CUDA runtime calls (the launches) in
        different ways, so the thread is not compared."""
        at = bisect.bisect_right(self.starts, launch.start_ns) - 1
        if at < 0:
            return None
        sample, marked = self.ranges[at]
        # Half-open: a launch made as a range closes belongs to the next range, never to both.
        if marked.start_ns <= launch.start_ns < marked.end_ns:
            return sample
        return None


def sample_kernels(events: Sequence[TraceEvent]) -> dict[int, SampleKernels]:
    """Each marked sample's device work (see the module's docstring); a sample whose launches put
    nothing on the device is left out."""
    samples, holds, done = (_Ranges.named(events, prefix) for prefix in (SAMPLE, HOLD, DONE))
    device: dict[int, list[TraceEvent]] = {}  # a graph replay's kernels share its launch's correlation id
    for event in events:
        if event.on_device:
            device.setdefault(event.correlation, []).append(event)
    grouped: dict[int, list[TraceEvent]] = {}
    region_start: dict[int, int] = {}  # when each sample's hold ended on the device
    region_end: dict[int, int] = {}  # when each sample's done-marker started
    for event in events:
        if event.on_device or not event.name.startswith(LAUNCHES) or event.correlation not in device:
            continue
        activities = device[event.correlation]
        sample = samples.owner(event)
        if sample is not None:
            grouped.setdefault(sample, []).extend(activities)
        elif (sample := holds.owner(event)) is not None:
            region_start[sample] = max(a.end_ns for a in activities)
        elif (sample := done.owner(event)) is not None:
            region_end[sample] = min(a.start_ns for a in activities)
    found = {}
    for sample, work in grouped.items():
        intervals = [(e.start_ns, e.end_ns) for e in work]
        start, end = min(s for s, _ in intervals), max(e for _, e in intervals)
        busy = stats.covered_length(intervals)  # the sum of the durations, where no two overlap (one stream)
        found[sample] = SampleKernels(
            kernels=len(work), busy_seconds=busy / 1e9, span_seconds=(end - start) / 1e9,
            gap_seconds=(end - start - busy) / 1e9,
            streams=tuple(sorted({e.resource for e in work})),
            hidden=_hidden(work, region_start.get(sample), region_end.get(sample)),
        )
    return found


def _hidden(work: list[TraceEvent], start_ns: int | None, end_ns: int | None) -> str:
    """Why part of a sample ran outside its timed region (before the hold ended, or after the
    timed stream was done), or ''. On the timed stream nothing can: stream order forbids it."""
    early = [e for e in work if start_ns is not None and e.start_ns < start_ns]
    late = [e for e in work if end_ns is not None and e.end_ns > end_ns]
    if not early and not late:
        return ""
    streams = ", ".join(str(s) for s in sorted({e.resource for e in early + late}))
    outside = sum(max(0, min(e.end_ns, start_ns) - e.start_ns) for e in early if start_ns is not None)
    outside += sum(max(0, e.end_ns - max(e.start_ns, end_ns)) for e in late if end_ns is not None)
    return (f"{len(set(early + late))} of its {len(work)} device activities ran on stream(s) {streams} outside the timed "
            f"stream's region ({outside / 1e3:.3g} us of their time)")


@contextlib.contextmanager
def marked(torch: ModuleType, prefix: str, sample: int) -> Iterator[None]:
    """A host range that the profiler records, naming one sample's launches (or its done-marker)."""
    with torch.profiler.record_function(f"{prefix}{sample}"):
        yield


def available(torch: ModuleType) -> bool:
    """Whether torch.profiler can record CUDA activities here (CUPTI through kineto)."""
    profiler = getattr(torch, "profiler", None)
    if profiler is None:
        return False
    try:
        return profiler.ProfilerActivity.CUDA in profiler.supported_activities()
    except Exception:  # a torch without kineto
        return False


class Session:
    """One profiler session over a sampling phase's rounds; ``events()`` after it closed."""

    def __init__(self, torch: ModuleType) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        self._profile = torch.profiler.profile(activities=activities)
        self._events: list[TraceEvent] | None = None

    def __enter__(self) -> Session:
        self._profile.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._profile.__exit__(*exc)
        self._events = from_kineto(self._profile.profiler.kineto_results.events())

    def events(self) -> list[TraceEvent]:
        return self._events or []
