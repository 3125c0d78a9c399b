"""Does the operator gate catch a slowdown of one of a step's top-5 operators, and does it cry wolf
on unchanged code? Measured as a user meets it: a real model's step, one pytest process per commit of
a git repository (issue 43 item 2).

A temporary repository holds a small model (a linear layer, a softmax, a LayerNorm, a GELU; one
torch thread) measured with ``sol.measure_step`` against a profile with high ceilings (only the
history is judged), and ``softmax.json``, how many passes its softmax makes. The softmax is an
operator of the model's own (``bench::softmax``, a torch custom op: what a user's fused kernel is to
the profiler) that makes 5 passes over its input; the slow commit makes ``--slowdown`` x 5 (6 for
1.2x, 10 for 2x): the same result and the same bytes, the same calls more often. Then:

1. Power: ``--trials`` times, in a fresh repository, 5 clean commits, then one with the softmax
   slowed down. A trial is caught when that run's softmax series is ``regressed`` (the test fails
   at that commit) and ``solgate history --changes`` names ``[net: bench::softmax in Net]`` at it.
2. A/A: ``--aa`` empty commits of the clean model, one run each; every ``regressed`` of any of the
   step's records is a false alarm.

A run the machine was busy in is marked contended and cannot fail as ``regressed`` (it reads
``ambiguous``, the drop beyond the floor, "run it alone"); on a shared 2-core VM nearly every run is.
``--blind-to-contention`` points the runs at an idle machine's /proc (the tests' plugin,
tests/idle_machine.py, and its ``SOLGATE_TEST_PROC_ROOT``), so that what is measured is the gate's noise floor against the drop;
say so, with the load, beside any figure taken with it.

    python benchmarks/step_gate_power.py [--slowdown 2] [--trials 5] [--aa 20] [--min-time 0.5] [--max-time 3]
                                         [--blind-to-contention]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _chain_repo import empty_repo, git

PROFILE = """
id = "step-bench"
name = "High ceilings: only the history is judged"
kind = "cpu"
memory_bandwidth_gbps = 1000
ceilings = "measured"
source = "benchmarks/step_gate_power.py"

[peak_tflops]
fp32 = 100
"""

MODEL = """
import json, pathlib

import pytest
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
PASSES = json.loads(pathlib.Path(__file__).with_name("softmax.json").read_text())["passes"]


@torch.library.custom_op("bench::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    # A kernel of the user's that makes PASSES passes over its input (5 clean): the slow commit's
    # extra passes are the same calls, so its time grows by their ratio, the profiler's overhead too.
    for _ in range(PASSES):
        out = torch.softmax(x, dim=-1)
    return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(256, 256)
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x):
        h = self.proj(x)
        s = softmax(h)
        return torch.nn.functional.gelu(self.norm(s + h))


NET, X = Net().eval(), torch.randn(128, 256)


def test_forward(sol):
    with torch.inference_mode():
        sol.measure_step(lambda: NET(X), name="net", top=5)
"""

SOFTMAX = "net: bench::softmax in Net"
CLEAN_PASSES = 5
IDLE_PRESSURE = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n"


def make_repo(folder: Path, min_time: float, max_time: float, blind: bool = False) -> Path:
    repo = empty_repo(folder)
    (repo / "bench.toml").write_text(PROFILE)
    (repo / "pytest.ini").write_text(f"[pytest]\naddopts = -q -p no:randomly --sol-profile=bench.toml "
                                     f"--sol-min-time={min_time} --sol-max-time={max_time}\n")
    (repo / ".gitignore").write_text(".solgate/\n*.json.out\n")
    (repo / "test_step.py").write_text(MODEL)
    (repo / "softmax.json").write_text(json.dumps({"passes": CLEAN_PASSES}))
    if blind:  # an idle machine's /proc, read instead of this one's
        (folder / "idle-proc" / "pressure").mkdir(parents=True)
        (folder / "idle-proc" / "pressure" / "cpu").write_text(IDLE_PRESSURE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def idle_machine_env(idle: Path) -> dict[str, str]:
    """The environment that loads the tests' plugin (tests/idle_machine.py) reading ``idle`` as /proc."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    return {"SOLGATE_TEST_PROC_ROOT": str(idle), "PYTEST_PLUGINS": "idle_machine",
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), tests) if p)}


