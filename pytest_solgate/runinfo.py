"""Facts about this run (host, versions, git) for the history and the reports.

Library versions come from package metadata, so nothing heavy is imported to learn them.
"""

from __future__ import annotations

import datetime
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Sequence

from pytest_solgate import __version__, gitinfo
from pytest_solgate.records import Measurement, RunInfo


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        return ""
    return version.decode() if isinstance(version, bytes) else str(version)


def cuda_version() -> str:
    """torch's CUDA version, only when torch is already imported (a measurement ran)."""
    import sys

    torch = sys.modules.get("torch")
    return str(getattr(getattr(torch, "version", None), "cuda", "") or "") if torch else ""


def build_run_info(
    run_id: str,
    started_at: datetime.datetime,
    repo: Path,
    git: gitinfo.GitFacts,
    measurements: Sequence[Measurement],
    command: str,
    baseline_ref: str,
) -> RunInfo:
    used_cuda = any(m.backend == "cuda" for m in measurements)
    profiles = sorted({m.profile for m in measurements})
    ceilings = sorted({m.ceilings for m in measurements})
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
        command=command,
        baseline_ref=baseline_ref,
    )
