"""Measure (the machine's devices): what a session asks of them, in one object passed in.

Which device a worker measures on, its name, facts and stable key, a CPU's calibrated profile, the
backend that times on it, the scope a measurement runs in, the device the whole process works on,
how a clock lock is restored on every exit path, the profiler range an ``--sol-ncu`` child opens,
the reader of a step's profile, and what a contention reading reads (the clocks and /proc).
``Platform()`` is this machine's. A plugin that stands in for a
GPU returns its own from the ``pytest_solgate_platform`` hook (pytest_solgate/hookspecs.py):
solgate's own tests do (tests/fake_gpu.py), so no test replaces a module's function.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
from typing import Callable, ContextManager

from pytest_solgate.declare.profiles import DriverFacts, HardwareProfile
from pytest_solgate.measure import backends, calibrate, clocks, devices, kineto, ncu_child, step_profile
from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.contention import Readers


def cuda_device_scope(choice: devices.DeviceChoice) -> ContextManager[object]:
    """The GPU's device scope around a measurement (nothing on the CPU)."""
    if choice.kind != "cuda":
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(choice.index)


def set_cuda_device(index: int) -> None:
    """The whole process (this xdist worker) works on GPU ``index``."""
    import torch

    torch.cuda.set_device(index)


def unpredictable_random() -> random.Random:
    """A random source seeded by the OS: which sampling rounds the integrity checks run on new values
    (measure/integrity/rounds.py), and their factors, cannot be predicted by the code under test."""
    return random.Random(os.urandom(8))


@dataclass(frozen=True)
class Platform:
    """What a session asks of the machine's devices (each field a function; see the module docstring)."""

    choose_device: Callable[..., devices.DeviceChoice] = devices.choose_device
    device_name: Callable[[devices.DeviceChoice], str] = devices.device_name
    device_facts: Callable[[devices.DeviceChoice], DriverFacts] = devices.device_facts
    device_key: Callable[[int], str] = calibrate.device_key
    make_backend: Callable[..., Backend] = backends.make_backend
    device_scope: Callable[[devices.DeviceChoice], ContextManager[object]] = cuda_device_scope
    set_device: Callable[[int], None] = set_cuda_device
    restore_at_exit: Callable[[Callable[[], None]], None] = clocks.restore_at_exit
    # this CPU's profile: calibrated once and cached, re-checked briefly each session (calibrate.py)
    cpu_profile: Callable[..., HardwareProfile] = calibrate.cpu_profile
    # device -> what reads a block of measure_step's runs from its profiler session (None: its events)
    step_reader: Callable[[str], step_profile.BlockReader | None] = kineto.block_reader
    # cudaProfilerStart and Stop, around the one call an --sol-ncu child profiles
    cuda_profiler: Callable[[], tuple[Callable[[], None], Callable[[], None]]] = ncu_child.cuda_profiler
    # this process's CPU clock, the wall clock and the /proc a contention reading reads (contention.py)
    contention: Readers = Readers()
    # the integrity checks' random source, one per measurement (a seeded one makes a test's rounds repeat)
    integrity_random: Callable[[], random.Random] = unpredictable_random
