"""``solgate bisect`` on real git repositories whose kernels run on the fake clock
(solgate_testing.FAKE_CLOCK_KERNELS), their time set by a committed file: the command by its entry
function in the test's process, a process of its own where Ctrl-C is what is tested. Each probe is
a real pytest subprocess in a real temporary git worktree."""

import json
import math
import os
import random
import subprocess
import sys
import tempfile

import pytest

from solgate_command import solgate_main
from solgate_testing import FAKE_CLOCK_KERNELS, FAKE_CLOCK_TIMING, SYNTHETIC_PROFILE, git, init_repo

# The kernel's time comes from speed.json in the commit; "slow_once" names a file outside the
# repository: the first run that finds it missing creates it and reads slow (a flaky reading).
KERNEL_TEST = FAKE_CLOCK_KERNELS + '''
import json, pathlib

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())
__import__("time").sleep(SPEED.get("hang", 0))  # real seconds at import: time to press Ctrl-C

def _seconds():
    once = SPEED.get("slow_once")
    if once and not pathlib.Path(once).exists():
        pathlib.Path(once).write_text("read slow once")
        return SPEED["seconds"] * 1.5
    return SPEED["seconds"]

@pytest.mark.sol(max_regression=0.05)
def test_kernel(sol):
    seconds = _seconds()
    sol.measure(lambda: busy(seconds), bytes=0.4e6)

def test_plain():
    pass
'''

BROKEN = "def test_kernel(:\n"  # a commit whose tests do not even collect


class Repo:
    def __init__(self, path):
        self.path = path
        init_repo(path)
        (path / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
        # -q in the project's addopts: with bisect's own -q, --collect-only would print no node ids at all
        # the fake clock's timing: on a loaded machine a 0.3 s budget could run out in wall time, the
        # run be flagged noisy (never a level), and GOOD rightly run once more: the counts asserted
        # below are the algorithm's, not the machine's
        # hypothesis's pytest plugin imports all of hypothesis at the end of every session (some 0.7 s
        # of CPU), and every probe is a pytest session: this project has no hypothesis tests
        (path / "pytest.ini").write_text("[pytest]\naddopts = -q -p no:hypothesispytest " + " ".join(
            [*FAKE_CLOCK_TIMING, "--sol-profile=synthetic.toml"]) + "\n")
        (path / ".gitignore").write_text(".solgate/\n")
        (path / "test_kernels.py").write_text(KERNEL_TEST)
        self.commits = []

    def commit(self, message, seconds=1e-3, broken=False, **extra):
        (self.path / "speed.json").write_text(json.dumps({"seconds": seconds, **extra}))
        (self.path / "test_kernels.py").write_text(BROKEN if broken else KERNEL_TEST)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        self.commits.append(git(self.path, "rev-parse", "HEAD"))
        return self.commits[-1]

    def gate(self, pytester, commit, *args):
        """The gate at ``commit``: a recorded pytest run in the repository, as CI runs it. In this
        process (pytester's in-process run, the plugin loaded as in a subprocess): the gate is what
        bisect is compared with, not what is tested, and an interpreter start per commit cost more
        than the run."""
        git(self.path, "checkout", "-q", commit)
        with pytest.MonkeyPatch.context() as here:
            here.chdir(self.path)
            return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)

    def solgate(self, *args, cwd=None, env=None):
        """``solgate ARGS`` in the repository, by its entry function in this process
        (tests/solgate_command.py), with ``env`` and TMPDIR at ``scratch`` set as for a process
        started with them: the temporary worktree and files the tests look for are made there. Its
        probes are real pytest processes either way."""
        with pytest.MonkeyPatch.context() as here:
            for name, value in {**(env or {}), "TMPDIR": str(self.scratch)}.items():
                here.setenv(name, value)
            here.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR afresh, as in a new process
            return solgate_main(*args, cwd=cwd or self.path)

    @property
    def scratch(self):
        folder = self.path.parent / "tmp"
        folder.mkdir(exist_ok=True)
        return folder

    def state(self):
        """What the user sees of their repository: status (with a local edit and an untracked
        file), HEAD, the worktree list, and the branch."""
        return (git(self.path, "status", "--porcelain"), git(self.path, "rev-parse", "HEAD"),
                git(self.path, "worktree", "list", "--porcelain"), git(self.path, "branch", "--show-current"),
                (self.path / "notes.txt").read_text())


