# ruff: noqa: F811  (the repo fixtures of test_history are imported, and taken as arguments)
"""Contention is what other processes took, not this process's own share of a core (issue 30).

A kernel that waits (a sleep, I/O, a lock, a device) gets a small share of a core on an idle
machine; it must be judged like any other. The kernel here *really* sleeps (so this process's own
share is low, as the old rule read it) while its duration comes from the tests' fake clock (so
no verdict depends on how loaded this machine is); the machine's counters come from a folder of
fake /proc files that read an idle machine, or from the real /proc where the test says so.
"""

import json
import os
import sys

import idle_machine
import pytest
from fake_gpu import StandIn
from test_history import STEADY, Repo, repo, sqlite_repo  # noqa: F401 (fixtures)

from pytest_solgate.measure import contention, extras
from pytest_solgate.measure.platform import Platform
from pytest_solgate.run import contended_line
from solgate_testing import FAKE_CLOCK_KERNELS, FAST_TIMING

# The tests' kernels run on the shared fake clock (solgate_testing.FAKE_CLOCK_KERNELS): each call
# moves it (and whatever else moves with it: a busy machine's counters) by the kernel's duration.
FAKE_CLOCK = FAKE_CLOCK_KERNELS + '''
import json, pathlib, time

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())
MOVED_WITH_THE_CLOCK = []

def advance(ns):
    busy(ns / 1e9)
    for move in MOVED_WITH_THE_CLOCK:
        move()

'''

NAPPING_KERNEL = FAKE_CLOCK + '''
CALLS = pathlib.Path(__file__).with_name("calls.out")

def nap(seconds):
    advance(round(seconds * 1e9))  # the kernel's duration, on the fake clock
    if SPEED.get("computes"):  # it really computes: this process keeps its core busy
        end = time.thread_time() + SPEED.get("real_sleep", 1e-3)
        while time.thread_time() < end:
            pass
    else:
        time.sleep(SPEED.get("real_sleep", 1e-3))  # it really waits: this process's share of a core is low
    with CALLS.open("a") as calls:
        calls.write("call\\n")

def test_kernel(sol):
    sol.measure(lambda: nap(SPEED["seconds"]), bytes=0.4e6)
'''


@pytest.fixture
def idle_proc(idle_proc_root):
    """A /proc whose CPU pressure never moves: an idle machine (conftest's, which every test reads)."""
    return idle_proc_root


class NappingRepo:
    """test_history's repository with the napping kernel, seeded with a steady window."""

    def __init__(self, repo: Repo, proc, monkeypatch):
        # The machine the runs read: the fake idle one, or (no proc given) this machine's own /proc.
        if proc:
            monkeypatch.setenv(idle_machine.PROC_ROOT_VARIABLE, str(proc))
        else:
            monkeypatch.delenv(idle_machine.PROC_ROOT_VARIABLE, raising=False)
        self.repo, self.proc = repo, proc
        (repo.path / "test_kernels.py").write_text(NAPPING_KERNEL)
        (repo.path / ".gitignore").write_text(".solgate/\n*.out\n")

    def commit(self, message, seconds, **extra):
        self.repo.commit(message, seconds=seconds, proc=str(self.proc), **extra)

    def run(self, *args, **timing):
        (self.repo.path / "calls.out").unlink(missing_ok=True)
        return self.repo.run(*args, **timing)


def _napping(repo, idle_proc, monkeypatch):
    napping = NappingRepo(repo, idle_proc, monkeypatch)
    repo.seed(STEADY)  # SOL about 0.39: a 1 ms nap
    return napping


def test_a_napping_kernel_on_an_idle_machine_is_not_contended_its_regression_fails_and_its_relanding_too(
        repo, idle_proc, monkeypatch):
    napping = _napping(repo, idle_proc, monkeypatch)
    napping.commit("40 % slower", seconds=1.4e-3)
    result, verdicts, _ = napping.run()
    kernel = verdicts["test_kernel"]
    assert "contended" not in kernel, kernel
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert kernel["baseline"]["confirmed"] is True
    result.assert_outcomes(failed=1)
    napping.commit("re-landed as it was", seconds=1.4e-3)
    result, verdicts, _ = napping.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]


def test_a_computing_kernel_on_an_idle_machine_is_not_contended_its_regression_fails(repo, idle_proc, monkeypatch):
    # The other side of the rule: a kernel that keeps its own core busy is not "contention" either;
    # only what other processes took counts, and the fake /proc says they took nothing.
    napping = _napping(repo, idle_proc, monkeypatch)
    napping.commit("40 % slower, computing", seconds=1.4e-3, computes=True)
    result, verdicts, _ = napping.run()
    kernel = verdicts["test_kernel"]
    assert "contended" not in kernel, kernel
    assert kernel["verdict"] == "regressed", kernel["reason"]
    result.assert_outcomes(failed=1)


