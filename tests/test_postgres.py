"""The PostgreSQL history on a real server: faults, security, migration.

Everything the two stores share (baselines, windows, trends, runs written once, 16 writers at once)
runs on both through the ``history_location`` and ``repo`` fixtures in test_history.py and
test_faults.py; this file holds what only a server can do: go away, refuse a login, lack a grant.
"""

import json
import multiprocessing
import os
import random
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from pytest_solgate.record import history, save, spool
from pytest_solgate.results import RunInfo
from pytest_solgate.results_json import encode_run
from pytest_solgate.support.locations import redact
from solgate_testing import FAST_TIMING, KERNELS, SYNTHETIC_PROFILE, changed, recorded
from test_cli import solgate
from throwaway_postgres import ADMIN_PASSWORD, Cluster

DOCS = Path(__file__).resolve().parents[1] / "docs"


def a_measurement(i=0, test=None):
    return recorded(test=test or f"t.py::test_{i}", samples=(1e-3,) * 20)


def a_run(run_id, commit="a" * 40, minute=0):
    return RunInfo(id=run_id, started_at=f"2026-12-02T00:{minute:02d}:00+00:00", commit=commit, profile="synthetic")


@pytest.fixture
def own_cluster():
    """A cluster of this test's own, for tests that stop the server."""
    cluster = Cluster().start()
    yield cluster
    cluster.destroy()


def write_suite(pytester, body="def test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n"):
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_k=KERNELS + "\n" + body)


def everything_written(pytester, result):
    texts = [result.stdout.str(), result.stderr.str()]
    for path in pytester.path.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".html", ".md", ".xml", ".db"):
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


# --- security: the password is in no output ------------------------------------------------------

def test_a_run_on_the_server_never_shows_the_password(pytester, postgres_url):
    write_suite(pytester)
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={postgres_url}",
                                "--sol-json=out.json", "--sol-report=report.html", "--sol-markdown=out.md",
                                "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["solgate: run recorded in postgresql://127.0.0.1:*/t_*"])
    with history.open_store(postgres_url) as store:
        (run,) = store.runs()
        assert "--sol-history=postgresql://admin:***@127.0.0.1" in run["command"]
        (whole, _), = store.whole_runs()
        assert ADMIN_PASSWORD not in json.dumps(encode_run(whole))
    assert ADMIN_PASSWORD not in everything_written(pytester, result)
    assert "admin:***@" in json.loads((pytester.path / "out.json").read_text())["run"]["command"]


def test_redact_masks_every_form_of_password():
    assert redact("pytest --sol-history=postgresql://ci:p%40ss@db:5432/h?sslmode=require -q") == \
        "pytest --sol-history=postgresql://ci:***@db:5432/h?sslmode=require -q"
    assert redact("postgres://u:x@h/d postgresql://v@h/d") == "postgres://u:***@h/d postgresql://v@h/d"
    assert redact("postgresql://u@h/d?password=hunter2&sslmode=verify-full") == \
        "postgresql://u@h/d?password=***&sslmode=verify-full"
    assert redact("--sol-history=.solgate/history.db") == "--sol-history=.solgate/history.db"


def test_sql_is_parameterised(postgres_url):
    nasty = "t.py::test_x['; DROP TABLE runs; --]"
    with history.open_store(postgres_url) as store:
        assert store.record_run(a_run("r'1"), [a_measurement(test=nasty)])
        assert [m.test for _, m in store.results("*DROP*")] == [nasty]
        assert [b.run_id for b in store.baseline_runs(nasty, "default", "synthetic", "measured", ["a" * 40], 5)] == ["r'1"]


# --- configuration faults: one line each, naming what to fix ------------------------------------

@pytest.mark.parametrize("fault, expected", [
    ("password", "*: password authentication failed for user admin: fix the password (in the URL, SOLGATE_HISTORY, PGPASSWORD or ~/.pgpass)"),
    ("database", "*: database no_such_db does not exist: create it (createdb -h 127.0.0.1 -p * no_such_db) or fix the URL"),
    ("scheme", "*: not a PostgreSQL URL*"),
])
def test_wrong_settings_are_one_line_and_never_show_the_password(pytester, postgres_cluster, fault, expected):
    write_suite(pytester)
    url = {
        "password": postgres_cluster.url("postgres", password="Wr0ng-pa55word"),
        "database": postgres_cluster.url("no_such_db"),
        "scheme": f"postgresql://admin:{ADMIN_PASSWORD}@127.0.0.1:notaport/x",
    }[fault]
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.stderr.lines if line.strip()]
    assert re.fullmatch(expected.replace("(", r"\(").replace(")", r"\)").replace("*", ".*").replace("?", r"\?"), line[len("ERROR: "):]), line
    assert "Wr0ng-pa55word" not in everything_written(pytester, result)
    assert ADMIN_PASSWORD not in everything_written(pytester, result)
    done = solgate("history", "--history", url, cwd=pytester.path)  # the CLI says the same, in one line
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "Wr0ng-pa55word" not in done.stderr + done.stdout and ADMIN_PASSWORD not in done.stderr + done.stdout