def run_counts(stdout):
    """(runs, at GOOD, reused) from the command's last line."""
    last = stdout.strip().splitlines()[-1]
    words = last.split()
    return int(words[0]), int(words[2]), int(words[-6])


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "project"
    path.mkdir()
    return Repo(path)


@pytest.mark.long(seconds=17)  # many bisections and pytest runs: .ci/run's long step runs it, beside the SIGKILL scenario
def test_a_step_in_thirty_commits_is_found_in_about_log2_runs_and_reused_after(repo):
    good = repo.commit("GOOD", seconds=1e-3)
    step = 19  # the 19th commit after GOOD makes the kernel 20 % slower (SOL 0.400 -> 0.333)
    for i in range(1, 31):
        repo.commit(f"commit {i}", seconds=1.2e-3 if i >= step else 1e-3)
    culprit = repo.commits[step]
    # the user's own work in progress: an edit to a tracked file and an untracked one
    (repo.path / "speed.json").write_text('{"seconds": 5e-3}')
    (repo.path / "notes.txt").write_text("mine")
    before = repo.state()

    done = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--record", "--good-runs", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"first bad commit: {culprit[:10]} 'commit {step}' ({step} of 30 after GOOD)" in done.stdout
    runs, at_good, reused = run_counts(done.stdout)
    # GOOD twice for its level, BAD, ceil(log2(30)) = 5 halvings, and the culprit's confirmation
    assert (runs, at_good, reused) == (2 + 1 + 5 + 1, 2, 0), done.stdout
    assert runs - at_good <= math.ceil(math.log2(30)) + 2
    evidence = [line for line in done.stdout.splitlines() if line.startswith(("  ", " 1", " 2", " 3"))]
    bad_line = next(line for line in evidence if line.split()[1] == culprit[:10])
    assert "below    SOL 0.333 vs 0.400  -16.7%  tolerance 5.0%, floor 0.0%" in bad_line
    assert "drift" not in done.stdout  # one step: the culprit alone
    assert "test_plain" not in done.stdout.split("test(s):")[1].splitlines()[0]
    assert repo.state() == before  # status, HEAD, worktree list, branch, untracked file: untouched
    assert not list(repo.scratch.glob("solgate-bisect-*"))  # the temporary worktree and scratch files are gone

    # Everything it needs is recorded now: the same bisection runs nothing. The recorded runs tell
    # the gate's story, a fall at the culprit after commit 18: BAD, the culprit, 18 and the
    # culprit's confirmation are read (before issue 41's story first: BAD, 5 halvings, the confirmation).
    again = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "2")
    assert again.returncode == 0 and f"first bad commit: {culprit[:10]}" in again.stdout
    runs, at_good, reused = run_counts(again.stdout)
    assert (runs, at_good) == (0, 0) and reused == 1 + 2 + 1, again.stdout
    assert f"the history's story already puts a fall at {culprit[:10]}" in again.stdout
    assert f"the history's story agrees: it puts the fall at {culprit[:10]} too" in again.stdout
    assert "ran)" not in again.stderr and "from the history" in again.stderr

    # Only what is missing is run: a level of three runs needs one more run of GOOD, nothing else.
    more = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "3")
    assert more.returncode == 0 and f"first bad commit: {culprit[:10]}" in more.stdout, more.stdout + more.stderr
    assert run_counts(more.stdout)[:2] == (1, 1), more.stdout
    assert "GOOD's level: SOL 0.400 over 3 run(s), 2 from the history" in more.stdout

    # The commit before the step is not below: bisecting up to it finds nothing (exit 1).
    nothing = repo.solgate("bisect", good, repo.commits[step - 1], "*::test_kernel", "--good-runs", "2")
    assert nothing.returncode == 1 and "not found: BAD" in nothing.stdout, nothing.stdout + nothing.stderr
    assert repo.state() == before


