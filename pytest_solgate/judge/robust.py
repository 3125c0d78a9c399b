"""Judge (a window's spread): which runs of a baseline window are one disturbed run, not the
runner's noise, and which make most of its spread. Robust statistics on log values; pure."""

from __future__ import annotations

from typing import Sequence

from pytest_solgate.support import stats

MIN_ROBUST = 4  # window values needed before one far off the others can be told apart and left out
OUTLIER_SIGMAS = 4.5  # robust standard deviations from the window's median: a disturbed run, not noise
MIN_SCALE = 0.01  # robust spreads are taken as at least 1 %: no run within 4.5 % of the median is called disturbed
WIDENING_SIGMAS = 3.0  # kept runs this far from the window's median are named as widening it


def robust_scale(values: Sequence[float], floor_sd: float) -> tuple[float, float]:
    """The median of ``values`` and their robust standard deviation (1.4826 MAD, at least ``floor_sd``)."""
    centre = stats.median(values)
    return centre, max(1.4826 * stats.median([abs(v - centre) for v in values]), floor_sd, MIN_SCALE)


def robust_values(values: Sequence[float], floor_sd: float) -> tuple[list[int], float]:
    """Indices of the window values to keep, and their spread: a value further than
    ``OUTLIER_SIGMAS`` robust standard deviations from the median is one disturbed run, not the
    runner's noise, and is left out, so that one slow run cannot widen the floor several-fold.
    Needs four values; fewer are kept as they are."""
    keep = list(range(len(values)))
    if len(values) >= MIN_ROBUST:
        centre, scale = robust_scale(values, floor_sd)
        near = [i for i, v in enumerate(values) if abs(v - centre) <= OUTLIER_SIGMAS * scale]
        if len(values) - len(near) <= len(values) // 3:  # a few disturbed runs; more is a mixed window
            keep = near
    return keep, stats.stdev([values[i] for i in keep])


def widening(values: Sequence[float], keep: Sequence[int], floor_sd: float) -> list[int]:
    """The kept runs far enough from the others (``WIDENING_SIGMAS`` robust standard deviations)
    to make most of the window's spread: a mixed window. None in a window of one level."""
    if len(keep) < MIN_ROBUST:
        return []
    centre, scale = robust_scale([values[i] for i in keep], floor_sd)
    return [i for i in keep if abs(values[i] - centre) > WIDENING_SIGMAS * scale]
