"""Shared by the benchmark scripts: a synthetic profile and kernels of known duration."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pytest_solgate.declare.profiles import HardwareProfile

# 1 GB/s: a kernel declared as B bytes has T_SOL = B / 1e9 seconds.
SYNTHETIC = HardwareProfile(
    id="synthetic", name="synthetic 1 GB/s", kind="cpu", memory_bandwidth_gbps=1, peak_tflops={"fp32": 0.001},
    ceilings="measured",
)


def busy(seconds: float) -> None:
    """A kernel of known duration: spin until this thread has used ``seconds`` of CPU time, what the
    CPU backend's timer reads (sleep would measure the scheduler; a spin on wall time does less
    work when the thread is preempted, and reads less)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def write_synthetic(folder: Path) -> Path:
    from pytest_solgate.declare.profiles import profile_to_toml

    path = folder / "synthetic.toml"
    path.write_text(profile_to_toml(SYNTHETIC))
    return path


def machine() -> str:
    return f"{socket.gethostname()}, {platform.processor() or platform.machine()}, Python {platform.python_version()}"


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` other processes, each spinning on a core, for the duration: a loaded machine."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
