"""The fake GPU of the tests, in one place: torch.cuda, NVML (with its energy counter and clock
lock) and the SM-clock stamps as a GPU behaves, not as a host-side log (no GPU on CI).

tests/test_gpu_paths.py, tests/test_gpu_measurements.py and benchmarks/gpu_selfcheck.py's dry run
use them; the real thing is checked by benchmarks/gpu_check.py whenever a GPU is at hand.
"""

import collections
import contextlib
import dataclasses
import math
import os
import types

import idle_machine

from pytest_solgate.measure import backends, devices, sm_clock, telemetry
from pytest_solgate.measure.contention import Readers
from pytest_solgate.measure.platform import Platform
from pytest_solgate.support.settings import SamplingSettings

BUSY_WATTS, IDLE_WATTS = 600.0, 60.0
ENERGY_STEP_SECONDS = 0.010



class FakeGpu:
    """One device behind a fake ``torch.cuda``.

    The host has a clock (``now``) that moves only by what the host does: launching (LAUNCH_SECONDS
    per kernel or graph), ``host_work`` (a slow Python launcher, a compile) and waiting in
    ``synchronize``. Each stream queues its work on the device and finishes it at ``ready``; an op
    starts when both the host has launched it and the stream is free, so a host that is late leaves
    an idle gap on the device. Events are stamped when the device reaches them, not when Python
    records them. Kernels take device time: a fixed time, or the time to stream a buffer from DRAM,
    or from the L2 when that buffer is still there (a simple LRU cache that the flush empties).
    A graph capture fails as torch's does when a kernel synchronizes with the host inside it, and
    the caching allocator keeps torch 2.11's state after it (``captures_underway``, below). The SMs
    run at ``sm_mhz`` (a test lowers it to throttle them).
    """

    LAUNCH_SECONDS = 4e-6

    def __init__(self, l2_bytes=50_000_000, dram_bytes_per_s=4.0e12, l2_bytes_per_s=12.0e12, clock_mhz=1980,
                 runtime="cuda"):
        self.now = 0.0
        # The runtime whose calls the profiler records: "cuda" (cudaLaunchKernel), or "hip" as torch
        # on ROCm names them (hipLaunchKernel, hipGraphLaunch: tests/data/traces/amd_mi250_train.json.gz).
        self.runtime = runtime
        self.l2_bytes, self.dram_rate, self.l2_rate = l2_bytes, dram_bytes_per_s, l2_bytes_per_s
        self.clock_mhz = clock_mhz
        self.sm_mhz = clock_mhz
        # torch 2.11's caching allocator before pytorch#180395: a capture whose cudaStreamEndCapture
        # fails stays in captures_underway, and every later capture or empty_cache() then asserts.
        self.captures_underway = []
        self.streams = []
        self.default_stream = FakeStream(self, "default")
        self.current = self.default_stream
        self.cache = collections.OrderedDict()  # buffer name -> bytes held, least recently used first
        self.capturing = None  # the FakeGraph being captured
        self.log = []
        self.ops = []  # (start, end, what) of every op the device ran
        # Device time between an event and the next op on its stream (0: none). On an H200 the
        # events around a short kernel read about 3 us more than its own timestamps (issue 35).
        self.event_seconds = 0.0
        # While torch.profiler runs (FakeProfile): kineto-like events of host launches, host ranges
        # and device activities, joined by a correlation id as CUPTI joins them
        self.trace = None
        self.correlation = 0

    # the host side
    def clock(self):
        return self.now

    def host_work(self, seconds):
        self.now += seconds

    def synchronize(self, device=None):
        self.now = max([self.now] + [s.ready for s in self.streams])
        self.log.append("sync")

    def host_sync(self):
        """What ``.item()`` does: wait for the device; inside a capture that is an error, and the
        capture is spoiled (its end raises too)."""
        if self.capturing is not None:
            self.capturing.spoiled = True
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        self.synchronize()

    def busy(self):
        return any(s.ready > self.now for s in self.streams)

    # the device side
    def launch(self, what, device_seconds, stream=None):
        """Queue one op on the current stream (or ``stream``), or into the graph being captured."""
        if self.capturing is not None:
            self.capturing.ops.append((what, device_seconds))
            return
        correlation = self.host_launch(f"{self.runtime}LaunchKernel")
        self.enqueue(stream or self.current, what, device_seconds, correlation)

    def host_launch(self, name):
        """The host's side of a launch: its time, and under the profiler its runtime event."""
        self.correlation += 1
        if self.trace is not None:
            self.trace.append(FakeKinetoEvent(name, False, self.now, self.now + self.LAUNCH_SECONDS, self.correlation, 1))
        self.now += self.LAUNCH_SECONDS
        return self.correlation

    def enqueue(self, stream, what, device_seconds, correlation=0):
        start = max(self.now, stream.ready)
        stream.ready = start + device_seconds()  # the L2 changes in queue order, as on one stream
        self.ops.append((start, stream.ready, what))
        self.log.append(what)
        if self.trace is not None and correlation:
            self.trace.append(FakeKinetoEvent(what, True, start, stream.ready, correlation, stream.number))

    def kernel(self, seconds):
        self.launch("kernel", lambda: seconds)

    def streaming_kernel(self, buffer, nbytes):
        """A kernel that reads ``nbytes`` of ``buffer``: at L2 speed when it is still cached."""
        self.launch("kernel", lambda: self.read(buffer, nbytes))

    def read(self, buffer, nbytes):
        hit = buffer in self.cache and nbytes <= self.l2_bytes
        if hit:
            self.cache.move_to_end(buffer)
        else:
            self.cache[buffer] = min(nbytes, self.l2_bytes)
            while sum(self.cache.values()) > self.l2_bytes:
                self.cache.popitem(last=False)
        return nbytes / (self.l2_rate if hit else self.dram_rate)

    def flush(self, nbytes, kind="flush"):
        """Writing (or reading) ``nbytes`` evicts everything when it is at least the L2."""

        def run():
            if nbytes >= self.l2_bytes:
                self.cache.clear()
            return self.read("flush buffer", nbytes)

        self.launch(f"{kind} {nbytes}", run)

    def empty_cache(self):
        if self.captures_underway:
            raise RuntimeError("INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp: captures_underway.empty()")

    def seconds_in(self, prefix):
        return sum(end - start for start, end, what in self.ops if what.startswith(prefix))


