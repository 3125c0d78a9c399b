"""Judge: budgets from the marker, the baseline comparison, and the verdict (pure, no I/O)."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_solgate import records, stats, units
from pytest_solgate.errors import MarkerError
from pytest_solgate.records import Measurement

MARKER_KEYS = ("min", "mfu", "max_regression")
ABOVE_SOL_LIMIT = 1.05
# A regression must be significant at this level: strict, because a gate run on every PR sees
# many comparisons and each false alarm costs a kernel engineer an afternoon.
SIGNIFICANCE = 0.001

BudgetSpec = float | tuple[tuple[str, float], ...] | None


@dataclass(frozen=True)
class Budget:
    min: BudgetSpec = None
    mfu: BudgetSpec = None
    max_regression: float | None = None


@dataclass(frozen=True)
class Baseline:
    commit: str
    sol: float
    sol_samples: tuple[float, ...]
    run_id: str = ""
    started_at: str = ""


@dataclass(frozen=True)
class JudgeSettings:
    gate: str = "fail"  # fail | warn | off
    above_one: str = "fail"  # fail | warn
    max_regression: float = 0.05
    commit: str | None = None  # the commit being measured, for messages
    dirty: bool = False


def _fraction(test: str, key: str, value: Any, low_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number")
    if low_open and not 0 < value <= 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in (0, 1]")
    if not low_open and not 0 <= value < 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in [0, 1)")
    return float(value)


def _budget_spec(test: str, key: str, value: Any) -> BudgetSpec:
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise MarkerError(f"{test}: @pytest.mark.sol({key}={{}}): give at least one 'glob': budget")
        pairs = []
        for pattern, budget in value.items():
            if not isinstance(pattern, str) or not pattern:
                raise MarkerError(f"{test}: @pytest.mark.sol({key}=...): key {pattern!r} must be a profile-id glob string")
            pairs.append((pattern, _fraction(test, f"{key}[{pattern!r}]", budget, low_open=True)))
        return tuple(pairs)
    return _fraction(test, key, value, low_open=True)


def parse_marker(test: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Budget:
    """Check ``@pytest.mark.sol`` arguments; errors name the test and the argument."""
    if args:
        raise MarkerError(
            f"{test}: @pytest.mark.sol takes keyword arguments only (min=, mfu=, max_regression=), "
            f"got positional {args[0]!r}"
        )
    unknown = [k for k in kwargs if k not in MARKER_KEYS]
    if unknown:
        raise MarkerError(
            f"{test}: @pytest.mark.sol got unknown argument {unknown[0]!r}; it takes min=, mfu=, max_regression="
        )
    max_regression = kwargs.get("max_regression")
    if max_regression is not None:
        max_regression = _fraction(test, "max_regression", max_regression, low_open=False)
    return Budget(
        min=_budget_spec(test, "min", kwargs.get("min")),
        mfu=_budget_spec(test, "mfu", kwargs.get("mfu")),
        max_regression=max_regression,
    )


def resolve(spec: BudgetSpec, profile_id: str) -> float | None:
    """A float applies everywhere; a mapping applies its first matching glob, else nothing."""
    if spec is None or isinstance(spec, float):
        return spec
    for pattern, budget in spec:
        if fnmatch.fnmatchcase(profile_id, pattern):
            return budget
    return None


def describe(m: Measurement) -> str:
    """'2.38 TB/s of 3.35 TB/s (memory-bound)' from a scored measurement and its ceilings."""
    if m.bound == "memory":
        ceiling = m.bytes / m.t_sol / 1e9 if m.t_sol > 0 else 0
        return f"{units.bandwidth(m.gbps)} of {units.bandwidth(ceiling)} (memory-bound)"
    total = sum(m.flops.values())
    ceiling = total / m.t_sol / 1e12 if m.t_sol > 0 else 0
    return f"{units.flop_rate(m.tflops)} of {units.flop_rate(ceiling)} (compute-bound)"


def label(m: Measurement) -> str:
    test = m.test.split("::")[-1]
    return test if m.name == "default" else f"{test} '{m.name}'"


def timing_phrase(m: Measurement) -> str:
    phrase = f"median {units.seconds(m.seconds)} {units.noise(m.noise)} over {len(m.samples)} samples"
    if m.noisy:
        phrase += " (noisy: the time budget ran out first)"
    if m.throttled:
        phrase += " (throttled: clocks fell or a power/thermal limit was hit)"
    return phrase


def short(commit: str | None) -> str:
    return (commit or "unknown")[:10]


def compare(m: Measurement, baseline: Baseline) -> tuple[float, float]:
    """Relative SOL change against the baseline, and the rank test's p-value on the samples."""
    from pytest_solgate.score import sol_of_samples

    change = m.sol / baseline.sol - 1 if baseline.sol > 0 else 0.0
    p_value = stats.mann_whitney_u(sol_of_samples(m.t_sol, m.samples), baseline.sol_samples)
    return change, p_value