LEAST_PRIVILEGE = re.compile(r"```sql\n(-- least privilege.*?)```", re.S)


def documented_grants(role, password):
    """The role docs/ci.md tells a team to create, exactly as written there."""
    (block,) = LEAST_PRIVILEGE.findall((DOCS / "ci.md").read_text())
    return block.replace("solgate_ci", role).replace("'change-me'", f"'{password}'")


def test_the_documented_least_privilege_role_records_and_reads_but_cannot_delete(pytester, postgres_cluster, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    done = solgate("init", "--history", postgres_url)  # once, as the owner
    assert done.returncode == 0, done.stderr
    for statement in documented_grants("ci_role", "ci-pw").split(";"):
        statement = "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--"))
        if statement.strip():
            postgres_cluster.sql(statement.replace("solgate_history", f'"{database}"'), database)
    ci_url = postgres_cluster.url(database, user="ci_role", password="ci-pw")
    write_suite(pytester)
    for _ in range(2):  # the second run reads the first as its baseline
        result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={ci_url}", "--sol-baseline=none")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["solgate: run recorded in postgresql://*"])
    with history.open_store(ci_url) as store:
        assert len(store.runs()) == 2
        with pytest.raises(Exception, match="permission denied"):
            store.conn.execute("DELETE FROM runs")


def test_a_missing_privilege_names_the_grant(pytester, postgres_cluster, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    assert solgate("init", "--history", postgres_url).returncode == 0
    postgres_cluster.sql("CREATE ROLE reader LOGIN PASSWORD 'rpw'", database)
    postgres_cluster.sql("GRANT USAGE ON SCHEMA solgate TO reader; GRANT SELECT ON ALL TABLES IN SCHEMA solgate TO reader", database)
    write_suite(pytester)
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml",
                                f"--sol-history={postgres_cluster.url(database, user='reader', password='rpw')}")
    result.assert_outcomes(passed=1)  # verdicts stand; the history is not written, and it says why
    result.stdout.fnmatch_lines(["solgate: history NOT saved: postgresql://*: role reader may not write the solgate tables: "
                                 "GRANT INSERT ON solgate.runs, solgate.measurements (docs/ci.md)"])
    postgres_cluster.sql("CREATE ROLE nobody_much LOGIN PASSWORD 'npw'", database)
    done = solgate("history", "--history", postgres_cluster.url(database, user="nobody_much", password="npw"))
    assert done.returncode == 2 and "role nobody_much may not" in done.stderr, done.stderr


