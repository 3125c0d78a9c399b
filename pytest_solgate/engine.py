"""Engine: drives declare -> measure -> score -> judge for one session, knowing nothing of pytest.

The pytest plugin and the benchmarks drive it. It resolves the device, backend and profile lazily,
on the first measurement, so that a session that measures nothing never imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_solgate import results, score
from pytest_solgate.declare.profiles import (
    HardwareProfile,
    ProfileOption,
    detect,
    known_profiles,
    resolve_profile_option,
)
from pytest_solgate.declare.work import make_work
from pytest_solgate.judge import steps as step_budgets
from pytest_solgate.judge import verdict
from pytest_solgate.measure import (
    backends,
    block,
    calibrate,
    clocks,
    devices,
    environment,
    locking,
    ncu,
    sampling,
    telemetry,
)
from pytest_solgate.measure import contention as machine
from pytest_solgate.results import Measurement
from pytest_solgate.support.errors import MeasureError, OptionError, SolgateError
from pytest_solgate.support.settings import Settings

# Interpreter timings are not gated: spend as little time on them as honesty allows.
INTERPRETER_SAMPLING = sampling.SamplingSettings(
    min_time=0.0, max_time=0.5, noise=0.05, min_samples=3, warmup_time=0.0, cuda_graph="off"
)

# Contention is read from what other processes took while sampling (measure/contention.py).
CONTENTION_RETAKES = 1  # a contended measurement is taken again this many times; the calmest is kept
# The clocks of the contention reading: process CPU time and wall time (the fake-clock tests replace them).
CPU_CLOCKS: tuple[Callable[[], float], Callable[[], float]] = (time.process_time, time.perf_counter)

# Declared FLOPs and no bytes: scored as compute-bound whatever the kernel does, so a copy or an
# elementwise kernel reads a SOL far from the truth. A warning, not an error: a large GEMM's bytes
# hardly move its T_SOL, and an author may leave them out on purpose (README, "Mistakes that would
# otherwise pass silently").
NO_BYTES = ("declares flops= but no bytes=, so it is scored as compute-bound whatever it moves; "
            "pass bytes= (e.g. sol.nbytes(inputs..., outputs...)) so a memory-bound kernel is scored against bandwidth")

# (test key, measurement name) -> the DRAM traffic of one call under Nsight Compute (measure/ncu.py)
DramProfiler = Callable[[str, str], "ncu.DramTraffic"]

# (test, name, profile, ceilings mode, environment) -> the baseline window, or None
BaselineFinder = Callable[[str, str, str, str, Mapping[str, str]], "verdict.BaselineWindow | None"]


@dataclass(frozen=True)
class Context:
    """Where measurements run and against which ceilings."""

    device: devices.DeviceChoice
    device_name: str
    profile: HardwareProfile
    ceilings: str  # "datasheet" or "measured"
    backend: Any
    lock_key: str
    warnings: tuple[str, ...] = ()
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)


def worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def worker_count() -> int | None:
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    return int(count) if count.isdigit() else None


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
        dram_profiler: DramProfiler | None = None,
    ) -> None:
        self.settings = settings
        # --sol-ncu: None without it, and once ncu proved unusable here (said once, never a failure)
        self.dram_profiler = dram_profiler if settings.ncu else None
        self._dram: dict[tuple[str, str], float] = {}  # measured bytes, reused by a confirmation's retake
        self._clock_lock: clocks.ClockLock | None = None
        self.run_id = run_id  # written into the device lock, so another run can tell it is not one of ours
        self.cache_dir = cache_dir
        self.baseline_finder = baseline_finder
        self.announce = announce or (lambda text: print(text, file=sys.stderr))
        self.warn = warn or self.announce
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
        self._cpu_backend: Any = None  # for torch references in a Triton-interpreter session

    # --- context --------------------------------------------------------------------------------

    def context(self) -> Context:
        """Resolve device, profile, ceilings and backend once; a failure is remembered."""
        if self._context is not None:
            return self._context
        if self._context_error is not None:
            raise self._context_error
        try:
            self._context = self._resolve_context()
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

    def _resolve_context(self) -> Context:
        choice = devices.choose_device(self.settings.device, worker_index(), worker_count())
        facts = devices.device_facts(choice)
        name = devices.device_name(choice)
        warnings: list[str] = []
        ceilings = self.settings.ceilings
        if choice.kind == "cpu":
            warnings += gpu_only_options(self.settings)
            if self.explicit_profile is not None:
                profile = self.explicit_profile
                if profile.kind == "gpu":
                    warnings.append(
                        f"--sol-profile={profile.id} is a GPU profile but measurements run on the CPU: CPU work is "
                        f"scored against {profile.id}'s ceilings; pass --sol-device=cuda, or drop --sol-profile"
                    )
            else:
                if ceilings == "datasheet":
                    raise OptionError(
                        "--sol-ceilings=datasheet on a CPU: CPUs have only measured ceilings; "
                        "drop the option or pass --sol-profile"
                    )
                # Under the device lock: a calibration must not run beside another measurement,
                # and a second worker waiting here then finds the cached profile.
                with locking.device_lock("cpu"):
                    profile = calibrate.cpu_profile(self.cache_dir, self.announce)
            lock_key, device_uuid = "cpu", None
        else:
            device_uuid = calibrate.device_key(choice.index)  # survives CUDA_VISIBLE_DEVICES renumbering
            if self.explicit_profile is not None:
                profile = self.explicit_profile
            else:
                candidates = known_profiles(self.cache_dir, self.profile_option.folders)
                match = detect(name, facts, candidates)
                profile = match.profile
                if match.warning:
                    warnings.append(match.warning)
            if ceilings == "measured" and profile.ceilings != "measured":
                profile = self._measured_gpu_profile(profile, choice, device_uuid, name, facts)
            lock_key = f"cuda-{device_uuid}"
            # The whole process (this xdist worker) works on its GPU: Triton launches and tensors
            # created outside sol.measure then go to cuda:N too, not to cuda:0.
            import torch

            torch.cuda.set_device(choice.index)
        l2_bytes = facts.get("l2_bytes") or profile.device.l2_bytes
        backend = backends.make_backend(choice, l2_bytes, profile.device.boost_clock_mhz)
        described = environment.describe(name, device_uuid, choice.kind == "cuda")
        if choice.kind == "cuda":
            # An --sol-ncu child leaves the clocks to its parent: its restore would undo the parent's lock.
            clock_state = self._lock_clocks(backend) if not ncu.is_child() else clocks.ClockState(clocks.OFF)
            if clock_state.refused:
                warnings.append(clocks.refused_message(clock_state))
            described[clocks.ENVIRONMENT_KEY] = clock_state.environment_value
        return Context(
            device=choice,
            device_name=name,
            profile=profile,
            ceilings=profile.ceilings,
            backend=backend,
            lock_key=lock_key,
            warnings=tuple(warnings),
            environment=described,  # with the clocks' state (sm_clocks) on a GPU: compared like with like
        )

    def _lock_clocks(self, backend: Any) -> clocks.ClockState:
        """--sol-lock-clocks on the backend's device, through the NVML handle its telemetry uses."""
        reader = getattr(backend, "reader", None)

        def handle() -> tuple[Any, Any]:
            if reader is None:
                raise MeasureError(getattr(backend, "telemetry_note", "") or "no NVML reader")
            return reader.nvml_handle()

        state, self._clock_lock = clocks.lock_for_session(self.settings.lock_clocks, handle)
        return state

    def close(self) -> None:
        """The session is over: give the device its clocks back (also registered at exit)."""
        if self._clock_lock is not None:
            self._clock_lock.restore()

    def _measured_gpu_profile(
        self, datasheet: HardwareProfile, choice: Any, key: str, name: str, facts: dict
    ) -> HardwareProfile:
        path = calibrate.gpu_measured_path(self.cache_dir, datasheet.id, key)
        cached = calibrate.cached_profile(path)
        if cached is not None:
            return cached
        with locking.device_lock(f"cuda-{key}"):
            cached = calibrate.cached_profile(path)  # a worker that waited here finds what another measured
            if cached is not None:
                return cached
            self.announce(f"solgate: calibrating {name} once (cached in {path}) ...")
            profile, _ = calibrate.calibrate_gpu(
                self.cache_dir, choice.index, datasheet, name, facts.get("l2_bytes"), announce=self.announce
            )
        return profile

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
    ) -> Measurement:
        __tracebackhide__ = True
        if self._measuring:
            raise MeasureError(
                f"{test}: sol.measure called inside the kernel of another measurement ({self._measuring!r}); "
                "measure each kernel on its own, from the test body"
            )
        fn, rotation = sampling.timeable(fn, test)  # refused before anything runs when it cannot be timed
        work = make_work(flops, bytes, precision or self.settings.precision)
        context = self.context()
        while self._unsaid:
            self.warn(self._unsaid.pop(0))
        if context.backend.gated:
            score.check_precisions(work, context.profile)  # before timing: a declaration error fails fast
        timing_settings = self.settings.sampling
        device_scope = _cuda_device_scope(context)
        on_gpu = context.device.kind == "cuda" and context.backend.gated
        if ncu.is_child():  # only the one call under the profiler counts here: the timing just lets the test go on
            timing_settings = INTERPRETER_SAMPLING
            if on_gpu and ncu.child_target() == (test, name):
                with device_scope:
                    ncu.profile_one_call(fn, context.backend, *ncu.cuda_profiler())
        self._measuring = name
        try:
            timing, contended, wall_block = self._timed_alone(fn, context, timing_settings, device_scope,
                                                              rotation or 1, work.bytes)
        finally:
            self._measuring = ""
        if wall_block is not None and block.hidden_work(wall_block):
            raise MeasureError(block.hidden_work_message(test, name, wall_block))
        timed_for_real = backends.is_gated(timing.backend)  # not the interpreter's timing of a Triton kernel
        scorable, unscored = self._scorable(work, context.profile, gate and timed_for_real)
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
        if timed_for_real and timing.seconds > timing_settings.max_time and len(timing.samples) < timing_settings.min_samples:
            notes.append(
                f"one call takes {timing.seconds:.3g} s, longer than the time budget "
                f"--sol-max-time={timing_settings.max_time:g}; raise it for more samples"
            )
            self.warn(f"{test} '{name}': {notes[-1]}")
        self._retake[(test, name)] = lambda: self.measure(
            test, fn, flops=flops, bytes=bytes, precision=precision, name=name, gate=gate
        )
        joules = block.joules_per_call(wall_block) if wall_block is not None else None
        if wall_block is not None and wall_block.energy_note:
            notes.append(wall_block.energy_note)
        measured_bytes = self._measured_bytes(test, name, notes) if on_gpu and gate and not ncu.is_child() else None
        if timing.throttled:
            reasons = ", ".join((timing.telemetry or {}).get("throttle_reasons", [])) or "SM clock under 75% of its max"
            self.warn(
                f"{test} '{name}' was throttled ({reasons}) and stayed throttled after "
                f"{sampling.MAX_RECOVERIES} pauses to recover; its SOL may be low for a reason other than the "
                "kernel: check cooling, power and clocks"
            )
        return Measurement(
            test=test,
            name=name,
            profile=context.profile.id,
            work=work,
            timing=timing,
            score=score.score(scorable, timing.seconds, context.profile, timing.sm_clock_mhz),
            gate=gate,
            ceilings=context.ceilings,
            ceilings_id=context.profile.ceilings_id,
            environment=dict(context.environment),
            device=context.device_name,
            worker=os.environ.get("PYTEST_XDIST_WORKER", ""),
            notes=tuple(notes),
            contended=contended,
            joules=joules,
            measured_bytes=measured_bytes,
        )

    def _measured_bytes(self, test: str, name: str, notes: list[str]) -> float | None:
        """--sol-ncu: the DRAM bytes one call moved (once per measurement; a confirmation's retake
        reuses them). ncu missing or refused is said once and stops the tries; never a failure."""
        if self.dram_profiler is None:
            return None
        if (test, name) not in self._dram:
            try:
                self._dram[(test, name)] = self.dram_profiler(test, name).total_bytes
            except ncu.NcuUnavailable as exc:
                self.dram_profiler = None
                self.warn(f"--sol-ncu: {exc}")
                return None
            except ncu.NcuFailed as exc:
                notes.append(f"no measured bytes: {exc}")
                return None
        return self._dram[(test, name)]

    def _timed_alone(self, fn: Callable[[], Any], context: Context, timing_settings: sampling.SamplingSettings,
                     device_scope: Any, rotation_sets: int, bytes_per_call: float
                     ) -> tuple[sampling.Timing, str, block.BlockReading | None]:
        """The timing, why the machine was busy while it was taken ('' if it was not), and on a
        GPU the synchronized block taken right after it (measure/block.py), under the same lock.

        Busy means, on a CPU, that other processes took a CPU from this one while it sampled
        (measure/contention.py: CPU pressure, else busy time, else this process's share); on a
        GPU, that another solgate run held the device's lock just before (see ``contention``). A
        contended timing is taken again (CONTENTION_RETAKES), unless it already spent more than
        its time budget (a long kernel's retake would double its cost); the calmest is kept, and it
        stays marked when every attempt was contended."""
        __tracebackhide__ = True  # a kernel that raises shows its own traceback, not ours
        best: tuple[machine.Busy, sampling.Timing, str, block.BlockReading | None] | None = None
        holder = f"run {self.run_id} pid {os.getpid()}"
        for _ in range(1 + CONTENTION_RETAKES):
            cpu_clock, wall_clock = CPU_CLOCKS
            with locking.device_lock(context.lock_key, holder) as waited_for, device_scope:
                before = machine.snapshot(cpu_clock, wall_clock)
                if context.backend.gated:
                    timing = sampling.take_timing(
                        fn, context.backend, timing_settings, telemetry.is_throttled,
                        rotation_sets=rotation_sets, bytes_per_call=bytes_per_call,
                    )
                else:
                    timing = self._interpreted_or_cpu(fn, context.backend, timing_settings)
                busy = machine.between(before, machine.snapshot(cpu_clock, wall_clock))
                wall_block = self._synchronized_block(fn, context, timing)
            # The interpreter's timings mean nothing whether or not the machine was busy.
            why = contention(waited_for, self.run_id, busy, context.device.kind == "cpu") if timing_for_real(timing) else ""
            if best is None or (best[2] and machine.calmer(busy, best[0])):
                best = (busy, timing, why, wall_block)
            if not why or timing.wall_seconds > timing_settings.max_time * 1.5:
                break
        return best[1], best[2], best[3]

    def _synchronized_block(self, fn: Callable[[], Any], context: Context, timing: sampling.Timing) -> block.BlockReading | None:
        """On a GPU: the block of back-to-back calls that reads energy and catches hidden work."""
        backend = context.backend
        if context.device.kind != "cuda" or not backend.gated or ncu.is_child():
            return None
        reader = getattr(backend, "reader", None)
        read_energy = reader.energy_counter() if reader is not None else None
        host_clock = getattr(backend, "host_clock", time.perf_counter)
        return block.synchronized_block(fn, backend, timing.seconds, read_energy, clock=host_clock,
                                        pause=getattr(backend, "host_pause", time.sleep))

    def _interpreted_or_cpu(self, fn: Callable[[], Any], interpreter: Any, timing_settings: sampling.SamplingSettings) -> sampling.Timing:
        """In a TRITON_INTERPRET=1 session: a callable that launches a Triton kernel is timed briefly
        (the interpreter's timings mean nothing and are not gated); one that launches none (a
        torch reference) is a real CPU measurement, timed again as such."""
        with backends.counting_triton_launches() as launched:
            timing = sampling.take_timing(fn, interpreter, INTERPRETER_SAMPLING, telemetry.is_throttled)
        if launched():
            return timing
        if self._cpu_backend is None:
            self._cpu_backend = backends.cpu_backend()
        return sampling.take_timing(fn, self._cpu_backend, timing_settings, telemetry.is_throttled)

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