class FakeStream:
    def __init__(self, gpu, name):
        self.gpu, self.name, self.ready = gpu, name, 0.0
        self.number = 7 + len(gpu.streams)  # CUPTI's stream id, as the trace names it
        gpu.streams.append(self)

    def wait_stream(self, other):
        self.ready = max(self.ready, other.ready)

    def __repr__(self):
        return f"<stream {self.name}>"


class FakeEvent:
    gpu = None  # set by fake_torch

    def __init__(self, enable_timing=False):
        self.timing, self.time = enable_timing, None

    def record(self):
        gpu = self.gpu
        assert gpu.capturing is None, "an event recorded inside a capture"
        stream = gpu.current
        self.time = stream.ready = max(gpu.now, stream.ready)  # when the device reaches it
        stream.ready += gpu.event_seconds
        gpu.log.append("record")

    def synchronize(self):
        """The host waits until the device reached the event."""
        assert self.time is not None, "synchronize on an event never recorded"
        self.gpu.now = max(self.gpu.now, self.time)

    def elapsed_time(self, end):
        assert self.timing and end.timing, "elapsed_time needs events created with enable_timing=True"
        if self.time is None or end.time is None or max(self.time, end.time) > self.gpu.now:
            raise RuntimeError("CUDA error: device not ready")  # read before the host synchronized
        return (end.time - self.time) * 1e3  # milliseconds, as torch returns them


class FakeTensor:
    def __init__(self, gpu, numel):
        self.gpu, self.numel_ = gpu, numel

    def zero_(self):
        self.gpu.flush(self.numel_ * 4)

    def sum(self):
        self.gpu.flush(self.numel_ * 4, kind="read flush")

    def copy_(self, source):
        """A copy kernel that streams both tensors (benchmarks/gpu_selfcheck.py's cold-warm check)."""
        self.gpu.streaming_kernel(f"copy {id(source)} -> {id(self)}", (source.numel_ + self.numel_) * 4)
        return self


class FakeGraph:
    gpu = None

    def __init__(self):
        self.ops, self.spoiled = [], False

    def replay(self):
        gpu = self.gpu
        correlation = gpu.host_launch(f"{gpu.runtime}GraphLaunch")  # one launch for the whole graph
        gpu.log.append(f"replay {len(self.ops)}")
        for what, device_seconds in self.ops:
            gpu.enqueue(gpu.current, what, device_seconds, correlation)  # its kernels share the launch's id (CUPTI)