def test_a_role_that_cannot_create_the_tables_is_told_to_run_init(postgres_cluster, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    postgres_cluster.sql("CREATE ROLE newcomer LOGIN PASSWORD 'npw'", database)
    postgres_cluster.sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC", database)
    postgres_cluster.sql(f'REVOKE CREATE ON DATABASE "{database}" FROM PUBLIC', database)
    with pytest.raises(history.HistoryError, match="role newcomer may not create or upgrade the solgate tables; "
                                                   "run `solgate init --history URL` once as the database owner"):
        history.open_store(postgres_cluster.url(database, user="newcomer", password="npw"))


# --- foreign and newer databases are refused and left alone --------------------------------------

def test_a_foreign_schema_is_refused_and_left_alone(postgres_cluster, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    postgres_cluster.sql("CREATE SCHEMA solgate; CREATE TABLE solgate.runs (customer TEXT); "
                         "INSERT INTO solgate.runs VALUES ('keep me')", database)
    with pytest.raises(history.HistoryError, match="not a solgate history .its schema 'solgate' holds tables runs but no "
                                                   "solgate meta table.; it was left untouched"):
        history.open_store(postgres_url)
    postgres_cluster.sql("CREATE TABLE solgate.meta (key TEXT, value TEXT); INSERT INTO solgate.meta VALUES ('application', 'otava')", database)
    with pytest.raises(history.HistoryError, match="belongs to otava"):
        history.open_store(postgres_url)
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT customer FROM solgate.runs").fetchall() == [("keep me",)]


def test_a_newer_schema_is_refused(postgres_url):
    with history.open_store(postgres_url) as store:
        store.conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(history.HistoryError, match="history schema version 99 is newer than this pytest-solgate understands"):
        history.open_store(postgres_url)


def test_two_runners_creating_the_tables_at_once_create_them_once(postgres_url):
    errors = []

    def open_it():
        try:
            history.open_store(postgres_url).close()
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --- the server goes away: budgets still judged, nothing lost -------------------------------------

BUDGET_SUITE = """
import pytest

@pytest.mark.sol(min=0.9)
def test_too_slow(sol):
    sol.measure(lambda: busy(1e-3), bytes=1e3)

def test_fine(sol):
    sol.measure(lambda: busy(1e-4), bytes=1e3)
"""


def test_an_unreachable_server_at_start_still_judges_budgets_and_spools_the_run(pytester, own_cluster):
    url = own_cluster.url(own_cluster.new_database())
    own_cluster.stop()
    write_suite(pytester, BUDGET_SUITE)
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={url}", "--sol-json=out.json")
    result.assert_outcomes(passed=1, failed=1)  # the budget failed the slow kernel all the same
    port = own_cluster.port
    result.stdout.fnmatch_lines([
        f"*SolgateWarning: baselines unavailable, so only budgets were judged: postgresql://127.0.0.1:{port}/t_*: "
        f"cannot reach the history server at 127.0.0.1 port {port} (OperationalError: Connection refused*",
        f"solgate: history unavailable: *; run spooled to {pytester.path}/.solgate/spool/*.json, the next run sends it",
    ])
    run_id = json.loads((pytester.path / "out.json").read_text())["run"]["id"]
    assert [p.name for p in (pytester.path / ".solgate" / "spool").iterdir()] == [f"{run_id}.json"]
    assert ADMIN_PASSWORD not in everything_written(pytester, result)
    # Back up: `solgate import --spool` sends it, and sending again adds nothing.
    own_cluster.restart()
    done = solgate("import", "--spool", "--history", url, cwd=pytester.path)
    assert done.returncode == 0 and done.stdout.startswith("1 spooled run(s) sent to postgresql://127.0.0.1"), done.stderr
    assert not list((pytester.path / ".solgate" / "spool").iterdir())
    with history.open_store(url) as store:
        (run,) = store.runs()
        assert run["run_uid"] == run_id and len(store.results()) == 2


def test_the_server_stopped_mid_session_the_run_lands_in_the_spool_then_arrives(pytester, own_cluster):
    url = own_cluster.url(own_cluster.new_database())
    stop = [str(own_cluster.bindir / "pg_ctl"), "-D", str(own_cluster.data), "-m", "fast", "-w", "stop"]
    if own_cluster.as_root:
        stop = ["runuser", "-u", "postgres", "--", *stop]
    write_suite(pytester, f"""
import subprocess

def test_first(sol):
    sol.measure(lambda: busy(1e-4), bytes=1e3)

def test_the_server_goes_away():
    subprocess.run({stop!r}, check=True, capture_output=True)

def test_after(sol):
    sol.measure(lambda: busy(1e-4), bytes=1e3)
""")
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={url}", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["solgate: history unavailable: *; run spooled to *spool*.json, the next run sends it"])
    own_cluster.restart()
    # The next run sends the spooled one first, then records itself.
    write_suite(pytester)
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={url}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["solgate: 1 spooled run(s) sent to postgresql://*", "solgate: run recorded in postgresql://*"])
    with history.open_store(url) as store:
        assert len(store.runs()) == 2 and len(store.results()) == 3
    assert not list((pytester.path / ".solgate" / "spool").iterdir())


@pytest.mark.hogs_cpu
def test_the_server_lost_mid_write_rolls_back_and_spools(tmp_path, postgres_cluster, postgres_url):
    database = postgres_url.rsplit("/", 1)[1]
    with history.open_store(postgres_url):
        pass
    # Make the write slow enough to be cut in the middle: every measurement row waits 20 ms.
    postgres_cluster.sql("CREATE FUNCTION solgate.slow() RETURNS trigger LANGUAGE plpgsql AS "
                         "$$ BEGIN PERFORM pg_sleep(0.02); RETURN NEW; END $$; "
                         "CREATE TRIGGER slow BEFORE INSERT ON solgate.measurements FOR EACH ROW EXECUTE FUNCTION solgate.slow()",
                         database)

    def cut():
        time.sleep(0.5)
        postgres_cluster.sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' "
                             "AND pid <> pg_backend_pid() AND state <> 'idle'")

    killer = threading.Thread(target=cut)
    killer.start()
    saved = save.save(postgres_url, tmp_path, a_run("cut-run"), [a_measurement(i) for i in range(100)], "")
    killer.join()
    (message,) = saved.messages
    assert not saved.lost  # spooled: the next run sends it
    assert message.startswith("solgate: history unavailable: postgresql://127.0.0.1:") and "went away while writing" in message
    assert "run spooled to" in message
    postgres_cluster.sql("DROP TRIGGER slow ON solgate.measurements", database)
    with history.open_store(postgres_url) as store:
        assert store.runs() == [] and store.results() == []  # rolled back: nothing partial
        sent = spool.send(store, tmp_path)
        assert sent.sent == 1
        ((run, ms),) = store.whole_runs()
        assert run.id == "cut-run" and len(ms) == 100


