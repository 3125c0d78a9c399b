"""The HTML report in a real browser: Debian's Chromium driven by Playwright.

The report is made by a real pytest run; the page must show its table rows and roofline points,
log no console errors, and load nothing from the network. A screenshot is saved under
test-output/ for a person to look at.
"""

import os
import shutil
from pathlib import Path

import pytest

from test_reports import REPORT_SUITE

# Debian's chromium here and in .ci/run; GitHub's Ubuntu runners ship Google Chrome instead.
CHROMIUM = (os.environ.get("SOLGATE_CHROMIUM") or shutil.which("chromium") or shutil.which("google-chrome")
            or "/usr/bin/chromium")
OUTPUT = Path(__file__).resolve().parent.parent / "test-output"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


class Visit:
    """A page open in headless Chromium, with what it logged as errors and what it fetched from
    anywhere but the file itself."""

    def __init__(self, path: Path):
        from playwright.sync_api import sync_playwright

        self.errors: list[str] = []
        self.requests: list[str] = []
        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", lambda req: self.requests.append(req.url) if not req.url.startswith("file:") else None)
        self.page.goto(path.as_uri())

    def __enter__(self) -> "Visit":
        return self

    def __exit__(self, *exc) -> None:
        self.browser.close()
        self._playwright.stop()


def _browser_available() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return os.path.exists(CHROMIUM)


# CI installs both: there, a missing browser is a failure, not a skip.
pytestmark = pytest.mark.skipif(
    not _browser_available() and not os.environ.get("CI"), reason="needs playwright and Debian's chromium"
)


def test_report_in_chromium(suite, pytester):
    result = suite(REPORT_SUITE + """

@pytest.mark.sol(min=0.3)
def test_gemm(sol):
    sol.measure(lambda: busy(2e-3), bytes=0.2e6, flops=1.5e6, name="fused")
    sol.measure(lambda: busy(3e-3), bytes=0.2e6, flops=1.5e6, name="unfused", gate=False)

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_kernel_with_a_long_parametrized_name_and_a_long_reference(sol, dtype):
    sol.measure(lambda: busy(2e-3), bytes=0.2e6, flops=1.5e6, name="triton-fused-kernel")
    sol.measure(lambda: busy(3e-3), bytes=0.2e6, flops=1.5e6, name="torch-unfused-eager-reference", gate=False)
""", "--sol-report=report.html", subprocess=True, fake_clock=True)  # verdicts independent of the machine's load
    result.assert_outcomes(passed=4, failed=1)
    with Visit(pytester.path / "report.html") as visit:
        page = visit.page
        assert page.locator("#sol-table tbody tr").count() == 9
        assert page.locator("svg.roofline .point.kernel").count() == 5
        assert page.locator("svg.roofline .point.reference").count() == 3  # each joined to its kernel
        assert page.locator("svg.roofline line.link").count() == 3
        assert page.locator("table.bandwidth tr.bar").count() == 1  # test_fast's flop-less reference
        assert page.locator("#sol-table tbody tr").first.get_attribute("data-verdict") == "below-budget"
        title = page.locator("svg.roofline circle.point title").first.text_content()
        assert "FLOP/B" in title and "SOL" in title
        for width in (1280, 1600):  # the reason column is whole on common screens, not scrolled off
            page.set_viewport_size({"width": width, "height": 900})
            clipped = page.evaluate("""() => {
                const section = document.querySelector('#sol-table').closest('section');
                const edge = section.getBoundingClientRect().right;
                return [section.scrollWidth - section.clientWidth,
                        ...[...document.querySelectorAll('td.reason')].map(td => td.getBoundingClientRect().right - edge)];
            }""")
            assert max(clipped) <= 1, (width, clipped)
        # Test ids wrap at their separators only (a <wbr> after each), never inside a word.
        assert page.locator("#sol-table td.test wbr").count() > 0
        assert page.evaluate("getComputedStyle(document.querySelector('td.test')).overflowWrap") == "normal"
        page.locator("#sol-table thead th").nth(5).click()  # the optional sort script works
        assert page.locator("#sol-table").get_attribute("data-sort-dir") == "asc"
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "sol-report.png"), full_page=True)
    assert not visit.errors, visit.errors
    assert not visit.requests, visit.requests
    assert (OUTPUT / "sol-report.png").stat().st_size > 10_000


