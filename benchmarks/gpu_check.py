"""The GPU checks, in one script for a session that has a GPU for a few minutes.

Runs, in order, each under its own time limit, and prints a short table at the end:
1. the plugin's timing of a Triton kernel (vector_add, 2^26 fp32) next to
   `triton.testing.do_bench` on the same inputs (target: medians within 3 %);
2. `solgate calibrate` (measured ceilings, cached under .solgate/);
3. the kernel suite with its report: `pytest kernels --sol-report --sol-json`;
4. the kernel suite under xdist `-n 1` with `--sol-ceilings=measured`;
5. the plugin's own tests.

    python benchmarks/gpu_check.py [--out DIR]

It installs nothing. Outputs (reports, JSON, logs) go to --out (default gpu-check/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def run(label: str, command: list[str], out: Path, timeout: float) -> tuple[str, float, int]:
    started = time.perf_counter()
    log = out / f"{label}.log"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        log.write_text(done.stdout + done.stderr)
        rc = done.returncode
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"timed out after {timeout} s\n{exc.stdout or ''}")
        rc = 124
    return label, time.perf_counter() - started, rc


def do_bench_comparison() -> dict:
    import torch
    import triton.testing

    from kernels.vector_add import add
    from pytest_solgate.engine import Engine
    from pytest_solgate.settings import parse_settings

    x = torch.randn(1 << 26, device="cuda")
    y = torch.randn_like(x)
    out = torch.empty_like(x)
    engine = Engine(parse_settings({}), Path(".solgate"))
    m = engine.measure("gpu_check::vector_add", lambda: add(x, y, out), bytes=3 * x.numel() * 4, flops=x.numel())
    theirs = triton.testing.do_bench(lambda: add(x, y, out), return_mode="median") / 1e3
    return {
        "device": m.device,
        "profile": m.profile,
        "solgate_median_s": m.seconds,
        "do_bench_median_s": theirs,
        "difference": m.seconds / theirs - 1,
        "solgate_sol": m.sol,
        "solgate_gbps": m.gbps,
        "samples": len(m.samples),
        "noise": m.noise,
        "telemetry": m.telemetry,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        print("gpu_check: no CUDA device here; nothing to check")
        sys.exit(0)
    import torch

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    comparison = do_bench_comparison()
    (out / "do_bench.json").write_text(json.dumps(comparison, indent=2, default=str))
    py = sys.executable
    steps = [
        run("calibrate", [py, "-m", "pytest_solgate.cli", "calibrate"], out, 120),
        run("kernels", [py, "-m", "pytest", "kernels", "-q", f"--sol-report={out}/sol-report.html",
                        f"--sol-json={out}/kernels.json", "--sol-no-save"], out, 240),
        run("kernels-n1-measured", [py, "-m", "pytest", "kernels", "-q", "-n", "1", "--sol-ceilings=measured",
                                    f"--sol-json={out}/kernels-measured.json", "--sol-no-save"], out, 240),
        run("plugin-tests", [py, "-m", "pytest", "tests", "-q", "-n", "4", "-x"], out, 240),
    ]
    print(f"vector_add 2^26 fp32: solgate median {comparison['solgate_median_s'] * 1e6:.1f} us, "
          f"do_bench median {comparison['do_bench_median_s'] * 1e6:.1f} us, "
          f"difference {comparison['difference']:+.2%} (target within 3%), SOL {comparison['solgate_sol']:.3f}")
    for label, seconds, rc in steps:
        print(f"{label:<22} rc={rc:<4} {seconds:7.1f} s   log: {out}/{label}.log")
    for name in ("kernels.json", "kernels-measured.json"):
        path = out / name
        if path.exists():
            print(f"--- {name}")
            for m in json.loads(path.read_text())["measurements"]:
                print(f"{m['test'].split('::')[-1]:<34} {m['name']:<14} {m['seconds'] * 1e6:10.1f} us  "
                      f"{m['gbps']:8.1f} GB/s {m['tflops']:8.1f} TFLOP/s  SOL {m['sol']:.3f}  {m['verdict']}")


if __name__ == "__main__":
    main()
