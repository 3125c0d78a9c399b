"""Wiring (the ``solgate`` command): what the history holds: ``history`` (and ``--changes``) and
``trend``."""

from __future__ import annotations

import argparse
from typing import Any

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure
from pytest_solgate.support.locations import is_history_url


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("history", help="list recorded results")
    p.add_argument("pattern", nargs="?", help="only tests whose id matches this glob or contains this text")
    p.add_argument("--changes", action="store_true", help="list the commits where a measurement's SOL stepped (change points)")
    p.add_argument("--json", action="store_true", help="with --changes: print them as JSON (steps, outliers, skipped commits)")
    common.min_change_arg(p)
    common.history_arg(p)
    p.set_defaults(run=cmd_history)
    p = sub.add_parser("trend", help="write an HTML page of SOL over commits: one small panel per measurement")
    p.add_argument("-o", "--output", default="sol-trend.html", help="output path (default: %(default)s)")
    p.add_argument("pattern", nargs="?", help="only tests matching this glob or text")
    p.add_argument("--last", type=int, default=100,
                   help="show each measurement's newest N commits; 0 for all (default: %(default)s)")
    common.min_change_arg(p)
    common.history_arg(p)
    p.set_defaults(run=cmd_trend)


def cmd_history(args: argparse.Namespace) -> int:
    from pytest_solgate.support import units

    if args.json and not args.changes:  # arguments are checked before anything is opened
        raise UsageFailure("history: --json goes with --changes")
    min_change = common.min_change(args)
    with common.open_history(common.history_path(args)) as store:
        results = store.summaries(args.pattern)
    if args.changes:
        return _print_changes(results, min_change, args.json)
    if not results:
        print("no recorded results" + (f" match '{args.pattern}'" if args.pattern else ""))
        return 0
    print(f"{'started':<20} {'commit':<10} {'dirty':<5} {'profile':<14} {'SOL':>7} {'time':>10}  {'verdict':<12} test [name]")
    for run, m in results:
        print(
            f"{run['started_at'][:19]:<20} {(run['commit_sha'] or 'unknown')[:10]:<10} {'yes' if run['dirty'] else '':<5} "
            f"{m.profile[:14]:<14} {units.sol_fine(m.sol):>7} {units.seconds(m.seconds):>10}  {m.verdict or '-':<12} {m.test} [{m.name}]"
        )
    return 0


def _series(results: list) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    from pytest_solgate.record import gitinfo, store

    commits = sorted({run["commit_sha"] for run, _ in results if run["commit_sha"] and not run["dirty"]})
    return store.commit_series(results, gitinfo.commit_times(".", commits))


def _changes_of(points: list[dict[str, Any]], min_change: float) -> Any:
    """The change points of one series, with the commits the gate failed as regressed named too
    (changepoints.find): `--changes`, its JSON and the trend page tell the gate's story."""
    from pytest_solgate.judge import changepoints

    regressed = [i for i, p in enumerate(points) if p.get("regressed")]
    return changepoints.find([p["sol"] for p in points], min_change, regressed)


def _changes_json(test: str, name: str, profile: str, points: list, changes: Any) -> dict[str, Any]:
    return {
        "test": test, "name": name, "profile": profile,
        "steps": [{"commit": points[cp.index]["commit"], "after_commit": points[cp.index - 1]["commit"],
                   "before": cp.before, "after": cp.after, "change": cp.change, "provisional": cp.provisional,
                   "by_gate": cp.by_gate}
                  for cp in changes.points],
        "outliers": [{"commit": points[o.index]["commit"], "sol": o.value, "level": o.level, "change": o.change}
                     for o in changes.outliers],
        "skipped": [points[i]["commit"] for i in changes.skipped],
        "regressed_apart": [points[i]["commit"] for i in _failed_unlisted(points, changes)],  # failed, not a step
    }


def _failed_unlisted(points: list[dict[str, Any]], changes: Any) -> list[int]:
    """The commits where the gate failed the measurement as regressed in some run, that the change
    points do not list: said beside them, so that `--changes` never reads as if nothing failed."""
    listed = {cp.index for cp in changes.points} | {o.index for o in changes.outliers}
    return [i for i, p in enumerate(points) if "regressed" in p.get("verdicts", ()) and i not in listed]


