# ruff: noqa: F811  (the repo fixture of test_history is imported, and taken as an argument)
"""``solgate compare BASE HEAD`` on a machine that is always busy follows the history gate's rules
(docs/history.md): a HEAD run busy on wall time is judged against BASE's runs as busy as it was
(judge/like_pressure.py), and the table says that HEAD's run was contended.

Real pytester runs at real commits of a git repository, then the real CLI. The kernel runs on the
tests' fake clock, beside a fake /proc whose counters move with it (tests/test_contention.py):
tasks waited for a CPU 60 % of the time and this thread 50 %, exactly, whatever this machine's
load. Another thread of the process works as long as the calling one, so the kernel is timed on
wall time, where its wait is in its time: the runs are contended and no baseline.
"""

import json

import idle_machine
from test_contention import BUSY_MACHINE_KERNEL, NappingRepo, _busy_proc
from test_history import sqlite_repo  # noqa: F401 (fixture)

from pytest_solgate.measure.backends import WALL_TIME
from test_cli import solgate

WALL_TIMED_KERNEL = BUSY_MACHINE_KERNEL + '''

@pytest.fixture
def sol_clock():
    # another thread of the process works as long as the calling one (a multi-threaded kernel): wall time
    return CpuClock(now=lambda: (FAKE_NS[0], FAKE_NS[0], 2 * FAKE_NS[0]),
                    probe=lambda: FAKE_NS.__setitem__(0, FAKE_NS[0] + FAKE_PROBE_NS[0]))
'''

BUSY = dict(stall=0.6, wait=0.5)  # the machine: tasks waited for a CPU 60 % of the time, this thread 50 %


def _busy_repo(repo, tmp_path_factory, monkeypatch):
    proc = _busy_proc(tmp_path_factory)
    NappingRepo(repo, proc, monkeypatch)  # the real contention rule, reading this /proc
    (repo.path / "test_kernels.py").write_text(WALL_TIMED_KERNEL)

    def commit(message, seconds, **machine):
        return repo.commit(message, seconds=seconds, proc=str(proc), **{**BUSY, **machine})

    def run():
        # each session's fake clock starts at 0: so do the counters that move with it
        (proc / idle_machine.CLOCK_FILE).write_text("0")
        (proc / "pressure" / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        (proc / "thread-self" / "schedstat").write_text("0 0 1\n")
        _, verdicts, _ = repo.run()
        return verdicts["test_kernel"]

    return commit, run


def _row(compared, test="test_kernel"):
    (line,) = [line for line in compared.stdout.splitlines() if f"{test} [default]" in line]
    return line


def test_compare_judges_a_busy_head_against_bases_runs_as_busy_as_it_was(sqlite_repo, tmp_path_factory, monkeypatch):
    commit, run = _busy_repo(sqlite_repo, tmp_path_factory, monkeypatch)
    base = commit("base", seconds=1e-3)
    for _ in range(3):  # three busy runs of the base: none a baseline, all as busy as the next one
        kernel = run()
        assert kernel["timing_mode"] == WALL_TIME and kernel.get("contended", "").startswith("CPU pressure 60%"), json.dumps(kernel)
    slower = commit("1.5x slower", seconds=1.5e-3)
    kernel = run()
    assert kernel["verdict"] == "regressed", kernel["reason"]  # the gate's verdict
    compared = solgate("compare", base, slower, cwd=sqlite_repo.path)
    assert compared.returncode == 1, compared.stdout + compared.stderr  # compare's: the same
    assert _row(compared).endswith("regressed  (contended: the machine was busy)"), compared.stdout
    assert (f"  contended: {slower[:10]}'s run measured while the machine was busy (CPU pressure 60%: tasks waited for "
            "a CPU, this thread 50%); judged against 3 runs as busy as this one: their threads waited 50.0%-50.0%"
            ) in compared.stdout, compared.stdout
    unchanged = commit("as fast as the base", seconds=1e-3)
    assert run()["verdict"] == "pass"
    compared = solgate("compare", base, unchanged, cwd=sqlite_repo.path)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert _row(compared).endswith("pass  (contended: the machine was busy)"), compared.stdout
    # a quiet run of HEAD is never judged against busy runs, as the gate never judges one so: no green
    quiet = commit("as fast, on a quiet machine", seconds=1e-3, stall=0.0, wait=0.0)
    assert "contended" not in run()
    compared = solgate("compare", base, quiet, cwd=sqlite_repo.path)
    assert compared.returncode == 2, compared.stdout + compared.stderr
    assert ("none of its 3 recorded run(s) can be a baseline: 3 contended (the machine was busy while they measured: "
            "they judge a run of HEAD only when it was busy too)") in compared.stderr, compared.stderr


def test_a_head_run_not_as_busy_as_bases_is_named_not_judged():
    """The table's words where one measurement's BASE runs were all busy and HEAD's run was quiet
    (judge/commits.py on recorded facts: the same rule as above, without the sessions)."""
    from test_busy_gate import busy_wall_runs
    from test_stats_score_judge import SETTINGS, at_sol, window

    from pytest_solgate.judge import commits
    from pytest_solgate.report import compare
    from solgate_testing import changed

    head = {("t.py::test_busy", "default", "synthetic", "measured"): changed(at_sol(0.70), test="t.py::test_busy"),
            ("t.py::test_quiet", "default", "synthetic", "measured"): changed(at_sol(0.70), test="t.py::test_quiet")}
    base = {("t.py::test_busy", "default", "synthetic", "measured"): busy_wall_runs((0.50, 0.55, 0.45)),
            ("t.py::test_quiet", "default", "synthetic", "measured"): list(window(0.70, 0.71, 0.69).runs)}
    rows = commits.compare(head, base, SETTINGS)
    assert [row.not_judged for row in rows] == [commits.NOT_AS_BUSY, ""] and rows[1].comparison is not None
    said = compare.table(rows, "b" * 40, "h" * 40, 10)
    assert said[1].endswith(f"  {commits.NOT_AS_BUSY}") and "  (contended" not in said[1], said
    assert ("'base busy, head not': bbbbbbbbbb's runs were contended, on wall time: no baselines, they judge only a run "
            "of hhhhhhhhhh that was busy too (from 2 of them), as the gate does") in said, said
