"""Engine (whole steps): drives measure -> score for ``sol.measure_step`` and turns a step into the
records every later stage already knows.

A step becomes ``Measurement`` records, so that budgets, baselines, verdicts, the history,
``solgate history --changes`` and bisect treat it like a kernel with no logic of their own:

- the step itself, named as given: its time, its FLOPs and bytes (declared, else counted), T_SOL =
  the sum of its operators', its MFU (judged against the marker's ``mfu=``), and the whole
  breakdown (``Measurement.step``, a ``score.step_breakdown.StepBreakdown``);
- one record per top operator (the ``top`` that lose the most time), named
  ``"<step>: <operator> in <module>"`` and marked ``part_of=<step>``: its own time series, judged for
  regressions only (a marker's ``min=``/``mfu=`` are the step's budgets, not every operator's).
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable

from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.declare.work import Count, Flops, Work, make_work
from pytest_solgate.engine.kernels import Engine, provenance
from pytest_solgate.measure import calibrate, callables, sampling, step_profile
from pytest_solgate.measure.context import Context
from pytest_solgate.results import Measurement
from pytest_solgate.score import Score, step_breakdown
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError

DEFAULT_TOP = 5


def series_name(step: str, op: step_breakdown.OperatorScore) -> str:
    """The name of an operator's own series in the history, e.g. 'block: aten::softmax in Block.attn'."""
    return f"{step}: {op.label}"


def check_top(test: str, top: object) -> int:
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise MeasureError(f"{test}: sol.measure_step(top={top!r}) must be a whole number >= 0 (how many operators "
                           "get their own series; 0 for none)")
    return top


def refusing_nested(engine: Engine, test: str, name: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn``, failing the step in the test's own thread where a measurement was refused inside it (a
    ``sol.measure`` from a thread the step started is refused there, where no test sees it: the thread
    dies, the step would go on) or where it ended the step's profiler session (a
    ``torch.profiler.profile()`` of its own: one profiler runs at a time)."""

    def step() -> object:
        __tracebackhide__ = True
        import torch

        profiling = torch.autograd._profiler_enabled()
        result = fn()
        if engine.nested_calls:
            raise MeasureError(engine.nested_calls[0])
        if profiling and not torch.autograd._profiler_enabled():
            raise MeasureError(f"{test} '{name}': the step opened a torch.profiler.profile() of its own, which ended "
                               "sol.measure_step's profiler session (one profiler runs at a time): profile the step one "
                               "way, not both (drop the inner profiler, or export its trace and read it with `solgate step`)")
        return result

    return step


def series_clash(test: str, name: str, step: bool, measurements: Iterable[Measurement]) -> None:
    """Refuse a name that is, or would make, an operator series of a step in the same test (two
    records of one test under one name): a kernel named ``<step>: ...`` after that step, a step whose
    series would take the name of a kernel measured before it."""
    for m in measurements:
        if not step and m.step is not None and name.startswith(f"{m.name}: "):
            raise MeasureError(f"{test}: sol.measure(name={name!r}) takes the name of an operator series of step "
                               f"{m.name!r} ('<step>: <operator>'): give the kernel another name=")
        if step and m.name.startswith(f"{name}: "):
            raise MeasureError(f"{test}: sol.measure_step(name={name!r}) would name its operators' series "
                               f"'{name}: <operator>', as {m.name!r} already is: give the step another name=")


def declared_work(flops: Flops | None, bytes: Count | None, precision: str) -> Work | None:
    """``flops=``/``bytes=`` as ``sol.measure`` checks them, or None when neither is given (counted)."""
    if flops is None and bytes is None:
        return None
    return make_work(flops, bytes, precision)


def measure(engine: Engine, test: str, fn: Callable[[], object], *, name: str, flops: Flops | None = None,
            bytes: Count | None = None, precision: str | None = None, gate: bool = True, top: int = DEFAULT_TOP
            ) -> list[Measurement]:
    """``sol.measure_step`` in ``engine``'s session, through the engine's pipeline like a kernel (its
    lock, the contention reading and its retake): the step's record, then its top operators'. What
    confirms a suspected regression of any of them is kept with the engine's other retakes."""
    __tracebackhide__ = True
    fn, rotation = callables.timeable(fn, test)  # refused before the device is resolved (a CPU calibrates)
    if rotation:
        raise MeasureError(f"{test}: sol.measure_step takes one callable (the step), not a list of buffer sets")
    top = check_top(test, top)
    engine.nested_calls.clear()
    fn = refusing_nested(engine, test, name, fn)
    declared = declared_work(flops, bytes, precision or engine.settings.precision)
    max_time = engine.settings.sampling.max_time

    def again(count: int) -> list[Measurement]:
        __tracebackhide__ = True
        context = engine.begin(test, "sol.measure_step")
        device = "cuda" if context.device.kind == "cuda" else "cpu"

        def profile_once() -> tuple[sampling.Timing, step_profile.StepProfile]:
            __tracebackhide__ = True
            measured = step_profile.profile_step(fn, device, max_time, min_time=engine.settings.sampling.min_time,
                                              noise=engine.settings.sampling.noise,
                                              read=context.platform.step_reader(device))
            samples = tuple(run.seconds for run in measured.runs)
            median = stats.median(samples) if samples else 0.0
            return _timing(measured, median, samples, stats.relative_half_width(samples)), measured

        # The synchronized block and --sol-ncu are a kernel's: the block holds the events of the
        # current stream against the device's wall time, and a step's other streams are part of it
        # (its profile reads every stream's kernels); ncu's child profiles one kernel call.
        timed = engine.take(test, name, "sol.measure_step", fn, profile_once, max_time)
        if not any(run.operators for run in timed.read.runs):
            raise MeasureError(f"{test} '{name}': the step ran no PyTorch operator, so it has no speed of light to "
                               "hold it to; pass the callable that runs the model (e.g. lambda: model(x))")
        breakdown = step_breakdown.score_step(timed.read, calibrate.step_ceilings(timed.context.profile, timed.read), declared)
        return records(timed.context, test, name, timed.read, breakdown, gate, count, timed.contended, timed.notes,
                       timed.fields.get("contended_wait"))

    measured = again(top)
    engine.keep(retakes(measured, lambda: again(10**6)))  # a retake finds every operator's series
    return measured


