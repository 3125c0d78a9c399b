"""Report: geometry of the roofline chart and of the small per-measurement plots (pure arithmetic).

The templates only draw what these functions place, so the positions can be tested exactly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence, cast

from pytest_solgate import results
from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.report import table
from pytest_solgate.results import Measurement
from pytest_solgate.support import units


@dataclass(frozen=True)
class Frame:
    width: float = 760
    height: float = 440
    left: float = 72
    right: float = 24
    top: float = 20
    bottom: float = 52

    @property
    def plot_width(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> float:
        return self.height - self.top - self.bottom


@dataclass(frozen=True)
class Axis:
    low: float  # log10 of the smallest value shown
    high: float  # log10 of the largest

    def position(self, value: float, start: float, length: float, flip: bool = False) -> float:
        fraction = (math.log10(value) - self.low) / (self.high - self.low)
        return start + (length * (1 - fraction) if flip else length * fraction)


@dataclass(frozen=True)
class Label:
    """A text placed beside a point, where it overlaps no other label and stays inside the plot."""

    x: float
    y: float
    text: str
    anchor: str = "start"  # SVG text-anchor: "start" (right of the point), "end" (left) or "middle" (above, below)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    verdict: str
    title: str
    index: int
    kind: str = "kernel"  # "kernel" (gated) or "reference" (gate=False): drawn differently
    label: Label | None = None  # kernels by test and name, references by name, beside their mark


@dataclass(frozen=True)
class Link:
    """A kernel joined to its test's reference: how far apart they sit on the chart."""

    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Bar:
    label: str
    fraction: float  # achieved bandwidth over the ceiling, drawn up to 1.1
    value: str
    verdict: str
    kind: str
    index: int


@dataclass(frozen=True)
class BandwidthChart:
    """Measurements with bytes and no FLOPs (pure data movement): achieved GB/s against the
    memory-bandwidth ceiling, one bar each. A roofline has no place for them (no intensity)."""

    ceiling: str
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Roof:
    label: str
    points: str  # SVG polyline points
    label_x: float
    label_y: float


@dataclass(frozen=True)
class SlopeLabel:
    """The memory roof's name, written along its slope."""

    x: float
    y: float
    angle: float  # degrees, as SVG's rotate() takes them
    text: str

    def box(self) -> tuple[float, float, float, float]:
        """Its approximate axis-aligned extent, for the point labels to keep clear of."""
        half_w, half_h = len(self.text) * CHAR_WIDTH / 2, 7
        a = math.radians(self.angle)
        dx = abs(half_w * math.cos(a)) + abs(half_h * math.sin(a))
        dy = abs(half_w * math.sin(a)) + abs(half_h * math.cos(a))
        return (self.x - dx, self.y - dy, self.x + dx, self.y + dy)


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Chart:
    profile: str
    frame: Frame
    points: tuple[Point, ...]
    roofs: tuple[Roof, ...]
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    left_out: tuple[str, ...]  # measurements on neither chart, each with why (why_left_out)
    links: tuple[Link, ...] = ()
    bandwidth: BandwidthChart | None = None
    verdicts: tuple[str, ...] = ()  # the verdicts of the points drawn: the legend names each colour
    memory_label: SlopeLabel | None = None


def _decade_label(exponent: int) -> str:
    """10^e as a short label: 100M, 1T, 0.01."""
    prefixes = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
    base = 3 * math.floor(exponent / 3)
    if exponent >= 0 and base in prefixes:
        return f"{10 ** (exponent - base)}{prefixes[base]}"
    return f"{10.0 ** exponent:g}"


def plottable(m: Measurement) -> bool:
    intensity = m.score.intensity
    return intensity is not None and intensity > 0 and m.score.tflops > 0 and math.isfinite(intensity)


def _intensity(m: Measurement) -> float:
    """A plottable measurement's FLOP per byte (a finite number > 0: see ``plottable``)."""
    return cast(float, m.score.intensity)


def why_left_out(m: Measurement) -> str:
    """Why a measurement is on neither chart, by what it declared."""
    if not m.work.bytes and not m.work.total_flops:
        return "no bytes or FLOPs declared"
    if not m.work.bytes:
        return "no bytes declared"
    return table.unscored_flops(m) or "no achieved FLOP rate to place"


def data_movement(m: Measurement) -> bool:
    """Bytes and no FLOPs: its place is the bandwidth chart."""
    return m.work.bytes > 0 and not m.work.total_flops


