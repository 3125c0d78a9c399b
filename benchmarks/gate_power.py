"""How often the regression gate cries wolf on unchanged code, and what it catches, measured the
way a user meets it: real kernels, one pytest process per commit of a git repository.

A temporary repository holds four torch CPU kernels (add, mm, softmax, copy; one torch thread;
working sets larger than the last-level cache) and a profile with high ceilings, so that only the
baseline is judged. Then:

1. A/A: ``--runs`` empty commits, one ``pytest`` run each. Every ``regressed`` is a false alarm
   (target: at most 1 in 80 measurements, 20 runs x 4 kernels).
2. A real slowdown: a commit that makes ``add`` do ``--slowdown`` times the work while declaring
   the same bytes, run twice (target: ``regressed`` in 2 of 2 runs, the other kernels not).
3. Power: the A/A run-level values replayed through the gate's own judge (judge.against_window),
   each run in turn against the window of the runs before it, divided by 1 + d for a slowdown d;
   the smallest d caught in 95 % of replays is reported.

    python benchmarks/gate_power.py [--runs 20] [--slowdown 1.4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402
from pytest_solgate import judge, results  # noqa: E402
from pytest_solgate.results import Measurement  # noqa: E402

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
    sol.measure(lambda: torch.mm(a, b, out=out), bytes=sol.nbytes(a, b, out), flops=2 * 1024**3)


def test_softmax(sol):
    x = torch.rand(2048, 4096)  # 32 MiB in, 32 MiB out
    out = torch.empty_like(x)
    sol.measure(lambda: torch.softmax(x, dim=-1, out=out), bytes=sol.nbytes(x, out), flops=5 * x.numel())


def test_copy(sol):
    src, dst = torch.rand(1 << 24), torch.empty(1 << 24)  # 64 MiB each
    sol.measure(lambda: dst.copy_(src), bytes=sol.nbytes(src, dst))
'''


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

    def run(self) -> tuple[dict[str, dict], float]:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sol-device=cpu",
             "--sol-profile=bench.toml", "--sol-json=run.json"],
            cwd=self.path, capture_output=True, text=True,
        )
        seconds = time.perf_counter() - started
        if not (self.path / "run.json").exists():
            sys.exit(f"pytest wrote no results:\n{done.stdout}\n{done.stderr}")
        data = json.loads((self.path / "run.json").read_text())
        (self.path / "run.json").unlink()
        return {m["test"].split("::test_")[-1]: m for m in data["measurements"]}, seconds


def replay_power(values: dict[str, list[Measurement]], slowdown: float, window: int, first: int) -> tuple[int, int]:
    """(caught, tried): each run from index ``first`` on, slowed by ``slowdown``, against the
    window of (up to ``window``) runs before it."""
    settings = judge.JudgeSettings()
    caught = tried = 0
    for series in values.values():
        for i in range(first, len(series)):
            runs = tuple(
                judge.BaselineRun(commit=f"c{j}", run_id=f"r{j}", sol=m.score.sol, seconds=m.timing.seconds,
                                  noise=m.timing.noise)
                for j, m in reversed(list(enumerate(series[max(0, i - window):i])))
            )
            head = series[i]
            slowed = Measurement.from_dict({**head.to_dict(), "sol": head.score.sol / (1 + slowdown),
                                            "seconds": head.timing.seconds * (1 + slowdown)})
            verdict = judge.against_window(slowed, judge.BaselineWindow(runs=runs), 0.05, settings).verdict
            caught += verdict == results.REGRESSED
            tried += 1
    return caught, tried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="A/A runs, one commit each (default 20)")
    parser.add_argument("--slowdown", type=float, default=1.4, help="work factor of the slow commit (default 1.4)")
    parser.add_argument("--replay-history", type=Path, help="only replay the A/A runs of an earlier benchmark's history")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error(f"--runs={args.runs}: give at least 2 A/A runs (a window needs runs before the one judged)")
    if args.replay_history:
        replay_history(args.replay_history)
        return
    repo = Repo(Path(tempfile.mkdtemp(prefix="gate-power-")))
    print(f"machine: {machine()}")
    print(f"repository: {repo.path}; {args.runs} A/A runs, then add x{args.slowdown} twice; default timing settings")

    series: dict[str, list[Measurement]] = {k: [] for k in KERNELS}
    verdicts: list[str] = []
    for i in range(args.runs):
        repo.commit(f"A/A {i}")
        measured, seconds = repo.run()
        for kernel in KERNELS:
            m = measured[kernel]
            series[kernel].append(Measurement.from_dict({**m, "noise": m["noise"] if m["noise"] is not None else float("inf")}))
            verdicts.append(m["verdict"])
        row = "  ".join(f"{k} {measured[k]['sol']:.4f} {measured[k]['verdict']:<9}" for k in KERNELS)
        print(f"run {i + 1:>2} ({seconds:4.1f} s)  {row}", flush=True)
    counts = {v: verdicts.count(v) for v in sorted(set(verdicts))}
    false_alarms = verdicts.count(results.REGRESSED)
    print(f"A/A: {false_alarms} false 'regressed' in {len(verdicts)} measurements (target <= 1); verdicts {counts}")
    for kernel in KERNELS:
        sols = [m.score.sol for m in series[kernel]]
        spread = (max(sols) - min(sols)) / (sum(sols) / len(sols))
        print(f"  {kernel:<8} run-to-run range {spread:6.1%} of the mean over {len(sols)} runs")

    repo.commit("add does more work", slow={"add": args.slowdown})
    caught = 0
    for attempt in range(2):
        measured, _ = repo.run()
        add = measured["add"]
        caught += add["verdict"] == results.REGRESSED
        others = {k: measured[k]["verdict"] for k in KERNELS if k != "add"}
        print(f"slow commit, run {attempt + 1}: add {add['verdict']} ({add['reason'][:160]}...); others {others}")
    print(f"a {args.slowdown - 1:.0%} slowdown of add caught in {caught} of 2 runs at its commit (target 2 of 2)")

    report_power(series)


def report_power(series: dict[str, list[Measurement]]) -> None:
    print("power by replay (A/A run values slowed by d, against the window of the runs before; first block only):")
    for first, label in ((2, "every run with a window of 2 or more"), (5, "runs with a window of 5 or more")):
        smallest = None
        print(f"  {label}:")
        if replay_power(series, 0.0, 10, first)[1] == 0:
            print(f"    none: too few A/A runs (give --runs {first + 1} or more)")
            continue
        for slowdown in (0.10, 0.20, 0.30, 0.40, 0.50, 0.60, 0.80, 1.00, 1.50):
            got, tried = replay_power(series, slowdown, 10, first)
            print(f"    d = {slowdown:4.0%}: regressed in {got}/{tried} ({got / tried:.0%})")
            if smallest is None and got / tried >= 0.95:
                smallest = slowdown
        print(f"    smallest slowdown caught at 95 % power: {f'{smallest:.0%}' if smallest is not None else 'none up to 150%'}")


def replay_history(path: Path) -> None:
    """The power replay alone, over the A/A runs that an earlier benchmark left in its history."""
    from pytest_solgate.history import SqliteStore

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
