"""Wiring (the ``solgate`` command): ``compare`` two commits by the gate's judge, and ``accept`` a
deliberate slowdown."""

from __future__ import annotations

import argparse
from typing import Any

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure
from pytest_solgate.support.settings import Settings


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("compare", help="two commits' results side by side; exit 1 on a regression")
    p.add_argument("base", help="the base commit (a git ref or sha)")
    p.add_argument("head", help="the head commit (a git ref or sha)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance where the test's marker gives none (the marker's max_regression is per test and "
                        "wins; default: the tolerance the gate applied, else sol_max_regression, else "
                        f"{Settings().max_regression})")
    p.add_argument("--window", type=int, default=None,
                   help="clean runs along BASE's first-parent ancestry that form the baseline (default: "
                        f"sol_baseline_window, else {Settings().baseline_window})")
    common.min_change_arg(p)
    common.history_arg(p)
    p.set_defaults(run=cmd_compare)
    p = sub.add_parser("accept", help="accept a deliberate slowdown at COMMIT: its level becomes the baseline from there on")
    p.add_argument("commit", help="the commit whose new level is accepted (a git ref or sha)")
    p.add_argument("pattern", nargs="?", default="*", help="only tests whose id matches this glob or contains this text (default: all)")
    p.add_argument("--reason", required=True, help="why the slowdown is accepted (kept in the history, shown in verdicts)")
    common.history_arg(p)
    p.set_defaults(run=cmd_accept)


def _find_commit(ref: str, shas: set[str], history_path: str) -> str:
    """A git ref, or a unique prefix of a commit in the history."""
    from pytest_solgate.record import gitinfo

    try:
        sha = gitinfo.resolve(".", ref) if ref else None
    except gitinfo.AmbiguousCommit as exc:
        raise UsageFailure(f"compare: {exc}") from None
    if sha:
        return sha
    matches = sorted(s for s in shas if ref and s.startswith(ref))
    if len(matches) > 1:
        raise UsageFailure(f"compare: '{ref}' is ambiguous in {history_path}: {', '.join(m[:12] for m in matches)}")
    if not matches:
        raise UsageFailure(f"compare: '{ref}' is neither a git ref here nor a commit in {history_path}")
    return matches[0]


def cmd_compare(args: argparse.Namespace) -> int:
    from pytest_solgate import results
    from pytest_solgate.judge import verdict
    from pytest_solgate.record import baseline, gitinfo
    from pytest_solgate.support import units

    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    ini = common.ini()[1]
    if args.window is None:
        args.window = ini.baseline_window
    if not 1 <= args.window <= 100:
        raise UsageFailure(f"--window={args.window}: give a whole number of runs from 1 to 100")
    min_change = common.min_change(args)
    with common.open_history(common.history_path(args)) as store:
        history_path = store.location
        shas = store.commits()
        base_sha, head_sha = _find_commit(args.base, shas, history_path), _find_commit(args.head, shas, history_path)
        head: dict[tuple[str, str, str, str], Any] = {}
        for run, m in store.results_at(head_sha):  # oldest first, so the newest clean run wins
            if not run["dirty"]:
                head[(m.test, m.name, m.profile, m.ceilings)] = m
        if not head:
            raise UsageFailure(f"compare: no clean results for '{args.head}' in {history_path}")
        # The base is a window along BASE's first-parent ancestry, as the plugin's baseline is;
        # HEAD itself is never in it (comparing a commit with itself, or with a BASE after it).
        commits = [c for c in gitinfo.first_parent_chain(".", base_sha) or [base_sha] if c != head_sha]
        windows = {
            key: baseline.window_from(store, key, commits, args.window, m.environment, min_change)
            for key, m in head.items() if verdict.judged(m)
        }
    if not any(windows.values()):
        itself = " other than HEAD's own (a commit is never in its own window)" if base_sha == head_sha else ""
        raise UsageFailure(f"compare: no clean results for '{args.base}' or its ancestors in {history_path}{itself}")
    settings = verdict.JudgeSettings(gate="fail", commit=head_sha, max_regression=ini.max_regression)
    regressed, one_run = 0, False
    print(f"{'test [name]':<60} {'base':>7} {'head':>7} {'change':>8} {'floor':>7}  verdict")
    for key, h in sorted(head.items()):
        label = f"{key[0]} [{key[1]}]"
        if not verdict.judged(h):
            why = "gate=False" if not h.gate else (h.judgement.reason if h.judgement else "not gated")
            print(f"{label:<60} {'':>7} {units.sol_fine(h.score.sol):>7} {'':>8} {'':>7}  not gated ({why.split(':')[0]})")
            continue
        window = windows.get(key)
        if window is None:
            print(f"{label:<60} {'':>7} {units.sol_fine(h.score.sol):>7} {'':>8} {'':>7}  only in head")
            continue
        result = verdict.rejudge(h, window, settings, args.max_regression)
        regressed += result.verdict == results.REGRESSED
        floor = units.percent(result.floor) if result.floor is not None else ONE_RUN_FLOOR
        one_run |= result.floor is None
        print(f"{label:<60} {units.sol_fine(result.centre):>7} {units.sol_fine(h.score.sol):>7} {units.percent(result.change, True):>8} {floor:>7}  "
              f"{result.verdict}")
    if one_run:  # as the gate words it: no spread, so no floor, and the change cannot fail
        print(f"floor '{ONE_RUN_FLOOR}': the window has one run, which shows no run-to-run noise; such a change is "
              "ambiguous until two runs of ancestors are recorded, as the gate says")
    print(f"{regressed} regressed between {base_sha[:10]} and {head_sha[:10]} "
          f"(base: up to {units.plural(args.window, 'clean run')} along its first-parent ancestry; not re-measured)")
    return 1 if regressed else 0


ONE_RUN_FLOOR = "1 run"


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
    accept = {"commit_sha": sha, "pattern": args.pattern, "reason": reason, "accepted_by": who,
              "accepted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with common.open_history(common.history_path(args)) as store:  # an accept amends a history, never starts one
        matched = _accepted_tests(args.pattern, store.tests(), store.location)
        store.record_accept(accept)
        location = store.location
    scope = "every test" if args.pattern == "*" else f"{args.pattern!r} ({len(matched)} recorded test(s): {_listed(matched)})"
    print(f"accepted the level at {sha[:10]} for {scope} in {location}: baselines start there from now on ({_first_line(reason)})")
    return 0


def _first_line(text: str) -> str:
    """The reason as echoed: its first line (the history keeps it whole)."""
    lines = text.splitlines()
    return lines[0] + (f" [+{len(lines) - 1} more line(s)]" if len(lines) > 1 else "")


def _accepted_tests(pattern: str, tests: list[str], location: str) -> list[str]:
    """The recorded tests an accept's pattern matches; none is refused, with the close matches
    (an accept that matches nothing would never apply, and would say it did)."""
    import difflib

    from pytest_solgate.record.store import matches

    matched = [test for test in tests if matches(pattern, test)]
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



