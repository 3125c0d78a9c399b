"""Support (verdict messages and reports): human-readable numbers, shared by verdict messages and every report (pure)."""

from __future__ import annotations

import math


def seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if value < 0:  # a time lost below the floor: the same units as its magnitude, not '-5.32e+03 ns'
        return "-" + seconds(-value)
    return _scaled(value, (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)))


def _scaled(value: float, units: tuple[tuple[str, float], ...], space: str = " ") -> str:
    """Three significant digits in the largest unit the value reaches once rounded: 999999 is
    '1M', never '1e+03k'. ``units`` run from the largest scale down."""
    rounded = float(f"{value:.3g}")
    for unit, scale in units:
        if rounded >= scale:
            return f"{rounded / scale:.3g}{space}{unit}"
    unit, scale = units[-1]
    return f"{value / scale:.3g}{space}{unit}"


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
    """1.5e9 -> '1.5G'; 999999 -> '1M'."""
    return _scaled(value, (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)), space="")


def plural(n: int, word: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def cut_middle(text: str, width: int) -> str:
    """``text`` cut from the middle to ``width`` characters: both ends of a test id say most."""
    if len(text) <= width or width < 5:
        return text
    keep = width - 1
    return text[: (keep + 1) // 2] + "…" + text[len(text) - keep // 2:]


def sol(value: float) -> str:
    """Two decimals, and enough significant digits below 0.1 that 0.005 never reads as 0.00."""
    return f"{value:.2f}" if value >= 0.1 or value == 0 else f"{value:.2g}"


def sol_fine(value: float) -> str:
    """Three decimals where a change in the third matters (history, compare, details), and three
    significant digits below 0.1, so that 0.00036 reads as 0.00036, never as 0.000."""
    if not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if value >= 0.1 or value == 0 else f"{value:.3g}"