def test_trend_page_in_chromium(tmp_path):
    """Small multiples: a panel per measurement with its band, budget line, change point and
    hovers; the filter box hides panels; nothing is fetched from the network."""
    from pytest_solgate.record import history
    from pytest_solgate.results import RunInfo
    from solgate_testing import recorded
    from test_cli import solgate

    sols = [0.60, 0.61, 0.59, 0.60, 0.61, 0.60, 0.45, 0.46, 0.44, 0.45, 0.46, 0.45]
    with history.open_store(tmp_path / "h.db") as store:
        for i, sol in enumerate(sols):
            run = RunInfo(id=f"r{i}", started_at=f"2026-11-{i + 1:02d}T00:00:00+00:00", commit=f"{i:040x}",
                          commit_time=f"2026-11-{i + 1:02d}T00:00:00+00:00")
            ms = [recorded(test=f"kernels/test_ops.py::test_{op}[4096]", name=name, profile="h100-sxm", backend="cuda",
                           bytes=1e9, seconds=1e-3 / s, samples=(1e-3 / s,) * 10, t_sol=1e-3, sol=s,
                           ceilings="datasheet", budget={"min": 0.5}, gate=name == "triton")
                  for op, s in (("add", sol), ("softmax", 0.8)) for name in ("triton", "torch")]
            store.record_run(run, ms)
    done = solgate("trend", "-o", str(tmp_path / "sol-trend.html"), "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with Visit(tmp_path / "sol-trend.html") as visit:
        page = visit.page
        panels = page.locator(".panel")
        assert panels.count() == 4
        add = page.locator(".panel", has_text="test_add[4096] [triton]")
        assert add.locator("circle.point").count() == 12 and add.locator("polygon.band").count() == 1
        assert add.locator("line.budget").count() == 1 and add.locator("line.change").count() == 1
        assert "stepped at " + f"{6:040x}"[:10] in add.locator(".meta").text_content()
        hover = add.locator("circle.point title").nth(6).text_content()
        assert hover.startswith(f"{6:040x}"[:10] + " · 2026-11-07 · SOL 0.450 · ") and hover.endswith("pass")
        ticks = [float(t) for t in add.locator("svg text").all_text_contents()[:6] if t.replace(".", "").isdigit()]
        assert ticks[0] == 0 and all(round(t * 100) % 5 == 0 for t in ticks)  # round ticks, not 0.26 / 0.52
        page.fill("#filter", "softmax torch")
        assert [panels.nth(i).is_visible() for i in range(4)].count(True) == 1
        page.fill("#filter", "")
        assert all(panels.nth(i).is_visible() for i in range(4))
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "sol-trend.png"), full_page=True)
    assert not visit.errors, visit.errors
    assert not visit.requests, visit.requests


# --- charts that read at a glance: geometry checked in the browser --------------------------------

GEOMETRY = """() => {
  const found = [];
  const box = (e) => e.getBoundingClientRect();
  const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  document.querySelectorAll("section").forEach((s) => {
    if (s.scrollWidth > s.clientWidth + 1) found.push(["section overflows its card", s.id, s.scrollWidth, s.clientWidth]);
  });
  document.querySelectorAll("svg.roofline, svg.trend").forEach((svg) => {
    const frame = box(svg);
    const texts = [...svg.querySelectorAll("text")].filter((t) => t.textContent.trim());
    texts.forEach((t) => {
      const b = box(t);
      if (b.left < frame.left - 0.5 || b.right > frame.right + 0.5 || b.top < frame.top - 0.5 || b.bottom > frame.bottom + 0.5)
        found.push(["text cut at the chart's edge", t.textContent]);
    });
    for (let a = 0; a < texts.length; a++) for (let b = a + 1; b < texts.length; b++)
      if (overlap(box(texts[a]), box(texts[b]))) found.push(["texts overlap", texts[a].textContent, texts[b].textContent]);
    const marks = [...svg.querySelectorAll(".point")];
    marks.forEach((m, i) => marks.slice(i + 1).forEach((later) => {
      if (m.classList.contains("kernel") && later.classList.contains("reference") && overlap(box(m), box(later)))
        found.push(["a gated point under a reference", m.querySelector("title").textContent]);
    }));
  });
  return found;
}"""


