"""Shared helpers: a synthetic profile and kernels of known duration make verdicts deterministic."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from solgate_testing import FAKE_CLOCK_KERNELS, FAKE_CLOCK_TIMING, FAST_TIMING, KERNELS, SYNTHETIC_PROFILE


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Write a test module (with ``busy`` in scope, on the fake clock with ``fake_clock=True``) and
    the synthetic profile; run pytest on it."""

    def run(body: str, *args: str, profile: bool = True, subprocess: bool = False, files: dict | None = None,
            fake_clock: bool = False, plugins: list | None = None):
        pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
        pytester.makepyfile(test_kernels=(FAKE_CLOCK_KERNELS if fake_clock else KERNELS) + textwrap.dedent(body))
        for name, text in (files or {}).items():
            (pytester.path / name).write_text(textwrap.dedent(text))
        options = [*(FAKE_CLOCK_TIMING if fake_clock else FAST_TIMING), *(["--sol-profile=synthetic.toml"] if profile else []), *args]
        if plugins:  # plugin objects (a stand-in's platform) reach an in-process run only
            return pytester.runpytest(*options, plugins=plugins)
        runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
        return runner(*options)

    return run


@pytest.fixture(autouse=True)
def _a_wide_terminal(monkeypatch):
    """The inner pytest runs print the SOL table as wide as the terminal allows; without a terminal
    that is 80 columns, and the table wraps. Tests that read table rows get a wide one; the
    80-column layout has tests of its own (they set COLUMNS). Set per test, not for the session:
    the suite's own progress line is as wide as the contributor's terminal (at 250 columns the
    progress figure came once every 240 tests, and a CI log shows a line only when it ends). Set
    whatever the session found: an xdist worker starts with COLUMNS=80."""
    monkeypatch.setenv("COLUMNS", "250")


def pytest_configure(config):
    # pytester restores sys.modules after each in-process run; torch cannot be imported twice in
    # one process, and psycopg's compiled core keeps raising the exception classes of its first
    # import, so both are imported once up front, before any snapshot is taken.
    # numpy and ruptures (change points, read by every baseline lookup) likewise. Triton too: a fake-GPU session builds measure/sm_clock.py's Triton
    # stamp kernel, and a Triton imported afresh after a pytester test aborted the next test that
    # used torch's flop counter (the xdist worker crashed in test_work.py).
    for module in ("torch", "triton", "psycopg", "numpy", "ruptures"):
        try:
            __import__(module)
        except ImportError:
            pass


def pytest_collection_modifyitems(items):
    # The long scenarios (.ci/run's `-m long -n 2` step), by ``long(seconds=)`` (their time on the
    # 2-core VM): the longest first, then the shortest, then the rest longest first. xdist hands each
    # worker two tests to start with: the longest shares its worker with the shortest, and the other
    # worker takes the rest. In collection order the SIGKILL scenario (75 s) and the 32 s one went to
    # one worker, and the step took 132 s for 182 s of tests. Other tests keep their order.
    def seconds(item):
        marker = item.get_closest_marker("long")
        return marker.kwargs.get("seconds", 0) if marker is not None else 0

    long = sorted((item for item in items if seconds(item)), key=seconds, reverse=True)
    if len(long) > 2:
        long = [long[0], long[-1], *long[1:-1]]
    items[:] = long + [item for item in items if not seconds(item)]


# --- a real PostgreSQL server for the history tests ----------------------------------------------
# One throw-away cluster per test process; each test gets a database of its own. Where
# SOLGATE_REQUIRE_POSTGRES is set (.ci/run sets it) a server that cannot start fails the tests
# instead of skipping them, so CI cannot pass without having run them.


@pytest.fixture(scope="session")
def postgres_cluster():
    import os

    from throwaway_postgres import Cluster, ServerUnavailable

    try:
        cluster = Cluster().start()
    except ServerUnavailable as exc:
        if os.environ.get("SOLGATE_REQUIRE_POSTGRES"):
            pytest.fail(f"the PostgreSQL tests must run here, but the server did not start: {exc}")
        pytest.skip(f"no PostgreSQL server: {exc}")
    yield cluster
    cluster.destroy()


