"""pytest-xdist: records travel to the controller, which alone writes; the device lock serializes."""

import json

from pytest_solgate.record.history import open_store

BODY = """
import pytest

@pytest.mark.parametrize("i", range(8))
def test_k(sol, i):
    sol.measure(lambda: busy(1e-3), bytes=0.5e6, name="a")
    sol.measure(lambda: busy(5e-4), bytes=0.2e6, name="b")
"""


def test_two_workers_one_history_run_one_report(suite, pytester, tmp_path, monkeypatch, history_location):
    monkeypatch.setenv("SOLGATE_LOCK_DIR", str(tmp_path / "locks"))
    result = suite(BODY, "-n", "2", "--sol-json=out.json", "--sol-report=report.html", f"--sol-history={history_location}",
                   subprocess=True)
    result.assert_outcomes(passed=8)
    data = json.loads((pytester.path / "out.json").read_text())
    measurements = data["measurements"]
    keys = [(m["test"], m["name"]) for m in measurements]
    assert len(keys) == 16 and len(set(keys)) == 16  # none lost, none duplicated
    assert data["run"]["tests"]["passed"] == 8  # pytest's outcome, counted once, from the workers' reports
    assert {m["worker"] for m in measurements} == {"gw0", "gw1"}
    # The lock: no two sampling intervals overlap, whichever worker took them.
    intervals = sorted((m["started_at"], m["finished_at"]) for m in measurements)
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end, "two measurements were timed at once"
    with open_store(history_location) as store:  # the controller alone wrote, once
        (run,) = store.runs()
        assert run["run_uid"] == data["run"]["id"] and len(store.results()) == 16
    page = (pytester.path / "report.html").read_text()
    assert page.count('id="row-') == 16  # one table row per measurement
    result.stdout.fnmatch_lines(["*SOL summary*"])


def test_worker_n_takes_device_n_mod_count(monkeypatch):
    """Under xdist, worker gwN measures on GPU N mod count (here 4 GPUs, 4 workers); outside xdist,
    on the first GPU."""
    import types

    from pytest_solgate.measure import context, devices

    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 4, current_device=lambda: 2)
    torch = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    for worker in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        chosen = devices.choose_device("auto", context.worker_index(), context.worker_count(), torch=torch)
        assert str(chosen) == f"cuda:{worker}"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert str(devices.choose_device("auto", context.worker_index(), context.worker_count(), torch=torch)) == "cuda:0"


def test_lock_excludes_a_second_process(tmp_path, monkeypatch):
    import multiprocessing
    import time

    from pytest_solgate.measure.locking import device_lock

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
