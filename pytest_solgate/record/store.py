"""Record: the history's interface (``Store``), the columns both databases share, and what is
computed from their rows (baseline runs, listings, one point per commit).

Two databases implement it: ``SqliteStore`` (sqlite.py), the embedded default, and
``PostgresStore`` (postgres.py), one server for a fleet of runners. Both keep the same semantics: a
versioned schema migrated forward in place, a foreign or newer one refused and left untouched, one
transaction per run (a run is all there or not at all), and run ids unique so that importing or
re-sending a run adds nothing. Reads share one set of SQL statements (below), all answered from
indexes: a baseline window or one test's trend never loads the whole history. ``history.py`` opens
the right one for a location.
"""

from __future__ import annotations

import fnmatch
import json
import math
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Protocol, Sequence, TypedDict, TypeVar, cast

from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.results import NOT_GATED, CommitPoint, Measurement, RunInfo, TrendPoint
from pytest_solgate.results_json import (
    BaselineFacts,
    Record,
    RecordError,
    baseline_facts,
    decode,
    decode_run,
    encode,
    encode_run,
)
from pytest_solgate.support.errors import HistoryElsewhere, HistoryError
from pytest_solgate.support.locations import redact
from pytest_solgate.support.stats import median, pooled_sd

RUN_COLUMNS = (
    "run_uid", "started_at", "commit_sha", "commit_time", "branch", "dirty", "host", "device",
    "driver", "cuda", "torch", "triton", "python", "plugin", "profile", "ceilings", "command", "status",
)
ACCEPT_COLUMNS = ("commit_sha", "pattern", "reason", "accepted_at", "accepted_by")
MEASUREMENT_COLUMNS = ("run_id", "test", "name", "profile", "ceilings", "sol", "seconds", "verdict", "record_json")


# Run facts that make two runs comparable, as the runs table names them (see environment.py).
ENVIRONMENT_COLUMNS = ("host", "driver", "cuda", "torch", "triton", "python")
# Whether a record holds a "contended" reading (written only when set), in SQL both databases read
# (no LIKE: its '%' would clash with PostgreSQL's parameter markers).
CONTENDED_SQL = "length(m.record_json) <> length(replace(m.record_json, '\"contended\": \"', ''))"
T = TypeVar("T")
K = TypeVar("K", bound="Keyed")
# A row as the database driver returns it: sqlite3's and psycopg's fetchall are typed Any (a row's
# types follow the SELECT), so each reader below names the columns its SELECT returns.
DbRow = Any
IN_LIST = 50  # values per IN (...) list (commits, test ids): well under SQLite's limit on bound parameters


class RunRow(TypedDict):
    """One run's facts as the runs table holds them (``RUN_COLUMNS``)."""

    run_uid: str
    started_at: str
    commit_sha: str | None
    commit_time: str | None
    branch: str | None
    dirty: int  # 0 or 1
    host: str
    device: str
    driver: str
    cuda: str
    torch: str
    triton: str
    python: str
    plugin: str
    profile: str
    ceilings: str
    command: str
    status: str


class Accept(TypedDict):
    """An accepted slowdown (``solgate accept``) as the accepts table holds it (``ACCEPT_COLUMNS``)."""

    commit_sha: str
    pattern: str
    reason: str
    accepted_at: str
    accepted_by: str


# The measurements table's columns for one measurement (MEASUREMENT_COLUMNS), less its run's id.
MeasurementRow = tuple[str, str, str, str, float, float, "str | None", str]
# A baseline window's row: run_uid, commit_sha, started_at, the run's id, status, record_json, then
# the run's ENVIRONMENT_COLUMNS (host, driver, cuda, torch, triton, python).
WindowRow = tuple[str, str, str, int, str, str, "str | None", "str | None", "str | None", "str | None", "str | None",
                  "str | None"]
# The accepts table's columns for one accepted slowdown (ACCEPT_COLUMNS).
AcceptRow = tuple[str, str, str, str, str]


def run_values(run: RunRow) -> list[object]:
    """A run's columns in ``RUN_COLUMNS`` order, as a database writes them."""
    columns: Mapping[str, object] = run
    return [columns[c] for c in RUN_COLUMNS]


def _run_of(row: Sequence[object]) -> RunRow:
    """The runs table's columns (a row read in ``RUN_COLUMNS`` order) by name."""
    return cast(RunRow, dict(zip(RUN_COLUMNS, row)))


def _accept_of(row: Sequence[object]) -> Accept:
    """The accepts table's columns (a row read in ``ACCEPT_COLUMNS`` order) by name."""
    return cast(Accept, dict(zip(ACCEPT_COLUMNS, row)))


