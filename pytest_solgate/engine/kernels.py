"""Engine: the measuring half of a run (``run.py``'s ``Run`` owns one), knowing nothing of pytest.

It resolves the device context once, takes every measurement of the session through one path, and
judges each test's measurements. A measurement, a kernel's (``KernelMeasurement.run``, here, which
``Engine.measure`` builds) or a whole step's (``engine/steps.py``), is:

    Engine.begin   refused inside another measurement (before the lock it would wait on forever);
                   the context (device, profile, backend: resolved once), its warnings said once
    -> Engine.take measure/pipeline.py (device lock, timing, extras: contention and its retake,
                   energy and hidden work, --sol-ncu); the notes and warnings every kind shares
    -> score -> Measurement (``provenance`` for the fields every kind shares);
       Engine.keep what re-measures it (a kernel's: KernelMeasurement.retake); judge_test then judges a
       test's measurements (judge/verdict.py).

The context is resolved lazily, on the first measurement, so that a session that measures
nothing never imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Generic, Mapping, Sequence, TypedDict

from pytest_solgate import results, score
from pytest_solgate.declare.profiles import HardwareProfile, ProfileOption, resolve_profile_option
from pytest_solgate.declare.work import Count, Flops, Work, make_work
from pytest_solgate.judge import integrity, step_budgets, verdict
from pytest_solgate.judge.budget import Budget, budget_on
from pytest_solgate.judge.window import BaselineWindow, JudgeSettings
from pytest_solgate.judge.wording import CONTENDED_NOTE
from pytest_solgate.measure import backends, calibrate, callables, clocks, extras, ncu_child, phases, pipeline, sampling
from pytest_solgate.measure import context as measure_context
from pytest_solgate.measure.context import Context
from pytest_solgate.measure.integrity import guard
from pytest_solgate.measure.integrity.outputs import Checked
from pytest_solgate.measure.platform import Platform
from pytest_solgate.measure.stopping import StoppingRule
from pytest_solgate.measure.telemetry import throttle_reasons
from pytest_solgate.measure.torch_modes import under_modes_now
from pytest_solgate.results import Measurement
from pytest_solgate.support.errors import MeasureError, SolgateError
from pytest_solgate.support.settings import SamplingSettings, Settings

# Declared FLOPs and no bytes: scored as compute-bound whatever the kernel does, so a copy or an
# elementwise kernel reads a SOL far from the truth. A warning, not an error: a large GEMM's bytes
# hardly move its T_SOL, and an author may leave them out on purpose (README, "Mistakes that would
# otherwise pass silently").
NO_BYTES = ("declares flops= but no bytes=, so it is scored as compute-bound whatever it moves; "
            "pass bytes= (e.g. sol.nbytes(inputs..., outputs...)) so a memory-bound kernel is scored against bandwidth")

# (test, name, profile, ceilings mode, environment) -> the baseline window, or None
BaselineFinder = Callable[[str, str, str, str, Mapping[str, str]], "BaselineWindow | None"]
# (test, measurement name) -> what measures it again, for the confirmation of a suspected regression
Retakes = Mapping[tuple[str, str], Callable[[], Measurement]]
CALL = "sol.measure"  # what a kernel's measurement is called by, in the engine's messages


@dataclass(frozen=True)
class Timed(Generic[pipeline.Read]):
    """One measurement through the engine's pipeline: what a kernel's or a step's records are built from."""

    context: Context
    timing: sampling.Timing
    read: pipeline.Read  # what the attempt read beside its timing (a step's profile; None for a kernel)
    contended: str  # why it was not alone on its device ('' when it was)
    notes: tuple[str, ...]  # for its record: contention, a call over the time budget, the extras' findings
    # Measurement fields the extras found (joules, measured_bytes), and the integrity checks' breach
    fields: extras.Fields


