"""Drive (after the stages, before the command): run the selected tests at a git ref in a temporary
worktree, with the user's pytest options, and collect their results: what ``solgate bisect`` and
``solgate ab`` share (docs/reference.md, "How it works").

Each run is one pytest subprocess with the plugin, in one detached ``git worktree`` outside the
user's tree, moved from commit to commit; the user's work tree, index and HEAD are never touched,
and the worktree is removed afterwards, also on a failure or Ctrl-C. A run at ``None`` runs in the
user's own tree as it is (``solgate ab``'s HEAD side). Results come back through ``--sol-json``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from pytest_solgate.record import gitinfo, schema, store
from pytest_solgate.results import Measurement
from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.settings import HISTORY_VARIABLE

PYTEST_NO_TESTS = 5  # pytest's exit status when nothing was collected
PYTEST_INTERRUPTED = 2  # ... and when a module did not collect (the others' ids are still listed)
# Every run is pytest with this one-hook-each plugin (``python -c`` puts the working directory first
# on sys.path, as ``python -m pytest`` does). Node ids are relative to pytest's rootdir, while pytest
# resolves its arguments against the folder it runs in: an argument that names no path there but
# one under the rootdir is made absolute, so that ids collected from a subfolder run from it. A
# pattern (argv[2], "" for none) deselects the tests whose ids do not match, in the same process
# that runs the others: ``solgate ab``'s first round collects and measures at once. The ids that
# run, and how many were collected, go to argv[1] (or nowhere: "-"), taken from the items themselves,
# not parsed from output that -q or -v in the project's addopts would reshape.
PYTEST = """\
import json, sys
import pytest

class Rooted:
    ids, total = [], 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        here, root = config.invocation_params.dir, config.rootpath
        for i, arg in enumerate(config.args):
            path, sep, rest = arg.partition("::")
            if path and not (here / path).exists() and (root / path).exists():
                config.args[i] = str(root / path) + sep + rest

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config, items):
        self.total = len(items)
        if sys.argv[2]:
            from pytest_solgate.record.store import matches
            kept = [item for item in items if matches(sys.argv[2], item.nodeid)]
            config.hook.pytest_deselected(items=[item for item in items if item not in kept])
            items[:] = kept

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]

plugin = Rooted()
code = pytest.main(sys.argv[3:], plugins=[plugin])
if sys.argv[1] != "-":
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump({"ids": plugin.ids, "collected": plugin.total}, out)
sys.exit(int(code))
"""


class WorktreeError(SolgateError):
    """A git step of a worktree that failed (``bisect: git worktree add failed: ...``)."""


@dataclass(frozen=True)
class Place:
    """Where the tests run: the repository's top level and where the command started in it
    (pytest runs at that same place in the worktree, so node ids read as the user's)."""

    root: Path
    prefix: str


def place(cwd: str | Path, command: str) -> Place:
    top = gitinfo.git(cwd, "rev-parse", "--show-toplevel")
    if top is None:
        raise WorktreeError(f"{command}: {Path(cwd).resolve()} is not in a git repository; run it where the commits are")
    return Place(Path(top), gitinfo.git(cwd, "rev-parse", "--show-prefix") or "")


class Worktree:
    """One detached ``git worktree`` outside the user's tree, moved from commit to commit."""

    def __init__(self, root: Path, scratch: Path, command: str) -> None:
        self.root = root
        self.path = scratch / "worktree"
        self.command = command
        self.at: str | None = None

    def checkout(self, commit: str) -> Path:
        if self.at is None:
            self._git(self.root, "worktree", "add", "--detach", "--quiet", str(self.path), commit)
        elif self.at != commit:
            self._git(self.path, "checkout", "--quiet", "--detach", "--force", commit)
            self._git(self.path, "clean", "--quiet", "-d", "--force")
        self.at = commit
        if (self.path / ".gitmodules").exists():  # a new worktree has its submodules' folders empty
            self._git(self.path, "submodule", "update", "--init", "--recursive", "--quiet",
                      why=f"the git submodules at {commit[:10]} do not check out")
        return self.path

    def remove(self) -> None:
        # Also when stopped half-way through `git worktree add`: git may have registered it already.
        if self.at is not None or self.path.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(self.path)], cwd=self.root,
                           capture_output=True, check=False)
        shutil.rmtree(self.path, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=self.root, capture_output=True, check=False)

    def _git(self, cwd: Path, *args: str, why: str = "") -> None:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise WorktreeError(f"{self.command}: {why + ': ' if why else ''}git {' '.join(args[:2])} failed: "
                                f"{said[-1] if said else 'no message'}")


