"""Measure: what can be timed, one rule for sol.measure's first argument.

A zero-argument callable, or a non-empty list or tuple of them (rotating inputs); a function whose
call only creates a coroutine or a generator is refused before anything runs, and a timed call
that returned one (a lambda around such a function) is caught by ``ran_nothing``.
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

from pytest_solgate.support.errors import MeasureError

PLAIN_CALLABLE = "pass a callable that runs the work when called"


def timeable(fn: object, test: str) -> tuple[Callable[[], object], int]:
    """The callable to time for ``sol.measure(fn, ...)``, and over how many buffer sets it rotates
    (0: none). ``fn`` is a zero-argument callable, or a non-empty list or tuple of them (rotating
    inputs). A function whose call only creates a coroutine or a generator is refused before
    anything runs: timing it would time the creation of an object, never the kernel's body."""
    if isinstance(fn, (list, tuple)):
        if not fn:
            raise MeasureError(
                f"{test}: sol.measure got an empty {type(fn).__name__} of buffer sets: give one zero-argument "
                "callable per buffer set, at least one (e.g. [lambda: add(x1, y1, o1), lambda: add(x2, y2, o2)])"
            )
        calls = [_checked(call, test, f"buffer set {position} of the list") for position, call in enumerate(fn)]
        return rotating(calls), len(fn)
    return _checked(fn, test, ""), 0


def _checked(fn: object, test: str, which: str) -> Callable[[], object]:
    """``fn``, checked to be a callable whose call runs the work."""
    where = f" ({which})" if which else ""
    if not callable(fn):
        raise MeasureError(
            f"{test}: sol.measure needs a zero-argument callable{where}, got {type(fn).__name__}: "
            f"{PLAIN_CALLABLE} (e.g. lambda: add(x, y, out))"
        )
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise MeasureError(
            f"{test}: sol.measure got an async function{where}; only its coroutine would be created, never run: "
            f"{PLAIN_CALLABLE} (e.g. lambda: asyncio.run(kernel()))"
        )
    takes = _required_arguments(fn)
    if takes:
        raise MeasureError(
            f"{test}: sol.measure needs a zero-argument callable{where}; {_name(fn)} takes {takes}: "
            f"{PLAIN_CALLABLE} with its arguments bound (e.g. lambda: add(x, y, out))"
        )
    if inspect.isgeneratorfunction(fn):
        raise MeasureError(
            f"{test}: sol.measure got a generator function{where}; calling it only creates a generator, and none "
            f"of its body runs: {PLAIN_CALLABLE} (e.g. lambda: list(kernel()), or a function that returns)"
        )
    return fn


def _required_arguments(fn: Callable[..., object]) -> str:
    """The arguments ``fn`` cannot be called without, e.g. "an argument 'x'"; '' when it can be
    called with none (or its signature cannot be read, as for some builtins: then the call tells)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    required = [name for name, p in signature.parameters.items()
                if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if not required:
        return ""
    names = ", ".join(repr(name) for name in required)
    return f"an argument {names}" if len(required) == 1 else f"{len(required)} arguments ({names})"


def _name(fn: object) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return "the lambda" if name.endswith("<lambda>") else f"'{name}'"


def ran_nothing(result: object) -> str | None:
    """Why the value a timed call returned shows that it ran nothing (a lambda around an async
    or generator function), or None. A coroutine is closed, so Python does not warn it was never awaited."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        return ("sol.measure's kernel returned an awaitable, so it only created a coroutine and ran nothing; "
                f"{PLAIN_CALLABLE} (e.g. lambda: asyncio.run(kernel()))")
    if inspect.isgenerator(result):
        result.close()
        return ("sol.measure's kernel returned a generator, so none of the generator's body ran; "
                f"{PLAIN_CALLABLE} (e.g. lambda: list(kernel()))")
    return None


def rotating(calls: Sequence[Callable[[], object]]) -> Callable[[], object]:
    """One callable that calls each of ``calls`` in turn: the kernel on a fresh buffer set each
    time (SOL-ExecBench's rotating inputs), for kernels whose inputs are smaller than the cache."""
    calls = list(calls)
    position = [0]

    def call_next() -> object:
        __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
        index = position[0]
        position[0] = (index + 1) % len(calls)
        return calls[index]()

    return call_next
