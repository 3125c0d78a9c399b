"""Record: git facts for the history: commit, branch, dirty flag, first-parent ancestry.

Every call is a ``git`` subprocess with an argument list (no shell). Outside a repository, or
without git, the answers are None: such a run is recorded with an unknown commit and is never a
baseline.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

MAX_ANCESTORS = 500


@dataclass(frozen=True)
class GitFacts:
    commit: str | None = None
    commit_time: str | None = None
    branch: str | None = None
    dirty: bool = False


def git(cwd: str | Path, *args: str, stdin: str | None = None) -> str | None:
    """stdout of ``git args...`` in ``cwd``, or None when git is missing or the command fails."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=str(cwd), capture_output=True, text=True, timeout=30, check=False, input=stdin,
            # Branch and file names are bytes to git: a non-UTF-8 one must not fail the test.
            encoding="utf-8", errors="replace",
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def facts(cwd: str | Path) -> GitFacts:
    commit = git(cwd, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if not commit:
        return GitFacts()
    branch = git(cwd, "rev-parse", "--abbrev-ref", "HEAD")
    # Untracked files (reports, caches) do not make a tree dirty; changes to tracked files do.
    status = git(cwd, "status", "--porcelain", "--untracked-files=no")
    return GitFacts(
        commit=commit,
        commit_time=git(cwd, "show", "-s", "--format=%cI", commit),
        branch=None if branch in (None, "HEAD") else branch,
        dirty=bool(status),
    )


def project_root(start: str | Path) -> Path:
    """The git top level above ``start``, else ``start`` itself: where ``.solgate/`` (the history
    and the calibration cache) lives, whichever directory pytest or solgate was started in.

    Found by looking for ``.git`` (a folder, or the file of a worktree or submodule) rather than
    by running git: every pytest session asks, also one that never measures."""
    here = Path(start).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / ".git").exists()), here)


STATE_DIR_VARIABLE = "SOLGATE_STATE_DIR"


def state_dir(start: str | Path) -> Path:
    """The ``.solgate`` folder of the project that ``start`` belongs to, or the folder
    ``$SOLGATE_STATE_DIR`` names: one calibration cache (and spool) for several checkouts or for a
    run that must write nothing into its checkout (benchmarks/gpu_check.py). The history keeps its
    own setting (--sol-history, $SOLGATE_HISTORY)."""
    chosen = os.environ.get(STATE_DIR_VARIABLE)
    if chosen:
        return Path(chosen).expanduser().resolve()
    return project_root(start) / ".solgate"


def resolve(cwd: str | Path, ref: str) -> str | None:
    return git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def first_parent_chain(cwd: str | Path, start: str, limit: int = MAX_ANCESTORS) -> list[str]:
    """``start`` and its first-parent ancestors, nearest first."""
    out = git(cwd, "rev-list", "--first-parent", f"--max-count={limit}", start)
    return out.split() if out else []


def commit_times(cwd: str | Path, commits: list[str]) -> dict[str, str]:
    """Committer dates (ISO 8601) of the commits git knows; unknown ones are left out. Two git
    calls however many commits (a trend over thousands of them must not fork thousands of times)."""
    asked = sorted({c for c in commits if c})
    if not asked:
        return {}
    # cat-file answers "<sha> missing" for an unknown commit instead of failing the whole call.
    checked = git(cwd, "cat-file", "--batch-check=%(objectname) %(objecttype)", stdin="\n".join(asked) + "\n")
    known = [line.split()[0] for line in (checked or "").splitlines() if line.endswith(" commit")]
    if not known:
        return {}
    out = git(cwd, "log", "--no-walk=unsorted", "--stdin", "--format=%H %cI", stdin="\n".join(known) + "\n")
    return dict(line.split(" ", 1) for line in (out or "").splitlines() if " " in line)
