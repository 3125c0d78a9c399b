"""Record: open the history at a location, whichever database it is: a ``postgresql://`` URL opens
``PostgresStore`` (postgres.py, imported only then, so psycopg is needed only by those who use it),
anything else the SQLite file at that path (sqlite.py). Both implement ``Store`` (store.py).
"""

from __future__ import annotations

from pathlib import Path

from pytest_solgate.record.sqlite import SqliteStore
from pytest_solgate.record.store import Store
from pytest_solgate.support.errors import HistoryError, HistoryUnavailable, NoHistoryYet  # noqa: F401 - callers catch them here
from pytest_solgate.support.locations import is_history_url


def open_store(location: str | Path, create: bool = True) -> Store:
    """The store at ``location``: a ``postgresql://`` URL, or the path of a SQLite file."""
    if is_history_url(location):
        from pytest_solgate.record.postgres import PostgresStore

        return PostgresStore(str(location), create=create)
    return SqliteStore(location, create=create)


def open_for_reading(location: str | Path) -> Store | None:
    """The store when a history is there, else None (lookups must not create files or tables)."""
    if not is_history_url(location):
        p = Path(location)
        if not p.exists() or (p.is_file() and p.stat().st_size == 0):
            return None
    try:
        return open_store(location, create=False)
    except NoHistoryYet:
        return None
