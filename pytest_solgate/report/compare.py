"""Report: the words of ``solgate compare``: the rows of judge/commits.py as a fixed-width table
and the line under it. Pure: facts in, text out."""

from __future__ import annotations

from typing import Any, Sequence

from pytest_solgate.results import REGRESSED
from pytest_solgate.support import units

ONE_RUN_FLOOR = "1 run"


def table(rows: Sequence[Any], base: str, head: str, window: int) -> list[str]:
    """The table (the base column is BASE's own SOL: the centre of its runs) and what it found."""
    lines = [f"{'test [name]':<60} {'base':>7} {'head':>7} {'change':>8} {'floor':>7}  verdict"]
    one_run = False
    for row in rows:
        label, sol = f"{row.key[0]} [{row.key[1]}]", units.sol_fine(row.head.score.sol)
        got = row.comparison
        if got is None:
            lines.append(f"{label:<60} {'':>7} {sol:>7} {'':>8} {'':>7}  {row.not_judged}")
            continue
        one_run |= got.floor is None
        floor = units.percent(got.floor) if got.floor is not None else ONE_RUN_FLOOR
        lines.append(f"{label:<60} {units.sol_fine(got.centre):>7} {sol:>7} {units.percent(got.change, True):>8} "
                     f"{floor:>7}  {got.verdict}")
    if one_run:  # as the gate words it: no spread, so no floor, and a drop cannot fail
        lines.append(f"floor '{ONE_RUN_FLOOR}': {base[:10]} has one run, which shows no run-to-run noise; a drop is "
                     "ambiguous until it has two (run the tests there again), as the gate says")
    lines.append(f"{regressed(rows)} regressed at {head[:10]} against {base[:10]} (base: up to "
                 f"{units.plural(window, 'clean run')} at {base[:10]} itself; not re-measured)")
    return lines


def regressed(rows: Sequence[Any]) -> int:
    return sum(row.comparison is not None and row.comparison.verdict == REGRESSED for row in rows)
