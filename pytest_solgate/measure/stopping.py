"""Measure: when sampling stops, kept apart from how samples are taken (nvbench's stopping criteria).

A rule reads the kept samples and the time spent sampling after each round, and answers stop
(noisy or not) or go on. ``NoiseTarget`` is the plugin's: stop once there are ``min_samples``
samples, ``min_time`` has passed and the median's relative 95 % confidence half-width is under
``noise``; or when ``max_time`` is spent, flagged noisy if the target was not met.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from pytest_solgate.support import stats
from pytest_solgate.support.settings import SamplingSettings


@dataclass(frozen=True)
class Stop:
    noisy: bool  # the time budget ran out before the noise target was met


class StoppingRule(Protocol):
    def decide(self, samples: Sequence[float], elapsed: float) -> Stop | None: ...


@dataclass(frozen=True)
class NoiseTarget:
    min_samples: int
    min_time: float
    max_time: float
    noise: float

    @classmethod
    def of(cls, settings: SamplingSettings) -> NoiseTarget:
        return cls(settings.min_samples, settings.min_time, settings.max_time, settings.noise)

    def decide(self, samples: Sequence[float], elapsed: float) -> Stop | None:
        noise = stats.relative_half_width(list(samples))
        if len(samples) >= self.min_samples and elapsed >= self.min_time and noise <= self.noise:
            return Stop(noisy=False)
        if elapsed >= self.max_time:
            return Stop(noisy=noise > self.noise or len(samples) < self.min_samples)
        return None
