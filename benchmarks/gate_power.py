"""How often the regression gate cries wolf, and how often it catches a real 10 % slowdown.

100 A/A comparisons (the same 1 ms kernel measured twice: any `regressed` is a false positive;
target at most 1 %) and 100 A/B comparisons (the second kernel 10 % slower: target at least 95 %
`regressed`), each measured by the CPU backend with the plugin's default timing settings, judged
exactly as the plugin judges (tolerance 5 %, Mann-Whitney U at p < 0.001).

    python benchmarks/gate_power.py [--count 100] [--seconds 0.001]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import busy, machine, write_synthetic  # noqa: E402
from pytest_solgate import judge, records  # noqa: E402
from pytest_solgate.engine import Engine  # noqa: E402
from pytest_solgate.score import sol_of_samples  # noqa: E402
from pytest_solgate.settings import parse_settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1e-3, help="kernel duration (default 1 ms)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    settings = parse_settings({"sol_profile": str(write_synthetic(folder)), "sol_device": "cpu"})
    engine = Engine(settings, cache_dir=folder / ".solgate")
    declared = 0.8e9 * args.seconds  # SOL 0.8 for the fast kernel

    def compare(slowdown: float) -> str:
        base = engine.measure("bench::k", lambda: busy(args.seconds), bytes=declared)
        head = engine.measure("bench::k", lambda: busy(args.seconds * slowdown), bytes=declared)
        baseline = judge.Baseline(commit="a" * 40, sol=base.sol, sol_samples=tuple(sol_of_samples(base.t_sol, base.samples)))
        return judge.judge(head, judge.Budget(), baseline, engine.judge_settings).verdict

    print(f"machine: {machine()}")
    print(f"kernel: {args.seconds * 1e3:g} ms busy-wait; timing: min {settings.sampling.min_time} s, "
          f"max {settings.sampling.max_time} s, noise {settings.sampling.noise}")
    for label, slowdown, target in (("A/A (same kernel)", 1.0, "regressed <= 1%"), ("A/B (10% slower)", 1.1, "regressed >= 95%")):
        started = time.perf_counter()
        verdicts = [compare(slowdown) for _ in range(args.count)]
        per = (time.perf_counter() - started) / args.count
        counts = {v: verdicts.count(v) for v in sorted(set(verdicts))}
        rate = verdicts.count(records.REGRESSED) / args.count
        print(f"{label:<20} regressed {rate:6.1%}  (target {target})  verdicts {counts}  {per:.2f} s per comparison")


if __name__ == "__main__":
    main()
