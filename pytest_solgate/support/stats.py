"""Support (measure and judge): small, dependency-free statistics on timing samples (pure functions)."""

from __future__ import annotations

import math
from typing import Sequence

Z_95 = 1.959963984540054


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile, q in [0, 1]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_interval(values: Sequence[float], z: float = Z_95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The ranks come from the binomial(n, 1/2) normal approximation; timing samples are skewed
    (a long right tail), so an interval on the mean would lie about the median.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n < 6:
        return (ordered[0], ordered[-1]) if ordered else (math.nan, math.nan)
    spread = z * math.sqrt(n) / 2
    lower = max(0, math.floor(n / 2 - spread) - 1)
    upper = min(n - 1, math.ceil(n / 2 + spread))
    return ordered[lower], ordered[upper]


def relative_half_width(values: Sequence[float]) -> float:
    """Half the median's 95 % confidence interval, relative to the median; inf under 6 samples."""
    if len(values) < 6:
        return math.inf
    low, high = median_interval(values)
    centre = median(values)
    if centre <= 0:
        return math.inf
    return (high - low) / 2 / centre


# One-sided 99 % quantiles of Student's t by degrees of freedom (any statistics table; e.g. the
# NIST/SEMATECH e-Handbook, table 1.4.2.7.3). Between listed entries the next smaller df is used,
# which errs towards a larger bound, i.e. fewer false alarms.
_T_99 = {
    1: 31.821, 2: 6.965, 3: 4.541, 4: 3.747, 5: 3.365, 6: 3.143, 7: 2.998, 8: 2.896, 9: 2.821,
    10: 2.764, 11: 2.718, 12: 2.681, 13: 2.650, 14: 2.624, 15: 2.602, 16: 2.583, 17: 2.567,
    18: 2.552, 19: 2.539, 20: 2.528, 21: 2.518, 22: 2.508, 23: 2.500, 24: 2.492, 25: 2.485,
    26: 2.479, 27: 2.473, 28: 2.467, 29: 2.462, 30: 2.457, 40: 2.423, 60: 2.390, 120: 2.358,
}
Z_99 = 2.326


def t_quantile_99(df: int) -> float:
    """One-sided 99 % quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("t quantile needs at least one degree of freedom")
    if df > 120:
        return Z_99
    return _T_99[max(k for k in _T_99 if k <= df)]


def prediction_bound_99(sd: float, count: int) -> float:
    """How far one new draw falls below (or above) the mean of ``count`` draws of standard deviation
    ``sd`` in only 1 % of cases: the one-sided 99 % t prediction bound (count >= 2)."""
    return t_quantile_99(count - 1) * sd * math.sqrt(1 + 1 / count)


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.sqrt(sum((v - centre) ** 2 for v in values) / (len(values) - 1))


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """(standard deviation, degrees of freedom) pooled over groups of draws that share a mean each
    (each group's deviations from its own mean), or None when no group has two draws."""
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    if df < 1:
        return None
    squares = sum(sum((v - mean(g)) ** 2 for v in g) for g in groups if len(g) >= 2)
    return math.sqrt(squares / df), df


def covered_length(intervals: Sequence[tuple[float, float]]) -> float:
    """How much of the line the (start, end) intervals cover, overlaps counted once (ints stay ints)."""
    covered: float = 0
    reach: float | None = None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered
