"""Does the operator gate catch a 2x slowdown of one of a step's top-5 operators, and does it cry wolf
on unchanged code? Measured as a user meets it: a real model's step, one pytest process per commit of
a git repository (issue 43 item 2).

A temporary repository holds a small model (a linear layer, a softmax, a LayerNorm, a GELU; one
torch thread) measured with ``sol.measure_step`` against a profile with high ceilings (only the
history is judged), and ``softmax.json``, whether the softmax reads its input through a transposed
view (the same values, column-major: about 2.0x slower on this VM, the same bytes, so its SOL halves;
the issue's regression). Then:

1. Power: ``--trials`` times, in a fresh repository, 5 clean commits, then one with the softmax
   doubled. A trial is caught when that run's softmax series is ``regressed`` (the test fails at
   that commit) and ``solgate history --changes`` names ``[net: aten::softmax in Net]`` at it.
2. A/A: ``--aa`` empty commits of the clean model, one run each; every ``regressed`` of any of the
   step's records is a false alarm.

A run the machine was busy in is marked contended and cannot fail as ``regressed`` (it reads
``ambiguous``, the drop beyond the floor, "run it alone"); on a shared 2-core VM nearly every run is.
``--blind-to-contention`` writes a conftest that hides the machine's load from the plugin (the
tests' seam, tests/test_steps.py FAKE_CONFTEST), so that what is measured is the gate's noise floor
against the drop; say so, with the load, beside any figure taken with it.

    python benchmarks/step_gate_power.py [--trials 5] [--aa 20] [--min-time 0.5] [--max-time 3] [--blind-to-contention]
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
TRANSPOSED = json.loads(pathlib.Path(__file__).with_name("softmax.json").read_text())["transposed"]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(256, 256)
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x):
        h = self.proj(x)
        # The same values, laid out column-major: the softmax reads them strided, about 2x slower
        # here (128x256 fp32, one thread), with the same bytes and FLOPs.
        s = torch.softmax(h.t().contiguous().t() if TRANSPOSED else h, dim=-1)
        return torch.nn.functional.gelu(self.norm(s + h))


NET, X = Net().eval(), torch.randn(128, 256)


def test_forward(sol):
    with torch.inference_mode():
        sol.measure_step(lambda: NET(X), name="net", top=5)
"""

SOFTMAX = "net: aten::softmax in Net"
BLIND = """
import pytest
from pytest_solgate.measure import extras

@pytest.fixture(autouse=True)
def _blind_to_contention(monkeypatch):
    monkeypatch.setattr(extras, "CPU_CLOCKS", (lambda: 0.0, lambda: 0.0))
"""


def make_repo(folder: Path, min_time: float, max_time: float, blind: bool = False) -> Path:
    repo = empty_repo(folder)
    (repo / "bench.toml").write_text(PROFILE)
    (repo / "pytest.ini").write_text(f"[pytest]\naddopts = -q -p no:randomly --sol-profile=bench.toml "
                                     f"--sol-min-time={min_time} --sol-max-time={max_time}\n")
    (repo / ".gitignore").write_text(".solgate/\n*.json.out\n")
    (repo / "test_step.py").write_text(MODEL)
    (repo / "softmax.json").write_text(json.dumps({"transposed": False}))
    if blind:
        (repo / "conftest.py").write_text(BLIND)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def commit_and_run(repo: Path, transposed: bool, message: str) -> tuple[str, dict[str, dict]]:
    (repo / "softmax.json").write_text(json.dumps({"transposed": transposed}))
    git(repo, "commit", "-q", "--allow-empty", "-am", message)
    sha = git(repo, "rev-parse", "HEAD")
    subprocess.run([sys.executable, "-m", "pytest", "--sol-json=run.json.out"], cwd=repo, capture_output=True, text=True)
    data = json.loads((repo / "run.json.out").read_text())
    return sha, {m["name"]: m for m in data["measurements"]}


def changes_name_softmax(repo: Path, sha: str) -> bool:
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "history", "--changes"], cwd=repo,
                          capture_output=True, text=True)
    return any(line.startswith(sha[:10]) and f"[{SOFTMAX}]" in line for line in done.stdout.splitlines())


def trial(folder: Path, min_time: float, max_time: float, blind: bool) -> dict:
    repo = make_repo(folder, min_time, max_time, blind)
    for i in range(5):
        commit_and_run(repo, False, f"clean {i}")
    sha, records = commit_and_run(repo, True, "softmax through a transposed view")
    softmax = records.get(SOFTMAX, {})
    named = changes_name_softmax(repo, sha)
    return {"verdict": softmax.get("verdict"), "reason": (softmax.get("reason") or "").splitlines()[:4],
            "named": named, "caught": softmax.get("verdict") == "regressed" and named}


def aa(folder: Path, runs: int, min_time: float, max_time: float, blind: bool) -> dict:
    repo = make_repo(folder, min_time, max_time, blind)
    verdicts: dict[str, list[str]] = {}
    for i in range(runs):
        _, records = commit_and_run(repo, False, f"unchanged {i}")
        for name, m in records.items():
            verdicts.setdefault(name, []).append(m.get("verdict") or "")
    false = {name: v.count("regressed") for name, v in verdicts.items() if "regressed" in v}
    return {"runs": runs, "records": sum(len(v) for v in verdicts.values()), "false_regressed": false,
            "verdicts": {name: {k: v.count(k) for k in set(v)} for name, v in verdicts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
            result = trial(Path(folder), args.min_time, args.max_time, args.blind_to_contention)
        caught += bool(result["caught"])
        print(f"trial {index + 1}: {json.dumps(result)}", flush=True)
    print(f"2x softmax caught at its commit and named by --changes: {caught} of {args.trials}", flush=True)
    if args.aa:
        with tempfile.TemporaryDirectory() as folder:
            result = aa(Path(folder), args.aa, args.min_time, args.max_time, args.blind_to_contention)
        print(f"A/A: {json.dumps(result)}", flush=True)
    print(f"load {os.getloadavg()[0]:.1f} at the end; {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
