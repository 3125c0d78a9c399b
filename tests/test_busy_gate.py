"""A gate on a machine that is always busy: a run that measured while other processes kept the
cores busy (contended) is judged, and is a baseline, when it was timed on its thread's CPU clock,
which a neighbour cannot move; on wall time it is held back as before (docs/history.md)."""

import dataclasses
import math

from test_stats_score_judge import SETTINGS, at_sol

from pytest_solgate.judge import level, regression_rules, verdict, wording
from pytest_solgate.judge.budget import Budget
from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.measure.backends import THREAD_CPU_TIME, WALL_TIME
from pytest_solgate.results import AMBIGUOUS, PASS, RECORDED, REGRESSED
from solgate_testing import changed

COMMITS = [f"c{i}" for i in range(8)]  # nearest first


def busy_runs(timer, sols=(0.70, 0.71, 0.69, 0.70, 0.70, 0.71, 0.70, 0.69)):
    """Eight contended runs of the base, one a commit, as the history hands them back."""
    return [BaselineRun(commit=c, run_id=f"r{i}", sol=sol, seconds=0.7e-3 / sol, noise=0.002, disturbed="contended",
                        timer=timer, verdict="pass", judged_against=COMMITS[min(i + 1, 7)])
            for i, (c, sol) in enumerate(zip(COMMITS, sols))]


def test_contended_runs_on_the_thread_clock_are_baselines_and_on_wall_time_are_not():
    window = level.window(busy_runs(THREAD_CPU_TIME), COMMITS, [], 10, {})
    assert window is not None and len(window.runs) == 8
    assert level.window(busy_runs(WALL_TIME), COMMITS, [], 10, {}) is None
    # interrupted and noisy runs stay out whatever their clock
    assert BaselineRun(commit="c", run_id="r", sol=1, seconds=1, disturbed="interrupted", timer=THREAD_CPU_TIME).kept_out


def test_a_contended_drop_on_the_thread_clock_is_judged_not_held_back():
    floor = math.log(1 / (1 - 0.06))
    on_wall = regression_rules.Evidence(change=-0.67, tolerance=0.05, floor_log=floor, contended="CPU pressure 78 %",
                                        contended_wait=None, timer=WALL_TIME)
    assert regression_rules.rule(on_wall).verdict == AMBIGUOUS and regression_rules.rule(on_wall).held_back == wording.CONTENDED
    on_thread = regression_rules.Evidence(change=-0.23, tolerance=0.05, floor_log=floor, contended="CPU pressure 78 %",
                                          contended_wait=None, timer=THREAD_CPU_TIME)
    assert regression_rules.rule(on_thread).verdict == REGRESSED  # a 1.3x slowdown, beside a neighbour
    facts = regression_rules.rule(on_thread).facts
    assert facts["thread_clock"] and "bounded_change" not in facts  # said, but no wait is taken out of it


# --- busy runs on wall time judge each other, by like pressure ------------------------------------

def busy_wall_runs(waits, sols=(0.70, 0.71, 0.69, 0.70, 0.70, 0.71)):
    """Contended runs timed on wall time, one a commit, each with the share of its window its
    thread waited for a CPU, as the history hands them back."""
    return [BaselineRun(commit=c, run_id=f"r{i}", sol=sol, seconds=0.7e-3 / sol, noise=0.002, disturbed="contended",
                        timer=WALL_TIME, verdict="recorded", wait=wait)
            for i, (c, sol, wait) in enumerate(zip(COMMITS, sols, waits))]


def busy_run(sol, wait):
    """This run: measured on wall time while its thread waited ``wait`` of the time for a CPU."""
    return changed(at_sol(sol), contended=f"CPU pressure 90 %: tasks waited for a CPU, this thread {wait:.0%}",
                   contended_wait=wait)


def test_busy_runs_on_wall_time_are_no_baselines_but_judge_a_run_as_busy_as_they_were():
    window = level.window(busy_wall_runs((0.50, 0.55, 0.45, 0.52, 0.48, 0.50)), COMMITS, [], 10, {})
    assert window is not None and window.runs == () and len(window.busy) == 6  # no baseline, six busy runs
    slower = verdict.judge(busy_run(0.70 / 1.5, wait=0.5), Budget(), window, SETTINGS)
    assert slower.verdict == REGRESSED, slower.judgement.reason  # held back by its wait before: 1/(1-0.5) = 2x
    assert "judged against 6 runs as busy as this one: their threads waited 45.0%-55.0%" in slower.judgement.reason
    assert "6 contended runs left out" not in slower.judgement.reason
    assert verdict.judge(busy_run(0.70, wait=0.5), Budget(), window, SETTINGS).verdict == PASS
    # a quiet run is never judged against busy ones: it is the level's first baseline
    quiet = verdict.judge(at_sol(0.70 / 1.5), Budget(), window, SETTINGS)
    assert quiet.verdict == RECORDED and "recorded as a baseline for later runs" in quiet.judgement.reason


