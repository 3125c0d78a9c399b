# ruff: noqa: F811  (test_history's repo fixtures are imported, and taken as arguments)
"""The gate and its history tell one story (issue 30): a commit the gate fails as `regressed`
(confirmed against its window) is named by `solgate history --changes`, its JSON and the trend
page, even where the series alone would not show a step there.

The sequence the issue measured, through real commits and real pytest runs on the fake clock:
20 A/A commits whose SOL spreads about 8 % run to run, then a 1.4x slowdown at the newest commit.
The gate's window (its last 10 runs) calls it regressed; the whole series' newest-commit test
(4 robust sigmas) alone does not list it.
"""

import json
import math
import random

from test_history import sqlite_repo  # noqa: F401 (a fixture)

from test_cli import solgate

SEED = 1
SPREAD = 0.08


def a_a_seconds(count, seed=SEED):
    """Log-uniform around 1 ms with a standard deviation of SPREAD: no tail that a 99 % bound
    would call a regression by chance (that 1 % is the gate's own, and not under test here)."""
    rng = random.Random(seed)
    half_width = SPREAD * math.sqrt(3)
    return [1e-3 * math.exp(rng.uniform(-half_width, half_width)) for _ in range(count)]


def test_a_commit_the_gate_fails_is_a_step_in_changes_its_json_and_the_trend_page(sqlite_repo):
    repo = sqlite_repo
    for i, seconds in enumerate(a_a_seconds(20)):
        repo.commit(f"A/A {i}", seconds=seconds)
        _, verdicts, _ = repo.run()
        assert verdicts["test_kernel"]["verdict"] != "regressed", (i, verdicts["test_kernel"]["reason"])
    head = repo.commit("1.4x slower", seconds=1.4e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed" and kernel["baseline"]["confirmed"] is True, kernel["reason"]

    listing = solgate("history", "--changes", "test_kernel", cwd=repo.path)
    assert listing.returncode == 0, listing.stderr
    (line,) = [line for line in listing.stdout.splitlines() if line.startswith(head[:10]) and "::test_kernel " in line]
    assert "provisional: the newest commit" in line and "the gate failed it as regressed" in line, listing.stdout

    as_json = json.loads(solgate("history", "--changes", "--json", "test_kernel", cwd=repo.path).stdout)
    (series,) = [m for m in as_json["measurements"] if m["test"].endswith("::test_kernel")]
    (step,) = [s for s in series["steps"] if s["commit"] == head]
    assert step["provisional"] is True and step["by_gate"] is True and step["change"] < -0.2

    page = repo.path / "trend.html"
    made = solgate("trend", "test_kernel", "-o", str(page), cwd=repo.path)
    assert made.returncode == 0, made.stderr
    assert f"stepped at {head[:10]} (provisional)" in page.read_text()


def test_the_gates_decision_names_a_commit_the_series_alone_would_not():
    from pytest_solgate.judge import changepoints

    values = [0.4 / (s / 1e-3) for s in a_a_seconds(20)] + [0.4 / 1.4]
    alone = changepoints.find(values)
    assert not any(cp.index == 20 for cp in alone.points)  # the series alone: no step at the newest
    told = changepoints.find(values, regressed=[20])
    (step,) = [cp for cp in told.points if cp.index == 20]
    assert step.provisional and step.by_gate and step.change < -0.2
    # A failed commit whose slowdown the next commits undid is named too: as an outlier.
    undone = changepoints.find(values[:10] + [0.4 / 1.4] + values[10:20], regressed=[10])
    assert [o.index for o in undone.outliers] == [10] and not any(cp.index == 10 for cp in undone.points)


def test_a_failed_commit_with_only_an_outlier_before_it_reads_without_an_error():
    from pytest_solgate.judge import changepoints

    # The first commit is an outlier, the second failed the gate: no level before the failure to
    # step from, so the gate's decision adds no step there (it raised 'mean of no values').
    changes = changepoints.find([1.0, 0.3, 1.0, 1.01, 0.99, 1.0], regressed=[1])
    assert [o.index for o in changes.outliers] == [0] and not any(cp.by_gate for cp in changes.points)


# --- messages read in one glance at 80 columns (issue 31 item 5) ------------------------------------


def _window(sols, probe=None):
    from pytest_solgate.judge import window as windows

    return windows.BaselineWindow(runs=tuple(
        windows.BaselineRun(commit=f"{i:040x}", run_id=f"r{i}", sol=sol, seconds=0.4e-3 / sol, noise=0.002,
                            probe_seconds=probe)
        for i, sol in enumerate(sols)))


def test_a_comparison_leads_with_the_verdict_the_change_and_the_floor_on_one_short_line():
    from test_history import STEADY, a_measurement

    from pytest_solgate import results
    from pytest_solgate.judge import budget as budgets
    from pytest_solgate.judge import verdict
    from pytest_solgate.judge import window as windows
    from solgate_testing import changed

    slow = changed(a_measurement(0.2), t_sol=0.4e-3, seconds=2e-3, noise=0.002)
    got = verdict.judge(slow, budgets.Budget(), _window(STEADY), windows.JudgeSettings(commit="c" * 40))
    first, *rest = got.judgement.reason.splitlines()
    assert got.verdict == results.REGRESSED
    assert first == "regressed: test_k -48.7%, tolerance 5.0%, noise floor 8.0%" and len(first) <= 80
    assert rest[0].startswith("  SOL 0.200 at cccccccccc vs 0.390 over 5 baseline runs")
    assert rest[1].startswith("  regressed (beyond the tolerance and the noise")
    assert "compared on time" not in got.judgement.reason


def test_a_large_gain_within_the_floor_says_why_it_is_not_improved():
    from test_history import a_measurement

    from pytest_solgate import results
    from pytest_solgate.judge import budget as budgets
    from pytest_solgate.judge import verdict
    from pytest_solgate.judge import window as windows
    from solgate_testing import changed

    noisy = [0.2, 0.5, 0.15, 0.45, 0.25]  # a window whose floor is far beyond +70 %
    fast = changed(a_measurement(0.5), t_sol=0.4e-3, seconds=0.4e-3 / 0.47, noise=0.002)
    got = verdict.judge(fast, budgets.Budget(), _window(noisy), windows.JudgeSettings())
    assert got.verdict == results.PASS and got.judgement.baseline.change > 0.5
    first, _, why, *_ = got.judgement.reason.splitlines()
    assert first.startswith("pass: test_k +")
    assert why.startswith("  not improved: within the run-to-run noise (an improvement must clear the noise floor of")


# --- the gate's level and story as pure functions over hand-made runs (issue 41 item 3) ----------


def _runs(*sols_and_verdicts):
    """Runs nearest commit first (as the store returns them): commit i is 'c{i}', one run each,
    judged against the window whose newest commit is the first older one not judged so (a
    'regressed' or 'ambiguous-slow' run's window is the level before)."""
    from pytest_solgate.judge.window import BaselineRun

    runs = []
    for i, item in enumerate(sols_and_verdicts):
        sol, verdict = item if isinstance(item, tuple) else (item, "pass")
        older = [j for j in range(i + 1, len(sols_and_verdicts)) if not isinstance(sols_and_verdicts[j], tuple)]
        runs.append(BaselineRun(commit=f"c{i}", run_id=f"r{i}", sol=sol, seconds=1e-3, noise=0.002,
                                verdict="ambiguous" if verdict == "ambiguous-slow" else verdict,
                                judged_change=-0.5 if verdict == "ambiguous-slow" else None, judged_against=f"c{older[0] if older else i + 1}"))
    return runs, [f"c{i}" for i in range(len(sols_and_verdicts))]


def test_level_keeps_one_level_and_leaves_a_regressed_run_out():
    from pytest_solgate.judge import level

    runs, commits = _runs((0.3, "regressed"), *[0.4 + 0.001 * (i % 3) for i in range(12)])
    kept, notes = level.level(runs, commits, [], window_size=10)
    assert [r.commit for r in kept] == [f"c{i}" for i in range(1, 11)]
    assert "1 regressed run left out" in notes


def test_level_starts_at_a_confirmed_step_the_gate_did_not_fail():
    from pytest_solgate.judge import level

    # an improvement 5 commits ago (0.4 -> 0.6), confirmed by the commits after it
    runs, commits = _runs(*[0.6] * 5, *[0.4 + 0.001 * (i % 3) for i in range(10)])
    kept, notes = level.level(runs, commits, [], window_size=10)
    assert [r.commit for r in kept] == [f"c{i}" for i in range(5)]
    assert "level since the last confirmed change point at c4" in notes


def test_a_fall_the_gate_failed_is_no_new_level_until_accepted():
    from pytest_solgate.judge import level

    fallen = [(0.3, "regressed")] * 5
    runs, commits = _runs(*fallen, *[0.4 + 0.001 * (i % 3) for i in range(10)])
    kept, notes = level.level(runs, commits, [], window_size=10)
    assert {r.commit for r in kept} == {f"c{i}" for i in range(5, 15)}  # main stays red at the old level
    assert any(note.startswith("the level fell at c4") for note in notes)
    accepted, notes = level.level(runs, commits, ["c4"], window_size=10)
    assert [r.commit for r in accepted] == [f"c{i}" for i in range(5)]  # accepted: its level from there
    assert "level since the accepted slowdown at c4" in notes
    inherited, notes = level.level(runs, commits, [], window_size=10, inherit=True)
    assert [r.commit for r in inherited] == [f"c{i}" for i in range(5)] and "inherited" in notes[-1]


def test_the_story_names_the_steps_the_gate_saw_the_ones_it_failed_and_where_the_level_is():
    from pytest_solgate.judge import level

    flat = [level.Point(0.4 + 0.001 * (i % 3), 1) for i in range(10)]
    improved = [level.Point(0.6, 1) for _ in range(4)]
    fell = [level.Point(0.45, 1, regressed=(13,))] + [level.Point(0.45, 1, regressed=(13,)) for _ in range(3)]
    told = level.story(flat + improved + fell)
    assert [cp.index for cp in told.changes.points] == [10, 14]
    assert told.failed == {14} and told.start == 10  # the fall the gate failed starts no level
    failed_once = level.story(flat + [level.Point(0.401, 2, regressed=(9,))] + flat)
    assert failed_once.apart == (10,) and failed_once.start is None  # one of two runs failed: said apart


def test_along_a_chain_the_story_names_its_steps_by_commit_and_the_fall_still_red():
    """``level.along``: the gate's story of runs read along a first-parent chain, as compare and
    bisect tell it: the same points and the same ``story`` as the gate's window."""
    from pytest_solgate.judge import level

    runs, commits = _runs(*[(0.3, "regressed")] * 5, *[0.4 + 0.001 * (i % 3) for i in range(10)])
    told = level.along(runs, commits)
    (step,) = told.steps
    assert (step.commit, step.since, step.failed, step.point.provisional) == ("c4", "c5", True, False)
    assert told.red == step and level.story(level.chain_points(runs, commits)[0]).failed == {10}
    assert level.along(runs, commits, accepted=["c2"]).red is None  # accepted after the fall: no longer red
    assert level.along(runs, commits, accepted=["c7"]).red == step  # an accept before it does not end it
    reverted, chain = _runs(0.4, *[(0.3, "regressed")] * 5, *[0.4 + 0.001 * (i % 3) for i in range(10)])
    told = level.along(reverted, chain)
    assert [s.commit for s in told.steps] == ["c5", "c0"] and told.steps[-1].point.provisional and told.red is None


def test_a_pull_request_is_told_by_the_event_name_passed_in():
    from pytest_solgate.judge import level

    assert level.is_pull_request("pull_request") and level.is_pull_request("pull_request_target")
    assert not level.is_pull_request("push") and not level.is_pull_request("")


def test_a_run_that_was_ambiguous_slow_never_widens_the_floor_later_runs_are_judged_against():
    """Issue 44 item 5: a 1.26x slowdown read `ambiguous` (the window could not tell yet) stayed in
    the window; after the revert the next run read a floor of 99.8 %."""
    from pytest_solgate.judge import level

    runs, commits = _runs((0.4 / 1.26, "ambiguous-slow"), 0.4, 0.401)
    kept, notes = level.level(runs, commits, [], window_size=10)
    assert [r.commit for r in kept] == ["c1", "c2"] and "1 ambiguous slow run left out" in notes
    # one that stays: the confirmed step is a level of its own, so the slow runs form its window
    runs, commits = _runs(*[(0.3, "ambiguous-slow")] * 4, *[0.4 + 0.001 * (i % 3) for i in range(8)])
    kept, _ = level.level(runs, commits, [], window_size=10)
    assert [r.commit for r in kept] == ["c0", "c1", "c2", "c3"]


def test_a_drop_a_young_window_cannot_tell_says_from_how_many_runs_it_would_fail():
    """Issue 44 item 5: a verdict says how many clean runs the gate needs before the drop can fail."""
    from test_history import a_measurement

    from pytest_solgate import results
    from pytest_solgate.judge import budget as budgets
    from pytest_solgate.judge import verdict
    from pytest_solgate.judge import window as windows
    from solgate_testing import changed

    slow = changed(a_measurement(0.31), t_sol=0.4e-3, seconds=0.4e-3 / 0.31, noise=0.002)
    got = verdict.judge(slow, budgets.Budget(), _window([0.400, 0.408]), windows.JudgeSettings())
    assert got.verdict == results.AMBIGUOUS, got.judgement.reason
    assert "the window has 2 runs: at their spread this drop fails from 3 runs on" in got.judgement.reason
    one = verdict.judge(slow, budgets.Budget(), _window([0.400]), windows.JudgeSettings())
    assert "once two runs of ancestors are recorded" in one.judgement.reason
