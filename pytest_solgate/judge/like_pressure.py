"""Judge (a machine that is always busy): a run timed on wall time while the machine was busy is
judged against the busy runs of its level that waited for a CPU about as much as it did. Pure.

A contended run on wall time is no baseline: its time holds its wait for a CPU, so against quiet
runs a drop is held back unless the wait cannot explain it (regression_rules.contended). Where
every run is busy (a shared CI runner, a laptop that is compiling) no quiet window ever forms and
nothing would be judged. Runs whose threads waited a like share of their sampling windows carry a
like wait in their times: among themselves they compare like with like, their spread is the noise
such a wait makes, and a drop beyond it (and the tolerance) is the code's.
"""

from __future__ import annotations

import dataclasses

from pytest_solgate.judge.window import BaselineRun, BaselineWindow
from pytest_solgate.measure.backends import THREAD_CPU_TIME, WALL_TIME
from pytest_solgate.results import Measurement
from pytest_solgate.support import units

# Two runs were about as busy when the stretches their waits can make differ by at most this
# factor: a thread that waited a share w of its window ran the rest, so a wait stretches a time by
# up to 1/(1-w). In stretches, not shares: at waits of 40-55 % they differ by 1.33x, at 86-90 %
# (a process at low priority beside busy neighbours) by 1.4x already. The window's spread shows
# how much the waits of the runs it keeps did move their times.
LIKE_STRETCH = 1.33
MIN_LIKE = 2  # like runs needed to judge: one run shows no spread


def busy_on_wall(m: Measurement) -> bool:
    """Whether ``m`` measured while the machine was busy, timed on a clock its wait is in, with
    that wait known (a CPU's pressure; a GPU's lock held by another run says no share)."""
    return bool(m.contended) and m.timing.mode != THREAD_CPU_TIME and m.contended_wait is not None


def judges_as_busy(run: BaselineRun) -> bool:
    """Whether ``run`` was busy on wall time with its wait known: no baseline, but one that a run as
    busy as it was is judged against (``window_for``)."""
    return run.kept_out == "contended" and run.wait is not None


def stretch(wait: float) -> float:
    """The most a wait for a CPU of a share ``wait`` of the window can stretch a run's time."""
    return 1 / max(1 - wait, 1e-6)


def like_runs(busy: tuple[BaselineRun, ...], wait: float) -> tuple[BaselineRun, ...]:
    """The busy runs whose waits stretch their times within LIKE_STRETCH of ``wait``'s, newest first."""
    return tuple(run for run in busy if run.wait is not None
                 and 1 / LIKE_STRETCH <= stretch(run.wait) / stretch(wait) <= LIKE_STRETCH)


def at_wait(run: BaselineRun, wait: float) -> BaselineRun:
    """A busy CPU run on wall time as it would have read had its thread waited ``wait`` of the
    time: a single thread that waited a share w of its window ran (1 - w) of it, so its time at
    another wait scales by the ratio of the two stretches (a wall time of 60 ms at a wait of 86 %,
    8.4 ms on a core, reads 70 ms at 88 %). Between runs as busy this moves a time by at most
    LIKE_STRETCH, and the window's spread shows how well the waits account for the times."""
    assert run.wait is not None  # like_runs keeps only runs with a wait
    factor = stretch(wait) / stretch(run.wait)
    return dataclasses.replace(run, seconds=run.seconds * factor, sol=run.sol / factor,
                               probe_seconds=run.probe_seconds * factor if run.probe_seconds else run.probe_seconds)


def window_for(m: Measurement, window: BaselineWindow | None) -> BaselineWindow | None:
    """The window ``m`` is judged against. A run busy on wall time is judged against the busy runs
    of like pressure in its level where there are at least MIN_LIKE (like with like: no wait is
    taken out of a drop, and a note says how busy they were); else, where its level has no quiet
    run, against all its busy runs (at least MIN_LIKE: a spread shows), as a busy run is against
    quiet ones: a drop its own wait can explain is held back (``ambiguous``, which fails `solgate
    check`), not passed unjudged. Any other run: ``window`` as it is."""
    if window is None or not busy_on_wall(m):
        return window
    assert m.contended_wait is not None  # busy_on_wall says so
    like = like_runs(window.busy, m.contended_wait)
    if len(like) >= MIN_LIKE:
        waits = [run.wait for run in like if run.wait is not None]
        note = (f"judged against {len(like)} runs as busy as this one: their threads waited "
                f"{units.percent(min(waits))}-{units.percent(max(waits))} of the time for a CPU, this run's "
                f"{units.percent(m.contended_wait)}")
        if m.timing.mode == WALL_TIME:
            like = tuple(at_wait(run, m.contended_wait) for run in like)
            note += " (their times as they would read at this run's wait)"
        kept_notes = tuple(n for n in window.notes if "contended run" not in n)  # they are the window now
        return dataclasses.replace(window, runs=like, notes=(note, *kept_notes), environment_differs=(),
                                   like_pressure=(min(waits), max(waits)))
    if not window.runs and len(window.busy) >= MIN_LIKE:
        note = f"no quiet run in this level: against its {len(window.busy)} busy runs, none as busy as this one"
        return dataclasses.replace(window, runs=window.busy, notes=(note, *window.notes))
    return window


def judged_window(m: Measurement, window: BaselineWindow | None) -> BaselineWindow | None:
    """The window ``m`` is judged against (``window_for``), or None where it holds no run to judge
    it by: what the gate and ``solgate compare`` judge a run against."""
    window = window_for(m, window)
    return window if window is not None and window.runs else None


def against_busy(window: BaselineWindow) -> bool:
    """Whether ``window`` (from ``window_for``) is busy runs: those as busy as this one, or, in a
    level with no quiet run, all of them; its first note then says which."""
    return window.like_pressure is not None or (bool(window.runs) and window.runs == window.busy)