def _legend_names_every_mark(page, chart: str, legend: str) -> list[str]:
    """Each verdict colour and each kind of mark drawn in ``chart`` has an entry in ``legend``."""
    return page.evaluate("""([chart, legend]) => {
      const missing = [];
      document.querySelectorAll(chart).forEach((svg) => {
        const key = svg.closest("section, .panel").querySelector(legend) || document.querySelector(legend);
        const named = new Set([...key.querySelectorAll("[data-verdict]")].map((e) => e.dataset.verdict));
        const marks = new Set([...key.querySelectorAll("[data-mark]")].map((e) => e.dataset.mark));
        svg.querySelectorAll("[data-verdict]").forEach((p) => { if (!named.has(p.dataset.verdict)) missing.push(p.dataset.verdict); });
        for (const kind of ["kernel", "reference", "link", "roof", "series", "band", "budget", "change"])
          if (svg.querySelector("." + kind) && !marks.has(kind)) missing.push(kind);
      });
      return [...new Set(missing)];
    }""", [chart, legend])


def _at_common_widths(page, chart: str, legend: str):
    """At 1280 and 1600 px: nothing overlaps or is cut, every mark is in the legend; yields each
    width for checks of the page's own."""
    for width in (1280, 1600):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate(GEOMETRY) == [], width
        assert _legend_names_every_mark(page, chart, legend) == [], width
        yield width


def _gpu_like_run():
    """A run as a GPU runner records it (no timing here): a failing kernel with a long reason, a
    gated point on the very spot of its reference, roofs with equal and close peaks (h100-sxm:
    fp32 and fp64_tensor both 67 TFLOP/s), and a long command line."""
    from pytest_solgate.declare.profiles import find_profile
    from pytest_solgate.results import RunInfo
    from solgate_testing import recorded

    profile = find_profile("h100-sxm")
    long_reason = ("test_vector_add[fp32] 'triton' SOL 0.62 < budget 0.85 on h100-sxm: 2.08 TB/s of 3.35 TB/s "
                   "(memory-bound), median 1.55 ms ±0.4% over 200 samples; check the block size and the "
                   "vectorised loads (16-byte global loads) before lowering the budget")
    common = dict(profile="h100-sxm", backend="cuda", ceilings="datasheet", samples=(1e-3,) * 20, noise=0.004)

    def m(test, name, sol, intensity, tflops, verdict, gate=True, bound="memory", reason="", budget=0.85):
        return recorded(test=f"kernels/tests/test_sol.py::{test}", name=name, sol=sol, intensity=intensity,
                        tflops=tflops, gbps=tflops * 1e3 / intensity, bound=bound, verdict=verdict, gate=gate,
                        flops={"fp32": 1e9}, bytes=1e9 / intensity, reason=reason or f"{verdict}: {name}",
                        budget={"min": budget if gate else None}, **common)

    measurements = [
        m("test_vector_add[fp32]", "triton", 0.62, 0.083, 0.173, "below-budget", reason=long_reason),
        m("test_vector_add[fp32]", "torch", 0.63, 0.083, 0.175, "not-gated", gate=False),
        m("test_softmax[bf16]", "triton", 0.91, 0.625, 1.9, "pass"),
        m("test_softmax[bf16]", "torch", 0.55, 0.625, 1.15, "not-gated", gate=False),
        m("test_layernorm[fp32]", "triton", 0.80, 1.0, 2.68, "ambiguous"),
        m("test_fused_gemm", "triton-fused", 0.71, 1365.0, 700.0, "pass", bound="compute"),
        m("test_fused_gemm", "torch-unfused", 0.52, 1365.0, 515.0, "not-gated", gate=False, bound="compute"),
    ]
    run = RunInfo(id="r" * 32, started_at="2026-12-03T10:00:00+00:00", commit="c" * 40, branch="main", host="gpu-runner-7",
                  device="NVIDIA H100 80GB HBM3", profile="h100-sxm", ceilings="datasheet", plugin="0.1.0", python="3.11",
                  command="pytest kernels --sol-baseline=0123456789abcdef0123456789abcdef01234567 "
                          "--sol-json=sol-gate/sol-results.json --sol-markdown=sol-gate/sol-summary.md "
                          "--sol-github-summary --sol-report=sol-gate/sol-report.html -n 8")
    return run, measurements, {"h100-sxm": profile}


