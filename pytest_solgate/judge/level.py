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
from typing import Any, Callable, Mapping, Sequence

from pytest_solgate.judge import changepoints
from pytest_solgate.judge.changepoints import MIN_CHANGE
from pytest_solgate.judge.window import BaselineRun, BaselineWindow
from pytest_solgate.measure import environment
from pytest_solgate.support import stats

MIN_SAME_ENVIRONMENT = 2  # runs of this environment needed to drop the others from a window
MIN_QUIET = 3  # runs not flagged noisy needed to leave the noisy ones out of a window
MIN_RUNS_TO_FAIL = 2  # clean baseline runs before a drop can be `regressed`: one run shows no spread
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")


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


def series_story(points: Sequence[Mapping[str, Any]], min_change: float = MIN_CHANGE) -> Story:
    """The story of a series as the history lists it (store.commit_series: one point per commit
    with the verdicts of its runs). Which window a failed run was judged against is not listed
    there: it reads as older than the series."""
    return story([Point(p["sol"], len(p.get("verdicts", ())), tuple(-1 for v in p.get("verdicts", ()) if v == "regressed"))
                  for p in points], min_change)


def _chain(commits: Sequence[str]) -> Callable[[str], int]:
    """A commit's position on the chain (``commits``, nearest first); one off it reads as the oldest."""
    position = {commit: i for i, commit in enumerate(commits)}
    return lambda commit: position.get(commit, len(commits)) if commit else len(commits)


def chain_points(runs: Sequence[BaselineRun], commits: Sequence[str]) -> tuple[list[Point], int]:
    """The series of ``runs`` read along a first-parent chain (``commits`` nearest first, runs as
    the store returns them): one point per chain position, oldest first, from the oldest position
    with a run to the chain's first commit; and that oldest position (point i is position oldest - i)."""
    at = _chain(commits)
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
    name = lambda i: commits[oldest - i] if i is not None and 0 <= oldest - i < len(commits) else ""  # noqa: E731
    read = [i for i, p in enumerate(points) if p.sol is not None and p.sol > 0]
    steps = tuple(Step(name(cp.index), name(max((i for i in read if i < cp.index), default=None)), cp,
                       cp.index in told.failed) for cp in told.changes.points)
    at = _chain(commits)
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


