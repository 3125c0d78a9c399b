"""A pytest plugin of solgate's own tests: the machine a session's contention reading reads.

tests/conftest.py loads it into every pytest session a test starts, in process or in a subprocess
(``PYTEST_PLUGINS``, with this folder on ``PYTHONPATH``), and names in ``PROC_ROOT_VARIABLE`` a
folder of fake /proc files (an idle machine's, unless a test names another), so that no verdict
depends on this machine's load. The session gets them the way any plugin hands solgate its
machine: a ``Platform`` from the ``pytest_solgate_platform`` hook, whose ``contention`` readers
read that folder. A plugin standing in for a GPU answers the hook first, with
the same readers (fake_gpu.StandIn), and so must any other plugin a test writes that answers it.
Without the variable the session reads the real /proc. The same Platform's CPU timer skips its
cache flush while a test's fake clock times (FlushedOnTheMachinesClock).

PYTEST_DONT_REWRITE: imported before the sessions that load it, it is no module to rewrite (and
pytest's warning that it cannot would count among an in-process session's warnings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest

from pytest_solgate.measure import backends
from pytest_solgate.measure.contention import Readers
from pytest_solgate.measure.devices import DeviceChoice
from pytest_solgate.measure.platform import Platform

MODULE = "idle_machine"  # the name PYTEST_PLUGINS loads it by
PROC_ROOT_VARIABLE = "SOLGATE_TEST_PROC_ROOT"  # a folder of fake /proc files the session reads
# A file in that folder holding the seconds of a fake clock; where it is, the session reads it as
# both its wall and its CPU clock, so that a kernel on the tests' fake clock moves the counters and
# the clocks together and the reading is exact under any load.
CLOCK_FILE = "solgate-clock"


@dataclass(frozen=True)
class FileClock:
    """A test's fake clock (CLOCK_FILE): the seconds its file holds when called."""

    path: Path

    def __call__(self) -> float:
        return float(self.path.read_text())


def readers_from(environ: Mapping[str, str]) -> Readers:
    """The readers of the /proc ``environ`` names (PROC_ROOT_VARIABLE), or the machine's own."""
    root = environ.get(PROC_ROOT_VARIABLE)
    if not root:
        return Readers()
    clock = Path(root) / CLOCK_FILE
    if clock.is_file():
        return Readers(own_cpu=FileClock(clock), wall=FileClock(clock), proc=Path(root))
    return Readers(proc=Path(root))


class FlushedOnTheMachinesClock(backends.CpuBackend):
    """The CPU timer, whose cache flush before each sample (a write of twice the last-level cache,
    64 MB here) is left out while it times on a test's clock (the ``sol_clock`` fixture's fake
    clock): no eviction can show in a fake clock's readings, and the flush was most of the CPU
    time of every measurement on it (7 to 40 ms a sample on this machine, a few samples in a
    time budget of 0.3 s under load). On the machine's clock it flushes as the plugin's does."""

    def flush(self) -> None:
        if self.clock is backends.read_cpu_stamp:
            super().flush()


def make_backend(choice: DeviceChoice, l2_bytes: int | None, clock_mhz: float | None) -> Any:
    made = backends.make_backend(choice, l2_bytes, clock_mhz)
    if type(made) is backends.CpuBackend and made.flush_bytes:
        return FlushedOnTheMachinesClock(made.name, made.flush_bytes, made.gated)
    return made


@pytest.hookimpl(trylast=True)  # a stand-in for a GPU answers first, with these readers in its platform
def pytest_solgate_platform(config: pytest.Config) -> Platform | None:
    readers = readers_from(os.environ)
    return None if readers == Readers() else Platform(contention=readers, make_backend=make_backend)
