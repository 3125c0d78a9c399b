# ruff: noqa: F811  (test_bisect's repo fixture is imported, and taken as an argument)
"""``solgate ab`` on a real git repository whose kernel runs on the fake clock (its time set by a
committed speed.json, as in test_bisect.py). BASE runs in a real temporary git worktree, HEAD in
the user's tree; each run is a real pytest subprocess. The command runs by its entry function in
the test's process (test_bisect.Repo.solgate), a process of its own where a signal is tested."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from test_bisect import repo  # noqa: F401 (a fixture)

from pytest_solgate.judge import paired
from pytest_solgate.results import AMBIGUOUS, IMPROVED, PASS, REGRESSED


def test_a_slower_head_regresses_and_exits_1_and_its_runs_are_recorded(repo):
    base = repo.commit("BASE", seconds=1e-3)
    repo.commit("slower", seconds=1.2e-3)
    (repo.path / "notes.txt").write_text("mine")
    before = repo.state()
    done = repo.solgate("ab", base, "*::test_kernel", "--markdown", str(repo.path.parent / "ab.md"), "--rounds", "4")
    assert done.returncode == 1, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if "test_kernel [default]" in line)
    assert "0.400   0.333   -16.7%" in row and row.split()[-1] == "regressed", done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("1 regressed of 1 measurement(s)")
    assert "round 1, head" in done.stderr and "round 1, base" in done.stderr
    table = (repo.path.parent / "ab.md").read_text()
    assert "| test_kernels.py::test_kernel [default] synthetic | 0.400 | 0.333 | -16.7% |" in table
    assert "**regressed**" in table
    assert repo.state() == before  # the base ran in a worktree: status, HEAD, worktree list untouched
    # HEAD's runs are in the history like any run; the base's are not
    listed = repo.solgate("history", "test_kernel")
    head = repo.commits[-1][:10]
    assert listed.stdout.count(head) >= 3 and base[:10] not in listed.stdout, listed.stdout


def test_an_unchanged_head_passes_and_a_pull_request_records_nothing(repo):
    base = repo.commit("BASE", seconds=1e-3)
    repo.commit("docs only", seconds=1e-3)
    done = repo.solgate("ab", base, "--no-record", "--rounds", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if "test_kernel [default]" in line)
    assert "+0.0%" in row and row.split()[-1] == "pass"
    assert "3 round(s)" in done.stdout
    assert "no history database here yet" in repo.solgate("history").stderr  # nothing was written


def test_each_run_is_one_pytest_process_that_collects_only_what_it_runs(repo, tmp_path):
    # every pytest session appends what it collected: no --collect-only pass before the rounds, and
    # after round 1 only the undecided kernel is collected (the other test is deselected in round 1)
    log = tmp_path / "sessions.log"
    (repo.path / "conftest.py").write_text(
        "import os\n\n"
        "def pytest_collection_finish(session):\n"
        "    with open(os.environ['SESSIONS_LOG'], 'a') as out:\n"
        "        out.write(' '.join(sorted(i.nodeid for i in session.items)) + '\\n')\n")
    (repo.path / "test_other.py").write_text("def test_other():\n    pass\n")
    base = repo.commit("BASE", seconds=1e-3)
    repo.commit("slower", seconds=1.5e-3)
    done = repo.solgate("ab", base, "*::test_kernel", "--no-record", "--rounds", "4",
                        env={"SESSIONS_LOG": str(log)})
    assert done.returncode == 1, done.stdout + done.stderr
    sessions = log.read_text().splitlines()
    rounds = int(done.stdout.split(" round(s)")[0].rsplit(" ", 1)[1])
    assert len(sessions) == 2 * rounds, sessions  # one process per side per round, none to collect
    assert set(sessions) == {"test_kernels.py::test_kernel"}, sessions  # test_other deselected, never run


def test_pytest_options_after_the_double_dash_reach_every_run(repo):
    base = repo.commit("BASE", seconds=1e-3)
    repo.commit("HEAD", seconds=1e-3)
    done = repo.solgate("ab", base, "--no-record", "--", "--sol-max-time=oops")
    assert done.returncode == 2 and "--sol-max-time" in done.stderr, done.stdout + done.stderr
    refused = repo.solgate("history", "--", "-x")
    assert refused.returncode == 2 and "only bisect and ab do" in refused.stderr


def test_bad_input_is_one_line(repo):
    repo.commit("BASE", seconds=1e-3)
    for args, said in ((["ab", "nosuchref"], "BASE 'nosuchref' is not a commit"),
                       (["ab", "HEAD", "--rounds", "2"], "--rounds=2: give 3 or more"),
                       (["ab", "HEAD", "test_nothing_like_it"], "no test at HEAD matches 'test_nothing_like_it'"),
                       (["ab", "HEAD", "--path", "no/such/dir"], "--path no/such/dir: no such file or folder at HEAD "
                                                                 "or at BASE")):
        done = repo.solgate(*args)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


SLEEPS_IN_THE_WORKTREE = """\
import os, pathlib, time