def kind(m: Measurement) -> str:
    return "kernel" if m.gate else "reference"


def bandwidth_chart(profile: HardwareProfile, measurements: Sequence[Measurement]) -> BandwidthChart | None:
    rows = [(i, m) for i, m in enumerate(measurements) if data_movement(m)]
    if not rows:
        return None

    return BandwidthChart(
        ceiling=units.bandwidth(profile.memory_bandwidth_gbps),
        bars=tuple(
            Bar(label=f"{m.test} [{m.name}]", fraction=round(min(m.score.gbps / profile.memory_bandwidth_gbps, 1.1), 4),
                value=f"{units.bandwidth(m.score.gbps)} ({m.score.gbps / profile.memory_bandwidth_gbps:.0%})",
                verdict=str(table.verdict(m)), kind=kind(m), index=i)
            for i, m in rows
        ),
    )


def roofline(profile: HardwareProfile, measurements: Sequence[Measurement], frame: Frame = Frame()) -> Chart:
    """Log-log achieved FLOP/s against FLOP/byte, with the bandwidth roof and one roof per precision."""
    bandwidth = profile.memory_bandwidth
    peaks = {p: profile.peak_flops(p) for p in profile.peak_tflops}
    plane = _Plane.around([m for m in measurements if plottable(m)], bandwidth, peaks, frame)
    start_y = max(bandwidth * 10.0**plane.x_low, 10.0**plane.y_low)
    start = (plane.px(start_y / bandwidth), plane.py(start_y))
    roofs = _roofs(plane, peaks, bandwidth, start)
    ridges = [peak / bandwidth for peak in peaks.values()]
    memory_label = _memory_label(profile, start, (plane.px(min(ridges)), plane.py(min(peaks.values()))))
    placed_points = _placed_points(plane, measurements)
    links = _links(placed_points, measurements)
    points = tuple(_labelled(placed_points, measurements, frame, roofs, memory_label, links))
    left_out = tuple(f"{m.test} [{m.name}] ({why_left_out(m)})" for m in measurements
                     if not plottable(m) and not data_movement(m))
    return Chart(
        profile=profile.id,
        frame=frame,
        points=points,
        roofs=tuple(roofs),
        x_ticks=tuple(Tick(plane.px(10.0**e), _decade_label(e)) for e in range(plane.x_low, plane.x_high + 1)),
        y_ticks=tuple(Tick(plane.py(10.0**e), _decade_label(e)) for e in range(plane.y_low, plane.y_high + 1)),
        left_out=left_out,
        links=links,
        bandwidth=bandwidth_chart(profile, measurements),
        verdicts=tuple(v for v in (str(v) for v in results.VERDICTS) if any(p.verdict == v for p in points)),
        memory_label=memory_label,
    )


@dataclass(frozen=True)
class _Plane:
    """The chart's decades (log10 of FLOP/byte across, of FLOP/s up) and where a value lands in pixels."""

    x_low: int
    x_high: int
    y_low: int
    y_high: int
    frame: Frame

    @classmethod
    def around(cls, on_chart: Sequence[Measurement], bandwidth: float, peaks: dict[str, float],
               frame: Frame) -> "_Plane":
        """Whole decades holding every point, every ridge and every roof, with room around them."""
        ridges = [peak / bandwidth for peak in peaks.values()]
        intensities = [_intensity(m) for m in on_chart] or [1.0]
        rates = [m.score.tflops * 1e12 for m in on_chart] or [min(peaks.values())]
        x_low = math.floor(math.log10(min(min(intensities), min(ridges)) / 4))
        x_high = math.ceil(math.log10(max(max(intensities), max(ridges)) * 4))
        y_low = math.floor(math.log10(min(min(rates), bandwidth * 10**x_low) / 2))
        y_high = math.ceil(math.log10(max(max(rates), max(peaks.values())) * 2))
        return cls(x_low, x_high, y_low, y_high, frame)

    def px(self, intensity: float) -> float:
        return round(Axis(self.x_low, self.x_high).position(intensity, self.frame.left, self.frame.plot_width), 2)

    def py(self, rate: float) -> float:
        return round(Axis(self.y_low, self.y_high).position(rate, self.frame.top, self.frame.plot_height, flip=True), 2)


