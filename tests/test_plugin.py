"""The plugin as users meet it: real pytest runs of real test files (pytester)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PASSING = """
import pytest

@pytest.mark.sol(min=0.85)
def test_pass(sol):
    m = sol.measure(lambda: busy(1e-3), bytes=0.95e6)
    assert m.bound == "memory" and 0.85 < m.sol < 1.0
"""


def test_pass_verdict_and_summary_table(suite):
    result = suite(PASSING, fake_clock=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SOL summary*", "*memory*0.??*>= 0.85*pass*test_kernels.py::test_pass"])


def test_a_module_that_overrides_sol_clock_times_on_it_and_the_next_module_on_the_machines(suite):
    # The fake clock is handed in through the sol_clock fixture (no module global is replaced):
    # its module reads the kernel's exact 1 ms; the next module, without it, reads the machine's
    # clock again, where the fake kernel takes no time at all. (A short time budget: the machine's
    # clock would sample that empty kernel, noisy, for the fake clock's 30 s; the fake clock's module
    # is exact at ten samples.)
    result = suite("""
        def test_on_the_fake_clock(sol):
            m = sol.measure(lambda: busy(1e-3), bytes=0.5e6)
            assert set(m.timing.samples) == {1e-3} and m.sol == 0.5, m.timing.samples
        """, "test_kernels.py", "test_machine.py", "--sol-max-time=0.3", files={"test_machine.py": """
        from test_kernels import busy

        def test_on_the_machines_clock(sol):
            m = sol.measure(lambda: busy(1e-3), bytes=0.5e6, gate=False)
            assert m.seconds < 0.5e-3, m.seconds  # the fake kernel only moves the fake clock
        """}, fake_clock=True)
    result.assert_outcomes(passed=2)


def test_below_budget_fails_in_the_call_phase_with_an_actionable_message(suite):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.85)
        def test_slow(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """, fake_clock=True)  # exactly 1 ms a call, however loaded the machine
    result.assert_outcomes(failed=1)
    # the figures to act on on the first line; the profile and what was measured below it
    result.stdout.fnmatch_lines(["*test_slow SOL 0.50 < budget 0.85", "*on synthetic: 500 MB/s of 1 GB/s*median 1 ms*"])
    result.stdout.no_fnmatch_line("*teardown*")
    result.stdout.no_fnmatch_line("*pytest_solgate/*")  # no traceback from our internals


