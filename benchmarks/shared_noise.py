"""How much of the run-to-run noise is shared by the kernels of a run, and could be removed.

The four kernels of benchmarks/gate_power.py, each measured with two fixed probe kernels right
before it in the same test (a 16 MiB copy and a 256^3 mm, ``gate=False``), one ``pytest`` process
per empty commit. For each kernel it prints the run-to-run standard deviation of log time, raw and
after removing the shared part three ways: dividing by the copy probe, by the mm probe, and
subtracting the run's common shift (the median deviation of the other three kernels from their
own means, leave-one-out, as a gate could use it).

    python benchmarks/shared_noise.py [--runs 16]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gate_power import KERNELS, TESTS, Repo  # noqa: E402

from _common import machine  # noqa: E402

PROBES = '''

_pa, _pb = torch.rand(1 << 22), torch.empty(1 << 22)
_ma, _mb, _mo = torch.rand(256, 256), torch.rand(256, 256), torch.empty(256, 256)


def probe(sol):
    sol.measure(lambda: _pb.copy_(_pa), bytes=sol.nbytes(_pa, _pb), name="probe_mem", gate=False)
    sol.measure(lambda: torch.mm(_ma, _mb, out=_mo), flops=2 * 256**3, name="probe_mm", gate=False)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    args = parser.parse_args()
    source = TESTS + PROBES
    for kernel in KERNELS:
        source = source.replace(f"def test_{kernel}(sol):\n", f"def test_{kernel}(sol):\n    probe(sol)\n", 1)
    repo = Repo(Path(tempfile.mkdtemp(prefix="shared-noise-")))
    (repo.path / "test_kernels.py").write_text(source)
    print(f"machine: {machine()}; {args.runs} runs")
    logs: dict[tuple[str, str], list[float]] = {}
    for i in range(args.runs):
        repo.commit(f"A/A {i}")
        measured, seconds = repo.run("--sol-no-save")
        for key, m in measured.items():
            logs.setdefault((key.split("/")[0], m["name"]), []).append(math.log(m["seconds"]))
        print(f"run {i + 1} ({seconds:.0f} s)", flush=True)
    deviation = {k: [v - statistics.mean(logs[(k, "default")]) for v in logs[(k, "default")]] for k in KERNELS}
    print(f"{'kernel':<8} {'raw':>6} {'/copy probe':>12} {'/mm probe':>10} {'-others':>8}  (sd of log time)")
    for k in KERNELS:
        raw = logs[(k, "default")]
        by_copy = [a - b for a, b in zip(raw, logs[(k, "probe_mem")])]
        by_mm = [a - b for a, b in zip(raw, logs[(k, "probe_mm")])]
        others = [o for o in KERNELS if o != k]
        shift = [statistics.median(deviation[o][i] for o in others) for i in range(len(raw))]
        minus = [deviation[k][i] - shift[i] for i in range(len(raw))]
        print(f"{k:<8} {statistics.stdev(raw):>6.3f} {statistics.stdev(by_copy):>12.3f} {statistics.stdev(by_mm):>10.3f} "
              f"{statistics.stdev(minus):>8.3f}")
    print(json.dumps({f"{k}/{n}": v for (k, n), v in logs.items()}))


if __name__ == "__main__":
    main()
