"""benchmarks/gpu_check.py, the script a GPU session runs once: every step walked on this CPU
(--dry-run), and its final table from results of the shape the GPU run writes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
def test_dry_run_walks_every_step(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for label in ("do_bench", "calibrate", "sol-datasheet", "sol-measured", "correctness", "gpu-paths"):
        assert any(line.startswith(label) and " ok " in line for line in done.stdout.splitlines()), (label, done.stdout)
    assert "6 of 6 steps ok" in done.stdout
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [s["step"] for s in steps] == ["do_bench", "calibrate", "sol-datasheet", "sol-measured", "correctness", "gpu-paths"]


def test_a_failing_step_is_reported_and_the_next_one_runs(capsys):
    sys.path.insert(0, str(BENCHMARKS))
    import gpu_check

    def broken():
        raise RuntimeError("exit 1: 3 failed")

    first = gpu_check.step("sol-datasheet", broken)
    second = gpu_check.step("correctness", lambda: "66 passed")
    assert not first["ok"] and second["ok"]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sol-datasheet  FAILED") and "RuntimeError: exit 1: 3 failed" in out[0]
    assert out[1].startswith("correctness    ok")


def test_the_final_table_joins_sol_results_and_do_bench(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    import gpu_check

    def record(test, name, gate, sol, seconds=1e-3):
        return {"test": f"kernels/tests/test_sol.py::{test}", "name": name, "gate": gate, "sol": sol, "seconds": seconds,
                "bound": "memory", "gbps": 3900.0, "tflops": 0.5}

    (tmp_path / "sol-datasheet.json").write_text(json.dumps({"measurements": [
        record("test_softmax[fp32]", "triton", True, 0.82), record("test_softmax[fp32]", "torch", False, 0.61),
        record("test_softmax[bf16]", "triton", True, 0.80),
    ]}))
    (tmp_path / "do_bench.json").write_text(json.dumps([
        {"kernel": "softmax", "shape": "32768x4096", "solgate_s": 1e-3, "do_bench_s": 0.98e-3, "ratio": 1.0204},
    ]))
    header, fp32, bf16 = gpu_check.table(tmp_path)
    assert header.split()[:4] == ["test", "name", "shape", "median"]
    assert fp32.split() == ["test_softmax[fp32]", "triton", "32768x4096", "1000.0us", "3900", "GB/s", "0.820", "0.610",
                            "980.0us", "1.020"]
    assert bf16.split()[-3:] == ["-", "-", "-"]  # do_bench timed the fp32 variant only
