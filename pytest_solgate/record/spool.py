"""Record: runs that could not reach the history server wait in ``.solgate/spool/`` until sent.

A spooled run is one solgate/1 file named by its run id, written atomically, so a run is either
spooled whole or not at all. The next run (or ``solgate import --spool``) sends every spooled run to
its history, oldest first, and deletes each file only after its run is in the history; run ids are
unique there, so a file sent twice (a crash between the commit and the delete) adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pytest_solgate.record import schema
from pytest_solgate.record.store import Store
from pytest_solgate.results import Measurement, RunInfo
from pytest_solgate.support import atomic
from pytest_solgate.support.errors import HistoryError, HistoryUnavailable, ImportFileError

FOLDER = "spool"


def folder(state_dir: Path) -> Path:
    return state_dir / FOLDER


def put(state_dir: Path, run: RunInfo, measurements: Sequence[Measurement]) -> Path:
    """Keep a run for later; raises HistoryError when even the local folder cannot take it."""
    target = folder(state_dir) / f"{run.id}.json"
    try:
        return atomic.write_text(target, schema.dump(run, measurements), "spooled run")
    except Exception as exc:  # noqa: BLE001 - the message must say the run is lost, whatever the cause
        raise HistoryError(f"{target}: cannot spool the run ({exc}); it is not saved anywhere") from None


@dataclass(frozen=True)
class Sent:
    sent: int = 0
    already_there: int = 0
    left: int = 0
    problems: tuple[str, ...] = ()


def waiting(state_dir: Path) -> list[Path]:
    """The spooled runs, oldest first."""
    return sorted(folder(state_dir).glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))


def send(store: Store, state_dir: Path) -> Sent:
    """Send every spooled run to ``store``; stop (keeping the rest) when the server goes away."""
    files = waiting(state_dir)
    sent = already = 0
    problems: list[str] = []
    for i, path in enumerate(files):
        try:
            run, measurements = schema.read_run(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError, ImportFileError) as exc:
            problems.append(f"{path}: kept in the spool, not sent ({exc})")
            continue
        try:
            added = store.record_run(run, measurements)
        except HistoryUnavailable:
            return Sent(sent, already, len(files) - i, tuple(problems))
        if added:
            sent += 1
        else:
            already += 1
        path.unlink(missing_ok=True)
    return Sent(sent, already, 0, tuple(problems))