class Keyed(Protocol):
    """What a listing is filtered by: a recorded measurement's test id and name (Summary, Measurement)."""

    @property
    def test(self) -> str: ...
    @property
    def name(self) -> str: ...


class Summary(NamedTuple):
    """A recorded measurement as the history's columns hold it: enough for listings and trends,
    without reading (and parsing) its whole record and samples."""

    test: str
    name: str
    profile: str
    ceilings: str
    sol: float
    seconds: float
    verdict: str | None
    contended: bool = False  # measured while the machine was busy (the record says so): never a baseline on wall time


def _baseline_run(
    run_uid: str, commit: str, started_at: str, status: str, facts: BaselineFacts, columns: Sequence[object]
) -> BaselineRun:
    environment = facts.environment
    if not environment:  # recorded before measurements carried their environment
        environment = {k: str(v) for k, v in zip(ENVIRONMENT_COLUMNS, columns) if v}
    return BaselineRun(
        commit=commit,
        run_id=run_uid,
        started_at=started_at,
        sol=float(facts.sol),
        seconds=float(facts.seconds),
        noise=float(facts.noise),
        ceilings_id=facts.ceilings_id,
        environment=environment,
        verdict=facts.verdict,
        judged_against=facts.judged_against,  # how the run itself was judged (judge/regression_rules.py held_back_slow)
        judged_change=_float(facts.judged_change),
        judged_floor=_float(facts.judged_floor),
        judged_tolerance=_float(facts.judged_tolerance),
        disturbed=_disturbance(status, facts),
        timer=facts.timer,
        probe_seconds=_positive(facts.probe_seconds),
        sm_clock_mhz=_positive(facts.sm_clock_mhz),
        wait=_share(facts.contended_wait),
    )


def _share(value: float | None) -> float | None:
    """A recorded share of a window (0 to 1), or None where the record holds none."""
    return value if value is not None and 0 <= value <= 1 else None


def baseline_run(run: RunRow, m: Measurement) -> BaselineRun:
    """One result as a baseline run, from its run's row (``run_row``, or a row the store read):
    what ``solgate bisect`` makes of the runs it finds and the runs it makes."""
    return _baseline_run(run["run_uid"], run["commit_sha"] or "", run["started_at"], run["status"],
                         baseline_facts(encode(m)), [run.get(c) for c in ENVIRONMENT_COLUMNS])


def _disturbance(status: str, facts: BaselineFacts) -> str:
    """Why a recorded run cannot be a baseline although it is clean, or '' (see baseline.py)."""
    if status == "interrupted":
        return "interrupted"
    if facts.verdict == NOT_GATED:  # interpreter timings, --sol-gate=off: never judged, never a baseline
        return "not-gated"
    if facts.contended:
        return "contended"
    if facts.noisy:
        return "noisy"
    return ""


def matches(pattern: str | None, test: str, name: str = "") -> bool:
    """``solgate history PATTERN``: a glob on the test id, on the test's name, or on the line the
    listing shows (``test [name]``, so ``*fused*`` finds a measurement named ``triton-fused``),
    or a substring of any of them."""
    if not pattern:
        return True
    function = test.split("::")[-1]  # ids start with the path: 'test_matmul*' matches the test name
    shown = f"{test} [{name}]" if name else test
    return any(fnmatch.fnmatchcase(text, pattern) or pattern in text for text in (test, function, shown))


def run_row(run: RunInfo) -> RunRow:
    """The runs table's columns for one run."""
    return {
        "run_uid": run.id,
        "started_at": run.started_at,
        "commit_sha": run.commit,
        "commit_time": run.commit_time,
        "branch": run.branch,
        "dirty": int(bool(run.dirty)),
        "host": run.host,
        "device": run.device,
        "driver": run.driver,
        "cuda": run.cuda,
        "torch": run.torch,
        "triton": run.triton,
        "python": run.python,
        "plugin": run.plugin,
        "profile": run.profile,
        "ceilings": run.ceilings,
        "command": redact(run.command),
        "status": run.status,
    }


def measurement_row(m: Measurement) -> MeasurementRow:
    """The measurements table's columns for one measurement, less its run's id."""
    verdict = m.verdict.value if m.verdict is not None else None
    # REAL columns take floats: an imported whole number beyond 2**63 (a legal, if absurd, SOL of an
    # instant kernel) would not fit SQLite's INTEGER.
    return (m.test, m.name, m.profile, m.ceilings, float(m.score.sol), float(m.timing.seconds), verdict,
            json.dumps(encode(m), allow_nan=True))


