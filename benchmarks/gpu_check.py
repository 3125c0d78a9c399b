"""The GPU checks, in one script for a session that has a GPU for a few minutes.

Each step runs under its own time limit inside one overall budget (7.5 minutes, so that one
10-minute device command holds the whole script), is guarded (a failing step is reported and the
next one runs) and is printed as soon as it finishes:

1. do_bench: the plugin's median next to `triton.testing.do_bench` on the same inputs, for the
   Triton kernels at the suite's GPU shapes (target: within 3 %);
2. calibrate: `solgate calibrate` (measured ceilings, cached under .solgate/);
3. sol-datasheet: the kernel SOL tests (`kernels/tests/test_sol.py`) against datasheet ceilings;
4. sol-measured: the same tests against the measured ceilings;
5. correctness: `kernels/tests/test_correctness.py`, once;
6. gpu-paths: the plugin's GPU-path tests (`tests/test_gpu_paths.py`) on the real device.

Ahead-of-time compiles (`kernels/tests/test_compile.py`) need no GPU and are left out. At the end
a table: kernel, shape, median, achieved, SOL, torch's SOL, do_bench median and the ratio.

    python benchmarks/gpu_check.py [--out DIR] [--dry-run]

`--dry-run` walks every step on a CPU machine in well under a minute: do_bench against a stand-in
timer on CPU tensors, and each pytest or solgate step with `--collect-only` or `--help`, so that a
broken command line is found before a GPU is lent. It installs nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUDGET_SECONDS = 450
# Triton kernels also timed by do_bench, at the suite's GPU shapes (see inputs()).
DO_BENCH_KERNELS = ("vector_add", "softmax", "layernorm")


class Clock:
    """The overall budget: each step gets at most its own limit and what is left."""

    def __init__(self, budget: float) -> None:
        self.deadline = time.monotonic() + budget

    def limit(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.deadline - time.monotonic()))


def step(label: str, action: Callable[[], str]) -> dict[str, Any]:
    """Run one guarded step and print its line as soon as it ends."""
    started = time.perf_counter()
    try:
        detail, ok = action(), True
    except Exception as exc:  # a failing step must not lose the others
        detail, ok = f"{type(exc).__name__}: {exc}", False
    seconds = time.perf_counter() - started
    print(f"{label:<14} {'ok' if ok else 'FAILED':<7} {seconds:6.1f} s  {detail}", flush=True)
    return {"step": label, "ok": ok, "seconds": seconds, "detail": detail}


def command(label: str, args: list[str], out: Path, limit: Callable[[], float]) -> Callable[[], str]:
    """A subprocess step; its time limit is taken when it starts, from what the budget has left."""

    def run() -> str:
        timeout = limit()
        log = out / f"{label}.log"
        try:
            done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            log.write_text(f"timed out after {timeout:.0f} s\n{exc.stdout or ''}")
            raise TimeoutError(f"timed out after {timeout:.0f} s (log {log})") from None
        log.write_text(done.stdout + done.stderr)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        if done.returncode not in (0, 5):
            raise RuntimeError(f"exit {done.returncode}: {last} (log {log})")
        return f"{last} (log {log})"

    return run


def inputs(torch: Any, kernel: str, device: str, dry: bool) -> tuple[str, Callable[[], Any]]:
    """The suite's GPU shapes (small ones in a dry run) and a zero-argument call of the kernel."""
    from kernels import layernorm, softmax, vector_add

    if kernel == "vector_add":
        n = (1 << 14) if dry else (1 << 28)
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        out = torch.empty_like(x)
        return f"{n}", lambda: vector_add.add(x, y, out)
    rows, cols = (64, 128) if dry else (32768, 4096)
    x = torch.randn(rows, cols, device=device)
    out = torch.empty_like(x)
    if kernel == "softmax":
        return f"{rows}x{cols}", lambda: softmax.softmax(x, out)
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    return f"{rows}x{cols}", lambda: layernorm.layernorm(x, w, b, out=out)


def do_bench_comparison(out: Path, dry: bool) -> str:
    import torch

    from pytest_solgate.engine import Engine
    from pytest_solgate.settings import parse_settings

    if dry:
        def do_bench(fn: Callable[[], Any], return_mode: str = "median") -> float:  # stand-in, in ms
            fn()
            started = time.perf_counter()
            for _ in range(3):
                fn()
            return (time.perf_counter() - started) / 3 * 1e3

        settings = parse_settings({"sol_device": "cpu", "sol_min_time": "0", "sol_max_time": "0.05", "sol_profile": "h100-sxm"})
    else:
        from triton.testing import do_bench

        settings = parse_settings({})
    engine = Engine(settings, ROOT / ".solgate", announce=lambda text: None)
    device = "cpu" if dry else "cuda"
    rows = []
    for kernel in DO_BENCH_KERNELS:
        shape, call = inputs(torch, kernel, device, dry)
        # Only the medians are compared here; the declared work does not enter them.
        m = engine.measure(f"gpu_check::{kernel}", call, bytes=1e6)
        theirs = do_bench(call, return_mode="median") / 1e3
        rows.append({"kernel": kernel, "shape": shape, "solgate_s": m.timing.seconds, "do_bench_s": theirs,
                     "ratio": m.timing.seconds / theirs})
    (out / "do_bench.json").write_text(json.dumps(rows, indent=2))
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    return f"worst ratio {worst['ratio']:.3f} ({worst['kernel']}; target within 3 %)"


