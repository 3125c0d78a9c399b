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
""", "--sol-report=report.html", subprocess=True)
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
    from pytest_solgate import history
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