def test_the_report_reads_at_a_glance_at_1280_and_1600_px(tmp_path):
    from pytest_solgate.report import html

    run, measurements, profiles = _gpu_like_run()
    (tmp_path / "report.html").write_text(html.render_report(run, measurements, profiles))
    with Visit(tmp_path / "report.html") as visit:
        page = visit.page
        for width in _at_common_widths(page, "svg.roofline", ".roofline-legend"):
            # The failing row's reason is whole inside its card.
            reason = page.locator("tr.failed td.reason").first.bounding_box()
            card = page.locator("#results").bounding_box()
            assert reason["x"] + reason["width"] <= card["x"] + card["width"], width
            # The command breaks between its words, never inside --sol-report=...
            pieces = page.evaluate("""() => {
                const arg = [...document.querySelectorAll("dd.command .arg")].find((a) => a.textContent.startsWith("--sol-report="));
                const range = document.createRange(); range.selectNodeContents(arg.firstChild);
                return range.getClientRects().length;
            }""")
            assert pieces == 1, width
        # Every gated point is named on the chart; references are told apart by their shape.
        assert page.locator("svg.roofline circle.point.kernel").count() == 4
        labels = page.locator("svg.roofline text.point-label").all_text_contents()
        assert sorted(labels) == sorted(["test_vector_add[fp32] [triton]", "test_softmax[bf16] [triton]",
                                         "test_layernorm[fp32] [triton]", "test_fused_gemm [triton-fused]"])
        assert page.locator("svg.roofline text.roof-label.memory").text_content() == "memory 3.35 TB/s"
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "sol-report-gpu-like.png"), full_page=True)
    assert not visit.errors, visit.errors


def test_the_trend_page_reads_at_a_glance_at_1280_and_1600_px(tmp_path):
    """Same-day commits (their dates would collide), a tiny SOL (long y tick labels), verdict
    colours: the axis names commits, each colour is in the legend, nothing is cut or overlaps."""
    from pytest_solgate.record import history
    from pytest_solgate.results import RunInfo
    from solgate_testing import recorded
    from test_cli import solgate

    sols = [0.00015, 0.00014, 0.00016, 0.00015, 0.00015, 0.00009, 0.00009, 0.0001]
    with history.open_store(tmp_path / "h.db") as store:
        for i, sol in enumerate(sols):
            run = RunInfo(id=f"r{i}", started_at=f"2026-12-03T0{i}:00:00+00:00", commit=f"{i + 1:x}" * 40,
                          commit_time=f"2026-12-03T0{i}:00:00+00:00")
            store.record_run(run, [recorded(test="kernels/test_sol.py::test_tiny", name="triton", sol=sol,
                                            verdict="ambiguous" if i == 6 else "pass", budget={"min": None})])
    done = solgate("trend", "-o", str(tmp_path / "trend.html"), "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with Visit(tmp_path / "trend.html") as visit:
        page = visit.page
        for _width in _at_common_widths(page, "svg.trend", ".legend"):  # the checks are in the helper
            pass
        ticks = page.locator("svg.trend text.x-tick").all_text_contents()
        assert ticks[0] == "1111111" and all(len(t) == 7 for t in ticks)  # short shas, not colliding dates
        assert page.locator("svg.trend text.axis-title").all_text_contents() == ["commit (oldest to newest)", "SOL"]
        assert "2026-12-03" in page.locator("svg.trend circle.point title").first.text_content()  # the date on hover
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "sol-trend-same-day.png"), full_page=True)
    assert not visit.errors, visit.errors


