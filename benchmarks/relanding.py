"""The re-landing sequence (issue 36): a slowdown lands, is reverted, and lands again, on a
computing kernel, one pytest process per commit, the way main meets it.

The repository is benchmarks/_chain_repo.py's (a chain of float32 matmuls; the slow commits do
1.2x the matmuls while declaring the same FLOPs). Two ways to judge each commit:

- ``--mode history``: the gate alone. ``--aa-runs`` unchanged commits are run and recorded first
  (the baseline), then slow, revert and re-land, each run once and recorded. Expected verdicts:
  regressed / pass / regressed (pytest exits 1 / 0 / 1). Meant for a quiet machine.
- ``--mode ab``: ``solgate ab HEAD~1 --no-record`` at each of slow, revert and re-land. Expected:
  exit 1 / 0 / 1 (the revert reads ``improved``, which passes). With ``--load N``, N other
  processes spin on the cores throughout: a loaded machine.

    python benchmarks/relanding.py --mode history [--aa-runs 5] [--repeats 1]
    python benchmarks/relanding.py --mode ab --load 2 [--rounds 10] [--max-time 300] [--repeats 1]
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

from _chain_repo import make_repo, set_chain, solgate_ab  # noqa: E402
from _common import cpu_load, machine  # noqa: E402

SEQUENCE = (("slow", 12, 1), ("revert", 10, 0), ("re-land", 12, 1))  # step, matmuls, expected exit


def run_gate(repo: Path) -> tuple[int, str]:
    """One recorded pytest run of the checked-out commit: its exit status and the kernel's verdict."""
    out = repo / "run.json"
    done = subprocess.run([sys.executable, "-m", "pytest", f"--sol-json={out}"], cwd=repo, capture_output=True,
                          text=True)
    measurements = json.loads(out.read_text())["measurements"] if out.exists() else []
    said = "; ".join(f"{m['verdict']}: {m.get('reason', '')}" for m in measurements) or done.stdout[-300:]
    return done.returncode, said


def sequence(args: argparse.Namespace) -> bool:
    """One slow / revert / re-land sequence in a new repository; whether every step read as expected."""
    with tempfile.TemporaryDirectory(prefix="solgate-relanding-") as folder:
        repo = make_repo(Path(folder))
        if args.mode == "history":
            for i in range(args.aa_runs):
                set_chain(repo, 10, f"unchanged {i + 1}")
                code, said = run_gate(repo)
                print(f"  unchanged {i + 1}: exit {code}  {said}", flush=True)
        right = True
        for step, matmuls, expected in SEQUENCE:
            set_chain(repo, matmuls, step)
            code, said = run_gate(repo) if args.mode == "history" else solgate_ab(repo, "HEAD~1", args.rounds, args.max_time)
            right &= code == expected
            print(f"  {step}: exit {code} (expected {expected})  {said}", flush=True)
        return right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("history", "ab"), required=True)
    parser.add_argument("--aa-runs", type=int, default=5, help="history mode: unchanged runs before the slowdown")
    parser.add_argument("--rounds", type=int, default=10, help="ab mode: most A/B rounds per step")
    parser.add_argument("--max-time", type=float, default=300, help="ab mode: seconds of rounds per step")
    parser.add_argument("--load", type=int, default=0, help="other processes spinning on the cores throughout")
    parser.add_argument("--repeats", type=int, default=1, help="sequences, each in a new repository")
    args = parser.parse_args()
    print(f"machine: {machine()}; mode {args.mode}; {args.load} spinning process(es)")
    started = time.time()
    with cpu_load(args.load):
        right = 0
        for i in range(args.repeats):
            print(f"sequence {i + 1}:", flush=True)
            right += sequence(args)
    print(f"{right} of {args.repeats} sequence(s) read slow / revert / re-land as exit 1 / 0 / 1; "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