def test_a_flaky_reading_and_a_broken_commit(repo, tmp_path):
    """Eight commits: the 4th reads slow once (a flaky reading, the first commit the search looks
    at after BAD), the 6th does not collect, the 7th really is slower. The flaky one is confirmed
    away; the broken one is skipped and named, so the answer is a range: 6 or 7."""
    good = repo.commit("GOOD")
    flag = tmp_path / "read-slow-once"
    for i in range(1, 9):
        repo.commit(f"commit {i}", seconds=1.2e-3 if i >= 7 else 1e-3, broken=i == 6,
                    **({"slow_once": str(flag)} if i == 4 else {}))
    (repo.path / "notes.txt").write_text("mine")
    done = repo.solgate("bisect", good, "HEAD", "--good-runs", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    four, six, seven = repo.commits[4], repo.commits[6], repo.commits[7]
    assert flag.exists()  # commit 4 did read slow once
    assert f"first bad commit is one of: {six[:10]} 'commit 6', {seven[:10]} 'commit 7'" in done.stdout
    assert f"skipped (tests fail, do not collect, or measure nothing selected): {six[:10]}" in done.stdout
    assert f"read below once, not on re-measurement (flaky; taken as good): {four[:10]}" in done.stdout
    skipped = next(line for line in done.stdout.splitlines() if six[:10] in line and "skipped  " in line)
    assert "the tests do not collect" in skipped and "solgate-bisect-" not in skipped
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, fragment", [
    (["nope", "HEAD"], "bisect: GOOD 'nope' is not a commit of the git repository here"),
    (["HEAD", "HEAD~1"], "is not an ancestor of BAD"),
    (["HEAD~1", "HEAD~1"], "GOOD and BAD are the same commit"),
    (["HEAD~1", "HEAD", "no_such_test*"], "bisect: no test at GOOD"),
    (["HEAD~1", "HEAD", "--good-runs", "1"], "--good-runs=1"),
])
def test_usage_errors_are_one_line_and_exit_2(repo, args, fragment):
    repo.commit("A")
    repo.commit("B")
    done = repo.solgate("bisect", *args)
    assert done.returncode == 2 and fragment in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_outside_a_repository_is_a_usage_error(tmp_path):
    done = solgate_main("bisect", "A", "B", cwd=tmp_path)
    assert done.returncode == 2 and "is not in a git repository" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_help_says_what_it_does():
    done = solgate_main("bisect", "--help")
    assert done.returncode == 0 and "usage: solgate bisect" in done.stdout
    text = " ".join(done.stdout.split())
    for said in ("GOOD's level", "noise floor", "git worktree", "skipped", "reused", "0 found, 1 not found, 2 usage error",
                 "--record", "--good-runs"):
        assert said in text, said


