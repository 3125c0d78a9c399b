"""Measure: the environment a measurement ran in (host, device, driver and library versions).

Two runs are compared like with like only when these agree (see baseline.py): a new driver, torch
or host can move a kernel's time without any change to the kernel. Library versions come from
package metadata, so nothing heavy is imported to learn them.
"""

from __future__ import annotations

import platform
import socket
import sys
from importlib import metadata

# The facts, in the order messages list them.
# sm_clocks: unlocked, or locked by --sol-lock-clocks (measure/clocks.py); GPU runs only.
KEYS = ("host", "device", "device_uuid", "driver", "cuda", "torch", "triton", "python", "sm_clocks")
# Which runner of a fleet ran it: recorded and shown, but runners alike in everything else are one
# environment for baselines (ephemeral runners get a new host name every job); the spread between
# them enters the noise floor instead (judge/hosts.py).
RUNNER_KEYS = ("host", "device_uuid")
BASELINE_KEYS = tuple(k for k in KEYS if k not in RUNNER_KEYS)


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
    torch = sys.modules.get("torch")
    return str(getattr(getattr(torch, "version", None), "cuda", "") or "") if torch else ""


def describe(device: str, device_uuid: str | None, on_gpu: bool) -> dict[str, str]:
    """The environment of a measurement on ``device``; empty facts are left out."""
    facts = {
        "host": socket.gethostname(),
        "device": device,
        "device_uuid": device_uuid or "",
        "driver": driver_version() if on_gpu else "",
        "cuda": cuda_version() if on_gpu else "",
        "torch": package_version("torch"),
        "triton": package_version("triton"),
        "python": platform.python_version(),
    }
    return {k: v for k, v in facts.items() if v}


def differences(head: dict[str, str] | None, base: dict[str, str] | None, keys: tuple[str, ...] = KEYS) -> list[str]:
    """'torch 2.12.0 -> 2.13.0' for each fact of ``keys`` both know and that differs; unknown facts never differ."""
    head, base = head or {}, base or {}
    return [f"{k} {base[k]} -> {head[k]}" for k in keys if head.get(k) and base.get(k) and head[k] != base[k]]