def test_above_sol_fails_and_can_warn(suite):
    body = """
        def test_impossible(sol):
            sol.measure(lambda: busy(1e-3), bytes=2e6)
    """
    result = suite(body, fake_clock=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_impossible SOL ?.?? > 1.05 is impossible", "*on synthetic*", "*check the declared bytes/flops*"])
    warned = suite(body, "--sol-above-one=warn", fake_clock=True)
    warned.assert_outcomes(passed=1, warnings=1)
    warned.stdout.fnmatch_lines(["*SolgateWarning: above-sol*"])


def test_gate_false_is_not_gated(suite):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.99)
        def test_reference(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.1e6, gate=False, name="torch")
            sol.measure(lambda: busy(1e-3), bytes=0.95e6, name="ours")
    """, fake_clock=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_reference 'ours' SOL 0.?? < budget 0.99*"])
    result.stdout.fnmatch_lines(["*not-gated*test_reference*"])


def test_gate_warn_and_off(suite):
    body = """
        import pytest

        @pytest.mark.sol(min=0.85)
        def test_slow(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """
    warn = suite(body, "--sol-gate=warn", fake_clock=True)
    warn.assert_outcomes(passed=1, warnings=1)
    warn.stdout.fnmatch_lines(["*SolgateWarning: below-budget: test_slow SOL 0.[45]? < budget 0.85*", "*below-budget*"])
    off = suite(body, "--sol-gate=off", fake_clock=True)
    off.assert_outcomes(passed=1)
    off.stdout.fnmatch_lines(["*not-gated*test_slow*"])


def test_ini_twin_and_command_line_wins(suite, pytester):
    pytester.makeini("[pytest]\nsol_gate = warn\n")
    body = """
        import pytest

        @pytest.mark.sol(min=0.85)
        def test_slow(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """
    suite(body, fake_clock=True).assert_outcomes(passed=1, warnings=1)
    suite(body, "--sol-gate=fail", fake_clock=True).assert_outcomes(failed=1)


def test_marked_but_measured_nothing(suite):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.5)
        def test_forgot(sol):
            pass

        @pytest.mark.sol(min=0.5)
        def test_no_fixture():
            pass
    """, fake_clock=True)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*test_forgot: marked sol but measured nothing*"])


def test_unmarked_test_may_measure_and_is_recorded(suite, pytester):
    result = suite("""
        def test_plain(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.3e6)
    """, "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    assert [m["verdict"] for m in data["measurements"]] == ["recorded"]  # no budget, no baseline: nothing judged


def test_mfu_budget_and_profile_glob_budgets(suite):
    result = suite("""
        import pytest

        @pytest.mark.sol(min={"h100*": 0.99, "synth*": 0.5, "*": 0.99}, mfu=0.8)
        def test_compute(sol):
            sol.measure(lambda: busy(1e-3), flops=0.6e6)

        @pytest.mark.sol(min={"h100*": 0.99})
        def test_no_budget_here(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.1e6)
    """, fake_clock=True)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*test_compute MFU 0.?? < budget 0.80", "*on synthetic*compute-bound*"])


def test_several_measurements_and_json_contents(suite, pytester):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.5)
        def test_many(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.9e6)
            sol.measure(lambda: busy(1e-3), bytes=0.8e6)
            sol.measure(lambda: busy(1e-3), flops={"bf16_tensor": 1.5e6}, bytes=0.1e6, name="gemm")
    """, "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=1)
    data = json.loads((pytester.path / "out.json").read_text())
    assert data["schema"] == "solgate/1"
    assert {"id", "started_at", "commit", "host", "profile", "plugin", "python"} <= set(data["run"])
    names = [m["name"] for m in data["measurements"]]
    assert names == ["default", "default-2", "gemm"]
    gemm = data["measurements"][2]
    for field in ("test", "name", "profile", "backend", "flops", "bytes", "seconds", "samples", "noise", "t_sol",
                  "sol", "mfu", "bound", "tflops", "gbps", "verdict", "reason", "budget", "baseline", "telemetry"):
        assert field in gemm, field
    assert gemm["test"] == "test_kernels.py::test_many" and gemm["profile"] == "synthetic"
    assert gemm["backend"] == "cpu" and gemm["bound"] == "compute" and gemm["flops"] == {"bf16_tensor": 1.5e6}
    assert gemm["t_sol"] == pytest.approx(0.75e-3)
    # The fake clock times the kernel; the flush between samples takes real time, so a busy machine gets fewer.
    assert gemm["seconds"] == pytest.approx(1e-3, rel=0.15) and len(gemm["samples"]) >= 5
    assert gemm["budget"]["min"] == 0.5 and gemm["verdict"] == "pass"


def test_triton_interpreter_is_not_gated(suite, monkeypatch, pytester):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton")
    # In process: tests/conftest.py imports Triton once, before any run; the interpreter is chosen
    # by TRITON_INTERPRET when a kernel is decorated, so this run's kernels are interpreted.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = suite("""
        import pytest
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def copy_kernel(x, y, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)

        x = torch.arange(256, dtype=torch.float32)
        y = torch.empty_like(x)

        @pytest.mark.sol(min=0.99)
        def test_interpreted(sol):
            sol.measure(lambda: copy_kernel[(2,)](x, y, 256, BLOCK=128), bytes=2048)
            sol.measure(lambda: busy(1e-3), bytes=0.1e6, name="torch", gate=False)  # launches no Triton kernel
            assert torch.equal(x, y)

        def test_fp8_kernel_checked_on_a_cpu(sol):
            # The synthetic profile has no fp8 roof: gated, an error; in the interpreter, a note.
            sol.measure(lambda: copy_kernel[(2,)](x, y, 256, BLOCK=128), bytes=1e3, flops={"fp8_tensor": 1e6, "fp32": 1e3})
    """, "--sol-json=out.json", "--sol-max-time=3")  # a budget load cannot end before three samples
    result.assert_outcomes(passed=2)
    kernel, reference, fp8 = json.loads((pytester.path / "out.json").read_text())["measurements"]
    assert kernel["backend"] == "triton-interpreter" and kernel["verdict"] == "not-gated"
    assert "TRITON_INTERPRET=1" in kernel["reason"]
    # The torch reference in the same session is a real CPU measurement, and says so. On a busy
    # machine the time budget can run out before ten samples: then the row must say it is noisy.
    assert reference["backend"] == "cpu" and reference["seconds"] > 0.9e-3 and len(reference["samples"]) >= 3
    assert len(reference["samples"]) >= 10 or reference["noisy"]
    assert fp8["verdict"] == "not-gated" and fp8["flops"] == {"fp8_tensor": 1e6, "fp32": 1e3}
    assert any("flops in fp8_tensor left out of the score: profile 'synthetic' has no roof" in n for n in fp8["notes"])
    # The summary says once why these rows are not gated, and what a GPU does instead.
    # (prose under the table wraps at 80 columns: read it as one sentence)
    prose = " ".join(line.strip() for line in result.stdout.lines)
    assert ("3 not-gated; 2 kernel(s) ran in the Triton interpreter (no GPU here), whose timings mean nothing, so "
            "they are not gated (their correctness is); on a GPU the same command times and gates them") in prose


def test_speed_of_light_of_declared_work_without_timing(suite, pytester):
    result = suite("""
        def test_floor(sol):
            floor = sol.speed_of_light(bytes=2e6, flops={"fp32": 1e6})
            assert floor.bound == "memory" and abs(floor.t_sol - 2e-3) < 1e-12
            assert floor.intensity == 0.5 and floor.ridge is not None
            assert sol.measurements == []  # nothing ran, nothing recorded

        def test_floor_of_a_precision_the_profile_lacks(sol):
            sol.speed_of_light(flops={"fp8_tensor": 1e9})
    """, fake_clock=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["test_kernels.py:*: flops declared in 'fp8_tensor', which profile 'synthetic' lacks*"])


@pytest.mark.parametrize(
    "marker, fragment",
    [
        ("0.85", "keyword arguments only"),
        ("min=1.2", "min=1.2): must be in (0, 1]"),
        ("min='0.8'", "min='0.8'): must be a number"),
        ("mfu=0", "mfu=0): must be in (0, 1]"),
        ("max_regression=-0.1", "max_regression=-0.1): must be in [0, 1)"),
        ("minimum=0.5", "unknown argument 'minimum'"),
        ("min={'h100*': 1.5}", "]=1.5): must be in (0, 1"),
    ],
)
def test_marker_errors_are_usage_errors_before_any_test_runs(suite, marker, fragment):
    result = suite(f"""
        import pytest

        def test_first():
            raise AssertionError("must not run")

        @pytest.mark.sol({marker})
        def test_k(sol):
            sol.measure(lambda: busy(1e-4), bytes=1)
    """, fake_clock=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: test_kernels.py::test_k: @pytest.mark.sol*{fragment}*"])
    result.stdout.no_fnmatch_line("*must not run*")


@pytest.mark.parametrize(
    "option, fragment",
    [
        ("--sol-gate=maybe", "--sol-gate='maybe' is not one of: fail, warn, off"),
        ("--sol-above-one=ok", "--sol-above-one='ok' is not one of: fail, warn"),
        ("--sol-noise=abc", "--sol-noise='abc' is not a number"),
        ("--sol-noise=2", "--sol-noise='2': give a fraction in (0, 1)"),
        ("--sol-min-time=-1", "--sol-min-time='-1': give seconds >= 0"),
        ("--sol-max-time=0", "--sol-max-time='0': give seconds > 0"),
        ("--sol-max-regression=1.5", "--sol-max-regression='1.5'"),
        ("--sol-device=tpu", "--sol-device='tpu' is not auto, cpu, cuda or cuda:N"),
        ("--sol-ceilings=best", "--sol-ceilings='best' is not one of: datasheet, measured"),
        ("--sol-precision=fp7", "--sol-precision='fp7' is not one of"),
        ("--sol-profile=nope.toml", "nope.toml: no such profile file"),
        ("--sol-profile=h100-sxn", "no profile with id 'h100-sxn'"),
    ],
)
def test_bad_option_values_are_one_line_usage_errors(pytester, option, fragment):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(option, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{fragment}*"])
    result.stderr.no_fnmatch_line("*Traceback*")


def test_bad_profile_file_is_a_usage_error_naming_file_and_field(pytester):
    pytester.makefile(".toml", bad='id = "x"\nname = "X"\nkind = "gpu"\nmemory_bandwidth_gbps = 0\n[peak_tflops]\nfp32 = 1\n')
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--sol-profile=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: bad.toml: field 'memory_bandwidth_gbps' must be a finite number > 0, got 0"])


def test_declared_precision_the_profile_lacks(suite):
    result = suite("""
        def test_fp8(sol):
            sol.measure(lambda: busy(1e-4), flops={"fp8_tensor": 10})
    """, fake_clock=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*: flops declared in 'fp8_tensor', which profile 'synthetic' lacks; it has: fp32, bf16_tensor"])


def test_fixture_used_after_its_test(suite):
    result = suite("""
        kept = []

        def test_keep(sol):
            kept.append(sol)

        def test_reuse():
            kept[0].measure(lambda: busy(1e-4), bytes=1e3)
    """, fake_clock=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*sol.measure called after the body of test_kernels.py::test_keep returned*; "
                                 "it would never be judged: call it inside the test body"])


def test_report_swallowing_a_test_path_is_explained(pytester):
    pytester.mkdir("suite")
    result = pytester.runpytest("--sol-report", "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sol-report took 'suite' as its output path, a folder: name the report's file, e.g. --sol-report=suite/sol-report.html*"])


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="CPU calibration measures through torch")
def test_cpu_profile_is_measured_once_and_cached(suite, pytester):
    from fake_gpu import StandIn

    from pytest_solgate.measure import calibrate, devices
    from pytest_solgate.measure.platform import Platform

    # The session's calibration is the plugin's (calibrate.cpu_profile), on this CPU's real torch
    # figures and its L1 cache's, measured briefly. The three repetitions repeat the first one's
    # figures: repetitions that disagree (this machine under load) are rightly never cached
    # (test_calibrate.py tests that), and 3 x 2.4 s of real calibration made this test fail under load.
    figures = []

    def brief_figures(torch):
        figures[:] = figures or [calibrate.measure_cpu(torch, seconds=0.01)]
        return figures[0]

    def cpu_profile(cache_dir, announce, readers=None):
        l1 = {name: size for name, size in devices.cpu_data_caches().items() if name == "L1"}
        return calibrate.cpu_profile(
            cache_dir, announce, readers=readers,
            calibration=lambda torch: calibrate.repeated_cpu_calibration(torch, measure=brief_figures),
            recheck=brief_figures, caches=lambda torch: calibrate.measure_cpu_caches(torch, 1, l1))

    body = """
        def test_cpu(sol):
            assert sol.profile.kind == "cpu" and sol.profile.ceilings == "measured"
            assert str(sol.device) == "cpu"
            sol.measure(lambda: busy(1e-3), bytes=1e3, flops=1e3)
    """
    first = suite(body, "--sol-json=out.json", profile=False, fake_clock=True,
                  plugins=[StandIn(Platform(cpu_profile=cpu_profile))])
    first.assert_outcomes(passed=1)
    # Cached per user, shared by every clone (tests/conftest.py gives each test its own).
    first.stdout.fnmatch_lines(["solgate: measuring this CPU's ceilings once, best of 3 repetitions (cached in *user-cache/profiles/cpu-*.toml) ..."])
    cached = list((Path(os.environ["SOLGATE_CACHE_DIR"]) / "profiles").glob("cpu-*.toml"))
    assert len(cached) == 1
    text = cached[0].read_text()
    assert 'ceilings = "measured"' in text and "fp32 =" in text and "fp64 =" in text and "triad" in text
    assert "best of 3 repetitions, spread (max-min)/median: bandwidth" in text
    assert calibrate.load_profile(cached[0]).caches[0].name == "L1"
    measured = json.loads((pytester.path / "out.json").read_text())["measurements"]
    assert [m["profile"] for m in measured] == [cached[0].stem]  # scored against it
    second = suite(body, profile=False, fake_clock=True, plugins=[StandIn(Platform(cpu_profile=cpu_profile))])
    second.assert_outcomes(passed=1)
    second.stdout.no_fnmatch_line("*measuring this CPU*")


def test_importing_the_plugin_imports_no_heavy_library():
    code = (
        "import sys, pytest_solgate, pytest_solgate.plugin, pytest_solgate.engine, pytest_solgate.cli; "
        "heavy = [m for m in ('torch', 'triton', 'pynvml', 'numpy') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_run_that_never_measures_never_imports_torch(pytester):
    pytester.makepyfile("import sys\n\ndef test_x():\n    assert 'torch' not in sys.modules\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_measuring_a_function_of_no_tensors_on_the_cpu_imports_no_torch(suite):
    # the integrity checks read torch's mode stacks only where torch is loaded: importing it cost
    # 2 to 3 s of every such pytest process (a bisection runs dozens)
    result = suite("""
        import sys

        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e3)
            assert "torch" not in sys.modules
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(passed=1)


