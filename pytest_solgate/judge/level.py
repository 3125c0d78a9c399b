"""Judge (the baseline level): which recorded runs a measurement is judged against, and the gate's
story over a series of commits. Pure functions over runs: facts in, facts out; record/baseline.py
reads the runs and the accepts, and passes them here.

A baseline is a window over **one level of one series**: the last K clean runs of the same test,
measurement name, profile and ceilings mode along the first-parent ancestry of the baseline ref,
newest first, taken only from the commits since the level began:

- the level begins at the last *confirmed* change point of the series (changepoints.py; a step at
  the newest commit is provisional and does not move it), or at the newest accepted slowdown
  (``solgate accept``), whichever is nearer;
- runs that were interrupted, contended or noisy are recorded but never in a window;
- a run judged ``regressed`` against this same level is not a baseline (one regression must not
  widen the window until it is reverted), and neither is one judged ``ambiguous`` on a drop beyond
  its tolerance (a slowdown the floor could not yet tell apart must not widen the floor that the
  next runs are judged against: a real one fails as soon as the window can tell); a confirmed
  change point whose runs the gate failed as
  ``regressed`` does not start a new level: main stays red, every later message naming the commit
  where the level fell, until it is reverted (a later change point) or accepted;
- the runs of a one-commit excursion (an outlier of the series) are left out.

Like with like: when at least two runs of the window ran in this run's environment
(``environment.BASELINE_KEYS``), only those are kept; otherwise the window is kept whole and the
differences are named (``select``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from pytest_solgate.judge import changepoints, like_pressure
from pytest_solgate.judge.changepoints import MIN_CHANGE
from pytest_solgate.judge.story import (  # noqa: F401 (the story's names, as compare, bisect and the tests read them here)
    Point,
    Step,
    Story,
    Told,
    along,
    chain_points,
    chain_position,
    series_story,
    story,
)
from pytest_solgate.judge.window import BaselineRun, BaselineWindow
from pytest_solgate.measure import environment

MIN_SAME_ENVIRONMENT = 2  # runs of this environment needed to drop the others from a window
MIN_QUIET = 3  # runs not flagged noisy needed to leave the noisy ones out of a window
MIN_RUNS_TO_FAIL = 2  # clean baseline runs before a drop can be `regressed`: one run shows no spread
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")


@dataclass(frozen=True)
class Level:
    """The current level of one measurement's series: its baseline runs and what was said of it."""

    kept: list[BaselineRun]  # the window's runs, newest first (at most the window's size)
    notes: tuple[str, ...]  # where the level began, what was left out and why
    # The level's contended runs timed on wall time (newest first): no baselines, but a run as busy
    # as they were may be judged against those that waited as much (judge/like_pressure.py).
    busy: tuple[BaselineRun, ...] = ()


@dataclass(frozen=True)
class _Start:
    """Where the current level begins on the chain (runs at positions <= ``at`` are in it), and why."""

    at: int
    since: str  # '' (the whole chain), "the last confirmed change point" or "the accepted slowdown"
    outliers: frozenset[int]  # chain positions of one-commit excursions
    unavailable: tuple[str, ...]  # why change points could not be told, when they could not


def _level_start(runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str],
                 min_change: float) -> _Start:
    """The level's start: the nearest confirmed change the gate did not fail, or the newest
    accepted slowdown, whichever is nearer (the whole chain when neither)."""
    position = {commit: i for i, commit in enumerate(commits)}
    points, oldest = chain_points(runs, commits)
    start = len(commits)
    unavailable: tuple[str, ...] = ()
    try:
        told = story(points, min_change)
    except changepoints.ChangePointsUnavailable as exc:
        told, unavailable = Story(changepoints.Changes(), frozenset(), None), (f"one level not told apart: {exc}",)
    if told.start is not None:
        start = oldest - told.start
    since = "the last confirmed change point" if told.start is not None else ""
    for commit in accepted:
        if commit in position and position[commit] < start:
            start, since = position[commit], "the accepted slowdown"
    return _Start(start, since, frozenset(oldest - o.index for o in told.changes.outliers), unavailable)


