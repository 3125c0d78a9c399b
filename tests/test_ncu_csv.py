"""Nsight Compute's CSV as ncu writes it (the ncu CSV samples in tests/data), and the child pytest that ncu
runs registering the plugin itself where the project is not installed (issue 35 item 7)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_solgate.measure import ncu

DATA = Path(__file__).parent / "data"


def test_a_details_page_with_sections_and_rule_columns_keeps_every_metric_row():
    """ncu 2023.2+ puts rule columns in the header and writes metric rows without them, ending in
    a comma: 16 fields under 20. Those rows were dropped (`len(row) < len(header)`), and a real
    report with sections read as "names none of" the metrics."""
    text = (DATA / "ncu-details-sections.csv").read_text()
    traffic = ncu.parse_csv(text)
    assert traffic.kernels == 2  # the rule row (empty Metric Name) and the section metrics are not counted
    assert traffic.read_bytes == 805_306_368 + 8_388_608
    assert traffic.write_bytes == 402_653_184 + 4_194_304
    assert traffic.gpu_seconds == pytest.approx((184_224 + 3_168) * 1e-9)


def test_columns_are_found_by_name_where_an_older_ncu_puts_kernel_time_and_nvtx_columns_first():
    traffic = ncu.parse_csv((DATA / "ncu-details-nvtx-2022.csv").read_text())
    assert (traffic.read_bytes, traffic.write_bytes, traffic.gpu_seconds, traffic.kernels) == pytest.approx(
        (8.39e6, 4.19e6, 3.17e-6, 1))


def test_the_raw_page_with_a_units_row_and_trailing_commas():
    traffic = ncu.parse_csv((DATA / "ncu-raw-units.csv").read_text())
    assert (traffic.read_bytes, traffic.write_bytes, traffic.gpu_seconds, traffic.kernels) == pytest.approx(
        (805.31e6 + 8.39e6, 402.65e6 + 4.19e6, (184.22 + 3.17) * 1e-6, 2))


def test_a_quoted_comma_or_newline_in_a_kernel_name_and_output_after_the_table_do_not_shift_columns():
    text = (DATA / "ncu-details-sections.csv").read_text()
    text = text.replace('"triton_poi_fused_add_0"', '"triton_poi_fused_add_0<float,\n 3>"')
    text += "some output of the profiled process\n"
    assert ncu.parse_csv(text).read_bytes == 805_306_368 + 8_388_608


def test_a_details_page_without_a_metric_value_column_is_a_failed_profile():
    text = '"ID","Kernel Name","Metric Name","Metric Unit"\n"0","k","dram__bytes_read.sum","byte",\n'
    with pytest.raises(ncu.NcuFailed, match="has no Metric Value column"):
        ncu.parse_csv(text)


SOL_TEST = """
def test_copy(sol):
    import torch
    x = torch.ones(1 << 10)
    y = torch.empty_like(x)
    sol.measure(lambda: y.copy_(x), bytes=2 * x.numel() * 4)
"""


@pytest.mark.slow
def test_the_child_pytest_registers_the_plugin_where_no_entry_point_does(tmp_path):
    """On the GPU machine the project is not installed: no entry point registers the plugin, and
    the child that ncu runs ended on "unrecognized arguments: --sol-no-save" (exit 4). Here no
    entry point is loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD) and PYTHONPATH names no checkout. Nor
    does PYTEST_PLUGINS name this suite's own plugins (tests/conftest.py's idle machine): the child
    could not import them from there."""
    from solgate_testing import SYNTHETIC_PROFILE

    (tmp_path / "test_child.py").write_text(SOL_TEST)
    # A profile handed in: without one the child calibrates this CPU (15 s here, under the device
    # lock that the suite's other worker then waits on), which is not this test's subject.
    (tmp_path / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_PLUGINS", ncu.CHILD_VARIABLE)}
    environ.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", SOLGATE_STATE_DIR=str(tmp_path / ".solgate"),
                   SOLGATE_CACHE_DIR=str(tmp_path / ".solgate"))
    env = ncu.child_environment("test_child.py::test_copy", "default", environ)
    args = ncu.child_command("test_child.py::test_copy", tmp_path, "cpu", None)
    at = args.index("no:solgate") - 1
    assert args[at:at + 4] == ["-p", "no:solgate", "-p", "pytest_solgate.plugin"]
    done = subprocess.run(args + ["--sol-max-time=0.05", "--sol-min-time=0", "--sol-profile=synthetic.toml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # This checkout's package, whatever else is installed.
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(ncu.__file__).resolve().parents[2])
    unregistered = subprocess.run([sys.executable, *args[1:at], *args[at + 4:]], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
    assert unregistered.returncode == 4 and "--sol-no-save" in unregistered.stderr


def test_an_ncu_child_run_finishes_without_failing_the_session(tmp_path, monkeypatch):
    """Run.finish says whether the session fails: in an --sol-ncu child (which records nothing) it
    is False, not a bare None."""
    from pytest_solgate.results_json import decode
    from pytest_solgate.run import Run
    from pytest_solgate.support.settings import parse_settings
    from solgate_testing import RECORD, init_repo

    init_repo(tmp_path)
    run = Run(parse_settings({}), rootdir=tmp_path, invocation_dir=tmp_path, command="pytest", history_source="",
              announce=print, warn=print, warn_at_start=print)
    monkeypatch.setenv(ncu.CHILD_VARIABLE, "1")
    run.records.append(decode(RECORD))
    assert run.finish(interrupted=False) is False