def _killable_writer(url, ready):
    with history.open_store(url) as store:
        ready.set()
        for r in range(10_000):
            store.record_run(a_run(f"k-{os.getpid()}-{r}", minute=r % 60), [a_measurement(i) for i in range(200)])


@pytest.mark.hogs_cpu
def test_sigkill_of_a_writer_mid_transaction_leaves_whole_runs(postgres_url):
    with history.open_store(postgres_url):
        pass
    for _ in range(5):
        ready = multiprocessing.Event()
        process = multiprocessing.Process(target=_killable_writer, args=(postgres_url, ready))
        process.start()
        assert ready.wait(30)
        time.sleep(random.uniform(0.2, 1.0))
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    with history.open_store(postgres_url) as store:
        counts = [len(ms) for _, ms in store.whole_runs()]
        assert counts and set(counts) == {200}  # every run whole, none partial
        assert store.integrity() == "ok"


# --- migrate: both ways and back --------------------------------------------------------------------

def test_migrate_both_ways_and_back_gives_identical_results(tmp_path, postgres_url):
    source = tmp_path / "a.db"
    with history.open_store(source) as store:
        for r in range(6):
            store.record_run(a_run(f"run-{r}", commit=f"{r:040d}", minute=r),
                             [changed(a_measurement(i), sol=0.4 + r / 100, noise=float("inf") if r == 3 else 0.01) for i in range(4)])
    back = tmp_path / "b.db"
    for src, dst in ((str(source), postgres_url), (postgres_url, str(back))):
        done = solgate("migrate", src, dst)
        assert done.returncode == 0 and done.stdout.startswith("6 run(s) copied from "), done.stderr
        again = solgate("migrate", src, dst)
        assert again.stdout.startswith("0 run(s) copied") and "6 already there" in again.stdout
        assert ADMIN_PASSWORD not in done.stdout + done.stderr
    with history.open_store(source) as a, history.open_store(postgres_url) as p, history.open_store(back) as b:
        assert a.results() == p.results() == b.results()
        assert a.runs() == p.runs() == b.runs()
        assert list(a.whole_runs()) == list(b.whole_runs())
        key = ("t.py::test_0", "default", "synthetic", "measured")
        chain = [f"{r:040d}" for r in reversed(range(6))]
        assert a.baseline_runs(*key, chain, 10) == p.baseline_runs(*key, chain, 10) == b.baseline_runs(*key, chain, 10)
        assert a.trend(*key) == p.trend(*key) == b.trend(*key)


def test_migrate_onto_itself_is_refused(tmp_path):
    done = solgate("migrate", str(tmp_path / "a.db"), str(tmp_path / "." / "a.db"))
    assert done.returncode == 2 and "SOURCE and DESTINATION are the same history" in done.stderr


def test_the_history_url_from_the_environment(pytester, postgres_url, monkeypatch):
    monkeypatch.setenv("SOLGATE_HISTORY", postgres_url)
    write_suite(pytester)
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml").assert_outcomes(passed=1)
    assert not (pytester.path / ".solgate" / "history.db").exists()
    listing = solgate("history", cwd=pytester.path)
    assert listing.returncode == 0 and "test_k.py::test_k [default]" in listing.stdout, listing.stderr
