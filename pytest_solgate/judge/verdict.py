"""Judge (one measurement's verdict): its budgets on its profile, its baseline window, the
confirmation re-measure, its speedup over a reference, and what the verdict does to its test.
Pure, no I/O; the words are ``verdict_wording``'s."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from pytest_solgate import results
from pytest_solgate.judge import like_pressure, verdict_wording
from pytest_solgate.judge.budget import Budget, budget_on, per_profile
from pytest_solgate.judge.window import BaselineWindow, Comparison, JudgeSettings, against_window
from pytest_solgate.results import AppliedBudget, Judgement, Measurement, Verdict
from pytest_solgate.support.errors import MarkerError

# A speedup short of its budget by less than this many combined 95 % half-widths is within the
# two medians' own noise: ambiguous, not failed (the regression gate's rule for one run).
SPEEDUP_NOISE = 1.0
# A median with too few samples for an interval (noise inf) counts as +-50 %: a shortfall it
# cannot resolve is ambiguous, never failed on a guess.
UNKNOWN_NOISE = 0.5
ABOVE_SOL_LIMIT = 1.05
# Nsight Compute's DRAM bytes over the declared ones beyond which a kernel is told it moves more
# than its fused minimum (--sol-ncu): 10 %, above the counters' own slack (ECC, page-table walks).
DRAM_EXCESS = 1.10


def dram_ratio(m: Measurement) -> float | None:
    """Measured DRAM bytes (--sol-ncu) over declared bytes, or None when either is missing."""
    if m.measured_bytes is None or not m.work.bytes:
        return None
    return m.measured_bytes / m.work.bytes


def energy_per_work(m: Measurement) -> tuple[float, str] | None:
    """Joules per GB moved (memory-bound) or per TFLOP (compute-bound), from the energy per call."""
    if m.joules is None:
        return None
    if m.score.bound == "memory" and m.work.bytes:
        return m.joules / (m.work.bytes / 1e9), "J/GB"
    if m.work.total_flops:
        return m.joules / (m.work.total_flops / 1e12), "J/TFLOP"
    return None


def tolerance(marker: float | None, default: float) -> float:
    """The relative drop a measurement may show: the marker's ``max_regression``, which is per test
    and wins, else the run's default (``--sol-max-regression``, a command's ``--max-regression``)."""
    return marker if marker is not None else default


def recorded_tolerance(m: Measurement, given: float | None, default: float) -> float:
    """The tolerance to judge a recorded measurement again with: its marker's ``max_regression``
    (per test: it wins), else ``given`` (a command's ``--max-regression``), else the one the gate
    applied to it, else ``default``."""
    applied = m.judgement.budget if m.judgement is not None else AppliedBudget()
    if applied.by_marker and applied.max_regression is not None:
        return applied.max_regression
    if given is not None:
        return given
    return tolerance(applied.max_regression, default)


def rejudge(m: Measurement, window: BaselineWindow, settings: JudgeSettings, given: float | None = None) -> Comparison:
    """A recorded measurement against a window by the gate's rule and at the gate's tolerance
    (``recorded_tolerance``): what ``solgate compare`` and ``solgate bisect`` read, so that they
    tell the gate's story."""
    return against_window(m, window, recorded_tolerance(m, given, settings.max_regression), settings)


def confirm(first: Measurement, second: Measurement) -> Measurement:
    """Settle a suspected regression with the re-measurement ``second`` (judged on its own).

    One disturbed block of samples cannot fail a test: the verdict is the second block's, and a
    regression stands only when the second block regressed too.
    """
    judged = _judgement(second)
    if judged.verdict == results.REGRESSED and judged.baseline is not None:
        confirmed = dataclasses.replace(judged.baseline, confirmed=True)
        return second.replace(judgement=judged.replace(
            reason=verdict_wording.confirmed(judged.reason, first, second), baseline=confirmed,
        ))
    note = verdict_wording.not_confirmed(first, second)
    return second.replace(notes=(*second.notes, note), judgement=judged.replace(reason=f"{judged.reason}; {note}"))


def judge(m: Measurement, budget: Budget, window: BaselineWindow | None, settings: JudgeSettings) -> Measurement:
    """Return ``m`` with its judgement: the verdict, its reason, the budget applied, the baseline."""
    min_sol = budget_on(budget.min, m.profile)
    min_mfu = budget_on(budget.mfu, m.profile)
    allowed = tolerance(budget.max_regression, settings.max_regression)
    unmatched = tuple(key for key, spec in per_profile(budget) if budget_on(spec, m.profile) is None)
    applied = AppliedBudget(min=min_sol, mfu=min_mfu, max_regression=allowed, unmatched=unmatched,
                            by_marker=budget.max_regression is not None)
    window = like_pressure.judged_window(m, window)  # a run busy on wall time: against runs as busy, where there are
    versus = against_window(m, window, allowed, settings) if window is not None else None

    def done(verdict: Verdict, reason: str) -> Measurement:
        baseline = versus.record() if versus else None
        return m.replace(judgement=Judgement(verdict, reason, applied, baseline))

    sol, mfu = m.score.sol, m.score.mfu
    if not m.gate:
        if sol > ABOVE_SOL_LIMIT:  # not judged, but an impossible reading still says so
            return done(results.NOT_GATED, verdict_wording.impossible_reference(m, ABOVE_SOL_LIMIT))
        # timed on a test's clock (measure/integrity/guard.py's note): said as the reason, not gate=False
        clock = next((note for note in m.notes if note.startswith("test clock:")), "")
        return done(results.NOT_GATED, clock or verdict_wording.NOT_JUDGED)
    if not m.timing.gated:
        return done(results.NOT_GATED, verdict_wording.INTERPRETED)
    if settings.gate == "off":
        return done(results.NOT_GATED, verdict_wording.GATE_OFF)
    ratio = dram_ratio(m)
    if sol > ABOVE_SOL_LIMIT:
        return done(results.ABOVE_SOL, verdict_wording.above_sol(m, ABOVE_SOL_LIMIT, ratio, fitting_class(m)))
    if min_sol is not None and sol < min_sol:
        excess = ratio if ratio is not None and ratio > DRAM_EXCESS else None
        # A plain number is every profile's budget, this CPU's included (docs/reference.md): say how to
        # keep it to the GPUs, where a GPU kernel's budget usually belongs.
        on_cpu = isinstance(budget.min, float) and m.timing.backend == "cpu"
        return done(results.BELOW_BUDGET, verdict_wording.below_min(m, min_sol, excess, plain_on_cpu=on_cpu))
    if min_mfu is not None and not m.work.total_flops:
        return done(results.BELOW_BUDGET, verdict_wording.mfu_without_flops(m, min_mfu))
    if min_mfu is not None and mfu < min_mfu:
        return done(results.BELOW_BUDGET, verdict_wording.below_mfu(m, min_mfu))
    if versus is not None and versus.verdict != results.PASS:
        return done(versus.verdict, versus.text)
    if min_sol is None and min_mfu is None and versus is None:
        return done(results.RECORDED, verdict_wording.no_budget(m, unmatched, settings.saved,
                                                                like_pressure.busy_on_wall(m)))
    return done(results.PASS, verdict_wording.passed(m, versus.text if versus is not None else None))


def fitting_class(m: Measurement) -> tuple[str, float] | None:
    """The tensor-core class whose peak the declared FLOPs fit (SOL within the limit there), when
    the declared class reads above the speed of light: the precision was likely declared wrong."""
    other = m.score.tensor_class
    return other if other is not None and other[1] <= ABOVE_SOL_LIMIT else None


def judged(m: Measurement) -> bool:
    """Whether the gate judged ``m`` (not a gate=False reference, the Triton interpreter, or
    --sol-gate=off): only those are compared with a baseline or a level."""
    return m.gate and m.timing.gated and m.verdict != results.NOT_GATED


def _judgement(m: Measurement) -> Judgement:
    if m.judgement is None:
        raise ValueError(f"{m.test} '{m.name}' has not been judged yet: call judge() first")
    return m.judgement


def choose_reference(test: str, budget: Budget, measurements: Sequence[Measurement]) -> Measurement:
    """The gate=False measurement a speedup budget is measured against: the one named by
    ``reference=``, else the test's only one."""
    references = [m for m in measurements if not m.gate]
    if budget.reference is not None:
        named = [m for m in references if m.name == budget.reference]
        if not named:
            raise MarkerError(
                f"{test}: @pytest.mark.sol(reference={budget.reference!r}) but the test has no gate=False measurement "
                f"named so (it has: {', '.join(m.name for m in references) or 'none'})"
            )
        return named[0]
    if len(references) != 1:
        raise MarkerError(
            f"{test}: a speedup budget needs one reference: "
            + (f"pass reference= one of {', '.join(m.name for m in references)}" if references
               else "measure it with sol.measure(..., name='torch', gate=False)")
        )
    return references[0]


def against_reference(m: Measurement, reference: Measurement, required: float) -> Measurement:
    """A judged kernel against its speedup budget: ``reference``'s median time over ``m``'s must
    reach ``required``. A shortfall within the two medians' own noise is ``ambiguous``; beyond it,
    ``below-budget`` (an earlier failure stands, with this one added to its reason)."""
    mine, theirs = m.timing, reference.timing
    achieved = theirs.seconds / mine.seconds if mine.seconds > 0 else 0.0
    noise = math.hypot(*(x if math.isfinite(x) else UNKNOWN_NOISE for x in (mine.noise, theirs.noise)))
    before = _judgement(m)
    judged = before.replace(budget=dataclasses.replace(
        before.budget, speedup=required, reference=reference.name, achieved_speedup=achieved,
    ))
    text = verdict_wording.speedup(m, reference, achieved, required)
    if before.verdict == results.RECORDED:  # the speedup budget is something judged
        judged = judged.replace(verdict=results.PASS, reason=text)
    if achieved < required and before.verdict != results.NOT_GATED:
        if before.verdict.failing:
            judged = judged.replace(reason=f"{before.reason}; also {text}")
        elif achieved * (1 + SPEEDUP_NOISE * noise) >= required:
            judged = judged.replace(verdict=results.AMBIGUOUS,
                                    reason=verdict_wording.speedup_within_noise(text, noise))
        else:
            judged = judged.replace(verdict=results.BELOW_BUDGET, reason=f"{text}: too slow")
    return m.replace(judgement=judged)


def outcome(verdict: Verdict, settings: JudgeSettings) -> str:
    """What a verdict does to its test: 'fail', 'warn' or 'pass'."""
    if verdict == results.AMBIGUOUS:
        return "warn"
    if not verdict.failing:
        return "pass"
    if settings.gate == "warn" or (verdict == results.ABOVE_SOL and settings.above_one == "warn"):
        return "warn"
    return "fail"
