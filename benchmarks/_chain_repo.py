"""Shared by benchmarks/ab_power.py and benchmarks/relanding.py: a temporary git repository with one
compute-bound CPU kernel (a chain of float32 192x192 matmuls, one torch thread) whose length is
set by chain.json, so that a commit can make it slower while declaring the same FLOPs, and a
profile with high ceilings (only the history or the A/B is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROFILE = """
id = "ab-bench"
name = "High ceilings: only the A/B is judged"
kind = "cpu"
memory_bandwidth_gbps = 1000
ceilings = "measured"
source = "benchmarks/ab_power.py"

[peak_tflops]
fp32 = 100
"""

KERNEL = """
import json, pathlib

import pytest
import torch

torch.set_num_threads(1)
CHAIN = json.loads(pathlib.Path(__file__).with_name("chain.json").read_text())["matmuls"]
N = 192


@pytest.mark.sol(max_regression=0.05)
def test_matmul_chain(sol):
    a, b = torch.rand(N, N), torch.rand(N, N)
    out = torch.empty(N, N)

    def chain():
        for _ in range(CHAIN):
            torch.mm(a, b, out=out)

    sol.measure(chain, flops={"fp32": 2 * N**3 * 10})
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def empty_repo(folder: Path) -> Path:
    """A new git repository ``folder/project`` on branch main, with a committer set."""
    repo = folder / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    return repo


def make_repo(folder: Path) -> Path:
    repo = empty_repo(folder)
    (repo / "bench.toml").write_text(PROFILE)
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -q --sol-profile=bench.toml --sol-min-time=0.5\n")
    (repo / ".gitignore").write_text(".solgate/\n")
    (repo / "test_chain.py").write_text(KERNEL)
    (repo / "chain.json").write_text(json.dumps({"matmuls": 10}))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def set_chain(repo: Path, matmuls: int, message: str) -> str:
    """Commit a chain of ``matmuls`` on the checked-out commit (empty when unchanged); its sha."""
    (repo / "chain.json").write_text(json.dumps({"matmuls": matmuls}))
    git(repo, "commit", "-q", "--allow-empty", "-am", message)
    return git(repo, "rev-parse", "HEAD")


def solgate_ab(repo: Path, base: str, rounds: int, max_time: float) -> tuple[int, str]:
    """``solgate ab BASE --no-record`` in ``repo``: its exit status and the kernel's row (without
    the test id), or the end of its error."""
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "ab", base, "--no-record", "--rounds",
                           str(rounds), "--max-time", str(max_time)], cwd=repo, capture_output=True, text=True)
    row = next((line for line in done.stdout.splitlines() if "test_matmul_chain" in line), done.stderr.strip()[-300:])
    return done.returncode, " ".join(row.split()[1:])