@dataclass(frozen=True)
class RunResult:
    """One pytest run of the selected node ids at a commit: its results, and why some or all are
    missing (a failing test leaves the others' results)."""

    results: tuple[tuple[store.RunRow, Measurement], ...] = ()
    failed: str = ""
    ran: tuple[str, ...] = ()  # the node ids that ran (after the pattern)
    collected: int = 0  # how many tests pytest collected (before it)


@dataclass(frozen=True)
class Collected:
    """The node ids pytest collects at a commit, and what went wrong (with ``ids`` empty: why there
    are none; beside ids: a module that did not collect)."""

    ids: tuple[str, ...] = ()
    problem: str = ""


class Runner:
    """Runs pytest with the plugin in a subprocess, in the worktree at a commit (or, at ``None``,
    in the user's own tree).

    Scratch mode saves nothing (``--sol-no-save``, and ``SOLGATE_HISTORY`` pointed at a scratch
    file, so the user's history is not even read); ``record`` saves each run into the real
    history, as a CI run would. Either way the results come back through ``--sol-json``, and
    ``--sol-gate=warn`` keeps a budget miss or regression from reading as a failing test. The
    user's pytest options (``pytest_args``: a noise target, a time budget, a device) come last."""

    def __init__(self, where: Place, scratch: Path, history_location: str, record: bool, command: str,
                 pytest_args: Sequence[str] = ()) -> None:
        self.where = where
        self.scratch = scratch
        self.history_location = history_location
        self.record = record
        self.pytest_args = list(pytest_args)
        self.command = command
        self.worktree = Worktree(where.root, scratch, command)
        self.count = 0

    def _arguments(self, tests: Sequence[str], *options: str) -> list[str]:
        """pytest's arguments: the node ids, no cache written into the worktree, ours, the user's."""
        return [*tests, "-p", "no:cacheprovider", "-q", *options, *self.pytest_args]

    def _environment(self, record: bool) -> dict[str, str]:
        env = dict(os.environ)
        env[HISTORY_VARIABLE] = self.history_location if record else str(self.scratch / "scratch-history.db")
        return env

    def folder(self, commit: str | None) -> Path:
        if commit is None:
            return self.where.root / self.where.prefix
        folder = self.worktree.checkout(commit)
        self._share_calibration(folder)
        if not (folder / self.where.prefix).is_dir():
            raise WorktreeError(f"{self.command}: the folder {self.where.prefix.rstrip('/')} it runs from does not "
                                f"exist at {commit[:10]}; run it from a folder both commits have (e.g. the top)")
        return folder / self.where.prefix

    def _share_calibration(self, folder: Path) -> None:
        """A CPU's measured ceilings, cached in the project's .solgate/profiles, are copied into the
        worktree: every run then scores against the same ceilings, and none calibrates again."""
        cached = gitinfo.state_dir(self.where.root) / "profiles"
        if cached.is_dir():
            shutil.copytree(cached, gitinfo.state_dir(folder) / "profiles", dirs_exist_ok=True)

    def _pytest(self, commit: str | None, arguments: Sequence[str], record: bool,
                pattern: str | None = None) -> tuple[subprocess.CompletedProcess[str], tuple[str, ...], int]:
        """One pytest process: its outcome, the ids that ran (those matching ``pattern``) and how
        many it collected."""
        listed = self.scratch / "collected.json"
        listed.unlink(missing_ok=True)
        done = run_as_group([sys.executable, "-c", PYTEST, str(listed), pattern or "", *arguments],
                            cwd=self.folder(commit), env=self._environment(record))
        found = json.loads(listed.read_text(encoding="utf-8")) if listed.exists() else {}
        return done, tuple(found.get("ids", ())), int(found.get("collected", 0))

    def collect(self, commit: str | None) -> Collected:
        """The node ids pytest collects at ``commit``, or why it collects none."""
        done, ids, _ = self._pytest(commit, self._arguments((), "--collect-only"), False)
        if done.returncode in (0, PYTEST_NO_TESTS) and ids:
            return Collected(ids)
        problem = _failure(done.returncode, done.stdout + done.stderr, self.worktree.path)
        if done.returncode == PYTEST_INTERRUPTED and ids:  # the modules that did collect still run
            return Collected(ids, problem)
        return Collected((), problem)

    def matching(self, commit: str | None, side: str, pattern: str | None) -> tuple[list[str], str]:
        """The node ids collected at ``commit`` that match ``pattern``, and what did not collect
        there; ``side`` names the commit in the error (``at GOOD 1a2b3c4d5e``) when pytest collects
        nothing there or nothing matches."""
        collected = self.collect(commit)
        if not collected.ids:
            raise WorktreeError(f"{self.command}: {side} pytest collects nothing: {collected.problem}")
        chosen = [test for test in collected.ids if store.matches(pattern, test)]
        if not chosen:
            raise WorktreeError(f"{self.command}: no test {side} matches '{pattern}' ({len(collected.ids)} collected"
                                f"{'; ' + collected.problem if collected.problem else ''}); "
                                "give a glob or text of a test id, e.g. 'test_matmul*'")
        return chosen, collected.problem

    def run(self, commit: str | None, tests: Sequence[str], record: bool | None = None,
            baseline: bool = True, pattern: str | None = None, keep_going: bool = False) -> RunResult:
        """One run of ``tests`` (node ids, or paths to collect) at ``commit``; ``pattern`` runs only
        the collected tests whose ids match it; ``record`` (default: the runner's) saves it into the
        history, ``baseline`` judges it against the history's window as the gate would;
        ``keep_going`` runs the modules that collect where another does not. A run in which some
        tests failed still gives the others' results, with the failure beside them."""
        record = self.record if record is None else record
        self.count += 1
        out = self.scratch / f"run-{self.count}.json"
        options = [f"--sol-json={out}", "--sol-gate=warn"]
        if not record:
            options.append("--sol-no-save")
        if not (record and baseline):
            options.append("--sol-baseline=none")
        if keep_going:
            options.append("--continue-on-collection-errors")
        done, ran, collected = self._pytest(commit, self._arguments(tests, *options), record, pattern)
        failed = _failure(done.returncode, done.stdout + done.stderr, self.worktree.path) if done.returncode else ""
        if done.returncode not in (0, 1) or not out.exists():
            return RunResult(failed=failed or "no results written", ran=ran, collected=collected)
        run, measurements = schema.read_run(out.read_text(encoding="utf-8"), str(out))
        row = store.run_row(run)
        return RunResult(tuple((row, m) for m in measurements), failed, ran, collected)

    def close(self) -> None:
        self.worktree.remove()


