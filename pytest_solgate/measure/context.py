"""Measure: where a session's measurements run and against which ceilings, resolved once.

The device (--sol-device, one GPU per xdist worker), the hardware profile (given, detected, or
calibrated once and cached), the backend that times on it, the device lock's key, and on a GPU
the clocks' state (--sol-lock-clocks), recorded in the environment so that runs are compared like
with like. Nothing here runs until the first measurement: a session that measures nothing never
imports torch.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping

from pytest_solgate.declare.profiles import DriverFacts, HardwareProfile, ProfileOption, detect, known_profiles
from pytest_solgate.measure import backends, calibrate, clocks, devices, environment, locking, ncu_child
from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.platform import Platform
from pytest_solgate.support.errors import MeasureError, OptionError
from pytest_solgate.support.settings import Settings


@dataclass(frozen=True)
class Context:
    """Where measurements run and against which ceilings."""

    device: devices.DeviceChoice
    device_name: str
    profile: HardwareProfile
    ceilings: str  # "datasheet" or "measured"
    backend: Backend  # a CpuBackend or a CudaBackend (measure/backends.py)
    lock_key: str
    warnings: tuple[str, ...] = ()
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # In a Triton-interpreter session: the real CPU backend, for callables that launch no Triton
    # kernel (a torch reference), which are real CPU measurements.
    cpu_fallback: backends.CpuBackend | None = None
    platform: Platform = Platform()  # the devices it runs on: this machine's, or a stand-in's

    def scope(self) -> ContextManager[object]:
        """The device's scope around a measurement (nothing on the CPU)."""
        return self.platform.device_scope(self.device)

    @property
    def on_gpu(self) -> bool:
        """Whether measurements are gated GPU timings (not the CPU, not the Triton interpreter)."""
        return self.device.kind == "cuda" and self.backend.gated


def worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def worker_count() -> int | None:
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    return int(count) if count.isdigit() else None


def resolve(settings: Settings, profile_option: ProfileOption, cache_dir: Path,
            announce: Callable[[str], None], platform: Platform = Platform()) -> tuple[Context, clocks.ClockLock | None]:
    """The session's context on ``platform``'s devices, and the clock lock to restore when the
    session ends (or None)."""
    choice = platform.choose_device(settings.device, worker_index(), worker_count())
    facts = platform.device_facts(choice)
    name = platform.device_name(choice)
    device_uuid: str | None = None
    if choice.kind == "cpu":
        profile, warnings = _cpu_profile(settings, profile_option.profile, cache_dir, announce, platform)
        lock_key = "cpu"
    else:
        device_uuid = platform.device_key(choice.cuda_index)  # survives CUDA_VISIBLE_DEVICES renumbering
        profile, warnings = _gpu_profile(settings.ceilings, profile_option, choice, device_uuid, name, facts,
                                         cache_dir, announce)
        lock_key = f"cuda-{device_uuid}"
        # The whole process (this xdist worker) works on its GPU: Triton launches and tensors
        # created outside sol.measure then go to cuda:N too, not to cuda:0.
        platform.set_device(choice.cuda_index)
    l2_bytes = facts.get("l2_bytes") or profile.device.l2_bytes
    backend = platform.make_backend(choice, l2_bytes, profile.device.boost_clock_mhz)
    described = environment.describe(name, device_uuid, choice.kind == "cuda")
    clock_lock = None
    if choice.kind == "cuda":
        clock_lock, refused = _session_clocks(settings.lock_clocks, backend, platform, described)
        warnings += refused
    fallback = None if backend.gated else backends.cpu_backend()
    context = Context(
        device=choice, device_name=name, profile=profile, ceilings=profile.ceilings, backend=backend,
        lock_key=lock_key, warnings=tuple(warnings),
        environment=described,  # with the clocks' state (sm_clocks) on a GPU: compared like with like
        cpu_fallback=fallback, platform=platform,
    )
    return context, clock_lock


def _cpu_profile(settings: Settings, explicit: HardwareProfile | None, cache_dir: Path,
                 announce: Callable[[str], None], platform: Platform) -> tuple[HardwareProfile, list[str]]:
    """The CPU's profile and the warnings about it: the one given, else this CPU's measured one
    (calibrated once and cached); a CPU has no datasheet ceilings."""
    warnings = gpu_only_options(settings)
    if explicit is not None:
        if explicit.kind == "gpu":
            warnings.append(
                f"--sol-profile={explicit.id} is a GPU profile but measurements run on the CPU: CPU work is "
                f"scored against {explicit.id}'s ceilings; pass --sol-device=cuda, or drop --sol-profile"
            )
        return explicit, warnings
    if settings.ceilings == "datasheet":
        raise OptionError(
            "--sol-ceilings=datasheet on a CPU: CPUs have only measured ceilings; "
            "drop the option or pass --sol-profile"
        )
    # Under the device lock: a calibration must not run beside another measurement,
    # and a second worker waiting here then finds the cached profile.
    with locking.device_lock("cpu"):
        calibrate.say_id_change(cache_dir, announce)  # against this project's last session, in its .solgate
        return platform.cpu_profile(cache_dir, announce, readers=platform.contention), warnings