class Store:
    """What the plugin, the CLI and the reports need of a history, whichever database holds it.

    A store implements ``_rows`` (one parameterised query, ``?`` placeholders), ``_write_run``
    (one run in one transaction) and ``close``; everything else is shared.
    """

    location: str  # for messages: a path, or a URL with its password masked
    read_only: bool = False

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[DbRow]:
        raise NotImplementedError

    def _write_run(self, row: RunRow, info_json: str, measurements: list[MeasurementRow]) -> bool:
        raise NotImplementedError

    # --- writing --------------------------------------------------------------------------------

    def record_run(self, run: RunInfo, measurements: Sequence[Measurement]) -> bool:
        """Write one run and all its measurements in one transaction. False if the run id exists."""
        if self.read_only:
            raise HistoryElsewhere(f"{self.location}: the history is read-only here; this run is not saved in it")
        row = run_row(run)
        info = json.dumps({**encode_run(run), "command": row["command"]})
        return self._write_run(row, info, [measurement_row(m) for m in measurements])

    # --- reading --------------------------------------------------------------------------------

    def baseline_runs(
        self, test: str, name: str, profile: str, ceilings: str, commits: Sequence[str], limit: int
    ) -> list[BaselineRun]:
        """Up to ``limit`` clean runs with this result, nearest commit first (in ``commits`` order),
        newest run first within a commit. Commits are looked up in slices through the index, so
        a long ancestry costs only as many queries as it takes to fill the window. Runs that were
        interrupted, contended or noisy come back too, marked (``disturbed``): baseline.py keeps
        them out of the window but shows them to the change-point search."""
        found: list[BaselineRun] = []
        position = {commit: i for i, commit in enumerate(commits)}
        for start in range(0, len(commits), IN_LIST):
            chunk = list(commits[start:start + IN_LIST])
            rows: list[WindowRow] = self._rows(
                "SELECT r.run_uid, r.commit_sha, r.started_at, r.id, r.status, m.record_json, "
                f"{', '.join('r.' + c for c in ENVIRONMENT_COLUMNS)} FROM runs r "
                "JOIN measurements m ON m.run_id = r.id "
                f"WHERE r.commit_sha IN ({', '.join('?' for _ in chunk)}) AND r.dirty = 0 AND m.test = ? "
                "AND m.name = ? AND m.profile = ? AND m.ceilings = ?",
                (*chunk, test, name, profile, ceilings),
            )
            rows.sort(key=lambda row: (row[2], row[3]), reverse=True)  # newest run first...
            rows.sort(key=lambda row: position[row[1]])  # ...within the nearest commit first (stable)
            for run_uid, commit, started_at, _, status, record_json, *columns in rows:
                facts = self._read(record_json, baseline_facts)
                found.append(_baseline_run(run_uid, commit, started_at, status, facts, columns))
                if len(found) >= limit:
                    return found
        return found

    def accepts(self, commits: Sequence[str]) -> list[Accept]:
        """The accepted slowdowns recorded at any of ``commits`` (``solgate accept``), oldest first."""
        found: list[Accept] = []
        for start in range(0, len(commits), IN_LIST):
            chunk = list(commits[start:start + IN_LIST])
            rows = self._rows(f"SELECT {', '.join(ACCEPT_COLUMNS)} FROM accepts "
                              f"WHERE commit_sha IN ({', '.join('?' for _ in chunk)}) ORDER BY id", chunk)
            found += [_accept_of(row) for row in rows]
        return sorted(found, key=lambda a: a["accepted_at"])

    def all_accepts(self) -> list[Accept]:
        """Every accepted slowdown, oldest first: what ``solgate migrate`` copies."""
        return [_accept_of(row) for row in self._rows(f"SELECT {', '.join(ACCEPT_COLUMNS)} FROM accepts ORDER BY id")]

    def record_accept(self, accept: Accept) -> bool:
        """Record an accepted slowdown; False when the same one (commit, pattern, time) is there."""
        if self.read_only:
            raise HistoryError(f"{self.location}: the history is read-only here; the accept is not saved in it")
        row = (accept.get("commit_sha") or "", accept.get("pattern") or "", accept.get("reason") or "",
               accept.get("accepted_at") or "", accept.get("accepted_by") or "")
        return self._write_accept(row)

    def _write_accept(self, row: AcceptRow) -> bool:
        raise NotImplementedError

    def runs(self) -> list[RunRow]:
        """Every run's facts (the runs table's columns), oldest first."""
        rows = self._rows(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY started_at, id")
        return [_run_of(row) for row in rows]

    def tests(self) -> list[str]:
        """Every test id with a recorded measurement (an index-only scan)."""
        return [row[0] for row in self._rows("SELECT DISTINCT test FROM measurements ORDER BY test")]

    def series(self) -> list[tuple[str, str]]:
        """Every recorded (test id, measurement name)."""
        rows: list[tuple[str, str]] = self._rows("SELECT DISTINCT test, name FROM measurements ORDER BY test, name")
        return [(test, name) for test, name in rows]

    def results(self, pattern: str | None = None) -> list[tuple[RunRow, Measurement]]:
        """(run facts, measurement) pairs, oldest first, optionally filtered by a glob on test ids.
        Only the matching tests' measurements are read (through the index on test)."""
        return self._matching(pattern, self._results)

    def summaries(self, pattern: str | None = None) -> list[tuple[RunRow, Summary]]:
        """As ``results``, from the columns alone: what ``solgate history`` and ``trend`` show."""
        return self._matching(pattern, self._summaries)

    def _matching(self, pattern: str | None, read: Callable[[str, Sequence[object]], list[tuple[RunRow, K]]]
                  ) -> list[tuple[RunRow, K]]:
        if not pattern:
            return read("", ())
        keys = {(test, name) for test, name in self.series() if matches(pattern, test, name)}
        tests = sorted({test for test, _ in keys})
        found: list[tuple[RunRow, K]] = []
        for start in range(0, len(tests), IN_LIST):
            chunk = tests[start:start + IN_LIST]
            found += [pair for pair in read(f"WHERE m.test IN ({', '.join('?' for _ in chunk)})", chunk)
                      if (pair[1].test, pair[1].name) in keys]
        return sorted(found, key=lambda pair: pair[0]["started_at"])

    def newest(self, test: str, name: str, profile: str, ceilings: str) -> Measurement | None:
        """The most recently recorded measurement with this key (one indexed row)."""
        rows = self._rows(
            "SELECT record_json FROM measurements WHERE test = ? AND name = ? AND profile = ? AND ceilings = ? "
            "ORDER BY id DESC LIMIT 1",
            (test, name, profile, ceilings),
        )
        return self._decoded(rows[0][0]) if rows else None

    def results_at(self, commit: str) -> list[tuple[RunRow, Measurement]]:
        """The results of every run at one commit, oldest first (through the index on commit)."""
        return self._results("WHERE r.commit_sha = ?", (commit,))

    def commits(self) -> set[str]:
        """Every commit with a recorded run."""
        return {row[0] for row in self._rows("SELECT DISTINCT commit_sha FROM runs WHERE commit_sha IS NOT NULL")}

    def _joined(self, columns: str, where: str, params: Sequence[object]) -> list[tuple[RunRow, DbRow]]:
        """(run facts, the measurement's ``columns``) for the measurements ``where`` selects, oldest first."""
        rows = self._rows(
            f"SELECT {', '.join('r.' + c for c in RUN_COLUMNS)}, {columns} FROM measurements m "
            f"JOIN runs r ON r.id = m.run_id {where} ORDER BY r.started_at, r.id, m.id",
            params,
        )
        width = len(RUN_COLUMNS)
        return [(_run_of(row[:width]), row[width:]) for row in rows]

    def _summaries(self, where: str, params: Sequence[object]) -> list[tuple[RunRow, Summary]]:
        columns = ", ".join("m." + f for f in Summary._fields if f != "contended") + ", " + CONTENDED_SQL
        return [(run, Summary(*rest)) for run, rest in self._joined(columns, where, params)]

    def _results(self, where: str, params: Sequence[object]) -> list[tuple[RunRow, Measurement]]:
        return [(run, self._decoded(record)) for run, (record,) in self._joined("m.record_json", where, params)]

    def _decoded(self, record_json: str) -> Measurement:
        return self._read(record_json, decode)

    def _read(self, record_json: str, read: Callable[[Record], T]) -> T:
        """What ``read`` (results_json.py) takes from one measurements row's record; a record it cannot
        read is a RecordError (a HistoryError) naming the history and the field."""
        try:
            return read(json.loads(record_json))
        except RecordError as exc:
            raise RecordError(f"{self.location}: {exc}") from None
        except ValueError as exc:  # JSONDecodeError is a ValueError
            raise RecordError(f"{self.location}: a measurement's record is not JSON ({exc}); the row is damaged") from None

    def machine_noise(self, host: str | None, newest: int = 2000) -> tuple[float, int] | None:
        """This host's run-to-run noise: the log-SOL standard deviation between clean runs of one
        measurement at one commit, pooled over its series (its newest ``newest`` measurements), with
        its degrees of freedom; None when no measurement ran twice at a commit. A busy run among
        them widens it: it errs towards fewer failures. ``host`` None: the fleet's, between runs of
        one commit on any of its hosts (the spread between hosts included where a commit ran on several)."""
        on_host, params = ("r.host = ? AND ", (host, newest)) if host is not None else ("", (newest,))
        rows: list[tuple[str, str, str, str, str, float]] = self._rows(
            "SELECT m.test, m.name, m.profile, m.ceilings, r.commit_sha, m.sol FROM measurements m "
            f"JOIN runs r ON r.id = m.run_id WHERE {on_host}r.dirty = 0 AND r.status = 'complete' "
            "AND r.commit_sha IS NOT NULL AND m.sol > 0 ORDER BY m.id DESC LIMIT ?", params)
        groups: dict[tuple[str, str, str, str, str], list[float]] = {}
        for test, name, profile, ceilings, commit, sol in rows:
            groups.setdefault((test, name, profile, ceilings, commit), []).append(math.log(sol))
        return pooled_sd(list(groups.values()))

    def trend(self, test: str, name: str, profile: str, ceilings: str, limit: int = 50) -> list[TrendPoint]:
        """SOL of this result over clean runs, oldest first (by commit date, then run start)."""
        rows: list[tuple[str | None, str | None, str, float]] = self._rows(
            "SELECT r.commit_sha, r.commit_time, r.started_at, m.sol FROM measurements m "
            "JOIN runs r ON r.id = m.run_id WHERE m.test = ? AND m.name = ? AND m.profile = ? "
            "AND m.ceilings = ? AND r.dirty = 0 ORDER BY COALESCE(r.commit_time, r.started_at) DESC, "
            "r.started_at DESC LIMIT ?",
            (test, name, profile, ceilings, limit),
        )
        return [
            {"commit": commit, "commit_time": commit_time, "started_at": started, "sol": sol}
            for commit, commit_time, started, sol in reversed(rows)
        ]

    def whole_runs(self) -> Iterator[tuple[RunInfo, list[Measurement]]]:
        """Every run with its measurements, oldest first: what ``solgate migrate`` copies."""
        runs: list[tuple[int, str, str | None]] = self._rows("SELECT id, run_uid, info_json FROM runs ORDER BY started_at, id")
        for rowid, run_uid, info_json in runs:
            run = decode_run({**json.loads(info_json or "{}"), "id": run_uid})
            records: list[tuple[str]] = self._rows("SELECT record_json FROM measurements WHERE run_id = ? ORDER BY id", (rowid,))
            yield run, [self._decoded(record) for (record,) in records]


def commit_series(
    results: Sequence[tuple[RunRow, Summary]], commit_times: dict[str, str]
) -> dict[tuple[str, str, str, str], list[CommitPoint]]:
    """One point per commit for each (test, name, profile, ceilings): the median SOL and median
    time of the commit's clean runs and the newest run's verdict, ordered by commit date. Dirty
    runs and unknown commits are left out."""
    grouped: dict[tuple[str, str, str, str], dict[str, _Gathered]] = {}
    for run, m in results:  # oldest run first
        commit = run["commit_sha"]
        if run["dirty"] or not commit:
            continue
        when = commit_times.get(commit) or run["commit_time"] or run["started_at"]
        point = grouped.setdefault((m.test, m.name, m.profile, m.ceilings), {}).setdefault(
            commit, {"commit": commit, "commit_time": when, "started_at": run["started_at"], "runs": [], "times": [],
                     "contended": 0, "verdict": "-", "verdicts": []}
        )
        point["runs"].append(m.sol)
        point["times"].append(m.seconds)
        point["contended"] += bool(m.contended)
        point["verdict"] = m.verdict or "-"
        point["verdicts"].append(m.verdict or "-")
        point["started_at"] = max(point["started_at"], run["started_at"])
    series = {}
    for key, points in grouped.items():
        ordered = sorted(points.values(), key=lambda p: (p["commit_time"], p["started_at"]))
        series[key] = [CommitPoint(**p, sol=median(p["runs"]), seconds=median(p["times"])) for p in ordered]
    return series


class _Gathered(TypedDict):
    """A commit's point while its runs are gathered: a ``CommitPoint`` less the medians."""

    commit: str
    commit_time: str
    started_at: str
    runs: list[float]
    times: list[float]
    contended: int
    verdict: str
    verdicts: list[str]


def _positive(value: float | None) -> float | None:
    """A recorded number when there is one above zero, else None."""
    return float(value) if value is not None and value > 0 else None


def _float(value: float | None) -> float | None:
    return float(value) if value is not None else None
