"""Wiring (the ``solgate`` command): what every command shares: the one-line usage error, the
history and ini options read as the plugin reads them, the state folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.settings import Settings

if TYPE_CHECKING:
    from pytest_solgate.record.store import Store

    # What argparse's add_subparsers() gives, where each command adds its parser (add_parsers).
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


class UsageFailure(SolgateError):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line and exit 2, as for every bad input
        raise UsageFailure(f"{self.prog}: {message} (see {self.prog} --help)")


def history_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history", default=None,
        help="the history: a SQLite file or a postgresql:// URL (default: $SOLGATE_HISTORY, else "
             ".solgate/history.db at the git top level, else here)",
    )


def min_change_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--min-change", type=float, default=None,
        help="smallest relative SOL step listed as a change point (default: sol_min_change, else "
             f"{Settings().min_change})",
    )


def ini() -> tuple[dict[str, object], Settings, str]:
    """The ``sol_*`` ini options pytest would read here (support/inifile.py), parsed as the plugin
    parses them, and the file they came from: every command's defaults are pytest's."""
    from pytest_solgate.support.errors import OptionError
    from pytest_solgate.support.inifile import sol_options
    from pytest_solgate.support.settings import parse_settings

    raw, path = sol_options(Path.cwd())
    try:
        return raw, parse_settings(raw), str(path)
    except OptionError as exc:
        raise UsageFailure(f"{path}: {exc}") from None


def min_change(args: argparse.Namespace) -> float:
    value = args.min_change if args.min_change is not None else ini()[1].min_change
    if not 0 <= value < 1:
        raise UsageFailure(f"--min-change={value}: give a fraction in [0, 1), e.g. 0.025")
    return value


def history_path(args: argparse.Namespace) -> str:
    """The history a command reads or writes, parsed as the plugin parses ``--sol-history``: a
    relative path is taken from the git top level, whichever directory the command starts in."""
    import os

    from pytest_solgate.support.settings import HISTORY_VARIABLE

    if args.history:
        return location(args.history, "--history")
    if os.environ.get(HISTORY_VARIABLE):
        return location(os.environ[HISTORY_VARIABLE], HISTORY_VARIABLE)
    raw, settings, ini_path = ini()
    if raw.get("sol_history"):  # as pytest reads it: the same history for the plugin and the command
        return location(settings.history, f"sol_history in {ini_path}")
    return location(settings.history, "default")


def location(given: str, source: str) -> str:
    from pytest_solgate.record import gitinfo
    from pytest_solgate.support.locations import resolve_history

    return resolve_history(given, gitinfo.project_root(Path.cwd()), source)




def state_dir() -> Path:
    from pytest_solgate.record import gitinfo

    return gitinfo.state_dir(Path.cwd())


def open_history(location: str, create: bool = False) -> Store:
    from pytest_solgate.record import history

    try:
        return history.open_store(location, create=create)
    except history.NoHistoryYet as exc:
        here = Path.cwd().resolve()
        if any((folder / ".git").exists() for folder in (here, *here.parents)):
            raise
        # The history lives at the git top level: outside a repository, say so rather than "not yet".
        raise history.NoHistoryYet(
            f"{here} is not in a git repository, and the history lives at its top level ({exc}): run this "
            "inside your project's git repository, or name a history with --history PATH|URL (or $SOLGATE_HISTORY)"
        ) from None

