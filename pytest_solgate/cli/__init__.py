"""Wiring (no stage of its own): the ``solgate`` command: thin wiring from subcommands to the
engine, the judge, the history and the reports, one module per command group.

Every bad input is one line on stderr and exit status 2; ``compare`` exits 1 when a result regressed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from pytest_solgate.cli import ab, bisect, compare, history, profiles, records, step
from pytest_solgate.cli.common import Parser, UsageFailure
from pytest_solgate.support.errors import SolgateError

__all__ = ["UsageFailure", "build_parser", "main"]

GROUPS = (profiles, history, compare, records, bisect, ab, step)  # in the order `solgate --help` lists them


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="solgate", description="pytest-solgate: speed-of-light budgets for kernels")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # What follows a bare `--` goes to pytest as it is (bisect and ab run the user's tests with it).
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    try:
        args = build_parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
        if "--" in argv and not getattr(args, "takes_pytest_args", False):
            raise UsageFailure(f"solgate {args.command}: runs no tests, so it takes no pytest options after -- "
                               f"(got {' '.join(pytest_args) or 'nothing'}); only bisect and ab do")
        args.pytest_args = pytest_args
        return args.run(args)
    except SolgateError as exc:
        from pytest_solgate.support.locations import one_line

        message = one_line(str(exc))  # one line, and never a history URL's password
        print(f"solgate: error: {message}" if not message.startswith("solgate") else message, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `solgate ... | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
