"""Record: save a finished run in its history, or in the spool when the history server is away.

Runs before any report is rendered (reports read finished records only). A history that cannot be
written never changes a verdict: the run is spooled (server unreachable) or the reason is said in
one line (read-only file, foreign database, missing privilege), and the result says the run is
lost, so that the session can fail in CI (``--sol-require-history``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pytest_solgate.record import history, spool, store
from pytest_solgate.results import Measurement, RunInfo
from pytest_solgate.support.errors import HistoryElsewhere, HistoryError


@dataclass(frozen=True)
class Saved:
    """What saving a run came to: the measurements with their history trend, the lines to print,
    and whether the run is lost (in neither the history nor the spool)."""

    measurements: list[Measurement]
    messages: list[str]
    lost: bool = False


def _spool(state_dir: Path, run: RunInfo, measurements: Sequence[Measurement], why: HistoryError) -> Saved:
    try:
        path = spool.put(state_dir, run, measurements)
    except HistoryError as exc:
        return Saved(list(measurements), [f"solgate: history NOT saved: {why}; {exc}"], lost=True)
    return Saved(list(measurements), [f"solgate: history unavailable: {why}; run spooled to {path}, the next run sends it"])


def _not_saved(why: HistoryError, remedy: str) -> str:
    # The advice only where another location is the fix: a missing grant says what to grant.
    return f"solgate: history NOT saved: {why}" + (f"; {remedy}" if isinstance(why, HistoryElsewhere) else "")


def save(location: str, state_dir: Path, run: RunInfo, measurements: Sequence[Measurement], remedy: str) -> Saved:
    """Record ``run`` (after any spooled runs). ``remedy`` ends the line that says the history
    could not be written (what to change, worded for the setting that named it)."""
    measurements = list(measurements)
    messages: list[str] = []
    try:
        store = history.open_store(location)
    except history.HistoryUnavailable as exc:
        return _spool(state_dir, run, measurements, exc)
    except HistoryError as exc:
        return Saved(measurements, [_not_saved(exc, remedy)], lost=True)
    with store:
        if spool.folder(state_dir).is_dir():
            sent = spool.send(store, state_dir)
            if sent.sent or sent.already_there:
                messages.append(f"solgate: {sent.sent} spooled run(s) sent to {store.location}"
                                + (f" ({sent.already_there} were there already)" if sent.already_there else ""))
            messages += [f"solgate: {problem}" for problem in sent.problems]
        try:
            store.record_run(run, measurements)
        except history.HistoryUnavailable as exc:
            spooled = _spool(state_dir, run, measurements, exc)
            return Saved(measurements, messages + spooled.messages, spooled.lost)
        except HistoryError as exc:
            return Saved(measurements, messages + [_not_saved(exc, remedy)], lost=True)
        messages.append(f"solgate: run recorded in {store.location}")
        return Saved(*_with_trends(store, measurements, messages))


def read_trends(location: str, measurements: Sequence[Measurement]) -> tuple[list[Measurement], list[str]]:
    """For a run that is not saved (``--sol-no-save``): the measurements with the trend the history
    already holds, so the reports show what the baselines came from. Creates nothing."""
    try:
        store = history.open_for_reading(location)
    except HistoryError as exc:
        return list(measurements), [f"solgate: the reports show no trends ({exc})"]
    if store is None:
        return list(measurements), []
    with store:
        return _with_trends(store, measurements, [])


def _with_trends(store: store.Store, measurements: Sequence[Measurement], messages: list[str]) -> tuple[list[Measurement], list[str]]:
    try:
        return [m.replace(trend=tuple(store.trend(m.test, m.name, m.profile, m.ceilings))) for m in measurements], messages
    except HistoryError as exc:
        return list(measurements), messages + [f"solgate: the reports show no trends ({exc})"]
