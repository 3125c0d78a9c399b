"""Judge (the baseline window): one run against the last clean runs of the same measurement,
on run-level evidence; returns the facts (``Comparison``), which ``wording`` words. Pure, no I/O."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from pytest_solgate.judge import hosts, regression_rules, robust, wording
from pytest_solgate.judge.memory_probe import follows_probe, memory_moved, probe_ratios
from pytest_solgate.judge.robust import robust_values
from pytest_solgate.measure import clocks
from pytest_solgate.measure.backends import THREAD_CPU_TIME
from pytest_solgate.results import PASS, BaselineComparison, Measurement, Verdict
from pytest_solgate.support import stats
from pytest_solgate.support.settings import DEFAULT_MAX_REGRESSION

# A run-level value falls below the window's 99 % one-sided prediction bound by chance in 1 % of
# runs (normal log-SOL, independent runs): the false-alarm rate per measurement before the
# confirmation re-measure. Strict, because each false alarm costs a kernel engineer an afternoon.
STATISTIC = "t-prediction-99"
YOUNG_WINDOW = 10  # a window of fewer runs than this says from how many runs a drop within its floor would fail


@dataclass(frozen=True)
class JudgeSettings:
    gate: str = "fail"  # fail | warn | off
    above_one: str = "fail"  # fail | warn
    max_regression: float = DEFAULT_MAX_REGRESSION
    commit: str | None = None  # the commit being measured, for messages
    dirty: bool = False
    saved: bool = True  # False under --sol-no-save: nothing this run measures is kept, so none is "recorded"


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
    # How the run itself was judged against its window, as recorded (None where it was not):
    judged_change: float | None = None
    judged_floor: float | None = None
    judged_tolerance: float | None = None
    disturbed: str = ""  # "interrupted", "contended", "noisy" or "not-gated", as recorded ('' when none)
    timer: str = ""  # the clock its kernel was timed on (the record's timing_mode)
    probe_seconds: float | None = None  # the run's memory probe (measure/backends.py), when it had one
    sm_clock_mhz: float | None = None  # the mean SM clock over its timed region (GPU telemetry), when read
    wait: float | None = None  # contended: the share of its sampling window its thread waited for a CPU

    @property
    def kept_out(self) -> str:
        """Why this run is no baseline, or '' when it can be one. A contended run timed on its
        thread's CPU clock is one: a neighbour takes the core away, but while the thread ran that
        clock is the kernel's, so the machine's pressure cannot move it (its cache and memory
        traffic still can, and shows in the window's spread)."""
        if self.disturbed == "contended" and self.timer == THREAD_CPU_TIME:
            return ""
        return self.disturbed

    @property
    def slow(self) -> bool:
        """Judged `ambiguous` on a drop beyond its tolerance that no floor covered: it never widens a later floor."""
        return regression_rules.held_back_slow(self.verdict, self.judged_change, self.judged_floor, self.judged_tolerance)


@dataclass(frozen=True)
class BaselineWindow:
    """The last K clean runs of a measurement along the baseline ref's first-parent ancestry,
    newest first, chosen by ``pytest_solgate.record.baseline``."""

    runs: tuple[BaselineRun, ...]
    # Facts in which every run of the window differs from this run, e.g. "torch 2.12.0 -> 2.13.0".
    environment_differs: tuple[str, ...] = ()
    # Where the level began and what was left out of it (level.level), for the message.
    notes: tuple[str, ...] = ()
    # This machine's run-to-run noise from its other series (log-SOL standard deviation, degrees of
    # freedom), read from the history: what judges a drop against a window of one run.
    machine_noise: tuple[float, int] | None = None
    # The level's contended runs timed on wall time (newest first): never baselines, but what a run
    # as busy as they were is judged against (judge/like_pressure.py).
    busy: tuple[BaselineRun, ...] = ()
    # (least, most) wait for a CPU of the runs when they are busy runs of like pressure: judged like
    # with like, so no wait is taken out of the drop (regression_rules.contended).
    like_pressure: tuple[float, float] | None = None


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
    facts: wording.ComparisonFacts
    raw_change: float | None = None  # the SOL's own change, when ``change`` is relative to the memory probe
    # The window's newest run was scored under other ceilings: they changed since the last run
    # (re-calibrated, raised, an edited profile). Said once, in this session; the window's older
    # runs may be compared on time for several sessions more, and that is not news.
    ceilings_changed: bool = False

    @property
    def text(self) -> str:
        return wording.comparison_text(self.facts)

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
            ceilings_changed=self.ceilings_changed,
        )


