"""Rendering over finished records, and the reports as a pytest run writes them."""

import json
import re
import xml.etree.ElementTree as ElementTree

import pytest

from pytest_solgate import results
from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.record import schema
from pytest_solgate.report import ci_formats, html, markdown, roofline, terminal
from pytest_solgate.results import RunInfo
from pytest_solgate.results_json import decode

PROFILE = HardwareProfile(id="synthetic", name="Synthetic", kind="cpu", memory_bandwidth_gbps=1,
                          peak_tflops={"fp32": 0.001}, ceilings="measured", source="tests")
RUN = RunInfo(id="r" * 32, started_at="2026-12-02T10:00:00+00:00", commit="c" * 40, branch="main", host="box",
              device="cpu", profile="synthetic", ceilings="measured", plugin="0.1.0", python="3.11")


def record(test="t.py::test_k", name="default", verdict=results.PASS, sol=0.5, intensity=0.1, tflops=1e-4, **extra):
    fields = dict(
        test=test, name=name, profile="synthetic", backend="cpu", flops={"fp32": 1e5}, bytes=1e6, seconds=1e-3,
        samples=(1e-3, 1.1e-3, 0.9e-3) * 4, noise=0.01, t_sol=0.5e-3, sol=sol, mfu=0.1, bound="memory",
        tflops=tflops, gbps=1.0, intensity=intensity, ridge=1.0, verdict=verdict, reason=f"reason for {verdict}",
        budget={"min": 0.4}, trend=({"commit": "a" * 40, "sol": 0.45}, {"commit": "c" * 40, "sol": sol}),
    )
    fields.update(extra)
    return decode(fields)


EVERY_VERDICT = [record(test=f"t.py::test_{i}", verdict=v) for i, v in enumerate(results.VERDICTS)]


def test_every_verdict_appears_failures_first():
    page = html.render_report(RUN, EVERY_VERDICT, {"synthetic": PROFILE})
    rows = re.findall(r'<tr class="[^"]*" data-verdict="([^"]+)"', page)
    assert rows[:3] == ["below-budget", "regressed", "above-sol"] and sorted(rows) == sorted(results.VERDICTS)
    for verdict in results.VERDICTS:
        assert f"reason for {verdict}" in page
    assert page.count('class="point kernel"') == len(results.VERDICTS)
    text = "\n".join(terminal.render(EVERY_VERDICT))
    assert text.index("below-budget") < text.index("pass")


def test_roofline_point_lands_where_the_arithmetic_says():
    # 1 GB/s and 1 GFLOP/s: ridge at 1 FLOP/B. Axes: x from 1e-2 to 1e1, y from 1e6 to 1e10 FLOP/s.
    m = record(intensity=0.1, tflops=1e-4)  # 0.1 FLOP/B, 1e8 FLOP/s
    chart = roofline.roofline(PROFILE, [m])
    (point,) = chart.points
    frame = chart.frame
    assert point.x == pytest.approx(frame.left + frame.plot_width / 3, abs=0.01)
    assert point.y == pytest.approx(frame.top + frame.plot_height / 2, abs=0.01)
    (roof,) = chart.roofs
    ridge = roof.points.split()[1]
    assert ridge == f"{round(frame.left + frame.plot_width * 2 / 3, 2)},{round(frame.top + frame.plot_height / 4, 2)}"
    page = html.render_report(RUN, [m], {"synthetic": PROFILE})
    assert f'cx="{point.x}" cy="{point.y}"' in page


