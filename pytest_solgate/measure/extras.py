"""Measure: the extras that wrap one measurement, through one small interface.

An extra's ``before()`` runs just before the timing and its ``after(taken)`` right after it; an
extra that ``holds_device`` runs while the device's lock is held (it must see the same moment as
the timing, or use the device alone), the others after the lock is given back (the ncu child
takes the lock itself). ``after`` returns ``Findings``: notes for the record, fields of the
Measurement (``contended``, ``joules``, ``measured_bytes``), an error that stops the measurement,
and whether the attempt was disturbed enough to be taken again (measure/pipeline.py).

- ``Contention``: what other processes took from this one while it sampled (measure/contention.py),
  or, on a GPU, another solgate run that held the device's lock just before;
- ``SynchronizedBlock``: on a GPU, one block of back-to-back calls that reads energy per call and
  catches work the timer cannot see (measure/block.py); where the samples were timed from kernel
  timestamps, any of their work outside the timed stream's region is caught from those first;
- ``DramBytes``: ``--sol-ncu``, the DRAM bytes of one call under Nsight Compute (measure/ncu.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Protocol, TypedDict

from pytest_solgate.measure import block, ncu
from pytest_solgate.measure.contention import PROCESS_SHARE, Busy, Readers, Snapshot, between, busy_phrase
from pytest_solgate.measure.context import Context
from pytest_solgate.measure.sampling import Timing

# (test key, measurement name) -> the DRAM traffic of one call under Nsight Compute (measure/ncu.py)
DramProfiler = Callable[[str, str], "ncu.DramTraffic"]


@dataclass(frozen=True)
class Taken:
    """One attempt at a measurement, as the extras see it after its timing."""

    test: str
    name: str
    fn: Callable[[], object]
    context: Context
    timing: Timing
    waited_for: str  # who held the device's lock just before this attempt took it ('' when nobody)


class Fields(TypedDict, total=False):
    """The Measurement fields the extras find, and the integrity checks' breach."""

    contended: str  # why the attempt was not alone on its device ('' when it was)
    contended_wait: float | None
    joules: float | None
    measured_bytes: float
    integrity: object  # measure/integrity/guard.py's Breach (guard imports this module: not named here)


@dataclass(frozen=True)
class Findings:
    notes: tuple[str, ...] = ()
    fields: Fields = field(default_factory=Fields)  # Measurement fields, and the integrity checks' breach
    error: str = ""  # the measurement cannot stand (a MeasureError's one line)
    retake: bool = False  # the attempt was disturbed: take it again if the budget allows
    rank: float = 0.0  # of disturbed attempts, the lowest rank is kept (the calmest)


class Extra(Protocol):
    holds_device: bool

    def before(self) -> None: ...
    def after(self, taken: Taken) -> Findings: ...


def merged(found: list[Findings]) -> Findings:
    fields: Fields = {}
    for one in found:
        fields.update(one.fields)
    return Findings(
        notes=tuple(note for one in found for note in one.notes),
        fields=fields,
        error=next((one.error for one in found if one.error), ""),
        retake=any(one.retake for one in found),
        rank=sum(one.rank for one in found),
    )


# --- contention ----------------------------------------------------------------------------------


class Contention:
    """Why a measurement was not alone on its device (see ``contention``); a contended attempt
    is taken again (measure/pipeline.py) and the calmest is kept."""

    holds_device = True

    def __init__(self, run_id: str, readers: Readers = Readers()) -> None:
        self.run_id = run_id
        self.readers = readers  # the clocks and the /proc it reads (a test's, passed in by the engine's builder)
        self._before: Snapshot | None = None

    def before(self) -> None:
        self._before = self.readers.snapshot()

    def after(self, taken: Taken) -> Findings:
        assert self._before is not None, "before() ran"
        busy = between(self._before, self.readers.snapshot())
        # The interpreter's timings mean nothing whether or not the machine was busy.
        on_cpu = taken.context.device.kind == "cpu"
        why = contention(taken.waited_for, self.run_id, busy, on_cpu) if taken.timing.gated else ""
        rank = -busy.value if busy.source == PROCESS_SHARE else busy.value  # lower: calmer
        return Findings(fields={"contended": why, "contended_wait": contended_wait(why, busy, on_cpu)},
                        retake=bool(why), rank=rank)