def commit_and_run(repo: Path, passes: int, message: str) -> tuple[str, dict[str, dict]]:
    (repo / "softmax.json").write_text(json.dumps({"passes": passes}))
    git(repo, "commit", "-q", "--allow-empty", "-am", message)
    sha = git(repo, "rev-parse", "HEAD")
    idle = repo.parent / "idle-proc"
    env = {**os.environ, **(idle_machine_env(idle) if idle.is_dir() else {})}
    subprocess.run([sys.executable, "-m", "pytest", "--sol-json=run.json.out"], cwd=repo, capture_output=True, text=True,
                   env=env)
    data = json.loads((repo / "run.json.out").read_text())
    return sha, {m["name"]: m for m in data["measurements"]}


def changes_name_softmax(repo: Path, sha: str) -> bool:
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "history", "--changes"], cwd=repo,
                          capture_output=True, text=True)
    return any(line.startswith(sha[:10]) and f"[{SOFTMAX}]" in line for line in done.stdout.splitlines())


def trial(folder: Path, slowdown: float, min_time: float, max_time: float, blind: bool) -> dict:
    repo = make_repo(folder, min_time, max_time, blind)
    clean = [commit_and_run(repo, CLEAN_PASSES, f"clean {i}")[1].get(SOFTMAX, {}).get("seconds", 0.0) for i in range(5)]
    sha, records = commit_and_run(repo, round(CLEAN_PASSES * slowdown), f"softmax {slowdown}x its passes")
    softmax = records.get(SOFTMAX, {})
    named = changes_name_softmax(repo, sha)
    clean.sort()
    return {"verdict": softmax.get("verdict"), "reason": (softmax.get("reason") or "").splitlines()[:4],
            "slower": round(softmax.get("seconds", 0.0) / clean[len(clean) // 2], 3) if clean[0] else None,
            "named": named, "caught": softmax.get("verdict") == "regressed" and named}


def aa(folder: Path, runs: int, min_time: float, max_time: float, blind: bool) -> dict:
    repo = make_repo(folder, min_time, max_time, blind)
    verdicts: dict[str, list[str]] = {}
    for i in range(runs):
        _, records = commit_and_run(repo, CLEAN_PASSES, f"unchanged {i}")
        for name, m in records.items():
            verdicts.setdefault(name, []).append(m.get("verdict") or "")
    false = {name: v.count("regressed") for name, v in verdicts.items() if "regressed" in v}
    return {"runs": runs, "records": sum(len(v) for v in verdicts.values()), "false_regressed": false,
            "verdicts": {name: {k: v.count(k) for k in set(v)} for name, v in verdicts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slowdown", type=float, default=2.0, help="the slow commit's softmax work, x the clean one's")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--aa", type=int, default=20)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--max-time", type=float, default=3.0)
    parser.add_argument("--blind-to-contention", action="store_true")
    args = parser.parse_args()
    started = time.time()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start", flush=True)
    caught = 0
    for index in range(args.trials):
        with tempfile.TemporaryDirectory() as folder:
            result = trial(Path(folder), args.slowdown, args.min_time, args.max_time, args.blind_to_contention)
        caught += bool(result["caught"])
        print(f"trial {index + 1}: {json.dumps(result)}", flush=True)
    print(f"{args.slowdown}x softmax caught at its commit and named by --changes: {caught} of {args.trials}", flush=True)
    if args.aa:
        with tempfile.TemporaryDirectory() as folder:
            result = aa(Path(folder), args.aa, args.min_time, args.max_time, args.blind_to_contention)
        print(f"A/A: {json.dumps(result)}", flush=True)
    print(f"load {os.getloadavg()[0]:.1f} at the end; {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
