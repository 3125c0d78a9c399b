"""Judge (two commits): ``solgate compare BASE HEAD``: each measurement HEAD recorded, judged by
the gate's rule against BASE's own runs of it. Pure: facts in (the recorded measurements and
runs), facts out (one ``Row`` each), which report/compare.py words.

BASE's own runs, not the level the gate would read at BASE: comparing a regression B with the
commit C after it asks what C changed, so a C that measures like B passes, and a revert of B reads
as the gain it is; the gate's level (which leaves B's failed runs out) would call C regressed too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from pytest_solgate.judge import level, verdict
from pytest_solgate.judge.window import BaselineRun, Comparison, JudgeSettings
from pytest_solgate.results import Measurement

Key = tuple[str, str, str, str]  # test, name, profile, ceilings


@dataclass(frozen=True)
class Row:
    """One measurement of HEAD: judged against BASE's runs (``comparison``), or why it was not."""

    key: Key
    head: Measurement
    comparison: Comparison | None = None
    not_judged: str = ""  # why there is no comparison: "not gated (...)" or "only in head"


def base_runs(runs: Sequence[BaselineRun]) -> list[BaselineRun]:
    """BASE's runs of one measurement that can be a baseline: the undisturbed ones, or the noisy
    ones too where too few quiet ones remain (as the gate's level keeps them, judge/level.py)."""
    quiet = [run for run in runs if not run.disturbed]
    if len(quiet) >= level.MIN_QUIET:
        return quiet
    return [run for run in runs if run.disturbed in ("", "noisy")]


def compare(head: Mapping[Key, Measurement], base: Mapping[Key, Sequence[BaselineRun]], settings: JudgeSettings,
            given: float | None = None) -> list[Row]:
    """Every measurement of ``head`` (sorted) against ``base``'s runs of it, at the gate's
    tolerance (``verdict.rejudge``; ``given``: the command's --max-regression)."""
    rows = []
    for key, m in sorted(head.items()):
        if not verdict.judged(m):
            why = "gate=False" if not m.gate else (m.judgement.reason if m.judgement else "not gated")
            rows.append(Row(key, m, not_judged=f"not gated ({why.split(':')[0]})"))
            continue
        window = level.select(base_runs(base.get(key, ())), m.environment)
        if window is None:
            rows.append(Row(key, m, not_judged="only in head"))
            continue
        rows.append(Row(key, m, verdict.rejudge(m, window, settings, given)))
    return rows