def test_sleepy():
    if pathlib.Path.cwd().resolve() != pathlib.Path(os.environ["AB_REPO"]).resolve():  # the base's worktree
        pathlib.Path(os.environ["AB_MARKER"]).write_text(str(os.getpid()))
        time.sleep(300)
"""


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_ab_stops_its_pytest_and_removes_its_worktree(repo, tmp_path, sent):
    """A real signal to a real `solgate ab` while its base's pytest runs in the worktree: the
    child is stopped, the worktree is gone from git and from disk, and the exit is not 0."""
    (repo.path / "test_sleepy.py").write_text(SLEEPS_IN_THE_WORKTREE)
    base = repo.commit("BASE", seconds=1e-3)
    repo.commit("HEAD", seconds=1e-3)
    marker = tmp_path / "child.pid"
    env = {**os.environ, "TMPDIR": str(repo.scratch), "AB_REPO": str(repo.path), "AB_MARKER": str(marker)}
    ab = subprocess.Popen([sys.executable, "-m", "pytest_solgate.cli", "ab", base, "--no-record"], cwd=repo.path,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not marker.exists() and ab.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), ab.communicate()
    child = int(marker.read_text())
    assert len(subprocess.run(["git", "worktree", "list"], cwd=repo.path, capture_output=True,
                              text=True).stdout.splitlines()) == 2  # the base's worktree is there while it runs
    ab.send_signal(sent)
    try:
        out, err = ab.communicate(timeout=60)
        child_left = _running(child)
    finally:  # whatever the outcome, this test leaves nothing running
        ab.kill()
        _kill_if_running(child)
    assert ab.returncode == 128 + sent, out + err
    assert f"stopped by {sent.name}" in err and "worktree removed" in err, err
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo.path, capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1, listed
    assert not list(repo.scratch.glob("solgate-ab-*")), list(repo.scratch.iterdir())
    assert not child_left, "the base's pytest is still running"


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_if_running(pid):
    if _running(pid):
        os.kill(pid, signal.SIGKILL)


def _pairs(ratio, sd, n, seed):
    import random

    rng = random.Random(seed)
    return [paired.Pair(0.4, 0.4 * ratio * math.exp(rng.gauss(0, sd))) for _ in range(n)]


def test_the_paired_rule():
    # 1.2x slower: regressed; the same speed: pass; 1.2x faster: improved; too few or too noisy: not decided
    assert paired.judge_pairs(_pairs(1 / 1.2, 0.03, 5, 1), 0.05).verdict == REGRESSED
    assert paired.judge_pairs(_pairs(1.0, 0.03, 5, 2), 0.05).verdict == PASS
    assert paired.judge_pairs(_pairs(1.2, 0.03, 5, 3), 0.05).verdict == IMPROVED
    noisy = paired.judge_pairs(_pairs(1 / 1.1, 0.3, 3, 4), 0.05)
    assert noisy.verdict == AMBIGUOUS and not noisy.tight and noisy.low < -0.05 < noisy.high
    one = paired.judge_pairs(_pairs(1 / 1.5, 0.0, 1, 5), 0.05)
    assert one.verdict == AMBIGUOUS and not one.tight  # one pair shows no spread
    # false alarms of an unchanged HEAD: under 1 % of A/Bs by construction
    alarms = sum(paired.judge_pairs(_pairs(1.0, 0.05, 5, s), 0.05).verdict == REGRESSED for s in range(2000))
    assert alarms <= 20, alarms
    # the runs' own noise is a floor under the rounds' spread: identical pairs are not infinitely sure
    same = [paired.Pair(0.4, 0.39, 0.01, 0.01)] * 4
    assert paired.judge_pairs(same, 0.05).high > -0.025 and paired.judge_pairs(same, 0.05).verdict == PASS
    wide = [paired.Pair(0.4, 0.39, 0.02, 0.02)] * 4  # runs this noisy cannot rule out -5 % in four rounds
    assert json.dumps(paired.judge_pairs(wide, 0.05).verdict) == '"ambiguous"'