def _roofs(plane: _Plane, peaks: dict[str, float], bandwidth: float, start: tuple[float, float]) -> list[Roof]:
    """One roof per precision, highest first: the bandwidth slope from ``start`` to its ridge, then
    flat to the right edge; labels go top to bottom, one never overlapping the one above it."""
    roofs = []
    label_floor = -math.inf
    x_end = 10.0**plane.x_high
    for precision, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        ridge = peak / bandwidth
        coords = [start, (plane.px(ridge), plane.py(peak)), (plane.px(x_end), plane.py(peak))]
        label_y = max(plane.py(peak) - 4, label_floor + ROOF_LABEL_GAP)
        label_floor = label_y
        roofs.append(
            Roof(
                label=f"{precision} {peak / 1e12:.3g} TFLOP/s",
                points=" ".join(f"{x},{y}" for x, y in coords),
                label_x=plane.px(x_end) - 4,
                label_y=round(label_y, 2),
            )
        )
    return roofs


def _placed_points(plane: _Plane, measurements: Sequence[Measurement]) -> list[Point]:
    """The plottable measurements' points, references first and kernels last: SVG paints in order,
    so a gated point is never hidden under a reference diamond that lands on the same spot."""
    placed_points = [
        Point(
            x=plane.px(_intensity(m)),
            y=plane.py(m.score.tflops * 1e12),
            verdict=str(table.verdict(m)),
            title=f"{kind(m)} {m.test} [{m.name}]: {m.score.intensity:.3g} FLOP/B, {m.score.tflops:.3g} TFLOP/s, "
                  f"SOL {units.sol(m.score.sol)}, {table.verdict(m)}",
            index=i,
            kind=kind(m),
        )
        for i, m in enumerate(measurements)
        if plottable(m)
    ]
    placed_points.sort(key=lambda p: p.kind == "kernel")
    return placed_points


def _links(placed_points: list[Point], measurements: Sequence[Measurement]) -> tuple[Link, ...]:
    """A line from each kernel's point to each reference point of its test."""
    placed = {(measurements[p.index].test, measurements[p.index].name): p for p in placed_points}
    return tuple(
        Link(kernel.x, kernel.y, reference.x, reference.y)
        for (test, name), kernel in placed.items() if kernel.kind == "kernel"
        for (other_test, _), reference in placed.items() if reference.kind == "reference" and other_test == test
    )


ROOF_LABEL_GAP = 14  # px between roof labels: 11 px text, never touching
CHAR_WIDTH = 6.2  # px per character of an 11 px label, a little more than the sans-serif average
LINE = 13  # px between two stacked labels
MAX_SHIFT = 8  # lines a label may move up or down to find room beside a crowded point
NEAR = 3  # rounds out from the mark within which a label keeps clear of other points' links


def _memory_label(profile: HardwareProfile, start: tuple[float, float], ridge: tuple[float, float]) -> SlopeLabel:
    """The memory roof's name along its slope, 30 % of the way from its start, just above it."""

    (x1, y1), (x2, y2) = start, ridge
    angle = math.degrees(math.atan2(y2 - y1, x2 - x1))
    x, y = x1 + (x2 - x1) * 0.3, y1 + (y2 - y1) * 0.3
    normal = math.radians(angle - 90)  # 5 px above the line, perpendicular to it
    return SlopeLabel(x=round(x + 5 * math.cos(normal), 2), y=round(y + 5 * math.sin(normal), 2),
                      angle=round(angle, 2), text=f"memory {units.bandwidth(profile.memory_bandwidth_gbps)}")


def _short_label(m: Measurement) -> str:
    if m.gate:
        test = m.test.split("::")[-1]
        return test if m.name == "default" else f"{test} [{m.name}]"
    return m.name  # a reference: its kernel's label and the link say which test it belongs to


