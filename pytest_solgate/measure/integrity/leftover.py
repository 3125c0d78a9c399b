"""Integrity: work the kernel's call left running after it returned (Python threads, child processes).

A thread that the measurement started and that still runs code after a call returned (not parked
in a wait: a thread pool's idle worker is fine) does the kernel's work outside the timed region; so
does a child process it started that is on a CPU then (a compiler's idle worker pool is not), and
a thread or a child process started by one call and still alive when it returns. Threads that
were there before the measurement (the session's own, xdist's) are left alone, and native threads
(an OpenMP pool spinning after a parallel region) are not Python threads: neither is read.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:
    from _typeshed import TraceFunction

# Where an idle Python thread waits: its innermost frame is in one of these files (a Condition's
# wait, a queue's get, a selector) or in a thread pool worker's loop, parked on its SimpleQueue.
IDLE_FILES = ("threading.py", "queue.py", "selectors.py", "socket.py", "connection.py", "subprocess.py")
IDLE_FUNCTIONS = {("thread.py", "_worker"), ("pool.py", "worker"), ("pool.py", "_handle_workers")}
PICK_UP_SECONDS = 0.002  # how long a woken worker gets to pick up work queued by the call
pause = time.sleep  # bound at import: a kernel that patches time.sleep cannot skip the pause


@dataclass(frozen=True)
class Threads:
    # The Thread objects, not their idents: a thread that ended gives its ident to the next one
    # (a cheat's worker started just after another test's threads ended looked known).
    known: frozenset[threading.Thread]


@dataclass(frozen=True)
class LeftThread:
    name: str
    where: str  # the code it runs ('file:line in function'), or '' when it has not started yet


# CPU time a thread older than a checked call may spend after the call returned, in the moment the
# guard waits (PICK_UP_SECONDS): a waiting worker wakes for a few microseconds; one doing work
# left by the call runs most of that moment.
BUSY_AFTER_RETURN_NS = 500_000
RAN_NS = 50_000  # a thread in code of its own that ran this long after the call returned worked on
WORKING_WAIT_SECONDS = 0.02


def _thread_cpu_ns(thread: threading.Thread) -> int | None:
    """The CPU time ``thread`` has used (ns, the kernel's scheduler statistics), or None once it ended
    or where they are not kept. (Not its POSIX CPU clock: asking for an ended thread's crashes.)"""
    return _cpu_ns(TASKS, thread.native_id) if thread.native_id is not None else None


def _thread_state(thread: threading.Thread) -> str:
    """The state letter of ``thread`` in /proc (R: on a CPU or waiting for one; S: asleep), or ''."""
    stat = _stat(TASKS, str(thread.native_id)) if thread.native_id is not None else None
    return stat[1] if stat is not None else ""


def threads() -> Threads:
    return Threads(frozenset(threading.enumerate()))


def _where(ident: int) -> str:
    frame = sys._current_frames().get(ident)
    if frame is None:
        return ""
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{frame.f_lineno} in {code.co_name}"


def _idle(ident: int) -> bool:
    frame = sys._current_frames().get(ident)
    if frame is None:
        return False
    path = Path(frame.f_code.co_filename)
    # A pool worker between jobs runs the pool's own code (setting a future's result, looping back
    # to its queue): idle, not the kernel's work.
    if path.parent.name == "futures" and path.parent.parent.name == "concurrent":
        return True
    return path.name in IDLE_FILES or (path.name, frame.f_code.co_name) in IDLE_FUNCTIONS


def left_running(since_measurement: Threads, since_call: Threads | None = None) -> tuple[LeftThread, ...]:
    """Threads still working now: started since ``since_call`` and alive, or started since
    ``since_measurement`` and not idle. The calling thread is never one."""
    me = threading.get_ident()
    left: dict[tuple[str, str], LeftThread] = {}
    for thread in threading.enumerate():
        ident = thread.ident
        if ident is None or ident == me or thread in since_measurement.known or not thread.is_alive():
            continue
        # a pool's worker started in the call, idle now, is no leftover (its jobs: CallWatch)
        new_in_call = since_call is not None and thread not in since_call.known and pool_queue(thread) is None
        if new_in_call or not _idle(ident):
            found = LeftThread(thread.name, _where(ident))
            left[(found.name, found.where)] = found
    return tuple(left.values())


@dataclass(frozen=True)
class Children:
    states: Mapping[int, str]  # pid -> its state letter in /proc (R running, S sleeping, ...)

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(self.states)


@dataclass(frozen=True)
class LeftProcess:
    pid: int
    command: str


def _stat(proc: Path, pid: str) -> tuple[int, str] | None:
    """(parent pid, state) of one process or thread, or None when it is gone."""
    try:
        text = (proc / pid / "stat").read_text(errors="replace")  # a name is any bytes
        fields = text[text.rfind(")") + 2:].split()
        return int(fields[1]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def _child_pids(proc: Path, parent: int) -> list[str]:
    """The parent's children from its threads' ``children`` files (a few reads), else from a scan
    of every process's ``stat`` (tens of milliseconds on a busy machine)."""
    try:
        tasks = list((proc / str(parent) / "task").iterdir())
        return [pid for task in tasks for pid in (task / "children").read_text().split()]
    except OSError:
        return [entry.name for entry in proc.iterdir() if entry.name.isdigit()] if proc.is_dir() else []


PROC = Path("/proc")
TASKS = PROC / "self" / "task"  # this process's threads, by native id


def children(proc: Path = PROC, parent: int | None = None) -> Children:
    """The live (not zombie) child processes of ``parent`` (this process), from ``proc``."""
    parent = os.getpid() if parent is None else parent
    found = {}
    for pid in _child_pids(proc, parent):
        stat = _stat(proc, pid)
        if stat is not None and stat[0] == parent and stat[1] not in ("Z", "X"):
            found[int(pid)] = stat[1]
    return Children(found)


def new_children(before: Children, now: Children, proc: Path = PROC, running_only: bool = False
                 ) -> tuple[LeftProcess, ...]:
    """Children in ``now`` that ``before`` lacked; with ``running_only``, only those on a CPU now
    (a worker pool started by the first call, a compiler's, sleeps between its jobs)."""
    left = []
    for pid in sorted(now.pids - before.pids):
        if running_only and now.states[pid] not in ("R", "D"):
            continue
        try:
            command = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            command = ""
        left.append(LeftProcess(pid, command[:80]))
    return tuple(left)


def _cpu_ns(proc: Path, pid: int) -> int | None:
    """The nanoseconds process (or thread) ``pid`` has run on a CPU (``schedstat``), or None."""
    try:
        return int((proc / str(pid) / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class PoolWork:
    """The work handed to ``concurrent.futures`` pools and not done yet, read at one moment from
    the pools' own records, which a submit fills before it returns: each thread pool worker's jobs
    (waiting in its queue, or the one it runs), each process pool's pending jobs (its manager
    thread's table) and its workers' pids. What a call handed a pool is there as the call returns,
    however late a worker picks it up: no pause, no sample."""

    thread_jobs: Mapping[int, tuple[int, frozenset[object]]]  # id of a thread pool's queue -> (jobs waiting, jobs running)
    process_jobs: Mapping[int, frozenset[int]]  # id of a process pool's manager thread -> its pending job numbers
    pids: Mapping[int, tuple[int, ...]]  # the same id -> its worker processes


@runtime_checkable
class JobQueue(Protocol):
    def qsize(self) -> int: ...


@runtime_checkable
class Job(Protocol):
    """A pool's job as concurrent.futures keeps it: what it runs, and the future it reports to."""

    future: Done


@runtime_checkable
class Done(Protocol):
    def done(self) -> bool: ...


def _not_done(job: object) -> bool:
    return isinstance(job, Job) and isinstance(job.future, Done) and not job.future.done()


def _futures_file(frame: FrameType) -> str:
    path = Path(frame.f_code.co_filename)
    return path.name if path.parent.name == "futures" and path.parent.parent.name == "concurrent" else ""


def pool_queue(thread: threading.Thread) -> JobQueue | None:
    """The job queue of a ``concurrent.futures`` thread pool's worker (from the target it was started
    with: there before its first line runs), else None."""
    target = getattr(thread, "_target", None)
    if getattr(target, "__module__", "") == "concurrent.futures.thread" and getattr(target, "__name__", "") == "_worker":
        args = getattr(thread, "_args", ())
        queue = args[1] if isinstance(args, tuple) and len(args) > 1 else None
        return queue if isinstance(queue, JobQueue) else None
    return None


def _job_running(frame: FrameType | None) -> object | None:
    """The job not done yet that a thread pool worker's stack (innermost ``frame``) runs, or None."""
    while frame is not None:
        if _futures_file(frame) == "thread.py" and frame.f_code.co_name == "run":
            job = frame.f_locals.get("self")
            return job if _not_done(job) else None
        frame = frame.f_back
    return None


def pool_work() -> PoolWork:
    frames = sys._current_frames()
    thread_jobs: dict[int, tuple[int, frozenset[object]]] = {}
    for thread in threading.enumerate():
        queue = pool_queue(thread)
        if queue is not None:
            waiting, running = thread_jobs.get(id(queue), (queue.qsize(), frozenset()))
            job = _job_running(frames.get(thread.ident)) if thread.ident is not None else None
            thread_jobs[id(queue)] = (waiting, running | {job} if job is not None else running)
    process_jobs: dict[int, frozenset[int]] = {}
    pids: dict[int, tuple[int, ...]] = {}
    for thread in threading.enumerate():
        pending = getattr(thread, "pending_work_items", None)  # a ProcessPoolExecutor's manager thread
        if isinstance(pending, dict):
            process_jobs[id(thread)] = frozenset(number for number, job in list(pending.items())
                                                 if isinstance(number, int) and _not_done(job))
            processes = getattr(thread, "processes", None)
            pids[id(thread)] = tuple(pid for pid in processes if isinstance(pid, int)) if isinstance(processes, dict) else ()
    return PoolWork(thread_jobs, process_jobs, pids)


POOL_WORKER = LeftThread("a concurrent.futures thread pool's worker", "a job the call handed it")


def pending(work: PoolWork) -> bool:
    """Whether any pool has a job not done."""
    return (any(waiting or running for waiting, running in work.thread_jobs.values())
            or any(work.process_jobs.values()))


def running_now(since_measurement: Threads) -> tuple[LeftThread, ...]:
    """The threads started since ``since_measurement`` that are alive now (a pool's idle worker
    aside), and a pool's worker where a pool has a job not done: what may still write an output
    read at this moment. Alive means not finished: a thread is listed from its start until its run
    has returned, so one whose work lands after this moment is here, however soon it ends."""
    me = threading.get_ident()
    found = [LeftThread(t.name, _where(t.ident) if t.ident is not None else "") for t in threading.enumerate()
             if t not in since_measurement.known and t.ident != me and pool_queue(t) is None]
    return (*found, POOL_WORKER) if pending(pool_work()) else tuple(found)


def handed_to_pools(before: PoolWork, after: PoolWork) -> tuple[tuple[LeftThread, ...], tuple[int, ...]]:
    """What a call left undone in pools: a thread pool it handed a job (one thread named for it),
    and the workers of each process pool with a pending job it lacked. A thread pool's jobs handed
    in are at least its queue's growth plus the jobs its workers took from it meanwhile (running
    now, not before): a worker that finished a job and took the next during the call leaves the
    queue's length as it was."""
    threads: tuple[LeftThread, ...] = ()
    for queue, (waiting, running) in after.thread_jobs.items():
        waited, ran = before.thread_jobs.get(queue, (0, frozenset()))
        if waiting - waited + len(running - ran) > 0:
            threads = (POOL_WORKER,)
    pids = [pid for pool, jobs in after.process_jobs.items() if jobs - before.process_jobs.get(pool, frozenset())
            for pid in after.pids.get(pool, ())]
    return threads, tuple(pids)


class CallWatch:
    """One checked call, watched: every Python thread it starts records when its ``run`` ends (a
    trace hook on the threads started while the call runs, nothing in the calling thread), the
    threads alive and the pools' unfinished jobs are compared before and as it returns, and the
    children's CPU time is read as it returns. A thread that ends after the call returned, a job it
    handed a pool, or a child that runs on a CPU after it, worked outside the call: found every
    time, however quickly or late that work runs, where a look a moment later misses one that just
    finished or has not started."""

    def __init__(self, proc: Path | None = None) -> None:
        self.proc = proc  # None: child processes are not read
        self.started: dict[threading.Thread, int | None] = {}  # thread -> when its run ended (ns)
        self.returned_ns = 0
        self.children_cpu: dict[int, int | None] = {}
        self.threads_cpu: dict[threading.Thread, int | None] = {}  # threads older than the call: CPU ns at its return
        self.working: frozenset[threading.Thread] = frozenset()  # of those, in code of their own at its return
        self._previous: TraceFunction | None = None
        self.before: frozenset[threading.Thread] = frozenset()
        self.alive_at_return: frozenset[threading.Thread] = frozenset()  # started by the call, alive as it returned
        self.pools_before = self.pools_after = PoolWork({}, {}, {})

    def _hook(self, frame: FrameType, event: str, arg: object) -> TraceFunction:
        thread = threading.current_thread()
        self.started[thread] = None
        frame.f_trace_lines = False

        def on_return(frame: FrameType, event: str, arg: object) -> TraceFunction:
            if event == "return":
                self.started[thread] = time.perf_counter_ns()
            return on_return

        return on_return  # traces the thread's outermost frame only (its run), not what it calls

    def __enter__(self) -> CallWatch:
        self.before = frozenset(threading.enumerate())
        self.pools_before = pool_work()
        self._previous = threading.gettrace()
        threading.settrace(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self.returned_ns = time.perf_counter_ns()
        # Thread.start returns before the new thread reads threading's hook: one that reads it after
        # the hook is taken back below records nothing, and runs its work after this moment. Every
        # thread the call started is listed (started ones stay listed until they end), whatever the
        # hook saw.
        self.alive_at_return = frozenset(threading.enumerate()) - self.before
        self.pools_after = pool_work()
        threading.settrace(self._previous)
        me = threading.current_thread()
        self.threads_cpu = {t: _thread_cpu_ns(t) for t in self.before if t is not me and t.is_alive()}
        # those of them in code of their own (not waiting in a queue, a pool's loop, a lock) as it returned
        self.working = frozenset(t for t in self.threads_cpu if t.ident is not None and not _idle(t.ident))
        if self.proc is not None:
            pids = children(self.proc).pids
            self.children_cpu = {pid: _cpu_ns(self.proc, pid) for pid in pids}

    def _older_working(self) -> list[threading.Thread]:
        """Threads older than the call (a worker started at import) that worked after it returned:
        on a CPU for over BUSY_AFTER_RETURN_NS so far; or for RAN_NS in code of their own (not
        waiting in a queue, a pool's loop, a lock), watched while they are in such code or wait for a
        core (runnable), for up to WORKING_WAIT_SECONDS: on a loaded machine a woken worker may wait
        that long for one. An idle thread costs no wait."""
        def grown(thread: threading.Thread) -> int:
            before, now = self.threads_cpu.get(thread), _thread_cpu_ns(thread)
            return now - before if before is not None and now is not None else 0

        def own_code(thread: threading.Thread) -> bool:
            return thread in self.working or (thread.ident is not None and not _idle(thread.ident))

        found = [t for t in self.threads_cpu if grown(t) > BUSY_AFTER_RETURN_NS]
        deadline = time.perf_counter() + WORKING_WAIT_SECONDS
        first = True  # after one pause, a thread asleep in code of its own (a monitor's sleep) is not waited for
        while True:
            watched = [t for t in self.threads_cpu if t not in found and t.is_alive()
                       and ((first and t in self.working) or _thread_state(t) == "R")]
            found += [t for t in watched if grown(t) > RAN_NS and own_code(t)]
            if len(watched) == len([t for t in watched if t in found]) or time.perf_counter() > deadline:
                return found
            first = False
            pause(PICK_UP_SECONDS)

    def left(self) -> tuple[tuple[LeftThread, ...], tuple[LeftProcess, ...]]:
        """The threads started by the call that ran on after it returned, and the children that ran
        on a CPU since it returned (read now)."""
        ended = dict(self.started)
        # a thread pool's worker started by the call: its jobs are counted below, it may idle
        unfinished = [t for t in ended.keys() | self.alive_at_return if pool_queue(t) is None and (
                      (t in self.alive_at_return and ended.get(t) is None)  # its run had not returned
                      or (ended.get(t) is None and t.is_alive())
                      or (ended.get(t) or 0) > self.returned_ns)]
        pool_threads, pool_pids = handed_to_pools(self.pools_before, self.pools_after)
        unfinished += [t for t in self._older_working() if t not in unfinished]
        threads = tuple(LeftThread(t.name, _where(t.ident) if t.ident is not None else "")
                        for t in sorted(unfinished, key=lambda t: t.name)) + pool_threads
        busy = set(pool_pids)
        if self.proc is not None:
            for pid, before in self.children_cpu.items():
                now = _cpu_ns(self.proc, pid)
                if before is not None and now is not None and now > before:
                    busy.add(pid)
        processes = new_children(Children({}), Children({pid: "R" for pid in busy}), self.proc or PROC)
        return threads, processes
