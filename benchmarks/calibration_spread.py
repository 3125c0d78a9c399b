"""How stable the CPU ceilings are: ``solgate calibrate`` run several times, each in a fresh
process (each one is itself the median of 3 repetitions), and the spread of its bandwidth and
fp32/fp64 peaks across them. Target: at most 10 % for bandwidth and fp32.

    python benchmarks/calibration_spread.py [--count 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402
from pytest_solgate.profiles import parse_profile, tomllib  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    figures = []
    for i in range(args.count):
        folder = Path(tempfile.mkdtemp(prefix="calibrate-"))
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "calibrate"], cwd=folder,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(done.stderr)
        profile = parse_profile(tomllib.loads(done.stdout), f"calibration {i + 1}")
        figures.append((profile.memory_bandwidth_gbps, profile.peak_tflops["fp32"], profile.peak_tflops["fp64"]))
        cached = "not cached (repetitions disagree)" if "disagree" in done.stderr else "cached"
        print(f"calibration {i + 1}: {figures[-1][0]:6.2f} GB/s  fp32 {figures[-1][1] * 1e3:6.1f} GFLOP/s  "
              f"fp64 {figures[-1][2] * 1e3:6.1f} GFLOP/s  ({seconds:.1f} s, {cached})", flush=True)
    for index, name in enumerate(("bandwidth", "fp32", "fp64")):
        values = sorted(f[index] for f in figures)
        median = values[len(values) // 2]
        print(f"{name:<10} spread (max - min) / median over {args.count} calibrations: {(values[-1] - values[0]) / median:.1%}"
              + ("  (target <= 10%)" if name != "fp64" else ""))


if __name__ == "__main__":
    main()