def test_data_movement_goes_on_the_bandwidth_chart_and_references_join_their_kernel():
    copy = record(test="t.py::test_copy", intensity=None, tflops=0.0, flops={}, gbps=PROFILE.memory_bandwidth_gbps / 2)
    nothing = record(test="t.py::test_empty", intensity=None, tflops=0.0, flops={}, bytes=0.0)
    kernel = record(test="t.py::test_gemm", name="triton")
    reference = record(test="t.py::test_gemm", name="torch", gate=False, intensity=0.2, tflops=5e-5)
    chart = roofline.roofline(PROFILE, [copy, nothing, kernel, reference])
    # References first, kernels last: a gated point is drawn on top of a reference on the same spot.
    assert [(p.kind, p.index) for p in chart.points] == [("reference", 3), ("kernel", 2)]
    reference_point, kernel_point = chart.points
    (link,) = chart.links  # the kernel joined to its own test's reference
    assert (link.x1, link.y1, link.x2, link.y2) == (kernel_point.x, kernel_point.y, reference_point.x, reference_point.y)
    # Each named beside its mark: the kernel by test and name, its reference by name (issue 31).
    assert kernel_point.label.text == "test_gemm [triton]" and reference_point.label.text == "torch"
    (bar,) = chart.bandwidth.bars
    assert bar.label == "t.py::test_copy [default]" and bar.fraction == 0.5 and bar.value.endswith("(50%)")
    (left_out,) = chart.left_out  # no bytes: on neither chart, and why
    assert left_out.startswith("t.py::test_empty [default]") and "no bytes" in left_out
    page = html.render_report(RUN, [copy, nothing, kernel, reference], {"synthetic": PROFILE})
    assert page.count('class="point kernel"') == 1 and page.count('class="point reference"') == 1
    assert page.count('class="link"') == 1 and page.count('<tr class="bar kernel">') == 1


HOSTILE = [
    "t.py::test_x[<script>alert(1)</script>]",
    "t.py::test_q[\"quoted\" & 'single' & ampersand]",
    "t.py::test_long[" + "x" * 5000 + "]",
    "t.py::test_ünïcödé[α-β-🚀]",
]


def test_hostile_ids_are_escaped():
    ms = [record(test=t, name=t[-20:], reason=t) for t in HOSTILE]
    import dataclasses

    page = html.render_report(dataclasses.replace(RUN, command="pytest <script>"), ms, {"synthetic": PROFILE})
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&#34;quoted&#34; &amp; &#39;single&#39;" in page
    assert "x" * 5000 in page and "α-β-🚀" in page
    assert len(re.findall(r"<script\b", page)) == 1  # our own small, inline sorting script
    md = markdown.render(RUN, ms)
    assert "<script>" not in md and "&lt;script&gt;" in md


def test_no_reference_to_another_host():
    page = html.render_report(RUN, EVERY_VERDICT, {"synthetic": PROFILE})
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"@import|url\(", page)
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    # In-page anchors, and each sparkline's link to its panel on the trend page beside the report.
    assert all(ref.startswith(("#", "sol-trend.html#panel-")) for ref in refs), refs


def test_an_empty_run_says_so():
    page = html.render_report(RUN, [], {})
    assert "This run measured nothing" in page
    assert "_This run measured nothing._" in markdown.render(RUN, [])
    assert terminal.render([]) == ["no SOL measurements in this run"]


def test_markdown_table_and_counts():
    md = markdown.render(RUN, EVERY_VERDICT + [record(test="t.py::test_pipe[a|b]")])
    assert "| test | name | bound |" in md and "**1** below-budget" in md
    assert "| t.py::test_pipe[a\\|b] |" in md
    assert "<details><summary>Why they failed</summary>" in md


def test_benchmark_action_format():
    """github-action-benchmark's customBiggerIsBetter: name, unit, value, range and extra, each
    from the measurement (range is the 95 % half-width in SOL units; unknown noise gives none)."""
    entries = json.loads(ci_formats.benchmark_action([record(), record(test="t.py::test_q", sol=0.25, noise=float("inf"))]))
    assert entries == [
        {"name": "t.py::test_k [default]", "unit": "SOL", "value": 0.5, "range": "±0.0050",
         "extra": "median 1 ms ±1.0%; profile synthetic; memory-bound; verdict pass"},
        {"name": "t.py::test_q [default]", "unit": "SOL", "value": 0.25, "range": "",
         "extra": "median 1 ms ±?; profile synthetic; memory-bound; verdict pass"},
    ]


