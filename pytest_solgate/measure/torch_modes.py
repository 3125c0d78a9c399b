"""Measure (what a retake runs under): the torch modes a measurement was taken in.

A suspected regression is measured again when the test is judged, after its body has returned and
left its ``with torch.no_grad():`` or ``torch.inference_mode()`` or ``torch.autocast(...)``. Run
bare, a model's step then records autograd's graph and reads slower than the measurement it is to
confirm (a step under inference mode read 1.18x slower at its commit and 1.42x on the re-measurement,
benchmarks/step_gate_power.py): the retake would confirm a regression the code does not have, or
make one look worse. So the modes are read when the measurement is kept and entered again around
its retake.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, ContextManager, TypeVar

AUTOCAST_DEVICES = ("cuda", "cpu")
Result = TypeVar("Result")


def modes_now() -> Callable[[], ContextManager[object]]:
    """What re-enters the torch modes in force now (grad, inference, autocast); nothing to enter
    where torch was never imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return contextlib.nullcontext
    inference = torch.is_inference_mode_enabled()
    grad = torch.is_grad_enabled()
    autocast = []
    for device in AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                autocast.append((device, torch.get_autocast_dtype(device)))
        except (RuntimeError, TypeError, AttributeError):  # an older torch, or a device type it lacks
            continue

    def enter() -> ContextManager[object]:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode(inference))
        if not inference:  # inference mode implies no grad; outside it, grad as it was
            stack.enter_context(torch.set_grad_enabled(grad))
        for device, dtype in autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        return stack

    return enter


def under_modes_now(fn: Callable[[], Result]) -> Callable[[], Result]:
    """``fn``, called later under the torch modes in force now."""
    enter = modes_now()

    def again() -> Result:
        __tracebackhide__ = True
        with enter():
            return fn()

    return again