def level(
    runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str], window_size: int,
    min_change: float = MIN_CHANGE, inherit: bool = False,
) -> tuple[list[BaselineRun], tuple[str, ...]]:
    """The baseline runs of the current level (newest first, at most ``window_size``) among
    ``runs`` (nearest commit first, as the store returns them), and what was left out and why.

    ``commits`` is the first-parent chain the runs were read along (nearest first); ``accepted``
    the commits where a slowdown of this measurement was accepted. ``inherit`` (a pull request's
    run): where the level fell in the base and stayed down, the window is the base's level since
    the fall, so that the verdict is about the PR's own change and the fall is named, not failed.
    """
    position = {commit: i for i, commit in enumerate(commits)}
    at = _chain(commits)
    points, oldest = chain_points(runs, commits)
    start = len(commits)  # the chain position where the level begins: runs at positions <= start are in it
    unavailable: tuple[str, ...] = ()
    try:
        told = story(points, min_change)
    except changepoints.ChangePointsUnavailable as exc:
        told, unavailable = Story(changepoints.Changes(), frozenset(), None), (f"one level not told apart: {exc}",)
    if told.start is not None:
        start = oldest - told.start  # the nearest confirmed change the gate did not fail
    outliers = {oldest - o.index for o in told.changes.outliers}
    since = "the last confirmed change point" if told.start is not None else ""
    for commit in accepted:
        if commit in position and position[commit] < start:
            start, since = position[commit], "the accepted slowdown"

    kept: list[BaselineRun] = []
    noisy: list[BaselineRun] = []
    left: dict[str, int] = {}
    fell: list[int] = []  # chain positions of the runs left out as regressed
    for run in runs:
        where = at(run.commit)
        if where > start:
            continue  # an older level
        this_level = at(run.judged_against) <= start
        why = run.kept_out or (
            "regressed" if run.verdict == "regressed" and this_level else
            "ambiguous slow" if run.slow and this_level else
            "outlier" if where in outliers else ""
        )
        if run.verdict == "regressed" and this_level:  # also a disturbed run's: it was reported so
            fell.append(where)
        if why == "noisy":
            noisy.append(run)
        elif why:
            left[why] = left.get(why, 0) + 1
        else:
            kept.append(run)
    # A run flagged noisy (its time budget ran out before the noise target) still has a value, and
    # its precision widens the floor: it is left out only when enough quiet runs form a window.
    if len(kept) >= MIN_QUIET:
        if noisy:
            left["noisy"] = len(noisy)
    elif noisy:
        order = {id(r): i for i, r in enumerate(runs)}
        kept = sorted(kept + noisy, key=lambda r: order[id(r)])
        return _finish(kept[:window_size], commits, start, since, left,
                       (f"{len(noisy)} runs flagged noisy kept: too few quiet ones", *unavailable))
    fell_at = _fell_at(min((at(run.commit) for run in kept), default=len(commits)), fell)
    if fell_at is None:
        return _finish(kept[:window_size], commits, start, since, left, unavailable)
    commit = run_commit(commits, fell_at)
    if inherit:
        since_fall = [run for run in runs if not run.kept_out and at(run.commit) <= fell_at]
        return since_fall[:window_size], (
            f"the level fell at {commit} in the base (regressed there, neither reverted nor accepted): "
            f"inherited, not this change's; compared with the base's level since", *unavailable)
    return _finish(kept[:window_size], commits, start, since, left, (
        f"the level fell at {commit} (regressed there, neither reverted nor accepted: revert it, or "
        f"`solgate accept {commit}` if the slowdown is meant)", *unavailable))


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


def _finish(kept: list[BaselineRun], commits: Sequence[str], start: int, since: str, left: dict[str, int],
            extra: tuple[str, ...]) -> tuple[list[BaselineRun], tuple[str, ...]]:
    notes = [f"level since {since} at {run_commit(commits, start)}"] if since else []
    notes += [f"{count} {why} run{'s' if count != 1 else ''} left out" for why, count in left.items()]
    return kept, (*notes, *extra)


def run_commit(commits: Sequence[str], at: int) -> str:
    return commits[at][:10] if 0 <= at < len(commits) else "?"


def select(runs: Sequence[BaselineRun], head_environment: Mapping[str, str], notes: Sequence[str] = ()) -> BaselineWindow | None:
    """Keep the runs of this environment when there are enough of them; else keep all, and name
    what differs between this run and the newest baseline run of another environment (its host
    too: a changed torch on another runner names both)."""
    if not runs:
        return None
    same = [r for r in runs
            if not environment.differences(dict(head_environment), dict(r.environment), environment.BASELINE_KEYS)]
    if len(same) >= MIN_SAME_ENVIRONMENT or len(same) == len(runs):
        return BaselineWindow(runs=tuple(same), notes=tuple(notes))
    other = next(r for r in runs if r not in same)
    differs = environment.differences(dict(head_environment), dict(other.environment))
    return BaselineWindow(runs=tuple(runs), environment_differs=tuple(differs), notes=tuple(notes))


def window(runs: Sequence[BaselineRun], commits: Sequence[str], accepted: Sequence[str], window_size: int,
           head_environment: Mapping[str, str], min_change: float = MIN_CHANGE,
           inherit: bool = False) -> BaselineWindow | None:
    """One measurement's baseline window: the current level's runs (``level``), then those that can
    be compared with HEAD's environment (``select``). What the plugin and ``solgate compare`` both
    judge against."""
    kept, notes = level(runs, commits, accepted, window_size, min_change, inherit)
    return select(kept, head_environment, notes)