class Engine:
    """The measuring engine of one ``Run``: the device context, the measurements of every test
    (``measure`` a kernel's; engine/steps.py a step's, through ``begin``/``take``/``keep``), what
    re-measures them, and their verdicts."""

    def __init__(
        self,
        settings: Settings,
        cache_dir: Path,
        baseline_finder: BaselineFinder | None = None,
        profile_option: ProfileOption | None = None,
        announce: Callable[[str], None] | None = None,
        warn: Callable[[str], None] | None = None,
        head: Callable[[], tuple[str | None, bool]] | None = None,
        run_id: str = "",
        dram_profiler: extras.DramProfiler | None = None,
        platform: Platform | None = None,
    ) -> None:
        self.settings = settings
        self.platform = platform or Platform()  # the devices the session measures on (a stand-in's, in tests)
        self.run_id = run_id  # written into the device lock, so another run can tell it is not one of ours
        self.cache_dir = cache_dir
        self.baseline_finder = baseline_finder
        self.announce = announce or (lambda text: print(text, file=sys.stderr))
        self.warn = warn or self.announce
        # --sol-ncu: None without it; said once and dropped when ncu proves unusable here
        self._dram = extras.DramBytes(dram_profiler, self.warn) if settings.ncu and dram_profiler else None
        self._contention = extras.Contention(run_id, self.platform.contention)
        self._block = extras.SynchronizedBlock()
        self._clock_lock: clocks.ClockLock | None = None
        self._context: Context | None = None
        # What each measurement needs to be taken again, for the confirmation of a suspected
        # regression; dropped when its test is done (see forget), so no tensor outlives its test.
        self._retake: dict[tuple[str, str], Callable[[], Measurement]] = {}
        # (call, name) of the measurement being taken: a measurement inside its callable would wait
        # forever on the device lock this one holds
        self._measuring: tuple[str, str] | None = None
        self.nested_calls: list[str] = []  # measurements refused inside another's callable (begin)
        self._context_error: SolgateError | None = None
        self.profile_option = profile_option or resolve_profile_option(settings.profile)
        self.explicit_profile = self.profile_option.profile
        self.judge_settings = JudgeSettings(
            gate=settings.gate, above_one=settings.above_one, max_regression=settings.max_regression,
            saved=not settings.no_save,
        )
        self._head = head  # (commit, dirty) of the code being measured, named in verdicts; asked once
        self._unsaid: list[str] = []  # the context's warnings, until a measurement says them

    # --- context --------------------------------------------------------------------------------

    def context(self) -> Context:
        """Resolve device, profile, ceilings and backend once (measure/context.py); a failure is remembered."""
        if self._context is not None:
            return self._context
        if self._context_error is not None:
            raise self._context_error
        try:
            self._context, self._clock_lock = measure_context.resolve(
                self.settings, self.profile_option, self.cache_dir, self.announce, self.platform)
        except SolgateError as exc:
            self._context_error = exc
            raise
        # Said by the first measurement, so that a warning points at a test even when the
        # context was resolved before the tests ran (to announce a calibration on its own line).
        self._unsaid = list(self._context.warnings)
        return self._context

    def resolved_profile(self) -> HardwareProfile | None:
        """The profile measurements were scored against, if any were taken (never resolves one)."""
        return self._context.profile if self._context is not None else None

    def close(self) -> None:
        """The session is over: give the device its clocks back (also registered at exit), and the
        CPU backends their buffers (twice the last-level cache each: an in-process session that a
        test runs keeps its engine, and they would outlive it)."""
        if self._clock_lock is not None:
            self._clock_lock.restore()
        if self._context is not None:
            for backend in (self._context.backend, self._context.cpu_fallback):
                if isinstance(backend, backends.CpuBackend):
                    backend.release()

    def timing_on(self, clock: backends.CpuClock | None) -> ContextManager[object]:
        """Time on ``clock`` while open (None: the machine's own). Only the CPU backend takes one:
        a GPU's samples are its own events."""
        if clock is None:
            return contextlib.nullcontext()
        guard.check_clock(clock)
        context = self.context()
        cpu = [b for b in (context.backend, context.cpu_fallback) if isinstance(b, backends.CpuBackend)]
        if not cpu:
            raise MeasureError(f"the sol_clock fixture returned a clock, but this session times on {context.device}: "
                               "only the CPU backend times on a clock passed in; return None there")
        stack = contextlib.ExitStack()
        for backend in cpu:
            stack.enter_context(backend.timing_on(clock))
        return stack

    # --- declare, measure, score ----------------------------------------------------------------

    def measure(
        self,
        test: str,
        fn: Callable[[], object],
        *,
        flops: Flops | None = None,
        bytes: Count | None = None,
        precision: str | None = None,
        name: str = "default",
        gate: bool = True,
        checked: Checked | None = None,
        clock: backends.CpuClock | None = None,
    ) -> Measurement:
        """``fn`` timed, on ``clock`` where one is passed (the sol_clock fixture's), and scored; what
        confirms a suspected regression later times it on the same clock (``KernelMeasurement``)."""
        __tracebackhide__ = True
        return KernelMeasurement(self, test, fn, flops, bytes, precision, name, gate, checked, clock).run()

    def kernel_extras(self, context: Context, checks: guard.Guard, gate: bool, child: bool) -> list[extras.Extra]:
        """The extras a kernel's measurement is wrapped in: its integrity checks, and on a GPU (not in
        an --sol-ncu child) the synchronized block and, for a gated one, --sol-ncu's DRAM bytes."""
        wrapped: list[extras.Extra] = [checks]
        if context.on_gpu and not child:
            wrapped.append(self._block)
            if gate and self._dram is not None and self._dram.usable:
                wrapped.append(self._dram)
        return wrapped

    def raise_busy_ceilings(self, context: Context, work: Work, timing: sampling.Timing) -> tuple[Context, list[str]]:
        """Ceilings measured while the machine was busy are lower bounds: a real timing that beats
        one raises it for the rest of the session before it is scored (calibrate.raised_to_reach).
        The context to score in, and the note that says whose ceilings they are."""
        if not context.profile.busy:
            return context, []
        raised = calibrate.raised_to_reach(context.profile, work, timing.seconds) if timing.gated else context.profile
        if raised is not context.profile:
            self._context = context = dataclasses.replace(context, profile=raised)
        return context, [f"{calibrate.BUSY_NOTE} ({context.profile.busy}), raised by any measurement that beats them"]

    # --- what every measurement goes through, a kernel's or a step's ----------------------------

    def begin(self, test: str, call: str) -> Context:
        """The start of a measurement by ``call`` ("sol.measure", "sol.measure_step"): refused inside
        the callable of another (it would wait forever on the device lock that one holds), then the
        session's context, whose warnings the first measurement says."""
        __tracebackhide__ = True
        if self._measuring is not None:
            # Kept as well as raised: raised in a thread the step started, it reaches no test (the
            # thread dies), so the step reads it here when its callable returns (engine/steps.py).
            self.nested_calls.append(nested_message(test, call, *self._measuring))
            raise MeasureError(self.nested_calls[-1])
        context = self.context()
        while self._unsaid:
            self.warn(self._unsaid.pop(0))
        return context

    def take(self, test: str, name: str, call: str, fn: Callable[[], object],
             time_once: Callable[[], tuple[sampling.Timing, pipeline.Read]], max_time: float,
             wrapped: Sequence[extras.Extra] = ()) -> Timed[pipeline.Read]:
        """``time_once`` through measure/pipeline.py on the session's device: under its lock, with
        the contention reading (a contended attempt is taken again) and the ``wrapped`` extras; the notes and
        warnings of what every measurement can be (contended, one call longer than ``max_time``)."""
        __tracebackhide__ = True
        context = self.context()
        self._measuring = (call, name)
        try:
            measured = pipeline.measure(test, name, fn, context, time_once, [self._contention, *wrapped],
                                        f"run {self.run_id} pid {os.getpid()}", max_time)
        finally:
            self._measuring = None
        timing, found = measured.timing, measured.findings
        contended = found.fields.get("contended", "")
        notes = []
        if contended:  # said in the reports and once at the end of the session (plugin.py), not per test
            notes.append(contended_note(contended))
        # Said from the call's own time: a loaded machine stretches the wall time of a 4 us kernel
        # past the budget too, and a warning that load alone raises fails a `-W error` run.
        # A call longer than the whole budget overruns it however many samples a round then took.
        if timing.gated and timing.seconds > max_time:
            notes.append(f"one call takes {timing.seconds:.3g} s, longer than the time budget "
                         f"--sol-max-time={max_time:g}; raise it for more samples")
            self.warn(f"{test} '{name}': {notes[-1]}")
        fields = found.fields.copy()
        fields.pop("contended", None)
        return Timed(context, timing, measured.read, contended, (*notes, *found.notes), fields)

    def keep(self, retakes: Retakes) -> None:
        """Keep what measures each of these measurements again, until its test is judged (see forget),
        under the torch modes the test body measured them in (no_grad, inference_mode, autocast)."""
        self._retake.update({key: under_modes_now(again) for key, again in retakes.items()})

    def speed_of_light(self, flops: Flops | None = None, bytes: Count | None = None, precision: str | None = None) -> score.Floor:
        """T_SOL, bound, intensity and ridge of declared work on this session's profile, untimed."""
        work = make_work(flops, bytes, precision or self.settings.precision)
        return score.speed_of_light(work, self.context().profile)

    # --- judge ----------------------------------------------------------------------------------

    def judge_test(self, test: str, budget: Budget, measurements: list[Measurement]) -> list[Measurement]:
        """The verdicts of one test's measurements; then what was kept to re-measure them is dropped."""
        if self._head is not None:
            commit, dirty = self._head()
            self.judge_settings = dataclasses.replace(self.judge_settings, commit=commit, dirty=dirty)
            self._head = None
        try:
            judged = [self._judge_one(step_budgets.budget_for(budget, m), m) for m in measurements]
        finally:
            self.forget(test)
        if budget.speedup is None:
            return judged
        reference = verdict.choose_reference(test, budget, judged)
        return [
            verdict.against_reference(m, reference, required)
            if step_budgets.takes_speedup(m) and (required := budget_on(budget.speedup, m.profile)) is not None else m
            for m in judged
        ]

    def effect(self, measurement: Measurement) -> str:
        """What a judged measurement does to its test under --sol-gate: "fail", "warn" or "pass"."""
        assert measurement.judgement is not None, "judge_test judges every measurement it returns"
        return verdict.outcome(measurement.judgement.verdict, self.judge_settings)

    def _judge_one(self, budget: Budget, measurement: Measurement) -> Measurement:
        """The verdict; a suspected regression is measured again (a fresh block of samples) and
        stands only if the second block regresses too."""
        window = None
        if self.baseline_finder is not None and measurement.gate:
            window = self.baseline_finder(
                measurement.test, measurement.name, measurement.profile, measurement.ceilings,
                measurement.environment,
            )
        judged = verdict.judge(measurement, budget, window, self.judge_settings)
        retake = self._retake.get((measurement.test, measurement.name))
        if judged.verdict != results.REGRESSED or retake is None:
            return judged
        second = verdict.judge(retake(), budget, window, self.judge_settings)
        return verdict.confirm(judged, second)

    def forget(self, test: str) -> None:
        """Drop what was kept to re-measure ``test``'s measurements (its callables and tensors)."""
        for key in [key for key in self._retake if key[0] == test]:
            del self._retake[key]


