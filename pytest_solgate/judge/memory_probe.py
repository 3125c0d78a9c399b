"""Judge (the memory probe): whether a window is compared relative to the plugin's own fixed copy,
timed beside each sample on the CPU, and how far the machine's memory moved from the window's. Pure."""

from __future__ import annotations

import math
from typing import Sequence

from pytest_solgate.judge.robust import MIN_ROBUST, MIN_SCALE, robust_values
from pytest_solgate.results import Measurement
from pytest_solgate.support import stats

# A window is compared relative to the memory probe when its runs' spread relative to the probe is
# at most this share of their raw spread (follows_probe): clearly better, not better by chance.
PROBE_GAIN = 0.75


def probe_ratios(m: Measurement, window_probes: Sequence[float | None]) -> list[float] | None:
    """Each baseline run's probe time over this run's, when ``m`` could be compared with its window
    relative to the memory probe: a memory-bound kernel whose run and every baseline run
    (``window_probes``: their probe times) timed the probe beside it (the CPU backend); else None."""
    probe = m.timing.probe_seconds
    timed = [run_probe for run_probe in window_probes if run_probe]
    if m.score.bound != "memory" or probe is None or probe <= 0 or len(timed) < len(window_probes):
        return None
    return [run_probe / probe for run_probe in timed]


def follows_probe(raw: Sequence[float], relative: Sequence[float], floor_sd: float) -> bool:
    """Whether a window's runs (log values) agree clearly better relative to the memory probe than
    raw: their robust spread relative to it is at most PROBE_GAIN of the raw one. Decided from
    the window alone, never from the run being judged.

    A shared machine's memory speed swings from one second to the next, and a memory-bound kernel
    with it; the probe, the plugin's own fixed copy timed after each sample, reads the same swings
    (docs/measurement.md: on the development VM the run-to-run deviation of add and copy fell
    from 0.06-0.25 to 0.014-0.04 in log time). A kernel declared memory-bound that is limited by
    something else on this machine (softmax's exp under a neighbour streaming memory: 0.18 raw,
    0.24 relative) does not follow it, and the probe would only add its swings: it is compared
    raw. A change of the user's code cannot move the probe, so a commit that slows every kernel
    alike is still seen."""
    if len(raw) < MIN_ROBUST:
        return False
    return robust_values(relative, floor_sd)[1] <= PROBE_GAIN * robust_values(raw, floor_sd)[1]


def memory_moved(m: Measurement, window_probes: Sequence[float | None]) -> tuple[float, float]:
    """How far (log time) this run's memory probe lay from its baseline runs' (``window_probes``) beyond their 99 %
    prediction range, and that range; (0.0, range) when within it, (0.0, 0.0) when no probe tells.

    The probe is the plugin's own fixed copy, so only the machine moves it. When this run's probe
    time lies outside the baseline runs' 99 % prediction range (as a kernel's own window is
    judged), the machine was in a state the window never saw: on the development VM, a minute in
    which every kernel ran 30-35 % slow while nothing else of ours ran. A kernel compared raw is
    not corrected for it, and one compared relative to the probe only follows it within the range
    its window showed (softmax did not: six false `regressed` in that minute). Such a run fails as
    `regressed` only beyond the floor plus the probe's own shift: a drop that even a kernel slowed
    as much as the machine's memory cannot explain; it never reads as `improved`."""
    probe = m.timing.probe_seconds
    logs = [math.log(probe) for probe in window_probes if probe]
    if not probe or probe <= 0 or len(logs) < 2:
        return 0.0, 0.0
    keep, sd = robust_values(logs, 0.0)
    kept = [logs[i] for i in keep]
    bound = stats.prediction_bound_99(max(sd, MIN_SCALE), len(kept))
    shift = math.log(probe) - stats.mean(kept)
    return (0.0 if abs(shift) <= bound else shift), bound
