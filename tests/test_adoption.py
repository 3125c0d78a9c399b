"""What a kernel engineer trips on when adopting the plugin in a repository of their own (issue 23):
no silent footguns, and the small things each report gets right. Real pytest runs (pytester), the
real ``solgate`` command and real git repositories; verdicts that depend on time run on the fake clock.
"""

import json
import os

import pytest

from solgate_testing import FAKE_CLOCK_KERNELS, SYNTHETIC_PROFILE, git, init_repo, recorded

# --- no silent footguns --------------------------------------------------------------------------


def test_work_without_bytes_warns_and_says_so_in_the_record(suite, pytester):
    result = suite("""
        def test_copy(sol):
            sol.measure(lambda: busy(1e-3), flops=1e3)

        def test_declared_both(sol):
            sol.measure(lambda: busy(1e-3), flops=1e3, bytes=1e5)
    """, "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*test_copy 'default' declares flops= but no bytes=*scored as compute-bound*pass bytes=*"])
    notes = {m["test"].split("::")[-1]: m["notes"] for m in json.loads((pytester.path / "out.json").read_text())["measurements"]}
    assert any("no bytes=" in n for n in notes["test_copy"])
    assert not any("no bytes=" in n for n in notes["test_declared_both"])


@pytest.mark.parametrize("glob, close", [("H100", "'h100'"), ("h100-sxn", "'h100-sxm'"), ("a100-*-80gb", None)])
def test_a_budget_glob_that_matches_no_profile_is_a_usage_error_at_collection(suite, glob, close):
    result = suite(f"""
        import pytest

        def test_first():
            raise AssertionError("must not run")

        @pytest.mark.sol(min={{"h100*": 0.8, {glob!r}: 0.8}})
        def test_k(sol):
            sol.measure(lambda: busy(1e-4), bytes=1)
    """)
    if close is None:  # a glob that does match profiles ('a100-pcie-80gb', 'a100-sxm4-80gb') is fine
        result.assert_outcomes(failed=1, passed=1)  # the tests ran: test_first fails as it says
        return
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: test_kernels.py::test_k: @pytest.mark.sol(min={{'{glob}': ...}}): the glob "
                                 f"'{glob}' matches no known profile id*did you mean {close}*"])
    result.stdout.no_fnmatch_line("*must not run*")


def test_a_measured_profile_id_is_a_valid_budget_glob(suite):
    result = suite("""
        import pytest

        @pytest.mark.sol(min={"cpu-*": 0.1, "h100-measured-*": 0.5})
        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e6)
    """, fake_clock=True)
    result.assert_outcomes(passed=1)


def test_a_row_with_no_budget_on_this_profile_says_so(suite, pytester):
    result = suite("""
        import pytest

        @pytest.mark.sol(min={"h100*": 0.99})
        def test_elsewhere(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.1e6)
    """, "--sol-markdown=out.md", "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=1)
    [m] = json.loads((pytester.path / "out.json").read_text())["measurements"]
    assert m["budget"]["min"] is None and m["budget"]["unmatched"] == ["min"]
    assert m["reason"].startswith("no budget on synthetic") and "min= globs match other profiles only" in m["reason"]
    assert "none on synthetic" in (pytester.path / "out.md").read_text()
    result.stdout.fnmatch_lines(["*none on synthetic*recorded*test_elsewhere*"])


def test_triton_without_a_driver_gets_a_hint(suite, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = suite("""
        def test_kernel(sol):
            # What triton raises on a machine without a GPU when the interpreter is off.
            raise RuntimeError("0 active drivers ([]). There should only be one.")

        def test_other_error():
            raise RuntimeError("something else")
    """)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*solgate: Triton found no GPU*", "*set TRITON_INTERPRET=1 before triton is imported*"])
    assert result.stdout.str().count("Triton found no GPU driver") == 1


SUBDIR_TEST = FAKE_CLOCK_KERNELS + """
def test_k(sol):
    sol.measure(lambda: busy(SECONDS), bytes=1e6)
"""


def _run(pytester, cwd, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--sol-device=cpu",
                           "--sol-min-time=0.01", "--sol-max-time=0.2", *args],
                          cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})


