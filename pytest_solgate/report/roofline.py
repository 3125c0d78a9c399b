"""Report: geometry of the roofline chart and of the small per-measurement plots (pure arithmetic).

The templates only draw what these functions place, so the positions can be tested exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pytest_solgate.profiles import HardwareProfile
from pytest_solgate.report import table
from pytest_solgate.results import Measurement


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
class Point:
    x: float
    y: float
    verdict: str
    title: str
    index: int
    kind: str = "kernel"  # "kernel" (gated) or "reference" (gate=False): drawn differently


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
    left_out: tuple[str, ...]  # measurements on neither chart (no bytes declared)
    links: tuple[Link, ...] = ()
    bandwidth: BandwidthChart | None = None


def _decade_label(exponent: int) -> str:
    """10^e as a short label: 100M, 1T, 0.01."""
    prefixes = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
    base = 3 * math.floor(exponent / 3)
    if exponent >= 0 and base in prefixes:
        return f"{10 ** (exponent - base)}{prefixes[base]}"
    return f"{10.0 ** exponent:g}"


def plottable(m: Measurement) -> bool:
    intensity = m.score.intensity
    return bool(intensity) and intensity > 0 and m.score.tflops > 0 and math.isfinite(intensity)


def data_movement(m: Measurement) -> bool:
    """Bytes and no FLOPs: its place is the bandwidth chart."""
    return m.work.bytes > 0 and not m.work.total_flops


def kind(m: Measurement) -> str:
    return "kernel" if m.gate else "reference"


def bandwidth_chart(profile: HardwareProfile, measurements: Sequence[Measurement]) -> BandwidthChart | None:
    rows = [(i, m) for i, m in enumerate(measurements) if data_movement(m)]
    if not rows:
        return None
    from pytest_solgate import units

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
    on_chart = [m for m in measurements if plottable(m)]
    bandwidth = profile.memory_bandwidth
    peaks = {p: profile.peak_flops(p) for p in profile.peak_tflops}
    ridges = [peak / bandwidth for peak in peaks.values()]
    intensities = [m.score.intensity for m in on_chart] or [1.0]
    rates = [m.score.tflops * 1e12 for m in on_chart] or [min(peaks.values())]
    x_low = math.floor(math.log10(min(min(intensities), min(ridges)) / 4))
    x_high = math.ceil(math.log10(max(max(intensities), max(ridges)) * 4))
    y_low = math.floor(math.log10(min(min(rates), bandwidth * 10**x_low) / 2))
    y_high = math.ceil(math.log10(max(max(rates), max(peaks.values())) * 2))
    x_axis, y_axis = Axis(x_low, x_high), Axis(y_low, y_high)

    def px(intensity: float) -> float:
        return round(x_axis.position(intensity, frame.left, frame.plot_width), 2)

    def py(rate: float) -> float:
        return round(y_axis.position(rate, frame.top, frame.plot_height, flip=True), 2)

    x_start = 10.0**x_low
    x_end = 10.0**x_high
    roofs = []
    label_floor = -math.inf  # labels go top to bottom; one never overlaps the one above it
    for precision, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        ridge = peak / bandwidth
        start_y = max(bandwidth * x_start, 10.0**y_low)
        start_x = start_y / bandwidth
        coords = [(px(start_x), py(start_y)), (px(ridge), py(peak)), (px(x_end), py(peak))]
        label_y = max(py(peak) - 4, label_floor + 12)
        label_floor = label_y
        roofs.append(
            Roof(
                label=f"{precision} {peak / 1e12:.3g} TFLOP/s",
                points=" ".join(f"{x},{y}" for x, y in coords),
                label_x=px(x_end) - 4,
                label_y=round(label_y, 2),
            )
        )
    points = tuple(
        Point(
            x=px(m.score.intensity),
            y=py(m.score.tflops * 1e12),
            verdict=str(table.verdict(m)),
            title=f"{kind(m)} {m.test} [{m.name}]: {m.score.intensity:.3g} FLOP/B, {m.score.tflops:.3g} TFLOP/s, "
                  f"SOL {m.score.sol:.2f}, {table.verdict(m)}",
            index=i,
            kind=kind(m),
        )
        for i, m in enumerate(measurements)
        if plottable(m)
    )
    placed = {(measurements[p.index].test, measurements[p.index].name): p for p in points}
    links = tuple(
        Link(kernel.x, kernel.y, reference.x, reference.y)
        for (test, name), kernel in placed.items() if kernel.kind == "kernel"
        for (other_test, _), reference in placed.items() if reference.kind == "reference" and other_test == test
    )
    left_out = tuple(f"{m.test} [{m.name}]" for m in measurements if not plottable(m) and not data_movement(m))
    return Chart(
        profile=profile.id,
        frame=frame,
        points=points,
        roofs=tuple(roofs),
        x_ticks=tuple(Tick(px(10.0**e), _decade_label(e)) for e in range(x_low, x_high + 1)),
        y_ticks=tuple(Tick(py(10.0**e), _decade_label(e)) for e in range(y_low, y_high + 1)),
        left_out=left_out,
        links=links,
        bandwidth=bandwidth_chart(profile, measurements),
    )


def strip(samples: Sequence[float], width: float = 300, height: float = 36) -> dict:
    """A strip plot of per-call times: x positions of samples, of the median and the quartiles."""
    if not samples:
        return {"dots": [], "median": None, "width": width, "height": height, "low": 0, "high": 0}
    from pytest_solgate import stats

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


def sparkline(values: Sequence[float], width: float = 160, height: float = 32) -> dict:
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
