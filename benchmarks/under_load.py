"""Run a command with other processes spinning on the cores beside it, a given number of times:
how the suite's "tests that never flake" runs were made (benchmarks/results/cpu.md).

    python benchmarks/under_load.py --load 2 --repeat 3 -- python -m pytest tests -n 2 -p no:randomly -q

Prints each run's exit status and wall time, and exits with the first non-zero status (0 when
every run passed). The spinners are stopped however the runs end, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_load  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=2, help="processes spinning on the cores throughout (default: 2)")
    parser.add_argument("--repeat", type=int, default=1, help="how many times to run the command (default: 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- python -m pytest tests -n 2")
    first_failure = 0
    with cpu_load(args.load):
        for run in range(1, args.repeat + 1):
            start = time.monotonic()
            status = subprocess.call(command)
            print(f"under_load: run {run} of {args.repeat}: exit {status} in {time.monotonic() - start:.0f} s "
                  f"beside {args.load} spinning process(es)", flush=True)
            first_failure = first_failure or status
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
