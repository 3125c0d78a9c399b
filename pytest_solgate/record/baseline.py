"""Record (read side): the one place that chooses a measurement's baseline.

A baseline is a window over **one level of one series**: the last K clean runs of the same test,
measurement name, profile and ceilings mode along the first-parent ancestry of the baseline ref
(``--sol-baseline``), newest first, taken only from the commits since the level began:

- the level begins at the last *confirmed* change point of the series (changepoints.py, over the
  commits the lookup reads; a step at the newest commit is provisional and does not move it), or
  at the newest accepted slowdown (``solgate accept``), whichever is nearer;
- runs that were interrupted, contended or noisy are recorded but never in a window;
- a run judged ``regressed`` against this same level is not a baseline (one regression must not
  widen the window until it is reverted); a confirmed change point whose runs the gate failed as
  ``regressed`` does not start a new level: main stays red, every later message naming the commit
  where the level fell, until it is reverted (a later change point) or accepted;
- the runs of a one-commit excursion (an outlier of the series) are left out.

``auto`` starts at HEAD when the tree is dirty (the change against the commit it sits on), else at
HEAD's first parent. Dirty runs are never in a window. Like with like: when at least two runs of
the window ran in this run's environment (device, driver, CUDA, torch, triton, Python, clock
setting: ``environment.BASELINE_KEYS``), only those are kept; otherwise the window is kept whole
and the differences are named, so that the verdict can say so (judge/window.py turns such a
regression into ``ambiguous``). The host and GPU UUID are not part of it: a fleet of runners, a
new host every job included, is one environment, and the spread between its hosts enters the
noise floor (judge/hosts.py).

The plugin, ``solgate compare`` and the reports all come here; ``judge/`` then compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from pytest_solgate.judge import changepoints
from pytest_solgate.judge.changepoints import MIN_CHANGE
from pytest_solgate.measure import environment
from pytest_solgate.record import gitinfo
from pytest_solgate.support import stats
from pytest_solgate.support.errors import HistoryUnavailable, OptionError

if TYPE_CHECKING:  # the plugin builds a chooser at start-up: judge and history load on first use
    from pytest_solgate.judge.window import BaselineRun, BaselineWindow

MIN_SAME_ENVIRONMENT = 2  # runs of this environment needed to drop the others from a window
MIN_QUIET = 3  # runs not flagged noisy needed to leave the noisy ones out of a window
LEVEL_LOOKBACK = 30  # runs read to find where the level began (at least 3 windows' worth)


def start_commit(root: Path, spec: str, head: gitinfo.GitFacts) -> str | None:
    """The commit whose first-parent ancestry holds the baselines for ``--sol-baseline=spec``.

    ``none``, or ``auto`` outside a repository or on a first commit, gives None. A ref that does
    not resolve is a usage error: a shallow CI checkout must fail loudly, not pass ungated.
    """
    if spec == "none":
        return None
    if spec == "auto":
        if head.commit is None:
            return None
        return head.commit if head.dirty else gitinfo.resolve(root, f"{head.commit}^")
    try:
        sha = gitinfo.resolve(root, spec)
    except gitinfo.AmbiguousCommit as exc:
        raise OptionError(f"--sol-baseline={spec}: {exc}") from None
    if sha is None:
        where = "is not a git repository" if head.commit is None else "has no such commit"
        raise OptionError(
            f"--sol-baseline={spec}: {root} {where}; fetch the ref (a shallow CI checkout needs "
            f"`git fetch --depth=100 origin <branch>`), or pass --sol-baseline=auto or none"
        )
    return sha


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
    # One value per commit, oldest first: the median SOL of its undisturbed runs.
    by_commit: dict[str, list[float]] = {}
    for run in runs:
        if not run.disturbed:
            by_commit.setdefault(run.commit, []).append(run.sol)
    series = sorted(by_commit, key=lambda c: -position.get(c, -1))
    start = len(commits)  # the chain position where the level begins: runs at positions <= start are in it
    unavailable = ()
    try:
        changes = changepoints.find([stats.median(by_commit[c]) for c in series], min_change)
    except changepoints.ChangePointsUnavailable as exc:
        changes, unavailable = changepoints.Changes(), (f"one level not told apart: {exc}",)
    def at(commit: str) -> int:  # a commit's chain position; one off the chain reads as the oldest
        return position.get(commit, len(commits)) if commit else len(commits)

    confirmed = [position[series[cp.index]] for cp in changes.points if not cp.provisional]
    gated_falls = _gated_falls([(at(r.commit), at(r.judged_against)) for r in runs if r.verdict == "regressed"],
                               confirmed)
    moved = [at for at in confirmed if at not in gated_falls]
    if moved:
        start = min(moved)  # the nearest confirmed change the gate did not fail
    outliers = {series[o.index] for o in changes.outliers}
    since = "the last confirmed change point" if moved else ""
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
        against = at(run.judged_against)
        why = run.disturbed or (
            "regressed" if run.verdict == "regressed" and against <= start else
            "outlier" if run.commit in outliers else ""
        )
        if run.verdict == "regressed" and against <= start:  # also a disturbed run's: it was reported so
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
        since_fall = [run for run in runs if not run.disturbed and at(run.commit) <= fell_at]
        return since_fall[:window_size], (
            f"the level fell at {commit} in the base (regressed there, neither reverted nor accepted): "
            f"inherited, not this change's; compared with the base's level since", *unavailable)
    return _finish(kept[:window_size], commits, start, since, left, (
        f"the level fell at {commit} (regressed there, neither reverted nor accepted: revert it, or "
        f"`solgate accept {commit}` if the slowdown is meant)", *unavailable))


def _gated_falls(regressed: Sequence[tuple[int, int]], changes: Sequence[int]) -> set[int]:
    """The change points (chain positions) whose level the gate failed: a run of that level (the
    change's commit or a later one before the next change) was judged ``regressed`` against a
    level before it (``regressed``: each such run's position and that of the window it was judged
    against). Such a change does not become the level when it is confirmed: main stays red until
    it is reverted (a later change) or accepted. Red for as long as the lookback reaches: after
    about LEVEL_LOOKBACK commits at the fallen level no run of the old one is read."""
    bounds = sorted(changes)  # nearest first: a level runs from its change down to the next nearer one
    nearer = [-1, *bounds[:-1]]
    return {change for change, next_nearer in zip(bounds, nearer)
            if any(next_nearer < where <= change < against for where, against in regressed)}


def _fell_at(newest_kept: int, fell: Sequence[int]) -> int | None:
    """Where the level fell and stayed down (a chain position): the oldest of the runs left out as
    regressed (``fell``) that is newer than the newest run read at the level (``newest_kept``; a
    revert, or an accept, ends a fall, and a re-landing after a revert is a fall of its own).
    Every later message names it, so that an innocent commit on top is not blamed."""
    since = [where for where in fell if where < newest_kept]
    return max(since) if since else None


def on_pull_request(environ: Mapping[str, str]) -> bool:
    """Whether this run gates a pull request: GitHub Actions says so (docs/pull-requests.md)."""
    return environ.get("GITHUB_EVENT_NAME", "") in ("pull_request", "pull_request_target")


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
    from pytest_solgate.judge.window import BaselineWindow
    same = [r for r in runs
            if not environment.differences(dict(head_environment), dict(r.environment), environment.BASELINE_KEYS)]
    if len(same) >= MIN_SAME_ENVIRONMENT or len(same) == len(runs):
        return BaselineWindow(runs=tuple(same), notes=tuple(notes))
    other = next(r for r in runs if r not in same)
    differs = environment.differences(dict(head_environment), dict(other.environment))
    return BaselineWindow(runs=tuple(runs), environment_differs=tuple(differs), notes=tuple(notes))


def accepted_commits(store: Any, commits: Sequence[str], test: str, name: str = "") -> list[str]:
    """The commits of ``commits`` where a slowdown of measurement ``name`` of ``test`` was accepted
    (``solgate accept``), its pattern matched as ``solgate history`` matches it (one matcher: a
    pattern on a step's operator series, ``'*aten::softmax*'``, once matched nothing here)."""
    from pytest_solgate.record.store import matches
    return [a["commit_sha"] for a in store.accepts(commits) if matches(a["pattern"], test, name)]


def window_from(
    store: Any, key: tuple[str, str, str, str], commits: Sequence[str], window_size: int,
    head_environment: Mapping[str, str], min_change: float = MIN_CHANGE, inherit: bool = False,
) -> BaselineWindow | None:
    """The baseline window of one measurement along ``commits``: what the plugin and ``solgate
    compare`` both judge against."""
    runs = store.baseline_runs(*key, commits, max(window_size * 3, LEVEL_LOOKBACK))
    kept, notes = level(runs, commits, accepted_commits(store, commits, key[0], key[1]), window_size, min_change, inherit)
    return select(kept, head_environment, notes)


class BaselineChooser:
    """Finds windows for one session: resolves the ref once, then one indexed query per lookup."""

    def __init__(
        self,
        root: Path,
        spec: str,
        window_size: int,
        head: Callable[[], gitinfo.GitFacts],
        open_store: Callable[[], Any],
        unavailable: str | None = None,
        min_change: float = MIN_CHANGE,
        inherit: bool = False,
    ) -> None:
        self.root = root
        self.inherit = inherit  # a pull request's run: a fall in the base is inherited, not failed
        self.spec = spec
        self.window_size = window_size
        self.min_change = min_change
        self._head = head
        self._open_store = open_store
        self._commits: list[str] | None = None
        # Why the history server cannot be reached; then no lookup tries again (each would wait
        # for its connection timeout) and verdicts come from budgets alone.
        self.unavailable = unavailable

    def commits(self) -> list[str]:
        if self._commits is None:
            start = start_commit(self.root, self.spec, self._head())
            self._commits = gitinfo.first_parent_chain(self.root, start) if start else []
        return self._commits

    def window(
        self, test: str, name: str, profile: str, ceilings: str, head_environment: Mapping[str, str]
    ) -> BaselineWindow | None:
        commits = self.commits()
        if not commits or self.unavailable:
            return None
        try:
            store = self._open_store()
            if store is None:
                return None
            return window_from(store, (test, name, profile, ceilings), commits, self.window_size, head_environment,
                               self.min_change, self.inherit)
        except HistoryUnavailable as exc:
            self.unavailable = str(exc)
            return None