class FakeCapture:
    """``torch.cuda.graph``: on entry the current stream becomes the capture stream; on exit the
    capture ends (raising if it was spoiled) and only then is the stream restored, as torch's
    ``__exit__`` calls ``capture_end()`` before its stream context's ``__exit__``."""

    def __init__(self, graph, pool=None, stream=None):
        self.graph, self.stream = graph, stream

    def __enter__(self):
        gpu = self.graph.gpu
        if gpu.captures_underway:
            raise RuntimeError("INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp: captures_underway.empty()")
        gpu.captures_underway.append(self.graph)
        gpu.synchronize()
        self.previous = gpu.current
        gpu.current = self.stream or FakeStream(gpu, "capture")
        gpu.capturing = self.graph

    def __exit__(self, *exc):
        gpu = self.graph.gpu
        gpu.capturing = None
        if self.graph.spoiled:  # raised before the allocator forgets the capture (torch 2.11)
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        gpu.captures_underway.remove(self.graph)
        gpu.current = self.previous


class FakeKinetoEvent:
    """One event as torch.profiler's kineto results give it (the methods kernel_trace.from_kineto reads)."""

    def __init__(self, name, on_device, start, end, correlation, resource):
        self._name, self._on_device, self._correlation, self._resource = name, on_device, correlation, resource
        self._start, self._end = round(start * 1e9), round(end * 1e9)

    def name(self):
        return self._name

    def device_type(self):
        return "DeviceType.CUDA" if self._on_device else "DeviceType.CPU"

    def start_ns(self):
        return self._start

    def end_ns(self):
        return self._end

    def correlation_id(self):
        return self._correlation

    def device_resource_id(self):
        return self._resource if self._on_device else 0

    def start_thread_id(self):
        return 0 if self._on_device else self._resource


class FakeProfile:
    """``torch.profiler.profile`` on the fake GPU: collects the trace while open; after it closes,
    ``profiler.kineto_results.events()`` gives it, as torch's does."""

    gpu = None
    sessions = 0

    def __init__(self, activities=()):
        self.activities = activities

    def __enter__(self):
        FakeProfile.sessions += 1
        self.gpu.trace = []
        return self

    def __exit__(self, *exc):
        events, self.gpu.trace = self.gpu.trace, None
        self.profiler = types.SimpleNamespace(kineto_results=types.SimpleNamespace(events=lambda: events))


class FakeRecordFunction:
    """``torch.profiler.record_function``: a host range on thread 1, recorded when it closes."""

    gpu = None

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.start = self.gpu.now
        return self

    def __exit__(self, *exc):
        if self.gpu.trace is not None:
            self.gpu.trace.append(FakeKinetoEvent(self.name, False, self.start, self.gpu.now, 0, 1))


def fake_profiler(gpu):
    """torch.profiler for the fake GPU, with CUDA activities (CUPTI) available."""
    FakeProfile.gpu = FakeRecordFunction.gpu = gpu
    activity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")
    return types.SimpleNamespace(profile=FakeProfile, record_function=FakeRecordFunction, ProfilerActivity=activity,
                                 supported_activities=lambda: {"cpu", "cuda"})


def fake_torch(gpu, kernel_timestamps=False):
    """torch.cuda on the fake GPU; with ``kernel_timestamps``, torch.profiler with CUPTI too."""
    FakeEvent.gpu = FakeGraph.gpu = gpu

    @contextlib.contextmanager
    def stream(s):  # torch.cuda.stream: restores the previous stream however the block ends
        previous, gpu.current = gpu.current, s
        try:
            yield
        finally:
            gpu.current = previous

    cuda = types.SimpleNamespace(
        Stream=lambda: FakeStream(gpu, "side"),
        stream=stream,
        current_stream=lambda: gpu.current,
        CUDAGraph=FakeGraph,
        graph=FakeCapture,
        Event=FakeEvent,
        _sleep=lambda cycles: gpu.launch(f"sleep {cycles}", lambda: cycles / (gpu.clock_mhz * 1e6)),
        synchronize=lambda device=None: gpu.host_sync(),  # an error inside a capture, as cudaDeviceSynchronize is
        empty_cache=lambda: gpu.empty_cache(),
        # clock_rate in kHz, as cudaDevAttrClockRate gives it
        get_device_properties=lambda device: types.SimpleNamespace(uuid="", multi_processor_count=132,
                                                                   clock_rate=gpu.clock_mhz * 1000),
    )
    torch = types.SimpleNamespace(cuda=cuda, int32="int32", empty=lambda n, dtype, device: FakeTensor(gpu, n))
    if kernel_timestamps:
        torch.profiler = fake_profiler(gpu)
    return torch