def table(out: Path) -> list[str]:
    """kernel, shape, median, achieved, SOL, torch's SOL, do_bench median and the ratio."""
    path = out / "sol-datasheet.json"
    if not path.exists():
        return ["(no SOL results: the sol-datasheet step wrote none)"]
    bench = {}
    if (out / "do_bench.json").exists():
        bench = {row["kernel"]: row for row in json.loads((out / "do_bench.json").read_text())}
    measurements = json.loads(path.read_text())["measurements"]
    if not measurements:
        return ["(no SOL measurements: a dry run only collects the tests)"]
    lines = [f"{'test':<36} {'name':<13} {'shape':>10} {'median':>11} {'achieved':>15} {'SOL':>6} "
             f"{'torch SOL':>9} {'do_bench':>11} {'ratio':>6}"]
    for m in (m for m in measurements if m["gate"]):
        test = m["test"].split("::")[-1]
        torch_sol = next((r["sol"] for r in measurements if r["test"] == m["test"] and not r["gate"]), None)
        achieved = f"{m['gbps']:.0f} GB/s" if m["bound"] == "memory" else f"{m['tflops']:.1f} TFLOP/s"
        # do_bench timed the fp32 variant of each kernel (vector_add, softmax, layernorm).
        kernel = test.removeprefix("test_").split("[")[0]
        row = bench.get(kernel) if "[bf16]" not in test else None
        lines.append(" ".join([
            f"{test:<36}", f"{m['name']:<13}", f"{row['shape'] if row else '-':>10}", f"{m['seconds'] * 1e6:>9.1f}us",
            f"{achieved:>15}", f"{m['sol']:>6.3f}", f"{torch_sol:>9.3f}" if torch_sol is not None else f"{'-':>9}",
            f"{row['do_bench_s'] * 1e6:>9.1f}us" if row else f"{'-':>11}",
            f"{m['seconds'] / row['do_bench_s']:>6.3f}" if row else f"{'-':>6}",
        ]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check")
    parser.add_argument("--dry-run", action="store_true", help="walk every step on a CPU machine")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dry = args.dry_run
    if dry:
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch

    if not dry and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; use --dry-run to walk the steps on a CPU")
        sys.exit(0)
    where = "dry run on the CPU" if dry else f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    print(f"gpu_check: {where}; torch {torch.__version__}; budget {BUDGET_SECONDS} s", flush=True)
    clock = Clock(BUDGET_SECONDS)
    py = sys.executable
    probe = ["--collect-only", "-q"] if dry else []
    sol_tests = [py, "-m", "pytest", "kernels/tests/test_sol.py", "-q", "-p", "no:cacheprovider", *probe]
    steps = [
        ("do_bench", lambda: do_bench_comparison(out, dry)),
        ("calibrate", command("calibrate", [py, "-m", "pytest_solgate.cli", "calibrate", *(["--help"] if dry else [])],
                              out, lambda: clock.limit(90))),
        ("sol-datasheet", command("sol-datasheet", [*sol_tests, f"--sol-json={out}/sol-datasheet.json",
                                                    f"--sol-report={out}/sol-report.html", "--sol-no-save"], out, lambda: clock.limit(120))),
        ("sol-measured", command("sol-measured", [*sol_tests, "--sol-ceilings=measured",
                                                  f"--sol-json={out}/sol-measured.json", "--sol-no-save"], out, lambda: clock.limit(120))),
        ("correctness", command("correctness", [py, "-m", "pytest", "kernels/tests/test_correctness.py", "-q",
                                                "-p", "no:cacheprovider", *probe], out, lambda: clock.limit(60))),
        ("gpu-paths", command("gpu-paths", [py, "-m", "pytest", "tests/test_gpu_paths.py", "-q", "-p", "no:cacheprovider",
                                            *probe], out, lambda: clock.limit(60))),
    ]
    results = [step(label, action) for label, action in steps]
    (out / "steps.json").write_text(json.dumps(results, indent=2))
    for line in table(out):
        print(line)
    failed = [r["step"] for r in results if not r["ok"]]
    print(f"gpu_check: {len(results) - len(failed)} of {len(results)} steps ok" + (f"; failed: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
