"""How often the regression gate cries wolf on unchanged code, and what it catches, measured the
way a user meets it: real kernels, one pytest process per commit of a git repository.

A temporary repository holds four torch CPU kernels (add, mm, softmax, copy; one torch thread;
working sets larger than the last-level cache) and a profile with high ceilings, so that only the
baseline is judged. Then:

1. A/A: ``--runs`` empty commits, one ``pytest`` run each. Every ``regressed`` is a false alarm
   (target: at most 1 in 80 measurements, 20 runs x 4 kernels).
2. Power from new runs: for each factor (x1.1, x1.2, x1.25, x1.4, x1.8) a commit that makes every
   kernel do that many times the work while declaring the same bytes (a change that slows every
   kernel alike: nothing may explain it away), run ``--power-runs`` times, each judged by the
   plugin against the A/A history and not saved; the share of ``regressed`` is the power. The
   commit is then reverted, so that each factor starts from the A/A level.
3. Power by replay: the A/A run-level values through the gate's own window choice and judge
   (level.level, windows.against_window), each run in turn against the runs before it, divided
   by the factor.

Runs marked contended (the process got under 3/4 of a core while sampling) are counted and shown
with a ``*``: they are never baselines and cannot be ``regressed``.

With ``--neighbour``, a second process streams memory (a copy between two 256 MiB buffers, in a
loop, on the other core) for the whole benchmark: a noisy neighbour that takes memory bandwidth
and cache, not the benchmark's core, as another job on a shared runner would.

    python benchmarks/gate_power.py [--runs 20] [--factors 1.1,1.2,1.25,1.4,1.8] [--power-runs 3] [--neighbour]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402
from pytest_solgate import results
from pytest_solgate.judge import level  # noqa: E402
from pytest_solgate.judge import window as windows
from pytest_solgate.results import Measurement  # noqa: E402
from pytest_solgate.results_json import decode, encode

KERNELS = ("add", "mm", "softmax", "copy")
PROFILE = """
id = "gate-bench"
name = "High ceilings: only the baseline is judged"
kind = "cpu"
memory_bandwidth_gbps = 1000
ceilings = "measured"
source = "benchmarks/gate_power.py"

[peak_tflops]
fp32 = 100
"""
CONFTEST = """
import torch

torch.set_num_threads(1)  # one thread: the other core stays for the OS and pytest itself
"""
TESTS = '''
import json
import pathlib

import torch

SLOW = json.loads(pathlib.Path(__file__).with_name("slow.json").read_text())


def extra(kernel, n):
    """Elements of additional work when this commit slows a kernel down (same declared bytes)."""
    return int(n * (SLOW.get(kernel, 1.0) - 1.0))


def test_add(sol):
    n = 1 << 23  # 3 x 32 MiB of float32: beyond the last-level cache
    x, y, out = torch.rand(n), torch.rand(n), torch.empty(n)
    more = extra("add", n)

    def kernel():
        torch.add(x, y, out=out)
        if more:
            torch.add(x[:more], y[:more], out=out[:more])

    sol.measure(kernel, bytes=sol.nbytes(x, y, out), flops=n)


def test_mm(sol):
    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    out = torch.empty(1024, 1024)
    rows = extra("mm", 1024)

    def kernel():
        torch.mm(a, b, out=out)
        if rows:
            torch.mm(a[:rows], b, out=out[:rows])

    sol.measure(kernel, bytes=sol.nbytes(a, b, out), flops=2 * 1024**3)


def test_softmax(sol):
    x = torch.rand(2048, 4096)  # 32 MiB in, 32 MiB out
    out = torch.empty_like(x)
    rows = extra("softmax", 2048)

    def kernel():
        torch.softmax(x, dim=-1, out=out)
        if rows:
            torch.softmax(x[:rows], dim=-1, out=out[:rows])

    sol.measure(kernel, bytes=sol.nbytes(x, out), flops=5 * x.numel())


def test_copy(sol):
    src, dst = torch.rand(1 << 24), torch.empty(1 << 24)  # 64 MiB each
    more = extra("copy", 1 << 24)

    def kernel():
        dst.copy_(src)
        if more:
            dst[:more].copy_(src[:more])

    sol.measure(kernel, bytes=sol.nbytes(src, dst))
'''


NEIGHBOUR = """
import ctypes
size = 256 << 20
source, destination = (ctypes.c_char * size)(), (ctypes.c_char * size)()
while True:
    ctypes.memmove(destination, source, size)
