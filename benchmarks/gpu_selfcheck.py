"""GPU self-checks: does the measurement path itself measure what it says, on this device?

Each check runs the plugin's own CUDA backend and sampling loop (or the CUDA primitives they rest
on) on a case whose answer is known, and returns one verdict line for $OUT/results.md:

- events: CUDA-event time of a fixed ``torch.cuda._sleep`` against host wall time around it;
- cold-warm: a vector copy timed cold (the plugin's L2 flush before each sample) and warm (no
  flush) must differ where its working set fits in L2 (a quarter of it) and agree at 4x L2;
- graph: a CUDA graph of one call, replayed, against the same call launched on the stream;
- nvml: NVML's SM clock read while a 50 ms kernel runs agrees with the kernel's own reading of its
  clock over that spin (the clock64/globaltimer stamps of measure/sm_clock.py). It compared NVML
  busy against idle before, and failed falsely on the H200: the clock stays at 1980 MHz for a while
  after work, so "idle" read 1980 too (issue 35 item 6);
- capture: a capture that fails (a host synchronize inside it) leaves later captures working.
  On torch 2.11 before pytorch#180395 it does not; the plugin then turns capture off for the
  session (measure/sampling.py), and this line says which torch this device has.

On the GPU, ``run_on_device()``; in a dry run on a CPU, ``run_on_fake_gpu()``: the same checks
against the fake GPU of tests/fake_gpu.py (its clock, L2 and NVML), so that the step's code
runs before a device is lent. The capture check runs last: on an affected torch it leaves the
process unable to capture.

    python benchmarks/gpu_selfcheck.py [--dry-run] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent

SLEEP_SECONDS = 0.02  # the fixed _sleep of the events check
LONG_KERNEL_SECONDS = 0.05  # the kernel NVML is read during
EVENTS_AGREE = 0.02  # events and wall time agree within 2 % (or 0.2 ms: launch and synchronize)
WARM_FASTER = 0.8  # warm at most 80 % of cold where the set fits in L2
COLD_WARM_AGREE = 0.10  # and within 10 % at 4x L2
GRAPH_AGREE = 0.05  # a graph of one call within 5 % (or 2 us) of the same call on the stream
# NVML's clock (an instant's reading) against the stamps' mean over the spin: within 5 % or 30 MHz
# (NVML reports the clock in steps of about 15 MHz).
NVML_AGREE, NVML_AGREE_MHZ = 0.05, 30.0


@dataclass(frozen=True)
class Verdict:
    check: str
    ok: bool
    line: str  # one line for $OUT/results.md


@dataclass(frozen=True)
class Device:
    """What the checks run on: torch (or the fake), the plugin's backend, and the clocks."""

    torch: Any
    device: Any
    l2_bytes: int
    clock_mhz: float
    make_backend: Callable[[bool], Any]  # flush: True for the plugin's backend, False for one that never flushes
    reader: Any  # an NVML reader, or None
    open_stamps: Callable[[], tuple[Any, str]]  # measure/sm_clock.py's clock stamps and, without them, why
    host_clock: Callable[[], float] = time.perf_counter
    pause: Callable[[float], None] = time.sleep


def _timing(dev: Device, fn: Callable[[], Any], backend: Any) -> float:
    from pytest_solgate.measure.sampling import take_timing
    from pytest_solgate.support.settings import SamplingSettings

    settings = SamplingSettings(min_time=0.1, max_time=0.5, min_samples=10, warmup_time=0.01, cuda_graph="off")
    return take_timing(fn, backend, settings, clock=dev.host_clock, pause=dev.pause).seconds


def check_events(dev: Device) -> Verdict:
    torch = dev.torch
    cycles = int(SLEEP_SECONDS * dev.clock_mhz * 1e6)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(dev.device)
    began = dev.host_clock()
    start.record()
    torch.cuda._sleep(cycles)
    stop.record()
    torch.cuda.synchronize(dev.device)
    wall = dev.host_clock() - began
    events = start.elapsed_time(stop) / 1e3
    ok = abs(events - wall) <= max(EVENTS_AGREE * wall, 200e-6)
    return Verdict("events", ok, (
        f"events: {'ok' if ok else 'FAILED'}: CUDA events read {events * 1e3:.3f} ms around a _sleep of {cycles} cycles, "
        f"host wall time {wall * 1e3:.3f} ms around its launch and synchronize"))


