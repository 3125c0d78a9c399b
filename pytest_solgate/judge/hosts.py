"""Judge (the hosts of a window): the spread between the runners of one environment. Pure, no I/O.

Runners alike in GPU model, driver, CUDA, torch, triton, Python and clock setting are one
environment for baselines (record/baseline.py), but two GPUs of one model differ by a few percent.
That difference is noise to a run on a runner the window never saw (an ephemeral runner, a new host
every job), so it enters the noise floor: measured between robust per-host levels where hosts have
two runs or more; where no two hosts do, every run is its own host's only one, and the window's
run-to-run spread already holds the differences between hosts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pytest_solgate.support import stats

MIN_HOST_RUNS = 2  # runs of one host needed for a level of its own


@dataclass(frozen=True)
class HostSpread:
    """How the window's runs spread over the runners that ran them."""

    hosts: int  # distinct hosts among the window's runs
    between: float  # standard deviation (log) between the hosts' levels
    sd: float  # what a run on any of these hosts spreads about the window's centre (log)
    per_host: bool  # measured from per-host levels (else from the run-to-run spread)
    new_host: str = ""  # this run's host, when no run of the window ran there


def between_hosts(values: Sequence[float], hosts: Sequence[str], head_host: str) -> HostSpread | None:
    """The spread between the hosts that ran ``values`` (log run-level values, one per run, with its
    host); None when fewer than two hosts are named.

    A host with ``MIN_HOST_RUNS`` runs has a level, the median of its runs; with two such hosts the
    spread is the standard deviation of their levels, and a run on a host the window never saw
    spreads by it and by the runs' pooled spread about their host's level, in quadrature."""
    named = [(v, h) for v, h in zip(values, hosts) if h]
    if len({h for _, h in named}) < 2:
        return None
    by_host: dict[str, list[float]] = {}
    for value, host in named:
        by_host.setdefault(host, []).append(value)
    new_host = head_host if head_host and head_host not in by_host else ""
    repeated = {h: vs for h, vs in by_host.items() if len(vs) >= MIN_HOST_RUNS}
    if len(repeated) < 2:
        spread = stats.stdev([v for v, _ in named])
        return HostSpread(len(by_host), spread, spread, False, new_host)
    levels = {h: stats.median(vs) for h, vs in repeated.items()}
    between = stats.stdev(list(levels.values()))
    squares = sum((v - levels[h]) ** 2 for h, vs in repeated.items() for v in vs)
    dof = sum(len(vs) for vs in repeated.values()) - len(repeated)
    within = math.sqrt(squares / dof) if dof > 0 else 0.0
    return HostSpread(len(by_host), between, math.hypot(between, within), True, new_host)
