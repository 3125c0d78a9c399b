"""Judge (over the history): the commits where a measurement's SOL stepped.

PELT (Killick, Fearnhead and Eckley, 2012) from the maintained ``ruptures`` library, on the log of
SOL (timing noise is multiplicative), one value per commit. It runs as ``KernelCPD`` with a linear
kernel: the same L2 cost and the same answer as ``Pelt(model="l2")``, computed in C (a 10,000-commit
series takes 0.3 s instead of minutes; benchmarks/history_scale.py). The penalty is
``6 * sigma^2 * log(n)``, three times the BIC-like ``2 * sigma^2 * log(n)``, with sigma estimated
robustly from successive differences (a step moves one difference, not the median of them). The
factor was chosen on simulated series of 30 commits with 4 % log-normal noise: 0.013 false change
points per series (0.45 with the plain BIC penalty), a 20 % step found at its exact commit in
98 % of series, a 10 % step in 71 % (docs/history.md). ``ruptures`` is an optional extra
(``pip install 'pytest-solgate[changes]'``), imported only here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pytest_solgate import stats
from pytest_solgate.errors import SolgateError

MIN_POINTS = 4  # fewer commits than this cannot show a step with a segment on each side
MIN_SEGMENT = 2  # a step needs two commits on each side: one odd run is noise, not a step
MIN_SIGMA = 1e-3  # a perfectly flat series still gets a finite penalty
PENALTY_FACTOR = 6.0


class ChangePointsUnavailable(SolgateError):
    pass


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new level
    before: float  # SOL level before (geometric mean of the segment)
    after: float  # SOL level from ``index`` on

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before > 0 else 0.0


def _ruptures():  # noqa: ANN202
    try:
        import ruptures
    except ImportError:
        raise ChangePointsUnavailable(
            "change points need the ruptures library: pip install 'pytest-solgate[changes]'"
        ) from None
    return ruptures


def find(values: Sequence[float]) -> list[ChangePoint]:
    """Change points of a SOL series (one value per commit, oldest first)."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) != len(values) or len(logs) < MIN_POINTS:
        return []
    ruptures = _ruptures()
    import numpy

    differences = [b - a for a, b in zip(logs, logs[1:])]
    centre = stats.median(differences)
    mad = stats.median([abs(d - centre) for d in differences])
    sigma = max(mad / 0.6745 / math.sqrt(2), MIN_SIGMA)
    penalty = PENALTY_FACTOR * sigma**2 * math.log(len(logs))
    signal = numpy.asarray(logs, dtype=float).reshape(-1, 1)
    ends = [int(end) for end in ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT).fit(signal).predict(pen=penalty)]
    bounds = [0, *ends]
    levels = [math.exp(stats.mean(logs[a:b])) for a, b in zip(bounds, bounds[1:])]
    return [ChangePoint(index=start, before=levels[i], after=levels[i + 1]) for i, start in enumerate(ends[:-1])]
