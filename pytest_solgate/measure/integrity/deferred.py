"""Work deferred past the timer: what a call leaves set that runs code on the measuring thread later.

A call can return at once and have its work done by the next code that runs on this thread, after
the timer stopped: a torch function or dispatch mode left entered (the plugin's next torch call
runs it), a profile or trace function (its next Python call), an input tensor whose class was
swapped for a subclass that computes when next touched, a signal handler or an interval timer.
The call reads microseconds and its result is right wherever it is read.

What this module reads is what such hooks change, before the measurement and after every sample
(before the plugin's own next torch call), compared by identity: a mode stack's depth, the
functions set, the classes of the tensors handed in ``args=``, the handlers of the timer signals
and whether their timers are armed. A few microseconds a sample.
"""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

TIMER_SIGNALS = tuple(getattr(signal, name) for name in ("SIGALRM", "SIGVTALRM", "SIGPROF") if hasattr(signal, name))
TIMERS = tuple((name.split("_")[1].lower(), getattr(signal, name)) for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
               if hasattr(signal, name))  # (its name in the line, the timer)


@dataclass(frozen=True)
class Hooks:
    """What can run code on the measuring thread after a call returned, at one moment."""

    modes: tuple[int, int]  # the depths of torch's function-mode and dispatch-mode stacks
    functions: tuple[object, ...]  # sys's profile and trace functions, threading's for new threads
    classes: tuple[type, ...]  # of the tensors handed in args=, in order
    handlers: tuple[object, ...]  # of the timer signals
    armed: tuple[bool, ...]  # the interval timers


def read(tensors: Sequence[object]) -> Hooks:
    """The hooks now; ``tensors``: those handed in args= (flat)."""
    # Never imported for this: a session that has not imported torch has no mode (importing it took
    # 2 to 3 s of every pytest process that measured a plain function).
    torch = sys.modules.get("torch")
    modes = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()) if torch else (0, 0)
    functions = (sys.getprofile(), sys.gettrace(), threading.getprofile(), threading.gettrace())
    armed = tuple(signal.getitimer(timer)[0] > 0 for _, timer in TIMERS)
    return Hooks(modes, functions, tuple(type(t) for t in tensors), tuple(signal.getsignal(s) for s in TIMER_SIGNALS),
                 armed)


def foreign_modes(foreign_code: Callable[[object], str]) -> tuple[str, ...]:
    """The torch modes entered now whose code is the code under test's (``foreign_code``: its file, or
    ''): one left entered by an earlier test's kernel runs code at this measurement's torch calls."""
    if "torch" not in sys.modules:
        return ()
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    said = []
    for mode in [*_get_current_function_mode_stack(), *_get_current_dispatch_mode_stack()]:
        hook = getattr(type(mode), "__torch_function__", None) or getattr(type(mode), "__torch_dispatch__", None)
        file = foreign_code(hook)
        if file:
            said.append(f"a torch mode of the code under test entered ({type(mode).__name__}, {file})")
    return tuple(said)


FUNCTION_NAMES = ("a profile function (sys.setprofile)", "a trace function (sys.settrace)",
                  "a profile function for new threads (threading.setprofile)",
                  "a trace function for new threads (threading.settrace)")


def left(before: Hooks, now: Hooks) -> tuple[str, ...]:
    """What changed from ``before`` to ``now``, in words (empty: nothing)."""
    said = []
    if now.modes[0] != before.modes[0]:
        said.append(f"torch function modes entered: {before.modes[0]} before, {now.modes[0]} after")
    if now.modes[1] != before.modes[1]:
        said.append(f"torch dispatch modes entered: {before.modes[1]} before, {now.modes[1]} after")
    said += [name for name, was, is_ in zip(FUNCTION_NAMES, before.functions, now.functions) if is_ is not was]
    said += [f"args' tensor {i} made a {cls.__name__} (it was a {was.__name__})"
             for i, (was, cls) in enumerate(zip(before.classes, now.classes)) if cls is not was]
    said += [f"a handler of {signal.Signals(s).name}" for s, was, is_ in zip(TIMER_SIGNALS, before.handlers, now.handlers)
             if is_ is not was]
    said += [f"an interval timer ({name})" for (name, _), was, is_ in zip(TIMERS, before.armed, now.armed)
             if is_ and not was]
    return tuple(said)


@dataclass(frozen=True)
class LeftHooks:
    """A breach: what the kernel left set, and when it was seen."""

    hooks: tuple[str, ...]
    when: str