def records(context: Context, test: str, name: str, measured: step_profile.StepProfile, breakdown: step_breakdown.StepBreakdown,
            gate: bool, top: int, contended: str = "", taken_notes: tuple[str, ...] = (),
            contended_wait: float | None = None) -> list[Measurement]:
    """The step's record, then one per top operator (pure: tested without a profiler). ``taken_notes``
    are the engine's notes of how the step was taken (contended, over the time budget)."""
    notes = [*breakdown.notes, *taken_notes]
    where = provenance(context, contended)
    step_samples = tuple(run.seconds for run in measured.runs)
    compute = sum(op.t_sol for op in breakdown.operators if op.bound == "compute")
    step = Measurement(
        name=name,
        work=Work(flops=dict(breakdown.flops), bytes=breakdown.bytes),
        timing=_timing(measured, breakdown.seconds, step_samples, breakdown.noise),
        score=Score(
            t_sol=breakdown.t_sol,
            sol=breakdown.t_sol / breakdown.seconds,
            mfu=breakdown.mfu,
            bound="compute" if compute * 2 > breakdown.t_sol else "memory",
            tflops=sum(breakdown.flops.values()) / breakdown.seconds / 1e12,
            gbps=breakdown.bytes / breakdown.seconds / 1e9,
            intensity=sum(breakdown.flops.values()) / breakdown.bytes if breakdown.bytes else None,
            ridge=context.profile.ridge_point(breakdown.precision) if breakdown.precision else None,
            dominant_precision=breakdown.precision,
        ),
        notes=tuple(notes),
        step=breakdown,
        test=test, gate=gate, contended_wait=contended_wait, **where,
    )
    ranked = [op for op in breakdown.operators if op.t_sol > 0 and op.seconds > 0][:top]
    series = []
    for op in ranked:
        series.append(Measurement(
            name=series_name(name, op),
            work=Work(flops=dict(op.flops), bytes=op.bytes),
            timing=_timing(measured, op.seconds, op.samples, op.noise),
            score=Score(t_sol=op.t_sol, sol=op.sol, mfu=_operator_mfu(op, context.profile), bound=op.bound,
                        tflops=sum(op.flops.values()) / op.seconds / 1e12, gbps=op.bytes / op.seconds / 1e9,
                        intensity=sum(op.flops.values()) / op.bytes if op.bytes else None, ridge=None),
            notes=(f"operator {op.label} of step '{name}': {op.calls} call(s) per step, "
                   f"{op.seconds / breakdown.seconds:.0%} of the step",),
            part_of=name,
            test=test, gate=gate, contended_wait=contended_wait, **where,
        ))
    return [step, *series]


def _operator_mfu(op: step_breakdown.OperatorScore, profile: HardwareProfile) -> float:
    precision = step_breakdown.main_precision(op.flops, profile)
    return op.flops[precision] / (op.seconds * profile.peak_flops(precision)) if precision else 0.0


def _timing(measured: step_profile.StepProfile, seconds: float, samples: tuple[float, ...], noise: float) -> sampling.Timing:
    return sampling.Timing(
        seconds=seconds,
        samples=samples,
        noise=noise,  # of the faster-half mean the record carries, not of all its samples
        batch=1,
        warmup_calls=measured.warmup_calls,
        noisy=False,
        backend=measured.device,
        started_at=measured.started_at,
        finished_at=measured.finished_at,
        wall_seconds=max(measured.finished_at - measured.started_at, 0.0),
        mode=measured.mode,
    )


def retakes(measurements: list[Measurement], measure_again: Callable[[], list[Measurement]]
            ) -> dict[tuple[str, str], Callable[[], Measurement]]:
    """What the engine keeps to confirm a suspected regression of any of a step's series: the step is
    measured again once, and each series reads its own record from that one retake."""
    retaken: list[list[Measurement]] = []

    def again(name: str) -> Measurement:
        if not retaken:
            retaken.append(measure_again())
        found = {m.name: m for m in retaken[0]}
        return found.get(name) or next(m for m in measurements if m.name == name)

    return {(m.test, m.name): functools.partial(again, m.name) for m in measurements}