def level(
    runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str], window_size: int,
    min_change: float = MIN_CHANGE, inherit: bool = False,
) -> tuple[list[BaselineRun], tuple[str, ...]]:
    """The baseline runs of the current level (newest first, at most ``window_size``) among
    ``runs`` (nearest commit first, as the store returns them), and what was left out and why:
    ``level_runs``'s, without the level's busy runs."""
    found = level_runs(runs, commits, accepted, window_size, min_change, inherit)
    return found.kept, found.notes


def level_runs(
    runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str], window_size: int,
    min_change: float = MIN_CHANGE, inherit: bool = False,
) -> Level:
    """The current level (``Level``) of ``runs`` (nearest commit first, as the store returns them).

    ``commits`` is the first-parent chain the runs were read along (nearest first); ``accepted``
    the commits where a slowdown of this measurement was accepted. ``inherit`` (a pull request's
    run): where the level fell in the base and stayed down, the window is the base's level since
    the fall, so that the verdict is about the PR's own change and the fall is named, not failed.
    """
    at = chain_position(commits)
    start = _level_start(runs, commits, accepted, min_change)
    sorted_out = _sort_out(runs, at, start)
    kept, left, unavailable = sorted_out.kept, sorted_out.left, start.unavailable
    # A run flagged noisy (its time budget ran out before the noise target) still has a value, and
    # its precision widens the floor: it is left out only when enough quiet runs form a window.
    if len(kept) >= MIN_QUIET:
        if sorted_out.noisy:
            left["noisy"] = len(sorted_out.noisy)
    elif sorted_out.noisy:
        order = {id(r): i for i, r in enumerate(runs)}
        kept = sorted(kept + sorted_out.noisy, key=lambda r: order[id(r)])
        return _finish(kept[:window_size], commits, start, left,
                       (f"{len(sorted_out.noisy)} runs flagged noisy kept: too few quiet ones", *unavailable), sorted_out.busy)
    fell_at = _fell_at(min((at(run.commit) for run in kept), default=len(commits)), sorted_out.fell)
    if fell_at is None:
        return _finish(kept[:window_size], commits, start, left, unavailable, sorted_out.busy)
    commit = run_commit(commits, fell_at)
    if inherit:
        since_fall = [run for run in runs if not run.kept_out and at(run.commit) <= fell_at]
        return Level(since_fall[:window_size], (
            f"the level fell at {commit} in the base (regressed there, neither reverted nor accepted): "
            f"inherited, not this change's; compared with the base's level since", *unavailable))
    return _finish(kept[:window_size], commits, start, left, (
        f"the level fell at {commit} (regressed there, neither reverted nor accepted: revert it, or "
        f"`solgate accept {commit}` if the slowdown is meant)", *unavailable), sorted_out.busy)


@dataclass(frozen=True)
class _SortedOut:
    """The level's runs sorted by what they can be: baselines, noisy, busy, or left out (counted by why)."""

    kept: list[BaselineRun]
    noisy: list[BaselineRun]
    busy: tuple[BaselineRun, ...]
    left: dict[str, int]
    fell: list[int]  # chain positions of the runs left out as regressed


def _sort_out(runs: Sequence[BaselineRun], at: Callable[[str], int], start: _Start) -> _SortedOut:
    kept: list[BaselineRun] = []
    noisy: list[BaselineRun] = []
    busy: list[BaselineRun] = []
    left: dict[str, int] = {}
    fell: list[int] = []
    for run in runs:
        where = at(run.commit)
        if where > start.at:
            continue  # an older level
        this_level = at(run.judged_against) <= start.at
        judged_out = ("regressed" if run.verdict == "regressed" and this_level else
                      "ambiguous slow" if run.slow and this_level else
                      "outlier" if where in start.outliers else "")
        why = run.kept_out or judged_out
        if run.verdict == "regressed" and this_level:  # also a disturbed run's: it was reported so
            fell.append(where)
        if not judged_out and like_pressure.judges_as_busy(run):
            busy.append(run)  # a busy run on wall time, as busy runs judge each other (like_pressure.py)
        if why == "noisy":
            noisy.append(run)
        elif why:
            left[why] = left.get(why, 0) + 1
        else:
            kept.append(run)
    return _SortedOut(kept, noisy, tuple(busy), left, fell)


