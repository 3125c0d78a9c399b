"""Report: the geometry of the trend page's small multiples (pure arithmetic, no HTML).

One panel per measurement: its SOL over the commits that measured it, in commit order, with the
run-to-run noise band, the budget as a line and the change points found in the history. Each
panel has its own x axis (its own commits) and a y axis from 0 with round ticks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from dataclasses import dataclass
from typing import Sequence, TypedDict

from pytest_solgate.results import CommitPoint
from pytest_solgate.support import stats, units

WIDTH, HEIGHT = 440, 190
# LEFT holds the y-axis title and tick labels as long as "0.00015"; BOTTOM the commit labels and
# the x-axis title.
LEFT, RIGHT, TOP, BOTTOM = 66, 12, 12, 40
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
BAND_WINDOW = 10  # commits before a point that give its noise band (the gate's default window)
BAND_SIGMAS = 2.5  # band half-width in robust standard deviations of log-SOL
MAX_COMMIT_LABELS = 5  # short shas (7 characters) that fit the x axis side by side
SHORT_SHA = 7
# SOL above 1.05 is impossible (a wrong declaration or ceiling, or a cache that served the data):
# the axis stops there, whatever such a point reads, so that it cannot squash the real range.
PHYSICAL_MAX = 1.05


def panel_id(test: str, name: str, profile: str) -> str:
    """A stable HTML id for a measurement's panel: the report's sparklines link to it."""
    readable = re.sub(r"[^A-Za-z0-9]+", "-", f"{test.split('::')[-1]}-{name}").strip("-")[:60]
    digest = hashlib.sha1(f"{test}\0{name}\0{profile}".encode()).hexdigest()[:8]
    return f"panel-{readable}-{digest}"


def nice_ticks(top: float) -> list[float]:
    """Round y ticks from 0 that cover ``top`` in at most 5 steps: 0, 0.25, 0.5, ... not 0.26, 0.52."""
    top = max(top, 1e-6)
    for exponent in range(math.floor(math.log10(top)) - 1, math.floor(math.log10(top)) + 2):
        for mantissa in (1, 2, 2.5, 5):
            step = mantissa * 10**exponent
            count = math.ceil(top / step - 1e-9)  # steps to cover top (a rounding error is not one more)
            if count <= 5:
                return [round(step * i, 10) for i in range(count + 1)]
    return [0.0, top]


def noise_band(sols: Sequence[float]) -> list[tuple[float, float] | None]:
    """For each point, the range its window of earlier commits says is noise: the median of their
    log-SOL +- 2.5 robust sigmas (MAD). None until three earlier commits exist."""
    band: list[tuple[float, float] | None] = []
    logs = [math.log(v) if v > 0 else float("nan") for v in sols]
    for i in range(len(logs)):
        window = [v for v in logs[max(0, i - BAND_WINDOW):i] if not math.isnan(v)]
        if len(window) < 3:
            band.append(None)
            continue
        centre = stats.median(window)
        sigma = max(1.4826 * stats.median([abs(v - centre) for v in window]), 1e-3)
        band.append((math.exp(centre - BAND_SIGMAS * sigma), math.exp(centre + BAND_SIGMAS * sigma)))
    return band


class DrawnPoint(TypedDict):
    """A commit's point in a panel: where it lands, what its hover says, its verdict's colour, and
    whether its SOL lies above the axis (drawn at the top edge)."""

    x: float
    y: float
    hover: str
    verdict: str
    above: bool


@dataclass(frozen=True)
class Panel:
    id: str
    test: str
    name: str
    profile: str
    title: str
    points: list[DrawnPoint]
    polyline: str
    band: str  # an SVG polygon's points, or ""
    budget_y: float | None
    budget: float | None
    y_ticks: list[tuple[float, str]]
    x_labels: list[tuple[float, str]]  # (x, short sha) of every few commits; the date is in each point's hover
    changes: list[tuple[float, str]]  # x and commit of each change point shown
    shown: int  # commits shown
    total: int  # commits recorded
    provisional: tuple[str, ...] = ()  # the change points at the newest commit, not confirmed yet
    outliers: list[tuple[float, float, str]] = dataclasses.field(default_factory=list)  # x, y, commit of each glitch
    # Every commit's place on the x axis and its hover (sha, date): the ones without a label too.
    x_marks: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    above: int = 0  # points above PHYSICAL_MAX, drawn at the top edge


def panel(test: str, name: str, profile: str, points: Sequence[CommitPoint], changes: Sequence[str],
          budget: float | None, last: int = 0, provisional: Sequence[str] = (), outliers: Sequence[str] = ()) -> Panel:
    """``points`` from store.commit_series (oldest first); ``changes`` the commits where the
    series stepped (``provisional`` those of them at the newest commit, not confirmed yet);
    ``outliers`` the commits one off their level; ``last`` > 0 shows only the newest commits."""
    total = len(points)
    bands = noise_band([p["sol"] for p in points])
    start = max(0, total - last) if last else 0
    points, bands = list(points[start:]), bands[start:]
    ticks, y_max = _y_ticks(max([p["sol"] for p in points] + [b[1] for b in bands if b] + [budget or 0.0]))
    scale = _Scale(len(points), y_max)
    drawn = [DrawnPoint(x=scale.x(i), y=scale.y(p["sol"]), hover=_hover(p, p["sol"] > y_max),
                        verdict=p.get("verdict") or "not-gated", above=p["sol"] > y_max) for i, p in enumerate(points)]
    index = {p["commit"]: i for i, p in enumerate(points)}
    return Panel(
        id=panel_id(test, name, profile),
        test=test,
        name=name,
        profile=profile,
        title=f"{test.split('::')[-1]} [{name}]",
        points=drawn,
        polyline=" ".join(f"{d['x']},{d['y']}" for d in drawn),
        band=_band_polygon(bands, scale),
        budget_y=scale.y(budget) if budget else None,
        budget=budget,
        y_ticks=[(scale.y(t), f"{t:g}") for t in ticks],
        x_labels=[(scale.x(i), points[i]["commit"][:SHORT_SHA]) for i in _labelled_commits(len(points))],
        changes=[(scale.x(index[c]), c) for c in changes if c in index],
        shown=len(points),
        total=total,
        provisional=tuple(c for c in provisional if c in index),
        outliers=[(scale.x(index[c]), scale.y(points[index[c]]["sol"]), c) for c in outliers if c in index],
        x_marks=[(scale.x(i), f"{p['commit'][:10]} · {str(p.get('commit_time') or '')[:10]}")
                 for i, p in enumerate(points)],
        above=sum(d["above"] for d in drawn),
    )


def _y_ticks(top_value: float) -> tuple[list[float], float]:
    """The y axis's round ticks over ``top_value`` and where the axis stops."""
    ticks = nice_ticks(min(top_value * 1.05, PHYSICAL_MAX))
    y_max = ticks[-1]
    if y_max > PHYSICAL_MAX:  # 0 .. 1.25 in quarters: keep the ticks up to 1, stop the axis at 1.05
        ticks, y_max = [t for t in ticks if t <= 1], PHYSICAL_MAX
    return ticks, y_max


