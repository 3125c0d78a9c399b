"""Record (read side): the one place that chooses a measurement's baseline.

A baseline is a window: the last K clean runs of the same test, measurement name, profile and
ceilings mode along the first-parent ancestry of the baseline ref (``--sol-baseline``), newest
first. ``auto`` starts at HEAD when the tree is dirty (the change against the commit it sits on),
else at HEAD's first parent. Dirty runs are never in a window. Like with like: when at least two
runs of the window ran in this run's environment (host, device, driver, CUDA, torch, triton,
Python), only those are kept; otherwise the window is kept whole and the differences are named,
so that the verdict can say so (judge.py turns such a regression into ``ambiguous``).

The plugin, ``solgate compare`` and the reports all come here; judge.py then compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from pytest_solgate import environment, gitinfo
from pytest_solgate.errors import HistoryUnavailable, OptionError

if TYPE_CHECKING:  # the plugin builds a chooser at start-up: judge and history load on first use
    from pytest_solgate.judge import BaselineRun, BaselineWindow

MIN_SAME_ENVIRONMENT = 2  # runs of this environment needed to drop the others from a window


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
    sha = gitinfo.resolve(root, spec)
    if sha is None:
        where = "is not a git repository" if head.commit is None else "has no such commit"
        raise OptionError(
            f"--sol-baseline={spec}: {root} {where}; fetch the ref (a shallow CI checkout needs "
            f"`git fetch --depth=100 origin <branch>`), or pass --sol-baseline=auto or none"
        )
    return sha


def select(runs: Sequence[BaselineRun], head_environment: Mapping[str, str]) -> BaselineWindow | None:
    """Keep the runs of this environment when there are enough of them; else keep all, and name
    what differs between this run and the newest baseline run of another environment."""
    if not runs:
        return None
    from pytest_solgate.judge import BaselineWindow
    same = [r for r in runs if not environment.differences(dict(head_environment), dict(r.environment))]
    if len(same) >= MIN_SAME_ENVIRONMENT or len(same) == len(runs):
        return BaselineWindow(runs=tuple(same))
    other = next(r for r in runs if r not in same)
    differs = environment.differences(dict(head_environment), dict(other.environment))
    return BaselineWindow(runs=tuple(runs), environment_differs=tuple(differs))


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
    ) -> None:
        self.root = root
        self.spec = spec
        self.window_size = window_size
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
            runs = store.baseline_runs(test, name, profile, ceilings, commits, self.window_size)
        except HistoryUnavailable as exc:
            self.unavailable = str(exc)
            return None
        return select(runs, head_environment)