@dataclass(frozen=True)
class KernelMeasurement:
    """One kernel's measurement (``sol.measure``), as nvbench's ``measure_cold``: the declaration
    (the callable, its work, its name, whether it gates, its integrity checks, the clock it times on)
    and ``run``, which takes it through the engine: declare, time under the extras, score, keep
    ``retake`` (what confirms a suspected regression), warn. A step's is ``engine/steps.py``'s."""

    engine: Engine
    test: str
    fn: Callable[[], object]  # a zero-argument callable, or a list of them (rotating inputs)
    flops: Flops | None
    bytes: Count | None
    precision: str | None
    name: str
    gate: bool
    checked: Checked | None  # args= given: the outputs checked on fresh inputs
    clock: backends.CpuClock | None  # the sol_clock fixture's (None: the machine's)

    def run(self) -> Measurement:
        __tracebackhide__ = True
        engine, test, name = self.engine, self.test, self.name
        # refused before anything runs when it cannot be timed
        fn, rotation = (self.checked.timed(), 0) if self.checked is not None else callables.timeable(self.fn, test)
        work = make_work(self.flops, self.bytes, self.precision or engine.settings.precision)
        context = engine.begin(test, CALL)
        if context.backend.gated:
            score.check_precisions(work, context.profile)  # before timing: a declaration error fails fast
        child = ncu_child.is_child()
        sampling_settings = self._under_ncu(fn, context) if child else engine.settings.sampling
        # a test's clock never makes a real result: not gated, said in the notes and a warning
        gate, test_clock = guard.on_test_clock(self.clock, self.gate, engine.settings.trust_test_clock)
        checks = guard.for_measurement(engine.settings.integrity, self.checked, work, self.precision, context.backend,
                                       gate, context.platform.integrity_random, real_clock=self.clock is None)
        attempt = Attempt(fn, context, sampling_settings, rotation or 1, work.bytes, checks)
        with engine.timing_on(self.clock):
            timed = engine.take(test, name, CALL, fn, attempt.time_once, sampling_settings.max_time,
                                engine.kernel_extras(context, checks, gate, child))
        breach = timed.fields.get(guard.KEY)
        if isinstance(breach, guard.BREACHES):  # the integrity checks' one point of failure (None: none found)
            raise MeasureError(integrity.line(test, name, breach))
        timing = timed.timing
        scorable, unscored = scorable_work(work, context.profile, gate and timing.gated)
        context, busy_note = engine.raise_busy_ceilings(context, scorable, timing)  # before it is scored
        scored = score.score(scorable, timing.seconds, context.profile, timing.sm_clock_mhz, context.backend.clocks_locked)
        notes = ([test_clock] if test_clock else []) + busy_note + self._notes(timed, work, rotation, unscored, scored)
        if test_clock:
            engine.warn(f"{test} '{name}': {test_clock}")
        # The retake times what this measurement timed (a rotation's list as the one callable it became).
        again = self if self.checked is not None else dataclasses.replace(self, fn=fn)
        engine.keep({(test, name): again.retake})
        if timing.throttled:
            engine.warn(throttled_warning(test, name, timing))
        return Measurement(
            test=test, name=name, work=work, timing=timing, score=scored, gate=gate, notes=tuple(notes),
            joules=timed.fields.get("joules"), measured_bytes=timed.fields.get("measured_bytes"),
            contended_wait=timed.fields.get("contended_wait"), **provenance(context, timed.contended),
        )

    def retake(self) -> Measurement:
        """The same declaration measured again: a fresh block of samples, for the confirmation of a
        suspected regression (Engine.keep holds it until the test is judged)."""
        __tracebackhide__ = True
        return self.run()

    def _under_ncu(self, fn: Callable[[], object], context: Context) -> SamplingSettings:
        """In an --sol-ncu child only the one call under the profiler counts: the timing (the
        interpreter's few samples) just lets the test go on."""
        if context.on_gpu and ncu_child.child_target() == (self.test, self.name):
            with context.scope():
                ncu_child.profile_one_call(fn, context.backend, *context.platform.cuda_profiler())
        return pipeline.INTERPRETER_SAMPLING

    def _notes(self, timed: Timed[None], work: Work, rotation: int, unscored: str, scored: score.Score) -> list[str]:
        """The record's notes: the timing's, what was left out of the score, a declaration without
        bytes (also warned), the rotation, what the extras found, the locked clocks."""
        notes = list(timed.timing.notes)
        if unscored:
            notes.append(unscored)
        if not work.bytes and work.total_flops:
            notes.append(NO_BYTES)
            self.engine.warn(f"{self.test} '{self.name}' {NO_BYTES}")
        if rotation:
            # Whether the rotation kept batched calls cold is the timing's own note (calls_per_sample).
            notes.append(f"rotating inputs: {rotation} buffer sets, called in turn")
        notes += timed.notes
        if scored.sol_clock_mhz is not None:
            notes.append(locked_clock_note(timed.context.environment.get(clocks.ENVIRONMENT_KEY, ""), scored))
        return notes


