"""The outputs, read by real consumers that nobody here wrote: JUnit XML through junitparser,
Markdown through cmarkgfm (GitHub's own renderer) and markdown-it-py, the HTML report and the
trend page through html5lib in strict mode (any parse error raises)."""

import subprocess
import sys

import cmarkgfm
import html5lib
import junitparser
from markdown_it import MarkdownIt

from solgate_testing import FAKE_CLOCK_KERNELS, FAKE_CLOCK_TIMING, SYNTHETIC_PROFILE

BODY = FAKE_CLOCK_KERNELS + '''  # on the fake clock: the verdicts must not depend on the machine's load
import pytest

@pytest.mark.sol(min=0.5)
def test_pass(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.9e6, name="pipes | and <tags> & stuff")

@pytest.mark.sol(min=0.95)
def test_slow(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.4e6)
'''


def run_suite(pytester, *args):
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_k=BODY)
    result = pytester.runpytest(*FAKE_CLOCK_TIMING, "--sol-profile=synthetic.toml", *args)
    result.assert_outcomes(passed=1, failed=1)
    return result


def test_junit_properties_read_by_junitparser(pytester):
    run_suite(pytester, "--junitxml=junit.xml")
    xml = junitparser.JUnitXml.fromfile(str(pytester.path / "junit.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == {"test_pass", "test_slow"}

    def properties(case):
        (block,) = case.iterchildren(junitparser.Properties)
        return {p.name: p.value for p in block.iterchildren(junitparser.Property)}

    slow = properties(cases["test_slow"])
    assert slow["sol_verdict[default]"] == "below-budget" and float(slow["sol[default]"]) < 0.5
    assert slow["sol_bound[default]"] == "memory" and float(slow["sol_seconds[default]"]) > 0
    passed = properties(cases["test_pass"])
    assert passed["sol_verdict[pipes | and <tags> & stuff]"] == "pass"
    assert cases["test_slow"].is_failure and cases["test_pass"].is_passed


def test_markdown_read_by_githubs_renderer_and_markdown_it(pytester):
    run_suite(pytester, "--sol-markdown=summary.md")
    text = (pytester.path / "summary.md").read_text()
    for html in (cmarkgfm.github_flavored_markdown_to_html(text), MarkdownIt("commonmark").enable("table").render(text)):
        assert html.count("<table>") == 1
        body = html.split("<tbody>")[1].split("</tbody>")[0]
        assert body.count("<tr>") == 2  # one row per measurement: the pipe in the name did not split a row
        assert "pipes | and" in body and "<tags>" not in body  # escaped, never raw markup
        header = html.split("<thead>")[1].split("</thead>")[0]
        assert header.count("<th") == body.split("</tr>")[0].count("<td")  # every row has every column


def test_html_report_and_trend_page_parse_strictly(pytester):
    run_suite(pytester, "--sol-report=report.html")
    parser = html5lib.HTMLParser(strict=True)
    document = parser.parse((pytester.path / "report.html").read_text())
    assert document is not None and not parser.errors
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "trend", "-o", "trend.html"],
                          cwd=pytester.path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    parser.parse((pytester.path / "trend.html").read_text())
    assert not parser.errors