@dataclass(frozen=True)
class _Scale:
    """Where the i-th of ``count`` commits and a SOL land in the panel's pixels (a SOL above
    ``y_max`` at the top edge)."""

    count: int
    y_max: float

    def x(self, i: int) -> float:
        step = PLOT_W / max(1, self.count - 1)
        return round(LEFT + (i * step if self.count > 1 else PLOT_W / 2), 2)

    def y(self, v: float) -> float:
        return round(TOP + PLOT_H - min(v, self.y_max) / self.y_max * PLOT_H, 2)


def _hover(p: CommitPoint, above: bool) -> str:
    """What a commit's point says on hover: sha, date, SOL, time, verdict, its runs and how many
    were contended, and whether it is drawn at the top edge (``above`` the axis)."""
    runs = len(p.get("runs", ())) or 1
    return (f"{p['commit'][:10]} · {str(p.get('commit_time') or '')[:10]} · SOL {units.sol_fine(p['sol'])} · "
            f"{units.seconds(p['seconds']) if p.get('seconds') else '-'} · {p.get('verdict') or '-'}"
            + (f" · median of {runs} runs" if runs > 1 else "")
            + _contended(p.get("contended", 0), runs)
            + (f" · above the physical limit {PHYSICAL_MAX:g}, drawn at the top edge" if above else ""))


def _band_polygon(bands: Sequence[tuple[float, float] | None], scale: _Scale) -> str:
    """The noise band as an SVG polygon's points (along the top, back along the bottom), or ""."""
    known = [(i, b) for i, b in enumerate(bands) if b]
    if len(known) < 2:
        return ""
    upper = [f"{scale.x(i)},{scale.y(b[1])}" for i, b in known]
    lower = [f"{scale.x(i)},{scale.y(b[0])}" for i, b in reversed(known)]
    return " ".join(upper + lower)


def _labelled_commits(count: int) -> list[int]:
    """The commits the x axis names: evenly spaced and the newest, never two so close that they
    overlap. Commits, not dates: two commits of one day would carry the same label, and a date
    names no commit."""
    every = max(1, math.ceil(count / MAX_COMMIT_LABELS))
    last_index = count - 1
    return [i for i in range(0, last_index, every) if last_index - i >= every * 0.7] + [last_index]


def verdicts(panels: Sequence[Panel]) -> list[str]:
    """The verdicts of the points drawn, in the report's order: the legend names each colour."""
    from pytest_solgate import results

    seen = {d["verdict"] for p in panels for d in p.points}
    return [str(v) for v in results.VERDICTS if str(v) in seen]


def groups(panels: Sequence[Panel]) -> list[tuple[str, list[Panel]]]:
    """Panels grouped by test file and profile, in name order."""
    grouped: dict[str, list[Panel]] = {}
    for p in sorted(panels, key=lambda p: (p.test.split("::")[0], p.profile, p.test, p.name)):
        grouped.setdefault(f"{p.test.split('::')[0]} · {p.profile}", []).append(p)
    return list(grouped.items())


def _contended(contended: int, runs: int) -> str:
    """How many of a commit's runs measured while the machine was busy (none a baseline on wall time)."""
    if not contended:
        return ""
    if contended == runs:
        return f" · {'its run was' if runs == 1 else f'all {runs} runs were'} contended (the machine was busy): no clean run"
    return f" · {contended} of {runs} runs contended (the machine was busy)"
