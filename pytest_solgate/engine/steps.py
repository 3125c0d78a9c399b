"""Engine (whole steps): drives measure -> score for ``sol.measure_step`` and turns a step into the
records every later stage already knows.

A step becomes ``Measurement`` records, so that budgets, baselines, verdicts, the history,
``solgate history --changes`` and bisect treat it like a kernel with no logic of their own:

- the step itself, named as given: its time, its FLOPs and bytes (declared, else counted), T_SOL =
  the sum of its operators', its MFU (judged against the marker's ``mfu=``), and the whole
  breakdown (``Measurement.step``, a ``score.step.StepBreakdown``);
- one record per top operator (the ``top`` that lose the most time), named
  ``"<step>: <operator> in <module>"`` and marked ``part_of=<step>``: its own time series, judged for
  regressions only (a marker's ``min=``/``mfu=`` are the step's budgets, not every operator's).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from pytest_solgate.declare.work import Work, make_work
from pytest_solgate.engine import kernels as engines
from pytest_solgate.judge.wording import CONTENDED_NOTE
from pytest_solgate.measure import callables, extras, locking, sampling
from pytest_solgate.measure import contention as machine
from pytest_solgate.measure import context as measure_context
from pytest_solgate.measure import step as profiling
from pytest_solgate.results import Measurement
from pytest_solgate.score import Score
from pytest_solgate.score import step as scoring
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError

DEFAULT_TOP = 5


def series_name(step: str, op: scoring.OperatorScore) -> str:
    """The name of an operator's own series in the history, e.g. 'block: aten::softmax in Block.attn'."""
    return f"{step}: {op.label}"


def check_top(test: str, top: Any) -> int:
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise MeasureError(f"{test}: sol.measure_step(top={top!r}) must be a whole number >= 0 (how many operators "
                           "get their own series; 0 for none)")
    return top


def declared_work(flops: Any, bytes: Any, precision: str) -> Work | None:
    """``flops=``/``bytes=`` as ``sol.measure`` checks them, or None when neither is given (counted)."""
    if flops is None and bytes is None:
        return None
    return make_work(flops, bytes, precision)


def measure(engine: engines.Engine, test: str, fn: Callable[[], Any], *, name: str, flops: Any = None,
            bytes: Any = None, precision: str | None = None, gate: bool = True, top: int = DEFAULT_TOP
            ) -> list[Measurement]:
    """``sol.measure_step`` in ``engine``'s session: the step's record, then its top operators'. What
    confirms a suspected regression of any of them is kept with the engine's other retakes."""
    __tracebackhide__ = True
    fn, rotation = callables.timeable(fn, test)  # refused before the device is resolved (a CPU calibrates)
    if rotation:
        raise MeasureError(f"{test}: sol.measure_step takes one callable (the step), not a list of buffer sets")
    top = check_top(test, top)
    declared = declared_work(flops, bytes, precision or engine.settings.precision)
    context = engine.context()
    while engine._unsaid:  # the context's warnings, said by the first measurement as sol.measure says them
        engine.warn(engine._unsaid.pop(0))

    def again(count: int) -> list[Measurement]:
        return measure_step(context, engine.settings, test, fn, name=name, declared=declared, gate=gate,
                            top=count, run_id=engine.run_id)

    measured = again(top)
    engine._retake.update(retakes(measured, lambda: again(10**6)))  # a retake finds every operator's series
    return measured


def measure_step(context: Any, settings: Any, test: str, fn: Callable[[], Any], *, name: str,
                 declared: Work | None, gate: bool, top: int, run_id: str = "") -> list[Measurement]:
    """Profile ``fn`` on the session's device, under its lock, and return the step's record then its
    top operators' records."""
    __tracebackhide__ = True
    device = "cuda" if context.device.kind == "cuda" else "cpu"
    cpu_clock, wall_clock = extras.CPU_CLOCKS
    with locking.device_lock(context.lock_key, f"run {run_id} pid {os.getpid()}") as waited_for, \
            measure_context.device_scope(context):
        before = machine.snapshot(cpu_clock, wall_clock)
        measured = profiling.profile_step(fn, device, settings.sampling.max_time)
        busy = machine.between(before, machine.snapshot(cpu_clock, wall_clock))
    contended = extras.contention(waited_for, run_id, busy, device == "cpu")
    breakdown = scoring.score_step(measured, context.profile, declared)
    return records(context, test, name, measured, breakdown, gate, top, contended,
                   extras.contended_wait(contended, busy, device == "cpu"))


def records(context: Any, test: str, name: str, measured: profiling.StepProfile, breakdown: scoring.StepBreakdown,
            gate: bool, top: int, contended: str = "", contended_wait: float | None = None) -> list[Measurement]:
    """The step's record, then one per top operator (pure: tested without a profiler)."""
    notes = list(breakdown.notes)
    if contended:
        notes.append(f"contended: {contended}; {CONTENDED_NOTE}")
    common = dict(test=test, profile=context.profile.id, gate=gate, ceilings=context.ceilings,
                  ceilings_id=context.profile.ceilings_id, environment=dict(context.environment),
                  device=context.device_name, worker=os.environ.get("PYTEST_XDIST_WORKER", ""), contended=contended,
                  contended_wait=contended_wait)
    step_samples = tuple(run.seconds for run in measured.runs)
    compute = sum(op.t_sol for op in breakdown.operators if op.bound == "compute")
    step = Measurement(
        name=name,
        work=Work(flops=dict(breakdown.flops), bytes=breakdown.bytes),
        timing=_timing(measured, breakdown.seconds, step_samples),
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
        **common,
    )
    ranked = [op for op in breakdown.operators if op.t_sol > 0 and op.seconds > 0][:top]
    series = []
    for op in ranked:
        series.append(Measurement(
            name=series_name(name, op),
            work=Work(flops=dict(op.flops), bytes=op.bytes),
            timing=_timing(measured, op.seconds, op.samples),
            score=Score(t_sol=op.t_sol, sol=op.sol, mfu=_operator_mfu(op, context.profile), bound=op.bound,
                        tflops=sum(op.flops.values()) / op.seconds / 1e12, gbps=op.bytes / op.seconds / 1e9,
                        intensity=sum(op.flops.values()) / op.bytes if op.bytes else None, ridge=None),
            notes=(f"operator {op.label} of step '{name}': {op.calls} call(s) per step, "
                   f"{op.seconds / breakdown.seconds:.0%} of the step",),
            part_of=name,
            **common,
        ))
    return [step, *series]


def _operator_mfu(op: scoring.OperatorScore, profile: Any) -> float:
    precision = scoring.main_precision(op.flops, profile)
    return op.flops[precision] / (op.seconds * profile.peak_flops(precision)) if precision else 0.0


def _timing(measured: profiling.StepProfile, seconds: float, samples: tuple[float, ...]) -> sampling.Timing:
    return sampling.Timing(
        seconds=seconds,
        samples=samples,
        noise=stats.relative_half_width(samples),
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

    return {(m.test, m.name): (lambda name=m.name: again(name)) for m in measurements}
