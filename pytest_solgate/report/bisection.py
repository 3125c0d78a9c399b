"""Report: the words of ``solgate bisect``: the facts of a bisection (``pytest_solgate.revisions.bisection``),
as lines for the terminal. Pure: a bisection in, text out."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from pytest_solgate.judge.story import Step
from pytest_solgate.support import units

# What the words read of a bisection: revisions/bisection.py's records (the run stage, which a
# report does not import), each attribute as it types it.
Key = tuple[str, str, str, str]  # test, name, profile, ceilings


class ReadingFacts(Protocol):  # revisions/bisection.py Reading
    @property
    def key(self) -> Key: ...
    @property
    def sol(self) -> float: ...
    @property
    def level(self) -> float: ...
    @property
    def change(self) -> float: ...
    @property
    def floor(self) -> float | None: ...
    @property
    def tolerance(self) -> float: ...
    @property
    def verdict(self) -> str: ...
    @property
    def below(self) -> bool: ...


class ProbeFacts(Protocol):  # revisions/bisection.py Probe
    @property
    def commit(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def readings(self) -> Sequence[ReadingFacts]: ...
    @property
    def skipped(self) -> str: ...
    @property
    def ran(self) -> bool: ...
    @property
    def confirmation(self) -> bool: ...
    @property
    def bad(self) -> bool: ...


class LevelFacts(Protocol):  # revisions/bisection.py Level
    @property
    def key(self) -> Key: ...
    @property
    def sol(self) -> float: ...
    @property
    def runs(self) -> int: ...
    @property
    def reused(self) -> int: ...


class DriftFacts(Protocol):  # revisions/bisection.py Drift
    @property
    def key(self) -> Key: ...
    @property
    def total(self) -> float: ...
    @property
    def step(self) -> float: ...
    @property
    def since(self) -> str: ...


class FallFacts(Protocol):  # revisions/bisection.py HistoryStep
    @property
    def key(self) -> Key: ...
    @property
    def step(self) -> Step: ...
    @property
    def position(self) -> int: ...
    @property
    def since(self) -> int: ...


class BisectionFacts(Protocol):  # revisions/bisection.py Bisection
    @property
    def good(self) -> str: ...
    @property
    def bad(self) -> str: ...
    @property
    def commits(self) -> Sequence[str]: ...
    @property
    def subjects(self) -> Mapping[str, str]: ...
    @property
    def tests(self) -> Sequence[str]: ...
    @property
    def levels(self) -> Sequence[LevelFacts]: ...
    @property
    def probes(self) -> Sequence[ProbeFacts]: ...
    @property
    def culprit(self) -> str | None: ...
    @property
    def candidates(self) -> Sequence[str]: ...
    @property
    def skipped(self) -> Sequence[str]: ...
    @property
    def good_runs_made(self) -> int: ...
    @property
    def flaky(self) -> Sequence[str]: ...
    @property
    def unclear(self) -> Sequence[str]: ...
    @property
    def drift(self) -> Sequence[DriftFacts]: ...
    @property
    def history(self) -> Sequence[FallFacts]: ...
    @property
    def agreeing(self) -> FallFacts | None: ...
    @property
    def runs(self) -> int: ...
    @property
    def reused(self) -> int: ...


def short(commit: str | None) -> str:
    return (commit or "unknown")[:10]


def _label(key: Sequence[str]) -> str:
    test, name, profile, _ceilings = key
    return f"{test} [{name}] {profile}"


def progress(probe: ProbeFacts, total: int) -> str:
    """One line while the bisection runs: which commit was looked at and what it read."""
    what = "confirming" if probe.confirmation else "looked at"
    state = f"skipped: {probe.skipped}" if probe.skipped else ("below GOOD's level" if probe.bad else "at GOOD's level")
    how = "ran" if probe.ran else "from the history"
    return f"solgate bisect: {what} {short(probe.commit)} ({probe.position}/{total}, {how}): {state}"


def evidence(probe: ProbeFacts) -> list[str]:
    """A probe's lines in the evidence table: one per measurement, or one saying why it was skipped."""
    where = f"{probe.position:>4}  {short(probe.commit):<10}"
    tag = (" (confirmation)" if probe.confirmation else "") + ("" if probe.ran else " (from the history)")
    if probe.skipped:
        return [f"{where}  {'skipped':<8} {probe.skipped}{tag}"]
    lines = []
    for reading in probe.readings:
        state = "below" if reading.below else ("ambiguous" if reading.verdict == "ambiguous" else "level")
        floor = units.percent(reading.floor) if reading.floor is not None else "unknown"
        lines.append(
            f"{where}  {state:<8} SOL {units.sol_fine(reading.sol)} vs {units.sol_fine(reading.level)} "
            f"{units.percent(reading.change, signed=True):>7}  tolerance {units.percent(reading.tolerance)}, "
            f"floor {floor}  {_label(reading.key)}{tag}"
        )
    return lines


def _named(commit: str, subjects: Mapping[str, str]) -> str:
    subject = subjects.get(commit, "")
    return f"{short(commit)} {subject!r}" if subject else short(commit)


