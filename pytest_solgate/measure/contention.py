"""Measure: how much other processes took of the machine while a measurement sampled.

Contention is a fact about *other* processes. This process's own share of a core is not it: a
kernel that sleeps, or waits on I/O, a lock, a device or another process, gets a small share on
an idle machine. So the machine is read, in this order, from the first source it has:

1. ``cpu-pressure``: the kernel's CPU pressure (PSI, ``/proc/pressure/cpu``), its "some" stall
   time over the window: the share of wall time during which at least one runnable task waited
   for a CPU. Nothing waits on an idle machine, whatever the kernel under test does. PSI is
   machine-wide, so where the kernel also gives this thread's own run-queue wait
   (``/proc/thread-self/schedstat``) the stall counts only when this thread waited too (over
   CONTENDED_WAIT of the window): a neighbour stalling another neighbour on a core we do not
   use took nothing from us;
2. ``busy-time``: the machine's busy time from ``/proc/stat`` (steal included) minus this
   process's own CPU time: how many cores other processes kept busy;
3. ``process-share``: this process's CPU time over the wall time, the last resort (it cannot
   tell a kernel that waits from one that was preempted).

``snapshot`` is taken before and after the sampling loop; ``between`` returns the facts. The
wording is the engine's. Where the counters are read (``Readers``: the clocks and the /proc root)
is the session's ``Platform``'s (measure/platform.py): a plugin that stands in for the machine
returns one with its own (solgate's tests: tests/idle_machine.py), never by replacing a module's global.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROC_ROOT = Path("/proc")

# PSI: at least one task waited for a CPU during more than this share of the window. Two busy
# processes on one core stall each other about half the time; an idle machine reads 0.
CONTENDED_STALL = 0.25
# schedstat: this thread waited on the run queue (runnable, another task on its core) this share of the window.
CONTENDED_WAIT = 0.10
# /proc/stat: other processes kept more cores busy than all but ours plus this share of ours.
CONTENDED_CORE_SHARE = 0.25
# This process's own share of a core under which it shared its core (the last resort). Undisturbed
# single-threaded CPU kernels read 0.85-1.0 on the development VM; a neighbour on the same core halves it.
CONTENDED_SHARE = 0.75

CPU_PRESSURE, BUSY_TIME, PROCESS_SHARE = "cpu-pressure", "busy-time", "process-share"


@dataclass(frozen=True)
class Snapshot:
    """The counters at one moment; None where the machine does not have them."""

    wall: float  # seconds, from the wall clock
    own_cpu: float  # this process's CPU seconds
    stall: float | None = None  # PSI cpu "some" total, seconds
    waited: float | None = None  # this thread's run-queue wait (schedstat), seconds
    busy: float | None = None  # /proc/stat busy CPU seconds over all cores
    cores: int = 1


@dataclass(frozen=True)
class Busy:
    """What other processes took while a measurement sampled."""

    source: str  # CPU_PRESSURE, BUSY_TIME or PROCESS_SHARE
    value: float  # stall share of wall time | cores other processes used | this process's share of a core
    cores: int
    contended: bool
    waited: float | None = None  # with CPU_PRESSURE: the share of the window this thread waited for a CPU

    @property
    def wait_share(self) -> float | None:
        """The most of the window this thread can have spent waiting for a CPU: its own run-queue
        wait, else the machine's stall share (which contains it); None where no source says (busy
        time and the process share cannot tell a wait from work)."""
        if self.source != CPU_PRESSURE:
            return None
        return self.waited if self.waited is not None else self.value


def _stall_seconds(proc: Path) -> float | None:
    try:
        for line in (proc / "pressure" / "cpu").read_text().splitlines():
            if line.startswith("some "):
                fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
                return int(fields["total"]) / 1e6  # microseconds
    except (OSError, ValueError, KeyError):
        return None
    return None


def _waited_seconds(proc: Path) -> float | None:
    try:
        return int((proc / "thread-self" / "schedstat").read_text().split()[1]) / 1e9  # nanoseconds
    except (OSError, ValueError, IndexError):
        return None


def _busy_seconds(proc: Path) -> tuple[float, int] | None:
    """Busy CPU seconds summed over the cores (everything but idle and iowait), and the core count."""
    try:
        lines = (proc / "stat").read_text().splitlines()
        total = [int(x) for x in lines[0].split()[1:]]
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    if len(total) < 4 or not cores:
        return None
    idle = total[3] + (total[4] if len(total) > 4 else 0)
    # guest time is already counted in user time
    return (sum(total[:8]) - idle) / ticks, cores


def snapshot(own_cpu: Callable[[], float] = time.process_time, wall: Callable[[], float] = time.perf_counter,
             proc: Path = PROC_ROOT) -> Snapshot:
    busy = _busy_seconds(proc)
    return Snapshot(wall=wall(), own_cpu=own_cpu(), stall=_stall_seconds(proc), waited=_waited_seconds(proc),
                    busy=busy[0] if busy else None, cores=busy[1] if busy else 1)


@dataclass(frozen=True)
class Readers:
    """Where a contention reading comes from: this process's CPU clock, the wall clock, the /proc root."""

    own_cpu: Callable[[], float] = time.process_time
    wall: Callable[[], float] = time.perf_counter
    proc: Path = PROC_ROOT

    def snapshot(self) -> Snapshot:
        return snapshot(self.own_cpu, self.wall, self.proc)


def between(start: Snapshot, end: Snapshot) -> Busy:
    """What other processes took between two snapshots (pure)."""
    wall = end.wall - start.wall
    if wall <= 0:  # no time passed (the tests' fake clock): nothing could take the core
        return Busy(PROCESS_SHARE, 1.0, end.cores, False)
    if start.stall is not None and end.stall is not None:
        stall = max(0.0, end.stall - start.stall) / wall
        if start.waited is None or end.waited is None:
            return Busy(CPU_PRESSURE, stall, end.cores, stall > CONTENDED_STALL)
        waited = max(0.0, end.waited - start.waited) / wall
        return Busy(CPU_PRESSURE, stall, end.cores, stall > CONTENDED_STALL and waited > CONTENDED_WAIT, waited)
    own = max(0.0, end.own_cpu - start.own_cpu)
    if start.busy is not None and end.busy is not None:
        others = max(0.0, end.busy - start.busy - own) / wall
        return Busy(BUSY_TIME, others, end.cores, others > end.cores - 1 + CONTENDED_CORE_SHARE)
    share = own / wall
    return Busy(PROCESS_SHARE, share, end.cores, share < CONTENDED_SHARE)


def calmer(a: Busy, b: Busy) -> bool:
    """Whether ``a`` shows less of other processes than ``b`` (same source)."""
    if a.source == PROCESS_SHARE:
        return a.value > b.value
    return a.value < b.value


def busy_phrase(busy: Busy) -> str:
    """A contention reading in a few words, e.g. 'CPU pressure 43%: tasks waited for a CPU'."""
    if busy.source == CPU_PRESSURE:
        mine = f", this thread {busy.waited:.0%}" if busy.waited is not None else ""
        return f"CPU pressure {busy.value:.0%}: tasks waited for a CPU{mine}"
    if busy.source == BUSY_TIME:
        return f"other processes kept {busy.value:.1f} of {busy.cores} cores busy"
    return f"this process got {busy.value:.0%} of a core"
