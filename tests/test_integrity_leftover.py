"""Work a checked call leaves running is named from what the call left behind, not from a look at
the threads a moment later: each case here holds the interleaving the machine's load makes (a
thread that reads threading's trace hook late, a pool worker that picks its job up late) with an
event, so its outcome is the same on every run."""

import concurrent.futures
import threading
import time

from pytest_solgate.measure.integrity import leftover


def test_a_thread_that_missed_the_trace_hook_is_named():
    # Thread.start returns before the new thread reads threading's hook: under load it reads it after
    # the call returned and records nothing. Switching the hook off in the call makes that happen here.
    release = threading.Event()
    with leftover.CallWatch() as watch:
        threading.settrace(None)
        thread = threading.Thread(target=release.wait, name="late")
        thread.start()
    release.set()
    thread.join()  # its work ended after the call returned, before anyone looked
    threads, _ = watch.left()
    assert [t.name for t in threads] == ["late"]


def test_a_job_handed_to_a_pool_started_earlier_is_named_before_any_worker_picks_it_up():
    pool = concurrent.futures.ThreadPoolExecutor(1)
    busy, release = threading.Event(), threading.Event()
    try:
        pool.submit(lambda: (busy.set(), release.wait()))  # its only worker held on an earlier job
        busy.wait()
        with leftover.CallWatch() as watch:
            pool.submit(sum, [1, 2])  # queued: no worker runs it until released
        threads, _ = watch.left()
        assert [t.name for t in threads] == ["a concurrent.futures thread pool's worker"]
    finally:
        release.set()
        pool.shutdown()


def test_a_job_handed_to_a_process_pool_is_named_while_it_waits():
    pool = concurrent.futures.ProcessPoolExecutor(1)
    try:
        pool.submit(int).result()  # its worker process started before the call
        with leftover.CallWatch() as watch:
            # No CPU time read after the call needed: it is pending as it returns. (A job of
            # microseconds could be done before the call returns on a loaded machine, its GIL
            # taken by the pool's thread: seen once beside another suite.)
            job = pool.submit(time.sleep, 0.2)
        _, processes = watch.left()
        assert [p.pid for p in processes] == list(pool._processes), processes
        job.result()
    finally:
        pool.shutdown()


def test_work_waited_for_in_the_call_is_no_leftover():
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        pool.submit(int).result()
        with leftover.CallWatch() as watch:
            [job.result() for job in [pool.submit(sum, [1, 2]) for _ in range(4)]]
            thread = threading.Thread(target=sum, args=([1],))
            thread.start()
            thread.join()
        assert watch.left() == ((), ())
    finally:
        pool.shutdown()


def test_a_job_handed_to_a_pool_whose_worker_took_the_next_during_the_call_is_named():
    # A backlog: the worker finishes one job and takes the next while the call runs, so the queue is
    # as long after the call as before it; the job the worker took from it tells what was handed in.
    pool = concurrent.futures.ThreadPoolExecutor(1)
    first_done, second_started, second_done = threading.Event(), threading.Event(), threading.Event()
    try:
        pool.submit(first_done.wait)
        pool.submit(lambda: (second_started.set(), second_done.wait()))
        with leftover.CallWatch() as watch:
            pool.submit(sum, [1, 2])
            first_done.set()
            second_started.wait()
        threads, _ = watch.left()
        assert [t.name for t in threads] == ["a concurrent.futures thread pool's worker"]
    finally:
        first_done.set()
        second_done.set()
        pool.shutdown()


def test_a_thread_is_running_until_its_work_has_ended():
    # what a timed call's outputs may still get is read as they are copied: a thread alive then
    since = leftover.threads()
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="writer")
    thread.start()
    assert [t.name for t in leftover.running_now(since)] == ["writer"]
    release.set()
    thread.join()
    assert leftover.running_now(since) == ()


def test_a_child_with_any_bytes_in_its_name_or_a_torn_stat_is_read_or_skipped(tmp_path):
    # /proc's names are the processes' own bytes (a kernel may name a worker anything), and a
    # process may end while its stat is read
    for pid, stat in (("11", b"11 (w\xff\xfe) R 7 11 11 0"), ("12", b"12 (torn"), ("13", b"13 (ok) S 7 13")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_bytes(stat)
    assert leftover.children(tmp_path, parent=7).states == {11: "R", 13: "S"}
