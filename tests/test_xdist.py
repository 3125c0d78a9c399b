"""pytest-xdist: records travel to the controller, which alone writes; the device lock serializes."""

import json
import sqlite3

BODY = """
import pytest

@pytest.mark.parametrize("i", range(8))
def test_k(sol, i):
    sol.measure(lambda: busy(1e-3), bytes=0.5e6, name="a")
    sol.measure(lambda: busy(5e-4), bytes=0.2e6, name="b")
"""


def test_two_workers_one_history_run_one_report(suite, pytester, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLGATE_LOCK_DIR", str(tmp_path / "locks"))
    result = suite(BODY, "-n", "2", "--sol-json=out.json", "--sol-report=report.html", subprocess=True)
    result.assert_outcomes(passed=8)
    data = json.loads((pytester.path / "out.json").read_text())
    measurements = data["measurements"]
    keys = [(m["test"], m["name"]) for m in measurements]
    assert len(keys) == 16 and len(set(keys)) == 16  # none lost, none duplicated
    assert {m["worker"] for m in measurements} == {"gw0", "gw1"}
    # The lock: no two sampling intervals overlap, whichever worker took them.
    intervals = sorted((m["started_at"], m["finished_at"]) for m in measurements)
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end, "two measurements were timed at once"
    db = sqlite3.connect(pytester.path / ".solgate" / "history.db")
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 16
    assert db.execute("SELECT run_uid FROM runs").fetchone()[0] == data["run"]["id"]
    page = (pytester.path / "report.html").read_text()
    assert page.count("<tr class=") == 16
    result.stdout.fnmatch_lines(["*SOL summary*"])


def test_worker_n_takes_device_n_mod_count(monkeypatch):
    from pytest_solgate import engine

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert engine.worker_index() == 3
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "master")
    assert engine.worker_index() is None


def test_lock_excludes_a_second_process(tmp_path, monkeypatch):
    import multiprocessing
    import time

    from pytest_solgate.locking import device_lock

    monkeypatch.setenv("SOLGATE_LOCK_DIR", str(tmp_path))
    log = tmp_path / "log"

    def hold(tag):
        with device_lock("cuda-test"):
            with open(log, "a") as out:
                out.write(f"{tag} in {time.time()}\n")
            time.sleep(0.2)
            with open(log, "a") as out:
                out.write(f"{tag} out {time.time()}\n")

    processes = [multiprocessing.Process(target=hold, args=(i,)) for i in range(3)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    events = [line.split()[1] for line in log.read_text().splitlines()]
    assert events == ["in", "out"] * 3