def test_a_napping_kernel_regression_fails_in_a_detached_head_ci_checkout(sqlite_repo, idle_proc, monkeypatch):
    napping = _napping(sqlite_repo, idle_proc, monkeypatch)
    napping.commit("40 % slower", seconds=1.4e-3)
    sqlite_repo.git("checkout", "-q", "--detach", "HEAD")  # as actions/checkout leaves a pull request
    _, verdicts, _ = napping.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]


def test_a_napping_kernel_regression_fails_through_the_baseline_ref_walk(sqlite_repo, idle_proc, monkeypatch):
    napping = _napping(sqlite_repo, idle_proc, monkeypatch)
    sqlite_repo.git("checkout", "-q", "-b", "feature")
    napping.commit("40 % slower, on a branch", seconds=1.4e-3)
    _, verdicts, _ = napping.run("--sol-baseline=main")
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert kernel["baseline"]["commit"] == sqlite_repo.git("rev-parse", "main")




def test_the_end_of_session_contention_line_fits_80_columns():
    for reason in (extras.contention("", "r1", contention.Busy(contention.CPU_PRESSURE, 0.43, 2, True), True),
                   "another solgate run (run 20261204T010203-abcdef0123456789 pid 123456) was using this device"):
        text = contended_line(12, reason)
        assert all(len(line) <= 80 for line in text.splitlines()), text
        assert text.splitlines()[0] == "solgate: 12 measurement(s) taken while the machine was busy"
        assert "judged on the thread's CPU time, or against runs as busy" in text and reason.split()[0] in text


# --- the reading itself, pure -------------------------------------------------------------------


def snap(wall, own_cpu, stall=None, busy=None, cores=2, waited=None):
    return contention.Snapshot(wall=wall, own_cpu=own_cpu, stall=stall, busy=busy, cores=cores, waited=waited)


def test_cpu_pressure_decides_where_the_kernel_has_it():
    # A sleeping kernel: 5 % of a core for itself, nothing waiting: not contended.
    idle = contention.between(snap(0, 0, stall=10.0), snap(1.0, 0.05, stall=10.0))
    assert (idle.source, idle.contended) == (contention.CPU_PRESSURE, False)
    # Tasks waited for a CPU half of the time: contended, whatever this process's share.
    busy = contention.between(snap(0, 0, stall=10.0), snap(1.0, 0.95, stall=10.5))
    assert (busy.source, busy.value, busy.contended) == (contention.CPU_PRESSURE, 0.5, True)


def test_machine_wide_pressure_counts_only_when_this_thread_waited_too():
    # Tasks waited half the time, but not this thread (it had its core): others stalled each other.
    elsewhere = contention.between(snap(0, 0, stall=10.0, waited=3.0), snap(1.0, 0.9, stall=10.5, waited=3.02))
    assert (elsewhere.source, elsewhere.contended, round(elsewhere.waited, 6)) == (contention.CPU_PRESSURE, False, 0.02)
    ours = contention.between(snap(0, 0, stall=10.0, waited=3.0), snap(1.0, 0.5, stall=10.5, waited=3.45))
    assert ours.contended is True
    assert extras.busy_phrase(ours) == "CPU pressure 50%: tasks waited for a CPU, this thread 45%"


def test_busy_time_minus_our_own_is_the_fallback_and_the_process_share_the_last():
    # 2 cores; this process used 0.1 s of 1 s; the machine was busy 0.6 s: others used 0.5 of a core.
    calm = contention.between(snap(0, 0, busy=5.0), snap(1.0, 0.1, busy=5.6))
    assert (calm.source, round(calm.value, 6), calm.contended) == (contention.BUSY_TIME, 0.5, False)
    # Others kept 1.8 of the 2 cores busy: more than the other core and a quarter of ours.
    crowded = contention.between(snap(0, 0, busy=5.0), snap(1.0, 0.5, busy=7.3))
    assert (crowded.source, round(crowded.value, 6), crowded.contended) == (contention.BUSY_TIME, 1.8, True)
    alone = contention.between(snap(0, 0), snap(1.0, 0.4))
    assert (alone.source, alone.contended) == (contention.PROCESS_SHARE, True)
    assert contention.between(snap(0, 0), snap(0, 0)).contended is False  # no time passed (a fake clock)


