"""Integrity: the guard of one measurement, the extra that runs the checks (see the package's doc)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Final, Sequence, TypeVar, Union

from pytest_solgate.measure import backends, phases
from pytest_solgate.measure.extras import Findings, Taken
from pytest_solgate.measure.integrity import cache, deferred, leftover, outputs, precision, rounds, tampering
from pytest_solgate.measure.platform import unpredictable_random
from pytest_solgate.measure.stopping import Stop, StoppingRule

if TYPE_CHECKING:
    from pytest_solgate.declare.work import Work
    from pytest_solgate.measure.capabilities import Backend
    from pytest_solgate.measure.context import Context

Token = TypeVar("Token")
Handle = TypeVar("Handle")

OFF, ON, STRICT = "off", "on", "strict"
LEVELS = (ON, STRICT, OFF)
KEY: Final = "integrity"  # the Findings field that carries a breach


@dataclass(frozen=True)
class Tampered:
    names: tuple[str, ...]
    when: str  # "before the measurement" or "while it ran"


@dataclass(frozen=True)
class LeftRunning:
    threads: tuple[leftover.LeftThread, ...]
    processes: tuple[leftover.LeftProcess, ...]
    when: str


@dataclass(frozen=True)
class NoInputs:
    """--sol-integrity=strict and a gated measurement that handed no inputs to check."""


ITERATED = 16  # the most calls of an in-place kernel whose result is checked as the reference applied as often

# what a check found: the measurement fails with its one line (judge/integrity.py)
Breach = Union[outputs.Finding, Tampered, LeftRunning, deferred.LeftHooks, tampering.ClockCheck, tampering.ReplacedTorch,
               cache.CacheCheck, rounds.RoundsCheck, NoInputs]
BREACHES = (outputs.Finding, Tampered, LeftRunning, deferred.LeftHooks, tampering.ClockCheck, tampering.ReplacedTorch,
            cache.CacheCheck, rounds.RoundsCheck, NoInputs)


class CheckingRule:
    """The stopping rule, with one output check after the first sampling round and the rounds on
    new values (rounds.py) between the others, and the hooks a call may have left (deferred.py) read
    after every sample; a finding stops the sampling (the measurement fails whatever its samples say)."""

    def __init__(self, inner: StoppingRule, check: Callable[[], bool], fresh: rounds.FreshRounds | None = None,
                 found: Callable[[object], None] = lambda finding: None,
                 hooks: Callable[[], deferred.LeftHooks | None] = lambda: None) -> None:
        self.inner = inner
        self.check = check
        self.checked = False
        self.fresh = fresh
        self.found = found
        self.hooks = hooks
        self.hooked: deferred.LeftHooks | None = None

    def after_sample(self, handle: object, calls: int) -> None:
        # first, before any torch call of the plugin's own runs what a mode left entered would run
        self.hooked = self.hooked or self.hooks()
        if self.fresh is not None and self.hooked is None:
            self.fresh.after_sample(handle, calls)

    def decide(self, samples: Sequence[float], elapsed: float) -> Stop | None:
        fresh = self.fresh
        finding: object = self.hooked
        if finding is None and fresh is not None:
            finding = fresh.after_round(samples)
        if finding is None and not self.checked:
            self.checked = True
            if self.check():
                finding = True
        if finding is not None:
            if fresh is not None:
                fresh.restore()
            if finding is not True:
                self.found(finding)
            return Stop(noisy=False)
        stop = self.inner.decide(samples, elapsed)
        if fresh is None:
            return stop
        if stop is not None and fresh.wants_more():
            stop = None
            fresh.before_round(forced=True)
        elif stop is None:
            fresh.before_round()
        else:
            fresh.restore()
        return stop


class Guard:
    """The integrity checks of one measurement (see the module's doc)."""

    holds_device = True

    def __init__(self, level: str, checked: outputs.Checked | None, declared: Sequence[str], explicit: bool,
                 gated: bool, proc: Path | None = None, torch: object = None,
                 random_source: Callable[[], random.Random] = unpredictable_random, real_clock: bool = True) -> None:
        self.level = level
        self.checked = checked
        self.declared = tuple(declared)
        self.explicit = explicit  # the test declared FLOPs or a precision (not only bytes)
        self.gated = gated
        self.proc = proc  # /proc, a test seam
        self.torch = torch  # the backend's torch (a fake GPU's in the tests), whose cuda is watched
        self.random_source = random_source  # which rounds run on new values, and their factors (Platform's)
        # False: timed on a test's clock (trusted: the plugin's own tests), which no real clock can check
        self.real_clock = real_clock
        self.breach: Breach | None = None
        self._before: tampering.Reading | None = None
        self._threads = leftover.threads()
        self._children: leftover.Children | None = None
        self._check: outputs.OutputCheck[leftover.CallWatch, LeftRunning] | None = None
        self._fresh: rounds.FreshRounds | None = None
        self._plugin: dict[str, object] = {}
        self._tensors: list[object] = []  # those handed in args=, flat
        self._hooks: deferred.Hooks | None = None  # read before the measurement

    @property
    def active(self) -> bool:
        return self.level != OFF

    @property
    def _proc_root(self) -> Path:
        return self.proc if self.proc is not None else leftover.PROC

    # --- the extra ---------------------------------------------------------------------------

    def before(self) -> None:
        # A breach found in one attempt stands in the next: a contended attempt is taken again
        # (measure/pipeline.py), and the calmer one must not be a clean one of a kernel that cheats.
        # The level, not ``active``: a class attribute the code under test may have replaced (found here).
        if self.level == OFF or self.breach is not None:
            return
        self._before = tampering.watched(self.torch)
        self._plugin = tampering.plugin_bound()
        self._threads = leftover.threads()
        self._children = leftover.children(self._proc_root)
        self._tensors = list(outputs.tensors_in(self.checked.args)) if self.checked is not None else []
        self._hooks = deferred.read(self._tensors)
        names = (tampering.foreign(self._before) or tampering.not_original(self._before)
                 or tampering.plugin_foreign(self._plugin))
        torch_names = tampering.torch_foreign() if self.checked is not None and self.checked.reference is not None else ()
        modes = deferred.foreign_modes(tampering.foreign_code)
        if names:
            self.breach = Tampered(names, "before the measurement")
        elif modes:
            self.breach = deferred.LeftHooks(modes, "before the measurement")
        elif torch_names:
            self.breach = tampering.ReplacedTorch.of(torch_names)
        elif self.level == STRICT and self.gated and self.checked is None:
            self.breach = NoInputs()

    def rule(self, inner: StoppingRule, context: Context) -> StoppingRule:
        """The stopping rule with the hooks read after every sample, and the check between rounds (with
        inputs to check; not where the device's kernel timestamps are traced over the rounds, which
        the check's calls would join)."""
        if self.level == OFF:
            return inner
        if self.checked is None or context.backend.capabilities.kernel_timestamps:
            return CheckingRule(inner, lambda: False, None, self._found_in_round, self._hooks_left)
        fresh = rounds.FreshRounds(self.checked, self._judge_timed, self.random_source(), self._running_now)
        self._fresh = fresh if fresh.usable else None
        return CheckingRule(inner, lambda: self._outputs(context, "between sampling rounds"), self._fresh,
                            self._found_in_round, self._hooks_left)

    def _hooks_left(self, when: str = "after a timed sample") -> deferred.LeftHooks | None:
        """What the calls left set that runs code on this thread later (deferred.py), or None."""
        if self._hooks is None:
            return None
        said = deferred.left(self._hooks, deferred.read(self._tensors))
        if self.checked is not None and self.checked.last.set_hook:
            said += ("a profile or trace function (sys.setprofile, sys.settrace), seen as it returned",)
        return deferred.LeftHooks(said, when) if said else None

    def _found_in_round(self, finding: object) -> None:
        if isinstance(finding, BREACHES):
            self.breach = finding

    def after(self, taken: Taken) -> Findings:
        __tracebackhide__ = True
        if self.level == OFF:
            return Findings()
        if self._fresh is not None:
            self._fresh.restore()  # where sampling ended on a kernel's error
        if self.breach is None:
            try:
                self._after(taken)
            finally:
                if self._check is not None:
                    self._check.release()
                if self.checked is not None:
                    self.checked.last.result = None  # the last timed result is not kept past the checks (a GPU's memory)
        return Findings(fields={KEY: self.breach}) if self.breach is not None else Findings()

    def _after(self, taken: Taken) -> None:
        __tracebackhide__ = True
        now = tampering.watched(self.torch)
        names = tampering.replaced(self._before or now, now) or tampering.foreign(now) or tampering.not_original(now)
        plugin = tampering.plugin_bound()
        names = names or tampering.replaced(tampering.Reading(self._plugin or plugin), tampering.Reading(plugin))
        if names:
            self.breach = Tampered(names, "while it ran")
            return
        self.breach = self._hooks_left("after the timing")
        if self.breach is not None or self._left_running("after the timing"):
            return
        if self.checked is not None and self._outputs(taken.context, "after timing"):
            return
        if self._fresh_rounds_faster(taken):
            return
        if self.checked is not None and self._served_from_cache(taken):
            return
        self._second_clock(taken)

    # --- the checks --------------------------------------------------------------------------

    def _left_running(self, when: str, since_call: leftover.Threads | None = None,
                      children_before: leftover.Children | None = None) -> bool:
        threads = leftover.left_running(self._threads, since_call)
        if not threads:
            # A pool's worker woken by the call may not have picked its work up yet: a moment's
            # pause lets it, and it is then caught running.
            leftover.pause(leftover.PICK_UP_SECONDS)
            threads = leftover.left_running(self._threads, since_call)
        processes: tuple[leftover.LeftProcess, ...] = ()
        if self._children is not None:
            now = leftover.children(self._proc_root)
            processes = leftover.new_children(children_before or self._children, now, self._proc_root,
                                              running_only=children_before is None)
        if threads or processes:
            self.breach = LeftRunning(threads, processes, when)
        return self.breach is not None

    def _running_now(self) -> LeftRunning | None:
        """The threads and pools' jobs that may still write a timed call's outputs, read as they are copied."""
        threads = leftover.running_now(self._threads)
        return LeftRunning(threads, (), "in a timed sampling round") if threads else None

    def _left_by_call(self, watch: leftover.CallWatch, when: str) -> LeftRunning | None:
        """What the call just watched left working after it returned: a thread it started that ended
        later or still runs, a child on a CPU since (read again after a moment, when a woken worker
        picks its work up), a worker started before it that runs the kernel's code now."""
        threads, processes = watch.left()
        if not threads and not processes:
            leftover.pause(leftover.PICK_UP_SECONDS)
            threads, processes = watch.left()
            threads = threads or leftover.left_running(self._threads)
        return LeftRunning(threads, processes, when) if threads or processes else None

    def _outputs(self, context: Context, when: str) -> bool:
        __tracebackhide__ = True
        assert self.checked is not None
        if self._check is None:
            tensors = [a for a in self.checked.args if outputs.is_tensor(a)]
            bits = precision.allowed_bits(self.declared, self.explicit, [t.dtype for t in tensors])
            self._check = outputs.OutputCheck(
                self.checked, bits, context.backend.synchronize, self.random_source(), on_device=context.device.kind != "cpu",
                watch=lambda: leftover.CallWatch(self.proc or leftover.PROC),
                after_call=lambda watch: self._left_by_call(watch, f"after a call {when}"))
        since_call = leftover.threads()
        children = leftover.children(self._proc_root) if self._children is not None else None
        finding = self._check.run(when)
        if isinstance(finding, LeftRunning):
            self.breach = finding
            return True
        # What a call left running explains its outputs (written later, by another thread): said first.
        if self._left_running(f"after a call {when}", since_call, children):
            return True
        if finding is not None and finding.cause in (outputs.WRONG, outputs.LOWER_PRECISION):
            # A result off by a half-precision rounding: named by the operators that rounded it, if torch's.
            if self._lower_operators(context, when):
                return True
        self.breach = finding
        return finding is not None

    def _lower_operators(self, context: Context, when: str) -> bool:
        assert self._check is not None and self.checked is not None
        if self.checked.tolerance is not None:
            return False
        args = self._check.fresh_args()
        fn = self.checked.fn
        found = precision.lower_operators(lambda: fn(*args), self._check.bits)
        context.backend.synchronize()
        if found:
            self.breach = outputs.Finding(outputs.LOWER_PRECISION, when, "new storage, new values",
                                          bits=self._check.bits,
                                          operators=tuple(f"{o.operator} ({o.dtype})" for o in found))
        return bool(found)

    def _judge_timed(self, got: list[object], inputs: list[object], calls: int) -> outputs.Finding | None:
        """The outputs of a round's last timed call (``got``, copied) against the reference on the
        values that round was given (``inputs``). A kernel that works in place ran ``calls`` times on
        them: its result may be the reference applied that many times (at most ``ITERATED``)."""
        check, checked = self._check, self.checked
        if check is None or checked is None or checked.reference is None:
            return None
        if changed := check.reference_changed("in a timed sampling round", "the same tensors, new values"):
            return changed
        named = check.named_outputs(checked.args, checked.last.result)
        if len(named) != len(got):
            return None
        aliased = {i: p for i, a in enumerate(inputs) for p, (_, out) in enumerate(named)
                   if outputs.is_tensor(a) and outputs.is_tensor(out) and outputs.shares_storage(a, out)}
        current = outputs.clone(inputs)
        worst = None
        for _ in range(min(max(calls, 1), ITERATED) if aliased else 1):
            expected = check.expected(current, [(name, value) for (name, _), value in zip(named, got)])
            if expected is None:
                return None
            worst = None
            for (name, _), value, want in zip(named, got, expected):
                if not outputs.is_tensor(value) or tuple(getattr(value, "shape", ())) != tuple(want.shape):
                    return None  # the output checks name those
                compared = outputs.compare(value, want, check.rtol)
                if compared.mismatched:
                    worst = outputs.Finding(outputs.STALE_TIMED, "in a timed sampling round", "the same tensors, new values",
                                            output=name, count=compared.mismatched, total=compared.total,
                                            error=compared.error, allowed=check.rtol, bits=check.bits)
                    break
            if worst is None:
                return None
            current = [expected[aliased[i]] if i in aliased else value for i, value in enumerate(current)]
        return worst if not aliased or calls <= ITERATED else None

    def _fresh_rounds_faster(self, taken: Taken) -> bool:
        """The samples of the rounds on new values against the others' (rounds.py)."""
        found = (self._fresh.timing(taken.timing.seconds)
                 if self._fresh is not None and taken.timing.gated else None)
        if found is not None and found.served:
            self.breach = found
        return self.breach is not None

    def _served_from_cache(self, taken: Taken) -> bool:
        """The timed calls against calls on fresh inputs, timed as a sample is (measure/integrity/cache.py)."""
        timing, backend = taken.timing, taken.context.backend
        if not timing.gated or self._check is None:
            return False
        check = self._check
        assert self.checked is not None
        fn, timed = self.checked.fn, self.checked.timed()
        # The output checks' fresh sets go (memory: a GPU's inputs are large); this check's own stay
        # alive until it is over, so that none of its calls meets an address an earlier one cached.
        check.release()

        def fresh() -> Callable[[], object]:
            args = check.fresh_args()
            return lambda: fn(*args)

        def time_one(call: Callable[[], object]) -> float:
            handle = phases.timed_call(call, backend, 1)
            backend.synchronize()
            return float(backend.elapsed(handle))

        figure = self._fresh.own_figure(timing.seconds) if self._fresh is not None else timing.seconds
        # (a GPU's results come from torch's caching allocator: the host's free memory is not theirs)
        release = cache.freed_memory_release() if taken.context.device.kind == "cpu" else lambda: None
        found = cache.check(figure, timed, fresh, time_one, release)
        if found.served:
            self.breach = found
        return found.served

    def _second_clock(self, taken: Taken) -> None:
        """On the CPU, a few calls timed with the calling thread's CPU time, read through the clock
        saved at import: that thread's CPU time never exceeds the wall time of the call, so a timer
        (wall or thread time) that reads far less lies, however loaded the machine. Skipped where
        the calls would cost more than a twentieth of the timing. Not on a test's clock: a fake
        clock reads what the test makes it read, and a real call's CPU time can exceed it."""
        timing = taken.timing
        # (a device's kernels, the interpreter's timings mean nothing here)
        if not timing.gated or taken.context.device.kind != "cpu" or not self.real_clock:
            return
        calls = min(3, int(0.05 * timing.wall_seconds / max(timing.seconds, 1e-9)))
        if calls < 1:
            return
        check = tampering.second_clock(taken.fn, timing.seconds, calls, taken.context.backend)
        if check.disagrees:
            self.breach = check


TEST_CLOCK_NOTE = ("test clock: timed on a clock the test passed in (the sol_clock fixture), not the one the "
                   "plugin chooses: not a real result, never gated and never a baseline")


def on_test_clock(clock: object, gate: bool, trusted: bool) -> tuple[bool, str]:
    """Whether a measurement timed on ``clock`` may be gated, and the note that marks it: a clock
    the plugin did not choose never makes a real result, unless the session trusts it
    (--sol-trust-test-clock, for the plugin's own tests)."""
    if clock is None or trusted:
        return gate, ""
    return False, TEST_CLOCK_NOTE


def check_clock(clock: object) -> None:
    """A clock from the ``sol_clock`` fixture is a ``CpuClock`` (or None); anything else, one line."""
    if clock is not None and not isinstance(clock, backends.CpuClock):
        from pytest_solgate.support.errors import MeasureError

        raise MeasureError(f"the sol_clock fixture returned {type(clock).__name__}, not a "
                           "pytest_solgate.measure.backends.CpuClock(now=...) or None; return one of those")


def for_measurement(level: str, checked: outputs.Checked | None, work: Work, precision_given: str | None,
                    backend: Backend[Token, Handle], gate: bool,
                    random_source: Callable[[], random.Random] = unpredictable_random, real_clock: bool = True) -> Guard:
    """The guard of one measurement, from the declared work: its FLOPs' precisions, or the
    precision the test named (a bare bytes= declaration names none). ``real_clock`` is False where
    it is timed on a test's clock."""
    declared = list(work.flops) if work.flops else [precision_given] if precision_given else []
    return Guard(level, checked, declared, bool(declared), gate and backend.gated, torch=getattr(backend, "torch", None),
                 random_source=random_source, real_clock=real_clock)
