"""Integrity: the timed calls served from a cache, told by their time.

The output checks call the kernel on other inputs than the timed ones; a kernel that keeps a result
for the timed inputs (keyed by their addresses, their version counters, their values, or computed at
import for the test's seeded inputs) answers those checks honestly and serves the timed calls from
its cache. Whatever the key, the cache shows in the time: a few calls on fresh inputs (new storage,
new values) are timed exactly as a sample is (a flush, the backend's timer, one call), each beside
a call on the timed inputs timed the same way, and compared with the measurement's figure. An honest
kernel takes as long on either; a cached one is far faster on the timed inputs.

The decision is on the fastest call on the timed inputs (a busy machine only ever slows a call
down, so the fastest is the one least disturbed) and the (upper) median call on fresh inputs (a
fresh set may land where a freed one lay and meet an address-keyed cache: one such call must not hide
the others), by a generous factor: the fresh calls must be over ``FACTOR`` times both the figure and
the fastest call on the timed inputs, plus ``SLACK``; and so must each fresh call against the call
on the timed inputs made just before it, in half the pairs at least. A second set of calls must say
so again before anything is named. The pairs are what tell a machine that slows down while the check
runs: an honest torch.add returning 32 MiB read 12 ms a call in the first pair and 55 to 65 ms on
either inputs in the next four (the memory the fresh sets hold grows), and the fastest call of the
first pair against the median of the rest read a cache.

The second set decides alone, and each of its calls starts with the memory the C library holds
free handed back to the system (``release``: glibc's ``malloc_trim``), so that every call pays for
the pages its result lands on. Without it, the allocator's state decides which call pays: an
honest bf16 torch.add returning 16 MiB read 1.5-1.8 ms on the timed inputs, whose result reused
warm pages, and 6.1-6.6 ms on fresh ones, whose result faulted fresh pages in, in 1 run of 12 of
the kernel suite's A/A. A cache still shows: its calls on the timed inputs make no result.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Callable, Sequence

FACTOR = 2.0
SLACK_SECONDS = 20e-6  # a call's own overhead (a timer's reading, an allocation) on a loaded machine
PAIRS = 2  # calls of each kind in a round; a second round confirms a suspicion
CONFIRM_PAIRS = 3


@dataclass(frozen=True)
class CacheCheck:
    """The timed figure beside single calls on the timed and on fresh inputs (seconds a call)."""

    timed_seconds: float  # the measurement's figure
    same_seconds: float  # the fastest call on the timed inputs
    fresh_seconds: float  # the (upper) median call on fresh inputs
    calls: int
    slower_pairs: int  # fresh calls over FACTOR times the call on the timed inputs just before, plus SLACK

    @property
    def served(self) -> bool:
        floor = max(self.timed_seconds, self.same_seconds)
        return self.fresh_seconds > FACTOR * floor + SLACK_SECONDS and 2 * self.slower_pairs >= self.calls


def time_pairs(timed: Callable[[], object], fresh: Callable[[], Callable[[], object]], time_one: Callable[[Callable[[], object]], float],
               pairs: int) -> tuple[list[float], list[float]]:
    """``pairs`` calls on the timed inputs and as many on fresh ones (each made by ``fresh()``, outside
    the timing), in turn, each timed by ``time_one``. The call on the timed inputs comes right after
    a fresh set is made, the fresh call after it. Seen once in CI on a fresh VM: with the fresh call
    first, an honest torch.add returning 32 MiB read 2.2x on fresh inputs in 5 calls of 5, likely
    because making the set uses up the memory the allocator had at hand and the next call's result
    lands on untouched pages. Whichever call meets that now is the one on the timed inputs, which
    errs towards no accusation."""
    same: list[float] = []
    new: list[float] = []
    for _ in range(pairs):
        call = fresh()
        same.append(time_one(timed))
        new.append(time_one(call))
    return same, new


def check(timed_seconds: float, timed: Callable[[], object], fresh: Callable[[], Callable[[], object]],
          time_one: Callable[[Callable[[], object]], float], release: Callable[[], None] = lambda: None) -> CacheCheck:
    """The check (see the module's doc): a round, and where it says ``served``, a second that
    decides, each of its calls after ``release()``."""
    same, new = time_pairs(timed, fresh, time_one, PAIRS)
    found = _of(timed_seconds, same, new)
    if not found.served:
        return found

    def time_released(call: Callable[[], object]) -> float:
        release()
        return time_one(call)

    return _of(timed_seconds, *time_pairs(timed, fresh, time_released, CONFIRM_PAIRS))


@functools.cache
def freed_memory_release() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``: the free memory of every arena handed back to the system, so that
    the next allocation faults its pages in. Nothing where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: its C library's
    except (AttributeError, OSError, TypeError):  # (TypeError: Windows loads no library by None)
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def release() -> None:
        trim(0)  # whether any memory went back does not matter: the next allocation starts from the system's

    return release


def _of(timed_seconds: float, same: Sequence[float], new: Sequence[float]) -> CacheCheck:
    slower = sum(fresh > FACTOR * before + SLACK_SECONDS for before, fresh in zip(same, new))
    return CacheCheck(timed_seconds, min(same), sorted(new)[len(new) // 2], len(new), slower)
