"""The CPU path against pytest-benchmark (issue 35, item 9): the same three torch.add sizes, one
thread, each tool in N fresh processes; the spread of each size's median across the processes
(CV) and each tool's wall time per run. Target: the plugin's CV at most half of
pytest-benchmark's, at no more than twice its wall time.

    python benchmarks/cpu_lead.py [--runs 6] [--sizes 65536,1048576,16777216] [--cold] [--load N]

The plugin times cold calls (the cache flushed before each sample), pytest-benchmark warm ones by
default: for data that fits a cache they time different things. ``--cold`` compares like with
like: pytest-benchmark's ``pedantic`` with a setup that writes the same flush buffer as the plugin
(twice the last-level cache the plugin counts) before each round of one call, ``--cold-rounds``
rounds (outside the timed call, as the plugin's flush is).

Each run is a fresh ``python -m pytest`` on a test file of its own: the plugin's with
``-p no:benchmark`` and a synthetic CPU profile (no calibration in the timed wall), pytest-benchmark's
with ``-p no:solgate``. The two tools' runs alternate, so that a neighbour's load falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_load, machine, write_synthetic  # noqa: E402

SETUP = """
import torch
torch.set_num_threads(1)
SIZES = {sizes}

def tensors(n):
    return torch.rand(n), torch.rand(n), torch.empty(n)
"""

PLUGIN_TEST = SETUP + """
import pytest

@pytest.mark.parametrize("n", SIZES)
def test_add(sol, n):
    x, y, out = tensors(n)
    sol.measure(lambda: torch.add(x, y, out=out), bytes=3 * 4 * n)
"""

BENCHMARK_TEST = SETUP + """
import pytest

@pytest.mark.parametrize("n", SIZES)
def test_add(benchmark, n):
    x, y, out = tensors(n)
    benchmark(lambda: torch.add(x, y, out=out))
"""

COLD_BENCHMARK_TEST = SETUP + """
import ctypes

import pytest
from pytest_solgate.measure.devices import last_level_cache_bytes

FLUSH = (ctypes.c_char * (2 * last_level_cache_bytes()))()  # the plugin's flush size
ROUNDS = {rounds}

def flush():
    ctypes.memset(FLUSH, flush.value, len(FLUSH))
    flush.value = (flush.value + 1) % 256
flush.value = 1

@pytest.mark.parametrize("n", SIZES)
def test_add(benchmark, n):
    x, y, out = tensors(n)
    benchmark.pedantic(lambda: torch.add(x, y, out=out), setup=flush, rounds=ROUNDS, iterations=1, warmup_rounds=2)
"""


def run(folder: Path, test: str, *options: str) -> tuple[float, dict[int, float]]:
    """One fresh process: its wall time and each size's median (seconds)."""
    out = folder / "out.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", test, *options],
                   cwd=folder, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - started
    data = json.loads(out.read_text())
    if "measurements" in data:  # the plugin's JSON
        medians = {int(m["test"].split("[")[1].rstrip("]")): m["seconds"] for m in data["measurements"]}
    else:  # pytest-benchmark's
        medians = {int(b["param"]): b["stats"]["median"] for b in data["benchmarks"]}
    return wall, medians


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--sizes", default="65536,1048576,16777216")
    parser.add_argument("--cold", action="store_true", help="pytest-benchmark flushes the cache before each call too")
    parser.add_argument("--cold-rounds", type=int, default=100, help="pytest-benchmark's rounds under --cold")
    parser.add_argument("--load", type=int, default=0, help="other processes spinning on the cores throughout")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="cpu-lead-"))
    (folder / "test_sol.py").write_text(PLUGIN_TEST.format(sizes=sizes))
    benchmark_test = COLD_BENCHMARK_TEST.format(sizes=sizes, rounds=args.cold_rounds) if args.cold else \
        BENCHMARK_TEST.format(sizes=sizes)
    (folder / "test_pb.py").write_text(benchmark_test)
    profile = write_synthetic(folder)
    plugin_options = ("-p", "no:benchmark", "--sol-device=cpu", f"--sol-profile={profile}", "--sol-no-save",
                      "--sol-gate=off", "--sol-json=out.json")
    benchmark_options = ("-p", "no:solgate", "--benchmark-json=out.json")
    walls: dict[str, list[float]] = {"plugin": [], "pytest-benchmark": []}
    medians: dict[str, dict[int, list[float]]] = {"plugin": {n: [] for n in sizes}, "pytest-benchmark": {n: [] for n in sizes}}
    with cpu_load(args.load):
        for _ in range(args.runs):
            for tool, test, options in (("plugin", "test_sol.py", plugin_options),
                                        ("pytest-benchmark", "test_pb.py", benchmark_options)):
                wall, found = run(folder, test, *options)
                walls[tool].append(wall)
                for n in sizes:
                    medians[tool][n].append(found[n])
    calls = f"cold calls for both (pytest-benchmark: {args.cold_rounds} flushed rounds)" if args.cold else \
        "the plugin's calls cold, pytest-benchmark's warm"
    print(f"machine: {machine()}, {os.cpu_count()} cores; {args.runs} fresh processes per tool; one thread; {calls}; "
          f"{args.load} other process(es) spinning")
    print(f"{'size':>10} {'plugin median':>14} {'CV':>7} {'pytest-benchmark median':>24} {'CV':>7} {'CV ratio':>9}")
    ratios = []
    for n in sizes:
        ours, theirs = medians["plugin"][n], medians["pytest-benchmark"][n]
        ratio = cv(ours) / cv(theirs) if cv(theirs) > 0 else float("inf")
        ratios.append(ratio)
        print(f"{n:>10} {statistics.median(ours) * 1e6:>11.1f} us {cv(ours):>7.1%} "
              f"{statistics.median(theirs) * 1e6:>21.1f} us {cv(theirs):>7.1%} {ratio:>9.2f}")
    wall_ratio = statistics.mean(walls["plugin"]) / statistics.mean(walls["pytest-benchmark"])
    print(f"wall per run: plugin {statistics.mean(walls['plugin']):.1f} s, pytest-benchmark "
          f"{statistics.mean(walls['pytest-benchmark']):.1f} s (x{wall_ratio:.2f})")
    met = all(r <= 0.5 for r in ratios) and wall_ratio <= 2.0
    print(f"target (CV at most half of pytest-benchmark's at most 2x its wall): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