def test_the_snapshot_reads_the_kernels_files_and_lacks_what_is_missing(tmp_path, idle_proc):
    read = contention.snapshot(lambda: 1.5, lambda: 2.5, proc=idle_proc)
    assert (read.own_cpu, read.wall, read.stall, read.cores) == (1.5, 2.5, 1000 / 1e6, 1)
    assert read.busy == pytest.approx(200 / os.sysconf("SC_CLK_TCK"))
    bare = contention.snapshot(lambda: 0.0, lambda: 0.0, proc=tmp_path)  # no PSI, no /proc/stat
    assert (bare.stall, bare.busy) == (None, None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_real_machine_is_read():
    read = contention.snapshot()
    assert read.busy is not None and read.cores >= 1
    assert read.stall is not None or not os.path.exists("/proc/pressure/cpu")


def test_the_wording_of_each_source():
    phrase = extras.busy_phrase
    assert phrase(contention.Busy(contention.CPU_PRESSURE, 0.43, 2, True)) == "CPU pressure 43%: tasks waited for a CPU"
    assert phrase(contention.Busy(contention.BUSY_TIME, 1.8, 2, True)) == "other processes kept 1.8 of 2 cores busy"
    assert phrase(contention.Busy(contention.PROCESS_SHARE, 0.4, 2, True)) == "this process got 40% of a core"
    assert extras.contention("", "r1", contention.Busy(contention.CPU_PRESSURE, 0.1, 2, False), on_cpu=True) == ""


def test_results_json_names_no_contention_for_a_napping_kernel_alone(sqlite_repo, idle_proc, monkeypatch):
    """The same napping kernel with no window at all: recorded, not contended, so a baseline."""
    napping = NappingRepo(sqlite_repo, idle_proc, monkeypatch)
    napping.commit("first", seconds=1e-3)
    result, verdicts, data = napping.run()
    assert "contended" not in verdicts["test_kernel"]
    assert "taken while the machine was busy" not in result.stdout.str()
    assert json.dumps(data)  # the file is whole


def test_the_readers_are_the_platforms_and_the_suite_names_its_proc_in_its_own_plugin(idle_proc):
    # The session's Platform carries the clocks and /proc (the suite's plugin, tests/idle_machine.py,
    # hands in the folder its variable names); nothing replaces a module's global.
    assert idle_machine.readers_from({}) == contention.Readers() == Platform().contention
    named = idle_machine.readers_from({idle_machine.PROC_ROOT_VARIABLE: str(idle_proc)})
    assert named.proc == idle_proc
    ticks = iter(range(100))
    readers = contention.Readers(own_cpu=lambda: 0.0, wall=lambda: float(next(ticks)), proc=idle_proc)
    assert readers.snapshot().stall == 1e-3  # the idle folder's PSI total, 1000 us
    assert extras.Contention("r1", readers).readers is readers
    busy = contention.between(readers.snapshot(), readers.snapshot())
    assert (busy.source, busy.value, busy.contended) == (contention.CPU_PRESSURE, 0.0, False)


def test_a_stand_in_platform_hands_the_session_the_machine_its_contention_reads(suite, tmp_path):
    """The readers reach the engine through the session's Platform (the pytest_solgate_platform
    hook): on a machine where this process never gets a CPU (its CPU clock stands still while the
    wall clock moves, and there is no /proc to read) every measurement reads contended."""
    ticks = iter(range(10**6))
    starved = contention.Readers(own_cpu=lambda: 0.0, wall=lambda: float(next(ticks)), proc=tmp_path / "no-proc")
    result = suite("""
        def test_one(sol):
            sol.measure(lambda: busy(1e-4), bytes=1e3)
    """, "--sol-no-save", fake_clock=True, plugins=[StandIn(Platform(contention=starved))])
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["solgate: 1 measurement(s) taken while the machine was busy",
                                 "*(this process got 0% of a core);"])


# --- a slowdown the busy machine cannot explain (issue 44 item 3) ---------------------------------

# The kernel on the fake clock, on a machine whose counters move with it: tasks waited for a CPU
# (PSI) a share ``stall`` of the time and this thread a share ``wait``. The contention reading is
# then exact and the same on any machine under any load.
BUSY_MACHINE_KERNEL = FAKE_CLOCK + '''
PROC = pathlib.Path(SPEED["proc"])

def busy_machine():
    (PROC / "solgate-clock").write_text(str(FAKE_NS[0] / 1e9))  # the session's wall and CPU clock
    (PROC / "pressure" / "cpu").write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={round(FAKE_NS[0] * SPEED['stall'] / 1e3)}\\n")
    (PROC / "thread-self" / "schedstat").write_text(f"{FAKE_NS[0]} {round(FAKE_NS[0] * SPEED['wait'])} 1\\n")

MOVED_WITH_THE_CLOCK.append(busy_machine)
CALLS = pathlib.Path(__file__).with_name("calls.out")

def kernel():
    advance(round(SPEED["seconds"] * 1e9))
    time.sleep(SPEED.get("real_sleep", 0))  # a long kernel spends the wall budget too
    with CALLS.open("a") as calls:
        calls.write("call\\n")

def test_kernel(sol):
    sol.measure(kernel, bytes=0.4e6)
'''


