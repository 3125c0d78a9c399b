"""The main job (README: ``python -m pytest kernels --sol-report``) on a fresh profile cache while a
neighbour keeps the cores busy, several times in a row, then once more with the machine quiet.

Each busy run starts from an empty ``$SOLGATE_CACHE_DIR``, so it calibrates first, beside the
neighbour (benchmarks/neighbour.py, started once for all the busy runs). Every run records into the
same history (a folder of this benchmark's own), as the main job run again and again on one commit
would. The quiet run reuses the last busy run's cache: the ceilings a busy calibration did not cache
are measured again, quiet, and cached.

Counts what issue 52 and issue 51 ask of it: failed tests (target 0 in every run: no honest kernel
above its ceiling, no false integrity finding: the checks are on by default), the highest SOL of
the run's measurements, how many were recorded as contended, and what the calibration said.

    python benchmarks/main_job_busy.py [--runs 5] [--cores 2] [--share 0.8] [--quiet 1] [--out DIR]

``--runs 0 --quiet 20`` is the A/A of issue 51: twenty main jobs on one commit, quiet, the first
calibrating; every failure's line is printed.

Prints a Markdown table (paste it into benchmarks/results/busy.md) and exits 0 when every run
passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*) in ([\d.]+)s", re.MULTILINE)


def pressure() -> str:
    """The CPU pressure the kernel reports ("some" avg10), or '?' where /proc has none."""
    try:
        return Path("/proc/pressure/cpu").read_text().split()[1].split("=")[1] + " %"
    except (OSError, IndexError):
        return "?"


def run_once(label: str, cache: Path, out: Path) -> dict[str, object]:
    """One main job; its exit status, summary, calibration's words and the measurements' figures."""
    report, results = out / f"{label}.html", out / f"{label}.json"
    env = {**os.environ, "SOLGATE_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "pytest", "kernels", f"--sol-report={report}", f"--sol-json={results}",
               "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    started, at_start = time.monotonic(), pressure()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    text = done.stdout + done.stderr
    (out / f"{label}.txt").write_text(text)
    summary = SUMMARY.search(text)
    calibration = [line.strip() for line in text.splitlines() if "ceilings were measured while the machine was busy" in line]
    measurements = json.loads(results.read_text())["measurements"] if results.exists() else []
    top = max(measurements, key=lambda m: m.get("sol") or 0, default=None)
    return {
        "label": label, "exit": done.returncode, "seconds": seconds, "pressure": at_start,
        "summary": summary.group(1) if summary else text.strip().splitlines()[-1:],
        "busy_calibration": bool(calibration),
        "max_sol": f"{top['sol']:.2f} ({top['test'].split('::')[-1]} [{top['name']}])" if top else "-",
        "contended": sum(1 for m in measurements if m.get("contended")), "measurements": len(measurements),
        "failures": [line for line in text.splitlines() if line.startswith("FAILED")],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="busy runs, each on an empty cache (default 5)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="neighbour processes (default: every core)")
    parser.add_argument("--share", type=float, default=0.8, help="the neighbour's share of each core (default 0.8)")
    parser.add_argument("--quiet", type=int, default=1, help="quiet runs after the busy ones (default 1; 0: none)")
    parser.add_argument("--out", type=Path, default=None, help="where the runs' outputs go (default: a new temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="main-job-busy-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; outputs in {out}", flush=True)

    rows = []
    if args.runs:
        neighbour = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "neighbour.py"), "--cores",
                                      str(args.cores), "--share", str(args.share), "--seconds", "7200"])
        try:
            time.sleep(5)  # the neighbour's pressure reaches /proc's 10-second average
            for i in range(1, args.runs + 1):
                rows.append(run_once(f"busy{i}", out / f"cache{i}", out))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            neighbour.terminate()
            neighbour.wait()
        time.sleep(15)  # the neighbour's pressure leaves /proc's average
    for i in range(1, args.quiet + 1):
        rows.append(run_once(f"quiet{i}", out / f"cache{args.runs}", out))
        print(json.dumps(rows[-1]), flush=True)

    print(f"\nneighbour: {args.cores} x {args.share:.0%}\n")
    print("| run | CPU pressure at start | calibration | result | wall | max SOL | contended |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['label']} | {row['pressure']} | {'busy (not cached)' if row['busy_calibration'] else 'cached or quiet'} "
              f"| {row['summary']} | {row['seconds']:.0f} s | {row['max_sol']} | {row['contended']} of {row['measurements']} |")
        for failure in row["failures"]:
            print(f"|  | | | `{failure}` | | | |")
    return 0 if all(row["exit"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
