"""Judge (the regression rule): a run's change against its baseline window decided by a sequence of
small named rules, each asked in turn until one rules. ``window.against_window`` gathers the
evidence (``Evidence``); wording.py words the ruling. Pure, no I/O.

A drop beyond the tolerance is asked, in order: is there a spread to judge it by (``one_run``)? is
it beyond the window's noise floor (``drop_within_noise``)? did the window run elsewhere
(``other_environment``), on a busy machine (``contended``), on memory in a state the window never
saw (``memory_moved``)? Only a drop that no rule holds back is ``regressed``. A gain beyond the
tolerance is ``improved`` only beyond the floor and the memory probe's shift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pytest_solgate.judge import wording
from pytest_solgate.judge.contended import beyond_contention
from pytest_solgate.measure.backends import THREAD_CPU_TIME
from pytest_solgate.results import AMBIGUOUS, IMPROVED, PASS, REGRESSED, Measurement, Verdict
from pytest_solgate.support.settings import DEFAULT_MAX_REGRESSION


@dataclass(frozen=True)
class Evidence:
    """What the rules read: one run's change against its window, and what could explain it."""

    change: float  # relative SOL change against the window's centre
    tolerance: float  # the drop the test allows
    floor_log: float | None  # the log-drop the noise cannot explain (99 %); None with one run
    environment_differs: tuple[str, ...] = ()  # facts in which every run of the window differs
    contended: str = ""  # how the machine was busy while this run measured, or ''
    contended_wait: float | None = None  # the share of its window the thread waited for a CPU
    timer: str = ""  # the clock the run was timed on (backends.THREAD_CPU_TIME: a neighbour cannot move it)
    like_pressure: bool = False  # judged against busy runs that waited for a CPU as much as this one (like_pressure.py)
    probe_shift: float = 0.0  # log-time shift of the memory probe beyond the window's range
    probe_range: float = 0.0
    # The words of a drop within the floor: its kind of noise, from how many runs it would fail (window.py)
    within_noise: wording.RulingFacts = field(default_factory=wording.RulingFacts)

    @property
    def drop_log(self) -> float:
        return abs(math.log1p(self.change))

    @property
    def beyond_floor(self) -> bool:
        return self.floor_log is not None and self.drop_log > self.floor_log


@dataclass(frozen=True)
class Ruling:
    """A rule's answer: the verdict, why it was held back ('' when not), and facts for its words."""

    verdict: Verdict
    held_back: str = ""
    facts: wording.RulingFacts | None = None


Rule = Callable[[Evidence], "Ruling | None"]


# --- a drop beyond the tolerance ---------------------------------------------------------------

def one_run(ev: Evidence) -> Ruling | None:
    """A window of one run shows no spread: the drop cannot be told from its noise."""
    return Ruling(AMBIGUOUS, wording.ONE_RUN) if ev.floor_log is None else None


def drop_within_noise(ev: Evidence) -> Ruling | None:
    """A drop the window's run-to-run noise can explain."""
    return None if ev.beyond_floor else Ruling(AMBIGUOUS, wording.WITHIN_NOISE, ev.within_noise)


def other_environment(ev: Evidence) -> Ruling | None:
    """Every run of the window ran in another environment (torch, driver, host): not comparable."""
    if not ev.environment_differs:
        return None
    return Ruling(AMBIGUOUS, wording.OTHER_ENVIRONMENT, {"detail": "; ".join(ev.environment_differs)})


def _busy(ev: Evidence) -> wording.RulingFacts:
    if not ev.contended or ev.like_pressure:  # like with like: the window's note says how busy its runs were
        return {}
    if ev.timer == THREAD_CPU_TIME:  # said, but nothing is taken out of it
        return {"detail": ev.contended, "thread_clock": True}
    return {"detail": ev.contended, "wait_share": ev.contended_wait,
            "bounded_change": beyond_contention(ev.change, ev.contended_wait)}


