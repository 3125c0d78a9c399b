"""Shared by the benchmark scripts: a synthetic profile and kernels of known duration."""

from __future__ import annotations

import platform
import socket
import time
from pathlib import Path

from pytest_solgate.declare.profiles import HardwareProfile

# 1 GB/s: a kernel declared as B bytes has T_SOL = B / 1e9 seconds.
SYNTHETIC = HardwareProfile(
    id="synthetic", name="synthetic 1 GB/s", kind="cpu", memory_bandwidth_gbps=1, peak_tflops={"fp32": 0.001},
    ceilings="measured",
)


def busy(seconds: float) -> None:
    """A kernel of known duration: spin on the clock (sleep would measure the scheduler)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def write_synthetic(folder: Path) -> Path:
    from pytest_solgate.declare.profiles import profile_to_toml

    path = folder / "synthetic.toml"
    path.write_text(profile_to_toml(SYNTHETIC))
    return path


def machine() -> str:
    return f"{socket.gethostname()}, {platform.processor() or platform.machine()}, Python {platform.python_version()}"
