"""How close the CPU backend's median comes to kernels of known duration, and what it costs.

Busy-waits of 50 us, 1 ms and 10 ms (spinning on the clock, so the truth is known), each measured
with the plugin's default timing settings. Targets: error of the median within 3 % at 50 us and
within 1 % at 1 ms and 10 ms; each measurement done in under 1 s of wall time.

    python benchmarks/timing_accuracy.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import busy, machine, write_synthetic  # noqa: E402
from pytest_solgate.engine import Engine  # noqa: E402
from pytest_solgate.support.settings import parse_settings  # noqa: E402

CASES = ((50e-6, 0.03), (1e-3, 0.01), (10e-3, 0.01))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="measurements per duration (default 5)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    engine = Engine(parse_settings({"sol_profile": str(write_synthetic(folder)), "sol_device": "cpu"}), folder / ".solgate")
    print(f"machine: {machine()}")
    print(f"{'truth':>8} {'median (worst of runs)':>22} {'error':>8} {'target':>7} {'samples':>8} {'wall s (max)':>13}  ok")
    for truth, target in CASES:
        errors, walls, medians, counts = [], [], [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            m = engine.measure("bench", lambda truth=truth: busy(truth), bytes=1.0)
            walls.append(time.perf_counter() - started)
            medians.append(m.timing.seconds)
            errors.append(abs(m.timing.seconds - truth) / truth)
            counts.append(len(m.timing.samples))
        worst = max(range(len(errors)), key=errors.__getitem__)
        ok = max(errors) <= target and max(walls) < 1.0
        print(f"{truth * 1e6:>6.0f}us {medians[worst] * 1e6:>20.2f}us {max(errors):>8.3%} {target:>7.0%} "
              f"{int(statistics.median(counts)):>8} {max(walls):>13.2f}  {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
