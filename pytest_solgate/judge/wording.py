"""Judge (words only): the message of a comparison against a baseline window, from its facts.

``window.against_window`` decides and hands over what it found (``ComparisonFacts``); this module
only words it, so that a message can change without touching a decision. A message reads in one
glance at 80 columns: the verdict, the change and the floor on one short first line; what it was
compared with on the next; then why it is not the verdict the change alone would suggest, and
what to do, each on a line of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from pytest_solgate.judge.hosts import HostSpread
from pytest_solgate.results import Measurement
from pytest_solgate.support import units

# Why a change beyond the tolerance is not the verdict it would suggest (ComparisonFacts.held_back).
ONE_RUN = "one-run"  # a window of one run shows no spread
WITHIN_NOISE = "within-noise"  # the change is within the window's noise floor
OTHER_ENVIRONMENT = "other-environment"  # the window ran in another environment
CONTENDED = "contended"  # the machine was busy while this run measured
MEMORY_MOVED = "memory-moved"  # the memory probe put the machine in a state the window never saw
# Where the noise that hides a drop comes from (ComparisonFacts.noise), for what to do about it.
MIXED_WINDOW = "mixed-window"  # a few runs of the window lie far from the others
NOISE_WITHIN_RUNS = "within-runs"  # the runs' own noise is beyond the tolerance
NOISE_BETWEEN_RUNS = "between-runs"  # the runs agree within themselves, not with each other


@dataclass(frozen=True)
class ComparisonFacts:
    label: str  # 'test_add' or "test_add 'triton'"
    verdict: str
    change: float
    tolerance: float
    floor: float | None
    sol: float
    centre: float
    commit: str  # the commit measured ('' when unknown)
    dirty: bool
    newest: str  # the window's newest and oldest commits, and how many runs it has
    oldest: str
    window_runs: int
    notes: tuple[str, ...] = ()  # where the level began, what was left out of it (baseline.level)
    left_out: tuple[tuple[str, float], ...] = ()  # (commit, SOL) of runs left out as far off the others
    clock: tuple[float, float, float] | None = None  # (moved, this run's MHz, the window's MHz), unlocked clocks
    raw_change: float | None = None  # the SOL's own change, when compared relative to the memory probe
    held_back: str = ""  # one of the reasons above, or ''
    detail: str = ""  # the reason's own facts (the environments, the contention)
    probe_shift: float = 0.0  # log-time shift of the memory probe beyond its range (MEMORY_MOVED)
    probe_range: float = 0.0  # that range, log time
    noise: str = ""  # where the noise beyond the tolerance comes from (MIXED_WINDOW, ...)
    widening: tuple[tuple[str, float], ...] = ()  # (commit, SOL) of the runs that widen a mixed window
    within: float = 0.0  # the runs' own noise, a standard deviation (log)
    spread: float = 0.0  # the run-to-run standard deviation (log)
    runs: int = 0  # runs kept in the window
    probe_beyond: bool = False  # a regression beyond the machine's shift by the memory probe too
    hosts: HostSpread | None = None  # the spread between the runners of the window, when it has two or more
    thread_clock: bool = False  # busy, but timed on the thread's CPU clock, which a wait for a CPU does not move
    machine_spread: float | None = None  # this machine's run-to-run spread from its other series (a window of one run)
    fails_from: int | None = None  # within the floor: the window's runs from which this drop would fail at their spread
    wait_share: float | None = None  # contended: the share of the window this run may have waited for a CPU
    bounded_change: float | None = None  # contended: the change had it not waited at all (None: unbounded)


class RulingFacts(TypedDict, total=False):
    """The ComparisonFacts a regression rule sets for its words (``regression_rules.Ruling.facts``)."""

    detail: str
    thread_clock: bool
    wait_share: float | None
    bounded_change: float | None
    probe_shift: float
    probe_range: float
    probe_beyond: bool
    noise: str
    widening: tuple[tuple[str, float], ...]
    within: float
    spread: float
    fails_from: int | None


# A verdict's first line fits 80 columns; its details follow, indented, on the lines below. A
# measurement's own verdicts leave room for the verdict the run puts before them ("below-budget: ").
WIDTH = 80
LED_WIDTH = WIDTH - len("below-budget: ")


def headline(lead: str, name: str, rest: str, width: int = LED_WIDTH) -> str:
    """``lead + name + rest`` within ``width`` columns, the name (a test id) cut from the middle."""
    return lead + units.cut_middle(name, max(width - len(lead) - len(rest), 40)) + rest


def short(commit: str | None) -> str:
    return (commit or "unknown")[:10]


def label(m: Measurement) -> str:
    test = m.test.split("::")[-1]
    return test if m.name == "default" else f"{test} '{m.name}'"


def comparison_text(facts: ComparisonFacts) -> str:
    floor = units.percent(facts.floor) if facts.floor is not None else "unknown (one run)"
    notes = list(facts.notes)
    if facts.left_out:
        notes.append("left out as far off the others: " + _runs(facts.left_out, ", "))
    if facts.hosts is not None:
        notes.append(_hosts(facts.hosts))
    if facts.clock is not None:
        moved, mhz, centre = facts.clock
        notes.append(f"the SM clock moved {units.percent(moved, signed=True)}: {mhz:.0f} MHz over this run's timed "
                     f"region vs {centre:.0f} MHz over the window's; clocks unlocked: --sol-lock-clocks=base compares "
                     "at one clock")
    change = f" {units.percent(facts.change, signed=True)}"
    bounds = f"tolerance {units.percent(facts.tolerance)}, noise floor {floor}"
    head = f"{facts.verdict}: {facts.label}{change}, {bounds}"
    lines = [head] if len(head) <= WIDTH else [headline(f"{facts.verdict}: ", facts.label, change, WIDTH), f"  {bounds}"]
    lines.append(
        f"  SOL {units.sol_fine(facts.sol)} at {short(facts.commit)}{' (dirty)' if facts.dirty else ''} vs {units.sol_fine(facts.centre)} over "
        f"{_window(facts)}{_at_memory_speed(facts.raw_change)}" + (f" ({'; '.join(notes)})" if notes else ""))
    lines += [f"  {line}" for line in _why(facts, floor)]
    return "\n".join(lines)


def _runs(runs: tuple[tuple[str, float], ...], joiner: str) -> str:
    return joiner.join(f"{short(commit)} (SOL {units.sol_fine(sol)})" for commit, sol in runs)


def _window(facts: ComparisonFacts) -> str:
    newest, oldest = short(facts.newest), short(facts.oldest)
    runs = units.plural(facts.window_runs, "baseline run")
    return f"{runs} at {newest}" if newest == oldest else f"{runs} from {oldest} to {newest}"


def _hosts(fleet: HostSpread) -> str:
    how = "per-host levels" if fleet.per_host else "run to run"
    new = f"; host {fleet.new_host} is new to it" if fleet.new_host else ""
    return f"{fleet.hosts} hosts: spread between hosts {units.percent(fleet.between)} ({how}), in the noise floor{new}"


def _at_memory_speed(raw_change: float | None) -> str:
    if raw_change is None:
        return ""
    return (f" at this run's memory speed (relative to the memory probe timed beside each sample; the SOL itself "
            f"changed {units.percent(raw_change, signed=True)})")


def _memory_moved(facts: ComparisonFacts) -> str:
    shift = facts.probe_shift
    return (f"the memory probe took {units.percent(abs(math.exp(shift) - 1))} "
            f"{'longer' if shift > 0 else 'less'} than over the baseline runs, beyond their range "
            f"(±{units.percent(math.exp(facts.probe_range) - 1)}): the machine ran in a state the window never saw")


def _advice(facts: ComparisonFacts, floor: str) -> str:
    if facts.noise == MIXED_WINDOW:
        several = len(facts.widening) > 1
        return (f"the window is mixed: the run{'s' if several else ''} at {_runs(facts.widening, ' and ')} "
                f"widen{'' if several else 's'} it, and {'they leave' if several else 'it leaves'} the window as new "
                "runs come (or `solgate accept` the level it shows); the tolerance stays right")
    if facts.noise == NOISE_WITHIN_RUNS:
        return (f"the runs' own noise (±{units.percent(facts.within)} within a run) is beyond the tolerance: give more "
                f"--sol-min-time, or raise max_regression above {floor}")
    return (f"the noise is between runs ({units.percent(facts.spread)} run to run, {units.percent(facts.within)} within "
            "a run): the runner changes from run to run (clocks, neighbours, frequency scaling): lock the clocks or "
            "give the runner to one job; raising max_regression would hide real regressions")


def _why(facts: ComparisonFacts, floor: str) -> list[str]:
    drop = facts.change < 0
    held = facts.held_back
    if held == ONE_RUN:
        return ["one baseline run cannot show the run-to-run noise, so the change cannot be told from it; the gate "
                "decides once two runs of ancestors are recorded"]
    if held == WITHIN_NOISE and drop:
        young = ([f"the window has {facts.runs} runs: at their spread this drop fails from {facts.fails_from} runs on"]
                 if facts.fails_from else [])
        return [f"within the run-to-run noise; the tolerance is below this window's noise floor of {floor}", *young,
                f"what to do: {_advice(facts, floor)}"]
    if held == WITHIN_NOISE:
        return [f"not improved: within the run-to-run noise (an improvement must clear the noise floor of {floor} too)"]
    if held == OTHER_ENVIRONMENT:
        return [f"would be a regression, but the baseline ran in another environment ({facts.detail}); the gate "
                "decides once runs in this environment form a window"]
    if held == CONTENDED:
        busy = f"would be a regression, but the machine was busy while it measured ({facts.detail})"
        if facts.bounded_change is None:
            return [f"{busy} and nothing bounds how much that slowed it: run it alone"]
        return [busy, f"and {_waiting(facts)}: that can explain the drop (at most "
                      f"{units.percent(facts.bounded_change, signed=True)} without it); run it alone"]
    if held == MEMORY_MOVED and drop:
        return [f"would be a regression, but {_memory_moved(facts)}, and the drop is within the noise floor plus the "
                "probe's own shift; the gate decides on a run in the window's state (run it again)"]
    if held == MEMORY_MOVED:
        return [f"would be an improvement, but {_memory_moved(facts)}"]
    if facts.verdict == "regressed":
        beyond = " and the machine's shift by the memory probe" if facts.probe_beyond else ""
        beyond += f", the host spread of {units.percent(facts.hosts.between)} included" if facts.hosts else ""
        beyond += (f", at this machine's run-to-run spread of {units.percent(facts.machine_spread)} from its other "
                   "series" if facts.machine_spread is not None else "")
        lines = [f"regressed (beyond the tolerance and the noise: 99 % t prediction bound over "
                 f"{units.plural(facts.runs, 'run')}{beyond})"]
        if facts.thread_clock:
            lines += [f"the machine was busy while it measured ({facts.detail}),",
                      "but the kernel was timed on its thread's CPU clock, which a wait for a CPU does not move"]
        if facts.bounded_change is not None:
            lines += [f"the machine was busy while it measured ({facts.detail}),", f"but {_waiting(facts)}: still "
                      f"{units.percent(facts.bounded_change, signed=True)} without it"]
        return lines
    return []


def _waiting(facts: ComparisonFacts) -> str:
    return f"waiting {units.percent(facts.wait_share)} of the time makes a run at most {1 / (1 - (facts.wait_share or 0)):.2f}x slower"


CONTENDED_NOTE = "recorded, never a baseline; it fails as regressed only by more than its wait for a CPU can explain"