def check_cold_warm(dev: Device) -> Verdict:
    torch = dev.torch
    flushed, unflushed = dev.make_backend(True), dev.make_backend(False)
    parts, ok = [], True
    for label, working_set in (("L2/4", dev.l2_bytes // 4), ("4x L2", 4 * dev.l2_bytes)):
        words = working_set // 2 // 4  # source and destination, int32
        source = torch.empty(words, dtype=torch.int32, device=dev.device)
        destination = torch.empty(words, dtype=torch.int32, device=dev.device)

        def copy(destination: Any = destination, source: Any = source) -> Any:
            return destination.copy_(source)

        cold, warm = _timing(dev, copy, flushed), _timing(dev, copy, unflushed)
        ratio = warm / cold
        fits = label == "L2/4"
        good = ratio <= WARM_FASTER if fits else abs(ratio - 1) <= COLD_WARM_AGREE
        ok = ok and good
        parts.append(f"{label} ({working_set / 1e6:.0f} MB) cold {cold * 1e6:.1f} us, warm {warm * 1e6:.1f} us "
                     f"(warm/cold {ratio:.2f}, {'as expected' if good else 'NOT as expected'})")
    return Verdict("cold-warm", ok, f"cold-warm: {'ok' if ok else 'FAILED'}: vector copy " + "; ".join(parts))


def check_graph(dev: Device) -> Verdict:
    torch = dev.torch
    backend = dev.make_backend(True)
    words = dev.l2_bytes // 8 // 4  # a few microseconds of copy
    source = torch.empty(words, dtype=torch.int32, device=dev.device)
    destination = torch.empty(words, dtype=torch.int32, device=dev.device)

    def copy() -> Any:
        return destination.copy_(source)

    on_stream = _timing(dev, copy, backend)
    replay = backend.capture_graph(copy, 1)
    in_graph = _timing(dev, replay, backend)
    ok = abs(in_graph - on_stream) <= max(GRAPH_AGREE * on_stream, 2e-6)
    return Verdict("graph", ok, (
        f"graph: {'ok' if ok else 'FAILED'}: one copy of {2 * words * 4 / 1e6:.1f} MB replayed as a CUDA graph "
        f"{in_graph * 1e6:.2f} us, launched on the stream {on_stream * 1e6:.2f} us"))


def check_nvml(dev: Device) -> Verdict:
    if dev.reader is None:
        return Verdict("nvml", False, "nvml: FAILED: no NVML reader on this device")
    stamps, why = dev.open_stamps()
    if stamps is None:
        return Verdict("nvml", False, f"nvml: FAILED: no clock stamps to compare NVML with ({why or 'none'})")
    torch = dev.torch
    torch.cuda.synchronize(dev.device)
    first = stamps.stamp()
    torch.cuda._sleep(int(LONG_KERNEL_SECONDS * dev.clock_mhz * 1e6))
    last = stamps.stamp()
    nvml_mhz = dev.reader.read().get("sm_clock_mhz")  # while the spin runs
    torch.cuda.synchronize(dev.device)
    stamped = stamps.mhz(first, last)
    ok = bool(nvml_mhz and stamped and abs(nvml_mhz - stamped) <= max(NVML_AGREE * stamped, NVML_AGREE_MHZ))
    kernel = f"{stamped:.0f} MHz" if stamped else "no reading"
    return Verdict("nvml", ok, (
        f"nvml: {'ok' if ok else 'FAILED'}: NVML read the SM clock at {nvml_mhz} MHz while a "
        f"{LONG_KERNEL_SECONDS * 1e3:.0f} ms kernel ran; the kernel's own clock64/globaltimer stamps over it: {kernel}"))


def check_capture_after_failure(dev: Device) -> Verdict:
    torch = dev.torch
    backend = dev.make_backend(True)
    words = 1 << 16
    source = torch.empty(words, dtype=torch.int32, device=dev.device)
    destination = torch.empty(words, dtype=torch.int32, device=dev.device)

    def copy_and_synchronize() -> None:  # a host synchronize inside a capture is an error
        destination.copy_(source)
        torch.cuda.synchronize(dev.device)

    try:
        backend.capture_graph(copy_and_synchronize, 1)
        return Verdict("capture", False, "capture: FAILED: a capture with a host synchronize inside it did not fail")
    except Exception as exc:
        first = f"{type(exc).__name__}"
    try:
        dev.make_backend(True).capture_graph(lambda: destination.copy_(source), 1)  # a fresh backend: torch's state only
    except Exception as exc:
        return Verdict("capture", False, (
            f"capture: FAILED: after a failed capture ({first}), a later capture fails too ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160]}): torch's allocator kept the failed capture (pytorch#180395); the plugin "
            "turns capture off for the session after the first failure"))
    return Verdict("capture", True, f"capture: ok: after a failed capture ({first}), a later capture works")


def check_stamp_kernel_compiles() -> Verdict:
    """The dry run's stand-in for a launch of measure/sm_clock.py's kernel: Triton compiles it for
    Hopper (sm_90) on a CPU, and its PTX reads the three registers nvbench's kernel reads."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pytest_solgate.measure import sm_clock

    source = ASTSource(fn=sm_clock._build_stamp_kernel(), signature={"out_ptr": "*i64"}, constexprs={})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    missing = [register for register in ("%smid", "%globaltimer", "%clock64") if register not in ptx]
    ok = not missing
    return Verdict("stamp-kernel", ok, (
        f"stamp-kernel: {'ok' if ok else 'FAILED'}: the SM clock stamp kernel compiles for sm_90 with triton "
        f"{triton.__version__}" + (f" but its PTX lacks {', '.join(missing)}" if missing else
                                   ", its PTX reading %smid, %globaltimer and %clock64")))


CHECKS = (check_events, check_cold_warm, check_graph, check_nvml, check_capture_after_failure)  # capture last


def run_checks(dev: Device) -> list[Verdict]:
    verdicts = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            verdicts.append(check(dev))
        except Exception as exc:  # one broken check must not hide the others
            verdicts.append(Verdict(name, False, f"{name}: FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    return verdicts


def run_on_device() -> list[Verdict]:
    import torch

    from pytest_solgate.measure import backends, devices, telemetry

    device = torch.device("cuda", torch.cuda.current_device())
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 * 2**20
    reader, _ = telemetry.open_reader(device.index, devices.cuda_uuid(torch, device))
    clock_mhz = (reader.sm_clock_max if reader else None) or 1980
    from pytest_solgate.measure import sm_clock

    def make_backend(flush: bool) -> Any:
        backend = backends.CudaBackend(torch, device, l2_bytes, clock_mhz)
        if not flush:
            backend.flush = lambda: None
        return backend

    return run_checks(Device(torch, device, l2_bytes, clock_mhz, make_backend, reader,
                             open_stamps=lambda: sm_clock.open_stamps(torch, device)))


def run_on_fake_gpu(nvml: Any = None) -> list[Verdict]:
    """The dry run's form: the fake GPU of tests/fake_gpu.py, with its NVML (``nvml``: one of
    its FakeNvml, given the fake GPU; by default one that reads the GPU's clock) and clock."""
    sys.path.insert(0, str(ROOT / "tests"))
    import fake_gpu as fakes

    from pytest_solgate.measure import backends, telemetry

    gpu = fakes.FakeGpu()
    torch = fakes.fake_torch(gpu)
    reader = telemetry.NvmlReader((nvml or fakes.FakeNvml)(gpu), handle=object())
    device = types.SimpleNamespace(index=0)

    def make_backend(flush: bool) -> Any:
        backend = backends.CudaBackend(torch, device, gpu.l2_bytes, gpu.clock_mhz, host_clock=gpu.clock,
                                       open_reader=lambda index, uuid=None: (reader, ""),
                                       open_stamps=lambda torch_, device_: (fakes.FakeClockStamps(gpu), ""))
        if not flush:
            backend.flush = lambda: None
        return backend

    verdicts = run_checks(Device(torch, device, gpu.l2_bytes, gpu.clock_mhz, make_backend, reader,
                                 open_stamps=lambda: (fakes.FakeClockStamps(gpu), ""), host_clock=gpu.clock,
                                 pause=gpu.host_work))
    try:
        return [check_stamp_kernel_compiles(), *verdicts]
    except Exception as exc:  # no Triton, or one that cannot compile for sm_90 here
        return [Verdict("stamp-kernel", False, f"stamp-kernel: FAILED: {type(exc).__name__}: {exc}"), *verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run the checks on the fake GPU of the tests")
    parser.add_argument("--out", type=Path, help="write the verdicts here as JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    report(run_on_fake_gpu() if args.dry_run else run_on_device(), args.out, "selfcheck")


def report(verdicts: list[Verdict], out: Path | None, label: str) -> None:
    """Each verdict's line, the verdicts as JSON to ``out``, and a last line counting them."""
    for verdict in verdicts:
        print(verdict.line, flush=True)
    if out:
        out.write_text(json.dumps([asdict(v) for v in verdicts], indent=2))
    failed = [v.check for v in verdicts if not v.ok]
    print(f"{label}: {len(verdicts) - len(failed)} of {len(verdicts)} checks ok" + (f"; failed: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    main()