def test_the_trend_axis_stops_at_the_physical_limit_and_names_every_commit(tmp_path):
    """SOL 1.9 at one commit once stretched the axis to 2 and the band to 1.5, and only 4 of 8
    commits were named on the x axis: the axis stops at 1.05 with that point at the top edge and
    marked, the band is clipped inside the plot, and every commit has a tick that names it on hover
    under the labels (every few commits, each at its own commit)."""
    from pytest_solgate.record import history
    from pytest_solgate.results import RunInfo
    from solgate_testing import recorded
    from test_cli import solgate

    sols = [0.60, 0.62, 0.61, 1.9, 0.60, 0.61, 0.62, 0.60]
    commits = [(f"{i + 1:x}" * 3 + "abc").ljust(40, "0") for i in range(len(sols))]
    with history.open_store(tmp_path / "h.db") as store:
        for i, (sol, commit) in enumerate(zip(sols, commits)):
            run = RunInfo(id=f"r{i}", started_at=f"2026-12-0{i + 1}T00:00:00+00:00", commit=commit,
                          commit_time=f"2026-12-0{i + 1}T00:00:00+00:00")
            store.record_run(run, [recorded(test="kernels/test_sol.py::test_add", name="triton", sol=sol, budget={"min": None})])
    done = solgate("trend", "-o", str(tmp_path / "trend.html"), "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with Visit(tmp_path / "trend.html") as visit:
        page = visit.page
        for _width in _at_common_widths(page, "svg.trend", ".legend"):
            pass
        ticks = [float(t) for t in page.locator("svg.trend text.y-tick").all_text_contents()]
        assert max(ticks) <= 1.05 and 1.0 in ticks, ticks
        geometry = page.evaluate("""() => {
            const svg = document.querySelector("svg.trend");
            const plot = svg.querySelector("rect").getBoundingClientRect();
            const centre = (e) => { const b = e.getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; };
            return {
                top: plot.top, bottom: plot.bottom,
                points: [...svg.querySelectorAll("circle.point")].map((c) => [centre(c)[1], c.querySelector("title").textContent]),
                band: svg.querySelector("polygon.band").getBoundingClientRect().top,
                marks: [...svg.querySelectorAll("g.x-mark")].map((g) => [g.querySelector("line").getBoundingClientRect().left,
                                                                       g.querySelector("title").textContent]),
                labels: [...svg.querySelectorAll("text.x-tick")].map((t) => { const b = t.getBoundingClientRect();
                                                                             return [b.left, b.right, t.textContent]; }),
            };
        }""")
        assert all(geometry["top"] - 0.5 <= y <= geometry["bottom"] + 0.5 for y, _ in geometry["points"])
        assert geometry["band"] >= geometry["top"] - 0.5  # the band is clipped at the axis too
        above = [title for y, title in geometry["points"] if abs(y - geometry["top"]) < 1]
        assert len(above) == 1 and "SOL 1.900" in above[0] and "above the physical limit 1.05" in above[0]
        assert page.locator("svg.trend path.above-mark").count() == 1
        assert "1 above SOL 1.05" in page.locator(".panel .meta").text_content()
        # Every commit on the axis, in order, named on hover; each label at its own commit.
        assert [title.split()[1] for _, title in geometry["marks"]] == [c[:10] for c in commits]
        xs = {title.split()[1][:7]: x for x, title in geometry["marks"]}
        assert len(geometry["labels"]) >= 4
        for left, right, text in geometry["labels"]:
            assert left - 1 <= xs[text] <= right + 1, (text, left, right, xs[text])
    assert not visit.errors, visit.errors


LABELS_BY_THEIR_MARKS = """() => {
  const svg = document.querySelector("svg.roofline");
  const m = svg.getScreenCTM();
  const at = (x, y) => new DOMPoint(x, y).matrixTransform(m);
  const crosses = (b, a, c) => {  // does segment a-c pass through box b (Liang-Barsky)?
    let low = 0, high = 1;
    const dx = c.x - a.x, dy = c.y - a.y;
    for (const [p, q] of [[-dx, a.x - b.left], [dx, b.right - a.x], [-dy, a.y - b.top], [dy, b.bottom - a.y]]) {
      if (p === 0) { if (q < 0) return false; continue; }
      const t = q / p;
      if (p < 0) low = Math.max(low, t); else high = Math.min(high, t);
      if (low > high) return false;
    }
    return true;
  };
  const links = [...svg.querySelectorAll("line.link")].map((l) => [
    at(+l.getAttribute("x1"), +l.getAttribute("y1")), at(+l.getAttribute("x2"), +l.getAttribute("y2"))]);
  return [...svg.querySelectorAll(".point")].map((mark) => {
    const text = svg.querySelector(`text[data-index="${mark.dataset.index}"]`);
    if (!text) return {kind: mark.classList[1], label: null};
    const b = text.getBoundingClientRect(), p = mark.getBoundingClientRect();
    const gap = Math.max(0, b.left - p.right, p.left - b.right) + Math.max(0, b.top - p.bottom, p.top - b.bottom);
    const centre = at(...(mark.tagName === "circle" ? [+mark.getAttribute("cx"), +mark.getAttribute("cy")]
                                                   : [+mark.getAttribute("x") + 6, +mark.getAttribute("y") + 6]));
    const near = (q) => Math.hypot(q.x - centre.x, q.y - centre.y) < 1;
    const crossed = links.filter(([a, c]) => !near(a) && !near(c) && crosses(b, a, c)).length;
    return {kind: mark.classList[1], label: text.textContent, gap, crossed};
  });
}"""


def test_roofline_labels_sit_by_their_marks_and_cross_no_other_link(tmp_path):
    """The references' diamonds had no label, and a label could sit up to eight lines from its
    dot (test_vector_add's, 17 px off, beside a free spot): every mark is named, a kernel within
    three lines of its mark and a reference within five (the fused GEMM's sits under the stacked
    roof labels), and no label crosses a link that is not its own point's."""
    from pytest_solgate.report import html

    run, measurements, profiles = _gpu_like_run()
    (tmp_path / "report.html").write_text(html.render_report(run, measurements, profiles))
    with Visit(tmp_path / "report.html") as visit:
        page = visit.page
        for width in _at_common_widths(page, "svg.roofline", ".roofline-legend"):
            placed = page.evaluate(LABELS_BY_THEIR_MARKS)
            assert len(placed) == 7 and all(p["label"] for p in placed), (width, placed)
            assert sorted(p["label"] for p in placed if p["kind"] == "reference") == ["torch", "torch", "torch-unfused"]
            assert all(p["gap"] <= (39 if p["kind"] == "kernel" else 65) for p in placed), (width, placed)  # 13 px lines
            assert all(p["crossed"] == 0 for p in placed), (width, placed)
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "sol-roofline-labels.png"), full_page=True)
    assert not visit.errors, visit.errors