def test_json_has_no_nan_and_keeps_the_contract():
    data = json.loads(schema.dump(RUN, [record(noise=float("inf"))]))
    assert data["schema"] == "solgate/1" and data["measurements"][0]["noise"] is None
    assert data["measurements"][0]["trend"][0]["sol"] == 0.45


REPORT_SUITE = """
import pytest

@pytest.mark.sol(min=0.5)
def test_fast(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.9e6, flops=1e5)
    sol.measure(lambda: busy(1e-3), bytes=0.1e6, gate=False, name="ref")

@pytest.mark.sol(min=0.95)
def test_slow(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.5e6, flops=2e5)
"""


def test_a_pytest_run_writes_every_report(suite, pytester, monkeypatch):
    summary = pytester.path / "step-summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = suite(REPORT_SUITE, "--sol-report=out/report.html", "--sol-markdown=out/summary.md",
                   "--sol-benchmark-action=out/bench.json", "--sol-github-summary", "--junitxml=out/junit.xml",
                   fake_clock=True)
    result.assert_outcomes(passed=1, failed=1)
    page = (pytester.path / "out" / "report.html").read_text()
    assert page.count('class="point kernel"') == 2 and page.count('<tr class="bar reference">') == 1
    assert page.count('<tr class="failed"') + page.count('<tr class=""') == 3
    assert "On neither chart" not in page  # the flop-less reference is on the bandwidth chart
    assert (pytester.path / "out" / "summary.md").read_text() in summary.read_text()
    assert summary.read_text().startswith("# earlier step\n")
    bench = json.loads((pytester.path / "out" / "bench.json").read_text())
    assert {b["name"] for b in bench} == {"test_kernels.py::test_fast [default]", "test_kernels.py::test_fast [ref]",
                                          "test_kernels.py::test_slow [default]"}
    cases = {c.get("name"): c for c in ElementTree.parse(pytester.path / "out" / "junit.xml").iter("testcase")}
    properties = {p.get("name"): p.get("value") for p in cases["test_slow"].iter("property")}
    assert properties["sol_verdict[default]"] == "below-budget" and properties["sol_bound[default]"] == "memory"
    assert 0.45 < float(properties["sol[default]"]) < 0.55 and float(properties["sol_seconds[default]"]) > 0
    assert not list(pytester.path.glob("out/.*.tmp"))  # atomic writes leave no temporary behind


def test_report_of_a_run_that_measured_nothing(suite, pytester):
    result = suite("def test_plain():\n    pass\n", "--sol-report=r.html")
    result.assert_outcomes(passed=1)
    assert "This run measured nothing" in (pytester.path / "r.html").read_text()


def test_a_report_that_cannot_be_written_does_not_change_verdicts(suite, pytester):
    (pytester.path / "blocked").write_text("a file, not a folder")
    result = suite(REPORT_SUITE, "--sol-report=blocked/report.html", fake_clock=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["solgate: cannot write the HTML report to *blocked/report.html*; choose another path"])


def test_a_rendering_failure_leaves_the_previous_report_and_says_so(tmp_path):
    from pytest_solgate.report import outputs

    target = tmp_path / "r.html"
    target.write_text("previous report")

    def broken():
        raise RuntimeError("template exploded")

    said = outputs.write_one(target, "HTML report", broken)
    assert target.read_text() == "previous report"
    assert said == ("solgate: the HTML report could not be rendered (RuntimeError: template exploded); the previous "
                    "file, if any, is untouched")
    assert outputs.write_one(target, "HTML report", lambda: "new report") == f"solgate: HTML report written to {target}"
    assert target.read_text() == "new report"


