"""Measure: what a timing backend can do, declared once, and the calls the sampling phases make.

A backend says what it has (``Capabilities``) instead of being probed for attributes: the
sampling phases (measure/phases.py), the extras around a measurement (measure/extras.py) and the
engine read the declaration. ``Backend`` is the contract with its defaults: a backend that has no
warm-up hook, memory probe, clock stamps or graph capture inherits the ones that do nothing.

A backend names its own two types: the ``Token`` that ``start`` returns and ``stop`` takes, and the
``Handle`` (one timed sample) that ``stop`` returns and ``elapsed`` reads. The sampling phases only
hand them back, so each backend's are its own business, and a type checker sees them matched.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ContextManager, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from pytest_solgate.measure.kernel_trace import SampleKernels
    from pytest_solgate.measure.telemetry import NvmlReader

Token = TypeVar("Token")
Handle = TypeVar("Handle")


@dataclass(frozen=True)
class Capabilities:
    """What one backend can do on its device."""

    events: bool = False  # a device-side timer on the timed stream (CUDA events)
    kernel_timestamps: bool = False  # the device's own start/end of each kernel (CUPTI, through torch.profiler)
    graphs: bool = False  # a batch of calls can be captured once and replayed (CUDA graphs)
    energy_counter: bool = False  # a total-energy counter (NVML's, Volta and newer)
    clock_lock: bool = False  # the SM clock can be locked (NVML, with the rights to)
    telemetry: bool = False  # clocks, power, temperature and throttle reasons while sampling (NVML)
    sample_clock: bool = False  # the SM clock measured over each sample (clock64/globaltimer stamps)
    memory_probe: bool = False  # a fixed copy of the backend's own, timed after each sample (the CPU)
    # Every timed call must find a cold cache: a short call is timed alone after its flush rather
    # than batched behind a warm one (phases.calls_per_sample); ``cache_bytes`` is that cache.
    cold_each_call: bool = False


class Backend(Protocol[Token, Handle]):
    """The calls the sampling phases make, with the defaults of a backend that lacks the optional
    pieces. A backend subclasses it, sets ``name``, ``gated``, ``min_sample_seconds`` and
    ``capabilities`` and implements flush, hold, start, stop, synchronize and elapsed."""

    name: str = "backend"
    gated: bool = True  # whether its timings may pass or fail a test
    min_sample_seconds: float = 100e-6  # a sample shorter than this is batched
    capabilities: Capabilities = Capabilities()
    cache_bytes: int = 0
    timer: str = "events"  # the timing mode the record names (the CPU backend chooses its own in steady())
    timer_note: str = ""
    telemetry_note: str = ""
    peak_clock_mhz: float | None = None  # what a sample's SM clock is judged against (throttling)
    # --sol-lock-clocks took: the SMs hold the locked clock, which is then the throttling reference
    clocks_locked: bool = False
    capture_off_reason: str = ""  # why graph capture is off for the session ("" while it is on)
    reader: NvmlReader | None = None  # the NVML reader of the device (telemetry, energy counter, clock lock)
    host_clock: Callable[[], float] = staticmethod(time.perf_counter)  # a fake GPU's tests pass their own
    host_pause: Callable[[float], None] = staticmethod(time.sleep)

    @property
    def probe(self) -> Callable[[], None] | None:
        """The memory probe (Capabilities.memory_probe), timed after each sample; None without one."""
        return None

    def begin(self) -> None:
        """A new measurement starts (before its first call)."""

    def steady(self) -> None:
        """The measurement's warm-up is over."""

    def flush(self) -> None:  # evict the cache the kernel's data could sit in
        raise NotImplementedError

    def hold(self, batch: int) -> None:  # keep launch latency out of the timed region
        return None

    def start(self) -> Token:
        raise NotImplementedError

    def stop(self, token: Token) -> Handle:
        raise NotImplementedError

    def synchronize(self) -> None:
        return None

    def elapsed(self, handle: Handle) -> float:
        """The seconds one sample took (what the record's timer reads); reads, records nothing."""
        raise NotImplementedError

    def read_telemetry(self) -> dict[str, object] | None:
        return None

    def sample_clock_mhz(self, handle: Handle) -> float | None:
        """The SM clock over one sample (Capabilities.sample_clock), else None."""
        return None

    def tracing(self) -> ContextManager[None]:
        """A context over the sampling phase that records the device's kernel timestamps
        (Capabilities.kernel_timestamps); nothing elsewhere."""
        return contextlib.nullcontext()

    def kernel_times(self, handles: Sequence[Handle]) -> list[SampleKernels | None]:
        """Each sample's device work from the closed trace (kernel_trace.SampleKernels), or None."""
        return [None] * len(handles)

    def capture_graph(self, fn: Callable[[], object], calls: int) -> Callable[[], object]:
        """``calls`` calls of ``fn`` as one replayable graph (Capabilities.graphs)."""
        raise NotImplementedError(f"{self.name} cannot capture graphs")