def test_ctrl_c_and_a_failing_good_leave_no_worktree(repo):
    import signal
    import time

    broken = repo.commit("GOOD that does not collect", broken=True)
    repo.commit("B")
    (repo.path / "notes.txt").write_text("mine")
    before = repo.state()
    done = repo.solgate("bisect", broken, "HEAD")
    assert done.returncode == 2 and "bisect: at GOOD" in done.stderr and "pytest collects nothing" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert repo.state() == before and not list(repo.scratch.glob("solgate-bisect-*"))

    good = repo.commit("GOOD whose tests take a minute to import", hang=60)
    repo.commit("C")
    before = repo.state()
    started = subprocess.Popen([sys.executable, "-m", "pytest_solgate.cli", "bisect", good, "HEAD"], cwd=repo.path,
                               env={**os.environ, "TMPDIR": str(repo.scratch)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while git(repo.path, "worktree", "list").count("\n") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)  # until the temporary worktree is there and pytest is importing the tests in it
    assert git(repo.path, "worktree", "list").count("\n") == 1, "the bisection never made its worktree"
    time.sleep(1)
    started.send_signal(signal.SIGINT)
    _, stderr = started.communicate(timeout=60)
    assert started.returncode == 130 and "Traceback" not in stderr, stderr
    assert repo.state() == before and not list(repo.scratch.glob("solgate-bisect-*"))


def test_good_and_bad_swapped_are_said_and_a_failing_commits_cause_is_kept(repo):
    slow = repo.commit("the slow one, given as GOOD", seconds=1.2e-3)
    repo.commit("fast", seconds=1e-3)
    repo.commit("fast too", seconds=1e-3)
    done = repo.solgate("bisect", slow, "HEAD", "*::test_kernel", "--good-runs", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "are GOOD and BAD swapped?" in done.stdout


def test_a_commit_whose_test_fails_is_skipped_with_its_cause(repo, tmp_path):
    from pytest_solgate.revisions.worktree import _failure

    output = ("F\n=== FAILURES ===\n___ test_kernel ___\nE   AssertionError: the kernel's output is wrong\n"
              "=== short test summary info ===\nFAILED test_kernels.py::test_kernel - AssertionError\n"
              "=== 1 failed in 0.31s ===\n")
    said = _failure(1, output, tmp_path)
    assert said.startswith("tests failed: FAILED test_kernels.py::test_kernel - AssertionError")
    assert "the kernel's output is wrong" in said and "1 failed in 0.31s" in said


SECOND_TEST = FAKE_CLOCK_KERNELS + '''
def test_second_kernel(sol):
    sol.measure(lambda: busy(5e-4), bytes=0.2e6)
'''


@pytest.mark.long(seconds=19)  # many bisections and pytest runs: .ci/run's long step runs it, beside the SIGKILL scenario
def test_forty_commits_with_nothing_recorded_take_about_log2_n_plus_4_runs_with_two_tests(repo):
    (repo.path / "test_second.py").write_text(SECOND_TEST)  # a second measuring test: GOOD's level is topped up for both at once
    good = repo.commit("GOOD", seconds=1e-3)
    step = 27
    for i in range(1, 41):
        repo.commit(f"commit {i}", seconds=1.2e-3 if i >= step else 1e-3)
    done = repo.solgate("bisect", good, "HEAD", "*kernel*")
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"first bad commit: {repo.commits[step][:10]} 'commit {step}'" in done.stdout, done.stdout
    runs, at_good, reused = run_counts(done.stdout)
    # GOOD three times for both tests' levels (not 1 + 2 per test), BAD, 5 halvings to step 27, the confirmation
    assert (runs, at_good, reused) == (3 + 1 + 5 + 1, 3, 0), done.stdout
    assert runs <= math.log2(40) + 5  # 12 before: GOOD was topped up one test at a time


def test_a_gradual_drift_is_said_not_only_one_commit_named(repo):
    good = repo.commit("GOOD", seconds=1e-3)
    for i in range(1, 25):
        repo.commit(f"commit {i}: 1 % slower", seconds=1e-3 * 1.01 ** i)
    done = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "first bad commit:" in done.stdout, done.stdout
    drift = next(line for line in done.stdout.splitlines() if "gradual drift" in line)
    assert "test_kernels.py::test_kernel [default] synthetic fell -21.2% from GOOD to BAD, and only -1.0% at this commit" \
        in drift, done.stdout


@pytest.mark.long(seconds=14)  # many bisections and pytest runs: .ci/run's long step runs it, beside the SIGKILL scenario
@pytest.mark.parametrize("seed", [3, 11])
def test_bisects_probes_and_the_gate_agree_on_every_commit_of_a_seeded_series(repo, seed, pytester):
    # A/A commits within +-2 % (under the 5 % tolerance), a 1.2x step at a seeded commit, more
    # A/A after it: bisect's probes (fresh runs in its worktree) and the gate (a recorded pytest
    # run at every commit, in order) must call the same commits below GOOD's level.
    rng = random.Random(seed)
    step = rng.randrange(4, 14)
    good = repo.commit("GOOD", seconds=1e-3)
    for i in range(1, 17):
        repo.commit(f"commit {i}", seconds=1e-3 * (1.2 if i >= step else 1) * math.exp(rng.uniform(-0.02, 0.02)))
    culprit = repo.commits[step]

    done = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"first bad commit: {culprit[:10]} 'commit {step}'" in done.stdout, done.stdout
    probes = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) > 2 and words[1] in {c[:10] for c in repo.commits[1:]}:
            probes[words[1]] = words[2]
    assert len(probes) >= 4, done.stdout

    gate = {}
    for commit in repo.commits:
        ran = repo.gate(pytester, commit, "--sol-json=gate.json")
        (kernel,) = [m for m in json.loads((repo.path / "gate.json").read_text())["measurements"]
                     if m["test"].endswith("::test_kernel")]
        gate[commit[:10]] = kernel["verdict"]
        assert ran.ret == (1 if kernel["verdict"] == "regressed" else 0), ran.stdout.str()
    git(repo.path, "checkout", "-q", "main")
    for short, probe in probes.items():
        assert (probe == "below") == (gate[short] == "regressed"), (short, probe, gate[short], done.stdout)
    # and the gate, alone, fails the culprit first: every commit before it passes, every one from it fails
    assert [gate[c[:10]] == "regressed" for c in repo.commits] == [i >= step for i in range(len(repo.commits))], gate


def test_a_history_that_already_shows_the_step_is_looked_at_first_and_the_answer_says_it_agrees(repo, pytester):
    """Issue 41: CI measured only some commits (GOOD, 5, 9, 13 and BAD, 20); the kernel fell at 11.
    The gate's story (the one `history --changes` and the gate tell) puts the fall at 13, after 9:
    bisect says so up front, reads 13 and 9 from the history before any middle commit, bisects only
    the commits between them, and the answer says it agrees with the history."""
    good = repo.commit("GOOD", seconds=1e-3)
    step = 11
    for i in range(1, 21):
        repo.commit(f"commit {i}", seconds=1.2e-3 if i >= step else 1e-3)
    for i in (0, 5, 9, 13, 20):  # the gate's runs, recorded as CI records them
        repo.gate(pytester, repo.commits[i])
    git(repo.path, "checkout", "-q", "main")
    nine, thirteen, culprit = repo.commits[9], repo.commits[13], repo.commits[step]
    changes = repo.solgate("history", "--changes", "test_kernel")
    assert any(line.startswith(thirteen[:10]) and "the gate failed it" in line for line in changes.stdout.splitlines()), \
        changes.stdout

    done = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"first bad commit: {culprit[:10]} 'commit {step}'" in done.stdout, done.stdout
    (up_front,) = [line for line in done.stdout.splitlines() if line.startswith("the history's story already puts")]
    assert f"a fall at {thirteen[:10]} 'commit 13' (13 of 20) -16.7%: SOL 0.400 -> 0.333 after {nine[:10]}, the " \
           "history has no run of the 3 commits between" in up_front, done.stdout
    assert "the gate failed it" in up_front and up_front.endswith("looked at first")
    looked = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("  ") and "SOL" in line]
    assert looked[:3] == [repo.commits[20][:10], thirteen[:10], nine[:10]], done.stdout  # BAD, then the history's fall
    assert f"the history's story agrees: it puts the fall after {nine[:10]}, at {thirteen[:10]}" in done.stdout
    runs, at_good, reused = run_counts(done.stdout)
    # one more run of GOOD; 11, 10 and 11's confirmation; BAD, 13 and 9 read from the history (halving the
    # whole range would run 10, 15, 12, 11 and the confirmation)
    assert (runs, at_good, reused) == (1 + 3, 1, 3), done.stdout


