"""No silent green: a slowdown beyond its tolerance that the gate held back as ``ambiguous`` (a busy
machine timed on wall time, one baseline run) fails ``solgate check``, which the action runs after
the suite, naming why it could not be judged; a judged run passes it."""

from test_stats_score_judge import SETTINGS, STEADY, at_sol, window

from pytest_solgate.judge import budget, verdict
from pytest_solgate.record import schema
from pytest_solgate.results import AMBIGUOUS, RunInfo
from solgate_testing import changed
from test_cli import solgate

RUN = RunInfo(id="r1", started_at="2026-12-06T00:00:00+00:00", commit="c" * 40, profile="synthetic", ceilings="measured")


def results_file(tmp_path, *measurements):
    path = tmp_path / "sol-results.json"
    path.write_text(schema.dump(RUN, list(measurements)))
    return path


def test_a_slowdown_held_back_on_a_busy_machine_fails_the_check_naming_the_pressure(tmp_path):
    busy = changed(at_sol(0.70 / 3), contended="CPU pressure 78 %")  # on wall time, with no wait bound
    judged = verdict.judge(busy, budget.Budget(), window(*STEADY), SETTINGS)
    assert judged.verdict == AMBIGUOUS
    done = solgate("check", str(results_file(tmp_path, judged)))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "%, ambiguous: the machine was busy (CPU pressure 78 %)" in done.stdout
    assert "1 slowdown(s) beyond the tolerance that the gate could not judge: not a pass" in done.stdout


def test_judged_runs_and_drops_within_the_noise_pass_the_check(tmp_path):
    steady = verdict.judge(at_sol(0.70), budget.Budget(), window(*STEADY), SETTINGS)
    within = verdict.judge(at_sol(0.665), budget.Budget(), window(*STEADY), SETTINGS)  # within the 6.4 % floor
    assert within.verdict == AMBIGUOUS
    done = solgate("check", str(results_file(tmp_path, steady, within)))
    assert done.returncode == 0 and "no slowdown left unjudged in 2 measurement(s)" in done.stdout, done.stdout


def test_a_one_run_slowdown_fails_the_check_and_a_missing_file_is_one_line(tmp_path):
    one_run = verdict.judge(at_sol(0.35), budget.Budget(), window(0.70), SETTINGS)
    done = solgate("check", str(results_file(tmp_path, one_run)))
    assert done.returncode == 1 and "-50.0%, ambiguous" in done.stdout, done.stdout
    missing = solgate("check", str(tmp_path / "nothing.json"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
