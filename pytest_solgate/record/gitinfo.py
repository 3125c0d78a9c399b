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

from pytest_solgate.support.errors import OptionError

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
    """Two git calls (every session that measures asks): the status, with its branch headers,
    then the commit's time."""
    # Untracked files (reports, caches) do not make a tree dirty; changes to tracked files do.
    status = git(cwd, "status", "--porcelain=v2", "--branch", "--untracked-files=no")
    if status is None:
        return GitFacts()
    headers = dict(line[2:].split(" ", 1) for line in status.splitlines() if line.startswith("# ") and " " in line[2:])
    commit = headers.get("branch.oid", "")
    if len(commit) != 40:  # "(initial)": no commit yet
        return GitFacts()
    branch = headers.get("branch.head")
    return GitFacts(
        commit=commit,
        commit_time=git(cwd, "show", "-s", "--format=%cI", commit),
        branch=None if branch in (None, "(detached)") else branch,
        dirty=any(not line.startswith("#") for line in status.splitlines()),
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
    own setting (--sol-history, $SOLGATE_HISTORY). A relative ``$SOLGATE_STATE_DIR`` is taken from
    the git top level, as a relative history is: the plugin started in a subdirectory and
    ``solgate import --spool`` started at the top must find one spool."""
    chosen = os.environ.get(STATE_DIR_VARIABLE)
    root = project_root(start)
    if chosen:
        return (root / Path(chosen).expanduser()).resolve()  # an absolute path replaces root
    return root / ".solgate"


class AmbiguousCommit(OptionError):
    """A short sha that prefixes several commits: named as ambiguous, with the candidates."""

    def __init__(self, ref: str, candidates: list[str]):
        self.ref, self.candidates = ref, candidates
        shown = ", ".join(c[:12] for c in candidates[:6]) + (", ..." if len(candidates) > 6 else "")
        super().__init__(f"'{ref}' is ambiguous: it is the start of {len(candidates)} commits ({shown}); "
                         "give more digits")


def resolve(cwd: str | Path, ref: str) -> str | None:
    """The commit ``ref`` names, or None when it names none. A short sha that prefixes several
    commits raises AmbiguousCommit (git's ``rev-parse --verify --quiet`` only prints nothing), so
    every command that takes a commit says so, with the candidates."""
    sha = git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if sha is None and ref_is_short_sha(ref):
        candidates = commits_starting(cwd, ref)
        if len(candidates) > 1:
            raise AmbiguousCommit(ref, candidates)
    return sha


def ref_is_short_sha(ref: str) -> bool:
    return 4 <= len(ref) < 40 and all(c in "0123456789abcdefABCDEF" for c in ref)


def commits_starting(cwd: str | Path, prefix: str) -> list[str]:
    """The commits whose sha starts with ``prefix`` (other objects, trees and blobs, left out)."""
    objects = git(cwd, "rev-parse", f"--disambiguate={prefix.lower()}")
    if not objects:
        return []
    checked = git(cwd, "cat-file", "--batch-check=%(objectname) %(objecttype)", stdin=objects + "\n")
    return sorted(line.split()[0] for line in (checked or "").splitlines() if line.endswith(" commit"))


def is_first_parent_ancestor(cwd: str | Path, commit: str, head: str = "HEAD") -> bool:
    """Whether ``commit`` is ``head`` or on its first-parent chain (where baselines are read)."""
    return commit in first_parent_chain(cwd, head, limit=100_000)


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
