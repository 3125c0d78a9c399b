"""Report: the words of ``solgate history``: the listing of recorded results and ``--changes`` (the
gate's story of each series, judge/level.story) as lines or as JSON. Pure: facts in, text out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pytest_solgate.support import units

if TYPE_CHECKING:
    from pytest_solgate.judge.level import Story
    from pytest_solgate.record.store import RunRow, Summary
    from pytest_solgate.results import CommitPoint

CONTENDED = "(contended: the machine was busy)"  # a run's mark, in `history` and `compare`


def listing(results: Sequence[tuple[RunRow, Summary]], pattern: str | None) -> list[str]:
    """``solgate history``: one line per recorded measurement, oldest run first."""
    if not results:
        return ["no recorded results" + (f" match '{pattern}'" if pattern else "")]
    lines = [f"{'started':<20} {'commit':<10} {'dirty':<5} {'profile':<14} {'SOL':>7} {'time':>10}  {'verdict':<12} test [name]"]
    for run, m in results:
        lines.append(
            f"{run['started_at'][:19]:<20} {(run['commit_sha'] or 'unknown')[:10]:<10} {'yes' if run['dirty'] else '':<5} "
            f"{m.profile[:14]:<14} {units.sol_fine(m.sol):>7} {units.seconds(m.seconds):>10}  {m.verdict or '-':<12} {m.test} [{m.name}]"
            + (f"  {CONTENDED}" if m.contended else "")
        )
    return lines


def changes_json(test: str, name: str, profile: str, points: list[CommitPoint], told: Story) -> dict[str, object]:
    """One series of ``--changes --json``: its steps (and whether the gate failed each), outliers,
    skipped commits and the commits the gate failed apart from them."""
    changes = told.changes
    return {
        "test": test, "name": name, "profile": profile,
        "steps": [{"commit": points[cp.index]["commit"], "after_commit": points[cp.index - 1]["commit"],
                   "before": cp.before, "after": cp.after, "change": cp.change, "provisional": cp.provisional,
                   "by_gate": cp.by_gate, "failed": cp.index in told.failed}
                  for cp in changes.points],
        "outliers": [{"commit": points[o.index]["commit"], "sol": o.value, "level": o.level, "change": o.change}
                     for o in changes.outliers],
        "skipped": [points[i]["commit"] for i in changes.skipped],
        "regressed_apart": [points[i]["commit"] for i in told.apart],  # failed, not a step
        "level_since": points[told.start]["commit"] if told.start is not None else None,
    }


def _gate_said(point: CommitPoint, every_run: bool) -> str:
    """What the gate said at a commit, in the words it used: the runs it failed as regressed."""
    verdicts = point.get("verdicts", [])
    failed = verdicts.count("regressed")
    if every_run or (failed and failed == len(verdicts)):
        return "; the gate failed it as regressed"
    return f"; the gate failed it as regressed in {failed} of {units.plural(len(verdicts), 'run')}" if failed else ""


def changes_lines(label: str, points: list[CommitPoint], told: Story, min_change: float) -> tuple[list[str], int, int]:
    """The lines of one series for ``--changes``; how many steps and outliers they list, and how
    many commits the gate failed apart from them."""
    lines = []
    for cp in told.changes.points:
        before, at = points[cp.index - 1], points[cp.index]
        lines.append(
            f"{at['commit'][:10]} {units.percent(cp.change, signed=True):>8}  SOL {units.sol_fine(cp.before)} -> {units.sol_fine(cp.after)}  "
            f"{label} (after {before['commit'][:10]}, {at['commit_time'][:10]})"
            + ("  provisional: the newest commit; the next one confirms it" if cp.provisional else "")
            + _gate_said(at, cp.by_gate)
        )
    for outlier in told.changes.outliers:
        at = points[outlier.index]
        lines.append(
            f"{at['commit'][:10]} {units.percent(outlier.change, signed=True):>8}  SOL {units.sol_fine(outlier.value)} "
            f"(level {units.sol_fine(outlier.level)})  {label} ({at['commit_time'][:10]})  outlier: one commit "
            "off its level, not a step"
        )
    for i in told.apart:
        at = points[i]
        lines.append(f"{at['commit'][:10]} {'':>8}  SOL {units.sol_fine(at['sol'])}  {label} "
                     f"({at['commit_time'][:10]})  not a step of {units.percent(min_change)} over the commits"
                     + _gate_said(at, False)
                     + (f" (see `solgate compare {points[i - 1]['commit'][:10]} {at['commit'][:10]}`)" if i else ""))
    return lines, len(told.changes.points) + len(told.changes.outliers), len(told.apart)


def no_changes(min_change: float, gated: int) -> str:
    return (f"no change points: no measurement's SOL stepped by {units.percent(min_change)} or more over the recorded "
            "commits" + (f"; the gate's {units.plural(gated, 'regression')} above stand apart from them" if gated else ""))