# --- the longest ids of the kernel suite and a step's rows (issue 44 item 7) ---------------------

# kernels/tests/test_correctness.py's longest parametrized id, as pytest collects it
LONGEST_KERNEL_ID = ("kernels/tests/test_correctness.py::test_a_driver_older_than_the_toolkit_is_a_clear_error[12040-13000-"
                     "toolkit that built the kernel \\(CUDA 13.0\\) is newer than the driver supports \\(CUDA 12.4\\)]")
STEP_TEST = "kernels/tests/test_step.py::test_a_norm_in_a_python_loop_ranks_first"

# Every cell's content inside its cell, no badge or section cut, at the width the page is shown.
NOTHING_CUT = """() => {
  const found = [];
  const box = (e) => e.getBoundingClientRect();
  document.querySelectorAll("table td, table th, .panel h3, .panel .meta").forEach((cell) => {
    const frame = box(cell.closest("td, th, .panel"));
    const range = document.createRange(); range.selectNodeContents(cell);
    for (const r of range.getClientRects())
      if (r.width && (r.right > frame.right + 0.5 || r.left < frame.left - 0.5)) {
        found.push(["beyond its cell", cell.className, cell.textContent.slice(0, 50)]); break;
      }
  });
  document.querySelectorAll(".badge").forEach((b) => {
    if (b.scrollWidth > b.clientWidth + 1 || box(b).right > box(b.closest("td, summary, div")).right + 0.5)
      found.push(["badge cut", b.textContent]);
  });
  document.querySelectorAll("section, .panel").forEach((s) => {
    if (s.scrollWidth > s.clientWidth + 1) found.push(["overflows its card", s.id || s.className, s.scrollWidth, s.clientWidth]);
  });
  return found;
}"""