def test_history_keys_are_relative_to_the_git_top_and_old_keys_still_give_baselines(pytester):
    """Run from the top (rootdir = top) and from a subdirectory without an ini file (rootdir = the
    subdirectory): both record 'kernels/test_k.py::test_k'. A history written before keys were
    made relative to the git top holds 'test_k.py::test_k' for the run from the subdirectory, and
    it still serves as the baseline."""
    from pytest_solgate.record import history

    top = pytester.path
    init_repo(top)
    (top / "kernels").mkdir()
    (top / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    (top / "kernels" / "test_k.py").write_text(SUBDIR_TEST.replace("SECONDS", "1e-3"))
    git(top, "add", ".")
    git(top, "commit", "-q", "-m", "one")
    profile = f"--sol-profile={top / 'synthetic.toml'}"
    for cwd in (top, top / "kernels"):
        done = _run(pytester, cwd, profile, "kernels/test_k.py" if cwd == top else "test_k.py")
        assert done.returncode == 0, done.stdout + done.stderr
    db = top / ".solgate" / "history.db"
    with history.open_store(db) as store:
        assert store.tests() == ["kernels/test_k.py::test_k"]
    # An old history: the subdirectory run recorded under its rootdir-relative id.
    db.unlink()
    with history.open_store(db) as store:
        from pytest_solgate.results import RunInfo

        commit = git(top, "rev-parse", "HEAD")
        for i in range(3):
            store.record_run(RunInfo(id=f"old{i}", started_at=f"2026-11-0{i + 1}T00:00:00+00:00", commit=commit),
                             [recorded(test="test_k.py::test_k", sol=1.0, seconds=1e-3, t_sol=1e-3,
                                       samples=(1e-3,) * 10, noise=0.001)])
    (top / "kernels" / "test_k.py").write_text(SUBDIR_TEST.replace("SECONDS", "2e-3"))  # twice as slow
    done = _run(pytester, top / "kernels", profile, "test_k.py", "--sol-json=out.json")
    assert done.returncode == 1, done.stdout + done.stderr  # regressed against the old key's runs
    [m] = json.loads((top / "kernels" / "out.json").read_text())["measurements"]
    assert m["test"] == "kernels/test_k.py::test_k"
    assert m["verdict"] == "regressed" and m["baseline"]["runs"] == 3


# --- the small things --------------------------------------------------------------------------


def test_tiny_sol_keeps_its_digits_in_history_junit_and_html(suite, pytester):
    from test_cli import solgate

    result = suite("""
        def test_tiny(sol):
            sol.measure(lambda: busy(1e-3), bytes=360.0)
    """, "--sol-history=h.db", "--junitxml=junit.xml", "--sol-report=r.html", fake_clock=True)
    result.assert_outcomes(passed=1)
    listing = solgate("history", "--history", str(pytester.path / "h.db"), cwd=pytester.path)
    assert listing.returncode == 0, listing.stderr
    assert " 0.00036 " in listing.stdout and "0.000 " not in listing.stdout
    assert 'name="sol[default]" value="0.00036"' in (pytester.path / "junit.xml").read_text()
    page = (pytester.path / "r.html").read_text()
    assert "SOL 0.00036" in page and "SOL 0.000<" not in page and "SOL 0.000 " not in page


def test_history_pattern_matches_the_measurement_name_it_shows(tmp_path):
    from pytest_solgate.record import history
    from pytest_solgate.results import RunInfo
    from test_cli import solgate

    with history.open_store(tmp_path / "h.db") as store:
        store.record_run(RunInfo(id="r1", started_at="2026-12-01T00:00:00+00:00", commit="a" * 40), [
            recorded(test="kernels/test_sol.py::test_gemm", name="triton-fused"),
            recorded(test="kernels/test_sol.py::test_gemm", name="torch-unfused"),
            recorded(test="kernels/test_sol.py::test_add", name="triton"),
        ])
    listed = solgate("history", "*-fused*", "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()[1:]
    assert len(lines) == 1 and lines[0].endswith("kernels/test_sol.py::test_gemm [triton-fused]")
    by_test = solgate("history", "test_gemm", "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert len(by_test.stdout.splitlines()[1:]) == 2


def test_a_reference_shows_no_budget_and_an_impossible_one_gets_a_note(suite, pytester):
    result = suite("""
        import pytest

        @pytest.mark.sol(min=0.3)
        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6, name="kernel")
            sol.measure(lambda: busy(1e-3), bytes=0.6e6, name="torch", gate=False)
            sol.measure(lambda: busy(1e-3), bytes=1.2e6, name="cached", gate=False)
    """, "--sol-json=out.json", "--sol-markdown=out.md", fake_clock=True)
    result.assert_outcomes(passed=1)
    data = {m["name"]: m for m in json.loads((pytester.path / "out.json").read_text())["measurements"]}
    assert data["torch"]["reason"] == "gate=False: recorded for reference, not judged"
    assert "note: SOL 1.20 > 1.05 on synthetic is impossible" in data["cached"]["reason"]
    rows = {line.split("|")[2].strip(): line for line in (pytester.path / "out.md").read_text().splitlines()
            if line.startswith("| ") and "test_k" in line}
    budget_cell = 6  # | test | name | bound | time | achieved | SOL | budget | ...
    assert [rows[n].split("|")[budget_cell + 1].strip() for n in ("kernel", "torch", "cached")] == ["&gt;= 0.30", "-", "-"]


def test_the_cpu_timer_is_named_in_the_json(suite, pytester):
    result = suite("""
        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e5)
    """, "--sol-json=out.json", fake_clock=True)
    result.assert_outcomes(passed=1)
    [m] = json.loads((pytester.path / "out.json").read_text())["measurements"]
    assert m["timing_mode"] == "thread-cpu-time"  # a busy kernel on its thread alone (the fake clock)


def test_count_flops_says_when_it_counted_nothing(suite):
    result = suite("""
        import torch

        def test_softmax(sol):
            x = torch.empty(64, 64, device="meta")
            assert sol.count_flops(torch.softmax, x, -1) == {}

        def test_matmul(sol):
            x = torch.empty(64, 64, device="meta")
            assert sol.count_flops(torch.mm, x, x) == {"fp32": 2 * 64 ** 3}
    """, subprocess=True)  # torch's flop counter must not be imported, then unloaded, in this process
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*test_softmax: sol.count_flops counted 0 FLOPs: FlopCounterMode counts only "
                                 "matmuls, convolutions and attention*"])


def test_solgate_sol_knows_the_profile_measured_here(tmp_path):
    from pytest_solgate.declare.profiles import HardwareProfile
    from pytest_solgate.measure import calibrate
    from test_cli import solgate

    init_repo(tmp_path)
    measured = HardwareProfile(id="cpu-0a1b2c3d4e", name="this CPU", kind="cpu", memory_bandwidth_gbps=20,
                               peak_tflops={"fp32": 0.1}, ceilings="measured")
    calibrate.write_profile(calibrate.cpu_profile_path(tmp_path / ".solgate", "0a1b2c3d4e"), measured)
    (tmp_path / "sub").mkdir()
    done = solgate("sol", "--bytes", "2e9", "--profile", "cpu-0a1b2c3d4e", cwd=tmp_path / "sub")
    assert done.returncode == 0, done.stderr
    assert "cpu-0a1b2c3d4e" in done.stdout and "100 ms" in done.stdout


def test_a_damaged_calibration_cache_does_not_fail_the_budget_glob_check(suite, pytester):
    (pytester.path / ".solgate" / "profiles").mkdir(parents=True)
    (pytester.path / ".solgate" / "profiles" / "cpu-broken.toml").write_text("id = \n")
    result = suite("""
        import pytest

        @pytest.mark.sol(min={"h100*": 0.8})
        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e6)
    """, fake_clock=True)
    result.assert_outcomes(passed=1)


def test_a_cpu_glob_typo_is_offered_this_cpus_id(suite):
    """'cpu_*' for 'cpu-*': the message offers the respelled glob and this CPU's id (difflib alone
    found nothing close to 'cpu_' in 'cpu-c99b8b40d6' and suggested writing 'h100*')."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.measure import calibrate

    cpu_id = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    result = suite("""
        import pytest
        import torch

        @pytest.mark.sol(min={"cpu_*": 0.5})
        def test_k(sol):
            sol.measure(lambda: busy(1e-4), bytes=1)
    """)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*the glob 'cpu_*' matches no known profile id*did you mean 'cpu-*', '{cpu_id}'?*"])
    assert "'h100*'" not in result.stderr.str()
