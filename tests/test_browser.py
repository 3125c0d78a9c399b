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
    from playwright.sync_api import sync_playwright

    result = suite(REPORT_SUITE + """

@pytest.mark.sol(min=0.3)
def test_gemm(sol):
    sol.measure(lambda: busy(2e-3), bytes=0.2e6, flops=1.5e6, name="fused")
    sol.measure(lambda: busy(3e-3), bytes=0.2e6, flops=1.5e6, name="unfused", gate=False)
""", "--sol-report=report.html", subprocess=True)
    result.assert_outcomes(passed=2, failed=1)
    page_path = pytester.path / "report.html"
    errors, requests = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda req: requests.append(req.url) if not req.url.startswith("file:") else None)
        page.goto(page_path.as_uri())
        assert page.locator("#sol-table tbody tr").count() == 5
        assert page.locator("svg.roofline circle.point").count() == 4
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
        browser.close()
    assert not errors, errors
    assert not requests, requests
    assert (OUTPUT / "sol-report.png").stat().st_size > 10_000