def gpu_only_options(settings: Settings) -> list[str]:
    """What the options that act on a GPU say when the measurements run on the CPU."""
    said = []
    if settings.lock_clocks != clocks.OFF:
        said.append(f"--sol-lock-clocks={settings.lock_clocks}: measurements run on the CPU, which has no SM clock "
                    "to lock; the option acts on GPUs only")
    if settings.ncu:
        said.append("--sol-ncu: measurements run on the CPU; Nsight Compute measures the DRAM bytes of GPU kernels only")
    return said


def timing_for_real(timing: sampling.Timing) -> bool:
    return backends.is_gated(timing.backend)


def contention(waited_for: str, run_id: str, busy: machine.Busy, on_cpu: bool) -> str:
    """Why a measurement was not alone on its device, or '' (pure; see Engine._timed_alone).

    On a CPU, what other processes took while it sampled (measure/contention.py). A GPU's share is
    not visible from the host; there, another solgate run that held the device's lock just before
    us is the evidence (its tests run on the device between its timed regions). Our own xdist
    workers do not count.
    """
    if on_cpu:
        return busy_phrase(busy) if busy.contended else ""
    if waited_for and not (run_id and f"run {run_id} " in f"{waited_for} "):
        return f"another solgate run ({waited_for}) was using this device"
    return ""


def busy_phrase(busy: machine.Busy) -> str:
    """A contention reading in a few words, e.g. 'CPU pressure 43%: tasks waited for a CPU'."""
    if busy.source == machine.CPU_PRESSURE:
        mine = f", this thread {busy.waited:.0%}" if busy.waited is not None else ""
        return f"CPU pressure {busy.value:.0%}: tasks waited for a CPU{mine}"
    if busy.source == machine.BUSY_TIME:
        return f"other processes kept {busy.value:.1f} of {busy.cores} cores busy"
    return f"this process got {busy.value:.0%} of a core"


def _cuda_device_scope(context: Context) -> Any:
    if context.device.kind != "cuda":
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(context.device.index)