class FakeNvml:
    """pynvml for the fake GPU: its constants are pynvml's (checked below); the SM clock reads the
    fake GPU's ``sm_mhz`` (``clock_mhz`` without one) while the device is busy and ``idle_mhz`` when
    it is not. Its default applications clock is not its maximum, as on real parts; ``called``
    lists the functions called, to check that none is deprecated."""

    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpu=None, clock_mhz=1980, max_mhz=1980, default_mhz=1755, reasons=0, idle_mhz=345):
        self.gpu, self.clock_mhz, self.max_mhz, self.default_mhz = gpu, clock_mhz, max_mhz, default_mhz
        self.reasons, self.idle_mhz = reasons, idle_mhz
        self.called = set()

    def __getattribute__(self, name):
        if name.startswith("nvml"):
            object.__getattribute__(self, "called").add(name)
        return object.__getattribute__(self, name)

    def _memory_or_sm(self, kind, sm, memory=2619):
        if kind == self.NVML_CLOCK_SM:
            return sm
        if kind == self.NVML_CLOCK_MEM:
            return memory
        raise RuntimeError(f"NVML_ERROR_INVALID_ARGUMENT: clock type {kind}")

    def nvmlDeviceGetClockInfo(self, handle, kind):
        busy = self.gpu is None or self.gpu.busy()
        running = self.gpu.sm_mhz if self.gpu is not None else self.clock_mhz
        return self._memory_or_sm(kind, running if busy else self.idle_mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return self._memory_or_sm(kind, self.max_mhz)

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, kind):
        return self._memory_or_sm(kind, self.default_mhz)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000

    def nvmlDeviceGetPowerUsage(self, handle):
        return 412_000

    def nvmlDeviceGetTemperatureV(self, handle, kind):
        assert kind == self.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons


def fake_nvml(sm_clock=1980, reasons=0):
    return FakeNvml(clock_mhz=sm_clock, reasons=reasons)


def cuda_backend(gpu, nvml=None, kernel_timestamps=False, stamps=None):
    """The real CudaBackend on the fake GPU (its host clock is the fake one), with NVML or without,
    with torch.profiler's kernel timestamps or without, and with the SM clock stamps or without;
    each passed to its constructor."""
    reader = telemetry.NvmlReader(nvml, handle=object()) if nvml is not None else None
    return backends.CudaBackend(fake_torch(gpu, kernel_timestamps), types.SimpleNamespace(index=0), l2_bytes=gpu.l2_bytes,
                                clock_mhz=1980, host_clock=gpu.clock,
                                open_reader=lambda index, uuid=None: (reader, "" if reader else "no telemetry: fake"),
                                open_stamps=lambda torch, device: (stamps, "") if stamps else sm_clock.open_stamps(torch, device))


def fake_platform(backend, gpu=None, name="NVIDIA H200"):
    """The session's devices on the fake GPU: one H200 (cuda:0), timed by ``backend``; the
    profiler range of an --sol-ncu child is marked in ``gpu``'s log. The clock lock's exit paths
    (atexit, SIGTERM) are tested in a subprocess of their own: registered here, they would hold
    this fake device until the test process exits."""

    def mark(what):
        return lambda: gpu.log.append(what)

    return Platform(
        choose_device=lambda spec, worker, count=None: devices.DeviceChoice("cuda", 0),
        device_name=lambda choice: name,
        device_facts=lambda choice: {},
        device_key=lambda index: "GPU-fake0001",
        make_backend=lambda choice, l2, clock: backend,
        device_scope=lambda choice: contextlib.nullcontext(),
        set_device=lambda index: None,
        restore_at_exit=lambda restore: None,
        cuda_profiler=lambda: (mark("profiler start"), mark("profiler stop")),
    )


