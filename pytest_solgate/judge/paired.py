"""Judge (a paired A/B): HEAD against a base measured alternately on the same machine in the same
job (``solgate ab``). Pure, no I/O: the paired log-SOL differences in, the verdict and its interval
out.

Each round runs the base and HEAD once each, one right after the other, so whatever the machine
does over minutes (a neighbour, a clock, a warming room) moves both alike and leaves their ratio;
the rounds' ratios are then the evidence, as PyTorch's own benchmark CI pairs them. In log space
(timing noise is multiplicative) the mean difference over n rounds has the 99 % one-sided t bounds
``mean -/+ t(0.99, n-1) * s / sqrt(n)``, with s never less than the runs' own precision.
``regressed`` needs the mean drop beyond the tolerance AND the upper bound below zero: an
unchanged HEAD reads regressed in under 1 % of A/B runs; ``improved`` is the mirror image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pytest_solgate.results import AMBIGUOUS, IMPROVED, PASS, REGRESSED, Verdict
from pytest_solgate.support import stats

MIN_PAIRS = 3  # two pairs give a bound at t(0.99, 1) = 31.8 s/sqrt(2): three are the least useful
# The interval is tight once its half-width is at most this share of the tolerance, or once it
# lies wholly on one side of the tolerance (more rounds would not change the verdict).
TIGHT_SHARE = 0.5


@dataclass(frozen=True)
class Pair:
    """One round's two runs of a measurement: SOL at the base and at HEAD, and each run's own
    precision (relative 95 % half-width of its median)."""

    base: float
    head: float
    base_noise: float = 0.0
    head_noise: float = 0.0

    @property
    def difference(self) -> float:
        return math.log(self.head) - math.log(self.base)


@dataclass(frozen=True)
class PairedJudgement:
    verdict: Verdict
    change: float  # HEAD's SOL over the base's, geometric mean over the rounds, minus one
    low: float  # the one-sided 99 % bounds of ``change`` (together a 98 % interval)
    high: float
    pairs: int
    tolerance: float
    tight: bool  # the interval is narrow enough that more rounds would not change the verdict


def _spread(pairs: Sequence[Pair]) -> float:
    """The rounds' standard deviation of the log difference, never less than the runs' own
    precision says it must be (a standard deviation from two 95 % half-widths, in quadrature)."""
    within = [math.hypot(p.base_noise, p.head_noise) / stats.Z_95 for p in pairs
              if math.isfinite(p.base_noise) and math.isfinite(p.head_noise)]
    return max(stats.stdev([p.difference for p in pairs]), stats.median(within) if within else 0.0)


def judge_pairs(pairs: Sequence[Pair], tolerance: float) -> PairedJudgement:
    """The verdict of HEAD against the base from the rounds' pairs (at least one)."""
    n = len(pairs)
    mean = stats.mean([p.difference for p in pairs])
    bound = stats.t_quantile_99(n - 1) * _spread(pairs) / math.sqrt(n) if n >= 2 else math.inf
    low, high = math.exp(mean - bound) - 1, math.exp(mean + bound) - 1
    change = math.exp(mean) - 1
    one_side = high < -tolerance or low > tolerance or -tolerance < low <= high < tolerance
    tight = n >= MIN_PAIRS and (bound <= TIGHT_SHARE * abs(math.log1p(-tolerance)) or one_side)
    if n >= 2 and change < -tolerance and high < 0:
        verdict = REGRESSED
    elif n >= 2 and change > tolerance and low > 0:
        verdict = IMPROVED
    elif low < -tolerance and not (n >= 2 and high < -tolerance):
        verdict = AMBIGUOUS  # a drop beyond the tolerance is not ruled out, nor shown
    else:
        verdict = PASS
    return PairedJudgement(verdict, change, low, high, n, tolerance, tight)


def decided(judgements: Sequence[PairedJudgement]) -> bool:
    """Whether more rounds would change nothing: every measurement's interval is tight."""
    return all(j.tight for j in judgements)
