"""Record: the SQLite history, the embedded default (one file at ``.solgate/history.db``).

``PRAGMA user_version`` holds the schema version, ``PRAGMA application_id`` marks the file as ours,
WAL mode and a busy timeout serve concurrent writers, and each run is one ``BEGIN IMMEDIATE``
transaction, so a process killed mid-write leaves no partial run.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Iterator, Sequence

from pytest_solgate.record.store import (
    ACCEPT_COLUMNS,
    MEASUREMENT_COLUMNS,
    RUN_COLUMNS,
    AcceptRow,
    DbRow,
    MeasurementRow,
    RunRow,
    Store,
    run_values,
)
from pytest_solgate.support.errors import HistoryElsewhere, HistoryError, NoHistoryYet

APPLICATION_ID = 0x536F4C47  # "SoLG"
BUSY_TIMEOUT_MS = 60_000

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the first layout; run facts beyond the basics lived in info_json.
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        started_at TEXT NOT NULL,
        commit_sha TEXT,
        branch TEXT,
        dirty INTEGER NOT NULL DEFAULT 0,
        host TEXT,
        device TEXT,
        profile TEXT,
        ceilings TEXT,
        command TEXT,
        info_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE measurements (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        test TEXT NOT NULL,
        name TEXT NOT NULL,
        profile TEXT NOT NULL,
        ceilings TEXT NOT NULL,
        sol REAL NOT NULL,
        seconds REAL NOT NULL,
        verdict TEXT,
        record_json TEXT NOT NULL
    );
    """,
    # 1 -> 2: a unique id per run (so `solgate import` of the same file adds nothing), the commit
    # date (trends are ordered by it), library versions as columns, and the lookup index.
    """
    ALTER TABLE runs ADD COLUMN run_uid TEXT;
    ALTER TABLE runs ADD COLUMN commit_time TEXT;
    ALTER TABLE runs ADD COLUMN driver TEXT;
    ALTER TABLE runs ADD COLUMN cuda TEXT;
    ALTER TABLE runs ADD COLUMN torch TEXT;
    ALTER TABLE runs ADD COLUMN triton TEXT;
    ALTER TABLE runs ADD COLUMN python TEXT;
    ALTER TABLE runs ADD COLUMN plugin TEXT;
    UPDATE runs SET run_uid = 'legacy-' || id WHERE run_uid IS NULL;
    CREATE UNIQUE INDEX runs_uid ON runs(run_uid);
    CREATE INDEX measurements_key ON measurements(test, name, profile, ceilings);
    CREATE INDEX runs_commit ON runs(commit_sha);
    """,
    # 2 -> 3: a run's measurements found through an index (a baseline window joins a few runs to
    # their measurements; without it every lookup walked all rows of the measurement's key).
    """
    CREATE INDEX measurements_run ON measurements(run_id, test);
    """,
    # 3 -> 4: how a run ended ('complete', or 'interrupted' by Ctrl-C: never a baseline), and the
    # accepted slowdowns (`solgate accept`): the level a measurement's baseline starts from.
    """
    ALTER TABLE runs ADD COLUMN status TEXT NOT NULL DEFAULT 'complete';
    CREATE TABLE accepts (
        id INTEGER PRIMARY KEY,
        commit_sha TEXT NOT NULL,
        pattern TEXT NOT NULL,
        reason TEXT NOT NULL,
        accepted_at TEXT NOT NULL,
        accepted_by TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX accepts_commit ON accepts(commit_sha);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SqliteStore(Store):
    """One open SQLite history file. Use as a context manager, or call ``close``."""

    def __init__(self, path: str | Path, create: bool = True) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        if self.path.is_dir():
            raise HistoryError(f"{self.path}: is a directory; --sol-history needs a database file path")
        existed = self.path.exists() and self.path.stat().st_size > 0
        if not existed and not create:
            raise NoHistoryYet(f"{self.path}: no history database here yet; run pytest with measurements first")
        if not existed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryElsewhere(f"{self.path}: cannot create its folder ({exc.strerror})") from None
        # A history on a read-only mount is still a history: it is read (baselines, `solgate
        # history`), and only writing it is refused.
        self.read_only = existed and not (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK))
        try:
            self.db = self._connect()
        except sqlite3.Error as exc:
            raise HistoryElsewhere(f"{self.path}: cannot open the history database ({exc})") from None
        try:
            self._check_and_migrate(existed)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise HistoryElsewhere(
                    f"{self.path}: not a solgate history database ({exc}); it was left untouched: "
                    "move it away"
                ) from None
            if "readonly" in str(exc) or "unable to open" in str(exc):
                raise HistoryElsewhere(f"{self.path}: cannot write the history ({exc})") from None
            raise HistoryError(f"{self.path}: history database error ({exc})") from None

    def _connect(self) -> sqlite3.Connection:
        if not self.read_only:
            return sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        uri = self.path.resolve().as_uri()
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
            db.execute("PRAGMA user_version").fetchone()
            return db
        except sqlite3.OperationalError:
            # A WAL database whose folder cannot hold the -shm file: nothing can change it there.
            return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)

    def close(self) -> None:
        self.db.close()

    # --- schema ---------------------------------------------------------------------------------

    def _check_and_migrate(self, existed: bool) -> None:
        db = self.db
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if existed and app_id != APPLICATION_ID and tables:
            raise HistoryElsewhere(
                f"{self.path}: a SQLite database that is not a solgate history (tables: "
                f"{', '.join(sorted(tables))}); it was left untouched"
            )
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.path}: history schema version {version} is newer than this pytest-solgate "
                f"understands ({SCHEMA_VERSION}); upgrade pytest-solgate"
            )
        if version < SCHEMA_VERSION and self.read_only:
            raise HistoryError(
                f"{self.path}: a read-only history at schema version {version} (this pytest-solgate reads {SCHEMA_VERSION}); "
                "migrate it once where it can be written (any solgate command there does it)"
            )
        if self.read_only:
            return
        if version < SCHEMA_VERSION:
            db.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have migrated while we waited for the lock.
                version = db.execute("PRAGMA user_version").fetchone()[0]
                for step in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[step].split(";"):
                        if statement.strip():
                            db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            try:
                db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError:
                pass  # a read-only location can still be read in its current mode
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA foreign_keys = ON")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back when it
        raises (a killed writer leaves nothing half-written); a database that cannot be written
        is one HistoryError."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise HistoryElsewhere(f"{self.path}: cannot write the history ({exc})") from None

    def _write_run(self, row: RunRow, info_json: str, measurements: list[MeasurementRow]) -> bool:
        with self._writing():
            if self.db.execute("SELECT 1 FROM runs WHERE run_uid = ?", (row["run_uid"],)).fetchone():
                return False  # sent before: nothing to add (the transaction commits nothing)
            cursor = self.db.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}, info_json) VALUES "
                f"({', '.join('?' for _ in RUN_COLUMNS)}, ?)",
                [*run_values(row), info_json],
            )
            self.db.executemany(
                f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in MEASUREMENT_COLUMNS)})",
                [(cursor.lastrowid, *m) for m in measurements],
            )
        return True

    def _write_accept(self, row: AcceptRow) -> bool:
        with self._writing():
            exists = self.db.execute("SELECT 1 FROM accepts WHERE commit_sha = ? AND pattern = ? AND accepted_at = ?",
                                     (row[0], row[1], row[3])).fetchone()
            if not exists:
                self.db.execute(f"INSERT INTO accepts ({', '.join(ACCEPT_COLUMNS)}) VALUES "
                                f"({', '.join('?' for _ in ACCEPT_COLUMNS)})", row)
        return not exists

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[DbRow]:
        try:
            return self.db.execute(sql, tuple(params)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: cannot read the history ({exc})") from None

    def integrity(self) -> str:
        said: tuple[str] = self.db.execute("PRAGMA integrity_check").fetchone()
        return said[0]


