"""Judge (the gate's story of a series): the changes a measurement's series shows, the falls the
gate failed, and where its current level begins: told once, here, for the gate's window
(judge/level.py), ``solgate compare`` and ``solgate bisect`` (``along``: the series read along a
first-parent chain), and ``solgate history --changes`` and the trend page (``series_story``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pytest_solgate.judge import changepoints
from pytest_solgate.judge.changepoints import MIN_CHANGE
from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.results import CommitPoint
from pytest_solgate.support import stats


@dataclass(frozen=True)
class Point:
    """One commit of a series (oldest first): what the gate's story is told from."""

    sol: float | None  # the commit's value (the median SOL of its undisturbed runs); None: none
    runs: int = 0  # the runs recorded at the commit
    # For each run the gate failed there as regressed: the index of the newest commit of the window
    # it was judged against (-1: older than the series, or not known).
    regressed: tuple[int, ...] = ()


@dataclass(frozen=True)
class Story:
    """The gate's story of one series: the changes it saw, the ones it failed, where the level is."""

    changes: changepoints.Changes  # steps and outliers (indices into the points), failed commits named
    failed: frozenset[int]  # confirmed steps whose level the gate failed: no new level until reverted or accepted
    start: int | None  # where the current level begins: the newest confirmed step the gate did not fail
    apart: tuple[int, ...] = ()  # commits where the gate failed some run that the changes do not list


def story(points: Sequence[Point], min_change: float = MIN_CHANGE) -> Story:
    """The one account of a series: the gate's window (``level``), ``solgate compare`` and
    ``solgate bisect`` (``along``: the series read along a first-parent chain), and
    ``solgate history --changes`` and the trend page (``series_story``: the history's series) all
    tell it through here. A commit where the gate failed every run is named (a step, or an outlier
    when the next commits undid it) even where the series alone would not show it."""
    every_run_failed = [i for i, p in enumerate(points) if p.runs and len(p.regressed) >= p.runs]
    # main stays red after a fall: the commits failed after it are the same fall, named once
    measured = [i for i, p in enumerate(points) if p.runs]
    before = {i: measured[k - 1] for k, i in enumerate(measured) if k}
    falls = [i for i in every_run_failed if before.get(i) not in every_run_failed]
    changes = changepoints.find([p.sol for p in points], min_change, falls)
    confirmed = [cp.index for cp in changes.points if not cp.provisional]
    failed = _gated_falls([(i, against) for i, p in enumerate(points) for against in p.regressed], confirmed)
    moved = [index for index in confirmed if index not in failed]
    listed = {cp.index for cp in changes.points} | {o.index for o in changes.outliers}
    apart = tuple(i for i, p in enumerate(points) if p.regressed and i not in listed)
    return Story(changes, frozenset(failed), max(moved) if moved else None, apart)


def series_story(points: Sequence[CommitPoint], min_change: float = MIN_CHANGE) -> Story:
    """The story of a series as the history lists it (store.commit_series: one point per commit
    with the verdicts of its runs). Which window a failed run was judged against is not listed
    there: it reads as older than the series."""
    return story([Point(p["sol"], len(p.get("verdicts", ())), tuple(-1 for v in p.get("verdicts", ()) if v == "regressed"))
                  for p in points], min_change)


def chain_position(commits: Sequence[str]) -> Callable[[str], int]:
    """A commit's position on the chain (``commits``, nearest first); one off it reads as the oldest."""
    position = {commit: i for i, commit in enumerate(commits)}
    return lambda commit: position.get(commit, len(commits)) if commit else len(commits)


def chain_points(runs: Sequence[BaselineRun], commits: Sequence[str]) -> tuple[list[Point], int]:
    """The series of ``runs`` read along a first-parent chain (``commits`` nearest first, runs as
    the store returns them): one point per chain position, oldest first, from the oldest position
    with a run to the chain's first commit; and that oldest position (point i is position oldest - i)."""
    at = chain_position(commits)
    oldest = max((at(run.commit) for run in runs), default=-1)
    by_commit: dict[int, list[float]] = {}
    failed: dict[int, list[int]] = {}
    count: dict[int, int] = {}
    for run in runs:
        where = at(run.commit)
        count[where] = count.get(where, 0) + 1
        if not run.kept_out:
            by_commit.setdefault(where, []).append(run.sol)
        if run.verdict == "regressed":
            failed.setdefault(where, []).append(max(oldest - at(run.judged_against), -1))
    points = [Point(stats.median(by_commit[w]) if w in by_commit else None, count.get(w, 0), tuple(failed.get(w, ())))
              for w in range(oldest, -1, -1)]
    return points, oldest


@dataclass(frozen=True)
class Step:
    """A change point of the story told along a first-parent chain, named by its commits."""

    commit: str  # the first commit of the new level
    since: str  # the newest commit the series read before it ('' when none, or off the chain)
    point: changepoints.ChangePoint  # the levels on either side, provisional, named by the gate
    failed: bool = False  # a fall the gate failed: no new level until it is reverted or accepted


@dataclass(frozen=True)
class Told:
    """The gate's story of one measurement along a first-parent chain (``along``), by commit."""

    steps: tuple[Step, ...] = ()  # oldest first
    red: Step | None = None  # the fall the gate failed that the chain's first commit is still below
    unavailable: str = ""  # why no story could be told (change points need ruptures)


def along(runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str] = (),
          min_change: float = MIN_CHANGE) -> Told:
    """``story`` of the runs read along a first-parent chain (``commits`` nearest first), as
    ``level`` tells it to the gate, with each step named by its commit: what ``solgate compare``
    and ``solgate bisect`` say of the commits between the two they are given. ``red``: the newest
    confirmed step when it is a fall the gate failed, neither reverted (a rise after it, provisional
    at the chain's first commit or not) nor accepted (a commit of ``accepted`` at or after it)."""
    points, oldest = chain_points(runs, commits)
    try:
        told = story(points, min_change)
    except changepoints.ChangePointsUnavailable as exc:
        return Told(unavailable=str(exc))

    def name(i: int | None) -> str:
        return commits[oldest - i] if i is not None and 0 <= oldest - i < len(commits) else ""

    read = [i for i, p in enumerate(points) if p.sol is not None and p.sol > 0]
    steps = tuple(Step(name(cp.index), name(max((i for i in read if i < cp.index), default=None)), cp,
                       cp.index in told.failed) for cp in told.changes.points)
    at = chain_position(commits)
    confirmed = [step for step in steps if not step.point.provisional]
    red = confirmed[-1] if confirmed and confirmed[-1].failed else None
    if red is not None and (any(step.point.provisional and step.point.change > 0 for step in steps)
                            or any(at(commit) <= at(red.commit) for commit in accepted if commit in commits)):
        red = None
    return Told(steps, red)


def _gated_falls(regressed: Sequence[tuple[int, int]], changes: Sequence[int]) -> set[int]:
    """The change points whose level the gate failed: a run of that level (the change's commit or a
    later one before the next change) was judged ``regressed`` against a level before it
    (``regressed``: each such run's index and that of its window's newest commit). Red for as long
    as the lookback reaches: after about LEVEL_LOOKBACK commits at the fallen level no run of the
    old one is read."""
    bounds = sorted(changes)
    later = [*bounds[1:], float("inf")]
    return {change for change, next_change in zip(bounds, later)
            if any(change <= where < next_change and against < change for where, against in regressed)}