def test_each_kernel_row_shows_its_torch_reference():
    ours = record(test="t.py::test_gemm", name="triton", sol=0.8, seconds=1e-3)
    torch_ref = record(test="t.py::test_gemm", name="torch", sol=0.4, seconds=2e-3, gate=False, verdict=results.NOT_GATED)
    other = record(test="t.py::test_other", name="default")
    from pytest_solgate.report.table import row

    assert row(ours, [ours, torch_ref, other]).reference == "torch 0.40, 2x"
    assert row(torch_ref, [ours, torch_ref]).reference == "-" and row(other, [ours, torch_ref, other]).reference == "-"
    page = html.render_report(RUN, [ours, torch_ref, other], {"synthetic": PROFILE})
    assert "torch 0.40, 2x" in page
    assert "torch 0.40, 2x" in markdown.render(RUN, [ours, torch_ref])
    assert any("torch 0.40, 2x" in line for line in terminal.render([ours, torch_ref]))


def test_the_terminal_table_fits_80_columns():
    long_id = "kernels/test_attention.py::test_flash_attention_forward[bf16-causal-seqlen8192-heads32-dim128]"
    ms = [record(test=long_id, verdict=results.BELOW_BUDGET), record(test="t.py::test_k", name="torch", gate=False)]
    wide = terminal.render(ms)
    assert max(len(line) for line in wide) > 80  # the table as is
    narrow = terminal.render(ms, width=80)
    assert max(len(line) for line in narrow) <= 80
    # shortened in the middle of the function's name, the folders dropped first, the parameters kept
    assert len(narrow[0]) <= 80 and narrow[0].startswith("test_attention.py::test_f") and "…" in narrow[0]
    assert narrow[0].endswith("[bf16-causal-seqlen8192-heads32-dim128] [default]")
    assert narrow[1].startswith("    below-budget  SOL 0.50 (budget >= 0.40)")
    assert terminal.render(ms, width=400) == wide  # a wide terminal keeps one row per measurement


def test_terminal_ids_are_shortened_at_the_end_and_kept_apart_by_their_parameters():
    ids = [f"kernels/tests/test_sol.py::test_a_very_long_kernel_name_that_will_not_fit_in_forty_columns[{p}]"
           for p in ("fp32", "bf16")]
    short = [terminal.short_id(test, "triton", 60) for test in ids]
    assert short[0] != short[1] and all(len(line) <= 60 for line in short)
    assert short[0].startswith("test_sol.py::test_a_very") and short[0].endswith("_columns[fp32] [triton]"), short
    assert "…" in short[0]
    assert terminal.short_id("t.py::test_k", "default", 80) == "t.py::test_k [default]"
    assert "…" in terminal.short_id("t.py::test_k[" + "x" * 90 + "]", "default", 40)


def test_at_40_columns_names_that_share_a_long_prefix_still_read_apart():
    names = [f"kernels/test_attention.py::test_flash_attention_forward_with_a_long_name_{end}" for end in ("fp32", "bf16")]
    short = [terminal.short_id(test, "default", 40) for test in names]
    assert short[0] != short[1] and all(len(line) <= 40 for line in short), short
    params = [f"t.py::test_k[{'x' * 60}-{end}]" for end in ("fp32", "bf16")]  # the parameters alone are wider
    short = [terminal.short_id(test, "default", 40) for test in params]
    assert short[0] != short[1] and all(len(line) <= 40 for line in short), short


def test_the_summary_under_the_table_fits_80_columns():
    noisy = [record(test=f"t.py::test_k[{i}]", noisy=True, noise=0.03) for i in range(3)]
    for width in (None, 200, 80):
        said = terminal.render(noisy, width=width)[5:]  # the header, the rule and 3 rows before it
        assert said and max(len(line) for line in said) <= 80, said
    text = " ".join(line.strip() for line in terminal.render(noisy))
    assert "3 of 3 measurements noisy" in text and "a wider --sol-noise on a shared machine" in text


