"""The history gate on a machine that is always busy, measured the way a user meets it: one pytest
process per commit of a temporary git repository (benchmarks/gate_power.py's four one-thread torch
CPU kernels and high ceilings: only the history judges), each run followed by the action's
``solgate check`` on its --sol-json (in CI an ``ambiguous`` slowdown the gate could not judge is no
pass), while benchmarks/neighbour.py keeps the cores busy for the whole benchmark.

1. Unchanged code: ``--runs`` runs, each its own empty commit (target: at least 19 of 20 pass).
2. A 1.3x slowdown (every kernel does 1.3 times the work, declaring the same bytes): up to
   ``--slow-runs`` runs of that commit, stopping at the first that fails (target: within 3 runs);
   then ``solgate ab HEAD~1`` at that commit, timed (target: ``regressed`` in under 5 minutes,
   its ``--max-time`` is ``--ab-max-time``).
3. A 3x slowdown, on the unchanged code's tip again: ``--slow-runs`` runs, none may pass.

A run *passes* when pytest exits 0 and ``solgate check`` exits 0, as the action's step does.
With ``--quiet`` no neighbour is started: the same steps on the machine as it is.

    python benchmarks/busy_gate.py [--runs 20] [--slow-runs 3] [--cores 2] [--share 0.8] [--quiet]
    python benchmarks/busy_gate.py --replay /tmp/busy-gate-XXXX/.solgate/history.db [--runs 20]

Prints each run as it ends, then a Markdown table (machine, command, date, CPU pressure) for
benchmarks/results/busy.md; exits 0 when every target held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gate_power import KERNELS, Repo  # noqa: E402
from main_job_busy import pressure  # noqa: E402

from _common import machine  # noqa: E402
from pytest_solgate.measure.locking import LOCK_DIR_VARIABLE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = ("--sol-device=cpu", "--sol-profile=bench.toml")  # what gate_power.Repo's runs pass pytest


@dataclass(frozen=True)
class GateRun:
    """One run as the action's step meets it: pytest, then ``solgate check`` on its results."""

    label: str
    pytest_exit: int
    check_exit: int | None  # None: not run (pytest already failed, as the action skips it)
    verdicts: str  # each kernel's verdict, its change, and * where the run was contended
    pressure: str  # /proc/pressure/cpu "some" avg10 at the run's start
    seconds: float
    reason: str  # the first line that says why the run failed, else ""

    @property
    def passed(self) -> bool:
        return self.pytest_exit == 0 and self.check_exit == 0


def verdict_of(m: dict) -> str:
    """A kernel's verdict in one run: the verdict, its change against the window, * when contended,
    ``w`` when timed on wall time (not its thread's CPU clock)."""
    change = (m.get("baseline") or {}).get("change")
    return (f"{m['verdict']}{f' {change:+.0%}' if change is not None else ''}{'*' if m.get('contended') else ''}"
            f"{'w' if m.get('timing_mode') == 'perf-counter' else ''}")


def gate_run(repo: Repo, label: str) -> GateRun:
    at_start = pressure()
    done, data, seconds = repo.pytest()
    check = None
    if done.returncode == 0:
        checked = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "check", "run.json"], cwd=repo.path,
                                 capture_output=True, text=True)
        check, said = checked.returncode, checked.stdout + checked.stderr
    else:
        said = done.stdout
    (repo.path / "run.json").unlink()
    by_kernel = {m["test"].split("::test_")[-1]: m for m in data["measurements"] if m["name"] == "default"}
    reason = next((line.strip() for line in said.splitlines()  # pytest's failure, else the check's first line
                   if line.startswith(("FAILED", "E ", "solgate", "test_kernels.py::"))), "")
    run = GateRun(label, done.returncode, check, ", ".join(f"{k} {verdict_of(by_kernel[k])}" for k in KERNELS),
                  at_start, seconds, reason if check != 0 else "")
    print(f"{label}: {'pass' if run.passed else 'FAIL'} (pytest {done.returncode}, check {check}) "
          f"pressure {at_start}, {seconds:.0f} s; {run.verdicts}" + (f"; {run.reason[:200]}" if run.reason else ""),
          flush=True)
    return run