def test_a_run_busier_than_its_levels_busy_runs_is_held_back_not_passed_unjudged():
    window = level.window(busy_wall_runs((0.30, 0.32, 0.28, 0.30)), COMMITS, [], 10, {})
    busier = verdict.judge(busy_run(0.70 / 1.5, wait=0.8), Budget(), window, SETTINGS)  # 5x by its wait alone
    assert busier.verdict == AMBIGUOUS and "no quiet run in this level: against its 4 busy runs" in busier.judgement.reason
    assert regression_rules.unexplained_drop(busier)  # `solgate check` fails it, naming the pressure
    # a drop its wait cannot explain: waiting 80 % of the time makes a run at most 5x slower, not 10x
    much_slower = verdict.judge(busy_run(0.70 / 10, wait=0.8), Budget(), window, SETTINGS)
    assert much_slower.verdict == REGRESSED, much_slower.judgement.reason
    # one busy run shows no spread: nothing to judge against yet (as a first run)
    one = level.window(busy_wall_runs((0.30,)), COMMITS, [], 10, {})
    first = verdict.judge(busy_run(0.70 / 1.5, wait=0.8), Budget(), one, SETTINGS)
    assert first.verdict == RECORDED and "a baseline only for later runs as busy" in first.judgement.reason


def test_a_busy_slowdown_judged_like_with_like_is_not_held_back_by_its_wait():
    floor = math.log(1 / (1 - 0.06))
    evidence = dict(change=-0.33, tolerance=0.05, floor_log=floor, contended="CPU pressure 90 %", contended_wait=0.5,
                    timer=WALL_TIME)
    assert regression_rules.rule(regression_rules.Evidence(**evidence)).held_back == wording.CONTENDED
    assert regression_rules.rule(regression_rules.Evidence(**evidence, like_pressure=True)).verdict == REGRESSED


def test_the_history_hands_back_a_busy_runs_wait(tmp_path):
    from pytest_solgate.record.store import baseline_run

    busy = busy_run(0.70, wait=0.42)
    row = {"run_uid": "r1", "commit_sha": "c" * 40, "started_at": "2026-12-07T00:00:00+00:00", "status": "complete"}
    assert baseline_run(row, busy).wait == 0.42 and baseline_run(row, busy).disturbed == "contended"
    assert baseline_run(row, at_sol(0.70)).wait is None


def test_like_pressure_is_a_like_stretch_of_the_time():
    from pytest_solgate.judge.like_pressure import like_runs

    runs = tuple(busy_wall_runs((0.40, 0.55, 0.60, 0.86, 0.90, 0.95)))
    assert [r.wait for r in like_runs(runs, 0.5)] == [0.40, 0.55, 0.60]  # stretches 1.67-2.5x around 2x
    assert [r.wait for r in like_runs(runs, 0.88)] == [0.86, 0.90]  # 7.1x and 10x around 8.3x; 20x is not like


def test_busy_cpu_runs_on_wall_time_are_compared_at_this_runs_wait():
    """Four runs of a kernel that spends 10 ms on a core, whose threads waited 80-88 % of the time
    for a CPU: 50-83 ms of wall time. Read at this run's wait they agree, so a 1.3x slowdown is
    told from them; read as they are, their spread hides it."""
    waits = (0.80, 0.85, 0.88, 0.86)
    runs = [dataclasses.replace(run, sol=0.7e-3 / (10e-3 / (1 - wait)), seconds=10e-3 / (1 - wait))
            for run, wait in zip(busy_wall_runs(waits), waits)]
    window = level.window(runs, COMMITS, [], 10, {})

    def at_wait_085(on_core):
        return changed(busy_run(0.7e-3 / (on_core / 0.15), wait=0.85), timing_mode=WALL_TIME)

    slower = verdict.judge(at_wait_085(13e-3), Budget(), window, SETTINGS)
    assert slower.verdict == REGRESSED, slower.judgement.reason
    assert "(their times as they would read at this run's wait)" in slower.judgement.reason
    assert verdict.judge(at_wait_085(10e-3), Budget(), window, SETTINGS).verdict == PASS
    # a GPU's or an events-timed run is not scaled: the wait of a CPU thread does not stretch it alike
    on_events = verdict.judge(changed(at_wait_085(13e-3), timing_mode="events"), Budget(), window, SETTINGS)
    assert on_events.verdict == AMBIGUOUS, on_events.judgement.reason