def _failure(code: int, output: str, folder: Path) -> str:
    """Why a run gave no results: what pytest's exit status means and its last line (with the
    temporary worktree's path left out: it is gone once the command ends)."""
    lines = [line.strip("= ") for line in output.replace(f"{folder}{os.sep}", "").strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "no output"
    # the cause, not only pytest's tally: the first failing test or error, and its first E line
    usage = next((line.split("error: ", 1)[1] for line in lines if ": error: " in line), "")
    if code == 4 and usage:  # an option pytest does not know: name it, not the rootdir line after it
        return f"pytest usage error: {usage}"
    cause = next((line for line in lines if line.startswith(("FAILED ", "ERROR "))), "")
    error = next((line.removeprefix("E").strip() for line in lines if line.startswith("E ")), "")
    if cause and cause != last:
        last = f"{cause}{f' ({error})' if error and error not in cause else ''}; {last}"
    if code == 4 and "found no collectors" in output:  # a node id in a module that no longer imports
        code = 2
    what = {1: "tests failed", 2: "the tests do not collect (or were interrupted)", 3: "pytest internal error",
            4: "pytest usage error", PYTEST_NO_TESTS: "no tests collected"}.get(code, f"pytest exit status {code}")
    return f"{what}: {last}"


STOP_GRACE = 5.0  # seconds a stopped pytest child has to finish its own cleanup before it is killed


def run_as_group(command: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process group of its own, its output captured. If this process is
    stopped while it runs (Ctrl-C, or a SIGTERM the command turns into an exception), the whole
    group is stopped before the exception goes on: pytest and anything it started (xdist workers,
    an ncu child), so that nothing is left running."""
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate()
    except BaseException:
        _stop_group(child)
        raise
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def _stop_group(child: subprocess.Popen[str]) -> None:
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sent)
        except ProcessLookupError:
            break
        try:
            child.communicate(timeout=STOP_GRACE)
            break
        except subprocess.TimeoutExpired:
            continue
    child.wait()
    try:  # a grandchild that outlived pytest is in the group still
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def scratch(command: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=f"solgate-{command}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