def against_baseline(
    m: Measurement, baseline: Baseline, tolerance: float, settings: JudgeSettings
) -> tuple[str, str, dict[str, Any]]:
    """(verdict, reason, baseline fields) from the baseline comparison alone.

    `regressed` needs both a drop beyond the tolerance and significance; a large drop that is not
    significant is `ambiguous`; a significant rise beyond the tolerance is `improved`.
    """
    change, p_value = compare(m, baseline)
    info = {
        "commit": baseline.commit,
        "sol": baseline.sol,
        "run_id": baseline.run_id,
        "change": change,
        "p_value": p_value,
        "test": "mann-whitney-u",
    }
    versus = (
        f"{label(m)} SOL {m.sol:.3f} at {short(settings.commit)}{' (dirty)' if settings.dirty else ''} "
        f"vs {baseline.sol:.3f} at {short(baseline.commit)}: {units.percent(change, signed=True)}, "
        f"tolerance {units.percent(tolerance)}, Mann-Whitney U p={p_value:.2g}"
    )
    if change < -tolerance and p_value < SIGNIFICANCE:
        return records.REGRESSED, f"{versus} < {SIGNIFICANCE}: regressed", info
    if change < -tolerance:
        return records.AMBIGUOUS, f"{versus} >= {SIGNIFICANCE}: too noisy to call a regression; rerun or lower the noise", info
    if change > tolerance and p_value < SIGNIFICANCE:
        return records.IMPROVED, f"{versus}: improved", info
    return records.PASS, versus, info


def judge(m: Measurement, budget: Budget, baseline: Baseline | None, settings: JudgeSettings) -> Measurement:
    """Return ``m`` with its verdict, reason, budget and baseline fields set."""
    min_sol = resolve(budget.min, m.profile)
    min_mfu = resolve(budget.mfu, m.profile)
    tolerance = budget.max_regression if budget.max_regression is not None else settings.max_regression
    budget_info = {"min": min_sol, "mfu": min_mfu, "max_regression": tolerance}
    versus = against_baseline(m, baseline, tolerance, settings) if baseline is not None else None

    def done(verdict: str, reason: str) -> Measurement:
        return m.replace(verdict=verdict, reason=reason, budget=budget_info, baseline=versus[2] if versus else None)

    where = f"on {m.profile}"
    if not m.gate:
        return done(records.NOT_GATED, "gate=False: recorded for reference, not judged")
    if m.backend == "triton-interpreter":
        return done(records.NOT_GATED, "TRITON_INTERPRET=1: the Triton interpreter's timings mean nothing")
    if settings.gate == "off":
        return done(records.NOT_GATED, "--sol-gate=off")
    if m.sol > ABOVE_SOL_LIMIT:
        return done(
            records.ABOVE_SOL,
            f"{label(m)} SOL {m.sol:.2f} > {ABOVE_SOL_LIMIT} {where} is impossible: {describe(m)}; "
            "check the declared bytes/flops and the profile's ceilings, or whether the cache served the data",
        )
    if min_sol is not None and m.sol < min_sol:
        return done(
            records.BELOW_BUDGET,
            f"{label(m)} SOL {m.sol:.2f} < budget {min_sol:.2f} {where}: {describe(m)}, {timing_phrase(m)}",
        )
    if min_mfu is not None and m.mfu < min_mfu:
        return done(
            records.BELOW_BUDGET,
            f"{label(m)} MFU {m.mfu:.2f} < budget {min_mfu:.2f} {where}: {describe(m)}, {timing_phrase(m)}",
        )
    if versus is not None and versus[0] != records.PASS:
        return done(versus[0], versus[1])
    if min_sol is None and min_mfu is None and baseline is None:
        return done(records.PASS, f"no budget for {m.profile} and no baseline: recorded")
    return done(records.PASS, f"{label(m)} SOL {m.sol:.2f} {where}: {describe(m)}, {timing_phrase(m)}")


def outcome(verdict: str, settings: JudgeSettings) -> str:
    """What a verdict does to its test: 'fail', 'warn' or 'pass'."""
    if verdict == records.AMBIGUOUS:
        return "warn"
    if verdict not in records.FAILING:
        return "pass"
    if settings.gate == "warn" or (verdict == records.ABOVE_SOL and settings.above_one == "warn"):
        return "warn"
    return "fail"
