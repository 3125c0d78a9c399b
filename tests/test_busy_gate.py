"""A gate on a machine that is always busy: a run that measured while other processes kept the
cores busy (contended) is judged, and is a baseline, when it was timed on its thread's CPU clock,
which a neighbour cannot move; on wall time it is held back as before (docs/history.md)."""

import math

from pytest_solgate.judge import level, regression_rules, wording
from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.measure.backends import THREAD_CPU_TIME, WALL_TIME
from pytest_solgate.results import AMBIGUOUS, REGRESSED

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