def _run_value(m: Measurement, run: BaselineRun) -> tuple[float, bool]:
    """A baseline run's SOL, made comparable with ``m``: when the ceilings differ (a re-calibrated
    CPU, an edited profile) its SOL is not, so its time is scored against ``m``'s T_SOL instead."""
    if run.ceilings_id and m.ceilings_id and run.ceilings_id != m.ceilings_id:
        return (m.score.t_sol / run.seconds if run.seconds > 0 else 0.0), True
    return run.sol, False


def _noise_kind(widening: Sequence[int], within: float, tolerance: float) -> str:
    """What to do about a drop the window's noise cannot tell from a regression, from the evidence:
    a mixed window, the runs' own noise, or noise between runs that the runs themselves do not show."""
    if widening:
        return wording.MIXED_WINDOW
    if stats.Z_99 * within >= tolerance:
        return wording.NOISE_WITHIN_RUNS
    return wording.NOISE_BETWEEN_RUNS


def _clock_moved(m: Measurement, runs: Sequence[BaselineRun]) -> tuple[float, float, float] | None:
    """(moved, this run's MHz, the window's MHz) when this unlocked run's SM clock over its timed
    region lies more than clocks.CLOCK_MOVED from its window's; None otherwise (a locked run's
    clock is held)."""
    if str(m.environment.get(clocks.ENVIRONMENT_KEY, "")).startswith("locked"):
        return None
    head_mhz = m.timing.sm_clock_mhz
    moved = clocks.clock_moved(head_mhz, [run.sm_clock_mhz for run in runs])
    if moved is None or head_mhz is None:
        return None
    return moved, head_mhz, head_mhz / (1 + moved)


def machine_bound_99(sd: float, df: int) -> float:
    """How far one run falls below one other run of an unchanged kernel in 1 % of cases, at the
    machine's run-to-run standard deviation ``sd`` known with ``df`` degrees of freedom: both runs
    are draws, so their difference has sd * sqrt(2)."""
    return stats.t_quantile_99(df) * sd * math.sqrt(2)


def _fails_from(drop_log: float, sd: float, runs: int, head_term: float) -> int | None:
    """The fewest runs (up to YOUNG_WINDOW) whose floor at spread ``sd`` this drop would clear, or None."""
    return next((count for count in range(runs + 1, YOUNG_WINDOW + 1)
                 if math.hypot(stats.prediction_bound_99(sd, count), head_term) < drop_log), None)


@dataclass(frozen=True)
class _Values:
    """The window's runs as values comparable with this run (log SOL; ``values`` relative to the
    memory probe where the runs follow it), and their own precision."""

    raw: list[float]  # each run's log SOL (nan where unusable), made comparable with this run's ceilings
    values: list[float]  # the same, or relative to the memory probe (``relative``)
    usable: list[int]  # the runs with a value
    within: float  # the runs' median within-run precision, a standard deviation (log)
    relative: bool  # compared relative to the memory probe
    by_time: bool  # some run scored under other ceilings: compared on time


def _window_values(m: Measurement, window: BaselineWindow) -> _Values:
    raw, by_time = [], False
    for run in window.runs:
        value, timed = _run_value(m, run)
        by_time = by_time or timed
        raw.append(math.log(value) if value > 0 else math.nan)
    usable = [i for i, v in enumerate(raw) if math.isfinite(v)]
    # Within-run precision is a 95 % half-width: divided by Z_95 it is a standard deviation.
    within_list = [run.noise / stats.Z_95 for run in window.runs if math.isfinite(run.noise)]
    within = stats.median(within_list) if within_list else 0.0
    values, relative = raw, False
    ratios = probe_ratios(m, [run.probe_seconds for run in window.runs])
    if ratios is not None:
        # each run's SOL as it would have read at this run's memory speed
        scaled = [v + math.log(ratio) for v, ratio in zip(raw, ratios)]
        relative = follows_probe([raw[i] for i in usable], [scaled[i] for i in usable], within)
        values = scaled if relative else raw
    return _Values(raw, values, usable, within, relative, by_time)


@dataclass(frozen=True)
class _Spread:
    """This run against the window's kept runs: the change, the spread and the noise floor."""

    keep: list[int]
    left_out: list[int]  # runs far off the others (robust_values)
    centre: float
    change: float
    spread: float | None  # run-to-run standard deviation (log); None when unknown
    floor_log: float | None
    raw_change: float | None = None
    fleet: hosts.HostSpread | None = None