def _gpu_profile(ceilings: str | None, profile_option: ProfileOption, choice: devices.DeviceChoice, device_uuid: str,
                 name: str, facts: DriverFacts, cache_dir: Path,
                 announce: Callable[[str], None]) -> tuple[HardwareProfile, list[str]]:
    """The GPU's profile and the warnings about it: the one given, else the one its name and
    facts match; measured ceilings (``--sol-ceilings=measured``) calibrated over it."""
    warnings = []
    profile = profile_option.profile
    if profile is None:
        match = detect(name, facts, known_profiles(cache_dir, profile_option.folders))
        profile = match.profile
        if match.warning:
            warnings.append(match.warning)
    if ceilings == "measured" and profile.ceilings != "measured":
        profile = measured_gpu_profile(cache_dir, profile, choice, device_uuid, name, facts, announce)
    return profile, warnings


def _session_clocks(mode: str, backend: Backend, platform: Platform,
                    described: dict[str, str]) -> tuple[clocks.ClockLock | None, list[str]]:
    """``--sol-lock-clocks`` on the session's GPU: the lock to restore (or None) and a refusal's
    warning; the clocks' state recorded in ``described``. An --sol-ncu child leaves the clocks to
    its parent: its restore would undo the parent's lock."""
    clock_lock = None
    if ncu_child.is_child():
        clock_state = clocks.ClockState(clocks.OFF)
    else:
        clock_state, clock_lock = lock_clocks(mode, backend, platform.restore_at_exit)
        if clock_state.locked:  # a locked clock is not throttling: it is judged against the lock
            backend.clocks_locked = True
            backend.peak_clock_mhz = clock_state.mhz or backend.peak_clock_mhz
    described[clocks.ENVIRONMENT_KEY] = clock_state.environment_value
    return clock_lock, [clocks.refused_message(clock_state)] if clock_state.refused else []


def lock_clocks(mode: str, backend: Backend, on_exit: Callable[[Callable[[], None]], None] = clocks.restore_at_exit
                ) -> tuple[clocks.ClockState, clocks.ClockLock | None]:
    """--sol-lock-clocks on the backend's device, through the NVML handle its telemetry uses; the
    lock's restore registered with ``on_exit``."""
    reader = backend.reader

    def handle() -> tuple[Any, Any]:  # pynvml and its device handle: pynvml has no types
        if reader is None:
            raise MeasureError(backend.telemetry_note or "no NVML reader")
        return reader.nvml_handle()

    return clocks.lock_for_session(mode, handle, on_exit)


def measured_gpu_profile(cache_dir: Path, datasheet: HardwareProfile, choice: devices.DeviceChoice, key: str, name: str,
                         facts: DriverFacts, announce: Callable[[str], None],
                         calibrating: Callable[..., tuple[HardwareProfile, Path | None]] = calibrate.calibrate_gpu,
                         lock: Callable[[str], ContextManager[object]] = locking.device_lock) -> HardwareProfile:
    """The GPU's measured profile: the cached one, else calibrated once under the device's lock
    (``calibrating`` and ``lock`` passed in by tests)."""
    path = calibrate.gpu_measured_path(cache_dir, datasheet.id, key)
    cached = calibrate.cached_profile(path)
    if cached is not None:
        return cached
    with lock(f"cuda-{key}"):
        cached = calibrate.cached_profile(path)  # a worker that waited here finds what another measured
        if cached is not None:
            return cached
        announce(f"solgate: calibrating {name} once (cached in {path}) ...")
        profile, _ = calibrating(cache_dir, choice.index, datasheet, name, facts.get("l2_bytes"), announce=announce)
    return profile


def gpu_only_options(settings: Settings) -> list[str]:
    """What the options that act on a GPU say when the measurements run on the CPU."""
    said = []
    if settings.lock_clocks != clocks.OFF:
        said.append(f"--sol-lock-clocks={settings.lock_clocks}: measurements run on the CPU, which has no SM clock "
                    "to lock; the option acts on GPUs only")
    if settings.ncu:
        said.append("--sol-ncu: measurements run on the CPU; Nsight Compute measures the DRAM bytes of GPU kernels only")
    return said