@dataclass(frozen=True)
class Attempt:
    """One timing of a kernel, as the pipeline takes it (again, when the machine was busy)."""

    fn: Callable[[], object]
    context: Context
    settings: SamplingSettings
    buffer_sets: int
    bytes: float
    checks: guard.Guard

    def time_once(self) -> tuple[sampling.Timing, None]:
        __tracebackhide__ = True
        return pipeline.time_once(self.fn, self.context, self.settings, self.buffer_sets, self.bytes,
                                  rule=self.rule), None

    def rule(self, inner: StoppingRule) -> StoppingRule:
        """The sampling's stopping rule, with the integrity checks' say in it."""
        return self.checks.rule(inner, self.context)


def scorable_work(work: Work, profile: HardwareProfile, gated: bool) -> tuple[Work, str]:
    """The work to score, and a note. FLOPs in a precision the profile lacks are an error when
    the verdict is gated; otherwise (the Triton interpreter, a gate=False reference) they are
    left out of the score with a note, so that a bf16 kernel's correctness suite runs on a CPU."""
    missing = score.missing_precisions(work, profile)
    if not missing or gated:
        score.check_precisions(work, profile)
        return work, ""
    kept = {p: n for p, n in work.flops.items() if p not in missing}
    return dataclasses.replace(work, flops=kept), (
        f"flops in {', '.join(missing)} left out of the score: profile '{profile.id}' has no roof for "
        "them, and this measurement is not gated"
    )


