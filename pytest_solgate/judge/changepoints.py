"""Judge (over the history): the commits where a measurement's SOL stepped, and the ones that glitched.

PELT (Killick, Fearnhead and Eckley, 2012) from the maintained ``ruptures`` library, on the log of
SOL (timing noise is multiplicative), one value per commit. It runs as ``KernelCPD`` with a linear
kernel: the same L2 cost and the same answer as ``Pelt(model="l2")``, computed in C (a 10,000-commit
series takes well under 0.5 s; benchmarks/history_scale.py). The penalty is
``6 * sigma^2 * log(n)``, three times the BIC-like ``2 * sigma^2 * log(n)``, with sigma estimated
robustly from successive differences (a step moves one difference, not the median of them): 0 false
change points per 200-commit A/A series (benchmarks/changepoints.py, docs/history.md).

A segment may be one commit long, and what such a segment means depends on where it is:

- at the newest commit it is a step **at that commit**, marked ``provisional``: the next commit
  confirms it (or shows it was a glitch). The newest commit is also tested on its own (it is one
  position, not n, so it does not pay the log(n) penalty): a value NEWEST_Z robust sigmas off its
  level's prediction interval is a provisional step there;
- anywhere else it is a one-commit excursion: an ``Outlier``, not two steps, when the levels on
  either side of it do not differ significantly; when they do, the commit joins the side it is
  closer to and one step remains.

Steps smaller than ``min_change`` (default 2.5 %, half the gate's default 5 % tolerance) are not
listed: on a quiet runner PELT finds a real 1 % step, but nobody should be paged for it. Zero,
negative and missing values (a kernel that failed, an import without SOL) cannot be logged: they
are skipped, and the result names them. ``ruptures`` is a dependency of the default install,
imported only here (so that the measure and report paths run without it, as on the device machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Sequence

from pytest_solgate.support import stats
from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.settings import DEFAULT_MIN_CHANGE

MIN_POINTS = 3  # fewer commits than this cannot show a step with a commit on each side
MIN_SIGMA = 1e-3  # a perfectly flat series still gets a finite penalty
PENALTY_FACTOR = 6.0
NEWEST_Z = 4.0  # robust sigmas off its level that make the newest value a provisional step (p < 0.0001)
MIN_CHANGE = DEFAULT_MIN_CHANGE  # steps smaller than this are not listed (--sol-min-change, sol_min_change)


class ChangePointsUnavailable(SolgateError):
    pass


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new level (an index into the values given)
    before: float  # SOL level before (geometric mean of the segment)
    after: float  # SOL level from ``index`` on
    provisional: bool = False  # the step is at the newest commit: the next commit confirms it
    by_gate: bool = False  # listed because the gate failed the commit as regressed (see ``find``)

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before > 0 else 0.0


@dataclass(frozen=True)
class Outlier:
    """One commit off its level on both sides: a glitch (a disturbed run), not a step."""

    index: int
    value: float
    level: float  # the level around it

    @property
    def change(self) -> float:
        return self.value / self.level - 1 if self.level > 0 else 0.0


@dataclass(frozen=True)
class Changes:
    points: tuple[ChangePoint, ...] = ()
    outliers: tuple[Outlier, ...] = ()
    skipped: tuple[int, ...] = ()  # indices of zero, negative or missing values, left out

    @property
    def note(self) -> str:
        """What a reader should know about the values left out, or ''."""
        if not self.skipped:
            return ""
        count = len(self.skipped)
        return f"{count} commit{'s' if count != 1 else ''} without a positive SOL skipped (zero or missing)"


def _ruptures() -> ModuleType:  # ruptures ships no types: what it gives is read as Any
    try:
        import ruptures
    except ImportError:
        raise ChangePointsUnavailable(
            "change points need the ruptures library, a dependency of pytest-solgate missing here: pip install ruptures"
        ) from None
    return ruptures


def _usable(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def robust_sigma(logs: Sequence[float]) -> float:
    """The noise of a series from the MAD of its successive differences (a step moves one of them)."""
    differences = [b - a for a, b in zip(logs, logs[1:])]
    centre = stats.median(differences)
    mad = stats.median([abs(d - centre) for d in differences])
    return max(mad / 0.6745 / math.sqrt(2), MIN_SIGMA)


def _split_pays(left: Sequence[float], right: Sequence[float], penalty: float) -> bool:
    """Whether two adjacent segments are two levels: the L2 cost saved by splitting them beats the
    penalty of one more change point (the criterion PELT minimises)."""
    a, b = len(left), len(right)
    gap = stats.mean(left) - stats.mean(right)
    return a * b / (a + b) * gap * gap > penalty


def find(values: Sequence[float | None], min_change: float = MIN_CHANGE, regressed: Sequence[int] = ()) -> Changes:
    """Change points and outliers of a SOL series (one value per commit, oldest first).

    ``regressed`` are the indices of commits whose runs the gate failed as ``regressed``
    (confirmed against their window): the gate and the history tell one story, so each of them is
    named, as a step there (provisional at the newest commit) or as an outlier, even where the
    series alone would not show it (the newest-commit test needs NEWEST_Z sigmas of the whole
    series; the gate's window, its last K runs, can be quieter)."""
    kept = [i for i, v in enumerate(values) if _usable(v)]
    skipped = tuple(i for i, v in enumerate(values) if not _usable(v))
    if len(kept) < MIN_POINTS:
        return Changes(skipped=skipped)
    logs = [math.log(values[i]) for i in kept]  # type: ignore[arg-type]
    n = len(logs)
    penalty = PENALTY_FACTOR * robust_sigma(logs) ** 2 * math.log(n)
    segments = _segments(logs, penalty)
    outliers = _settle_one_commit_segments(segments, logs, penalty)
    _merge_small_steps(segments, logs, outliers, min_change)
    _split_off_the_newest(segments, logs, outliers, min_change)
    by_gate = _name_what_the_gate_failed(segments, outliers, logs, [kept.index(i) for i in regressed if i in kept])

    def level(segment: list[int]) -> float:
        return _level(segment, logs, outliers)

    points = tuple(
        ChangePoint(
            index=kept[b[0]],
            before=math.exp(level(a)),
            after=math.exp(level(b)),
            provisional=b == [n - 1],
            by_gate=b[0] in by_gate,
        )
        for a, b in zip(segments, segments[1:])
    )
    found_outliers = tuple(
        Outlier(index=kept[j], value=math.exp(logs[j]), level=math.exp(level(next(s for s in segments if j in s))))
        for j in sorted(outliers)
    )
    return Changes(points=points, outliers=found_outliers, skipped=skipped)


def _segments(logs: Sequence[float], penalty: float) -> list[list[int]]:
    """The levels PELT's criterion finds (ruptures' KernelCPD, linear kernel), as positions into ``logs``."""
    ruptures = _ruptures()
    import numpy

    signal = numpy.asarray(logs, dtype=float).reshape(-1, 1)
    ends = [int(e) for e in ruptures.KernelCPD(kernel="linear", min_size=1, jump=1).fit(signal).predict(pen=penalty)]
    return [list(range(a, b)) for a, b in zip([0, *ends], ends)]


def _level(segment: list[int], logs: Sequence[float], outliers: set[int]) -> float:
    """A segment's level: the mean log of its commits that are not outliers."""
    return stats.mean([logs[j] for j in segment if j not in outliers])


def _settle_one_commit_segments(segments: list[list[int]], logs: Sequence[float], penalty: float) -> set[int]:
    """One-commit segments before the newest commit, merged in place: a glitch (an outlier, returned)
    when the two sides are one level, else the commit belongs to the side it is closer to."""
    outliers: set[int] = set()
    if len(segments) > 1 and len(segments[0]) == 1:  # the oldest commit alone: off the level after it
        outliers.add(segments[0][0])
        segments[0:2] = [segments[0] + segments[1]]
    i = 1
    while i < len(segments) - 1:
        if len(segments[i]) != 1:
            i += 1
            continue
        (point,) = segments[i]
        left, right = segments[i - 1], segments[i + 1]
        left_logs, right_logs = [logs[j] for j in left], [logs[j] for j in right]
        if not _split_pays(left_logs, right_logs, penalty):
            outliers.add(point)
            segments[i - 1:i + 2] = [left + [point] + right]
            continue
        nearer_left = abs(logs[point] - stats.mean(left_logs)) <= abs(logs[point] - stats.mean(right_logs))
        if nearer_left:
            segments[i - 1:i + 1] = [left + [point]]
        else:
            segments[i:i + 2] = [[point] + right]
        i = max(i - 1, 1)
    return outliers


def _merge_small_steps(segments: list[list[int]], logs: Sequence[float], outliers: set[int],
                       min_change: float) -> None:
    """Steps too small to list, merged away in place, the smallest first, so each level is recomputed."""
    while len(segments) > 1:
        steps = [abs(_level(b, logs, outliers) - _level(a, logs, outliers)) for a, b in zip(segments, segments[1:])]
        smallest = min(range(len(steps)), key=steps.__getitem__)
        if -math.expm1(-steps[smallest]) >= min_change:  # the relative change, read as a drop
            break
        segments[smallest:smallest + 2] = [segments[smallest] + segments[smallest + 1]]


def _split_off_the_newest(segments: list[list[int]], logs: Sequence[float], outliers: set[int],
                          min_change: float) -> None:
    """The newest commit as a provisional step, split off in place when its value lies outside its
    level's prediction interval (NEWEST_Z robust sigmas). It is one candidate position, not n:
    PELT's log(n) penalty, paid for searching every position, misses a step there that a single
    test sees."""
    last = segments[-1]
    if len(last) > MIN_POINTS - 1:
        rest = [logs[j] for j in last[:-1] if j not in outliers]
        gap = logs[-1] - stats.mean(rest)
        bound = NEWEST_Z * robust_sigma(logs) * math.sqrt(1 + 1 / len(rest))
        if abs(gap) > bound and -math.expm1(-abs(gap)) >= min_change:
            segments[-1:] = [last[:-1], [len(logs) - 1]]


def _name_what_the_gate_failed(segments: list[list[int]], outliers: set[int], logs: Sequence[float],
                               failed: Sequence[int]) -> set[int]:
    """Make every commit the gate failed (positions into ``logs``) the start of a step or an
    outlier, splitting ``segments`` in place; the positions that became a step for that reason.

    A failed commit inside a level becomes a step there, unless the commits after it in its level
    lie nearer the level before it than it (the slowdown was undone: a one-commit excursion, an
    outlier). The newest commit becomes a one-commit segment: a provisional step."""
    added: set[int] = set()
    for position in sorted(failed):
        if position in outliers or any(segment[0] == position for segment in segments[1:]):
            continue
        segment = next(s for s in segments if position in s)
        cut = segment.index(position)
        earlier = [logs[j] for j in segment[:cut] if j not in outliers]
        if not earlier:  # the first level of the series, or only outliers before it: no level to step from
            continue
        before = stats.mean(earlier)
        after = [logs[j] for j in segment[cut + 1:] if j not in outliers]
        if after and abs(stats.mean(after) - before) < abs(stats.mean(after) - logs[position]):
            outliers.add(position)
            continue
        where = segments.index(segment)
        segments[where:where + 1] = [segment[:cut], segment[cut:]]
        added.add(position)
    return added
