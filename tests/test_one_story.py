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
