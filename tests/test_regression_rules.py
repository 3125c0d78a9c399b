"""The regression rule, one named rule at a time (judge/regression_rules.py): each rule on the
evidence that makes it rule, and on the evidence that passes it on to the next."""

import math

import pytest

from pytest_solgate.judge import regression_rules, wording
from pytest_solgate.results import AMBIGUOUS, IMPROVED, PASS, REGRESSED

FLOOR = math.log(1 / (1 - 0.05))  # the noise explains a drop of 5 %


def evidence(change, floor_log=FLOOR, **more):
    return regression_rules.Evidence(change=change, tolerance=0.02, floor_log=floor_log, **more)


def test_one_run_holds_back_a_drop_when_there_is_no_spread():
    assert regression_rules.one_run(evidence(-0.5, floor_log=None)).held_back == wording.ONE_RUN
    assert regression_rules.one_run(evidence(-0.5)) is None


def test_a_drop_within_the_floor_is_held_back_with_its_words():
    ruling = regression_rules.drop_within_noise(evidence(-0.04, within_noise={"spread": 0.01}))
    assert (ruling.verdict, ruling.held_back, ruling.facts) == (AMBIGUOUS, wording.WITHIN_NOISE, {"spread": 0.01})
    assert regression_rules.drop_within_noise(evidence(-0.10)) is None


def test_another_environment_holds_back_a_drop_and_names_it():
    ruling = regression_rules.other_environment(evidence(-0.5, environment_differs=("torch 2.12.0 -> 2.13.0",)))
    assert ruling.held_back == wording.OTHER_ENVIRONMENT and "torch 2.12.0" in ruling.facts["detail"]
    assert regression_rules.other_environment(evidence(-0.5)) is None


def test_a_contended_drop_is_held_back_unless_beyond_its_wait():
    # 20 % slower while waiting 30 % of the window for a CPU: the wait explains it
    assert regression_rules.contended(evidence(-0.2, contended="load 2.0", contended_wait=0.3)).held_back == wording.CONTENDED
    # 3x slower while waiting 10 %: no wait explains that
    assert regression_rules.contended(evidence(-0.67, contended="load 2.0", contended_wait=0.1)) is None
    assert regression_rules.contended(evidence(-0.67, contended="load 2.0", contended_wait=None)).held_back == wording.CONTENDED
    assert regression_rules.contended(evidence(-0.67)) is None


def test_memory_moved_holds_back_only_what_its_shift_explains():
    assert regression_rules.memory_moved(evidence(-0.10, probe_shift=0.2)).held_back == wording.MEMORY_MOVED
    assert regression_rules.memory_moved(evidence(-0.50, probe_shift=0.2)) is None
    assert regression_rules.memory_moved(evidence(-0.10)) is None


def test_a_drop_no_rule_holds_back_is_regressed():
    assert regression_rules.rule(evidence(-0.5)).verdict == REGRESSED
    busy = regression_rules.rule(evidence(-0.67, contended="load 2.0", contended_wait=0.1))
    assert busy.verdict == REGRESSED and busy.facts["detail"] == "load 2.0"


@pytest.mark.parametrize("ev, verdict, held", [
    (evidence(0.5), IMPROVED, ""),
    (evidence(0.03), PASS, wording.WITHIN_NOISE),
    (evidence(0.5, floor_log=None), PASS, wording.ONE_RUN),
    (evidence(0.5, probe_shift=0.3), PASS, wording.MEMORY_MOVED),
    (evidence(0.01), PASS, ""),
    (evidence(-0.01, floor_log=None), PASS, ""),
])
def test_gains_and_small_changes(ev, verdict, held):
    ruling = regression_rules.rule(ev)
    assert (ruling.verdict, ruling.held_back) == (verdict, held)


def test_the_rules_are_asked_in_order():
    assert regression_rules.DROP_RULES[:2] == (regression_rules.one_run, regression_rules.drop_within_noise) and regression_rules.DROP_RULES[-1] is regression_rules.regressed
    # another environment is said before a busy machine
    ev = evidence(-0.5, environment_differs=("host a -> b",), contended="load 2.0", contended_wait=None)
    assert regression_rules.rule(ev).held_back == wording.OTHER_ENVIRONMENT


@pytest.mark.parametrize("verdict, change, floor, tolerance, slow", [
    ("ambiguous", -0.30, None, 0.05, True),  # one run: no floor covered it
    ("ambiguous", -0.30, 0.40, 0.05, False),  # within its window's floor: the noise it showed
    ("ambiguous", -0.30, 0.10, 0.05, True),  # beyond the floor, held back for another reason
    ("ambiguous", -0.03, None, 0.05, False),  # within the tolerance
    ("ambiguous", -0.07, None, None, True),  # no tolerance kept: the default (5 %)
    ("pass", -0.30, None, 0.05, False),
    ("ambiguous", None, None, 0.05, False),
])
def test_which_held_back_runs_count_as_slow(verdict, change, floor, tolerance, slow):
    assert regression_rules.held_back_slow(verdict, change, floor, tolerance) is slow