def contended(ev: Evidence) -> Ruling | None:
    """A contended run's drop is held back unless it stays beyond the tolerance and the floor after
    its wait for a CPU is taken out of it. A run timed on its thread's CPU clock is judged as it
    is: the wait is not in that clock; so is one judged against runs of like pressure: their
    times hold a like wait, and their spread the noise such a wait makes."""
    if not ev.contended or ev.timer == THREAD_CPU_TIME or ev.like_pressure:
        return None
    busy = _busy(ev)
    bounded = busy.get("bounded_change")
    assert ev.floor_log is not None  # one_run ruled before
    if bounded is None or bounded >= -ev.tolerance or abs(math.log1p(bounded)) <= ev.floor_log:
        return Ruling(AMBIGUOUS, wording.CONTENDED, busy)
    return None


def memory_moved(ev: Evidence) -> Ruling | None:
    """The memory probe left the window's range by enough to explain the drop."""
    assert ev.floor_log is not None
    if ev.probe_shift and ev.drop_log <= ev.floor_log + abs(ev.probe_shift):
        return Ruling(AMBIGUOUS, wording.MEMORY_MOVED, {"probe_shift": ev.probe_shift, "probe_range": ev.probe_range})
    return None


def regressed(ev: Evidence) -> Ruling:
    """A drop nothing above explains."""
    return Ruling(REGRESSED, "", {"probe_beyond": bool(ev.probe_shift), **_busy(ev)})


# --- a gain beyond the tolerance ---------------------------------------------------------------

def gain_within_noise(ev: Evidence) -> Ruling | None:
    """Say why a large gain is not ``improved``: the noise (or one run) can explain it."""
    if ev.beyond_floor:
        return None
    return Ruling(PASS, wording.WITHIN_NOISE if ev.floor_log is not None else wording.ONE_RUN)


def gain_memory_moved(ev: Evidence) -> Ruling | None:
    """A gain beside a memory probe that left the window's range passes, not ``improved``."""
    if not ev.probe_shift:
        return None
    return Ruling(PASS, wording.MEMORY_MOVED, {"probe_shift": ev.probe_shift, "probe_range": ev.probe_range})


def improved(ev: Evidence) -> Ruling:
    return Ruling(IMPROVED)


def unchanged(ev: Evidence) -> Ruling:
    return Ruling(PASS)


DROP_RULES: Sequence[Rule] = (one_run, drop_within_noise, other_environment, contended, memory_moved, regressed)
GAIN_RULES: Sequence[Rule] = (gain_within_noise, gain_memory_moved, improved)


def rules_for(ev: Evidence) -> Sequence[Rule]:
    if ev.change < -ev.tolerance:
        return DROP_RULES
    if ev.change > ev.tolerance:
        return GAIN_RULES
    return (unchanged,)


def rule(ev: Evidence) -> Ruling:
    """The first ruling of the rules that apply (each sequence ends in a rule that always rules)."""
    for each in rules_for(ev):
        ruling = each(ev)
        if ruling is not None:
            return ruling
    raise AssertionError("a rule sequence ends in a rule that always rules")



# --- what a past ruling means for later windows --------------------------------------------------

def held_back_slow(verdict: str, change: object, floor: object, tolerance: object) -> bool:
    """Whether a recorded run was judged ``ambiguous`` on a drop beyond its tolerance that its
    window's floor did not cover (none yet, or held back for another reason): such a run never
    widens a later floor (judge/level.py). A drop within a known floor is the noise its window
    showed, and stays. Facts as the record keeps them; a missing tolerance is the default."""
    if verdict != AMBIGUOUS.value or not isinstance(change, (int, float)):
        return False
    beyond_floor = not isinstance(floor, (int, float)) or change < -floor
    return beyond_floor and change < -(tolerance if isinstance(tolerance, (int, float)) else DEFAULT_MAX_REGRESSION)


def unexplained_drop(m: Measurement) -> bool:
    """A measurement whose test passed as ``ambiguous`` on a drop beyond its tolerance that no known
    noise floor covers: a slowdown the plugin could not judge (a busy machine, one baseline run,
    another environment). Not a pass in CI (``solgate check``): no silent green."""
    judgement = m.judgement
    if judgement is None or judgement.baseline is None or m.verdict is None:
        return False
    baseline = judgement.baseline
    return held_back_slow(m.verdict.value, baseline.change, baseline.noise_floor, judgement.budget.max_regression)