def _gate_said(point: dict[str, Any], every_run: bool) -> str:
    """What the gate said at a commit, in the words it used: the runs it failed as regressed."""
    from pytest_solgate.support import units

    verdicts = point.get("verdicts", [])
    failed = verdicts.count("regressed")
    if every_run or (failed and failed == len(verdicts)):
        return "; the gate failed it as regressed"
    return f"; the gate failed it as regressed in {failed} of {units.plural(len(verdicts), 'run')}" if failed else ""


def _print_changes(results: list, min_change: float, as_json: bool = False) -> int:
    import json

    from pytest_solgate.support import units

    found = gated = 0
    notes = []
    listed = []
    for (test, name, profile, _ceilings), points in sorted(_series(results).items()):
        changes = _changes_of(points, min_change)
        if as_json:
            listed.append(_changes_json(test, name, profile, points, changes))
            continue
        for cp in changes.points:
            found += 1
            before, at = points[cp.index - 1], points[cp.index]
            print(
                f"{at['commit'][:10]} {units.percent(cp.change, signed=True):>8}  SOL {units.sol_fine(cp.before)} -> {units.sol_fine(cp.after)}  "
                f"{test} [{name}] {profile} (after {before['commit'][:10]}, {at['commit_time'][:10]})"
                + ("  provisional: the newest commit; the next one confirms it" if cp.provisional else "")
                + _gate_said(at, cp.by_gate)
            )
        for outlier in changes.outliers:
            found += 1
            at = points[outlier.index]
            print(
                f"{at['commit'][:10]} {units.percent(outlier.change, signed=True):>8}  SOL {units.sol_fine(outlier.value)} "
                f"(level {units.sol_fine(outlier.level)})  {test} [{name}] {profile} ({at['commit_time'][:10]})  outlier: one commit "
                "off its level, not a step"
            )
        for i in _failed_unlisted(points, changes):
            gated += 1
            at = points[i]
            print(f"{at['commit'][:10]} {'':>8}  SOL {units.sol_fine(at['sol'])}  {test} [{name}] {profile} "
                  f"({at['commit_time'][:10]})  not a step of {units.percent(min_change)} over the commits"
                  + _gate_said(at, False)
                  + (f" (see `solgate compare {points[i - 1]['commit'][:10]} {at['commit'][:10]}`)" if i else ""))
        if changes.note:
            notes.append(f"{test} [{name}] {profile}: {changes.note}")
    if as_json:
        print(json.dumps({"min_change": min_change, "measurements": listed}, indent=1))
        return 0
    if not found:
        print(f"no change points: no measurement's SOL stepped by {units.percent(min_change)} or more over the recorded "
              "commits" + (f"; the gate's {units.plural(gated, 'regression')} above stand apart from them" if gated else ""))
    for note in notes:
        print(f"note: {note}")
    return 0


def cmd_trend(args: argparse.Namespace) -> int:
    from pytest_solgate.judge import changepoints
    from pytest_solgate.report import html, trend
    from pytest_solgate.support import atomic

    if args.last < 0:
        raise UsageFailure(f"trend: --last={args.last}: give a number of commits, or 0 for all")
    from pytest_solgate.support.locations import same_file

    history_path = common.history_path(args)
    min_change = common.min_change(args)
    if not is_history_url(history_path) and same_file(args.output, history_path):
        raise UsageFailure(f"trend: -o {args.output} is the history database itself; write the page elsewhere")
    panels = []
    note = ""
    with common.open_history(history_path) as store:
        history_path = store.location  # never a password on the page
        for (test, name, profile, ceilings), points in sorted(_series(store.summaries(args.pattern)).items()):
            try:  # over the whole series: a step is found with all the evidence there is
                changes = _changes_of(points, min_change)
            except changepoints.ChangePointsUnavailable as exc:
                changes, note = changepoints.Changes(), str(exc)
            newest = store.newest(test, name, profile, ceilings)
            budget = newest.judgement.budget.min if newest is not None and newest.gate and newest.judgement else None
            panels.append(trend.panel(
                test, name, profile, points, [points[cp.index]["commit"] for cp in changes.points], budget, args.last,
                provisional=[points[cp.index]["commit"] for cp in changes.points if cp.provisional],
                outliers=[points[o.index]["commit"] for o in changes.outliers],
            ))
    target = atomic.write_text(args.output, html.render_trend(panels, history_path, note), "trend page")
    print(f"trend of {len(panels)} measurement(s) written to {target}" + (f" ({note})" if note else ""))
    return 0