def test_markdown_cuts_cells_at_words_and_keeps_whole_reasons():
    from pytest_solgate.report.markdown import MAX_CELL

    reason = "test_k SOL 0.21 < budget 0.85 on h100-sxm: " + "the kernel moved 1.34 GB in 4.2 ms over 136 samples " * 4
    long_id = "t.py::test_" + "very_long_name_" * 12
    text = markdown.render(RUN, [record(test=long_id, verdict=results.BELOW_BUDGET, reason=reason)])
    cell = text.split("\n| ")[2].split(" | ")[0]  # the first cell of the first row
    assert cell.endswith("…") and len(cell) <= MAX_CELL and not cell[:-1].endswith("very_long_nam")
    assert "- " + reason.strip().replace("<", "&lt;") in text  # the details hold the whole reason, not "over 136 samp..."


def test_trend_panel_geometry():
    from pytest_solgate.report import trend

    assert trend.nice_ticks(0.61) == [0, 0.2, 0.4, 0.6, 0.8]
    assert trend.nice_ticks(1.03) == [0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert trend.nice_ticks(0.0042) == [0, 0.001, 0.002, 0.003, 0.004, 0.005]
    band = trend.noise_band([0.5, 0.52, 0.48, 0.5, 0.9])
    assert band[:3] == [None, None, None] and band[3][0] < 0.48 < 0.52 < band[3][1] and band[4][1] < 0.9
    points = [{"commit": f"{i:040x}", "commit_time": f"2026-11-{i + 1:02d}", "sol": 0.5, "seconds": 1e-3, "verdict": "pass"}
              for i in range(30)]
    shown = trend.panel("t.py::test_k", "default", "h100-sxm", points, [f"{25:040x}", f"{2:040x}"], 0.4, last=10)
    assert shown.shown == 10 and shown.total == 30 and len(shown.points) == 10
    assert [c for _, c in shown.changes] == [f"{25:040x}"]  # a change point before the shown range is not drawn
    # The x axis names commits (short shas: two commits of one day would share a date label).
    assert shown.budget_y is not None and shown.x_labels[-1][1] == f"{29:040x}"[:7]
    assert trend.panel_id("t.py::test_k[a b]", "x", "p") != trend.panel_id("t.py::test_k[a-b]", "x", "p")


def test_roofline_labels_never_touch_and_stay_inside_the_plot():
    """Roof labels at least 14 px apart (11 px text: the fp32 and fp64 labels touched at 12), the
    memory roof named along its slope, every kernel named beside its point without two names
    overlapping (by the estimated widths; tests/test_browser.py measures the real ones)."""
    from pytest_solgate.declare.profiles import find_profile

    profile = find_profile("h100-sxm")
    kernels = [record(test=f"t.py::test_kernel_number_{i}", name="triton", profile="h100-sxm", intensity=x, tflops=t)
               for i, (x, t) in enumerate([(0.08, 0.17), (0.09, 0.2), (0.1, 0.19), (0.6, 1.9), (1.0, 2.7), (1300, 700)])]
    chart = roofline.roofline(profile, kernels)
    ys = sorted(r.label_y for r in chart.roofs)
    assert all(b - a >= roofline.ROOF_LABEL_GAP for a, b in zip(ys, ys[1:]))
    assert chart.memory_label.text == "memory 3.35 TB/s" and -90 < chart.memory_label.angle < 0  # rising to the right
    boxes = []
    frame = chart.frame
    for p in chart.points:
        assert p.label is not None, p.title
        width = len(p.label.text) * roofline.CHAR_WIDTH
        x1 = p.label.x - {"start": 0, "end": width, "middle": width / 2}[p.label.anchor]  # right, left, above or below
        box = (x1, p.label.y - 10, x1 + width, p.label.y + 3)
        assert frame.left <= box[0] and box[2] <= frame.left + frame.plot_width, p.label
        assert all(box[2] <= o[0] or o[2] <= box[0] or box[3] <= o[1] or o[3] <= box[1] for o in boxes), p.label
        boxes.append(box)


def test_the_reference_column_writes_a_tiny_sol_as_the_sol_column_does():
    """A CPU row read 0.0043 beside 'torch 0.00, 0.01x': one number format for both."""
    from pytest_solgate.report.table import row

    ours = record(test="t.py::test_add", name="triton", sol=0.0043, seconds=1.0)
    torch_ref = record(test="t.py::test_add", name="torch", sol=0.0021, seconds=0.01, gate=False, verdict=results.NOT_GATED)
    shown = row(ours, [ours, torch_ref])
    assert shown.sol == "0.0043" and shown.reference == "torch 0.0021, 0.01x"


def test_every_report_says_pytests_failures_beside_the_verdicts(suite, pytester):
    """A test that measured and then failed its own assertion (or errored in teardown) is a failed
    run in every report, and its measurement row says so: never a grey not-gated row that reads as fine."""
    from test_cli import solgate

    result = suite(REPORT_SUITE + """

def test_wrong_answer(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.5e6, flops=2e5, gate=False)
    assert 1 + 1 == 3, "the kernel's output is wrong"

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_breaks_in_teardown(sol, broken_teardown):
    sol.measure(lambda: busy(1e-3), bytes=0.5e6, flops=2e5, gate=False, name="td")

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass
""", "--sol-report=report.html", "--sol-markdown=summary.md", "--sol-json=run.json", fake_clock=True)
    result.assert_outcomes(passed=2, failed=2, errors=1, skipped=1)
    page = (pytester.path / "report.html").read_text()
    assert 'class="tests failing">pytest: 2 failed, 1 error, 2 passed, 1 skipped</span>' in page  # the header
    rows = re.findall(r'<tr class="([^"]*)" data-verdict="([^"]+)" id="row-\d+">\s*<td class="test"><a[^>]*>(.+?)</a>', page)
    assert rows[0] == ("failed", "below-budget", "test_kernels.py::<wbr>test_slow")
    marked = {test: (css, verdict) for css, verdict, test in rows if "test_wrong" in test or "test_breaks" in test}
    assert marked == {"test_kernels.py::<wbr>test_wrong_answer": ("failed", "not-gated"),
                      "test_kernels.py::<wbr>test_breaks_in_teardown": ("failed", "not-gated")}
    assert page.count('<span class="badge test-failed"') == 2
    assert ">test failed</span>" in page and ">test error</span>" in page
    assert [css for css, _, _ in rows][:3] == ["failed"] * 3  # failures first, whichever failed
    summary = (pytester.path / "summary.md").read_text()
    assert "pytest: **2 failed, 1 error, 2 passed, 1 skipped**" in summary
    assert "not-gated, test failed |" in summary and "not-gated, test error |" in summary
    document = json.loads((pytester.path / "run.json").read_text())
    assert document["run"]["tests"] == {
        "passed": 2, "failed": 2, "errors": 1, "skipped": 1, "xfailed": 0, "xpassed": 0,
        "failures": {"test_kernels.py::test_slow": "test failed", "test_kernels.py::test_wrong_answer": "test failed",
                     "test_kernels.py::test_breaks_in_teardown": "test error"}}
    result.stdout.fnmatch_lines(["*not-gated, test failed*test_wrong_answer*"])  # the terminal's table
    # solgate/1 stays one format: the new file and an old one (no "tests") are both imported.
    old = dict(document, run={k: v for k, v in document["run"].items() if k != "tests"})
    (pytester.path / "old.json").write_text(json.dumps(old))
    for name in ("run.json", "old.json"):
        done = solgate("import", name, "--history", "imported.db", cwd=pytester.path)
        assert done.returncode == 0, done.stderr
    bad = dict(document, run={**document["run"], "tests": {"failed": -1}})
    (pytester.path / "bad.json").write_text(json.dumps(bad))
    done = solgate("import", "bad.json", "--history", "imported.db", cwd=pytester.path)
    assert done.returncode != 0 and "run.tests.failed" in done.stdout + done.stderr
