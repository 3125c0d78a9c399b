"""Record (read side): reads what a measurement's baseline is chosen from (the runs along the
first-parent ancestry of the baseline ref, ``--sol-baseline``, and the accepted slowdowns) and hands
them to the rule the run passes in, judge/level.py's ``window``, which decides the level and the
window (the policy is documented there): record/ imports no judge policy, only its types.

``auto`` starts at HEAD when the tree is dirty (the change against the commit it sits on), else at
HEAD's first parent. Dirty runs are never read. The plugin, ``solgate compare``, ``solgate bisect``
and the reports all come here; ``judge/`` then decides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from pytest_solgate.record import gitinfo
from pytest_solgate.support.errors import HistoryUnavailable, OptionError
from pytest_solgate.support.settings import DEFAULT_MIN_CHANGE

if TYPE_CHECKING:  # the plugin builds a chooser at start-up: judge and history load on first use
    from pytest_solgate.judge.window import BaselineRun, BaselineWindow
    from pytest_solgate.record.store import Store

LEVEL_LOOKBACK = 30  # runs read to find where the level began (at least 3 windows' worth)
STORY_RUNS = 1_000_000  # the most runs read between two commits a story is told between


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


def accepted_commits(store: Store, commits: Sequence[str], test: str, name: str = "") -> list[str]:
    """The commits of ``commits`` where a slowdown of measurement ``name`` of ``test`` was accepted
    (``solgate accept``), its pattern matched as ``solgate history`` matches it (one matcher: a
    pattern on a step's operator series, ``'*aten::softmax*'``, once matched nothing here)."""
    from pytest_solgate.record.store import matches
    return [a["commit_sha"] for a in store.accepts(commits) if matches(a["pattern"], test, name)]


def runs_from(store: Store, key: tuple[str, str, str, str], commits: Sequence[str],
              window_size: int) -> tuple[list[BaselineRun], list[str]]:
    """What one measurement's baseline is chosen from along ``commits``: its runs (nearest commit
    first, enough to find where the level began) and the commits where its slowdown was accepted."""
    runs = store.baseline_runs(*key, commits, max(window_size * 3, LEVEL_LOOKBACK))
    return runs, accepted_commits(store, commits, key[0], key[1])


def runs_between(store: Store, key: tuple[str, str, str, str], commits: Sequence[str],
                 older: int) -> tuple[list[BaselineRun], list[str]]:
    """What the story of one measurement between two commits of a first-parent chain is told from
    (``commits`` nearest first; ``commits[older]`` the older of the two): every run at the commits
    from the newer one down to ``commits[older]``, then as many runs before it as the gate reads to
    find where a level began (LEVEL_LOOKBACK), nearest commit first; and the commits where its
    slowdown was accepted. What ``solgate compare`` and ``solgate bisect`` read."""
    runs = store.baseline_runs(*key, commits[:older + 1], STORY_RUNS)
    runs += store.baseline_runs(*key, commits[older + 1:], LEVEL_LOOKBACK)
    return runs, accepted_commits(store, commits, key[0], key[1])


def with_machine_noise(window: BaselineWindow | None, store: Store, host: str) -> BaselineWindow | None:
    """A window of one run, with this machine's run-to-run noise from its other series: what a drop
    against one clean run is judged by (judge/window.py)."""
    if window is None or len(window.runs) != 1 or not host:
        return window
    noise, notes = machine_noise(store, host)
    return dataclasses.replace(window, machine_noise=noise, notes=(*window.notes, *notes))


def machine_noise(store: Store, host: str) -> tuple[tuple[float, int] | None, tuple[str, ...]]:
    """``host``'s run-to-run noise (store.machine_noise), and a note where it is not its own: a host
    new to the history (a fleet's ephemeral runner) has none yet, and its fleet's is read."""
    noise = store.machine_noise(host)
    if noise is not None:
        return noise, ()
    fleet = store.machine_noise(None)
    return fleet, ((f"host {host} has no runs of its own twice at a commit: the fleet's run-to-run spread from its "
                    "other hosts' series",) if fleet is not None else ())


# The judge's rule for a window (judge/level.py: window), passed in by the run: record/ only reads.
# (runs, commits, accepted, window_size, head_environment, min_change, inherit) -> the window, or None.
Decide = Callable[["Sequence[BaselineRun]", Sequence[str], Sequence[str], int, Mapping[str, str], float, bool],
                  "BaselineWindow | None"]


class BaselineChooser:
    """Finds windows for one session: resolves the ref once, then one indexed query per lookup."""

    def __init__(
        self,
        root: Path,
        spec: str,
        window_size: int,
        head: Callable[[], gitinfo.GitFacts],
        open_store: Callable[[], Store | None],
        decide: Decide,
        unavailable: str | None = None,
        min_change: float = DEFAULT_MIN_CHANGE,
        inherit: bool = False,
    ) -> None:
        self.root = root
        self.inherit = inherit  # a pull request's run: a fall in the base is inherited, not failed
        self.spec = spec
        self.window_size = window_size
        self.min_change = min_change
        self._head = head
        self._open_store = open_store
        self._decide = decide
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
            runs, accepted = runs_from(store, (test, name, profile, ceilings), commits, self.window_size)
            chosen = self._decide(runs, commits, accepted, self.window_size, head_environment, self.min_change, self.inherit)
            return with_machine_noise(chosen, store, str(head_environment.get("host", "")))
        except HistoryUnavailable as exc:
            self.unavailable = str(exc)
            return None
