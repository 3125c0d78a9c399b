"""Report: the Markdown summary: counts and the table, fit for a PR comment or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from typing import Sequence

from pytest_solgate.record.outcome import TestOutcomes, summary
from pytest_solgate.report.table import HEADERS, counts, ordered, row
from pytest_solgate.results import Measurement, RunInfo

MAX_CELL = 120


def escape(text: str) -> str:
    """Text for a Markdown table cell, the one escaper of every table the plugin writes: on one
    line, and no ``|`` that ends the cell, backtick that opens a code span or tag."""
    return (" ".join(str(text).split()).replace("|", "\\|").replace("`", "\\`")
            .replace("<", "&lt;").replace(">", "&gt;"))


def _cell(text: str) -> str:
    """A table cell: at most MAX_CELL characters, cut at a word (the full text is in the details)."""
    text = " ".join(str(text).split())
    if len(text) > MAX_CELL:
        cut = text[: MAX_CELL - 1]
        text = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(",;:") + "…"
    return escape(text)


def render(run: RunInfo, measurements: Sequence[Measurement], outcomes: TestOutcomes | None = None) -> str:
    """The summary; ``outcomes``: pytest's, said beside the verdicts and marking the rows of tests that failed."""
    lines = ["### SOL report", ""]
    where = f"`{run.commit[:10]}`" if run.commit else "unknown commit"
    if run.dirty:
        where += " (dirty)"
    lines.append(f"{where} · {run.device or 'no device'} · profile `{run.profile or '-'}` ({run.ceilings or '-'} ceilings)")
    lines.append("")
    if summary(outcomes):
        lines += [f"pytest: {'**' + summary(outcomes) + '**' if outcomes and outcomes.failing else summary(outcomes)}", ""]
    if not measurements:
        lines.append("_This run measured nothing._")
        return "\n".join(lines) + "\n"
    lines.append(" · ".join(f"**{n}** {verdict}" for verdict, n in counts(measurements).items()))
    lines.append("")
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "|".join("---:" if h in ("time", "achieved", "SOL", "vs reference", "vs baseline") else "---" for h in HEADERS) + "|")
    failing = []
    for m in ordered(measurements, outcomes):
        r = row(m, measurements, outcomes)
        lines.append("| " + " | ".join(_cell(c) for c in r.cells()) + " |")
        if m.failed:
            failing.append(f"- {escape(r.reason)}")
        elif r.outcome:  # its verdict passes, the test does not
            failing.append(f"- {escape(f'{r.test} [{r.name}]: {r.outcome} (its own assertion or an error), verdict {r.verdict}')}")  # whole: this is where the full text lives
    if failing:
        lines += ["", "<details><summary>Why they failed</summary>", "", *failing, "", "</details>"]
    return "\n".join(lines) + "\n"
