"""Measure: the ncu child's side of ``--sol-ncu`` (the parent's side is measure/ncu.py).

The child is the same test node run again under Nsight Compute, with ``SOLGATE_NCU_CHILD``
naming one measurement. Here that measurement is not timed for real: its callable is called a
few times (compilation and autotuning stay outside the profile), the L2 is flushed, and it is
called once between ``torch.cuda.profiler.start()`` and ``stop()`` (cudaProfilerStart/Stop), the
only kernels ncu profiles. Every other measurement of the child is timed briefly, just to let
the test go on; the child leaves the clocks to its parent, writes no history and no report.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Callable

from pytest_solgate.measure.ncu import CHILD_VARIABLE

if TYPE_CHECKING:
    from pytest_solgate.measure.capabilities import Backend

WARMUP_CALLS = 3  # calls before the profiled one: Triton compiles and autotunes on the first


def child_target() -> tuple[str, str] | None:
    """(test key, measurement name) this process profiles, when it is an ncu child."""
    raw = os.environ.get(CHILD_VARIABLE)
    if not raw:
        return None
    try:
        test, name = json.loads(raw)
    except (ValueError, TypeError):
        return None
    return str(test), str(name)


def is_child() -> bool:
    return bool(os.environ.get(CHILD_VARIABLE))


def profile_one_call(fn: Callable[[], object], backend: Backend, start: Callable[[], None], stop: Callable[[], None]) -> None:
    """Warm up, flush the cache, and call ``fn`` once inside the profiler's range (``start`` and
    ``stop`` are cudaProfilerStart/Stop), with the device idle on both sides."""
    for _ in range(WARMUP_CALLS):
        fn()
    backend.flush()
    backend.synchronize()
    start()
    try:
        fn()
        backend.synchronize()
    finally:
        stop()


def cuda_profiler() -> tuple[Callable[[], None], Callable[[], None]]:
    import torch.cuda.profiler as profiler

    return profiler.start, profiler.stop
