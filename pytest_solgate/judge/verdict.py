"""Judge: budgets from the marker, the baseline comparison, and the verdict (pure, no I/O)."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_solgate import results
from pytest_solgate.judge import wording
from pytest_solgate.measure import backends, clocks
from pytest_solgate.results import (
    AMBIGUOUS,
    IMPROVED,
    PASS,
    REGRESSED,
    AppliedBudget,
    BaselineComparison,
    Judgement,
    Measurement,
    Verdict,
)
from pytest_solgate.support import stats, units
from pytest_solgate.support.errors import MarkerError
from pytest_solgate.support.settings import DEFAULT_MAX_REGRESSION

MARKER_KEYS = ("min", "mfu", "max_regression", "speedup", "reference")
# A speedup short of its budget by less than this many combined 95 % half-widths is within the
# two medians' own noise: ambiguous, not failed (the regression gate's rule for one run).
SPEEDUP_NOISE = 1.0
# A median with too few samples for an interval (noise inf) counts as +-50 %: a shortfall it
# cannot resolve is ambiguous, never failed on a guess.
UNKNOWN_NOISE = 0.5
ABOVE_SOL_LIMIT = 1.05
# A run-level value falls below the window's 99 % one-sided prediction bound by chance in 1 % of
# runs (normal log-SOL, independent runs): the false-alarm rate per measurement before the
# confirmation re-measure. Strict, because each false alarm costs a kernel engineer an afternoon.
STATISTIC = "t-prediction-99"
MIN_ROBUST = 4  # window values needed before one far off the others can be told apart and left out
# A window is compared relative to the memory probe when its runs' spread relative to the probe is
# at most this share of their raw spread (follows_probe): clearly better, not better by chance.
PROBE_GAIN = 0.75
OUTLIER_SIGMAS = 4.5  # robust standard deviations from the window's median: a disturbed run, not noise
MIN_SCALE = 0.01  # robust spreads are taken as at least 1 %: no run within 4.5 % of the median is called disturbed
WIDENING_SIGMAS = 3.0  # kept runs this far from the window's median are named as widening it

BudgetSpec = float | tuple[tuple[str, float], ...] | None


@dataclass(frozen=True)
class Budget:
    min: BudgetSpec = None
    mfu: BudgetSpec = None
    max_regression: float | None = None
    speedup: BudgetSpec = None  # how many times faster than the test's gate=False reference
    reference: str | None = None  # which reference, by name; else the test's only one


@dataclass(frozen=True)
class BaselineRun:
    """One clean run of the same measurement at an ancestor commit: a run-level value."""

    commit: str
    run_id: str
    sol: float
    seconds: float
    noise: float = 0.0  # the run's own precision: relative 95 % half-width of its median
    started_at: str = ""
    ceilings_id: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    verdict: str = ""  # the run's own verdict
    judged_against: str = ""  # the newest commit of the window that run was judged against
    disturbed: str = ""  # "interrupted", "contended" or "noisy": recorded, never a baseline
    probe_seconds: float | None = None  # the run's memory probe (measure/backends.py), when it had one
    sm_clock_mhz: float | None = None  # the mean SM clock over its timed region (GPU telemetry), when read


@dataclass(frozen=True)
class BaselineWindow:
    """The last K clean runs of a measurement along the baseline ref's first-parent ancestry,
    newest first, chosen by ``pytest_solgate.record.baseline``."""

    runs: tuple[BaselineRun, ...]
    # Facts in which every run of the window differs from this run, e.g. "torch 2.12.0 -> 2.13.0".
    environment_differs: tuple[str, ...] = ()
    # Where the level began and what was left out of it (baseline.level), for the message.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """A measurement against its baseline window, judged on run-level evidence."""

    verdict: Verdict
    change: float  # relative SOL change against the window's centre
    centre: float  # the window's SOL: geometric mean of its runs
    spread: float | None  # run-to-run relative standard deviation; None with one run
    floor: float | None  # the smallest drop the run-to-run noise cannot explain (99 %); None if unknown
    window: BaselineWindow
    compared_on: str  # "sol", or "time" when the ceilings changed since the baseline
    text: str
    raw_change: float | None = None  # the SOL's own change, when ``change`` is relative to the memory probe

    def record(self) -> BaselineComparison:
        """What the measurement keeps of it (the window's runs themselves stay in the history)."""
        runs = self.window.runs
        return BaselineComparison(
            commit=runs[0].commit,
            oldest_commit=runs[-1].commit,
            runs=len(runs),
            run_id=runs[0].run_id,
            sol=self.centre,
            change=self.change,
            spread=self.spread,
            noise_floor=self.floor,
            compared_on=self.compared_on,
            environment_differs=self.window.environment_differs,
            statistic=STATISTIC,
            by_probe=self.raw_change is not None,
            raw_change=self.raw_change,
        )


@dataclass(frozen=True)
class JudgeSettings:
    gate: str = "fail"  # fail | warn | off
    above_one: str = "fail"  # fail | warn
    max_regression: float = DEFAULT_MAX_REGRESSION
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


def _factor(test: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number of times faster > 0, e.g. 1.15")
    return float(value)


def _budget_spec(test: str, key: str, value: Any) -> BudgetSpec:
    if value is None:
        return None
    check = (lambda k, v: _factor(test, k, v)) if key == "speedup" else (lambda k, v: _fraction(test, k, v, low_open=True))
    if isinstance(value, Mapping):
        if not value:
            raise MarkerError(f"{test}: @pytest.mark.sol({key}={{}}): give at least one 'glob': budget")
        pairs = []
        for pattern, budget in value.items():
            if not isinstance(pattern, str) or not pattern:
                raise MarkerError(f"{test}: @pytest.mark.sol({key}=...): key {pattern!r} must be a profile-id glob string")
            pairs.append((pattern, check(f"{key}[{pattern!r}]", budget)))
        return tuple(pairs)
    return check(key, value)


def parse_marker(test: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Budget:
    """Check ``@pytest.mark.sol`` arguments; errors name the test and the argument."""
    if args:
        raise MarkerError(
            f"{test}: @pytest.mark.sol takes keyword arguments only (min=, mfu=, max_regression=, speedup=, reference=), "
            f"got positional {args[0]!r}"
        )
    unknown = [k for k in kwargs if k not in MARKER_KEYS]
    if unknown:
        raise MarkerError(
            f"{test}: @pytest.mark.sol got unknown argument {unknown[0]!r}; it takes min=, mfu=, max_regression=, "
            "speedup=, reference="
        )
    max_regression = kwargs.get("max_regression")
    if max_regression is not None:
        max_regression = _fraction(test, "max_regression", max_regression, low_open=False)
    reference = kwargs.get("reference")
    if reference is not None and (not isinstance(reference, str) or not reference):
        raise MarkerError(f"{test}: @pytest.mark.sol(reference={reference!r}): give the name= of a gate=False measurement")
    return Budget(
        min=_budget_spec(test, "min", kwargs.get("min")),
        mfu=_budget_spec(test, "mfu", kwargs.get("mfu")),
        max_regression=max_regression,
        speedup=_budget_spec(test, "speedup", kwargs.get("speedup")),
        reference=reference,
    )


def per_profile(budget: Budget) -> list[tuple[str, tuple[tuple[str, float], ...]]]:
    """(marker argument, its {glob: value} pairs) for each budget given per profile."""
    return [(key, spec) for key, spec in (("min", budget.min), ("mfu", budget.mfu), ("speedup", budget.speedup))
            if isinstance(spec, tuple)]


def budget_globs(budget: Budget) -> list[tuple[str, str]]:
    """(marker argument, profile glob) for every {glob: value} budget of the marker."""
    return [(key, pattern) for key, spec in per_profile(budget) for pattern, _ in spec]


def check_budget_globs(test: str, budget: Budget, profile_ids: Sequence[str]) -> None:
    """A profile glob that matches no known profile id is a typo that silently removes the gate
    (``{"H100": 0.8}``): refuse it, naming the glob and the ids it was probably meant to be."""
    import difflib

    for key, pattern in budget_globs(budget):
        if any(fnmatch.fnmatchcase(profile_id, pattern) for profile_id in profile_ids):
            continue
        close = difflib.get_close_matches(pattern.lower().rstrip("*"), profile_ids, n=4, cutoff=0.5)
        # Ids are lowercase and joined by '-': 'CPU_*' is 'cpu-*' mistyped, and the ids it then
        # matches (this CPU's 'cpu-c99b8b40d6') are the close matches a difflib ratio misses.
        respelled = pattern.lower().replace("_", "-")
        matched = [i for i in profile_ids if fnmatch.fnmatchcase(i, respelled)]
        if matched:
            close = [respelled, *matched[:3]] if respelled != pattern.lower() or "*" in pattern else matched[:4]
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise MarkerError(
            f"{test}: @pytest.mark.sol({key}={{{pattern!r}: ...}}): the glob {pattern!r} matches no known profile id "
            f"(globs are case-sensitive, ids lowercase); {hint}see `solgate profiles` (this machine's: `solgate detect`)"
        )


def budget_on(spec: BudgetSpec, profile_id: str) -> float | None:
    """A float applies everywhere; a mapping applies its first matching glob, else nothing."""
    if spec is None or isinstance(spec, float):
        return spec
    for pattern, budget in spec:
        if fnmatch.fnmatchcase(profile_id, pattern):
            return budget
    return None


def describe(m: Measurement) -> str:
    """'2.38 TB/s of 3.35 TB/s (memory-bound)' from a scored measurement and its ceilings."""
    scored = m.score
    if scored.bound == "memory":
        ceiling = m.work.bytes / scored.t_sol / 1e9 if scored.t_sol > 0 else 0
        return f"{units.bandwidth(scored.gbps)} of {units.bandwidth(ceiling)} (memory-bound)"
    ceiling = m.work.total_flops / scored.t_sol / 1e12 if scored.t_sol > 0 else 0
    return f"{units.flop_rate(scored.tflops)} of {units.flop_rate(ceiling)} (compute-bound)"


# Nsight Compute's DRAM bytes over the declared ones beyond which a kernel is told it moves more
# than its fused minimum (--sol-ncu): 10 %, above the counters' own slack (ECC, page-table walks).
DRAM_EXCESS = 1.10


def dram_ratio(m: Measurement) -> float | None:
    """Measured DRAM bytes (--sol-ncu) over declared bytes, or None when either is missing."""
    if m.measured_bytes is None or not m.work.bytes:
        return None
    return m.measured_bytes / m.work.bytes


def dram_phrase(m: Measurement) -> str:
    """'Nsight Compute measured 1.07 GB of DRAM traffic, 1.60x the 671 MB declared', or ''."""
    ratio = dram_ratio(m)
    if ratio is None:
        return ""
    return (f"Nsight Compute measured {units.count(m.measured_bytes)}B of DRAM traffic for one call, "
            f"{ratio:.2f}x the {units.count(m.work.bytes)}B declared")


def energy_per_work(m: Measurement) -> tuple[float, str] | None:
    """Joules per GB moved (memory-bound) or per TFLOP (compute-bound), from the energy per call."""
    if m.joules is None:
        return None
    if m.score.bound == "memory" and m.work.bytes:
        return m.joules / (m.work.bytes / 1e9), "J/GB"
    if m.work.total_flops:
        return m.joules / (m.work.total_flops / 1e12), "J/TFLOP"
    return None


def label(m: Measurement) -> str:
    test = m.test.split("::")[-1]
    return test if m.name == "default" else f"{test} '{m.name}'"


def timing_phrase(m: Measurement) -> str:
    timing = m.timing
    phrase = f"median {units.seconds(timing.seconds)} {units.noise(timing.noise)} over {len(timing.samples)} samples"
    if timing.noisy:
        phrase += " (noisy: the time budget ran out first)"
    if timing.throttled:
        phrase += " (throttled: clocks fell or a power/thermal limit was hit)"
    return phrase


def short(commit: str | None) -> str:
    return (commit or "unknown")[:10]


def _run_value(m: Measurement, run: BaselineRun) -> tuple[float, bool]:
    """A baseline run's SOL, made comparable with ``m``: when the ceilings differ (a re-calibrated
    CPU, an edited profile) its SOL is not, so its time is scored against ``m``'s T_SOL instead."""
    if run.ceilings_id and m.ceilings_id and run.ceilings_id != m.ceilings_id:
        return (m.score.t_sol / run.seconds if run.seconds > 0 else 0.0), True
    return run.sol, False


def probe_applies(m: Measurement, runs: Sequence[BaselineRun]) -> bool:
    """Whether ``m`` could be compared with ``runs`` relative to the memory probe: a memory-bound
    kernel whose run and every baseline run timed the probe beside it (the CPU backend)."""
    probe = m.timing.probe_seconds
    return (m.score.bound == "memory" and probe is not None and probe > 0
            and all(run.probe_seconds for run in runs))


def follows_probe(raw: Sequence[float], relative: Sequence[float], floor_sd: float) -> bool:
    """Whether a window's runs (log values) agree clearly better relative to the memory probe than
    raw: their robust spread relative to it is at most PROBE_GAIN of the raw one. Decided from
    the window alone, never from the run being judged.

    A shared machine's memory speed swings from one second to the next, and a memory-bound kernel
    with it; the probe, the plugin's own fixed copy timed after each sample, reads the same swings
    (docs/measurement.md: on the development VM the run-to-run deviation of add and copy fell
    from 0.06-0.25 to 0.014-0.04 in log time). A kernel declared memory-bound that is limited by
    something else on this machine (softmax's exp under a neighbour streaming memory: 0.18 raw,
    0.24 relative) does not follow it, and the probe would only add its swings: it is compared
    raw. A change of the user's code cannot move the probe, so a commit that slows every kernel
    alike is still seen."""
    if len(raw) < MIN_ROBUST:
        return False
    return robust_values(relative, floor_sd)[1] <= PROBE_GAIN * robust_values(raw, floor_sd)[1]


def memory_moved(m: Measurement, runs: Sequence[BaselineRun]) -> tuple[float, str]:
    """How far (log time) this run's memory probe lay from its baseline runs', and why that puts
    the machine in a state the window never saw; (0.0, '') when it did not (or no probe tells).

    The probe is the plugin's own fixed copy, so only the machine moves it. When this run's probe
    time lies outside the baseline runs' 99 % prediction range (as a kernel's own window is
    judged), the machine was in a state the window never saw: on the development VM, a minute in
    which every kernel ran 30-35 % slow while nothing else of ours ran. A kernel compared raw is
    not corrected for it, and one compared relative to the probe only follows it within the range
    its window showed (softmax did not: six false `regressed` in that minute). Such a run fails as
    `regressed` only beyond the floor plus the probe's own shift: a drop that even a kernel slowed
    as much as the machine's memory cannot explain; it never reads as `improved`."""
    probe = m.timing.probe_seconds
    logs = [math.log(run.probe_seconds) for run in runs if run.probe_seconds]
    if not probe or probe <= 0 or len(logs) < 2:
        return 0.0, ""
    keep, sd = robust_values(logs, 0.0)
    kept = [logs[i] for i in keep]
    bound = stats.prediction_bound_99(max(sd, MIN_SCALE), len(kept))
    shift = math.log(probe) - stats.mean(kept)
    if abs(shift) <= bound:
        return 0.0, ""
    return shift, (f"the memory probe took {units.percent(abs(math.exp(shift) - 1))} "
                   f"{'longer' if shift > 0 else 'less'} than over the baseline runs, beyond their range "
                   f"(±{units.percent(math.exp(bound) - 1)}): the machine ran in a state the window never saw")


def _at_memory_speed(raw_change: float | None) -> str:
    if raw_change is None:
        return ""
    return (f" at this run's memory speed (relative to the memory probe timed beside each sample; the SOL itself "
            f"changed {units.percent(raw_change, signed=True)})")


def _commits(window: BaselineWindow) -> str:
    newest, oldest = short(window.runs[0].commit), short(window.runs[-1].commit)
    count = len(window.runs)
    runs = f"{count} baseline run{'s' if count != 1 else ''}"
    return f"{runs} at {newest}" if newest == oldest else f"{runs} from {oldest} to {newest}"


def _robust_scale(values: Sequence[float], floor_sd: float) -> tuple[float, float]:
    """The median of ``values`` and their robust standard deviation (1.4826 MAD, at least ``floor_sd``)."""
    centre = stats.median(values)
    return centre, max(1.4826 * stats.median([abs(v - centre) for v in values]), floor_sd, MIN_SCALE)


def robust_values(values: Sequence[float], floor_sd: float) -> tuple[list[int], float]:
    """Indices of the window values to keep, and their spread: a value further than
    ``OUTLIER_SIGMAS`` robust standard deviations from the median is one disturbed run, not the
    runner's noise, and is left out, so that one slow run cannot widen the floor several-fold.
    Needs four values; fewer are kept as they are."""
    keep = list(range(len(values)))
    if len(values) >= MIN_ROBUST:
        centre, scale = _robust_scale(values, floor_sd)
        near = [i for i, v in enumerate(values) if abs(v - centre) <= OUTLIER_SIGMAS * scale]
        if len(values) - len(near) <= len(values) // 3:  # a few disturbed runs; more is a mixed window
            keep = near
    return keep, stats.stdev([values[i] for i in keep])


def _widening(window: BaselineWindow, values: Sequence[float], keep: Sequence[int], floor_sd: float) -> list[str]:
    """The kept runs far enough from the others (``WIDENING_SIGMAS`` robust standard deviations)
    to make most of the window's spread: a mixed window. None in a window of one level."""
    if len(keep) < MIN_ROBUST:
        return []
    centre, scale = _robust_scale([values[i] for i in keep], floor_sd)
    return [f"{short(window.runs[i].commit)} (SOL {math.exp(values[i]):.3f})"
            for i in keep if abs(values[i] - centre) > WIDENING_SIGMAS * scale]


def _advice(window: BaselineWindow, values: Sequence[float], keep: Sequence[int], within: float, spread: float,
            tolerance: float, floor_text: str) -> str:
    """What to do about a drop the window's noise cannot tell from a regression, from the evidence:
    a mixed window, the runs' own noise, or noise between runs that the runs themselves do not show."""
    widening = _widening(window, values, keep, within)
    if widening:
        several = len(widening) > 1
        return (f"the window is mixed: the run{'s' if several else ''} at {' and '.join(widening)} "
                f"widen{'' if several else 's'} it, and {'they leave' if several else 'it leaves'} the window as new "
                "runs come (or `solgate accept` the level it shows); the tolerance stays right")
    if stats.Z_99 * within >= tolerance:
        return (f"the runs' own noise (±{units.percent(within)} within a run) is beyond the tolerance: give more "
                f"--sol-min-time, or raise max_regression above {floor_text}")
    return (f"the noise is between runs ({units.percent(spread)} run to run, {units.percent(within)} within a run): "
            "the runner changes from run to run (clocks, neighbours, frequency scaling): lock the clocks or give "
            "the runner to one job; raising max_regression would hide real regressions")


def against_window(m: Measurement, window: BaselineWindow, tolerance: float, settings: JudgeSettings) -> Comparison:
    """Judge ``m`` against its baseline window on run-level evidence.

    Each baseline run contributes one value, its median SOL; the head run is one more draw. In log
    space (timing noise is multiplicative) the window gives a mean and a run-to-run standard
    deviation s (never less than the runs' own within-run precision; a run far outside the others
    is left out first, see ``robust_values``), and a new run of an unchanged kernel falls below
    ``mean - t(0.99, k-1) * s * sqrt(1 + 1/k)`` in 1 % of runs; that distance, combined in
    quadrature with this run's own precision at the normal 99 % quantile, is the noise floor.
    ``regressed`` needs a drop beyond the tolerance AND beyond the floor; a drop beyond the
    tolerance alone is ``ambiguous``; so is any drop when one run cannot show a spread.
    """
    raw_values = []
    by_time = False
    for run in window.runs:
        value, timed = _run_value(m, run)
        by_time = by_time or timed
        raw_values.append(math.log(value) if value > 0 else math.nan)
    usable = [i for i, v in enumerate(raw_values) if math.isfinite(v)]
    compared_on = "time" if by_time else "sol"
    sol, noise = m.score.sol, m.timing.noise
    # Within-run precision is a 95 % half-width: divided by Z_95 it is a standard deviation.
    within_list = [run.noise / stats.Z_95 for run in window.runs if math.isfinite(run.noise)]
    within = stats.median(within_list) if within_list else 0.0
    values, relative = raw_values, False
    if probe_applies(m, window.runs):
        # each run's SOL as it would have read at this run's memory speed
        scaled = [v + math.log(run.probe_seconds / m.timing.probe_seconds) for v, run in zip(raw_values, window.runs)]
        relative = follows_probe([raw_values[i] for i in usable], [scaled[i] for i in usable], within)
        values = scaled if relative else raw_values
    keep, left_out = usable, []
    spread = floor_log = raw_change = None
    if not usable or sol <= 0:
        centre, change = (math.exp(values[usable[0]]) if usable else 0.0), 0.0
    else:
        kept_values = [values[i] for i in usable]
        if len(kept_values) >= 2:
            keep_local, sd_kept = robust_values(kept_values, within)
            keep = [usable[i] for i in keep_local]
            left_out = [usable[i] for i in range(len(usable)) if i not in keep_local]
            sd = max(sd_kept, within)
            spread = sd
            window_term = stats.prediction_bound_99(sd, len(keep)) if len(keep) >= 2 else None
            # This run's own precision, when it is worse than usual (a disturbed block of samples),
            # widens the bound too: in quadrature, at the normal 99 % quantile.
            head_term = stats.Z_99 * noise / stats.Z_95 if math.isfinite(noise) else 0.0
            floor_log = math.hypot(window_term, head_term) if window_term is not None else None
        centre_log = stats.mean([values[i] for i in keep])
        centre = math.exp(centre_log)
        change = math.exp(math.log(sol) - centre_log) - 1
        if relative:
            raw_change = math.exp(math.log(sol) - stats.mean([raw_values[i] for i in keep])) - 1
    floor = None if floor_log is None else 1 - math.exp(-floor_log)
    floor_text = units.percent(floor) if floor is not None else "unknown (one run)"
    said = list(window.notes)
    if left_out:
        said.append("left out as far off the others: " + ", ".join(
            f"{short(window.runs[i].commit)} (SOL {math.exp(values[i]):.3f})" for i in left_out))
    clock_moved = _clock_moved_text(m, [window.runs[i] for i in keep])
    if clock_moved:
        said.append(clock_moved)
    # Whether it was compared on time (the ceilings changed) is said once per session (run.py).
    facts = wording.ComparisonFacts(
        label=label(m), verdict=PASS, change=change, tolerance=tolerance, floor=floor, sol=sol, centre=centre,
        commit=short(settings.commit), dirty=settings.dirty, window=_commits(window), notes=tuple(said),
        memory=_at_memory_speed(raw_change), runs=len(keep),
    )

    def result(verdict: Verdict, held_back: str = "", detail: str = "", **more: Any) -> Comparison:
        said = dataclasses.replace(facts, verdict=verdict.value, held_back=held_back, detail=detail, **more)
        return Comparison(verdict, change, centre, spread, floor, window, compared_on, wording.comparison_text(said),
                          raw_change)

    beyond_floor = floor_log is not None and abs(math.log1p(change)) > floor_log
    shift, moved = memory_moved(m, [window.runs[i] for i in keep])
    if change < -tolerance:
        if floor_log is None:
            return result(AMBIGUOUS, wording.ONE_RUN)
        if not beyond_floor:
            advice = _advice(window, values, keep, within, spread or 0.0, tolerance, floor_text)
            return result(AMBIGUOUS, wording.WITHIN_NOISE, advice=advice)
        if window.environment_differs:
            return result(AMBIGUOUS, wording.OTHER_ENVIRONMENT, "; ".join(window.environment_differs))
        if m.contended:
            return result(AMBIGUOUS, wording.CONTENDED, m.contended)
        if moved and abs(math.log1p(change)) <= floor_log + abs(shift):
            return result(AMBIGUOUS, wording.MEMORY_MOVED, moved)
        return result(REGRESSED, probe_beyond=bool(moved))
    if change > tolerance:
        if not beyond_floor:  # say why a large gain is not `improved`
            return result(PASS, wording.WITHIN_NOISE if floor_log is not None else wording.ONE_RUN)
        if moved:
            return result(PASS, wording.MEMORY_MOVED, moved)
        return result(IMPROVED)
    return result(PASS)


def _clock_moved_text(m: Measurement, runs: Sequence[BaselineRun]) -> str:
    """'the SM clock moved ...' when this unlocked run's SM clock over its timed region lies more
    than clocks.CLOCK_MOVED from its window's; '' otherwise (a locked run's clock is held)."""
    if str(m.environment.get(clocks.ENVIRONMENT_KEY, "")).startswith("locked"):
        return ""
    window_clocks = [run.sm_clock_mhz for run in runs]
    moved = clocks.clock_moved(m.timing.sm_clock_mhz, window_clocks)
    if moved is None:
        return ""
    centre = m.timing.sm_clock_mhz / (1 + moved)
    return (f"the SM clock moved {units.percent(moved, signed=True)}: {m.timing.sm_clock_mhz:.0f} MHz over this "
            f"run's timed region vs {centre:.0f} MHz over the window's; clocks unlocked: --sol-lock-clocks=base "
            "compares at one clock")


def confirm(first: Measurement, second: Measurement) -> Measurement:
    """Settle a suspected regression with the re-measurement ``second`` (judged on its own).

    One disturbed block of samples cannot fail a test: the verdict is the second block's, and a
    regression stands only when the second block regressed too.
    """
    judged = _judgement(second)
    readings = f"SOL {first.score.sol:.3f}, then {second.score.sol:.3f}"
    if judged.verdict == REGRESSED and judged.baseline is not None:
        confirmed = dataclasses.replace(judged.baseline, confirmed=True)
        return second.replace(judgement=judged.replace(
            reason=f"{judged.reason}; confirmed by a re-measurement ({readings})", baseline=confirmed,
        ))
    note = (f"a first block of samples read SOL {first.score.sol:.3f} (a suspected regression); "
            f"the re-measurement read {second.score.sol:.3f} and did not confirm it")
    return second.replace(notes=(*second.notes, note), judgement=judged.replace(reason=f"{judged.reason}; {note}"))


def judge(m: Measurement, budget: Budget, window: BaselineWindow | None, settings: JudgeSettings) -> Measurement:
    """Return ``m`` with its judgement: the verdict, its reason, the budget applied, the baseline."""
    min_sol = budget_on(budget.min, m.profile)
    min_mfu = budget_on(budget.mfu, m.profile)
    tolerance = budget.max_regression if budget.max_regression is not None else settings.max_regression
    unmatched = tuple(key for key, spec in per_profile(budget) if budget_on(spec, m.profile) is None)
    applied = AppliedBudget(min=min_sol, mfu=min_mfu, max_regression=tolerance, unmatched=unmatched)
    versus = against_window(m, window, tolerance, settings) if window is not None and window.runs else None

    def done(verdict: Verdict, reason: str) -> Measurement:
        baseline = versus.record() if versus else None
        return m.replace(judgement=Judgement(verdict, reason, applied, baseline))

    where = f"on {m.profile}"
    sol, mfu = m.score.sol, m.score.mfu
    if not m.gate:
        if sol > ABOVE_SOL_LIMIT:  # not judged, but an impossible reading still says so
            return done(results.NOT_GATED, f"gate=False: recorded for reference, not judged; note: SOL {units.sol(sol)} > "
                                           f"{ABOVE_SOL_LIMIT} {where} is impossible: {describe(m)}; check the declared "
                                           "bytes/flops and the profile's ceilings, or whether the cache served the data")
        return done(results.NOT_GATED, "gate=False: recorded for reference, not judged")
    if not backends.is_gated(m.timing.backend):
        return done(results.NOT_GATED, "TRITON_INTERPRET=1: the Triton interpreter's timings mean nothing")
    if settings.gate == "off":
        return done(results.NOT_GATED, "--sol-gate=off")
    ratio = dram_ratio(m)
    if sol > ABOVE_SOL_LIMIT:
        if ratio is not None and ratio < 1:
            why = f"{dram_phrase(m)}: the cache served the rest of the data (give each call cold inputs: rotating buffer sets)"
        elif ratio is not None:
            why = f"{dram_phrase(m)}, so the data did come from DRAM: check the profile's bandwidth and peak ceilings"
        else:
            why = "check the declared bytes/flops and the profile's ceilings, or whether the cache served the data"
        return done(results.ABOVE_SOL, f"{label(m)} SOL {sol:.2f} > {ABOVE_SOL_LIMIT} {where} is impossible: {describe(m)}; {why}")
    if min_sol is not None and sol < min_sol:
        moved = ""
        if ratio is not None and ratio > DRAM_EXCESS:
            moved = (f"; it moves more than it declares: {dram_phrase(m)}, so the traffic beyond the fused minimum "
                     "(re-reads, spills, an unfused intermediate) costs it time")
        return done(
            results.BELOW_BUDGET,
            f"{label(m)} SOL {sol:.2f} < budget {min_sol:.2f} {where}: {describe(m)}, {timing_phrase(m)}{moved}",
        )
    if min_mfu is not None and not m.work.total_flops:
        return done(
            results.BELOW_BUDGET,
            f"{label(m)} has an MFU budget of {min_mfu:.2f} {where} but declares no FLOPs, so its MFU is 0 "
            "(count_flops counts pointwise ops, softmax and norms as 0): pass flops= or drop mfu= from the marker",
        )
    if min_mfu is not None and mfu < min_mfu:
        return done(
            results.BELOW_BUDGET,
            f"{label(m)} MFU {mfu:.2f} < budget {min_mfu:.2f} {where}: {describe(m)}, {timing_phrase(m)}",
        )
    if versus is not None and versus.verdict != results.PASS:
        return done(versus.verdict, versus.text)
    if min_sol is None and min_mfu is None and versus is None:
        if unmatched:
            return done(results.PASS, f"no budget on {m.profile}: the marker's {' and '.join(f'{k}=' for k in unmatched)} "
                                      "globs match other profiles only; no baseline: recorded")
        return done(results.PASS, f"no budget for {m.profile} and no baseline: recorded")
    if versus is not None:  # the comparison's short first line leads; the measurement's facts follow
        return done(results.PASS, f"{versus.text}\n  {describe(m)} {where}, {timing_phrase(m)}")
    return done(results.PASS, f"{label(m)} SOL {sol:.2f} {where}: {describe(m)}, {timing_phrase(m)}")


def judged(m: Measurement) -> bool:
    """Whether the gate judged ``m`` (not a gate=False reference, the Triton interpreter, or
    --sol-gate=off): only those are compared with a baseline or a level."""
    return m.gate and backends.is_gated(m.timing.backend) and m.verdict != results.NOT_GATED


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
    text = (f"{label(m)} is {achieved:.3g}x as fast as '{reference.name}' (median {units.seconds(mine.seconds)} vs "
            f"{units.seconds(theirs.seconds)}), budget {required:g}x on {m.profile}")
    if achieved < required and before.verdict != results.NOT_GATED:
        if before.verdict.failing:
            judged = judged.replace(reason=f"{before.reason}; also {text}")
        elif achieved * (1 + SPEEDUP_NOISE * noise) >= required:
            judged = judged.replace(verdict=results.AMBIGUOUS,
                                    reason=f"{text}: short by less than the medians' noise (±{noise:.1%}); measure longer")
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
