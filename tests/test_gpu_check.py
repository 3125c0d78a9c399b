"""benchmarks/gpu_check.py, the script a GPU session runs once: every step run on this CPU
(--dry-run) as the GPU machine would run it (the plugin without its entry point), and its results
from files of the shape the GPU run writes."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import gpu_check  # noqa: E402

STEPS = ["do_bench", "sol-datasheet", "calibrate", "sol-measured", "gpu-paths", "correctness", "correctness-gemm"]


def without_entry_points():
    """The environment of the GPU machine as far as pytest plugins go: none comes from an entry
    point (the project is not installed there), and no $OUT is set."""
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


@pytest.mark.slow
def test_dry_run_runs_every_step_without_the_entry_point_and_writes_at_most_eight_files(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=without_entry_points(), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for label in STEPS:
        assert any(line.startswith(label + " ") and " ok " in line for line in done.stdout.splitlines()), (label, done.stdout)
    assert "7 of 7 steps ok" in done.stdout
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) <= 8 and written == ["do_bench.json", "logs.tar.gz", "results.md", "sol-datasheet.json",
                                             "sol-measured.json", "sol-report.html", "steps.json"]
    assert [s["step"] for s in json.loads((tmp_path / "steps.json").read_text())] == STEPS
    # The SOL steps ran for real: measurements, scored against the H200 datasheet, in the results table.
    measurements = json.loads((tmp_path / "sol-datasheet.json").read_text())["measurements"]
    assert {(m["test"].split("::")[-1], m["name"]) for m in measurements} >= {("test_vector_add[fp32]", "triton")}
    assert all(m["profile"] == "h200" for m in measurements)
    results = (tmp_path / "results.md").read_text()
    assert "| test_vector_add[fp32] | triton |" in results and "| correctness-gemm | ok |" in results
    with tarfile.open(tmp_path / "logs.tar.gz") as archive:
        assert {"sol-datasheet.log", "correctness-gemm.log"} <= set(archive.getnames())
    assert not (ROOT / "gpu-check").exists()


def test_without_registering_the_plugin_a_sol_step_fails(tmp_path, monkeypatch):
    """Where the project is not installed, pytest knows no --sol-* option unless the step registers
    the plugin: the first GPU run ended there (exit 4 in 2 s), and a dry run that only collected
    tests with the package installed could not see it. This one can."""
    monkeypatch.setattr(gpu_check, "PLUGIN_ARGS", [])
    monkeypatch.setattr(os, "environ", without_entry_points())
    commands = gpu_check.step_commands(tmp_path, dry=True)["sol-datasheet"][:1]
    result = gpu_check.step("sol-datasheet", gpu_check.run_commands("sol-datasheet", commands, tmp_path, gpu_check.Clock(120), dry=True))
    assert not result["ok"] and result["detail"].startswith("RuntimeError: exit 4")
    assert "unrecognized arguments: --sol-no-save" in (tmp_path / "sol-datasheet.log").read_text()


def test_the_step_limits_come_from_the_compile_counts_and_the_budget_leaves_room_for_a_rerun():
    for label, compiles in (("do_bench", "do_bench"), ("sol-datasheet", "sol"), ("correctness", "correctness"),
                            ("correctness-gemm", "correctness-gemm")):
        assert gpu_check.wanted_seconds(label) > gpu_check.COMPILES[compiles] * gpu_check.SECONDS_PER_COMPILE
    assert gpu_check.wanted_seconds("correctness") > gpu_check.NVCC_SECONDS
    machine_start = 4 * 60  # no machine starts with less than this left
    assert gpu_check.BUDGET_SECONDS < 600 - 60  # one device command, with time to archive the results
    assert 2 * gpu_check.BUDGET_SECONDS + machine_start <= 15 * 60  # a rerun fits the device time


def test_results_go_to_out_or_a_temporary_folder_never_the_checkout(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    assert ROOT not in gpu_check.default_out().resolve().parents
    monkeypatch.setenv("OUT", "/tmp/device-out")
    assert gpu_check.default_out() == Path("/tmp/device-out")


def test_a_failing_step_is_reported_and_the_next_one_runs(capsys):
    def broken():
        raise RuntimeError("exit 1: 3 failed")

    first = gpu_check.step("sol-datasheet", broken)
    second = gpu_check.step("correctness", lambda: "66 passed")
    assert not first["ok"] and second["ok"]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sol-datasheet  FAILED") and "RuntimeError: exit 1: 3 failed" in out[0]
    assert out[1].startswith("correctness    ok")


def record(test, name, gate, sol, seconds=1e-3, **extra):
    return {"test": f"kernels/tests/test_sol.py::{test}", "name": name, "gate": gate, "sol": sol, "seconds": seconds,
            "bound": "memory", "gbps": 3900.0, "tflops": 0.5, "budget": {"min": 0.8}, "verdict": "pass",
            "sol_at_clock": None, **extra}


def write_results(folder):
    run = {"device": "NVIDIA H200", "driver": "570.86", "cuda": "12.8", "torch": "2.11.0", "triton": "3.6.0",
           "python": "3.12.3", "host": "gpu-1"}
    (folder / "sol-datasheet.json").write_text(json.dumps({"run": run, "measurements": [
        record("test_softmax[fp32]", "triton", True, 0.82, sol_at_clock=0.83), record("test_softmax[fp32]", "torch", False, 0.61),
        record("test_softmax[bf16]", "triton", True, 0.80),
    ]}))
    (folder / "sol-measured.json").write_text(json.dumps({"run": run, "measurements": [
        record("test_softmax[fp32]", "triton", True, 0.91)]}))
    (folder / "do_bench.json").write_text(json.dumps([
        {"kernel": "softmax", "shape": "32768x4096", "solgate_s": 1e-3, "do_bench_s": 0.98e-3, "ratio": 1.0204},
        {"kernel": "vector_add", "shape": "268435456", "solgate_s": 1e-3, "do_bench_s": 1e-3, "ratio": 1.0,
         "write_flush_s": 1.0e-3, "read_flush_s": 0.97e-3, "read_over_write": 0.97},
    ]))


def test_the_final_table_joins_sol_results_and_do_bench(tmp_path):
    write_results(tmp_path)
    header, fp32, bf16 = gpu_check.table(tmp_path)
    assert header.split()[:4] == ["test", "name", "shape", "median"]
    assert fp32.split() == ["test_softmax[fp32]", "triton", "32768x4096", "1000.0us", "3900", "GB/s", "0.820", "0.610",
                            "980.0us", "1.020"]
    assert bf16.split()[-3:] == ["-", "-", "-"]  # do_bench timed the fp32 variant only


def test_the_results_are_written_as_the_markdown_docs_results_md_holds(tmp_path):
    write_results(tmp_path)
    steps = [{"step": "do_bench", "ok": True, "seconds": 12.5, "detail": "worst ratio 1.020"},
             {"step": "correctness-gemm", "ok": False, "seconds": 80.0, "detail": "TimeoutError: timed out after 80 s"}]
    text = gpu_check.results_markdown(tmp_path, steps, dry=False)
    lines = text.splitlines()
    assert lines[0] == "### GPU run on NVIDIA H200: `python benchmarks/gpu_check.py`"
    assert "host gpu-1, driver 570.86, cuda 12.8, torch 2.11.0, triton 3.6.0, python 3.12.3; 1 of 2 steps ok in 92 s." in lines[2]
    assert ("| test_softmax[fp32] | triton | 1000.0 us | 3900 GB/s | 0.8 | 0.820 | 0.910 | 0.830 | 0.610 | 980.0 us | 1.020 "
            "| pass |") in lines
    assert "| test_softmax[bf16] | triton | 1000.0 us | 3900 GB/s | 0.8 | 0.800 | - | - | - | - | - | pass |" in lines
    assert any(line.startswith("Flush check (vector_add): 1000.0 us after the written flush, 970.0 us") for line in lines)
    assert "| correctness-gemm | FAILED | 80.0 | TimeoutError: timed out after 80 s |" in lines
