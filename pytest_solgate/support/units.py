"""Support (verdict messages and reports): human-readable numbers, shared by verdict messages and every report (pure)."""

from __future__ import annotations

import math


def seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if value >= scale or unit == "ns":
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


def _scaled(value: float, units: tuple[tuple[str, float], ...]) -> str:
    for unit, scale in units:
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    unit, scale = units[-1]
    return f"{value / scale:.3g} {unit}"


def bandwidth(gbps: float) -> str:
    """``gbps`` in GB/s (1e9 bytes per second)."""
    return _scaled(gbps * 1e9, (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3), ("B/s", 1.0)))


def flop_rate(tflops: float) -> str:
    """``tflops`` in TFLOP/s."""
    return _scaled(
        tflops * 1e12,
        (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6), ("kFLOP/s", 1e3), ("FLOP/s", 1.0)),
    )


def percent(fraction: float | None, signed: bool = False) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "-"
    return f"{fraction * 100:+.1f}%" if signed else f"{fraction * 100:.1f}%"


def noise(fraction: float) -> str:
    return "±?" if not math.isfinite(fraction) else f"±{fraction * 100:.1f}%"


def count(value: float) -> str:
    """1.5e9 -> '1.5G'."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def sol(value: float) -> str:
    """Two decimals, and enough significant digits below 0.1 that 0.005 never reads as 0.00."""
    return f"{value:.2f}" if value >= 0.1 or value == 0 else f"{value:.2g}"


def sol_fine(value: float) -> str:
    """Three decimals where a change in the third matters (history, compare, details), and three
    significant digits below 0.1, so that 0.00036 reads as 0.00036, never as 0.000."""
    if not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if value >= 0.1 or value == 0 else f"{value:.3g}"
