"""Wiring (the ``solgate`` command): runs into and between histories: ``import``, ``migrate`` and
``init``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure
from pytest_solgate.support.locations import is_history_url

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands
    from pytest_solgate.results import Measurement, RunInfo


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("import", help="merge a --sol-json file from another runner (or the spool) into the history")
    p.add_argument("file", nargs="?", help="a JSON file written by pytest --sol-json")
    p.add_argument("--spool", action="store_true", help="send the runs spooled in .solgate/spool/ while the server was away")
    common.history_arg(p)
    p.set_defaults(run=cmd_import)
    p = sub.add_parser("migrate", help="copy every run from one history to another (SQLite <-> PostgreSQL); idempotent")
    p.add_argument("source", help="the history to read: a SQLite file or a postgresql:// URL")
    p.add_argument("destination", help="the history to write: a SQLite file or a postgresql:// URL")
    p.set_defaults(run=cmd_migrate)
    p = sub.add_parser("check", help="exit 1 when a --sol-json file holds a slowdown the gate could not judge "
                       "(ambiguous beyond its tolerance: a busy machine, one baseline run): in CI that is no pass")
    p.add_argument("file", help="a JSON file written by pytest --sol-json")
    p.set_defaults(run=cmd_check)
    p = sub.add_parser("init", help="create or upgrade the history's tables (once, as a PostgreSQL database's owner)")
    common.history_arg(p)
    p.set_defaults(run=cmd_init)


def cmd_import(args: argparse.Namespace) -> int:
    from pytest_solgate.record import spool

    if args.spool == bool(args.file):
        raise UsageFailure("import: give a --sol-json FILE, or --spool (not both)")
    history_path = common.history_path(args)  # a bad location is refused before the file is read
    if args.spool:
        if not spool.waiting(common.state_dir()):  # nothing to send: no history is created for it
            print(f"no spooled runs in {spool.folder(common.state_dir())}: nothing to import")
            return 0
        with common.open_history(history_path, create=True) as store:
            sent = spool.send(store, common.state_dir())
            location = store.location
        for problem in sent.problems:
            print(f"solgate: {problem}", file=sys.stderr)
        print(f"{sent.sent} spooled run(s) sent to {location}"
              + (f", {sent.already_there} already there" if sent.already_there else "")
              + (f"; {sent.left} left in the spool: the server went away again" if sent.left else ""))
        return 1 if sent.left or sent.problems else 0
    run, measurements = _read_results(Path(args.file))  # every field checked before anything is written
    with common.open_history(history_path, create=True) as store:
        added = store.record_run(run, measurements)
        location = store.location
    if added:
        print(f"imported run {run.id[:12]} ({len(measurements)} measurements) into {location}")
    else:
        print(f"run {run.id[:12]} is already in {location}: nothing added")
    return 0


def _read_results(path: Path) -> tuple[RunInfo, list[Measurement]]:
    from pytest_solgate.record import schema
    from pytest_solgate.support.errors import ImportFileError

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot read it ({exc})") from None
    return schema.read_run(text, str(path))


def cmd_check(args: argparse.Namespace) -> int:
    """No silent green in CI: a slowdown the gate held back as ``ambiguous`` (beyond its tolerance,
    beyond any floor it knew) fails here, naming why it could not judge it."""
    from pytest_solgate.judge.regression_rules import unexplained_drop
    from pytest_solgate.support import units

    _, measurements = _read_results(Path(args.file))
    unjudged = [m for m in measurements if unexplained_drop(m)]
    for m in unjudged:
        assert m.judgement is not None and m.judgement.baseline is not None  # unexplained_drop says so
        why = (f"the machine was busy ({m.contended})" if m.contended else
               m.judgement.reason.splitlines()[-1].strip() if m.judgement.reason else "the gate could not judge it")
        print(f"{m.test} [{m.name}]: {units.percent(m.judgement.baseline.change, signed=True)}, ambiguous: {why}")
    if unjudged:
        print(f"{len(unjudged)} slowdown(s) beyond the tolerance that the gate could not judge: not a pass; measure "
              "again on a quiet runner, or pair HEAD with its base under the same load (solgate ab BASE)")
        return 1
    print(f"no slowdown left unjudged in {len(measurements)} measurement(s)")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Every run of SOURCE into DESTINATION, each in its own transaction: run ids are unique, so
    running it again (or after an interruption) adds only what is missing."""
    from pytest_solgate.support.locations import same_file

    source_at, destination_at = common.location(args.source, "SOURCE"), common.location(args.destination, "DESTINATION")
    if is_history_url(source_at) == is_history_url(destination_at) and (
        source_at == destination_at or (not is_history_url(source_at) and same_file(source_at, destination_at))
    ):
        raise UsageFailure("migrate: SOURCE and DESTINATION are the same history")
    copied = present = 0
    with common.open_history(source_at) as source, common.open_history(destination_at, create=True) as destination:
        for run, measurements in source.whole_runs():
            if destination.record_run(run, measurements):
                copied += 1
            else:
                present += 1
        for accept in source.all_accepts():  # the accepted slowdowns travel with the runs
            destination.record_accept(accept)
        print(f"{copied} run(s) copied from {source.location} to {destination.location}, {present} already there")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    with common.open_history(common.history_path(args), create=True) as store:
        print(f"history ready at {store.location} (schema up to date)")
    return 0



