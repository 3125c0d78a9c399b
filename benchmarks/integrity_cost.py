"""What the integrity checks cost, and that they raise nothing on honest kernels (issue 42).

A pytest module of the project's own kernels (vector_add, softmax and layernorm through the Triton
interpreter, or written with torch where Triton is missing, and torch's references on the CPU), each handing its inputs and a reference
(``sol.measure(fn, args=..., outputs=..., reference=...)``), is run ``--runs`` times with
``--sol-integrity=on`` and as many with ``off``, alternately, at the default sampling settings.
It prints the median wall time of each, their ratio (target: under 1.10) and the A/A count: how
many of the ``on`` runs' measurements failed (target: none).

    python benchmarks/integrity_cost.py [--runs 20] [--torch]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, write_synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
import torch
import torch.nn.functional as F

from kernels import layernorm, softmax, vector_add


def test_vector_add(sol):
    x, y = torch.randn(1 << 16), torch.randn(1 << 16)
    out = torch.empty_like(x)
    sol.measure(vector_add.add, args=(x, y, out), outputs=2, reference=torch.add, name="triton",
                bytes=sol.nbytes(x, y, out), flops={"fp32": x.numel()})
    sol.measure(torch.add, args=(x, y), reference=lambda a, b: a + b, name="torch", gate=False,
                bytes=sol.nbytes(x, y, out))


def test_softmax(sol):
    x = torch.randn(64, 1000)
    out = torch.empty_like(x)
    sol.measure(softmax.softmax, args=(x, out), outputs=1, reference=lambda v: torch.softmax(v, -1), name="triton",
                bytes=sol.nbytes(x, out))
    sol.measure(lambda v: torch.softmax(v, -1), args=(x,), reference=softmax.reference, name="torch", gate=False,
                bytes=sol.nbytes(x, out))


def test_layernorm(sol):
    x, w, b = torch.randn(64, 1024), torch.randn(1024), torch.randn(1024)
    sol.measure(layernorm.layernorm, args=(x, w, b), reference=layernorm.reference, name="triton",
                bytes=sol.nbytes(x, w, b, x))
    sol.measure(lambda v, w, b: F.layer_norm(v, (1024,), w, b), args=(x, w, b), reference=layernorm.reference,
                name="torch", gate=False, bytes=sol.nbytes(x, w, b, x))
'''

# Without Triton (a machine without it cannot run the interpreter): the same three kernels written
# with torch on the CPU, each writing into its output buffer, beside torch's references. Not gated:
# the synthetic profile's 1 GB/s is no roof for a real CPU, and the checks run all the same.
TORCH_MODULE = '''
import torch
import torch.nn.functional as F


def add(x, y, out):
    torch.add(x, y, out=out)


def softmax(x, out):
    torch.softmax(x, -1, out=out)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def test_vector_add(sol):
    x, y = torch.randn(1 << 20), torch.randn(1 << 20)
    out = torch.empty_like(x)
    sol.measure(add, args=(x, y, out), outputs=2, reference=torch.add, name="kernel", gate=False,
                bytes=sol.nbytes(x, y, out), flops={"fp32": x.numel()})
    sol.measure(torch.add, args=(x, y), name="torch", gate=False, bytes=sol.nbytes(x, y, out))


def test_softmax(sol):
    x = torch.randn(1024, 1000)
    out = torch.empty_like(x)
    sol.measure(softmax, args=(x, out), outputs=1, reference=lambda v: torch.softmax(v.double(), -1), name="kernel", gate=False,
                bytes=sol.nbytes(x, out))
    sol.measure(torch.softmax, args=(x, -1), name="torch", gate=False, bytes=sol.nbytes(x, out))


def test_layernorm(sol):
    x, w, b = torch.randn(1024, 1024), torch.randn(1024), torch.randn(1024)
    sol.measure(layernorm, args=(x, w, b), reference=lambda v, w, b: F.layer_norm(v.double(), (1024,), w.double(),
                b.double()), name="kernel", gate=False, bytes=sol.nbytes(x, w, b, x))
    sol.measure(F.layer_norm, args=(x, (1024,), w, b), name="torch", gate=False, bytes=sol.nbytes(x, w, b, x))
'''


def has_triton() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def run_once(folder: Path, level: str) -> tuple[float, int, int, str]:
    """One pytest run: its wall seconds, passed and failed counts, and its output's tail."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--sol-device=cpu", "--sol-profile=synthetic.toml", "--sol-no-save", "--sol-baseline=none",
                           f"--sol-integrity={level}", "test_integrity_cost.py"],
                          cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    text = done.stdout + done.stderr
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", text)) else 0
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", text)) else 0
    return seconds, passed, failed, text[-2000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs with the checks on (and as many off)")
    parser.add_argument("--torch", action="store_true", help="the torch kernels even where Triton is installed")
    args = parser.parse_args()
    triton = has_triton() and not args.torch
    load_before = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="solgate-integrity-cost-"))
    write_synthetic(folder)
    (folder / "test_integrity_cost.py").write_text(MODULE if triton else TORCH_MODULE)
    run_once(folder, "off")  # warm the file-system cache and bytecode
    times: dict[str, list[float]] = {"on": [], "off": []}
    failures = []
    for run in range(args.runs):
        for level in ("on", "off") if run % 2 else ("off", "on"):
            seconds, passed, failed, tail = run_once(folder, level)
            times[level].append(seconds)
            if failed or passed != 3:
                failures.append(f"run {run} --sol-integrity={level}: {passed} passed, {failed} failed\n{tail}")
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    kernels = "Triton interpreter and torch" if triton else "torch on the CPU"
    print(f"{machine()}; {args.runs} runs each, alternating, default sampling; kernels: {kernels}")
    print(f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"--sol-integrity=on  median {on:.2f} s (min {min(times['on']):.2f}, max {max(times['on']):.2f})")
    print(f"--sol-integrity=off median {off:.2f} s (min {min(times['off']):.2f}, max {max(times['off']):.2f})")
    print(f"on / off = {on / off:.3f} (target under 1.10)")
    print(f"A/A: {len(failures)} of {2 * args.runs} runs with a failed test (target: none)")
    for failure in failures:
        print(failure)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
