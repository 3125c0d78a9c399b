"""Wiring (the ``solgate`` command): ``ab``, a paired A/B of HEAD against a base (the runs are
pytest_solgate/revisions/ab.py's; the words report/ab.py's)."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands

NOTHING_TO_PAIR = 3  # exit status: no selected test exists at BASE (the action skips its A/B)


def add_parsers(sub: Subcommands) -> None:
    from pytest_solgate.revisions import ab

    p = sub.add_parser(
        "ab", help="a paired A/B of HEAD against BASE on this machine; exit 1 on a regression",
        description="Run the selected tests at BASE (checked out in a temporary git worktree) and at HEAD (your tree "
                    "as it is) alternately, each run its own pytest process, until every measurement's paired "
                    "difference is tight or the time budget is spent, and judge the paired differences: regressed, "
                    "improved or pass, with the interval. HEAD's runs are recorded in the history. pytest options "
                    "go after --, e.g. solgate ab origin/main -- --sol-max-time=5. Exit status: 0 no regression, "
                    "1 regressed, 2 usage error or nothing compared, 3 none of the selected tests exists at BASE "
                    "(nothing to pair).",
    )
    p.add_argument("base", help="the base commit: a git ref or sha (on a pull request: its merge base)")
    p.add_argument("pattern", nargs="?", default=None,
                   help="only tests whose id matches this glob or contains this text (default: every test that measures)")
    p.add_argument("--rounds", type=int, default=ab.DEFAULT_ROUNDS,
                   help="the most rounds, each one run of BASE and one of HEAD (default: %(default)s; at least 3)")
    p.add_argument("--max-time", type=float, default=ab.DEFAULT_MAX_TIME,
                   help="seconds of rounds after which it judges on what it has (default: %(default)s)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance where the test's marker gives none (default: sol_max_regression, else 0.05)")
    p.add_argument("--path", action="append", default=[],
                   help="a folder, file or node id pytest collects from (repeat for several; default: its testpaths)")
    p.add_argument("--no-record", action="store_true", help="do not save HEAD's runs into the history (a pull request)")
    p.add_argument("--markdown", default=None, help="also write the table as Markdown here (the PR comment's)")
    common.history_arg(p)
    p.set_defaults(run=cmd_ab, takes_pytest_args=True)


def _stop(signum: int, frame: object) -> None:
    """SIGTERM as an exception, so that the A/B's cleanup runs (Python's default ends the process at once)."""
    from pytest_solgate.revisions import ab

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup short
    raise ab.Stopped(signum)


def cmd_ab(args: argparse.Namespace) -> int:
    from pytest_solgate.report import ab as words
    from pytest_solgate.revisions import ab
    from pytest_solgate.support import atomic

    if args.rounds < 3:
        raise UsageFailure(f"ab: --rounds={args.rounds}: give 3 or more (two pairs show no spread worth a verdict)")
    if not args.max_time > 0:
        raise UsageFailure(f"ab: --max-time={args.max_time}: give a number of seconds > 0")
    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    tolerance = args.max_regression if args.max_regression is not None else common.ini()[1].max_regression
    previous = signal.signal(signal.SIGTERM, _stop)  # a CI runner's cancel: the worktree and children go too
    try:
        result = ab.ab(
            ".", args.base, args.pattern, common.history_path(args), record=not args.no_record, rounds=args.rounds,
            max_time=args.max_time, tolerance=tolerance, pytest_args=args.pytest_args, paths=args.path,
            announce=lambda round_, side, state: print(words.progress(round_, side, state), file=sys.stderr,
                                                       flush=True),
        )
    except ab.NothingToPair as exc:
        print(exc, file=sys.stderr)
        return NOTHING_TO_PAIR
    except KeyboardInterrupt:
        print("ab: stopped by SIGINT: its pytest runs were stopped and its worktree removed; nothing was judged",
              file=sys.stderr)
        return 128 + signal.SIGINT
    except ab.Stopped as exc:
        print(exc, file=sys.stderr)
        return 128 + exc.signum
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("\n".join(words.lines(result)))
    code = 1 if result.regressed else 0
    if not result.compared:  # no silent green: a side that measured nothing is not a pass
        print(words.nothing_compared(result), file=sys.stderr)
        code = 2
    if args.markdown:
        try:
            atomic.write_text(args.markdown, words.markdown(result), "A/B table")
        except atomic.ReportWriteError as exc:  # the verdict stands: a regression still exits 1
            print(f"ab: {exc}", file=sys.stderr)
            code = code or 2
    return code