def _why_not_found(b: BisectionFacts) -> list[str]:
    """What BAD's own readings say when nothing was found: GOOD and BAD swapped (BAD reads faster),
    or a drop GOOD's noise hides (measure longer)."""
    readings = [r for p in b.probes if p.commit == b.bad and not p.skipped for r in p.readings]
    if any(r.verdict == "improved" for r in readings):
        return ["  BAD reads faster than GOOD, beyond the noise: are GOOD and BAD swapped? "
                "(solgate bisect GOOD BAD: the fast commit first)"]
    if any(r.verdict == "ambiguous" for r in readings):
        return ["  BAD's drop is within GOOD's run-to-run noise: measure longer (pass --sol-max-time=SECONDS "
                "after --) or give more --good-runs"]
    return []


def _history_fall(fall: FallFacts, b: BisectionFacts) -> str:
    """Up front: a fall the history's story already puts in the range, looked at first."""
    step, cp = fall.step, fall.step.point
    since = short(step.since) if step.since else "GOOD"
    gap = fall.position - fall.since - 1
    between = f", the history has no run of the {units.plural(gap, 'commit')} between" if gap > 0 else ""
    return (f"the history's story already puts a fall at {_named(step.commit, b.subjects)} ({fall.position} of "
            f"{len(b.commits)}) {units.percent(cp.change, signed=True)}: SOL {units.sol_fine(cp.before)} -> "
            f"{units.sol_fine(cp.after)} after {since}{between}  {_label(fall.key)}"
            + ("; the gate failed it" if step.failed or cp.by_gate else "")
            + ("; provisional" if cp.provisional else "") + ": looked at first")


def _history_agrees(b: BisectionFacts) -> str:
    """After the answer: whether it lies where the history's story puts the fall (one story), or not."""
    fall = b.agreeing
    if fall is not None:
        if (b.culprit or b.candidates[-1]) == fall.step.commit:
            return f"  the history's story agrees: it puts the fall at {short(fall.step.commit)} too"
        since = short(fall.step.since) if fall.step.since else "GOOD"
        return (f"  the history's story agrees: it puts the fall after {since}, at {short(fall.step.commit)}, the next "
                "commit it has runs of; this is the one between them")
    falls = ", ".join(short(f.step.commit) for f in b.history)
    return (f"  the history's story puts a fall at {falls}, which this bisection does not read there against GOOD's "
            "level (by the gate's rule: the tolerance and the noise floor); the history's runs may be another "
            "machine's, or its step within the tolerance")


def lines(bisection: BisectionFacts) -> list[str]:
    """The whole answer: the range, GOOD's level, the evidence per commit, the culprit, the cost."""
    b = bisection
    out = [f"bisect: {len(b.commits)} commit(s) after GOOD {short(b.good)} on the first-parent line to BAD "
           f"{short(b.bad)}; {len(b.tests)} test(s): {', '.join(b.tests)}"]
    for level in b.levels:
        from_history = f", {level.reused} from the history" if level.reused else ""
        out.append(f"GOOD's level: SOL {units.sol_fine(level.sol)} over {level.runs} run(s){from_history}  "
                   f"{_label(level.key)}")
    out += [_history_fall(fall, b) for fall in b.history]
    out.append("evidence (position in the range, commit, against GOOD's level):")
    for probe in b.probes:
        out += evidence(probe)
    if b.culprit:
        out.append(f"first bad commit: {_named(b.culprit, b.subjects)} "
                   f"({b.commits.index(b.culprit) + 1} of {len(b.commits)} after GOOD)")
    elif b.candidates:
        out.append("first bad commit is one of: " + ", ".join(_named(c, b.subjects) for c in b.candidates)
                   + " (the ones before the last could not be tested; see skipped)")
    elif b.probes and b.probes[0].skipped:
        out.append(f"not found: BAD {short(b.bad)} could not be tested ({b.probes[0].skipped})")
    else:
        out.append(f"not found: BAD {short(b.bad)} is not below GOOD's level by more than the tolerance and the "
                   "noise floor" + (" once re-measured" if b.flaky else ""))
        out += _why_not_found(b)
    if b.history:
        out.append(_history_agrees(b))
    for drift in b.drift:
        out.append(f"  a gradual drift, not one step: {_label(drift.key)} fell {units.percent(drift.total, signed=True)} "
                   f"from GOOD to BAD, and only {units.percent(drift.step, signed=True)} at this commit (against "
                   f"{short(drift.since)}, read at GOOD's level); the slowdown spreads over several commits: "
                   "look at the range, not only this one")
    if b.skipped:
        out.append("skipped (tests fail, do not collect, or measure nothing selected): "
                   + ", ".join(short(c) for c in b.skipped))
    if b.flaky:
        out.append("read below once, not on re-measurement (flaky; taken as good): "
                   + ", ".join(short(c) for c in b.flaky))
    if b.unclear:
        out.append("read ambiguous twice (within GOOD's noise or disturbed; never taken as GOOD's level, skipped): "
                   + ", ".join(short(c) for c in b.unclear))
    looked = len({p.commit for p in b.probes})
    out.append(f"{b.runs} run(s): {b.good_runs_made} at GOOD for its level, {b.runs - b.good_runs_made} at "
               f"{looked} of {len(b.commits)} commit(s) looked at; {b.reused} reading(s) reused from the history")
    return out
