"""Engine: drives declare -> measure -> score -> judge for one session, knowing nothing of pytest.

The pytest plugin and the benchmarks drive it. One measurement is:

    sol.measure(fn, ...) -> declared work -> context (device, profile, backend; resolved once)
    -> measure/pipeline.py (device lock, timing, extras: contention, energy and hidden work, --sol-ncu)
    -> score -> Measurement; judge_test then judges a test's measurements (judge/verdict.py).

The context is resolved lazily, on the first measurement, so that a session that measures
nothing never imports torch.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_solgate import results, score
from pytest_solgate.declare.profiles import HardwareProfile, ProfileOption, resolve_profile_option
from pytest_solgate.declare.work import make_work
from pytest_solgate.judge import integrity as integrity_words
from pytest_solgate.judge import steps as step_budgets
from pytest_solgate.judge import verdict
from pytest_solgate.measure import backends, callables, clocks, extras, ncu_child, phases, pipeline
from pytest_solgate.measure import context as measure_context
from pytest_solgate.measure.context import Context
from pytest_solgate.measure.integrity import guard as integrity
from pytest_solgate.results import Measurement
from pytest_solgate.support.errors import MeasureError, SolgateError
from pytest_solgate.support.settings import Settings

# Declared FLOPs and no bytes: scored as compute-bound whatever the kernel does, so a copy or an
# elementwise kernel reads a SOL far from the truth. A warning, not an error: a large GEMM's bytes
# hardly move its T_SOL, and an author may leave them out on purpose (README, "Mistakes that would
# otherwise pass silently").
NO_BYTES = ("declares flops= but no bytes=, so it is scored as compute-bound whatever it moves; "
            "pass bytes= (e.g. sol.nbytes(inputs..., outputs...)) so a memory-bound kernel is scored against bandwidth")

# (test, name, profile, ceilings mode, environment) -> the baseline window, or None
BaselineFinder = Callable[[str, str, str, str, Mapping[str, str]], "verdict.BaselineWindow | None"]


class Engine:
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
    ) -> None:
        self.settings = settings
        self.run_id = run_id  # written into the device lock, so another run can tell it is not one of ours
        self.cache_dir = cache_dir
        self.baseline_finder = baseline_finder
        self.announce = announce or (lambda text: print(text, file=sys.stderr))
        self.warn = warn or self.announce
        # --sol-ncu: None without it; said once and dropped when ncu proves unusable here
        self._dram = extras.DramBytes(dram_profiler, self.warn) if settings.ncu and dram_profiler else None
        self._contention = extras.Contention(run_id)
        self._block = extras.SynchronizedBlock()
        self._clock_lock: clocks.ClockLock | None = None
        self._context: Context | None = None
        # What each measurement needs to be taken again, for the confirmation of a suspected
        # regression; dropped when its test is done (see forget), so no tensor outlives its test.
        self._retake: dict[tuple[str, str], Callable[[], Measurement]] = {}
        self._measuring = ""  # the name of the measurement being taken: nesting would deadlock on the lock
        self._context_error: SolgateError | None = None
        self.profile_option = profile_option or resolve_profile_option(settings.profile)
        self.explicit_profile = self.profile_option.profile
        self.judge_settings = verdict.JudgeSettings(
            gate=settings.gate, above_one=settings.above_one, max_regression=settings.max_regression
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
                self.settings, self.profile_option, self.cache_dir, self.announce)
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
        """The session is over: give the device its clocks back (also registered at exit)."""
        if self._clock_lock is not None:
            self._clock_lock.restore()

    # --- declare, measure, score ----------------------------------------------------------------

    def measure(
        self,
        test: str,
        fn: Callable[[], Any],
        *,
        flops: Any = None,
        bytes: Any = None,
        precision: str | None = None,
        name: str = "default",
        gate: bool = True,
        checked: integrity.outputs.Checked | None = None,
    ) -> Measurement:
        __tracebackhide__ = True
        if self._measuring:
            raise MeasureError(
                f"{test}: sol.measure called inside the kernel of another measurement ({self._measuring!r}); "
                "measure each kernel on its own, from the test body"
            )
        # refused before anything runs when it cannot be timed
        fn, rotation = (checked.timed(), 0) if checked is not None else callables.timeable(fn, test)
        work = make_work(flops, bytes, precision or self.settings.precision)
        context = self.context()
        while self._unsaid:
            self.warn(self._unsaid.pop(0))
        if context.backend.gated:
            score.check_precisions(work, context.profile)  # before timing: a declaration error fails fast
        sampling_settings = self.settings.sampling
        child = ncu_child.is_child()
        if child:  # only the one call under the profiler counts here: the timing just lets the test go on
            sampling_settings = pipeline.INTERPRETER_SAMPLING
            if context.on_gpu and ncu_child.child_target() == (test, name):
                with measure_context.device_scope(context):
                    ncu_child.profile_one_call(fn, context.backend, *ncu_child.cuda_profiler())
        guard = integrity.for_measurement(self.settings.integrity, checked, work, precision, context.backend, gate)
        wrapped: list[extras.Extra] = [self._contention, guard]
        if context.on_gpu and not child:
            wrapped.append(self._block)
            if gate and self._dram is not None and self._dram.usable:
                wrapped.append(self._dram)
        self._measuring = name
        try:
            measured = pipeline.measure(test, name, fn, context, sampling_settings, wrapped,
                                        f"run {self.run_id} pid {os.getpid()}", rotation or 1, work.bytes,
                                        rule=lambda inner: guard.rule(inner, context))
        finally:
            self._measuring = ""
        timing, found = measured.timing, measured.findings
        if found.fields.get(integrity.KEY) is not None:  # the integrity checks' one point of failure
            raise MeasureError(integrity_words.line(test, name, found.fields[integrity.KEY]))
        timed_for_real = backends.is_gated(timing.backend)  # not the interpreter's timing of a Triton kernel
        scorable, unscored = self._scorable(work, context.profile, gate and timed_for_real)
        contended = found.fields.get("contended", "")
        notes = list(timing.notes)
        if unscored:
            notes.append(unscored)
        if contended:  # said in the reports and once at the end of the session (plugin.py), not per test
            notes.append(f"contended: {contended}; recorded, never a baseline, and it cannot fail as regressed")
        if not work.bytes and work.total_flops:
            notes.append(NO_BYTES)
            self.warn(f"{test} '{name}' {NO_BYTES}")
        if rotation:
            # Whether the rotation kept batched calls cold is the timing's own note (calls_per_sample).
            notes.append(f"rotating inputs: {rotation} buffer sets, called in turn")
        # Said from the call's own time: a loaded machine stretches the wall time of a 4 us kernel
        # past the budget too, and a warning that load alone raises fails a `-W error` run.
        # A call longer than the whole budget overruns it however many samples a round then took.
        if timed_for_real and timing.seconds > sampling_settings.max_time:
            notes.append(
                f"one call takes {timing.seconds:.3g} s, longer than the time budget "
                f"--sol-max-time={sampling_settings.max_time:g}; raise it for more samples"
            )
            self.warn(f"{test} '{name}': {notes[-1]}")
        notes += found.notes
        scored = score.score(scorable, timing.seconds, context.profile, timing.sm_clock_mhz, context.backend.clocks_locked)
        if scored.sol_clock_mhz is not None:
            notes.append(locked_clock_note(context.environment.get(clocks.ENVIRONMENT_KEY, ""), scored))
        self._retake[(test, name)] = lambda: self.measure(
            test, fn if checked is None else checked.fn, flops=flops, bytes=bytes, precision=precision, name=name,
            gate=gate, checked=checked)
        if timing.throttled:
            reasons = ", ".join((timing.telemetry or {}).get("throttle_reasons", [])) or "SM clock under 75% of its max"
            self.warn(
                f"{test} '{name}' was throttled ({reasons}) and stayed throttled after "
                f"{phases.MAX_RECOVERIES} pauses to recover; its SOL may be low for a reason other than the "
                "kernel: check cooling, power and clocks"
            )
        return Measurement(
            test=test,
            name=name,
            profile=context.profile.id,
            work=work,
            timing=timing,
            score=scored,
            gate=gate,
            ceilings=context.ceilings,
            ceilings_id=context.profile.ceilings_id,
            environment=dict(context.environment),
            device=context.device_name,
            worker=os.environ.get("PYTEST_XDIST_WORKER", ""),
            notes=tuple(notes),
            contended=contended,
            joules=found.fields.get("joules"),
            measured_bytes=found.fields.get("measured_bytes"),
        )

    def _scorable(self, work: Any, profile: HardwareProfile, gated: bool) -> tuple[Any, str]:
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

    def speed_of_light(self, flops: Any = None, bytes: Any = None, precision: str | None = None) -> score.Floor:
        """T_SOL, bound, intensity and ridge of declared work on this session's profile, untimed."""
        work = make_work(flops, bytes, precision or self.settings.precision)
        return score.speed_of_light(work, self.context().profile)

    # --- judge ----------------------------------------------------------------------------------

    def judge_test(self, test: str, budget: verdict.Budget, measurements: list[Measurement]) -> list[Measurement]:
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
            if step_budgets.takes_speedup(m) and (required := verdict.budget_on(budget.speedup, m.profile)) is not None else m
            for m in judged
        ]

    def effect(self, measurement: Measurement) -> str:
        """What a judged measurement does to its test under --sol-gate: "fail", "warn" or "pass"."""
        return verdict.outcome(measurement.judgement.verdict, self.judge_settings)

    def _judge_one(self, budget: verdict.Budget, measurement: Measurement) -> Measurement:
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


def locked_clock_note(state: str, scored: score.Score) -> str:
    """What a SOL under --sol-lock-clocks is against, said beside it."""
    return (f"clocks {state}: SOL and its budget against peaks at the {scored.sol_clock_mhz:.0f} MHz the SMs held "
            "(like with like); memory bandwidth does not scale with the SM clock")
