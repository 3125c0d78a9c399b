"""Wiring (the ``solgate`` command): ``compare`` two commits by the gate's judge, and ``accept`` a
deliberate slowdown."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure
from pytest_solgate.support.settings import Settings

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands
    from pytest_solgate.record.store import Accept


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("compare", help="HEAD's results against BASE's own runs, by the gate's rule, with the gate's "
                       "story between them; exit 1 on a regression")
    p.add_argument("base", help="the base commit (a git ref or sha)")
    p.add_argument("head", help="the head commit (a git ref or sha)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance where the test's marker gives none (the marker's max_regression is per test and "
                        "wins; default: the tolerance the gate applied, else sol_max_regression, else "
                        f"{Settings().max_regression})")
    p.add_argument("--window", type=int, default=None,
                   help="the most of BASE's own clean runs (newest first) that form its baseline (default: "
                        f"sol_baseline_window, else {Settings().baseline_window})")
    common.min_change_arg(p)  # for the gate's story between the two, told under the table
    common.history_arg(p)
    p.set_defaults(run=cmd_compare)
    p = sub.add_parser("accept", help="accept a deliberate slowdown at COMMIT: its level becomes the baseline from there on")
    p.add_argument("commit", help="the commit whose new level is accepted (a git ref or sha)")
    p.add_argument("pattern", nargs="?", default="*", help="only tests whose id matches this glob or contains this text (default: all)")
    p.add_argument("--reason", required=True, help="why the slowdown is accepted (kept in the history, shown in verdicts)")
    common.history_arg(p)
    p.set_defaults(run=cmd_accept)


def cmd_compare(args: argparse.Namespace) -> int:
    from pytest_solgate.judge import verdict
    from pytest_solgate.report import compare
    from pytest_solgate.revisions import queries

    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    min_change = common.min_change(args)
    ini = common.ini()[1]
    window = ini.baseline_window if args.window is None else args.window
    if not 1 <= window <= 100:
        raise UsageFailure(f"--window={window}: give a whole number of runs from 1 to 100")
    with common.open_history(common.history_path(args)) as store:
        settings = verdict.JudgeSettings(gate="fail", max_regression=ini.max_regression)
        compared = queries.compare(store, args.base, args.head, window, min_change, settings, args.max_regression)
    print("\n".join(compare.table(compared.rows, compared.base, compared.head, window)))
    return 1 if compare.regressed(compared.rows) else 0


def cmd_accept(args: argparse.Namespace) -> int:
    """Record a deliberate slowdown: from COMMIT on, the baseline of the matching measurements is
    the level COMMIT shows (judge/level.py), not the one before it."""
    import datetime
    import getpass

    from pytest_solgate.record import gitinfo

    reason = args.reason.strip()
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:  # bytes the locale could not decode reach us as lone surrogates
        raise UsageFailure("accept: --reason is not UTF-8 text; give it in UTF-8 (it is kept in the history)") from None
    if not reason:
        raise UsageFailure("accept: --reason is empty; say why the slowdown is accepted (it is kept in the history)")
    try:
        sha = gitinfo.resolve(".", args.commit)
    except gitinfo.AmbiguousCommit as exc:
        raise UsageFailure(f"accept: {exc}") from None
    if sha is None:
        raise UsageFailure(f"accept: '{args.commit}' is not a commit of the git repository here; give a ref or sha")
    if not gitinfo.is_first_parent_ancestor(".", sha):
        # Baselines are read along HEAD's first-parent chain: an accept anywhere else never applies.
        raise UsageFailure(f"accept: {sha[:10]} ('{args.commit}') is not on the first-parent chain of HEAD, where "
                           "baselines are read, so the accept would never apply; accept the commit as it landed on "
                           "this branch (after a squash or rebase, its new sha)")
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = ""
    accept: Accept = {"commit_sha": sha, "pattern": args.pattern, "reason": reason, "accepted_by": who,
              "accepted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with common.open_history(common.history_path(args)) as store:  # an accept amends a history, never starts one
        matched = _accepted_tests(args.pattern, store.series(), store.location)
        at_commit = [m for run, m in store.results_at(sha)
                     if not run["dirty"] and (args.pattern == "*" or m.test in matched)]
        store.record_accept(accept)
        location = store.location
    scope = "every test" if args.pattern == "*" else f"{args.pattern!r} ({len(matched)} recorded test(s): {_listed(matched)})"
    print(f"accepted the level at {sha[:10]} for {scope} in {location}: baselines start there from now on ({_first_line(reason)})")
    if not any(not m.contended and not m.timing.noisy for m in at_commit):
        contended = sum(1 for m in at_commit if m.contended)
        print(f"accept: warning: {sha[:10]} has no clean run of these tests ({len(at_commit)} recorded, {contended} "
              "contended): its level is not known yet; run the tests at that commit on a quiet machine", file=sys.stderr)
    return 0


def _first_line(text: str) -> str:
    """The reason as echoed: its first line (the history keeps it whole)."""
    lines = text.splitlines()
    return lines[0] + (f" [+{len(lines) - 1} more line(s)]" if len(lines) > 1 else "")


def _accepted_tests(pattern: str, series: list[tuple[str, str]], location: str) -> list[str]:
    """The recorded tests an accept's pattern matches, on the test or a measurement's name as
    ``solgate history PATTERN`` matches them (record/store.py: matches); none is refused, with the
    close matches (an accept that matches nothing would never apply, and would say it did)."""
    import difflib

    from pytest_solgate.record.store import matches

    matched = sorted({test for test, name in series if matches(pattern, test, name)})
    tests = sorted({test for test, _ in series})
    if matched or pattern == "*":
        return matched
    names = sorted({test.split("::")[-1] for test in tests})
    close = difflib.get_close_matches(pattern.strip("*"), names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UsageFailure(f"accept: the pattern {pattern!r} matches no recorded test in {location} "
                       f"({len(tests)} recorded); {hint}see `solgate history`")


def _listed(names: list[str], most: int = 3) -> str:
    shown = ", ".join(name.split("::")[-1] for name in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")