def test_a_bisection_that_ends_elsewhere_than_the_historys_fall_says_so():
    """The answer and the history's story never differ unsaid (facts in, words out)."""
    from pytest_solgate.judge import changepoints, level
    from pytest_solgate.report import bisection as report
    from pytest_solgate.revisions.bisection import Bisection, HistoryStep

    commits = tuple(f"{i:040d}" for i in range(1, 9))
    key = ("t.py::test_k", "default", "synthetic", "measured")
    fall = HistoryStep(key, level.Step(commits[4], commits[2], changepoints.ChangePoint(5, 0.4, 0.3)), 5, 3)
    facts = dict(good="0" * 40, bad=commits[-1], commits=commits, subjects={}, tests=("t.py::test_k",), levels=(),
                 probes=(), history=(fall,))
    inside = Bisection(culprit=commits[3], **facts)
    assert inside.agreeing == fall and "the history's story agrees" in "\n".join(report.lines(inside))
    elsewhere = Bisection(culprit=commits[6], **facts)
    said = "\n".join(report.lines(elsewhere))
    assert elsewhere.agreeing is None and f"the history's story puts a fall at {commits[4][:10]}, which this " \
        "bisection does not read there" in said, said
    nothing = Bisection(**facts)
    assert nothing.agreeing is None and "the history's story puts a fall at" in "\n".join(report.lines(nothing))
