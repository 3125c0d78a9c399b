"""Does the memory probe follow a memory-bound kernel from run to run? The check behind comparing
memory-bound kernels relative to it (docs/measurement.md, docs/history.md).

Each run is a separate process (as each CI run is); it measures the four kernels of
benchmarks/gate_power.py through the plugin's own CPU backend and sampling loop (default
settings: thread CPU time, a flush before each sample, the probe timed after each), on
``--allocations`` fresh sets of tensors one after another (fresh pages). Printed: the standard
deviation of log time across all measurements of a kernel, raw and relative to the probe (log
kernel time minus log probe time), and the same over the processes' first allocations only.

    python benchmarks/memory_probe.py [--runs 10] [--allocations 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine  # noqa: E402

KERNELS = ("add", "mm", "softmax", "copy")


def fresh_kernels(torch: Any) -> tuple[dict[str, Callable[[], Any]], tuple]:
    """The four kernels on newly allocated tensors, and the tensors."""
    n = 1 << 23
    x, y, o = torch.rand(n), torch.rand(n), torch.empty(n)
    a, b, mo = torch.rand(1024, 1024), torch.rand(1024, 1024), torch.empty(1024, 1024)
    s, so = torch.rand(2048, 4096), torch.empty(2048, 4096)
    src, dst = torch.rand(1 << 24), torch.empty(1 << 24)
    calls = {
        "add": lambda: torch.add(x, y, out=o), "mm": lambda: torch.mm(a, b, out=mo),
        "softmax": lambda: torch.softmax(s, dim=-1, out=so), "copy": lambda: dst.copy_(src),
    }
    return calls, (x, y, o, a, b, mo, s, so, src, dst)


def child(allocations: int) -> None:
    import torch

    from pytest_solgate.measure import backends, sampling
    from pytest_solgate.support.settings import SamplingSettings

    torch.set_num_threads(1)
    backend = backends.cpu_backend()
    kept = []  # every allocation stays alive, so the next one gets fresh pages
    out = []
    for _ in range(allocations):
        calls, tensors = fresh_kernels(torch)
        kept.append(tensors)
        timings = {k: sampling.take_timing(calls[k], backend, SamplingSettings()) for k in KERNELS}
        out.append({k: (t.seconds, t.probe_seconds, t.mode) for k, t in timings.items()})
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="processes (default 10)")
    parser.add_argument("--allocations", type=int, default=3, help="fresh tensor sets per process (default 3)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.allocations)
        return
    print(f"machine: {machine()}; {args.runs} processes x {args.allocations} allocations", flush=True)
    runs = []
    for i in range(args.runs):
        done = subprocess.run([sys.executable, __file__, "--child", "--allocations", str(args.allocations)],
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"run {i + 1} failed:\n{done.stderr}")
        runs.append(json.loads(done.stdout))
        modes = sorted({m for alloc in runs[-1] for _, _, m in alloc.values()})
        print(f"run {i + 1}: " + "  ".join(f"{k} {runs[-1][0][k][0] * 1e3:.3f} ms (probe {runs[-1][0][k][1] * 1e3:.3f})"
                                           for k in KERNELS) + f"  timers {modes}", flush=True)
    print("standard deviation of log time across processes (and allocations): raw / relative to the probe")
    for k in KERNELS:
        every = [alloc[k] for run in runs for alloc in run]
        first = [run[0][k] for run in runs]

        def sd(rows: list, relative: bool) -> float:
            return statistics.stdev([math.log(t / p if relative else t) for t, p, _ in rows])

        print(f"  {k:<8} all {len(every):>3}: {sd(every, False):.3f} / {sd(every, True):.3f}   "
              f"first allocation of each process: {sd(first, False):.3f} / {sd(first, True):.3f}")


if __name__ == "__main__":
    main()