class StandIn:
    """A plugin standing in for the machine's devices (the pytest_solgate_platform hook):
    ``pytester.runpytest(..., plugins=[StandIn(platform)])``. A platform that names no contention
    readers reads the suite's machine (tests/idle_machine.py: an idle one unless the test says)."""

    def __init__(self, platform):
        self.platform = platform

    def pytest_solgate_platform(self, config):
        if self.platform.contention != Readers():
            return self.platform
        return dataclasses.replace(self.platform, contention=idle_machine.readers_from(os.environ))


def quick(gpu, **settings):
    """take_timing's arguments for the fake GPU: short budgets, counted on its host clock."""
    sampling = {"min_time": 0, "max_time": 0.05, "min_samples": 3, "warmup_time": 0, **settings}
    return {"settings": SamplingSettings(**sampling), "clock": gpu.clock, "pause": gpu.host_work}


class FakeClockStamps:
    """measure/sm_clock.py's stamps on the fake GPU: each is queued on the current stream and
    reads (device nanoseconds, SM cycles) when the device reaches it; the cycle counter advances at
    the SMs' clock (``gpu.sm_mhz``) as it stands when the stamp is queued."""

    def __init__(self, gpu):
        self.gpu, self.stamps, self.last = gpu, [], (0.0, 0.0)

    def stamp(self):
        gpu, slot = self.gpu, len(self.stamps)
        self.stamps.append(None)

        def run():
            at = max(gpu.now, gpu.current.ready)  # when the device reaches it, as enqueue computes
            cycles = self.last[1] + (at - self.last[0]) * gpu.sm_mhz * 1e6
            self.last = (at, cycles)
            self.stamps[slot] = (round(at * 1e9) + 1, round(cycles))
            return 1e-6

        gpu.launch("stamp", run)
        return slot

    def mhz(self, start_slot, stop_slot):
        return sm_clock.clock_mhz(self.stamps[start_slot], self.stamps[stop_slot])


def stamped_backend(gpu, nvml=None):
    return cuda_backend(gpu, nvml=nvml, stamps=FakeClockStamps(gpu))


class NvmlError(Exception):
    """pynvml.NVMLError: the NVML return code in ``value``."""

    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class EnergyNvml(FakeNvml):
    """The fake NVML with an energy counter and clock-lock calls (pynvml's names and constants)."""

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION = 3, 4
    NVML_CLOCK_LIMIT_ID_TDP = 0xFFFFFF01
    BASE_MHZ = 1590

    def __init__(self, gpu, refuse_lock=False, energy=True, step_seconds=ENERGY_STEP_SECONDS, idle_watts=IDLE_WATTS,
                 processes=(), **kwargs):
        super().__init__(gpu, **kwargs)
        self.refuse_lock, self.energy = refuse_lock, energy
        self.step_seconds, self.idle_watts = step_seconds, idle_watts
        self.processes = list(processes)  # (pid, name) of the compute processes NVML lists on the device
        self.locked = None  # (min, max) as last set
        self.calls = []
        self._step_cache = (None, 0)

    def _busy_seconds_until(self, t):
        return sum(max(0.0, min(end, t) - start) for start, end, _ in self.gpu.ops)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy:
            raise NvmlError(self.NVML_ERROR_NOT_SUPPORTED)
        self.gpu.host_work(20e-6)  # an NVML call takes host time
        step = math.floor(self.gpu.now / self.step_seconds) * self.step_seconds
        if self._step_cache[0] != step:
            busy = min(self._busy_seconds_until(step), step)
            joules = self.idle_watts * step + (BUSY_WATTS - self.idle_watts) * busy
            self._step_cache = (step, int(joules * 1e3))
        return self._step_cache[1]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid, _ in self.processes]

    def nvmlSystemGetProcessName(self, pid):
        return dict(self.processes)[pid].encode()

    def nvmlDeviceSetGpuLockedClocks(self, handle, low, high):
        self.calls.append(("lock", low, high))
        if self.refuse_lock:
            raise NvmlError(self.NVML_ERROR_NO_PERMISSION)
        self.locked = (low, high)
        self.clock_mhz = self.BASE_MHZ if high == self.NVML_CLOCK_LIMIT_ID_TDP else high
        if self.gpu is not None:  # a real lock sets the clock the SMs run at, which the clock stamps read
            self.gpu.sm_mhz = self.clock_mhz

    def nvmlDeviceResetGpuLockedClocks(self, handle):
        self.calls.append(("reset",))
        self.locked = None