def _busy_proc(tmp_path_factory):
    proc = tmp_path_factory.mktemp("busyproc")
    (proc / "pressure").mkdir()
    (proc / "thread-self").mkdir()
    (proc / idle_machine.CLOCK_FILE).write_text("0")  # the session reads the kernel's fake clock
    # the counters at the clock's 0, for a reading taken before the kernel's first call
    (proc / "pressure" / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (proc / "thread-self" / "schedstat").write_text("0 0 1\n")
    return proc


def _busy_machine(repo, tmp_path_factory, monkeypatch, seconds, stall, wait):
    proc = _busy_proc(tmp_path_factory)
    NappingRepo(repo, proc, monkeypatch)  # the real rule, this /proc
    repo.seed(STEADY)  # SOL about 0.39: a 1 ms kernel
    (repo.path / "test_kernels.py").write_text(BUSY_MACHINE_KERNEL)
    repo.commit("slower, on a busy machine", seconds=seconds, proc=str(proc), stall=stall, wait=wait)
    return repo.run()


def test_a_long_kernel_that_reads_contended_is_not_taken_again_past_its_time_budget(sqlite_repo, tmp_path_factory,
                                                                                    monkeypatch):
    """A 1 s kernel under --sol-max-time=0.3 is called 3 times (2 warm-up calls, 1 sample); a
    contended retake would call it 6 times and double the cost of a test already over budget."""
    proc = _busy_proc(tmp_path_factory)
    NappingRepo(sqlite_repo, proc, monkeypatch)
    (sqlite_repo.path / "test_kernels.py").write_text(BUSY_MACHINE_KERNEL)
    sqlite_repo.commit("one long kernel", seconds=1.0, real_sleep=1.0, proc=str(proc), stall=0.6, wait=0.5)
    _, verdicts, _ = sqlite_repo.run(timing=FAST_TIMING)  # the 0.3 s wall budget is what is under test
    assert verdicts["test_kernel"].get("contended", "").startswith("CPU pressure 60%"), json.dumps(verdicts["test_kernel"])
    assert (sqlite_repo.path / "calls.out").read_text().count("call") == 3


def test_a_3x_slowdown_on_a_busy_machine_is_regressed_when_the_wait_cannot_explain_it(repo, tmp_path_factory, monkeypatch):
    # The thread waited 34 % of the time: that makes it at most 1.52x slower, not 3x.
    result, verdicts, _ = _busy_machine(repo, tmp_path_factory, monkeypatch, seconds=3e-3, stall=0.42, wait=0.34)
    kernel = verdicts["test_kernel"]
    assert kernel["contended"].startswith("CPU pressure 42%"), kernel
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert kernel["baseline"]["confirmed"] is True
    reason = kernel["reason"]
    # timed on the thread's CPU clock (a single-threaded CPU kernel): the wait is not in it
    assert "the machine was busy" in reason and "timed on its thread's CPU clock" in reason, reason
    result.assert_outcomes(failed=1)


def test_a_slowdown_on_the_thread_clock_is_judged_beside_a_busy_machine(sqlite_repo, tmp_path_factory, monkeypatch):
    # 30 % slower while the thread waited 34 % of the time: on wall time the wait could explain it
    # (up to 1.52x: tests/test_busy_gate.py), but this kernel is timed on its thread's CPU clock.
    result, verdicts, _ = _busy_machine(sqlite_repo, tmp_path_factory, monkeypatch, seconds=1.3e-3, stall=0.42, wait=0.34)
    kernel = verdicts["test_kernel"]
    assert kernel["timing_mode"] == "thread-cpu-time" and kernel["verdict"] == "regressed", kernel["reason"]
    result.assert_outcomes(failed=1)


def test_the_wait_bound_is_the_threads_own_wait_else_the_machines_stall():
    from pytest_solgate.judge.contended import beyond_contention

    assert contention.Busy(contention.CPU_PRESSURE, 0.42, 2, True, 0.34).wait_share == 0.34
    assert contention.Busy(contention.CPU_PRESSURE, 0.42, 2, True).wait_share == 0.42
    assert contention.Busy(contention.BUSY_TIME, 1.8, 2, True).wait_share is None  # no bound: stays ambiguous
    assert beyond_contention(-2 / 3, 0.34) == pytest.approx(1 / 3 / 0.66 - 1)
    assert beyond_contention(-0.5, None) is None
