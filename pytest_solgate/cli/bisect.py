"""Wiring (the ``solgate`` command): ``bisect`` (the search is pytest_solgate/revisions/bisection.py; its words
report/bisection.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser(
        "bisect", help="the first commit between GOOD and BAD whose measurements fall below GOOD's level",
        description="Find the first commit after GOOD, on BAD's first-parent line, at which a selected measurement "
                    "falls below GOOD's level by more than the tolerance AND the noise floor the gate would use "
                    "(regressed). Each probed commit is checked out in a temporary git worktree (your tree, index "
                    "and HEAD untouched) and its tests are run there with the plugin, about log2(N) runs; commits "
                    "whose tests fail or do not collect are skipped and named; results already in the history are "
                    "reused; where the gate's story of the history (as history --changes tells it) already puts a "
                    "fall in the range, that commit and the one recorded before it are looked at first, and the "
                    "answer says whether it agrees. pytest options go after --, e.g. -- --sol-max-time=5. Exit "
                    "status: 0 found, 1 not "
                    "found, 2 usage error.",
    )
    p.add_argument("good", help="a commit where the measurements were fine (a git ref or sha)")
    p.add_argument("bad", help="a later commit, on GOOD's first-parent descendants, where they fell")
    p.add_argument("pattern", nargs="?", default=None,
                   help="only tests whose id matches this glob or contains this text (default: every test that measures)")
    p.add_argument("--record", action="store_true",
                   help="save each probe's run into the history (default: a scratch history, nothing saved)")
    p.add_argument("--good-runs", type=int, default=None,
                   help="runs of GOOD its level stands on, recorded ones counted (default: 3; at least 2)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance where the test's marker gives none (the marker's max_regression is per test and "
                        "wins; default: the tolerance the gate applied)")
    common.history_arg(p)
    p.set_defaults(run=cmd_bisect, takes_pytest_args=True)


def cmd_bisect(args: argparse.Namespace) -> int:
    from pytest_solgate.report import bisection as report
    from pytest_solgate.revisions import bisection

    good_runs = bisection.DEFAULT_GOOD_RUNS if args.good_runs is None else args.good_runs
    if not 2 <= good_runs <= 50:
        raise UsageFailure(f"bisect: --good-runs={good_runs}: give 2 to 50 (one run shows no run-to-run noise)")
    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    span = bisection.resolve_span(".", args.good, args.bad)  # refs checked before the history is opened
    found = bisection.bisect(
        ".", args.good, args.bad, args.pattern, common.history_path(args), record=args.record, good_runs=good_runs,
        tolerance=args.max_regression, pytest_args=args.pytest_args, min_change=common.ini()[1].min_change,
        announce=lambda probe: print(report.progress(probe, len(span.commits)), file=sys.stderr, flush=True),
    )
    print("\n".join(report.lines(found)))
    return 0 if found.found else 1


