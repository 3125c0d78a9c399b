"""Record: facts about this run (host, versions, git) for the history and the reports."""

from __future__ import annotations

import datetime
import platform
import socket
from pathlib import Path
from typing import Sequence

from pytest_solgate import __version__
from pytest_solgate.measure.environment import cuda_version, driver_version, package_version
from pytest_solgate.record import gitinfo
from pytest_solgate.results import Measurement, RunInfo
from pytest_solgate.support.locations import redact


def build_run_info(
    run_id: str,
    started_at: datetime.datetime,
    repo: Path,
    git: gitinfo.GitFacts,
    measurements: Sequence[Measurement],
    command: str,
    baseline_ref: str,
    interrupted: bool = False,
) -> RunInfo:
    used_cuda = any(m.timing.backend == "cuda" for m in measurements)
    profiles = sorted({m.profile for m in measurements})
    ceilings = sorted(run_ceilings(measurements))
    devices = sorted({m.device for m in measurements if m.device})
    return RunInfo(
        id=run_id,
        started_at=started_at.isoformat(timespec="seconds"),
        commit=git.commit,
        commit_time=git.commit_time,
        branch=git.branch,
        dirty=git.dirty,
        host=socket.gethostname(),
        device=", ".join(devices),
        driver=driver_version() if used_cuda else "",
        cuda=cuda_version(),
        torch=package_version("torch"),
        triton=package_version("triton"),
        python=platform.python_version(),
        plugin=__version__,
        profile=", ".join(profiles),
        ceilings=", ".join(ceilings),
        command=redact(command),  # a history URL's password must not reach the history or a report
        baseline_ref=baseline_ref,
        status="interrupted" if interrupted else "complete",
    )


def run_ceilings(measurements: Sequence[Measurement]) -> set[str]:
    """Which ceilings a run's measurements were scored against, for its header: "datasheet",
    "measured" (on a quiet machine) or "measured while busy" for every measurement on a profile
    whose ceilings one of them says were measured while the machine was busy (calibrate.BUSY_NOTE:
    lower bounds, raised by what beat them, never the ground for an above-sol; a step's records
    carry no such note, and were scored against the same ceilings)."""
    from pytest_solgate.measure.calibrate import BUSY_CEILINGS, BUSY_NOTE

    busy = {m.profile for m in measurements if any(note.startswith(BUSY_NOTE) for note in m.notes)}
    return {BUSY_CEILINGS if m.profile in busy else m.ceilings for m in measurements}