"""


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "bench@example.invalid")
        self.git("config", "user.name", "bench")
        (path / "bench.toml").write_text(PROFILE)
        (path / "conftest.py").write_text(CONFTEST)
        (path / "test_kernels.py").write_text(TESTS)
        (path / "slow.json").write_text("{}")
        (path / ".gitignore").write_text(".solgate/\nrun.json\n")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True, text=True).stdout.strip()

    def commit(self, message: str, slow: dict | None = None) -> str:
        if slow is not None:
            (self.path / "slow.json").write_text(json.dumps(slow))
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def pytest(self, *options: str) -> tuple[subprocess.CompletedProcess, dict, float]:
        """One pytest process, as a user runs it: its outcome, its --sol-json results (left in
        run.json) and its wall time."""
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sol-device=cpu",
             "--sol-profile=bench.toml", "--sol-json=run.json", *options],
            cwd=self.path, capture_output=True, text=True,
        )
        seconds = time.perf_counter() - started
        if not (self.path / "run.json").exists():
            sys.exit(f"pytest wrote no results:\n{done.stdout}\n{done.stderr}")
        return done, json.loads((self.path / "run.json").read_text()), seconds

    def run(self, *options: str) -> tuple[dict[str, dict], float]:
        _, data, seconds = self.pytest(*options)
        (self.path / "run.json").unlink()
        # by kernel; a measurement other than the test's default one as "kernel/name"
        return {m["test"].split("::test_")[-1] + ("" if m["name"] == "default" else f"/{m['name']}"): m
                for m in data["measurements"]}, seconds


def baseline_run(m: Measurement, j: int) -> windows.BaselineRun:
    disturbed = "contended" if m.contended else "noisy" if m.timing.noisy else ""
    return windows.BaselineRun(commit=f"{j:040x}", run_id=f"r{j}", sol=m.score.sol, seconds=m.timing.seconds,
                             noise=m.timing.noise, verdict=m.verdict or "", disturbed=disturbed,
                             probe_seconds=m.timing.probe_seconds)


def replay_power(values: dict[str, list[Measurement]], slowdown: float, window: int, first: int) -> tuple[int, int]:
    """(caught, tried): each undisturbed run from index ``first`` on, slowed by ``slowdown``, against
    the window the plugin would choose (level.level: contended and noisy runs left out) from
    the runs before it."""
    settings = windows.JudgeSettings()
    caught = tried = 0
    for series in values.values():
        for i in range(first, len(series)):
            head = series[i]
            if head.contended:
                continue
            before = [baseline_run(m, j) for j, m in reversed(list(enumerate(series[:i])))]
            kept, notes = level.level(before, [r.commit for r in before], [], window)
            if len(kept) < 2:
                continue
            slowed = decode({**encode(head), "sol": head.score.sol / (1 + slowdown),
                             "seconds": head.timing.seconds * (1 + slowdown)})
            judged = windows.against_window(slowed, windows.BaselineWindow(runs=tuple(kept)), 0.05, settings).verdict
            caught += judged == results.REGRESSED
            tried += 1
    return caught, tried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="A/A runs, one commit each (default 20)")
    parser.add_argument("--factors", default="1.1,1.2,1.25,1.4,1.8",
                        help="time factors of the slow commits, every kernel alike (default %(default)s)")
    parser.add_argument("--power-runs", type=int, default=3, help="runs of each slow commit (default 3: 12 measurements)")
    parser.add_argument("--neighbour", action="store_true", help="stream memory from a second process throughout")
    parser.add_argument("--replay-history", type=Path, help="only replay the A/A runs of an earlier benchmark's history")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error(f"--runs={args.runs}: give at least 2 A/A runs (a window needs runs before the one judged)")
    factors = [float(f) for f in args.factors.split(",") if f.strip()]
    if args.replay_history:
        replay_history(args.replay_history)
        return
    repo = Repo(Path(tempfile.mkdtemp(prefix="gate-power-")))
    print(f"machine: {machine()}")
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if args.neighbour else None
    if neighbour:
        print(f"a neighbour process (pid {neighbour.pid}) streams memory for the whole benchmark")
    try:
        measure(repo, args, factors)
    finally:
        if neighbour:
            neighbour.kill()


def measure(repo: Repo, args: argparse.Namespace, factors: list[float]) -> None:
    print(f"repository: {repo.path}; {args.runs} A/A runs, then slow commits x{factors} ({args.power_runs} runs each, "
          "every kernel slowed alike, judged against the A/A history and not saved); default timing settings", flush=True)

    series: dict[str, list[Measurement]] = {k: [] for k in KERNELS}
    verdicts: list[str] = []
    contended = 0
    for i in range(args.runs):
        repo.commit(f"A/A {i}")
        measured, seconds = repo.run()
        for kernel in KERNELS:
            m = measured[kernel]
            series[kernel].append(decode(m))  # a null noise (the JSON's unknown) reads as infinite
            verdicts.append(m["verdict"])
            contended += bool(m.get("contended"))
        row = "  ".join(f"{k} {measured[k]['sol']:.3g} {measured[k]['verdict']:<9}{'*' if measured[k].get('contended') else ' '}"
                        for k in KERNELS)
        print(f"run {i + 1:>2} ({seconds:4.1f} s)  {row}", flush=True)
    counts = {v: verdicts.count(v) for v in sorted(set(verdicts))}
    false_alarms = verdicts.count(results.REGRESSED)
    print(f"A/A: {false_alarms} false 'regressed' in {len(verdicts)} measurements (target <= 1); verdicts {counts}; "
          f"{contended} contended (* above)")
    for kernel in KERNELS:
        sols = [m.score.sol for m in series[kernel]]
        spread = (max(sols) - min(sols)) / (sum(sols) / len(sols))
        logs = [math.log(m.timing.seconds) for m in series[kernel]]
        probed = [math.log(m.timing.seconds / m.timing.probe_seconds) for m in series[kernel] if m.timing.probe_seconds]
        relative = f", {statistics.stdev(probed):.3f} relative to the memory probe" if len(probed) == len(logs) else ""
        print(f"  {kernel:<8} run-to-run range {spread:6.1%} of the mean over {len(sols)} runs; standard deviation of "
              f"log time {statistics.stdev(logs):.3f}{relative} ({series[kernel][-1].score.bound}-bound)")

    print("power from new runs (each slow commit run on its own, judged by the plugin against the A/A history):")
    for factor in factors:
        repo.commit(f"every kernel x{factor}", slow={k: factor for k in KERNELS})
        got: list[str] = []
        busy = 0
        by_kernel: dict[str, list[dict]] = {k: [] for k in KERNELS}
        for _ in range(args.power_runs):
            measured, _ = repo.run("--sol-no-save")
            got += [measured[k]["verdict"] for k in KERNELS]
            busy += sum(bool(measured[k].get("contended")) for k in KERNELS)
            for k in KERNELS:
                by_kernel[k].append(measured[k])
        caught = got.count(results.REGRESSED)
        print(f"  time x{factor:<5} regressed in {caught}/{len(got)} ({caught / len(got):.0%}); "
              f"verdicts { {v: got.count(v) for v in sorted(set(got))} }; {busy} contended", flush=True)
        for k in KERNELS:
            print(f"      {k:<8} " + "  ".join(_judged(m) for m in by_kernel[k]), flush=True)
        repo.git("revert", "--no-edit", "HEAD")  # the next factor starts from the A/A level again
    report_power(series)


def _judged(m: dict) -> str:
    """One slow run of a kernel: its verdict, change and noise floor (and whether by the probe)."""
    base = m.get("baseline") or {}
    floor = base.get("noise_floor")
    how = f", raw {base['raw_change']:+.1%} (by probe)" if base.get("by_probe") else ""
    return (f"{m['verdict']} {base.get('change', 0.0):+.1%} floor {floor:.1%}{how}" if floor is not None
            else f"{m['verdict']}")


def report_power(series: dict[str, list[Measurement]]) -> None:
    print("power by replay (A/A run values slowed by d, against the window of the runs before; first block only):")
    for first, label in ((2, "every run with a window of 2 or more"), (5, "runs with a window of 5 or more")):
        print(f"  {label}:")
        if replay_power(series, 0.0, 10, first)[1] == 0:
            print(f"    none: too few undisturbed A/A runs (give --runs {first + 1} or more)")
            continue
        for factor in (1.1, 1.2, 1.25, 1.4, 1.6, 1.8, 2.5):
            got, tried = replay_power(series, factor - 1, 10, first)
            print(f"    time x{factor:<4}: regressed in {got}/{tried} ({got / tried:.0%})")


def replay_history(path: Path) -> None:
    """The power replay alone, over the A/A runs that an earlier benchmark left in its history."""
    from pytest_solgate.record.sqlite import SqliteStore
    series: dict[str, list[Measurement]] = {k: [] for k in KERNELS}
    with SqliteStore(path, create=False) as store:
        recorded = store.results()
    slow_commit = recorded[-1][0]["commit_sha"]  # the benchmark ends with two runs of the slow commit
    for run, m in recorded:
        kernel = m.test.split("::test_")[-1]
        if kernel in series and not run["dirty"] and run["commit_sha"] != slow_commit:
            series[kernel].append(m)
    report_power(series)


if __name__ == "__main__":
    main()