def throttled_warning(test: str, name: str, timing: sampling.Timing) -> str:
    reasons = ", ".join(throttle_reasons(timing.telemetry)) or "SM clock under 75% of its max"
    return (f"{test} '{name}' was throttled ({reasons}) and stayed throttled after {phases.MAX_RECOVERIES} pauses "
            "to recover; its SOL may be low for a reason other than the kernel: check cooling, power and clocks")


class Provenance(TypedDict):
    """The Measurement fields that say where and how a measurement was taken."""

    profile: str
    ceilings: str
    ceilings_id: str
    environment: dict[str, str]
    device: str
    worker: str
    contended: str


def provenance(context: Context, contended: str) -> Provenance:
    """The Measurement fields that say where and how any measurement of the session was taken."""
    return Provenance(profile=context.profile.id, ceilings=context.ceilings, ceilings_id=context.profile.ceilings_id,
                      environment=dict(context.environment), device=context.device_name,
                      worker=os.environ.get("PYTEST_XDIST_WORKER", ""), contended=contended)


def contended_note(contended: str) -> str:
    return f"contended: {contended}; {CONTENDED_NOTE}"


def nested_message(test: str, call: str, outer_call: str, outer_name: str) -> str:
    what = "step" if outer_call == "sol.measure_step" else "kernel"
    return (f"{test}: {call} called inside the {what} of another measurement ({outer_name!r}); "
            "measure each on its own, from the test body")


def locked_clock_note(state: str, scored: score.Score) -> str:
    """What a SOL under --sol-lock-clocks is against, said beside it."""
    return (f"clocks {state}: SOL and its budget against peaks at the {scored.sol_clock_mhz:.0f} MHz the SMs held "
            "(like with like); memory bandwidth does not scale with the SM clock")
