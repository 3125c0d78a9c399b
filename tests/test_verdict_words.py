# ruff: noqa: F811  (test_history's repo fixtures are imported, and taken as arguments)
"""What the verdicts and reports print, through real pytest runs: every verdict's first line within
80 columns with its details below, figures in significant digits, the declared work named as it
was declared, what to change said once, and the precision class that fits an impossible reading.
Each check reads the part a user acts on: the figure, the option, the class."""


import json

import pytest
from test_history import sqlite_repo  # noqa: F401 (a fixture)

from solgate_testing import FAKE_CLOCK_KERNELS
from test_cli import solgate

LONG_IDS = FAKE_CLOCK_KERNELS + '''
import json, pathlib
import json

import pytest

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())

@pytest.mark.parametrize("shape", ["batch64-seq4096-heads32-dim128-causal-bf16-rotary"])
@pytest.mark.sol(min=SPEED.get("min"))
def test_attention_forward_with_a_long_name(sol, shape):
    sol.measure(lambda: busy(SPEED["seconds"]), bytes=0.4e6)
'''


def first_lines(data):
    return {m["test"]: m["reason"].splitlines()[0] for m in data["measurements"]}


def test_every_verdicts_first_line_fits_80_columns_for_parametrized_ids_and_one_run_windows(sqlite_repo):
    (sqlite_repo.path / "test_kernels.py").write_text(LONG_IDS)
    sqlite_repo.commit("A")
    sqlite_repo.run()  # one run at A: the next one's window has one run
    sqlite_repo.commit("B: slower", seconds=1.3e-3)
    result, _, data = sqlite_repo.run()
    (test, first), = first_lines(data).items()
    assert first.startswith("ambiguous: test_attention_forward") and "-23.1%" in first, first
    assert len(first) <= 80, first
    reason = data["measurements"][0]["reason"]
    assert "unknown (one run)" in reason and "one baseline run cannot show" in reason  # below the first line
    sqlite_repo.commit("C: a budget it misses", seconds=1e-3, min=0.9)
    result, _, data = sqlite_repo.run()
    (test, first), = first_lines(data).items()
    assert "SOL 0.40 < budget 0.90" in first and len(f"below-budget: {first}") <= 80, first
    result.stdout.fnmatch_lines(["*SOL 0.40 < budget 0.90"])  # the failure names the figures first


def test_small_budgets_and_counts_print_significant_digits(suite, pytester):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.002)
        def test_tiny_budget(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e3)  # SOL 0.001 on the 1 GB/s profile

        def test_just_under_a_million_flops(sol):
            sol.measure(lambda: busy(1e-3), flops=999_999, bytes=1e6)
    """, "--sol-report=r.html", fake_clock=True)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*>= 0.002*test_tiny_budget", "*SOL 0.001 < budget 0.002"])
    result.stdout.no_fnmatch_line("*>= 0.00 *")
    page = (pytester.path / "r.html").read_text()
    assert "1M FLOP" in page and "e+03k" not in page


def test_declared_tensor_flops_are_on_the_terminal_line_of_a_memory_bound_kernel(suite):
    result = suite("""
        def test_fused(sol):
            sol.measure(lambda: busy(1e-3), flops={"bf16_tensor": 1e3}, bytes=0.5e6)
    """, fake_clock=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*memory*500 MB/s, 1 MFLOP/s bf16_tensor*test_fused"])


def test_noisy_measurements_say_what_to_change_once_per_session(suite):
    # On the fake clock, a kernel whose every call takes 2e-4 s give or take 10 % (a seeded series,
    # the same each run): a noise target it never meets, so every measurement runs out of its time
    # budget, and does so after enough samples for a noise figure however loaded the machine is.
    result = suite("""
        import random

        import pytest

        JITTER = random.Random(2026)

        @pytest.mark.parametrize("i", range(3))
        @pytest.mark.sol(min=0.99)
        def test_noisy(sol, i):
            sol.measure(lambda: busy(2e-4 * JITTER.uniform(0.9, 1.1)), bytes=1e3)
    """, "--sol-noise=0.000001", "--sol-max-time=0.3", fake_clock=True)
    result.assert_outcomes(failed=3)
    text = " ".join(line.strip() for line in result.stdout.lines)  # the summary wraps at 80 columns
    assert text.count("give more --sol-max-time") == 1 and "3 of 3 measurements noisy" in text
    assert "a wider --sol-noise on a shared machine" in text
    # relative to what the machine can reach, said once (issue 44)
    assert text.count("this machine reached") == 1 and "at best this session (test_kernels.py::test_noisy" in text
    assert "time budget ran out first" not in result.stdout.str()


GEMM_PROFILE = """
id = "gemm-device"
name = "A device with tensor cores"
kind = "cpu"
memory_bandwidth_gbps = 1
ceilings = "measured"
source = "tests"

