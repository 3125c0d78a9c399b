"""Wiring (the ``solgate`` command): what the history holds: ``history`` (and ``--changes``) and
``trend``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure
from pytest_solgate.support.locations import is_history_url

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands


def add_parsers(sub: Subcommands) -> None:
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
    from pytest_solgate.report import history

    if args.json and not args.changes:  # arguments are checked before anything is opened
        raise UsageFailure("history: --json goes with --changes")
    min_change = common.min_change(args)
    with common.open_history(common.history_path(args)) as store:
        results = store.summaries(args.pattern)
    if not args.changes:
        print("\n".join(history.listing(results, args.pattern)))
        return 0
    from pytest_solgate.revisions import queries

    stories = queries.stories(results, min_change)
    if args.json:
        listed = [history.changes_json(test, name, profile, points, told) for (test, name, profile, _), points, told in stories]
        print(json.dumps({"min_change": min_change, "measurements": listed}, indent=1))
        return 0
    found = gated = 0
    for (test, name, profile, _), points, told in stories:
        lines, steps, apart = history.changes_lines(f"{test} [{name}] {profile}", points, told, min_change)
        for line in lines:
            print(line)
        found, gated = found + steps, gated + apart
    if not found:
        print(history.no_changes(min_change, gated))
    for (test, name, profile, _), _, told in stories:
        if told.changes.note:
            print(f"note: {test} [{name}] {profile}: {told.changes.note}")
    return 0


def cmd_trend(args: argparse.Namespace) -> int:
    from pytest_solgate.report import html
    from pytest_solgate.revisions import queries
    from pytest_solgate.support import atomic

    if args.last < 0:
        raise UsageFailure(f"trend: --last={args.last}: give a number of commits, or 0 for all")
    from pytest_solgate.support.locations import same_file

    history_path = common.history_path(args)
    min_change = common.min_change(args)
    if not is_history_url(history_path) and same_file(args.output, history_path):
        raise UsageFailure(f"trend: -o {args.output} is the history database itself; write the page elsewhere")
    with common.open_history(history_path) as store:
        history_path = store.location  # never a password on the page
        panels, note = queries.trend_panels(store, args.pattern, min_change, args.last)
    target = atomic.write_text(args.output, html.render_trend(panels, history_path, note), "trend page")
    print(f"trend of {len(panels)} measurement(s) written to {target}" + (f" ({note})" if note else ""))
    return 0