def test_plugin_is_registered_through_the_entry_point(pytester):
    # In process: an inner session loads its plugins afresh, the entry points' too (no -p names it).
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*pytest-solgate*", "*--sol-report*", "*--sol-baseline*"])


def test_rotating_inputs_call_each_buffer_set_in_turn(suite, pytester):
    import json

    result = suite("""
        calls = []

        def test_rotating(sol):
            kernels = [lambda i=i: (calls.append(i), busy(1e-4)) for i in range(3)]
            m = sol.measure(kernels, bytes=1e5)
            assert calls[:7] == [0, 1, 2, 0, 1, 2, 0] and m.seconds > 0

        def test_not_callables(sol):
            sol.measure([1, 2], bytes=1e5)
    """, "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*sol.measure needs a zero-argument callable (buffer set 0 of the list), got int*"])
    (m,) = json.loads((pytester.path / "out.json").read_text())["measurements"]
    assert any(note.startswith("rotating inputs: 3 buffer sets") for note in m["notes"])


def test_small_sol_values_keep_their_digits_and_a_gpu_profile_on_a_cpu_warns(suite):
    result = suite("""
        def test_tiny(sol):
            sol.measure(lambda: busy(1e-3), bytes=5e3)  # SOL 0.005 on the synthetic 1 GB/s profile
    """, fake_clock=True)
    result.assert_outcomes(passed=1)
    # 0.004-0.005 by the time this machine shows; never the "0.00" of two fixed decimals
    result.stdout.fnmatch_lines(["* 0.00[3-5]? *test_kernels.py::test_tiny*"])
    result.stdout.no_fnmatch_line("* 0.00 *test_tiny*")
    result = suite("""
        def test_on_gpu_ceilings(sol):
            sol.measure(lambda: busy(1e-3), bytes=5e5)
    """, "--sol-profile=h100-sxm", fake_clock=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--sol-profile=h100-sxm is a GPU profile but measurements run on the CPU*"])


def test_the_summary_fits_an_80_column_terminal(suite, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = suite("""
        import pytest

        @pytest.mark.parametrize("size", [4096, 16777216])
        def test_a_kernel_with_a_rather_long_descriptive_name_and_parameters(sol, size):
            sol.measure(lambda: busy(1e-3), bytes=0.4e6)
            sol.measure(lambda: busy(2e-3), bytes=0.4e6, name="torch", gate=False)
    """, fake_clock=True)
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines
    table = lines[next(i for i, line in enumerate(lines) if "SOL summary" in line) + 1:]
    table = table[:next(i for i, line in enumerate(table) if line.startswith("2 recorded"))]
    # Two lines or more per measurement (how many depends on the digits this run's timings have):
    # its id, then its figures wrapped at words; none wider than the terminal.
    assert sum(line.startswith("test_kernels.py::") for line in table) == 4 and len(table) >= 8, table
    assert max(len(line) for line in table) <= 80, table
    # Ids too long for the line are shortened in the middle of the function's name: the parameters stay.
    assert table[0].startswith("test_kernels.py::test_a_kernel_") and table[0].endswith("_parameters[4096] [default]")
    assert "…" in table[0] and len(table[0]) <= 80
    assert table[1].startswith("    recorded  SOL 0.")


SPEEDUP_SUITE = """
import pytest

@pytest.mark.sol(speedup={"synth*": 1.8})
def test_twice_as_fast(sol):
    sol.measure(lambda: busy(1e-3), bytes=1e3, name="triton")
    sol.measure(lambda: busy(2e-3), bytes=1e3, name="torch", gate=False)

@pytest.mark.sol(speedup=1.8, reference="torch")
def test_not_fast_enough(sol):
    sol.measure(lambda: busy(1.6e-3), bytes=1e3, name="triton")
    sol.measure(lambda: busy(2e-3), bytes=1e3, name="torch", gate=False)
    sol.measure(lambda: busy(5e-3), bytes=1e3, name="eager", gate=False)

@pytest.mark.sol(speedup={"h100*": 1.15})
def test_budget_for_another_gpu(sol):
    sol.measure(lambda: busy(1e-3), bytes=1e3, name="triton")
    sol.measure(lambda: busy(1e-3), bytes=1e3, name="torch", gate=False)

@pytest.mark.sol(speedup=1.2)
def test_which_reference(sol):
    sol.measure(lambda: busy(1e-3), bytes=1e3, name="triton")
    sol.measure(lambda: busy(2e-3), bytes=1e3, name="torch", gate=False)
    sol.measure(lambda: busy(2e-3), bytes=1e3, name="eager", gate=False)
"""


def test_speedup_gates_against_the_reference(suite, pytester):
    # On the fake clock: each call takes exactly what busy() says, so the achieved speedups are
    # exact (2.0 and 1.25) however loaded the machine is (it flaked at "assert 4.058 < 2.2").
    result = suite(SPEEDUP_SUITE, "--sol-json=out.json", "--sol-markdown=out.md", "--sol-benchmark-action=bench.json",
                   "--junitxml=junit.xml", fake_clock=True)
    result.assert_outcomes(passed=2, failed=2)
    data = {(m["test"].split("::")[-1], m["name"]): m for m in json.loads((pytester.path / "out.json").read_text())["measurements"]}
    fast = data[("test_twice_as_fast", "triton")]
    assert fast["verdict"] == "pass" and fast["budget"]["speedup"] == 1.8 and fast["budget"]["reference"] == "torch"
    assert fast["budget"]["achieved_speedup"] == pytest.approx(2.0)
    slow = data[("test_not_fast_enough", "triton")]
    assert slow["verdict"] == "below-budget" and slow["budget"]["achieved_speedup"] == pytest.approx(1.25)
    result.stdout.fnmatch_lines([
        "*test_not_fast_enough 'triton' is 1.*x as fast as 'torch'", "*budget 1.8x on synthetic*too slow*",
        "*test_which_reference: a speedup budget needs one reference: pass reference= one of torch, eager*",
    ])
    assert data[("test_budget_for_another_gpu", "triton")]["verdict"] == "recorded"  # h100* does not match synthetic: nothing judged
    assert "1.8x torch" in (pytester.path / "out.md").read_text()  # the budget column, in every report
    bench = {b["name"]: b for b in json.loads((pytester.path / "bench.json").read_text())}
    assert "x torch (budget 1.8x)" in bench["test_kernels.py::test_twice_as_fast [triton]"]["extra"]
    assert 'name="sol_speedup[triton]"' in (pytester.path / "junit.xml").read_text()


def test_the_calibration_is_announced_before_the_progress_dots(suite, monkeypatch, pytester):
    """A CPU calibration takes seconds: its message stands on its own line before the tests run."""
    from fake_gpu import StandIn

    from pytest_solgate.declare.profiles import HardwareProfile
    from pytest_solgate.measure.platform import Platform

    def calibrating(cache_dir, announce=print, calibration=None, readers=None):
        announce("solgate: measuring this CPU's ceilings once (stand-in) ...")
        return HardwareProfile(id="cpu-standin", name="this CPU", kind="cpu", memory_bandwidth_gbps=1,
                               peak_tflops={"fp32": 0.001}, ceilings="measured")

    result = suite("""
        def test_one(sol):
            sol.measure(lambda: busy(1e-4), bytes=1e3)

        def test_two(sol):
            sol.measure(lambda: busy(1e-4), bytes=1e3)
    """, "--sol-report=r.html", profile=False, fake_clock=True, plugins=[StandIn(Platform(cpu_profile=calibrating))])
    result.assert_outcomes(passed=2)
    # The stand-in profile is on no disk (like a calibration that refused to cache itself): the
    # report still draws its charts from the profile the session scored against.
    page = (pytester.path / "r.html").read_text()
    assert 'aria-label="roofline for cpu-standin"' in page and "No profile file was found" not in page
    lines = result.stdout.lines
    announced = next(i for i, line in enumerate(lines) if "measuring this CPU's ceilings" in line)
    progress = next(i for i, line in enumerate(lines) if line.startswith("test_kernels.py "))
    assert lines[announced].startswith("solgate: ") and announced < progress
    assert lines[progress].startswith("test_kernels.py ..")
