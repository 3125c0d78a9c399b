"""Report: the words of ``solgate ab``: the facts of a paired A/B (``pytest_solgate.revisions.ab``), as lines
for the terminal and as the Markdown table the pull-request comment shows. Pure: facts in, text out."""

from __future__ import annotations

from typing import Protocol, Sequence

from pytest_solgate.judge.paired import PairedJudgement
from pytest_solgate.report.markdown import escape
from pytest_solgate.support import units

STOPPED = {
    "tight": "every interval was tight enough to decide",
    "time": "the time budget (--max-time) ran out",
    "rounds": "the most rounds (--rounds) were run",
}


Key = tuple[str, str, str, str]  # test, name, profile, ceilings


class Compared(Protocol):
    """One measurement the A/B compared (revisions/ab.py ``Compared``)."""

    @property
    def key(self) -> Key: ...
    @property
    def judgement(self) -> PairedJudgement: ...
    @property
    def base_sol(self) -> float: ...
    @property
    def head_sol(self) -> float: ...


class ABFacts(Protocol):
    """What the words read of an A/B (revisions/ab.py ``ABResult``: the run stage, which a report does not import)."""

    @property
    def base(self) -> str: ...
    @property
    def head(self) -> str: ...
    @property
    def dirty(self) -> bool: ...
    @property
    def compared(self) -> Sequence[Compared]: ...
    @property
    def rounds(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def stopped(self) -> str: ...
    @property
    def only_head(self) -> Sequence[Key]: ...
    @property
    def failed(self) -> Sequence[str]: ...
    @property
    def only_base(self) -> Sequence[Key]: ...
    @property
    def no_sol(self) -> Sequence[Key]: ...
    @property
    def skipped(self) -> Sequence[str]: ...


def _label(key: Sequence[str]) -> str:
    test, name, profile, _ceilings = key
    return f"{test} [{name}] {profile}"


def _interval(j: PairedJudgement) -> str:
    return f"[{units.percent(j.low, signed=True)}, {units.percent(j.high, signed=True)}]"


def progress(round_: int, side: str, state: str) -> str:
    return f"solgate ab: round {round_}, {side}: {state}"


def _head(result: ABFacts) -> str:
    return (result.head[:10] or "HEAD") + (" (dirty)" if result.dirty else "")


def lines(result: ABFacts) -> list[str]:
    """The table: one line per measurement, then the verdict and what it cost."""
    out = [f"ab: {_head(result)} against BASE {result.base[:10]}, {result.rounds} round(s) of each, alternating, "
           f"in {result.seconds:.0f} s ({STOPPED[result.stopped]})",
           f"{'test [name] profile':<60} {'base':>7} {'head':>7} {'change':>8}  {'98 % interval':<18} verdict"]
    for c in result.compared:
        j = c.judgement
        out.append(f"{_label(c.key):<60} {units.sol_fine(c.base_sol):>7} {units.sol_fine(c.head_sol):>7} "
                   f"{units.percent(j.change, signed=True):>8}  {_interval(j):<18} {j.verdict}"
                   + ("" if j.tight else " (not tight)"))
    for keys, said in ((result.only_head, "only at HEAD"), (result.only_base, "only at BASE: not compared"),
                       (result.no_sol, "no SOL to compare (nothing with a speed of light)")):
        for key in keys:
            out.append(f"{_label(key):<60} {'':>7} {'':>7} {'':>8}  {'':<18} {said}")
    for note in result.skipped:
        out.append(f"left out: {note}")
    for failure in result.failed:
        out.append(f"failed: {failure}")
    regressed = [c for c in result.compared if c.judgement.verdict == "regressed"]
    tolerance = {c.judgement.tolerance for c in result.compared}
    rule = (f"paired differences of {', '.join(units.percent(t) for t in sorted(tolerance))} tolerance; regressed "
            "when the drop is beyond the tolerance and the whole interval below zero")
    out.append(f"{len(regressed)} regressed of {len(result.compared)} measurement(s) ({rule})")
    return out


def nothing_compared(result: ABFacts) -> str:
    """Why the A/B has no verdict: nothing measured on both sides with a SOL."""
    why = result.failed[0] if result.failed else "no selected test measured a gated measurement on both sides"
    return (f"ab: nothing was compared between HEAD and BASE {result.base[:10]} ({why}); fix that run, or select "
            "tests that measure (a pattern, --path)")


def markdown(result: ABFacts) -> str:
    """The A/B table for the pull-request comment (and $GITHUB_STEP_SUMMARY)."""
    rows = ["| test | base SOL | head SOL | change | 98 % interval | verdict |", "|---|---:|---:|---:|---|---|"]
    for c in result.compared:
        j = c.judgement
        verdict = f"**{j.verdict}**" if j.verdict == "regressed" else str(j.verdict)
        rows.append(f"| {escape(_label(c.key))} | {units.sol_fine(c.base_sol)} | {units.sol_fine(c.head_sol)} | "
                    f"{units.percent(j.change, signed=True)} | {_interval(j)} | {verdict}"
                    + ("" if j.tight else " (not tight)") + " |")
    for keys, said in ((result.only_head, "only at HEAD"), (result.only_base, "only at BASE: not compared"),
                       (result.no_sol, "no SOL to compare")):
        rows += [f"| {escape(_label(key))} | | | | | {said} |" for key in keys]
    notes = [f"- {escape(note)}" for note in (*result.skipped, *result.failed)]
    regressed = sum(c.judgement.verdict == "regressed" for c in result.compared)
    head = (f"### A/B against the base {result.base[:10]}: {regressed} regressed\n\n"
            f"{result.rounds} round(s) of the base and {_head(result)} alternating on this runner "
            f"({STOPPED[result.stopped]}).\n\n")
    return head + "\n".join(rows) + "\n" + ("\nNot compared:\n\n" + "\n".join(notes) + "\n" if notes else "")
