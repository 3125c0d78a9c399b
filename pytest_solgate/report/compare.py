"""Report: the words of ``solgate compare``: the rows of judge/commits.py as a fixed-width table,
under each row what the gate's story saw of it between the two commits, and the lines under the
table. Pure: facts in, text out."""

from __future__ import annotations

from typing import Sequence

from pytest_solgate.judge import like_pressure
from pytest_solgate.judge.commits import NOT_AS_BUSY, Between, Row
from pytest_solgate.judge.story import Step
from pytest_solgate.report.history import CONTENDED
from pytest_solgate.results import REGRESSED
from pytest_solgate.support import units

ONE_RUN_FLOOR = "1 run"


def table(rows: Sequence[Row], base: str, head: str, window: int) -> list[str]:
    """The table (the base column is BASE's own SOL: the centre of its runs) and what it found."""
    lines = [f"{'test [name]':<60} {'base':>7} {'head':>7} {'change':>8} {'floor':>7}  verdict"]
    one_run = False
    for row in rows:
        label, sol = f"{row.key[0]} [{row.key[1]}]", units.sol_fine(row.head.score.sol)
        got, mark = row.comparison, f"  {CONTENDED}" if row.head.contended else ""
        if got is None:
            lines.append(f"{label:<60} {'':>7} {sol:>7} {'':>8} {'':>7}  {row.not_judged}{mark}")
            continue
        one_run |= got.floor is None
        floor = units.percent(got.floor) if got.floor is not None else ONE_RUN_FLOOR
        lines.append(f"{label:<60} {units.sol_fine(got.centre):>7} {sol:>7} {units.percent(got.change, True):>8} "
                     f"{floor:>7}  {got.verdict}{mark}")
        lines += busy(row, head)
        lines += told(row.between, base, head)
    lines += untold(rows, base, head)
    if any(row.not_judged == NOT_AS_BUSY for row in rows):  # as the gate judges a busy run (judge/like_pressure.py)
        lines.append(f"'{NOT_AS_BUSY}': {base[:10]}'s runs were contended, on wall time: no baselines, they judge only "
                     f"a run of {head[:10]} that was busy too (from {like_pressure.MIN_LIKE} of them), as the gate does")
    if one_run:  # as the gate words it: no spread, so no floor, and a drop cannot fail
        lines.append(f"floor '{ONE_RUN_FLOOR}': {base[:10]} has one run, which shows no run-to-run noise; a drop is "
                     "ambiguous until it has two (run the tests there again), as the gate says")
    lines.append(f"{regressed(rows)} regressed at {head[:10]} against {base[:10]} (base: up to "
                 f"{units.plural(window, 'clean run')} at {base[:10]} itself; not re-measured)")
    return lines


def busy(row: Row, head: str) -> list[str]:
    """Under a row whose HEAD run was contended: how busy, and which of BASE's runs judged it."""
    m, got = row.head, row.comparison
    if not m.contended or got is None:
        return []
    against = f"; {got.window.notes[0]}" if like_pressure.against_busy(got.window) else ""
    return [f"  contended: {head[:10]}'s run measured while the machine was busy ({m.contended}){against}"]


def regressed(rows: Sequence[Row]) -> int:
    return sum(row.comparison is not None and row.comparison.verdict == REGRESSED for row in rows)


def _step(step: Step) -> str:
    cp = step.point
    return (f"{step.commit[:10]} {units.percent(cp.change, signed=True)} (SOL {units.sol_fine(cp.before)} -> "
            f"{units.sol_fine(cp.after)}" + (f", after {step.since[:10]})" if step.since else ")"))


def told(between: Between | None, base: str, head: str) -> list[str]:
    """Under a row: what the gate's story of its series saw between BASE and HEAD (judge/commits.py:
    ``between``): its steps there, and the fall the gate failed that HEAD is still below."""
    if between is None or between.off_line or between.unavailable:
        return []
    lines = []
    for step in between.steps:
        cp = step.point
        lines.append(f"  history: the gate's story has a step at {_step(step)}"
                     + ("; the gate failed this fall" if step.failed or cp.by_gate else "")
                     + ("; still red at HEAD: neither reverted nor accepted" if step == between.red else "")
                     + (f"; provisional: {head[:10]} is its newest commit, the next one confirms it"
                        if cp.provisional else ""))
    if between.red is not None and between.red not in between.steps:
        lines.append(f"  history: the gate has been red since {_step(between.red)}: a fall it failed, neither "
                     f"reverted nor accepted, so the gate judges {head[:10]} against the level before it; compare "
                     f"judges it against {base[:10]}'s own runs, from that fall on")
    return lines


def untold(rows: Sequence[Row], base: str, head: str) -> list[str]:
    """Under the table: the rows whose story saw nothing between BASE and HEAD, or why no story was told."""
    stories = [row.between for row in rows if row.between is not None]
    if any(between.off_line for between in stories):
        return [f"history: {base[:10]} is not on {head[:10]}'s first-parent line here: the gate's story between "
                "them is not told"]
    lines = sorted({f"history: the gate's story is not told ({b.unavailable})" for b in stories if b.unavailable})
    quiet = sum(not b.unavailable and not b.steps and b.red is None for b in stories)
    if quiet:
        lines.append(f"history: no step between {base[:10]} and {head[:10]} in the gate's story"
                     + (f" of {units.plural(quiet, 'other measurement')}" if quiet < len(stories) else "")
                     + " (as `solgate history --changes` tells it)")
    return lines