[peak_tflops]
bf16 = 0.001
bf16_tensor = {tensor}
"""


@pytest.mark.parametrize("tensor, fits", [(0.01, True), (0.0015, False)])
def test_an_impossible_gemm_names_the_tensor_class_its_flops_fit(suite, tensor, fits):
    result = suite("""
        def test_gemm(sol):
            sol.measure(lambda: busy(1e-3), flops={"bf16": 2e6})  # 2 GFLOP/s: SOL 2.0 against bf16
    """, "--sol-profile=gemm.toml", profile=False, fake_clock=True,
        files={"gemm.toml": GEMM_PROFILE.format(tensor=tensor)})
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_gemm SOL 2.00 > 1.05 is impossible"])
    advice = [line for line in result.stdout.lines if "fit bf16_tensor" in line]
    if fits:
        assert advice and "SOL 0.20" in advice[0], result.stdout.lines
        result.stdout.fnmatch_lines(["*flops={'bf16_tensor': ...}*"])
    else:  # SOL 1.33 on the tensor cores too: the declaration is not the explanation
        assert not advice


def test_compare_over_a_one_run_window_says_one_run(sqlite_repo):
    from test_history import STEADY

    sqlite_repo.seed(STEADY)
    done = solgate("compare", "HEAD~1", "HEAD", "--window", "1", cwd=sqlite_repo.path)
    assert "up to 1 clean run at" in done.stdout, done.stdout
    assert "1 clean runs" not in done.stdout


def test_history_changes_names_what_the_gate_failed_even_when_it_is_no_step(sqlite_repo):
    from test_history import STEADY

    sqlite_repo.seed(STEADY)
    slower = sqlite_repo.commit("slower", seconds=1.25e-3)
    _, verdicts, _ = sqlite_repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed"
    # the same commit again, as fast as before (a noisy machine): one run of two regressed
    sqlite_repo.git("update-index", "--assume-unchanged", "speed.json")  # a clean run, however fast
    sqlite_repo.set_speed(seconds=1e-3)
    sqlite_repo.run()
    done = solgate("history", "--changes", cwd=sqlite_repo.path)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith(slower[:10])]
    # listed as a step or apart from them, the line says what the gate did there
    assert said and "test_kernel" in said[0] and "the gate failed it as regressed in 1 of 2 runs" in said[0], done.stdout


def test_an_outlier_far_below_prints_its_sol_in_significant_digits(sqlite_repo):
    commits = sqlite_repo.seed([0.39, 0.40, 0.39, 0.0004, 0.40, 0.39, 0.40])
    done = solgate("history", "--changes", cwd=sqlite_repo.path)
    line = next(line for line in done.stdout.splitlines() if line.startswith(commits[3][:10]))
    assert "SOL 0.0004" in line and "SOL 0.000 " not in line, line


def test_compare_over_a_one_run_window_says_why_there_is_no_floor(sqlite_repo):
    sqlite_repo.seed([0.39])
    sqlite_repo.commit("slower", seconds=1.3e-3)
    _, verdicts, _ = sqlite_repo.run()
    assert verdicts["test_kernel"]["verdict"] == "ambiguous"
    done = solgate("compare", "HEAD~1", "HEAD", cwd=sqlite_repo.path)
    row = next(line for line in done.stdout.splitlines() if "test_kernel" in line)
    assert "?" not in row and "1 run" in row and "ambiguous" in row, done.stdout
    assert "one run" in done.stdout.splitlines()[-2]  # what the gate says: the window shows no spread


def test_flops_in_a_class_the_profile_lacks_are_named_not_lost_nor_called_missing_bytes():
    # The Triton interpreter's case (engine._scorable): a kernel's fp16_tensor FLOPs on a CPU
    # profile with no such roof are left out of its score; the terminal line and the roofline say
    # so, beside the bytes it declared, as they render a recorded run.
    from pytest_solgate.report import roofline, terminal
    from test_reports import PROFILE, record

    m = record(test="t.py::test_norm", flops={"fp16_tensor": 1e3}, bytes=0.5e6, tflops=0.0, intensity=0.0,
               gbps=0.5, backend="triton-interpreter")
    (row,) = [line for line in terminal.render([m]) if "test_norm" in line]
    assert "fp16_tensor FLOPs unscored (no roof on synthetic)" in row, row
    (left_out,) = roofline.roofline(PROFILE, [m]).left_out
    assert "no bytes" not in left_out and "fp16_tensor" in left_out, left_out


def test_a_plain_number_budget_applies_on_the_cpu_and_its_failure_says_how_to_gate_gpus_only(suite):
    """A kernel engineer's `min=0.8` is meant for GPUs; it applies on every profile, this CPU's
    included (docs/reference.md), and the failure there says so and how to keep it to the GPUs."""
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.8)
        def test_plain(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)  # SOL 0.5 on the 1 GB/s profile

        @pytest.mark.sol(min={"synthetic": 0.8})
        def test_by_profile(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """, fake_clock=True)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert text.count("min=0.8 is a plain number, so it applies on every profile, this CPU's too") == 1, text
    assert "write min={'h100*': 0.8}" in text


def test_a_first_measurement_is_recorded_not_passed_and_a_no_save_run_says_it_kept_nothing(suite, pytester):
    """`pass` only where something was judged: with no budget and no baseline the verdict is
    `recorded` (issue 44); under --sol-no-save nothing is, and the reason says so."""
    body = """
        def test_first(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """
    result = suite(body, "--sol-json=saved.json", fake_clock=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["1 recorded*"])
    saved = json.loads((pytester.path / "saved.json").read_text())["measurements"][0]
    assert saved["verdict"] == "recorded" and "recorded as a baseline for later runs" in saved["reason"], saved
    suite(body, "--sol-no-save", "--sol-json=unsaved.json", fake_clock=True).assert_outcomes(passed=1)
    unsaved = json.loads((pytester.path / "unsaved.json").read_text())["measurements"][0]
    assert "not recorded (--sol-no-save)" in unsaved["reason"] and "as a baseline" not in unsaved["reason"], unsaved
