"""Integrity: the clocks and sampling functions a measurement relies on, replaced by the code under test.

``watched`` reads, by name, every function the timing goes through: Python's clocks, torch.cuda's
events and synchronize (of the backend's torch, so that a fake GPU is watched like a real one), and
the plugin's own sampling functions. Two checks use it, before and after each measurement:

- ``foreign``: a watched name bound to something that is not the original (a Python function where
  ``time.perf_counter`` is a builtin of the time module, a wrapper where the plugin's own function
  was): patched before the measurement, at import or in the test;
- ``replaced``: a name bound to another object after the measurement than before: patched while
  it ran (from inside the kernel).

``CpuBackend.now``, ``copy_probe`` and ``flush`` (``SEAMS``: what solgate's own tests replaced for
their fake clock before the ``sol_clock`` fixture passed it in) are compared by ``replaced`` only; a
faked ``now`` that reads less than the truth is caught by the second clock (``second_clock``),
which reads the clocks saved here at import, out of reach of a later ``time.perf_counter = ...``.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import random
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypeVar

if TYPE_CHECKING:
    from pytest_solgate.measure.capabilities import Backend

Token = TypeVar("Token")
Handle = TypeVar("Handle")

# Saved at import, before any code under test runs: a kernel that replaces time.thread_time_ns
# later replaces the module's attribute, not these references.
REAL_THREAD_NS: Callable[[], int] = time.thread_time_ns

# The clocks the timing reads; not time.time or time.monotonic, which a test may freeze (freezegun)
# without touching a measurement.
TIME_FUNCTIONS = ("perf_counter", "perf_counter_ns", "thread_time", "thread_time_ns", "process_time", "process_time_ns")
CUDA_FUNCTIONS = ("cuda.synchronize", "cuda.Event", "cuda.Event.record", "cuda.Event.elapsed_time",
                  "cuda.Event.synchronize", "cuda.current_stream")
# module path -> attributes (a dotted attribute reads through a class)
PLUGIN_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "pytest_solgate.measure.phases": ("warm_up", "plan", "timed_call", "take_samples", "_rounds", "graph_or_launches"),
    "pytest_solgate.measure.sampling": ("take_timing", "kernel_timed"),
    "pytest_solgate.measure.pipeline": ("time_once", "measure"),
    "pytest_solgate.measure.stopping": ("NoiseTarget.decide",),
    "pytest_solgate.support.stats": ("median", "relative_half_width"),
    "pytest_solgate.measure.backends": (
        "CpuBackend.start", "CpuBackend.stop", "CpuBackend.elapsed", "CpuBackend.steady", "CpuBackend.begin",
        "CudaBackend.start", "CudaBackend.stop", "CudaBackend.elapsed", "CudaBackend.synchronize",
        "CudaBackend.hold", "CudaBackend.flush", "choose_cpu_timer", "read_cpu_stamp"),
    "pytest_solgate.measure.kernel_trace": ("sample_kernels",),
}
# Compared within a measurement only (a replacement before it is the second clock's to catch).
SEAMS: dict[str, tuple[str, ...]] = {
    "pytest_solgate.measure.backends": ("CpuBackend.now", "CpuBackend.copy_probe", "CpuBackend.flush"),
}


@dataclass(frozen=True)
class Reading:
    """What each watched name was bound to (the object's id and the object, kept to compare)."""

    bound: Mapping[str, object]
    torch: object = None  # the torch whose cuda was read (a fake GPU's, or the real one)


def _lookup(root: object, dotted: str) -> object:
    value: object = root
    for part in dotted.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def watched(torch: object = None, seams: bool = True) -> Reading:
    """Read every watched name now. ``torch`` is the backend's (None: the real one, if imported)."""
    bound: dict[str, object] = {f"time.{name}": getattr(time, name, None) for name in TIME_FUNCTIONS}
    torch = torch if torch is not None else sys.modules.get("torch")
    if torch is not False and torch is not None and hasattr(torch, "cuda"):
        for name in CUDA_FUNCTIONS:
            bound[f"torch.{name}"] = _lookup(torch, name)
    groups = [PLUGIN_FUNCTIONS, SEAMS] if seams else [PLUGIN_FUNCTIONS]
    for group in groups:
        for module_name, names in group.items():
            module = sys.modules.get(module_name)
            if module is None:
                continue
            short = module_name.rsplit(".", 1)[-1]
            for name in names:
                bound[f"{short}.{name}"] = _lookup(module, name)
    return Reading(bound, torch)


def replaced(before: Reading, after: Reading) -> tuple[str, ...]:
    """The names bound to another object in ``after`` than in ``before`` (pure). A name new in
    ``after`` (torch imported meanwhile) is not a replacement."""
    return tuple(name for name, value in after.bound.items()
                 if name in before.bound and before.bound[name] is not value)


def foreign(reading: Reading) -> tuple[str, ...]:
    """The watched names (seams aside) bound to something other than their original: a time
    function that is not the time module's builtin of that name, a torch.cuda function not defined
    in torch (read only on the real torch), a plugin function not defined in its module."""
    seams = {f"{module.rsplit('.', 1)[-1]}.{name}" for module, names in SEAMS.items() for name in names}
    real_torch = sys.modules.get("torch")
    found = []
    for name, value in reading.bound.items():
        if value is None or name in seams:
            continue
        group, _, attribute = name.partition(".")
        if group == "time":
            original = getattr(value, "__self__", None) is time and getattr(value, "__name__", "") == attribute
        elif group == "torch":
            if reading.torch is not real_torch:
                continue
            original = str(getattr(value, "__module__", "") or "").startswith("torch")
        else:
            module = MODULES.get(group, "")
            function = getattr(value, "__func__", value)
            original = (getattr(function, "__module__", "") == module
                        and getattr(function, "__qualname__", "") == attribute)
        if not original:
            found.append(name)
    return tuple(found)


MODULES = {name.rsplit(".", 1)[-1]: name for name in [*PLUGIN_FUNCTIONS, *SEAMS]}


def _at_import() -> dict[str, object]:
    """What every watched name of the time module and of the plugin is bound to when this module is
    imported (with the plugin, before any test module): the originals, compared by identity, so that
    a wrapper that copies its function's name and module (functools.wraps) is still a wrapper."""
    import importlib

    for module_name in [*PLUGIN_FUNCTIONS, *SEAMS]:
        importlib.import_module(module_name)
    return {name: value for name, value in watched(torch=False).bound.items() if not name.startswith("torch.")}


ORIGINALS = _at_import()


def not_original(reading: Reading) -> tuple[str, ...]:
    """The watched names of the time module and the plugin (seams included) bound to another object
    than at import: replaced before the measurement, in the test or at its module's import."""
    return tuple(name for name, value in reading.bound.items()
                 if name in ORIGINALS and value is not None and value is not ORIGINALS[name])


@dataclass(frozen=True)
class ClockCheck:
    """A second clock's reading of the kernel beside the timer's (seconds a call)."""

    timer_seconds: float  # the measurement's figure
    real_seconds: float  # the fastest of the calls timed with the saved clocks
    clock: str  # which saved clock
    # The same calls read by the timer itself and by the saved clock (seconds, summed over the calls);
    # None where the timer was not read around them.
    same_calls: tuple[float, float] | None = None

    @property
    def disagrees(self) -> bool:
        # The timer's samples are cold (after a flush) and these calls warm: an honest timer never
        # reads less than half the warm time. The slack keeps a preempted microsecond call quiet.
        if self.real_seconds <= 2.0 * self.timer_seconds + 500e-6:
            return False
        # On a busy machine a single call can wait out a scheduler quantum that the figure's many
        # calls do not (a 64K-element torch.mul read 1.7 ms against its figure of 0.59 ms on this
        # 2-core VM beside another suite): the timer, read around those very calls, then reads at
        # least the thread's CPU time, as wall time does. A faked timer reads less there too.
        if self.same_calls is None:
            return True
        timer, real = self.same_calls
        return real > 2.0 * timer + 50e-6


def second_clock(fn: Callable[[], object], timer_seconds: float, calls: int,
                 backend: Backend[Token, Handle] | None = None) -> ClockCheck:
    """Time ``calls`` calls of ``fn`` with the thread CPU clock saved at import (the fastest call),
    and with ``backend``'s own timer around the same calls where one is given."""
    __tracebackhide__ = True
    read = REAL_THREAD_NS
    best = float("inf")
    timer_total = real_total = 0.0
    for _ in range(calls):
        token = backend.start() if backend is not None else None
        start = read()
        fn()
        seconds = (read() - start) / 1e9
        if backend is not None and token is not None:
            timer_total += backend.elapsed(backend.stop(token))
        real_total += seconds
        best = min(best, seconds)
    same = (timer_total, real_total) if backend is not None else None
    return ClockCheck(timer_seconds, best, "thread CPU time", same)


# --- the plugin's own modules and the reference's torch -------------------------------------------

PLUGIN_DIR = str(Path(__file__).resolve().parents[2])  # the pytest_solgate package


def library_dirs(scheme: dict[str, str], path: Sequence[str]) -> tuple[str, ...]:
    """Where code that is not the code under test lives: the standard library and the installed
    packages, this interpreter's (``scheme``: sysconfig's paths) and those of any other packages
    directory on ``path`` (sys.path: a venv that reads another's packages through a .pth file, as
    CI's cached dependencies do, or a conda environment stacked on a base one)."""
    dirs = [scheme.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    dirs += [entry for entry in path if Path(entry).name in ("site-packages", "dist-packages")]
    return tuple(sorted({str(Path(d).resolve()) for d in dirs if d}))


LIBRARY_DIRS = library_dirs(sysconfig.get_paths(), sys.path)
TORCH_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft")


def _code_file(value: object) -> str:
    """The file whose code ``value`` runs (a function, a method, a property's getter), or ''."""
    code = _code(value)
    return code.co_filename if code is not None else ""


_verdicts: dict[str, str] = {}  # a code file -> itself where foreign, '' where the plugin's or a library's


def _foreign_file(value: object) -> str:
    """The file of ``value``'s code where it is neither the plugin's nor the standard library's nor an
    installed package's: code from the tests' folder (the code under test) bound where it should not be.
    Kept by file name, never by the object: a kept function would keep its module, and every session's
    objects with it."""
    file = _code_file(value)
    if file not in _verdicts:
        # Code made at run time ('<string>': a dataclass's methods) has no file to judge by.
        resolved = str(Path(file).resolve()) if file and not file.startswith("<") else ""
        trusted = not resolved or resolved.startswith(PLUGIN_DIR) or resolved.startswith(LIBRARY_DIRS)
        _verdicts[file] = "" if trusted else resolved
    return _verdicts[file]


def foreign_code(value: object) -> str:
    """The file of ``value``'s code where it is the code under test's (see _foreign_file), or ''."""
    return _foreign_file(value)


_sources: dict[str, dict[tuple[str, int], CodeType] | None] = {}  # a library file -> what it compiles to


def _module_code(file: str) -> CodeType:
    """``file``'s module code as an import reads it: from its bytecode cache where that is current
    for the source (a tenth of the time of compiling torch's 23 files), else compiled from the source."""
    try:
        cached = Path(importlib.util.cache_from_source(file)).read_bytes()
        stat = os.stat(file)
        header = [int.from_bytes(cached[i:i + 4], "little") for i in (4, 8, 12)]
        if cached[:4] == importlib.util.MAGIC_NUMBER and header == [0, int(stat.st_mtime) & 0xFFFFFFFF,
                                                                     stat.st_size & 0xFFFFFFFF]:
            code = marshal.loads(cached[16:])
            if isinstance(code, CodeType):
                return code
    except (OSError, ValueError, EOFError, TypeError, NotImplementedError):
        pass  # no current bytecode cache: compiled below
    return compile(Path(file).read_bytes(), file, "exec", dont_inherit=True)


def _source_codes(file: str) -> dict[tuple[str, int], CodeType] | None:
    """Every code object that ``file``'s source compiles to, by name and first line, as an import
    compiles it; None where the source cannot be read or compiled. Kept for the process."""
    if file not in _sources:
        try:
            pending = [_module_code(file)]
        except (OSError, SyntaxError, ValueError):
            _sources[file] = None
            return None
        found = {}
        while pending:
            code = pending.pop()
            found[(code.co_name, code.co_firstlineno)] = code
            pending.extend(const for const in code.co_consts if isinstance(const, CodeType))
        _sources[file] = found
    return _sources[file]


def _counterfeit(value: object) -> str:
    """The library file that ``value``'s code claims where that file compiles to no such code: a
    function the code under test compiled under the file name of torch's own module, which
    ``_foreign_file`` trusts by its name. '' otherwise, and where the source cannot be read."""
    code = _code(value)
    if code is None or not code.co_filename or code.co_filename.startswith("<") or _foreign_file(value):
        return ""
    codes = _source_codes(code.co_filename)
    if codes is None or codes.get((code.co_name, code.co_firstlineno)) == code:
        return ""
    return code.co_filename


def _replacement(value: object) -> str:
    """Who replaced a torch function with ``value``, in words ('' where torch's own code runs)."""
    foreign = _foreign_file(value)
    if foreign:
        return Path(foreign).name
    counterfeit = _counterfeit(value)
    return f"code claiming {Path(counterfeit).name}" if counterfeit else ""


def plugin_bound() -> dict[str, object]:
    """Every function, class and class attribute bound in the plugin's loaded modules, by name."""
    bound: dict[str, object] = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("pytest_solgate") or module is None:
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == module_name:
                for attribute, member in list(vars(value).items()):
                    if callable(member) or isinstance(member, (property, staticmethod, classmethod)):
                        bound[f"{module_name}.{name}.{attribute}"] = member
            elif callable(value):
                bound[f"{module_name}.{name}"] = value
    return bound


def plugin_foreign(bound: Mapping[str, object]) -> tuple[str, ...]:
    """The plugin's names bound to code from outside the plugin and the installed libraries (a
    wrapper of ``pytest_solgate.score.score`` defined in a test's kernel module)."""
    return tuple(name for name, value in bound.items() if _foreign_file(value))


def torch_foreign() -> tuple[str, ...]:
    """torch's functions (top level and its functional namespaces) replaced by code from outside the
    installed libraries, or by code that claims a library's file name but is not what that file
    compiles to: a reference such as ``torch.add`` then agrees with anything."""
    found = []
    for namespace in TORCH_NAMESPACES:
        module = sys.modules.get(namespace)
        for name, value in list(vars(module).items()) if module is not None else []:
            if callable(value) and not isinstance(value, type) and _replacement(value):
                found.append(f"{namespace}.{name}")
    # the tensor's methods too: a reference such as ``lambda x: x.pow(1.5)`` calls them
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    for name, value in list(vars(tensor).items()) if isinstance(tensor, type) else []:
        if callable(value) and not isinstance(value, type) and _replacement(value):
            found.append(f"torch.Tensor.{name}")
    return tuple(found)


@dataclass(frozen=True)
class ReplacedTorch:
    """torch functions replaced by the code under test (what the reference may call)."""

    names: tuple[str, ...]
    by: tuple[str, ...]  # who replaced each, in words: the replacement's file name

    @classmethod
    def of(cls, names: tuple[str, ...]) -> ReplacedTorch:
        return cls(names, tuple(_replacement(_lookup(sys.modules["torch"], n.removeprefix("torch."))) for n in names))


# --- the guard itself ----------------------------------------------------------------------------

# The modules whose functions run the checks: a kernel module that replaces the guard's hooks can
# replace the scan inside them too (each then vouches for the other), so they are also compared from
# the other side, by ``GuardIntact``, which the plugin's pytest hook calls after each test.
GUARD_MODULES = ("pytest_solgate.measure.integrity.guard", "pytest_solgate.measure.integrity.tampering",
                 "pytest_solgate.measure.integrity.outputs", "pytest_solgate.measure.integrity.rounds",
                 "pytest_solgate.measure.integrity.cache", "pytest_solgate.measure.integrity.leftover",
                 "pytest_solgate.measure.integrity.precision", "pytest_solgate.measure.extras")


def drawn_bound() -> dict[str, object]:
    """random.Random's methods, which draw the rounds on new values and their factors: patched, they
    could make the new values the old ones."""
    return {f"random.Random.{name}": member for name, member in list(vars(random.Random).items()) if callable(member)}


# Plain data the checks read (thresholds, tolerances, bands): a kernel module that sets
# ``rounds.MAX_FRESH_ROUNDS = 0`` or widens ``precision.TOLERANCE`` in place switches a check off
# without replacing a function. Kept as type and repr: a NaN is not equal to itself, and a subclass
# could say it is equal to anything.
SETTING_TYPES = (bool, int, float, str, bytes, tuple, frozenset, dict, list, set)


def settings(modules: Sequence[ModuleType]) -> dict[str, tuple[type, str]]:
    """The public plain data bound in ``modules``, by name: its type and repr."""
    return {f"{module.__name__}.{name}": (type(value), repr(value)) for module in modules
            for name, value in list(vars(module).items()) if not name.startswith("_") and isinstance(value, SETTING_TYPES)}


def _code(value: object) -> CodeType | None:
    """The code ``value`` runs (a function, a method, a property's getter), or None."""
    value = getattr(value, "fget", None) or getattr(value, "__func__", value)
    code = getattr(value, "__code__", None)
    return code if isinstance(code, CodeType) else None


class GuardIntact:
    """The checks' own functions and class attributes, with their code, as they were when the session
    started (before any test module was imported); called, the names bound to another object or code
    since, then those of the rest of the plugin bound to code from outside it (``plugin_foreign``).
    It holds the originals (the plugin's own objects, never the code under test's) and reads them
    through what it holds, never through a module attribute the code under test may have replaced.
    Pluggy holds the hook that calls it, registered at the same time."""

    def __init__(self) -> None:
        import importlib

        modules = [importlib.import_module(name) for name in GUARD_MODULES]
        names = set(GUARD_MODULES)
        self.bound = {name: (value, _code(value)) for name, value in plugin_bound().items()
                      if name.rsplit(".", 2)[0] in names or name.rsplit(".", 1)[0] in names}
        self.bound.update((name, (value, _code(value))) for name, value in drawn_bound().items())
        self.settings = settings(modules)
        self.modules = modules
        self.scan = (plugin_bound, plugin_foreign, _code, drawn_bound, settings)
        # the scan's own functions: their code is read as an attribute before any of them is called
        own = (plugin_bound, plugin_foreign, _foreign_file, _code_file, _code, drawn_bound, settings)
        self.own = {f"{__name__}.{fn.__name__}": (fn, fn.__code__) for fn in own}

    def __call__(self) -> tuple[str, ...]:
        replaced = tuple(name for name, (fn, was) in self.own.items() if fn.__code__ is not was)
        if replaced:
            return replaced
        bound, foreign, code, drawn, read = self.scan
        now = bound()
        drawn_now = drawn()
        watched = {**now, **drawn_now}
        changed = tuple(name for name, (value, was) in self.bound.items()
                        if watched.get(name) is not value or code(value) is not was)
        changed += tuple(name for name in drawn_now if name not in self.bound)  # one added over an inherited C method
        values = read(self.modules)
        changed += tuple(name for name, was in self.settings.items() if values.get(name) != was)
        return changed or foreign(now)
