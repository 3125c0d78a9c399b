"""Report: the self-contained HTML report (and the trend page), rendered with Jinja2, autoescaping on."""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence

from pytest_solgate import judge, units
from pytest_solgate.profiles import HardwareProfile
from pytest_solgate.records import FAILING, Measurement, RunInfo
from pytest_solgate.report import roofline, table

VERDICT_COLOURS = {
    "pass": "#2e9e5b",
    "improved": "#1f77b4",
    "not-gated": "#8a8f98",
    "ambiguous": "#d99a00",
    "below-budget": "#d6423a",
    "regressed": "#b8226b",
    "above-sol": "#7a3fd1",
}


def environment() -> Any:
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
        breakable=breakable,
    )
    env.globals["colours"] = VERDICT_COLOURS
    return env


def breakable(test_id: str) -> Any:
    """A test id that wraps only after its separators (``/``, ``::``, ``[``, ``-``, ``_``, ``.``),
    never inside a word: escaped text with ``<wbr>`` break opportunities."""
    import re

    from markupsafe import Markup, escape

    return Markup("".join(
        str(escape(part)) + ("<wbr>" if re.fullmatch(r"(::|[/\[\-_.,])", part) else "")
        for part in re.split(r"(::|[/\[\-_.,])", test_id) if part
    ))


def _detail(m: Measurement, index: int, peers: Sequence[Measurement]) -> dict[str, Any]:
    return {
        "index": index,
        "m": m,
        "row": table.row(m, peers),
        "describe": judge.describe(m) if m.t_sol > 0 else "",
        "strip": roofline.strip(m.samples),
        "spark": roofline.sparkline([t["sol"] for t in m.trend]),
        "trend": m.trend,
        "failed": m.verdict in FAILING,
        "bar": min(1.0, max(0.0, m.sol)),
        "budget_mark": m.budget.get("min") if m.budget else None,
    }


def render_report(
    run: RunInfo,
    measurements: Sequence[Measurement],
    profiles: Mapping[str, HardwareProfile],
) -> str:
    ordered = table.ordered(measurements)
    charts = []
    for profile_id in sorted({m.profile for m in ordered}):
        profile = profiles.get(profile_id)
        if profile is not None:
            charts.append(roofline.roofline(profile, [m for m in ordered if m.profile == profile_id]))
    return environment().get_template("report.html.j2").render(
        run=run,
        details=[_detail(m, i, ordered) for i, m in enumerate(ordered)],
        counts=table.counts(ordered),
        charts=charts,
        profiles=[profiles[p] for p in sorted({m.profile for m in ordered}) if p in profiles],
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def render_trend(series: Sequence[Mapping[str, Any]], generated_from: str, note: str = "") -> str:
    """``series``: [{"label", "points": [{"commit", "commit_time", "sol"}], "changes": [commit]}],
    one line each; ``changes`` are the commits where the line stepped (change points)."""
    position: dict[str, int] = {}  # commit -> x index, in first-seen order (a dict: long histories)
    for s in series:
        for p in s["points"]:
            position.setdefault(p["commit"], len(position))
    commits = list(position)
    width, height, left, bottom, top, right = 860, 380, 56, 60, 16, 220
    plot_w, plot_h = width - left - right, height - top - bottom
    top_sol = max([1.0] + [p["sol"] for s in series for p in s["points"]])
    step = plot_w / max(1, len(commits) - 1)
    palette = ["#1f77b4", "#d6423a", "#2e9e5b", "#d99a00", "#7a3fd1", "#17becf", "#8c564b", "#e377c2"]
    lines = []
    for i, s in enumerate(series):
        coords = [
            (round(left + position[p["commit"]] * step, 2), round(top + plot_h - p["sol"] / top_sol * plot_h, 2), p)
            for p in s["points"]
        ]
        changes = [(round(left + position[c] * step, 2), c) for c in s.get("changes", ())]
        lines.append({"label": s["label"], "colour": palette[i % len(palette)], "coords": coords,
                      "points": " ".join(f"{x},{y}" for x, y, _ in coords), "changes": changes})
    return environment().get_template("trend.html.j2").render(
        lines=lines,
        commits=[(round(left + i * step, 2), c) for i, c in enumerate(commits)],
        frame={"width": width, "height": height, "left": left, "top": top, "plot_w": plot_w, "plot_h": plot_h},
        y_ticks=[(round(top + plot_h - v / top_sol * plot_h, 2), f"{v:.2f}") for v in (0, top_sol / 4, top_sol / 2, 3 * top_sol / 4, top_sol)],
        generated_from=generated_from,
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        note=note,
    )
