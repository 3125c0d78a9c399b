"""The device checks' workloads (benchmarks/gpu_device_checks.py runs this file with pytest).

- ``test_timing``: issue 35's six workloads, each timed three ways in this one process: by the
  plugin (``sol.measure``; its median and timing mode come back through ``--sol-json``), by CUPTI's
  kernel records through torch.profiler (the device time of the kernels and copies each call
  launches, summed over a ``record_function`` range around the call), and by CUDA events around
  each call; the same written flush (twice the L2) before every call of all three. The profiler's
  and the events' medians go to $SOLGATE_WORKLOADS_OUT, one JSON line per workload.
- ``test_side_stream``: a callable that launches its add under ``torch.cuda.stream(side)``, all of
  its work or a small part beside a larger kernel on the timed stream: the plugin must fail it and
  name the cause (docs/measurement.md).
- ``test_energy``: the plugin's energy per call of a 1 GiB copy (``joules`` in ``--sol-json``)
  beside NVML's total-energy counter over about 2 s of back-to-back copies (no flush between them).

On a CPU (the dry run) the sizes are small, the "CUPTI" figure is the profiler's CPU time of the
range and the "events" figure the host's clock around each call: the same code runs, the figures
say nothing of a GPU; the side-stream and energy cases need CUDA and NVML and are skipped.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any, Callable

import pytest
import torch

OUT_VARIABLE = "SOLGATE_WORKLOADS_OUT"
RANGE = "solgate-workload-call"
CALLS = 30  # calls timed by the profiler and by events (after a flush each)
ENERGY_SECONDS = 2.0  # the counter's window: many of its update periods (about 20-100 ms)
ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"

GIB, MIB = 1 << 30, 1 << 20
# id: (kind, size on the GPU, size on a CPU); copy and add sizes in elements of fp32, GEMM sides.
WORKLOADS = {
    "copy-1GiB-fp32": ("copy", GIB // 4, 1 << 16),
    "gemm-bf16-8192": ("gemm", 8192, 128),
    "add-16M-fp32": ("add", 16 * MIB, 1 << 14),
    "gemm-bf16-1024": ("gemm", 1024, 32),
    "copy-4MiB-fp32": ("copy", 4 * MIB // 4, 1 << 12),
    "add-256K-fp32": ("add", 256 * 1024, 1 << 10),
}


def make_workload(kind: str, n: int) -> tuple[Callable[[], Any], dict[str, Any]]:
    """A zero-argument call and the work it declares."""
    if kind == "gemm":
        a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
        out = torch.empty(n, n, device=DEVICE, dtype=torch.bfloat16)
        precision = "bf16_tensor" if ON_GPU else "fp32"  # a CPU's measured profile has fp32 and fp64 only
        return (lambda: torch.mm(a, b, out=out)), {"flops": {precision: 2 * n**3}, "bytes": 3 * n * n * 2}
    x = torch.randn(n, device=DEVICE)
    out = torch.empty_like(x)
    if kind == "copy":
        return (lambda: out.copy_(x)), {"bytes": 2 * n * 4}
    y = torch.randn(n, device=DEVICE)
    return (lambda: torch.add(x, y, out=out)), {"bytes": 3 * n * 4, "flops": {"fp32": n}}


def flusher() -> Callable[[], None]:
    """A written flush of twice the L2 (the plugin's own kind), before every timed call."""
    if not ON_GPU:
        scratch = torch.empty(1 << 20)
        return lambda: scratch.fill_(1.0)
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 64 * MIB
    scratch = torch.empty(2 * l2 // 4, device=DEVICE)
    counter = [0.0]

    def flush() -> None:
        counter[0] += 1.0
        scratch.fill_(counter[0])

    return flush


def synchronize() -> None:
    if ON_GPU:
        torch.cuda.synchronize()


def profiler_seconds(call: Callable[[], Any], flush: Callable[[], None]) -> tuple[float, float | None]:
    """The median over CALLS of the device time of the kernels (and copies) one call launches,
    from CUPTI's records through torch.profiler, summed under the call's ``record_function`` range
    (on a CPU: the range's CPU time); and the median span of the range on the device (the GPU-side
    annotation kineto records, first kernel start to last kernel end), None where there is none."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if ON_GPU else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(CALLS):
            flush()
            synchronize()
            with record_function(RANGE):
                call()
            synchronize()
    ranges = [e for e in prof.events() if e.name == RANGE]
    host_side = [e for e in ranges if e.device_type == DeviceType.CPU]
    device_side = [e.time_range.elapsed_us() for e in ranges if e.device_type != DeviceType.CPU]
    span = statistics.median(device_side) * 1e-6 if device_side else None
    if not ON_GPU:
        return statistics.median(e.cpu_time_total for e in host_side) * 1e-6, span
    summed = [getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0) for e in host_side]
    if not any(summed):  # the kernels were not linked to the range: its span on the device stands in
        return (span if span is not None else float("nan")), span
    return statistics.median(summed) * 1e-6, span


def events_seconds(call: Callable[[], Any], flush: Callable[[], None]) -> float:
    """The median over CALLS of CUDA events around each call (on a CPU: the host's clock)."""
    times = []
    for _ in range(CALLS):
        flush()
        synchronize()
        if ON_GPU:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e-3)
        else:
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def write_side_figures(record: dict[str, Any]) -> None:
    path = os.environ.get(OUT_VARIABLE)
    if path:
        with open(path, "a") as sink:
            sink.write(json.dumps(record) + "\n")


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_timing(sol, workload):
    kind, gpu_size, cpu_size = WORKLOADS[workload]
    call, work = make_workload(kind, gpu_size if ON_GPU else cpu_size)
    sol.measure(call, name=workload, **work)
    flush = flusher()
    for _ in range(3):  # cuBLAS picks its kernel, the allocator settles
        call()
    synchronize()
    cupti, span = profiler_seconds(call, flush)
    write_side_figures({"workload": workload, "cupti_s": cupti, "cupti_span_s": span,
                        "events_s": events_seconds(call, flush), "on_gpu": ON_GPU})


@pytest.mark.skipif(not ON_GPU, reason="a CPU has no CUDA streams (dry run)")
@pytest.mark.parametrize("hidden", ["all", "small"])
def test_side_stream(sol, hidden):
    """``all``: the add runs on a side stream only (it read 1.98 us, SOL 84.6 and failed as
    above-sol); ``small``: a 1 GiB copy on the timed stream and a 4 MiB add on the side one, whose
    SOL stays under 1: it must fail all the same, naming the cause."""
    side = torch.cuda.Stream()
    x = torch.randn(16 * MIB if hidden == "all" else MIB, device=DEVICE)
    y, out = torch.randn_like(x), torch.empty_like(x)
    big_in = torch.randn(GIB // 4, device=DEVICE) if hidden == "small" else None
    big_out = torch.empty_like(big_in) if big_in is not None else None

    def call() -> None:
        if big_in is not None:
            big_out.copy_(big_in)
        with torch.cuda.stream(side):
            torch.add(x, y, out=out)

    declared = 3 * x.numel() * 4 + (2 * big_in.numel() * 4 if big_in is not None else 0)
    sol.measure(call, name=f"side-stream-{hidden}", bytes=declared)


@pytest.mark.skipif(not ON_GPU, reason="no NVML energy counter on a CPU (dry run)")
def test_energy(sol):
    import pynvml

    call, work = make_workload("copy", GIB // 4)
    sol.measure(call, name="energy-copy-1GiB", **work)
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        for _ in range(5):
            call()
        synchronize()
        before, began, calls = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter(), 0
        while time.perf_counter() - began < ENERGY_SECONDS:
            for _ in range(50):
                call()
            calls += 50
            synchronize()
        seconds = time.perf_counter() - began
        joules = (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - before) / 1e3  # the counter is in mJ
    finally:
        pynvml.nvmlShutdown()
    write_side_figures({"workload": "energy-copy-1GiB", "counter_joules_per_call": joules / calls,
                        "counter_watts": joules / seconds, "counter_calls": calls, "bytes": work["bytes"],
                        "on_gpu": ON_GPU})


# --- issue 42: the integrity checks on the device ------------------------------------------------
# case -> the words its failure must hold ('' for the honest kernel, which must pass)
INTEGRITY_CASES = {
    "honest": "",
    "stale-graph": "unwritten output",
    "patched-events": "tampered timing",
    "unwaited-copy": "unwaited copy",
}
INTEGRITY_ON_CPU = ("honest",)


@pytest.mark.parametrize("case", list(INTEGRITY_CASES))
def test_integrity(sol, case):
    """``honest``: a torch add handed with its inputs and reference passes. ``stale-graph``: a CUDA
    graph captured on the first call's buffers and replayed on every later call (new inputs are
    never read): caught on new storage. ``patched-events``: the kernel halves
    torch.cuda.Event.elapsed_time while it runs: named as tampering. ``unwaited-copy``: the result
    copied to pinned host memory with non_blocking=True and never waited for."""
    if not ON_GPU and case not in INTEGRITY_ON_CPU:
        pytest.skip("a CUDA case (dry run on a CPU)")
    n = 4 * MIB if ON_GPU else 1 << 12
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = torch.empty(n, pin_memory=True) if case == "unwaited-copy" else torch.empty_like(x)
    work = {"bytes": 3 * n * 4, "flops": {"fp32": n}, "name": f"integrity-{case}"}
    if case == "honest":
        sol.measure(lambda a, b, c: torch.add(a, b, out=c), args=(x, y, out), outputs=2, reference=torch.add, **work)
        return
    if case == "stale-graph":
        graphs: list[Any] = []

        def kernel(a, b, c):
            if not graphs:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    torch.add(a, b, out=c)
                graphs.append(graph)
            graphs[0].replay()

        sol.measure(kernel, args=(x, y, out), outputs=2, reference=torch.add, **work)
        return
    if case == "patched-events":
        real = torch.cuda.Event.elapsed_time

        def kernel(a, b, c):
            torch.add(a, b, out=c)
            torch.cuda.Event.elapsed_time = lambda self, end: real(self, end) / 2

        try:
            sol.measure(kernel, args=(x, y, out), outputs=2, reference=torch.add, **work)
        finally:
            torch.cuda.Event.elapsed_time = real
        return
    scratch = torch.empty_like(x)

    def kernel(a, b, c):
        torch.add(a, b, out=scratch)
        c.copy_(scratch, non_blocking=True)

    sol.measure(kernel, args=(x, y, out), outputs=2, reference=lambda a, b: (a + b).cpu(), **work)
