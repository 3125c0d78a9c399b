"""Judge (words only): the message of a comparison against a baseline window, from its facts.

``verdict.against_window`` decides and hands over what it found (``ComparisonFacts``); this module
only words it, so that a message can change without touching a decision. A message reads in one
glance at 80 columns: the verdict, the change and the floor on one short first line; what it was
compared with on the next; then why it is not the verdict the change alone would suggest, and
what to do, each on a line of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_solgate.support import units

# Why a change beyond the tolerance is not the verdict it would suggest (ComparisonFacts.held_back).
ONE_RUN = "one-run"  # a window of one run shows no spread
WITHIN_NOISE = "within-noise"  # the change is within the window's noise floor
OTHER_ENVIRONMENT = "other-environment"  # the window ran in another environment
CONTENDED = "contended"  # the machine was busy while this run measured
MEMORY_MOVED = "memory-moved"  # the memory probe put the machine in a state the window never saw


@dataclass(frozen=True)
class ComparisonFacts:
    label: str  # 'test_add' or "test_add 'triton'"
    verdict: str
    change: float
    tolerance: float
    floor: float | None
    sol: float
    centre: float
    commit: str  # short
    dirty: bool
    window: str  # '5 baseline runs from a to b'
    notes: tuple[str, ...] = ()  # where the level began, what was left out of it
    memory: str = ""  # how the comparison followed the memory probe, when it did
    held_back: str = ""  # one of the reasons above, or ''
    detail: str = ""  # the reason's own facts (the environments, the contention, the probe's shift)
    advice: str = ""  # what to do about noise beyond the tolerance
    runs: int = 0  # runs kept in the window
    probe_beyond: bool = False  # a regression beyond the machine's shift by the memory probe too


def comparison_text(facts: ComparisonFacts) -> str:
    floor = units.percent(facts.floor) if facts.floor is not None else "unknown (one run)"
    lines = [
        f"{facts.verdict}: {facts.label} {units.percent(facts.change, signed=True)}, "
        f"tolerance {units.percent(facts.tolerance)}, noise floor {floor}",
        f"  SOL {facts.sol:.3f} at {facts.commit}{' (dirty)' if facts.dirty else ''} vs {facts.centre:.3f} over "
        f"{facts.window}{facts.memory}" + (f" ({'; '.join(facts.notes)})" if facts.notes else ""),
    ]
    lines += [f"  {line}" for line in _why(facts, floor)]
    return "\n".join(lines)


def _why(facts: ComparisonFacts, floor: str) -> list[str]:
    drop = facts.change < 0
    held = facts.held_back
    if held == ONE_RUN:
        return ["one baseline run cannot show the run-to-run noise, so the change cannot be told from it; the gate "
                "decides once two runs of ancestors are recorded"]
    if held == WITHIN_NOISE and drop:
        return [f"within the run-to-run noise; the tolerance is below this window's noise floor of {floor}",
                f"what to do: {facts.advice}"]
    if held == WITHIN_NOISE:
        return [f"not improved: within the run-to-run noise (an improvement must clear the noise floor of {floor} too)"]
    if held == OTHER_ENVIRONMENT:
        return [f"would be a regression, but the baseline ran in another environment ({facts.detail}); the gate "
                "decides once runs in this environment form a window"]
    if held == CONTENDED:
        return [f"would be a regression, but the machine was busy while it measured ({facts.detail}); a contended "
                "run cannot fail as regressed: run it alone"]
    if held == MEMORY_MOVED and drop:
        return [f"would be a regression, but {facts.detail}, and the drop is within the noise floor plus the "
                "probe's own shift; the gate decides on a run in the window's state (run it again)"]
    if held == MEMORY_MOVED:
        return [f"would be an improvement, but {facts.detail}"]
    if facts.verdict == "regressed":
        beyond = " and the machine's shift by the memory probe" if facts.probe_beyond else ""
        return [f"regressed (beyond the tolerance and the noise: 99 % t prediction bound over {facts.runs} runs{beyond})"]
    return []
