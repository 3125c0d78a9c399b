"""Where change points land on seeded series, for our method and Apache Otava's E-divisive.

Each setting draws ``--series`` seeded series of one value per commit, log-normal noise around a
level, and one of: a step of -5/-10/-20 % in the middle, at the newest commit or at the second-
newest; no step (A/A); a one-commit glitch of -30 % in the middle (not a step: it should be an
outlier); a -1 % step on 0.1 % noise (real, but below the 2.5 % minimum magnitude). For every
setting it prints, per method, the share of series whose step was found at its exact commit,
within one commit, one commit early, or missed, and the false change points per series (those
further than one commit from the true step; every change point of an A/A or glitch series).

- ours: ``pytest_solgate.judge.changepoints.find`` (PELT, log(n) penalty, one-commit segments read as
  provisional steps at the newest commit and as outliers elsewhere, 2.5 % minimum magnitude);
  a provisional step counts as found;
- otava: ``otava.analysis.compute_change_points`` (Apache Otava 0.8, E-divisive means with the
  t-test significance of Fleming et al. 2023), with its defaults (window 50, p <= 0.001), on SOL.
  Otava is not a dependency of the project; install it beside (``pip install apache-otava``) or
  pass ``--methods ours``.

    python benchmarks/changepoints.py [--series 50] [--seed 1] [--methods ours,otava]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402
from pytest_solgate.judge import changepoints  # noqa: E402


def ours(values: Sequence[float]) -> list[int]:
    return [cp.index for cp in changepoints.find(values).points]


def otava(values: Sequence[float]) -> list[int]:
    from otava.analysis import compute_change_points

    found, _ = compute_change_points(list(values), window_len=50, max_pvalue=0.001)
    return [int(cp.index) for cp in found]


METHODS: dict[str, Callable[[Sequence[float]], list[int]]] = {"ours": ours, "otava": otava}


def series(rng: random.Random, n: int, noise: float, step: float, at: int | None, glitch: bool) -> list[float]:
    values = []
    for i in range(n):
        level = 1.0 + (step if at is not None and i >= at else 0.0)
        if glitch and i == n // 2:
            level *= 0.7
        values.append(level * math.exp(rng.gauss(0.0, noise)))
    return values


def settings() -> list[tuple[str, int, float, float, int | None, bool]]:
    """(label, commits, noise, step, index of the step or None, glitch)."""
    found = []
    for n in (30, 200):
        for noise in (0.02, 0.04, 0.08):
            found.append(("A/A", n, noise, 0.0, None, False))
            found.append(("glitch -30% mid", n, noise, 0.0, None, True))
            for step in (-0.05, -0.10, -0.20):
                for where, at in (("mid", n // 2), ("newest", n - 1), ("2nd-newest", n - 2)):
                    found.append((f"step {step:+.0%} {where}", n, noise, step, at, False))
        found.append(("step -1% mid", n, 0.001, -0.01, n // 2, False))
    return found


def score(found: list[int], at: int | None) -> tuple[str, int]:
    """('exact' | 'one early' | 'within one' | 'missed' | '', false change points)."""
    if at is None:
        return "", len(found)
    near = [i for i in found if abs(i - at) <= 1]
    false = len(found) - len(near)
    if at in near:
        return "exact", false
    if at - 1 in near:
        return "one early", false
    if near:
        return "within one", false
    return "missed", false


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=50, help="seeded series per setting (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--methods", default="ours,otava")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for method in methods:
        if method not in METHODS:
            parser.error(f"--methods: unknown {method!r}; choose from {', '.join(METHODS)}")
    if "otava" in methods:
        try:
            import otava.analysis  # noqa: F401
        except ImportError:
            sys.exit("otava is not installed here: pip install apache-otava, or pass --methods ours")
    print(f"machine: {machine()}; {args.series} series per setting, seed {args.seed}")
    print(f"{'setting':<24} {'n':>4} {'noise':>5}  {'method':<6} {'exact':>6} {'within1':>7} {'1 early':>7} "
          f"{'missed':>6} {'false/series':>12}")
    spent = {m: 0.0 for m in methods}
    for label, n, noise, step, at, glitch in settings():
        rng = random.Random(f"{args.seed}-{label}-{n}-{noise}")
        drawn = [series(rng, n, noise, step, at, glitch) for _ in range(args.series)]
        for method in methods:
            counts = {"exact": 0, "one early": 0, "within one": 0, "missed": 0}
            false = 0
            started = time.perf_counter()
            for values in drawn:
                where, extra = score(METHODS[method](values), at)
                false += extra
                if where:
                    counts[where] += 1
            spent[method] += time.perf_counter() - started
            total = len(drawn)
            if at is None:
                print(f"{label:<24} {n:>4} {noise:>5.1%}  {method:<6} {'':>6} {'':>7} {'':>7} {'':>6} {false / total:>12.2f}")
                continue
            within = counts["exact"] + counts["one early"] + counts["within one"]
            print(f"{label:<24} {n:>4} {noise:>5.1%}  {method:<6} {counts['exact'] / total:>6.0%} {within / total:>7.0%} "
                  f"{counts['one early'] / total:>7.0%} {counts['missed'] / total:>6.0%} {false / total:>12.2f}", flush=True)
    rng = random.Random(args.seed)
    long = [math.exp(rng.gauss(0.0, 0.04)) for _ in range(10_000)]
    started = time.perf_counter()
    changepoints.find(long)
    print(f"ours on 10,000 commits (4 % noise, A/A): {time.perf_counter() - started:.2f} s; "
          + ", ".join(f"{m} total {s:.1f} s" for m, s in spent.items()))


if __name__ == "__main__":
    main()