def contention(waited_for: str, run_id: str, busy: Busy, on_cpu: bool) -> str:
    """Why a measurement was not alone on its device, or '' (pure).

    On a CPU, what other processes took while it sampled (measure/contention.py). A GPU's share is
    not visible from the host; there, another solgate run that held the device's lock just before
    us is the evidence (its tests run on the device between its timed regions). Our own xdist
    workers do not count.
    """
    if on_cpu:
        return busy_phrase(busy) if busy.contended else ""
    if waited_for and not (run_id and f"run {run_id} " in f"{waited_for} "):
        return f"another solgate run ({waited_for}) was using this device"
    return ""


def contended_wait(why: str, busy: Busy, on_cpu: bool) -> float | None:
    """The share of a contended measurement's window it may have waited for a CPU: how much the
    contention can explain (judge/window.py); None where nothing bounds it (a GPU shared with
    another run, a machine without CPU pressure)."""
    return busy.wait_share if why and on_cpu else None


# --- the synchronized block: energy and hidden work ----------------------------------------------


class SynchronizedBlock:
    """On a GPU: the block of back-to-back calls that reads energy and catches hidden work."""

    holds_device = True

    def before(self) -> None:
        pass

    def after(self, taken: Taken) -> Findings:
        if taken.timing.hidden_work:  # seen in the kernel timestamps, however small
            return Findings(error=side_stream_message(taken.test, taken.name, taken.timing.hidden_work))
        backend = taken.context.backend
        reader = backend.reader  # there wherever the backend has the energy counter
        read_energy = reader.energy_counter() if reader is not None and backend.capabilities.energy_counter else None
        others = reader.other_processes(os.getpid()) if reader is not None and read_energy is not None else []
        reading = block.synchronized_block(taken.fn, backend, taken.timing.seconds, read_energy,
                                           clock=backend.host_clock, pause=backend.host_pause)
        if block.hidden_work(reading):
            return Findings(error=block.hidden_work_message(taken.test, taken.name, reading))
        if others:  # the counter is the device's: it counts their work as this kernel's
            return Findings(notes=(f"no energy figure: another process was using the device ({', '.join(others)}), "
                                   "and NVML's energy counter counts its work too",))
        notes = (reading.energy_note,) if reading.energy_note else ()
        return Findings(notes=notes, fields={"joules": block.joules_per_call(reading)})


def side_stream_message(test: str, name: str, why: str) -> str:
    return (f"{test} '{name}': work on a stream the timer does not wait for: {why}; its time would read fast. "
            "Launch it on torch.cuda.current_stream(), or join the side stream "
            "(side.wait_stream(current) before, torch.cuda.current_stream().wait_stream(side) after)")


# --- --sol-ncu: measured DRAM bytes --------------------------------------------------------------


class DramBytes:
    """The DRAM bytes one call moved, once per measurement (a confirmation's retake reuses them).
    ncu missing or refused is said once and stops the tries; never a failure."""

    holds_device = False  # the ncu child takes the device's lock itself

    def __init__(self, profiler: DramProfiler, warn: Callable[[str], None]) -> None:
        self.profiler: DramProfiler | None = profiler
        self.warn = warn
        self._bytes: dict[tuple[str, str], float] = {}

    @property
    def usable(self) -> bool:
        return self.profiler is not None

    def before(self) -> None:
        pass

    def after(self, taken: Taken) -> Findings:
        key = (taken.test, taken.name)
        if key not in self._bytes:
            if self.profiler is None:
                return Findings()
            try:
                self._bytes[key] = self.profiler(*key).total_bytes
            except ncu.NcuUnavailable as exc:
                self.profiler = None
                self.warn(f"--sol-ncu: {exc}")
                return Findings()
            except ncu.NcuFailed as exc:
                return Findings(notes=(f"no measured bytes: {exc}",))
        return Findings(fields={"measured_bytes": self._bytes[key]})