def _fell_at(newest_kept: int, fell: Sequence[int]) -> int | None:
    """Where the level fell and stayed down (a chain position): the oldest of the runs left out as
    regressed (``fell``) that is newer than the newest run read at the level (``newest_kept``; a
    revert, or an accept, ends a fall, and a re-landing after a revert is a fall of its own).
    Every later message names it, so that an innocent commit on top is not blamed."""
    since = [where for where in fell if where < newest_kept]
    return max(since) if since else None


def is_pull_request(event_name: str) -> bool:
    """Whether a run gates a pull request, from the CI's event name (GitHub's GITHUB_EVENT_NAME,
    read by the caller): docs/pull-requests.md."""
    return event_name in PULL_REQUEST_EVENTS


def _finish(kept: list[BaselineRun], commits: Sequence[str], start: _Start, left: dict[str, int],
            extra: tuple[str, ...], busy: tuple[BaselineRun, ...]) -> Level:
    notes = [f"level since {start.since} at {run_commit(commits, start.at)}"] if start.since else []
    notes += [f"{count} {why} run{'s' if count != 1 else ''} left out" for why, count in left.items()]
    return Level(kept, (*notes, *extra), busy)


def run_commit(commits: Sequence[str], at: int) -> str:
    return commits[at][:10] if 0 <= at < len(commits) else "?"


def _same_environment(runs: Sequence[BaselineRun], head_environment: Mapping[str, str]) -> list[BaselineRun]:
    return [r for r in runs
            if not environment.differences(dict(head_environment), dict(r.environment), environment.BASELINE_KEYS)]


def select(runs: Sequence[BaselineRun], head_environment: Mapping[str, str], notes: Sequence[str] = (),
           busy: Sequence[BaselineRun] = ()) -> BaselineWindow | None:
    """Keep the runs of this environment when there are enough of them; else keep all, and name
    what differs between this run and the newest baseline run of another environment (its host
    too: a changed torch on another runner names both). Of the level's busy runs only those of
    this environment are kept: they are judged against only as like with like."""
    busy_here = tuple(_same_environment(busy, head_environment))
    if not runs:
        return BaselineWindow(runs=(), notes=tuple(notes), busy=busy_here) if busy_here else None
    same = _same_environment(runs, head_environment)
    if len(same) >= MIN_SAME_ENVIRONMENT or len(same) == len(runs):
        return BaselineWindow(runs=tuple(same), notes=tuple(notes), busy=busy_here)
    other = next(r for r in runs if r not in same)
    differs = environment.differences(dict(head_environment), dict(other.environment))
    return BaselineWindow(runs=tuple(runs), environment_differs=tuple(differs), notes=tuple(notes), busy=busy_here)


def window(runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str], window_size: int,
           head_environment: Mapping[str, str], min_change: float = MIN_CHANGE,
           inherit: bool = False) -> BaselineWindow | None:
    """One measurement's baseline window: the current level's runs (``level_runs``), then those
    that can be compared with HEAD's environment (``select``). What the plugin and ``solgate
    compare`` both judge against. A window may hold no baseline run but the level's busy runs: a
    run as busy as they were is judged against them (judge/like_pressure.py), no other."""
    found = level_runs(runs, commits, accepted, window_size, min_change, inherit)
    return select(found.kept, head_environment, found.notes, found.busy[:window_size])