@pytest.fixture
def postgres_url(postgres_cluster):
    return postgres_cluster.url(postgres_cluster.new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def history_location(request, tmp_path):
    """Where a history lives, in each store: a SQLite file path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return request.getfixturevalue("postgres_url")


# --- tests that load every core run alone ----------------------------------------------------------
# Many tests judge real timings (a busy-wait kernel against a budget; the history tests use the fake
# clock instead). A test that starts 16 writer processes on this 2-core machine would make a kernel
# timed beside it read slower, and the verdict would rightly change. So such tests (marked ``hogs_cpu``) take a lock
# that every other test shares: under xdist they wait for the running tests and run alone.


def session_folder(config, tmp_path_factory):
    """A folder of this session's own, shared by its xdist workers: the parent of their base
    temporary folders (popen-gw0, popen-gw1) under xdist, the base folder itself without (its parent
    is every session's of this user)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


@pytest.fixture(autouse=True)
def _cpu_share(request, tmp_path_factory):
    import fcntl

    lock_path = session_folder(request.config, tmp_path_factory) / "solgate-cpu.lock"
    exclusive = request.node.get_closest_marker("hogs_cpu") is not None
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _device_locks_of_this_session(request, monkeypatch, tmp_path_factory):
    """The plugin's device lock is one per machine (measure/locking.py), so that two checkouts never
    time on one device at once. This session's measurements (its workers' too) share one, as on a
    CI runner of their own; another session on the machine, another contributor's suite, does not
    hold them up. The tests of the lock itself point it elsewhere."""
    from pytest_solgate.measure.locking import LOCK_DIR_VARIABLE

    monkeypatch.setenv(LOCK_DIR_VARIABLE, str(session_folder(request.config, tmp_path_factory) / "solgate-locks"))


IDLE_PRESSURE = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


@pytest.fixture(scope="session")
def idle_proc_root(tmp_path_factory):
    """A /proc whose CPU pressure never moves: an idle machine's."""
    folder = tmp_path_factory.mktemp("idle-proc")
    (folder / "pressure").mkdir()
    (folder / "pressure" / "cpu").write_text(IDLE_PRESSURE)
    (folder / "stat").write_text("cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n")
    return folder


@pytest.fixture(autouse=True)
def _an_idle_machine(monkeypatch, idle_proc_root):
    """Every session a test starts (in process or in a subprocess) reads an idle machine's /proc:
    tests/idle_machine.py, loaded into each by PYTEST_PLUGINS, hands it in through the session's
    Platform, so a verdict never depends on this machine's load. The tests of contention itself
    point PROC_ROOT_VARIABLE elsewhere or remove it. tests/inner_sessions.py, loaded the same way,
    leaves hypothesis's pytest plugin out of each (0.7 s of CPU a subprocess)."""
    import idle_machine
    import inner_sessions

    monkeypatch.setenv(idle_machine.PROC_ROOT_VARIABLE, str(idle_proc_root))
    ours = [idle_machine.MODULE, inner_sessions.MODULE]
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p and p not in ours]
    monkeypatch.setenv("PYTEST_PLUGINS", ",".join([*plugins, *ours]))
    here = str(Path(__file__).resolve().parent)  # where a subprocess imports it from
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([p for p in (os.environ.get("PYTHONPATH"), here) if p]))




@pytest.fixture(autouse=True)
def _the_fake_clock_trusted(monkeypatch):
    """The tests time on the fake clock (the sol_clock fixture) and judge its figures: a clock from a
    test makes no real result unless the session trusts it explicitly (docs/integrity.md), which only
    these tests do. The tests of that rule remove the variable."""
    monkeypatch.setenv("SOLGATE_TRUST_TEST_CLOCK", "1")


@pytest.fixture(autouse=True)
def _not_in_ci(monkeypatch):
    """In CI (``CI`` set, as GitHub sets it for .ci/run) a history that cannot be written fails the
    run (--sol-require-history=auto); the tests that mean it set ``CI`` themselves, so that every
    other test reads the same here and on a CI runner."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def _a_user_cache_of_its_own(monkeypatch, tmp_path):
    """The CPU's calibration is cached per user, shared by every clone (support.locations.
    user_cache_dir): each test gets its own, so that none reads another's ceilings."""
    monkeypatch.setenv("SOLGATE_CACHE_DIR", str(tmp_path / "user-cache"))


@pytest.fixture(autouse=True)
def _torch_threads_as_they_were():
    """A suite run in process (pytester.runpytest) that calls torch.set_num_threads changes this
    worker's torch too, and with it this CPU's profile id (the thread count is in its fingerprint):
    a later test would then read another machine's id. Each test gets back the threads it found."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
