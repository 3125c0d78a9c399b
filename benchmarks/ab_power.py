"""How often ``solgate ab`` catches a real slowdown, and how often it cries wolf, measured the way
a pull request meets it: a computing torch kernel in a temporary git repository, the base checked
out in a worktree and HEAD in the tree, each run its own pytest process.

The repository holds one compute-bound CPU kernel (a chain of float32 matmuls, one torch thread)
and a profile with high ceilings (only the A/B is judged). Two kinds of trial:

1. Slowdown: HEAD does 1.2x the matmuls of the base while declaring the same FLOPs (a change
   that makes the kernel 1.2x slower). A trial catches it when ``solgate ab`` exits 1
   (``regressed``). Target: at least 9 of 10.
2. A/A: HEAD is an empty commit on the base. A trial passes when ``solgate ab`` exits 0.
   Target: at least 19 of 20.

    python benchmarks/ab_power.py [--slow-trials 10] [--same-trials 20] [--rounds 10] [--max-time 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chain_repo import git, make_repo, set_chain, solgate_ab  # noqa: E402
from _common import machine  # noqa: E402


def trial(repo: Path, base: str, head_matmuls: int, rounds: int, max_time: float) -> tuple[int, str]:
    """One A/B: HEAD a new commit with ``head_matmuls`` on the base; its exit status and verdict line."""
    git(repo, "checkout", "-q", "--detach", base)
    set_chain(repo, head_matmuls, f"head {head_matmuls}")
    return solgate_ab(repo, base, rounds, max_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow-trials", type=int, default=10)
    parser.add_argument("--same-trials", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--max-time", type=float, default=300)
    args = parser.parse_args()
    print(f"machine: {machine()}; load average at the start {_load()}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="solgate-ab-bench-") as folder:
        repo = make_repo(Path(folder))
        base = git(repo, "rev-parse", "HEAD")
        caught = passed = 0
        seconds: dict[str, list[float]] = {"slow": [], "same": []}
        for kind, trials, matmuls in (("slow", args.slow_trials, 12), ("same", args.same_trials, 10)):
            for i in range(trials):
                began = time.monotonic()
                code, row = trial(repo, base, matmuls, args.rounds, args.max_time)
                seconds[kind].append(time.monotonic() - began)
                caught += kind == "slow" and code == 1
                passed += kind == "same" and code == 0
                print(f"{kind} {i + 1}: exit {code} in {seconds[kind][-1]:.0f} s  {row}  (load {_load()})", flush=True)
    print(f"1.2x slower caught {caught} of {args.slow_trials} (target >= 90 %) in {_spread(seconds['slow'])} "
          f"(target < 90 s); unchanged passed {passed} of {args.same_trials} (target >= 95 %) in "
          f"{_spread(seconds['same'])}; {time.time() - started:.0f} s")


def _load() -> str:
    """The 1-minute load average: the figures mean little without it on a shared machine."""
    return f"{os.getloadavg()[0]:.1f}"


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.0f} s, max {max(values):.0f} s" if values else "-"


if __name__ == "__main__":
    main()
