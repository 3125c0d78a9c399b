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
from typing import Any, Mapping

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
        new_in_call = since_call is not None and thread not in since_call.known
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
    """(parent pid, state) of one process, or None when it is gone."""
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), fields[0]


def _child_pids(proc: Path, parent: int) -> list[str]:
    """The parent's children from its threads' ``children`` files (a few reads), else from a scan
    of every process's ``stat`` (tens of milliseconds on a busy machine)."""
    try:
        tasks = list((proc / str(parent) / "task").iterdir())
        return [pid for task in tasks for pid in (task / "children").read_text().split()]
    except OSError:
        return [entry.name for entry in proc.iterdir() if entry.name.isdigit()] if proc.is_dir() else []


def children(proc: Path = Path("/proc"), parent: int | None = None) -> Children:
    """The live (not zombie) child processes of ``parent`` (this process), from ``proc``."""
    parent = os.getpid() if parent is None else parent
    found = {}
    for pid in _child_pids(proc, parent):
        stat = _stat(proc, pid)
        if stat is not None and stat[0] == parent and stat[1] not in ("Z", "X"):
            found[int(pid)] = stat[1]
    return Children(found)


def new_children(before: Children, now: Children, proc: Path = Path("/proc"), running_only: bool = False
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
    """The nanoseconds process ``pid``'s main thread has run on a CPU (``schedstat``), or None."""
    try:
        return int((proc / str(pid) / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class CallWatch:
    """One checked call, watched: every Python thread it starts records when its ``run`` ends (a
    trace hook on the threads started while the call runs, nothing in the calling thread), and the
    children's CPU time is read as the call returns. A thread that ends after the call returned, or a
    child that runs on a CPU after it, worked outside the call: found every time, however quickly
    that work ends, where a look at the threads alive a moment later misses one that just finished."""

    def __init__(self, proc: Path | None = None) -> None:
        self.proc = proc  # None: child processes are not read
        self.started: dict[threading.Thread, int | None] = {}  # thread -> when its run ended (ns)
        self.returned_ns = 0
        self.children_cpu: dict[int, int | None] = {}
        self._previous: Any = None

    def _hook(self, frame: Any, event: str, arg: Any) -> Any:
        thread = threading.current_thread()
        self.started[thread] = None
        frame.f_trace_lines = False

        def on_return(frame: Any, event: str, arg: Any) -> Any:
            if event == "return":
                self.started[thread] = time.perf_counter_ns()
            return on_return

        return on_return  # traces the thread's outermost frame only (its run), not what it calls

    def __enter__(self) -> CallWatch:
        self._previous = threading.gettrace()
        threading.settrace(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.returned_ns = time.perf_counter_ns()
        threading.settrace(self._previous)
        if self.proc is not None:
            pids = children(self.proc).pids
            self.children_cpu = {pid: _cpu_ns(self.proc, pid) for pid in pids}

    def left(self) -> tuple[tuple[LeftThread, ...], tuple[LeftProcess, ...]]:
        """The threads started by the call that ran on after it returned, and the children that ran
        on a CPU since it returned (read now)."""
        threads = tuple(LeftThread(t.name, _where(t.ident) if t.ident is not None else "")
                        for t, ended in list(self.started.items())
                        if (ended is None and t.is_alive()) or (ended is not None and ended > self.returned_ns))
        processes: list[LeftProcess] = []
        if self.proc is not None:
            for pid, before in self.children_cpu.items():
                now = _cpu_ns(self.proc, pid)
                if before is not None and now is not None and now > before:
                    processes.extend(new_children(Children({}), Children({pid: "R"}), self.proc))
        return threads, tuple(processes)
