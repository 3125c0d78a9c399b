"""A neighbour you can start: N processes that keep N cores busy at a set share of each, with CPU
work and memory traffic, for a set time, then stop by themselves.

    python benchmarks/neighbour.py --cores 2 --share 0.8 --seconds 600

Each process works for ``share`` of every PERIOD_SECONDS period and sleeps the rest: its work is
copies of a buffer larger than the last-level cache (memory traffic, as a compiler, a data loader
or another test suite makes it) interleaved with arithmetic on a small one (CPU). ``--share 1``
never sleeps. Every process exits after ``--seconds``, and when its parent goes (Ctrl-C or a kill of
the script stops them all), so a forgotten neighbour cannot outlive its run by more than that.

Prints one line when the neighbours start and one when they stop; exits 0. Used by the figures in
benchmarks/results/busy.md, so that "the machine was busy" is reproducible on any machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

PERIOD_SECONDS = 0.1  # one work-then-sleep cycle: short beside a test's sampling, long beside a call
BUFFER_BYTES = 64 * 1024 * 1024  # the memory traffic: larger than any last-level cache here
CHUNK_BYTES = 1024 * 1024  # copied a slice at a time, so that a period's work can stop on time


def work_for(seconds: float, big: bytearray, small: list[float], offset: int) -> int:
    """Copy slices of ``big`` and multiply ``small``'s numbers in turn for ``seconds`` of wall
    time; the offset where the next copy starts (the traffic walks the whole buffer)."""
    end = time.perf_counter() + seconds
    half = len(big) // 2
    while time.perf_counter() < end:
        start = offset % half
        big[half + start:half + start + CHUNK_BYTES] = big[start:start + CHUNK_BYTES]  # memory traffic
        offset += CHUNK_BYTES
        for i in range(len(small)):  # CPU work, out of the cache
            small[i] = small[i] * 1.000001 + 1e-9
    return offset


def neighbour(share: float, seconds: float, parent: int) -> None:
    """One busy process: ``share`` of each period working, the rest asleep, until ``seconds`` have
    passed or its parent is gone."""
    big, small = bytearray(BUFFER_BYTES), [1.0] * 256
    offset, stop = 0, time.monotonic() + seconds
    while time.monotonic() < stop and os.getppid() == parent:
        offset = work_for(PERIOD_SECONDS * share, big, small, offset)
        if share < 1:
            time.sleep(PERIOD_SECONDS * (1 - share))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="how many busy processes, one a core (default: every core)")
    parser.add_argument("--share", type=float, default=0.8, help="the share of each period a process works, 0-1 (default: 0.8)")
    parser.add_argument("--seconds", type=float, default=600, help="how long before they stop by themselves (default: 600)")
    args = parser.parse_args(argv)
    if args.cores < 1 or not 0 < args.share <= 1 or args.seconds <= 0:
        parser.error("--cores must be >= 1, --share in (0, 1] and --seconds > 0")
    processes = [multiprocessing.Process(target=neighbour, args=(args.share, args.seconds, os.getpid()), daemon=True)
                 for _ in range(args.cores)]
    for process in processes:
        process.start()
    print(f"neighbour: {args.cores} process(es) at {args.share:.0%} of a core each, CPU work and memory traffic, "
          f"for {args.seconds:g} s (pids {', '.join(str(p.pid) for p in processes)})", flush=True)
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        for process in processes:
            process.terminate()
    print("neighbour: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
