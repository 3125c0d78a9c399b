"""Report: the self-contained HTML report (and the trend page), rendered with Jinja2, autoescaping on."""

from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Mapping, Sequence

from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.judge import verdict, verdict_wording
from pytest_solgate.record import outcome
from pytest_solgate.record.outcome import TestOutcomes
from pytest_solgate.report import roofline, step_table, table
from pytest_solgate.results import Measurement, RunInfo
from pytest_solgate.support import units

if TYPE_CHECKING:  # jinja2 and markupsafe are imported when a page is written
    import jinja2
    from markupsafe import Markup

    from pytest_solgate.report.trend import Panel

VERDICT_COLOURS = {
    "pass": "#2e9e5b",
    "improved": "#1f77b4",
    "recorded": "#6f8f7d",
    "not-gated": "#8a8f98",
    "ambiguous": "#d99a00",
    "below-budget": "#d6423a",
    "regressed": "#b8226b",
    "above-sol": "#7a3fd1",
}


def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_solgate", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        seconds=units.seconds,
        bandwidth=units.bandwidth,
        flop_rate=units.flop_rate,
        noise=units.noise,
        percent=units.percent,
        count=units.count,
        sol=units.sol,
        sol_fine=units.sol_fine,
        breakable=breakable,
    )
    env.globals["colours"] = VERDICT_COLOURS
    return env


SEPARATORS = re.compile(r"(::|[/\[\-,])")  # where a test id may wrap


def breakable(test_id: str) -> Markup:
    """A test id that wraps only after its separators (``/``, ``::``, ``[``, ``-``, ``,``), never
    inside a word (``test_fast`` stays whole): escaped text with ``<wbr>`` break opportunities."""
    from markupsafe import Markup, escape

    parts = SEPARATORS.split(test_id)  # text, separator, text, ...: separators sit at odd indexes
    return Markup("".join(str(escape(part)) if i % 2 == 0 and len(part) <= LONG_WORD else
                          (str(escape(part)) + "<wbr>" if i % 2 else _long_word(part)) for i, part in enumerate(parts)))


# A word longer than this (a long test function's name: test_a_norm_in_a_python_loop_ranks_first)
# is wider than its column at 1280 px: it may wrap after its underscores too.
LONG_WORD = 24


def _long_word(word: str) -> str:
    from markupsafe import escape

    return "_<wbr>".join(str(escape(piece)) for piece in word.split("_"))


def _detail(m: Measurement, index: int, peers: Sequence[Measurement], outcomes: TestOutcomes | None) -> dict[str, object]:
    from pytest_solgate.report.trend import panel_id

    row = table.row(m, peers, outcomes)
    return {
        "index": index,
        "panel": panel_id(m.test, m.name, m.profile),
        "m": m,
        "row": row,
        "measured": table.measured_text(m),
        "dram": verdict_wording.dram_phrase(m, verdict.dram_ratio(m)),
        "describe": verdict_wording.describe(m) if m.score.t_sol > 0 else "",
        "strip": roofline.strip(m.timing.samples),
        "spark": roofline.sparkline([t["sol"] for t in m.trend]),
        "trend": m.trend,
        "failed": m.failed or bool(row.outcome),  # a test that failed itself never reads as fine
        "bar": min(1.0, max(0.0, m.score.sol)),
        "budget_mark": m.judgement.budget.min if m.judgement and m.gate else None,
    }


def render_report(
    run: RunInfo,
    measurements: Sequence[Measurement],
    profiles: Mapping[str, HardwareProfile],
    outcomes: TestOutcomes | None = None,
) -> str:
    """The report; ``outcomes``: pytest's, shown beside the verdicts and on the rows of tests that failed."""
    ordered = table.ordered(measurements, outcomes)
    charts = []
    for profile_id in sorted({m.profile for m in ordered}):
        profile = profiles.get(profile_id)
        if profile is not None:
            charts.append(roofline.roofline(profile, [m for m in ordered if m.profile == profile_id]))
    return environment().get_template("report.html.j2").render(
        run=run,
        details=[_detail(m, i, ordered, outcomes) for i, m in enumerate(ordered)],
        counts=table.counts(ordered),
        tests=outcome.summary(outcomes),
        tests_failing=outcomes is not None and outcomes.failing,
        charts=charts,
        steps=step_table.sections(ordered),
        profiles=[profiles[p] for p in sorted({m.profile for m in ordered}) if p in profiles],
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def render_trend(panels: Sequence[Panel], generated_from: str, note: str = "") -> str:
    """The trend page: ``panels`` from report/trend.py, one small multiple per measurement."""
    from pytest_solgate.report import trend

    return environment().get_template("trend.html.j2").render(
        groups=trend.groups(panels),
        verdicts=trend.verdicts(panels),
        count=len(panels),
        frame={"width": trend.WIDTH, "height": trend.HEIGHT, "left": trend.LEFT, "top": trend.TOP,
               "plot_w": trend.PLOT_W, "plot_h": trend.PLOT_H},
        generated_from=generated_from,
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        note=note,
    )
