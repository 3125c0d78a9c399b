"""Record: the history on a PostgreSQL server, one history for a fleet of runners.

Chosen by ``--sol-history=postgresql://user@host:port/db?sslmode=...`` (or ``SOLGATE_HISTORY``);
imported only then, so psycopg 3 is needed only by those who use it (the ``[postgres]`` extra).

The tables live in their own schema, ``solgate``, so they can share a database with anything else.
``solgate.meta`` names the application and the schema version; migrations run forward under an
advisory lock, so two runners upgrading at once do it once. A least-privilege role needs only
USAGE on the schema, SELECT on its four tables and INSERT on ``runs``, ``measurements`` and ``accepts``
(docs/ci.md); creating or migrating the tables is for the owner (``solgate init``).

Every statement is parameterised; every message names host, port and database, never the password.
"""

from __future__ import annotations

from types import ModuleType
from typing import Sequence

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
from pytest_solgate.support.errors import HistoryElsewhere, HistoryError, HistoryUnavailable, NoHistoryYet
from pytest_solgate.support.locations import redact

SCHEMA = "solgate"
APPLICATION = "pytest-solgate"
CONNECT_TIMEOUT_S = 5  # an unreachable server costs a run this long, once, before it is spooled
MIGRATION_LOCK = 0x536F4C47  # pg_advisory_xact_lock key ("SoLG"): one migrator at a time

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: the layout of SQLite schema 3, in PostgreSQL types, with its indexes.
    """
    CREATE SCHEMA IF NOT EXISTS solgate;
    CREATE TABLE solgate.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE solgate.runs (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_uid TEXT NOT NULL UNIQUE,
        started_at TEXT NOT NULL,
        commit_sha TEXT,
        commit_time TEXT,
        branch TEXT,
        dirty INTEGER NOT NULL DEFAULT 0,
        host TEXT,
        device TEXT,
        driver TEXT,
        cuda TEXT,
        torch TEXT,
        triton TEXT,
        python TEXT,
        plugin TEXT,
        profile TEXT,
        ceilings TEXT,
        command TEXT,
        info_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE solgate.measurements (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id BIGINT NOT NULL REFERENCES solgate.runs(id) ON DELETE CASCADE,
        test TEXT NOT NULL,
        name TEXT NOT NULL,
        profile TEXT NOT NULL,
        ceilings TEXT NOT NULL,
        sol DOUBLE PRECISION NOT NULL,
        seconds DOUBLE PRECISION NOT NULL,
        verdict TEXT,
        record_json TEXT NOT NULL
    );
    CREATE INDEX measurements_key ON solgate.measurements(test, name, profile, ceilings);
    CREATE INDEX measurements_run ON solgate.measurements(run_id, test);
    CREATE INDEX runs_commit ON solgate.runs(commit_sha);
    INSERT INTO solgate.meta VALUES ('application', 'pytest-solgate');
    INSERT INTO solgate.meta VALUES ('schema_version', '0');
    """,
    # 1 -> 2: SQLite schema 4: how a run ended, and the accepted slowdowns (`solgate accept`).
    """
    ALTER TABLE solgate.runs ADD COLUMN status TEXT NOT NULL DEFAULT 'complete';
    CREATE TABLE solgate.accepts (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        commit_sha TEXT NOT NULL,
        pattern TEXT NOT NULL,
        reason TEXT NOT NULL,
        accepted_at TEXT NOT NULL,
        accepted_by TEXT NOT NULL DEFAULT '',
        UNIQUE (commit_sha, pattern, accepted_at)
    );
    CREATE INDEX accepts_commit ON solgate.accepts(commit_sha);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

# What the server says when the fault is in the settings, not the network: each gets its own
# line naming what to fix. Anything else at connection time means the server cannot be reached.
_SETTINGS_FAULTS = (
    ("password authentication failed", "password authentication failed for user {user}: fix the password "
     "(in the URL, SOLGATE_HISTORY, PGPASSWORD or ~/.pgpass)"),
    ("role \"", "role {user} does not exist on the server: create it (see docs/ci.md) or fix the user in the URL"),
    ("database \"", "database {dbname} does not exist: create it (createdb -h {host} -p {port} {dbname}) or fix the URL"),
    ("no pg_hba.conf entry", "the server does not accept user {user} from this host: add a pg_hba.conf entry (see docs/ci.md)"),
    ("invalid ", "the URL is not valid ({detail}): write postgresql://user@host:port/database?sslmode=..."),
    ("ssl", "TLS is not set up as the URL asks ({detail}): fix sslmode/sslrootcert in the URL or the server's ssl settings"),
)


def _psycopg() -> ModuleType:  # imported on first use: an optional dependency
    try:
        import psycopg
    except ImportError:
        raise HistoryError(
            "a postgresql:// history needs psycopg 3: pip install 'pytest-solgate[postgres]'"
        ) from None
    return psycopg


class PostgresStore(Store):
    """One connection to a history on a PostgreSQL server. Use as a context manager."""

    def __init__(self, url: str, create: bool = True) -> None:
        psycopg = _psycopg()
        self._psycopg = psycopg  # its exception classes, for the methods below
        try:
            params = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise HistoryError(f"{redact(url)}: not a PostgreSQL URL ({redact(str(exc))}); "
                               "write postgresql://user@host:port/database") from None
        self.port = str(params.get("port") or "5432")
        if not all(part.isdigit() for part in self.port.split(",")):
            raise HistoryError(f"{redact(url)}: not a PostgreSQL URL (port {self.port!r} is not a number); "
                               "write postgresql://user@host:port/database")
        self._password = str(params.get("password") or "")
        self.host = str(params.get("host") or "localhost")
        self.dbname = str(params.get("dbname") or params.get("user") or "")
        self.user = str(params.get("user") or "")
        self.location = f"postgresql://{self.host}:{self.port}/{self.dbname}"
        timeout = params.get("connect_timeout") or CONNECT_TIMEOUT_S
        if not str(timeout).strip().isdigit():
            raise HistoryError(f"{self.location}: connect_timeout={timeout!r} in the URL is not a whole number of "
                               "seconds; write e.g. ?connect_timeout=5")
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=int(timeout))
        except psycopg.OperationalError as exc:
            raise self._connect_error(exc) from None
        except psycopg.Error as exc:
            raise HistoryError(f"{self.location}: cannot connect ({type(exc).__name__}: {self._clean(exc)})") from None
        try:
            self._check_and_migrate(create)
        except BaseException:
            self.conn.close()
            raise

    def _clean(self, exc: BaseException) -> str:
        """An error's first line, with every credential masked."""
        text = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return text.replace(self._password, "***") if self._password else text

    def _connect_error(self, exc: BaseException) -> HistoryError:
        text = str(exc)
        for marker, advice in _SETTINGS_FAULTS:
            if marker in (text.lower() if marker == "ssl" else text):
                detail = self._clean(exc).split("failed: ")[-1]
                return HistoryError(f"{self.location}: " + advice.format(
                    user=self.user or "(none)", dbname=self.dbname, host=self.host, port=self.port, detail=detail))
        return HistoryUnavailable(
            f"{self.location}: cannot reach the history server at {self.host} port {self.port} "
            f"({type(exc).__name__}: {self._clean(exc).split('failed: ')[-1]})"
        )

    def close(self) -> None:
        self.conn.close()

    # --- schema ---------------------------------------------------------------------------------

    def _version(self) -> int | None:
        """The schema version; None when there is no solgate history in this database."""
        # pg_catalog lists tables whatever this role may do with them (information_schema hides
        # the ones it has no privilege on, which would make a history look absent).
        tables = {row[0] for row in self.conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v')", (SCHEMA,))}
        if not tables:
            return None
        if "meta" not in tables:
            raise self._foreign(f"its schema '{SCHEMA}' holds tables {', '.join(sorted(tables))} but no solgate meta table")
        try:
            meta = dict(self.conn.execute("SELECT key, value FROM solgate.meta").fetchall())
        except self._psycopg.errors.InsufficientPrivilege:
            raise self._no_read_grant() from None
        if meta.get("application") != APPLICATION:
            raise self._foreign(f"its schema '{SCHEMA}' belongs to {meta.get('application') or 'another application'}")
        try:
            return int(meta.get("schema_version", ""))
        except ValueError:
            raise self._foreign(f"its schema version {meta.get('schema_version')!r} is not a number") from None

    def _no_read_grant(self) -> HistoryError:
        return HistoryError(f"{self.location}: role {self.user} may not read the solgate tables: "
                            "GRANT USAGE ON SCHEMA solgate and SELECT on its tables (docs/ci.md)")

    def _foreign(self, why: str) -> HistoryError:
        return HistoryElsewhere(f"{self.location}: not a solgate history ({why}); it was left untouched: "
                            "use another database or schema owner")

    def _check_and_migrate(self, create: bool) -> None:
        psycopg = self._psycopg
        try:
            # The shared statements name bare tables; ours are in their own schema.
            self.conn.execute("SET search_path TO solgate")
            version = self._version()
            if version is None and not create:
                raise NoHistoryYet(f"{self.location}: no history here yet; run pytest with measurements first")
            if version is not None and version > SCHEMA_VERSION:
                raise HistoryError(
                    f"{self.location}: history schema version {version} is newer than this pytest-solgate "
                    f"understands ({SCHEMA_VERSION}); upgrade pytest-solgate"
                )
            if version is None or version < SCHEMA_VERSION:
                self._migrate()
        except psycopg.errors.InsufficientPrivilege:
            raise HistoryError(
                f"{self.location}: role {self.user} may not create or upgrade the solgate tables; run "
                "`solgate init --history URL` once as the database owner, then GRANT as docs/ci.md shows"
            ) from None
        except psycopg.OperationalError as exc:
            raise HistoryUnavailable(f"{self.location}: the history server went away ({self._clean(exc)})") from None
        except psycopg.Error as exc:
            raise HistoryError(f"{self.location}: history database error ({type(exc).__name__}: {self._clean(exc)})") from None

    def _migrate(self) -> None:
        with self.conn.transaction():
            # Another runner may have migrated while we waited for the lock: read again under it.
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = self._version() or 0
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
            self.conn.execute("UPDATE solgate.meta SET value = %s WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    # --- the two primitives the shared Store needs ----------------------------------------------

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[DbRow]:
        psycopg = self._psycopg
        try:
            rows: list[DbRow] = self.conn.execute(self._sql(sql), tuple(params)).fetchall()
            return rows
        except psycopg.OperationalError as exc:
            raise HistoryUnavailable(f"{self.location}: the history server went away ({self._clean(exc)})") from None
        except psycopg.errors.InsufficientPrivilege:
            raise self._no_read_grant() from None
        except psycopg.Error as exc:
            raise HistoryError(f"{self.location}: cannot read the history ({type(exc).__name__}: {self._clean(exc)})") from None

    def _write_run(self, row: RunRow, info_json: str, measurements: list[MeasurementRow]) -> bool:
        psycopg = self._psycopg
        try:
            with self.conn.transaction():
                inserted = self.conn.execute(
                    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}, info_json) "
                    f"VALUES ({', '.join('%s' for _ in RUN_COLUMNS)}, %s) "
                    "ON CONFLICT (run_uid) DO NOTHING RETURNING id",
                    [*run_values(row), info_json],
                ).fetchone()
                if inserted is None:
                    return False  # already there: importing or re-sending a run adds nothing
                with self.conn.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "
                        f"VALUES ({', '.join('%s' for _ in MEASUREMENT_COLUMNS)})",
                        [(inserted[0], *m) for m in measurements],
                    )
        except psycopg.OperationalError as exc:
            # The transaction did not commit: the server rolls it back; the caller spools the run.
            raise HistoryUnavailable(f"{self.location}: the history server went away while writing "
                                     f"({type(exc).__name__}: {self._clean(exc)})") from None
        except psycopg.errors.InsufficientPrivilege:
            raise HistoryError(f"{self.location}: role {self.user} may not write the solgate tables: "
                               "GRANT INSERT ON solgate.runs, solgate.measurements (docs/ci.md)") from None
        except psycopg.Error as exc:
            raise HistoryError(f"{self.location}: cannot write the history ({type(exc).__name__}: {self._clean(exc)})") from None
        return True

    def _write_accept(self, row: AcceptRow) -> bool:
        psycopg = self._psycopg
        try:
            inserted = self.conn.execute(
                f"INSERT INTO accepts ({', '.join(ACCEPT_COLUMNS)}) VALUES ({', '.join('%s' for _ in ACCEPT_COLUMNS)}) "
                "ON CONFLICT (commit_sha, pattern, accepted_at) DO NOTHING RETURNING id", row,
            ).fetchone()
        except psycopg.OperationalError as exc:
            raise HistoryUnavailable(f"{self.location}: the history server went away while writing ({self._clean(exc)})") from None
        except psycopg.errors.InsufficientPrivilege:
            raise HistoryError(f"{self.location}: role {self.user} may not write the solgate tables: "
                               "GRANT INSERT ON solgate.accepts (docs/ci.md)") from None
        except psycopg.Error as exc:
            raise HistoryError(f"{self.location}: cannot write the history ({type(exc).__name__}: {self._clean(exc)})") from None
        return inserted is not None

    @staticmethod
    def _sql(sql: str) -> str:
        """The shared statements are written with SQLite's ``?`` placeholders."""
        return sql.replace("?", "%s")

    def integrity(self) -> str:
        orphans = self._rows("SELECT count(*) FROM measurements m LEFT JOIN runs r ON r.id = m.run_id WHERE r.id IS NULL")
        return "ok" if orphans[0][0] == 0 else f"{orphans[0][0]} measurements without a run"