def ab_against_parent(repo: Repo, max_time: float) -> tuple[int, float, list[str]]:
    """``solgate ab HEAD~1`` at the checked-out commit: its exit status, wall time and kernel rows."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "ab", "HEAD~1", "--no-record", "--max-time",
                           str(max_time), "--", *OPTIONS], cwd=repo.path, capture_output=True, text=True)
    seconds = time.monotonic() - started
    rows = [" ".join(line.split()) for line in done.stdout.splitlines() if "test_kernels.py::" in line]
    print(f"ab HEAD~1: exit {done.returncode} in {seconds:.0f} s", *rows, sep="\n  ", flush=True)
    return done.returncode, seconds, rows or [done.stderr.strip()[-300:]]


def measure(repo: Repo, args: argparse.Namespace) -> tuple[list[GateRun], tuple[int, float, list[str]] | None]:
    runs: list[GateRun] = []
    for i in range(1, args.runs + 1):
        repo.commit(f"unchanged {i}")
        runs.append(gate_run(repo, f"unchanged {i}"))
    tip = repo.git("rev-parse", "HEAD")
    repo.commit("every kernel x1.3", slow={k: 1.3 for k in KERNELS})
    for i in range(1, args.slow_runs + 1):
        runs.append(gate_run(repo, f"x1.3 run {i}"))
        if not runs[-1].passed:
            break
    ab = ab_against_parent(repo, args.ab_max_time) if args.ab_max_time > 0 else None
    repo.git("reset", "-q", "--hard", tip)  # the 3x slowdown is a change of the unchanged code, not of the 1.3x
    repo.commit("every kernel x3", slow={k: 3.0 for k in KERNELS})
    for i in range(1, args.slow_runs + 1):
        runs.append(gate_run(repo, f"x3 run {i}"))
    return runs, ab


def targets(runs: list[GateRun], ab: tuple[int, float, list[str]] | None, args: argparse.Namespace) -> list[str]:
    """Each done-when target, held or not, in words."""
    unchanged = [r for r in runs if r.label.startswith("unchanged")]
    slow = [r for r in runs if r.label.startswith("x1.3")]
    caught_at = next((i for i, r in enumerate(slow, 1) if not r.passed), None)
    passed = sum(r.passed for r in unchanged)
    lines = [
        f"unchanged code: {passed} of {len(unchanged)} runs pass (target: at least {len(unchanged) - len(unchanged) // 20})",
        f"x1.3: first fails at run {caught_at} (target: within 3)" if caught_at else f"x1.3: passed all {len(slow)} runs",
        f"x3: {sum(r.passed for r in runs if r.label.startswith('x3'))} of {args.slow_runs} runs pass (target: 0)",
    ]
    if ab:
        lines.append(f"solgate ab HEAD~1 at the x1.3 commit: exit {ab[0]} in {ab[1]:.0f} s (target: exit 1, regressed, "
                     "in under 300 s)")
    return lines


def held(runs: list[GateRun], ab: tuple[int, float, list[str]] | None) -> bool:
    unchanged = [r for r in runs if r.label.startswith("unchanged")]
    slow = [r for r in runs if r.label.startswith("x1.3")]
    return (sum(not r.passed for r in unchanged) <= len(unchanged) // 20
            and (any(not r.passed for r in slow) or (ab is not None and ab[0] == 1 and ab[1] < 300))
            and not any(r.passed for r in runs if r.label.startswith("x3")))


def table(runs: list[GateRun], ab: tuple[int, float, list[str]] | None, args: argparse.Namespace) -> None:
    print(f"\nMachine: {machine()}, {os.cpu_count()} cores. Date: {args.started:%Y-%m-%d %H:%M}-"
          f"{datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC. Neighbour: "
          + ("none (--quiet)" if args.quiet else f"benchmarks/neighbour.py --cores {args.cores} --share {args.share}"))
    print(f"Command: `python benchmarks/busy_gate.py {' '.join(sys.argv[1:])}`\n")
    print("| run | CPU pressure at start | pytest | solgate check | gate | wall | verdicts (* contended, w wall time) | why it failed |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        why = r.reason.replace("|", "\\|")[:160]
        print(f"| {r.label} | {r.pressure} | {r.pytest_exit} | {'-' if r.check_exit is None else r.check_exit} "
              f"| {'pass' if r.passed else '**fail**'} | {r.seconds:.0f} s | {r.verdicts} | {why} |")
    if ab:
        for row in ab[2]:
            print(f"| ab HEAD~1 (x1.3) | | | | exit {ab[0]} | {ab[1]:.0f} s | {row.replace('|', '/')} | |")
    print()
    for line in targets(runs, ab, args):
        print(f"- {line}")


def replay(history: Path, unchanged: int) -> None:
    """Each recorded run judged again by this checkout's gate, without re-measuring, against the
    window the plugin would choose from the unchanged runs recorded before it (the first
    ``unchanged`` commits; the slow commits' runs each against all of them): how a rule changed
    since a benchmark reads on that benchmark's own measurements."""
    from pytest_solgate.judge import level, verdict
    from pytest_solgate.judge.budget import Budget
    from pytest_solgate.judge.window import JudgeSettings
    from pytest_solgate.record.sqlite import SqliteStore
    from pytest_solgate.record.store import baseline_run

    with SqliteStore(history, create=False) as store:
        recorded = store.results()
    order = list(dict.fromkeys(run["commit_sha"] for run, _ in recorded))
    labels = {c: f"unchanged {i + 1}" if i < unchanged else ("x1.3", "x3")[min(i - unchanged, 1)] for i, c in enumerate(order)}
    base: dict[str, list] = {k: [] for k in KERNELS}  # each kernel's unchanged runs so far, oldest first
    print(f"replay of {history} by this checkout's gate\n\n| run | {' | '.join(KERNELS)} |\n|---|{'---|' * len(KERNELS)}")
    rows: dict[str, dict[str, str]] = {}
    for run, m in recorded:
        kernel, label = m.test.split("::test_")[-1], labels[run["commit_sha"]]
        before = [b for b in reversed(base[kernel]) if b.commit != run["commit_sha"]]  # nearest first
        window = level.window(before, list(dict.fromkeys(b.commit for b in before)), [], 10, m.environment)
        judged = verdict.judge(m, Budget(), window, JudgeSettings())
        floor = judged.judgement.baseline.noise_floor if judged.judgement and judged.judgement.baseline else None
        change = judged.judgement.baseline.change if judged.judgement and judged.judgement.baseline else None
        rows.setdefault(f"{label} ({run['run_uid'][:6]})", {})[kernel] = (
            f"{judged.verdict.value}" + (f" {change:+.0%}" if change is not None else "")
            + (f" (floor {floor:.0%})" if floor is not None else ""))
        if label.startswith("unchanged"):
            base[kernel].append(baseline_run(run, m))
    for label, by_kernel in rows.items():
        print(f"| {label} | {' | '.join(by_kernel.get(k, '-') for k in KERNELS)} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of unchanged code, each its own commit (default 20)")
    parser.add_argument("--slow-runs", type=int, default=3, help="runs of each slow commit (default 3)")
    parser.add_argument("--ab-max-time", type=float, default=280,
                        help="solgate ab's --max-time at the x1.3 commit; 0 skips it (default 280: it must judge in 5 minutes)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="neighbour processes (default: every core)")
    parser.add_argument("--share", type=float, default=0.8, help="the neighbour's share of each core (default 0.8)")
    parser.add_argument("--quiet", action="store_true", help="no neighbour: the machine as it is")
    parser.add_argument("--replay", type=Path, help="only judge again the runs of an earlier benchmark's history "
                        "(its .solgate/history.db) by this checkout's gate; --runs says how many were unchanged")
    args = parser.parse_args(argv)
    if args.replay:
        replay(args.replay, args.runs)
        return 0
    if args.runs < 2 or args.slow_runs < 1:
        parser.error("give --runs 2 or more (a window needs runs) and --slow-runs 1 or more")
    args.started = datetime.datetime.now(datetime.timezone.utc)
    repo = Repo(Path(tempfile.mkdtemp(prefix="busy-gate-")))
    # The device lock of its own: a solgate session of another checkout on this machine (another
    # benchmark) is one more busy neighbour here, not a lock this benchmark's runs wait for.
    os.environ[LOCK_DIR_VARIABLE] = str(repo.path.parent / f"{repo.path.name}-locks")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # a kill stops the neighbour too
    repo.commit("four kernels")
    print(f"machine: {machine()}; repository {repo.path}", flush=True)
    neighbour = None if args.quiet else subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "neighbour.py"), "--cores", str(args.cores), "--share",
         str(args.share), "--seconds", "7200"])
    try:
        if neighbour:
            time.sleep(5)  # the neighbour's pressure reaches /proc's 10-second average
        runs, ab = measure(repo, args)
    finally:
        if neighbour:
            neighbour.terminate()
            neighbour.wait()
    table(runs, ab, args)
    return 0 if held(runs, ab) else 1


if __name__ == "__main__":
    sys.exit(main())
