"""Measure: the SM clock locked through NVML for a session (``--sol-lock-clocks=off|base|max``).

A gate on an unlocked runner sees boost-clock drift as regressions; nvbench offers
``--lock-gpu-clocks base|max`` and Nsight Compute locks to base by default. Here:

- ``base``: ``nvmlDeviceSetGpuLockedClocks(handle, NVML_CLOCK_LIMIT_ID_TDP, NVML_CLOCK_LIMIT_ID_TDP)``,
  the driver's base (TDP) clock, the clock a device can hold under any load;
- ``max``: both limits at the device's maximum SM clock (``nvmlDeviceGetMaxClockInfo``);
- restored with ``nvmlDeviceResetGpuLockedClocks`` when the session ends (pytest's unconfigure),
  at interpreter exit (``atexit``) and on SIGTERM, so a failing or interrupted run leaves the
  device as it found it. The deprecated ``nvmlDeviceSetApplicationsClocks`` is not used.

Locking needs root (or the admin's ``nvidia-smi -acp UNRESTRICTED``-style permission): a refusal
is one line and the run goes on unlocked, recorded so. The state is a fact of the environment
(``sm_clocks``), so a locked run is never a baseline for an unlocked one (record/baseline.py).
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Sequence

OFF, BASE, MAX = "off", "base", "max"
UNLOCKED = "unlocked"
ENVIRONMENT_KEY = "sm_clocks"  # the environment fact (measure/environment.py) that carries the state
# An unlocked run whose SM clock over the timed region lies further than this from its baseline
# window's says so in its verdict: boost clocks on one part move about 1-3 % with temperature.
CLOCK_MOVED = 0.03


@dataclass(frozen=True)
class ClockState:
    """What the session's clocks are: the mode asked for, and whether the lock took."""

    mode: str  # off | base | max
    locked: bool = False
    mhz: int | None = None  # the locked SM clock, when NVML names it (max); None for base (TDP)
    refused: str = ""  # why the lock was refused, when it was asked for and did not take

    @property
    def environment_value(self) -> str:
        """The ``sm_clocks`` fact: 'unlocked', 'locked base' or 'locked max 1980 MHz'."""
        if not self.locked:
            return UNLOCKED
        return f"locked {self.mode}" + (f" {self.mhz} MHz" if self.mhz else "")


def _error_code(exc: BaseException) -> object:
    return getattr(exc, "value", None)


class ClockLock:
    """The lock on one device, restored at most once (however many of the exit paths run)."""

    def __init__(self, nvml: Any, handle: Any) -> None:  # pynvml ships no types: its module and handles are Any
        self._nvml = nvml
        self._handle = handle
        self._held = False
        self._mutex = threading.Lock()

    def lock(self, mode: str) -> ClockState:
        nvml, handle = self._nvml, self._handle
        try:
            if mode == BASE:
                tdp = nvml.NVML_CLOCK_LIMIT_ID_TDP
                nvml.nvmlDeviceSetGpuLockedClocks(handle, tdp, tdp)
                mhz = None
            else:
                mhz = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
                nvml.nvmlDeviceSetGpuLockedClocks(handle, mhz, mhz)
        except Exception as exc:
            return ClockState(mode, refused=refusal(nvml, exc))
        self._held = True
        return ClockState(mode, locked=True, mhz=mhz)

    def restore(self) -> None:
        with self._mutex:
            if not self._held:
                return
            self._held = False
        try:
            self._nvml.nvmlDeviceResetGpuLockedClocks(self._handle)
        except Exception:  # at exit there is nobody left to tell; the driver resets on reboot
            pass


def refusal(nvml: Any, exc: BaseException) -> str:
    """Why NVML refused the lock, in words a runner's admin can act on."""
    code = _error_code(exc)
    if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
        return "NVML refused the lock (NVML_ERROR_NO_PERMISSION): locking clocks needs root on this runner"
    if code == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
        return "NVML cannot lock this device's clocks (NVML_ERROR_NOT_SUPPORTED: Volta or newer, not in a VM that hides it)"
    return f"NVML refused the lock ({exc})"


def lock_for_session(mode: str, open_handle: Callable[[], tuple[Any, Any]],
                     on_exit: Callable[[Callable[[], None]], None] | None = None) -> tuple[ClockState, ClockLock | None]:
    """Lock the SM clock for the session (``mode`` base or max), and arrange its restoration.

    ``open_handle`` returns (pynvml, the device's handle) or raises; ``on_exit`` registers the
    restore with every exit path (``restore_at_exit`` by default)."""
    if mode == OFF:
        return ClockState(OFF), None
    try:
        nvml, handle = open_handle()
    except Exception as exc:
        return ClockState(mode, refused=f"NVML is not available ({exc})"), None
    lock = ClockLock(nvml, handle)
    state = lock.lock(mode)
    if not state.locked:
        return state, None
    (on_exit or restore_at_exit)(lock.restore)
    return state, lock


def restore_at_exit(restore: Callable[[], None]) -> None:
    """Run ``restore`` at interpreter exit and on SIGTERM (a CI job cancelled), then let the
    signal do what it did before. Ctrl-C raises KeyboardInterrupt, so pytest's unconfigure runs."""
    atexit.register(restore)
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        restore()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)


def refused_message(state: ClockState) -> str:
    return (f"--sol-lock-clocks={state.mode}: {state.refused}; the run goes on with unlocked clocks and is "
            f"recorded as such (sm_clocks={UNLOCKED})")


def clock_moved(head_mhz: float | None, window_mhz: Sequence[float | None]) -> float | None:
    """The relative move of this run's SM clock over its timed region from its window's mean
    clock, when it exceeds CLOCK_MOVED; None when it does not or either side is unknown."""
    known = [c for c in window_mhz if c and math.isfinite(c)]
    if not head_mhz or not known:
        return None
    centre = sum(known) / len(known)
    moved = head_mhz / centre - 1
    return moved if abs(moved) > CLOCK_MOVED else None