def _crosses(box: tuple[float, float, float, float], link: Link) -> bool:
    """Whether the segment ``link`` passes through ``box`` (Liang-Barsky clipping)."""
    x1, y1, x2, y2 = box
    dx, dy = link.x2 - link.x1, link.y2 - link.y1
    low, high = 0.0, 1.0
    for p, q in ((-dx, link.x1 - x1), (dx, x2 - link.x1), (-dy, link.y1 - y1), (dy, y2 - link.y1)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _candidates(p: Point) -> list[tuple[int, str, float, float]]:
    """Where a label may go, nearest first: (round, anchor, x, baseline y) right of the mark, left
    of it, above and below it, then a line further out each round."""
    spots = []
    for step in range(MAX_SHIFT + 1):
        rows = (0,) if step == 0 else (-step, step)
        spots += [(step, anchor, x, p.y + 4 + row * LINE) for row in rows for anchor, x in (("start", p.x + 9), ("end", p.x - 9))]
        spots += [(step, "middle", p.x, p.y - 10 - step * LINE), (step, "middle", p.x, p.y + 18 + step * LINE)]
    return spots


def _labelled(points: list[Point], measurements: Sequence[Measurement], frame: Frame, roofs: list[Roof],
              memory_label: SlopeLabel, links: Sequence[Link] = ()) -> list[Point]:
    """Every point named beside its mark, kernels first (a gated point gets the nearest spot):
    the nearest place right of it, left, above or below, a line further out each round, that
    overlaps no other label, mark, roof label or the plot's edge and, within NEAR rounds, crosses
    no other point's link; where a long link bars every near place, the nearest place across it
    (a label far from its mark reads worse than one over a dashed line). Estimated widths; the
    browser test checks the real ones."""
    taken = [(r.label_x - len(r.label) * CHAR_WIDTH, r.label_y - 11, r.label_x, r.label_y + 3) for r in roofs]
    taken.append(memory_label.box())  # its upright box: what the browser measures a slanted text by
    marks = [(p.x - 7, p.y - 7, p.x + 7, p.y + 7) for p in points]
    right_edge, bottom = frame.left + frame.plot_width, frame.top + frame.plot_height

    def free(box: tuple[float, float, float, float], others: Sequence[Link]) -> bool:
        x1, y1, x2, y2 = box
        inside = frame.left <= x1 and x2 <= right_edge and frame.top <= y1 and y2 <= bottom
        return (inside and all(x2 <= o1 or o3 <= x1 or y2 <= o2 or o4 <= y1 for o1, o2, o3, o4 in taken + marks)
                and not any(_crosses(box, link) for link in others))

    labels: dict[int, Label] = {}
    for p in sorted(points, key=lambda p: p.kind != "kernel"):
        text = _short_label(measurements[p.index])
        width = len(text) * CHAR_WIDTH
        others = [link for link in links if (p.x, p.y) not in ((link.x1, link.y1), (link.x2, link.y2))]
        spots = _candidates(p)
        for step, anchor, x, y in [(s, a, x, y) for s, a, x, y in spots if s <= NEAR] + spots:
            left = {"start": x, "end": x - width, "middle": x - width / 2}[anchor]
            box = (left, y - 10, left + width, y + 3)
            if free(box, others if step <= NEAR else ()):
                labels[p.index] = Label(x=round(x, 2), y=round(y, 2), text=text, anchor=anchor)
                taken.append(box)
                break
    return [dataclasses.replace(p, label=labels.get(p.index)) for p in points]


def strip(samples: Sequence[float], width: float = 300, height: float = 36) -> dict[str, object]:
    """A strip plot of per-call times: x positions of samples, of the median and the quartiles."""
    if not samples:
        return {"dots": [], "median": None, "width": width, "height": height, "low": 0, "high": 0}
    from pytest_solgate.support import stats

    low, high = min(samples), max(samples)
    span = high - low or max(high, 1e-12) * 1e-3

    def x(value: float) -> float:
        return round(6 + (value - low) / span * (width - 12), 2)

    # Deterministic vertical jitter so that equal samples stay visible.
    dots = [(x(s), round(8 + (i * 7919 % 17) / 16 * (height - 16), 2)) for i, s in enumerate(samples)]
    return {
        "dots": dots,
        "median": x(stats.median(samples)),
        "q1": x(stats.quantile(samples, 0.25)),
        "q3": x(stats.quantile(samples, 0.75)),
        "width": width,
        "height": height,
        "low": low,
        "high": high,
    }


def sparkline(values: Sequence[float], width: float = 160, height: float = 32) -> dict[str, object]:
    """Polyline points for a SOL trend, scaled to its own range (0..1 at least)."""
    if not values:
        return {"points": "", "width": width, "height": height, "last": None}
    top = max(1.0, max(values))
    step = (width - 8) / max(1, len(values) - 1)
    coords = [(round(4 + i * step, 2), round(height - 4 - v / top * (height - 8), 2)) for i, v in enumerate(values)]
    return {
        "points": " ".join(f"{x},{y}" for x, y in coords),
        "width": width,
        "height": height,
        "last": coords[-1],
    }
