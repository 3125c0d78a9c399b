"""Judge (two commits): ``solgate compare BASE HEAD``: each measurement HEAD recorded, judged by
the gate's rule against BASE's own runs of it. Pure: facts in (the recorded measurements and
runs), facts out (one ``Row`` each), which report/compare.py words.

BASE's own runs, not the level the gate would read at BASE: comparing a regression B with the
commit C after it asks what C changed, so a C that measures like B passes, and a revert of B reads
as the gain it is; the gate's level (which leaves B's failed runs out) would call C regressed too.
What the gate saw between them is told beside the verdict, not mixed into it: each row carries the
gate's story of its series along HEAD's first-parent line (``between``: judge/level.py's ``along``,
the one story the gate, ``history --changes`` and ``bisect`` tell).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence

from pytest_solgate.judge import level, like_pressure, verdict
from pytest_solgate.judge.window import BaselineRun, Comparison, JudgeSettings
from pytest_solgate.results import Measurement

Key = tuple[str, str, str, str]  # test, name, profile, ceilings
# BASE's runs were busy on wall time (no baselines), and HEAD's is not busy enough to be judged against them.
NOT_AS_BUSY = "base busy, head not"


@dataclass(frozen=True)
class Between:
    """What the gate's story of one measurement tells of the commits from BASE to HEAD."""

    steps: tuple[level.Step, ...] = ()  # its steps after BASE, up to HEAD, oldest first
    red: level.Step | None = None  # a fall the gate failed that HEAD is still below, wherever it is
    off_line: bool = False  # BASE is not on HEAD's first-parent line (here): no story between them
    unavailable: str = ""  # why no story could be told (change points need ruptures)


@dataclass(frozen=True)
class Row:
    """One measurement of HEAD: judged against BASE's runs (``comparison``), or why it was not."""

    key: Key
    head: Measurement
    comparison: Comparison | None = None
    not_judged: str = ""  # why there is no comparison: "not gated (...)" or "only in head"
    between: Between | None = None  # the gate's story from BASE to HEAD (judged rows)


def on_line(chain: Sequence[str], base: str) -> bool:
    """Whether BASE is on HEAD's first-parent line (``chain``, HEAD first), where a story is told."""
    return base in chain[1:]


def between(runs: Sequence[BaselineRun], accepted: Sequence[str], chain: Sequence[str], base: str,
            min_change: float = level.MIN_CHANGE) -> Between:
    """The gate's story of one measurement (``level.along``: its runs read along HEAD's
    first-parent line ``chain``, HEAD first) as it bears on BASE..HEAD: the steps after BASE, and
    the fall the gate failed that HEAD is still below (before BASE or after it)."""
    if not on_line(chain, base):
        return Between(off_line=True)
    told = level.along(runs, chain, accepted, min_change)
    after = set(chain[:chain.index(base)])
    return Between(tuple(step for step in told.steps if step.commit in after), told.red, unavailable=told.unavailable)


def base_runs(runs: Sequence[BaselineRun]) -> list[BaselineRun]:
    """BASE's runs of one measurement that can be a baseline: the undisturbed ones, or the noisy
    ones too where too few quiet ones remain (as the gate's level keeps them, judge/level.py)."""
    quiet = [run for run in runs if not run.kept_out]
    if len(quiet) >= level.MIN_QUIET:
        return quiet
    return [run for run in runs if run.kept_out in ("", "noisy")]


def compare(head: Mapping[Key, Measurement], base: Mapping[Key, Sequence[BaselineRun]], settings: JudgeSettings,
            given: float | None = None, stories: Mapping[Key, Between] | None = None,
            machine_noise: tuple[tuple[float, int] | None, tuple[str, ...]] | None = None) -> list[Row]:
    """Every measurement of ``head`` (sorted) against ``base``'s runs of it, at the gate's
    tolerance (``verdict.rejudge``; ``given``: the command's --max-regression), with its story
    between the two (``stories``, from ``between``) beside the verdict. A base of one clean run is
    judged at HEAD's machine's run-to-run noise (``machine_noise``: the noise and notes on where it
    comes from, record/baseline.py's), and a HEAD run busy on wall
    time against BASE's runs as busy as it was (judge/like_pressure.py), as the gate judges them."""
    rows = []
    for key, m in sorted(head.items()):
        if not verdict.judged(m):
            why = "gate=False" if not m.gate else (m.judgement.reason if m.judgement else "not gated")
            rows.append(Row(key, m, not_judged=f"not gated ({why.split(':')[0]})"))
            continue
        runs = base.get(key, ())
        window = level.select(base_runs(runs), m.environment, busy=[run for run in runs if like_pressure.judges_as_busy(run)])
        if window is not None and len(window.runs) == 1 and machine_noise is not None:
            window = dataclasses.replace(window, machine_noise=machine_noise[0], notes=(*window.notes, *machine_noise[1]))
        window = like_pressure.judged_window(m, window)  # a run busy on wall time: against BASE's runs as busy
        if window is None:
            rows.append(Row(key, m, not_judged=NOT_AS_BUSY if any(map(like_pressure.judges_as_busy, runs)) else "only in head"))
            continue
        rows.append(Row(key, m, verdict.rejudge(m, window, settings, given), between=(stories or {}).get(key)))
    return rows
