"""The whole-step check on a GPU (issue 37, docs/steps.md): the transformer block's forward
(kernels/transformer_block.py, GPT-2-medium shapes in bf16) measured by ``sol.measure_step`` with
the kernels' own device timestamps, and the block with its LayerNorm in a Python loop.

Run on the GPU machine from the checkout (the project need not be installed; about 2 minutes):

    python benchmarks/step_check.py --out "$OUT"

It runs ``kernels/tests/test_step.py`` under pytest with the plugin registered from the checkout
(``-p no:solgate -p pytest_solgate.plugin``), in a scratch folder, and writes to --out:
step.txt (pytest's output: the SOL table and each step's top five), step.json (the solgate/1 JSON,
each step's whole breakdown in its "step" field), step-report.html, and $OUT/results.md (the section for
benchmarks/results/steps.md, ready to commit). A device script may call ``main([...])`` instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_SECONDS = 300


def run_pytest(out: Path, scratch: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONDONTWRITEBYTECODE": "1", "SOLGATE_STATE_DIR": str(scratch / "state")}
    command = [sys.executable, "-m", "pytest", str(ROOT / "kernels" / "tests" / "test_step.py"), "-p", "no:solgate",
               "-p", "pytest_solgate.plugin", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(ROOT),
               "--sol-device=cuda", "--sol-no-save", f"--sol-json={out / 'step.json'}",
               f"--sol-report={out / 'step-report.html'}"]
    return subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=LIMIT_SECONDS)


def summary(data: dict, machine: str) -> str:
    """The benchmarks/results/steps.md section: each step's headline figures and its ranking's top five."""
    lines = [f"## Whole steps on a GPU ({datetime.date.today():%Y-%m-%d})", "",
             f"Machine: {machine}. Command: `python benchmarks/step_check.py --out $OUT` "
             "(kernels/tests/test_step.py, GPT-2-medium block in bf16, kernel times from the device's timestamps).", ""]
    for m in data["measurements"]:
        step = m.get("step")
        if not step:
            continue
        lines += [f"### {m['name']}: {step['seconds'] * 1e3:.3f} ms per step, MFU {step['mfu']:.1%} "
                  f"({step['precision']}), idle {step['idle_share']:.1%}, T_SOL {step['t_sol'] * 1e3:.3f} ms, "
                  f"verdict {m['verdict']}", "",
                  "| # | operator | module | calls | time | SOL | lost |", "|---|---|---|---|---|---|---|"]
        for rank, op in enumerate(step["operators"][:5], 1):
            lines.append(f"| {rank} | {op['operator']} | {op['module'] or '-'} | {op['calls']} | "
                         f"{op['seconds'] * 1e6:.1f} us | {op['sol']:.3f} | {op['lost'] * 1e6:.1f} us |")
        lines += ["", f"lost + idle - overlap = step - T_SOL to {abs(step['identity_gap']):.2%} of the step "
                      f"(means over the faster {step.get('kept')} of {step['runs']} runs, mode {step['mode']})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="step-check-"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="step-check-") as scratch:
        done = run_pytest(out, Path(scratch))
    (out / "step.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    print(done.stdout[-6000:])
    if not (out / "step.json").exists():
        print(f"step_check: pytest wrote no JSON (exit {done.returncode}); see {out / 'step.txt'}", file=sys.stderr)
        return 1
    data = json.loads((out / "step.json").read_text())
    machine = f"{data['run'].get('device') or '?'}, driver {data['run'].get('driver') or '?'}, torch {data['run'].get('torch')}"
    (out / "results.md").write_text(summary(data, machine))
    print(f"step_check: pytest exit {done.returncode}; wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