def _long_id_run(tmp_path):
    """A step's record and its operator series (as engine/steps.py makes them) and the kernel
    suite's longest ids, each with a verdict a CPU run gives them."""
    from types import SimpleNamespace

    from pytest_solgate.declare.profiles import load_profile
    from pytest_solgate.engine import steps
    from pytest_solgate.measure.step_profile import OperatorWork, RunReading, StepProfile
    from pytest_solgate.results import RunInfo
    from pytest_solgate.score import step_breakdown
    from solgate_testing import SYNTHETIC_PROFILE, changed, recorded

    (tmp_path / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    profile = load_profile(tmp_path / "synthetic.toml")
    attention, norm, mm = (("aten::scaled_dot_product_attention", "Block.attention"), ("aten::layer_norm", "Block.norm2"),
                           ("aten::addmm", "Block.mlp.fc1"))
    work = {attention: OperatorWork(flops={"fp32": 4e5}, bytes=1e5), norm: OperatorWork(bytes=2e5),
            mm: OperatorWork(flops={"fp32": 8e5}, bytes=1e5)}
    reading = RunReading(seconds=6e-3, operators={attention: 1e-3, norm: 3e-3, mm: 1.5e-3},
                         calls={attention: 1, norm: 256, mm: 1}, idle=0.5e-3)
    measured = StepProfile(runs=(reading,) * 6, work=work, device="cpu", mode="profiler-cpu", warmup_calls=1,
                           started_at=0.0, finished_at=1.0)
    context = SimpleNamespace(profile=profile, ceilings="measured", environment={"host": "h"}, device_name="cpu",
                              device=SimpleNamespace(kind="cpu"))
    step = steps.records(context, STEP_TEST, "slow-norm", measured, step_breakdown.score_step(measured, profile), gate=True, top=5)
    step = [changed(m, verdict="recorded", reason="no budget for synthetic and no baseline") for m in step]
    kernels = [
        recorded(test=LONGEST_KERNEL_ID, name="default", verdict="not-gated", reason="gate=False: recorded for reference"),
        recorded(test="kernels/tests/test_sol.py::test_cuda_bias_gelu_residual", name="cuda-bias-gelu-residual",
                 verdict="not-gated", reason="TRITON_INTERPRET=1: the Triton interpreter's timings mean nothing"),
        recorded(test="kernels/tests/test_correctness.py::test_cuda_kernel_compiles_for_ampere_and_hopper", name="default",
                 verdict="ambiguous", reason="ambiguous: within the noise"),
    ]
    run = RunInfo(id="r" * 32, started_at="2026-12-05T10:00:00+00:00", commit="c" * 40, profile="synthetic", ceilings="measured")
    return run, [*step, *kernels], {"synthetic": profile}


def test_the_longest_ids_and_a_steps_rows_overlap_nothing_at_1280_and_1600_px(tmp_path):
    """Long test ids once ran over the measurement names beside them, and the table pushed the
    verdict badges and reasons out of its card (`not-gatec`) at 1280 px."""
    from pytest_solgate.report import html

    run, measurements, profiles = _long_id_run(tmp_path)
    (tmp_path / "report.html").write_text(html.render_report(run, measurements, profiles))
    page = _nothing_cut_at_common_widths(tmp_path / "report.html", "sol-report-long-ids.png")
    assert page.count(">recorded</span></td>") == 4  # the step's record and its three operators, in the table


def test_the_trend_page_with_the_longest_ids_overlaps_nothing_at_1280_and_1600_px(tmp_path):
    from pytest_solgate.record import history
    from pytest_solgate.results import RunInfo
    from test_cli import solgate

    _, measurements, _ = _long_id_run(tmp_path)
    with history.open_store(tmp_path / "h.db") as store:
        for i in range(4):
            run = RunInfo(id=f"r{i}", started_at=f"2026-12-0{i + 1}T00:00:00+00:00", commit=f"{i + 1:x}" * 40,
                          commit_time=f"2026-12-0{i + 1}T00:00:00+00:00")
            store.record_run(run, measurements)
    done = solgate("trend", "-o", str(tmp_path / "trend.html"), "--history", str(tmp_path / "h.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _nothing_cut_at_common_widths(tmp_path / "trend.html", "sol-trend-long-ids.png")


def _nothing_cut_at_common_widths(path, screenshot: str) -> str:
    """Open ``path`` at 1280 and 1600 px: nothing beyond its cell or card, no text overlapping in a
    chart, no console error; a screenshot for a person; the page's HTML."""
    with Visit(path) as visit:
        page = visit.page
        for width in (1280, 1600):
            page.set_viewport_size({"width": width, "height": 900})
            assert page.evaluate(NOTHING_CUT) == [], width
            assert page.evaluate(GEOMETRY) == [], width
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / screenshot), full_page=True)
        html = page.content()
    assert not visit.errors, visit.errors
    return html


def test_a_long_reason_takes_three_lines_at_1280_px_and_a_test_that_failed_is_marked(tmp_path):
    """At 1280 px a long reason is cut to three lines (the whole text in its title and in the
    measurement's details), escaped; a test that failed its own assertion has its row marked."""
    from pytest_solgate.record.outcome import TestOutcomes
    from pytest_solgate.report import html

    run, measurements, profiles = _gpu_like_run()
    long_reason = " ".join(["not-gated: <b>\"interpreted\"</b> & timed on the CPU, so nothing is said of its speed;"] * 6)
    measurements[1] = measurements[1].replace(judgement=measurements[1].judgement.replace(reason=long_reason))
    outcomes = TestOutcomes({"failed": 1, "passed": 4}, {measurements[1].test: "test failed"})
    (tmp_path / "report.html").write_text(html.render_report(run, measurements, profiles, outcomes))
    with Visit(tmp_path / "report.html") as visit:
        page = visit.page
        page.set_viewport_size({"width": 1280, "height": 900})
        cells = page.evaluate("""() => [...document.querySelectorAll('#sol-table td.reason')].map(td => {
            const clamp = td.querySelector('.clamp');
            return {lines: clamp.getBoundingClientRect().height / parseFloat(getComputedStyle(clamp).lineHeight),
                    title: clamp.title, text: clamp.textContent, tags: clamp.children.length};
        })""")
        longest = max(cells, key=lambda c: len(c["text"]))
        assert longest["text"] == longest["title"] == long_reason and longest["tags"] == 0  # whole, escaped
        assert max(c["lines"] for c in cells) <= 3.05, [round(c["lines"], 1) for c in cells]
        assert "pytest: 1 failed, 4 passed" in page.locator("header .tests.failing").text_content()
        row = page.locator("#sol-table tbody tr", has=page.locator(".badge.test-failed"))
        assert row.count() == 1 and row.get_attribute("class") == "failed"
        assert row.locator("td.reason a.more").get_attribute("href") == row.locator("td.test a").get_attribute("href")
    assert not visit.errors, visit.errors
    assert not visit.requests, visit.requests