def _spread(m: Measurement, window: BaselineWindow, v: _Values, head_term: float) -> _Spread:
    sol = m.score.sol
    if not v.usable or sol <= 0:
        return _Spread(v.usable, [], math.exp(v.values[v.usable[0]]) if v.usable else 0.0, 0.0, None, None)
    keep, left_out, spread, floor_log, fleet = v.usable, [], None, None, None
    if len(v.usable) >= 2:
        keep_local, sd_kept = robust_values([v.values[i] for i in v.usable], v.within)
        keep = [v.usable[i] for i in keep_local]
        left_out = [v.usable[i] for i in range(len(v.usable)) if i not in keep_local]
        # runners of one environment differ (judge/hosts.py): this run's may be one the window never saw
        fleet = hosts.between_hosts([v.values[i] for i in keep], [window.runs[i].environment.get("host", "") for i in keep],
                                    str(m.environment.get("host", "")))
        spread = max(sd_kept, v.within, fleet.sd if fleet else 0.0)
        window_term = stats.prediction_bound_99(spread, len(keep)) if len(keep) >= 2 else None
        floor_log = math.hypot(window_term, head_term) if window_term is not None else None
    elif window.machine_noise is not None:
        spread = max(window.machine_noise[0], v.within)
        floor_log = math.hypot(machine_bound_99(spread, window.machine_noise[1]), head_term)
    centre_log = stats.mean([v.values[i] for i in keep])
    raw_change = math.exp(math.log(sol) - stats.mean([v.raw[i] for i in keep])) - 1 if v.relative else None
    return _Spread(keep, left_out, math.exp(centre_log), math.exp(math.log(sol) - centre_log) - 1, spread, floor_log,
                   raw_change, fleet)


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
    v = _window_values(m, window)
    # This run's own precision, when it is worse than usual (a disturbed block of samples),
    # widens the bound too: in quadrature, at the normal 99 % quantile.
    head_term = stats.Z_99 * m.timing.noise / stats.Z_95 if math.isfinite(m.timing.noise) else 0.0
    got = _spread(m, window, v, head_term)
    floor = None if got.floor_log is None else 1 - math.exp(-got.floor_log)

    def runs_at(indices: Sequence[int]) -> tuple[tuple[str, float], ...]:
        return tuple((window.runs[i].commit, math.exp(v.values[i])) for i in indices)

    # Whether it was compared on time (the ceilings changed) is said once, in the session they changed (run.py).
    facts = wording.ComparisonFacts(
        label=wording.label(m), verdict=PASS.value, change=got.change, tolerance=tolerance, floor=floor, sol=m.score.sol,
        centre=got.centre, commit=settings.commit or "", dirty=settings.dirty, newest=window.runs[0].commit,
        oldest=window.runs[-1].commit, window_runs=len(window.runs), notes=window.notes, left_out=runs_at(got.left_out),
        clock=_clock_moved(m, [window.runs[i] for i in got.keep]), raw_change=got.raw_change, runs=len(got.keep),
        hosts=got.fleet, machine_spread=got.spread if len(got.keep) == 1 and window.machine_noise is not None else None,
    )
    shift, probe_range = memory_moved(m, [window.runs[i].probe_seconds for i in got.keep])
    evidence = regression_rules.Evidence(
        change=got.change, tolerance=tolerance, floor_log=got.floor_log, environment_differs=window.environment_differs,
        contended=m.contended, contended_wait=m.contended_wait, timer=m.timing.mode, probe_shift=shift,
        probe_range=probe_range, like_pressure=window.like_pressure is not None,
        within_noise=(_within_noise(v.values, got.keep, v.within, got.spread or 0.0, got.change, tolerance, head_term,
                                    runs_at) if got.change < -tolerance and got.floor_log is not None else {}),
    )
    ruling = regression_rules.rule(evidence)
    said = dataclasses.replace(facts, verdict=ruling.verdict.value, held_back=ruling.held_back, **(ruling.facts or {}))
    return Comparison(ruling.verdict, got.change, got.centre, got.spread, floor, window, "time" if v.by_time else "sol",
                      said, got.raw_change, _run_value(m, window.runs[0])[1])  # the window is newest first


def _within_noise(values: Sequence[float], keep: Sequence[int], within: float, spread: float, change: float,
                  tolerance: float, head_term: float, runs_at: Callable[[Sequence[int]], tuple[tuple[str, float], ...]]) -> wording.RulingFacts:
    """The words of a drop within the floor: which noise, the runs that widen it, from how many runs it would fail."""
    widening = robust.widening(values, keep, within)
    return wording.RulingFacts(noise=_noise_kind(widening, within, tolerance), widening=runs_at(widening), within=within,
                               spread=spread, fails_from=_fails_from(abs(math.log1p(change)), spread, len(keep), head_term))
