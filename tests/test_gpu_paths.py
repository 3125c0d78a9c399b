"""The GPU-only paths, exercised here against fakes of torch.cuda and NVML (no GPU on CI).

They check the order of operations and the arithmetic; the real thing is checked by
benchmarks/gpu_check.py whenever a GPU is at hand (docs/results.md).
"""

import contextlib
import types

import pytest

from pytest_solgate import backends, telemetry
from pytest_solgate.measure import take_timing
from pytest_solgate.settings import SamplingSettings


class FakeEvent:
    log: list = []
    clock = [0.0]

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.time = None

    def record(self):
        self.time = self.clock[0]
        self.log.append("record")

    def elapsed_time(self, end):
        return (end.time - self.time) * 1e3  # milliseconds, as torch returns them


class FakeTensor:
    def __init__(self, numel):
        self.numel_ = numel

    def zero_(self):
        FakeEvent.log.append(f"flush {self.numel_ * 4}")


class FakeGraph:
    """Captures the calls made inside ``torch.cuda.graph(g)`` and re-runs them on replay."""

    capturing = None

    def __init__(self):
        self.calls = []

    def replay(self):
        FakeEvent.log.append(f"replay {len(self.calls)}")
        for call in self.calls:
            call()


class FakeCapture:
    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        FakeGraph.capturing = self.graph

    def __exit__(self, *exc):
        FakeGraph.capturing = None


@pytest.fixture(autouse=True)
def fresh_fake_clock():
    """Every test starts its fake GPU clock at zero. Shared across tests, the clock grew by however
    many samples earlier tests took in their (real-time) budgets, and the float rounding of a
    2 us interval at a large clock value moved a batch size from 10 to 11 in some runs."""
    FakeEvent.clock[0] = 0.0
    FakeEvent.log = []
    yield


def fake_launch(seconds):
    """A kernel launch: queued into the graph while one is captured, else run (advancing the clock)."""

    def run():
        FakeEvent.clock[0] += seconds
        FakeEvent.log.append("kernel")

    if FakeGraph.capturing is not None:
        FakeGraph.capturing.calls.append(run)
    else:
        run()


def fake_torch():
    stream = types.SimpleNamespace(wait_stream=lambda other: None)
    cuda = types.SimpleNamespace(
        Stream=lambda: stream,
        stream=lambda s: contextlib.nullcontext(),
        current_stream=lambda: stream,
        CUDAGraph=FakeGraph,
        graph=FakeCapture,
        Event=FakeEvent,
        _sleep=lambda cycles: FakeEvent.log.append(f"sleep {cycles}"),
        synchronize=lambda device=None: FakeEvent.log.append("sync"),
        get_device_properties=lambda device: types.SimpleNamespace(uuid="", multi_processor_count=132),
    )
    return types.SimpleNamespace(cuda=cuda, int32="int32", empty=lambda n, dtype, device: FakeTensor(n))


def test_cuda_backend_flushes_twice_the_l2_and_holds_the_stream_outside_the_timed_region(monkeypatch):
    monkeypatch.setattr(telemetry, "open_reader", lambda index, uuid=None: (None, "no telemetry: fake"))
    FakeEvent.log = []
    backend = backends.CudaBackend(fake_torch(), types.SimpleNamespace(index=0), l2_bytes=50_000_000, clock_mhz=1980)

    def kernel():
        FakeEvent.clock[0] += 1e-3
        FakeEvent.log.append("kernel")

    timing = take_timing(kernel, backend, SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0))
    assert timing.backend == "cuda" and timing.seconds == pytest.approx(1e-3)
    log = FakeEvent.log
    first = log.index("kernel")
    # flush (2 x 50 MB), then the spin, then the start event, then the kernel, then the stop event
    hold_cycles = int(140e-6 * 1980e6)  # 100 us + 2 x 20 us for a batch of one (nothing enqueued yet), at 1980 MHz
    assert log[first - 3:first + 2] == ["flush 100000000", f"sleep {hold_cycles}", "record", "kernel", "record"]
    # one synchronization per round, not per sample
    assert log.count("sync") < log.count("kernel")
    assert timing.telemetry is None and timing.telemetry_note == "no telemetry: fake"


def test_the_hold_outlasts_a_slow_python_launcher(monkeypatch):
    """A launcher that takes 2 ms to queue its kernel (an autotune wrapper, say) must not leave the
    GPU idle inside the timed region: the hold grows to twice the longest enqueue seen."""
    import time

    monkeypatch.setattr(telemetry, "open_reader", lambda index, uuid=None: (None, "no telemetry: fake"))
    FakeEvent.log = []
    backend = backends.CudaBackend(fake_torch(), types.SimpleNamespace(index=0), l2_bytes=50_000_000, clock_mhz=1980)

    def slow_launch():
        time.sleep(0.002)  # host time spent before the kernel reaches the stream
        FakeEvent.clock[0] += 1e-4

    take_timing(slow_launch, backend, SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0))
    holds = [int(entry.split()[1]) / 1980e6 for entry in FakeEvent.log if entry.startswith("sleep")]
    assert holds[0] == pytest.approx(140e-6, rel=1e-3)  # nothing seen yet
    assert min(holds[1:]) >= 2 * 0.002 and max(holds) <= backends.MAX_HOLD_SECONDS


def fake_nvml(sm_clock=1980, reasons=0):
    nvml = types.SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980 if kind == 0 else 2619,
        nvmlDeviceGetClockInfo=lambda h, kind: sm_clock if kind == 0 else 2619,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetPowerUsage=lambda h: 412_000,
        nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: reasons,
    )
    return nvml


def test_nvml_reading_and_throttle_rules():
    reading = telemetry.NvmlReader(fake_nvml(), handle=object()).read()
    assert reading == {"sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2619,
                       "temperature_c": 61, "power_w": 412.0, "power_limit_w": 700.0, "throttle_reasons": []}
    assert not telemetry.is_throttled(reading)
    slow = telemetry.NvmlReader(fake_nvml(sm_clock=1400), handle=object()).read()
    assert telemetry.is_throttled(slow)  # 1400 < 0.75 * 1980
    hot = telemetry.NvmlReader(fake_nvml(reasons=0x40), handle=object()).read()
    assert hot["throttle_reasons"] == ["hw_thermal_slowdown"] and telemetry.is_throttled(hot)
    # The power cap alone is where dense tensor-core work runs on H100/H200: a fact, not throttling.
    capped = {**reading, "throttle_reasons": ["sw_power_cap"]}
    assert not telemetry.is_throttled(capped)
    assert telemetry.is_throttled({**reading, "throttle_reasons": ["sw_power_cap", "hw_slowdown"]})


def test_an_unsupported_query_does_not_hide_the_others():
    nvml = fake_nvml()

    def unsupported(handle):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    nvml.nvmlDeviceGetPowerUsage = unsupported
    reading = telemetry.NvmlReader(nvml, handle=object()).read()
    assert "power_w" not in reading and reading["sm_clock_mhz"] == 1980


def test_without_nvml_telemetry_is_absent_and_says_why():
    reader, note = telemetry.open_reader(0)
    assert reader is None and note.startswith("no telemetry:")  # no NVIDIA driver on this machine


def test_device_choice_on_a_machine_without_cuda():
    torch = backends.torch_or_none()
    if torch is not None and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert str(backends.choose_device("auto", worker_index=3)) == "cpu"
    from pytest_solgate.errors import OptionError

    torch = backends.torch_or_none()
    if torch is not None and not torch.cuda.is_available():
        with pytest.raises(OptionError, match="no CUDA device is available"):
            backends.choose_device("cuda:1", None)


def test_gpu_calibration_logic_runs_on_cpu_tensors(tmp_path):
    """The GPU calibration, with a CPU timer and small sizes: every precision is measured, fp8 is
    skipped where unsupported, and the profile is written next to its datasheet one."""
    torch = pytest.importorskip("torch")
    from pytest_solgate import calibrate
    from pytest_solgate.profiles import find_profile, load_profile

    def timer(fn, repeats):  # the plugin's own sampling loop, on the CPU backend
        quick = SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0)
        return take_timing(fn, backends.CpuBackend("cpu"), quick).seconds

    datasheet = find_profile("h100-sxm")
    profile = calibrate.gpu_profile(datasheet, torch.device("cpu"), "uuid-1", "NVIDIA H100 80GB HBM3", None,
                                    timer=timer, matmul_size=128, copy_bytes=8 << 20)
    assert profile.id == "h100-sxm-measured-uuid1" and profile.derived_from == "h100-sxm" and profile.ceilings == "measured"
    assert set(profile.peak_tflops) == set(datasheet.peak_tflops)
    measured = {"fp32", "tf32_tensor", "bf16_tensor", "fp16_tensor", "fp64_tensor"}
    for key in measured:
        assert profile.peak_tflops[key] != datasheet.peak_tflops[key], key  # a CPU is not an H100
    assert "kept from the datasheet" in profile.notes and "int8_tensor" in profile.notes
    path = calibrate.gpu_measured_path(tmp_path, datasheet.id, "uuid-1")
    calibrate.write_profile(path, profile)
    reloaded = load_profile(path)  # written with six significant digits
    assert reloaded.id == profile.id and reloaded.derived_from == "h100-sxm"
    assert reloaded.peak_tflops == pytest.approx(profile.peak_tflops, rel=1e-5)
    assert reloaded.memory_bandwidth_gbps == pytest.approx(profile.memory_bandwidth_gbps, rel=1e-5)
    assert path.name == "h100-sxm-measured-uuid-1.toml"


def test_throttled_measurement_is_flagged_warned_and_reported(suite, pytester, monkeypatch):
    """Telemetry travels from the backend into the record, the warning and the reports."""
    import json

    class ThrottlingBackend(backends.CpuBackend):
        telemetry_note = ""

        def __init__(self):
            super().__init__("cpu")
            self.reads = 0

        def read_telemetry(self):
            self.reads += 1
            hot = self.reads > 1  # cool before sampling, hot in every round: more than recoveries can fix
            return {"sm_clock_mhz": 1200 if hot else 1980, "sm_clock_max_mhz": 1980, "temperature_c": 88 if hot else 60,
                    "throttle_reasons": ["hw_thermal_slowdown"] if hot else []}

    monkeypatch.setattr(backends, "make_backend", lambda choice, l2, clock: ThrottlingBackend())
    result = suite("""
        def test_hot(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """, "--sol-json=out.json", "--sol-report=r.html", "--sol-min-time=0.1")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*'default' was throttled (hw_thermal_slowdown) and stayed throttled after 5 pauses to recover*"])
    m = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    assert m["throttled"] is True and m["dropped_samples"] > 0
    assert m["telemetry"]["sm_clock_mhz"] == {"min": 1200, "max": 1980}
    assert m["telemetry"]["throttle_reasons"] == ["hw_thermal_slowdown"]
    page = (pytester.path / "r.html").read_text()
    assert "sm_clock_mhz" in page and "1200 – 1980" in page and "throttled" in page
    assert any("throttled round(s)" in note for note in m["notes"])
    assert m["sm_clock_mhz"] == 1200  # the mean over the rounds kept (all hot), not the idle reading before
    assert m["sol_at_clock"] is None  # the synthetic profile gives no boost clock to scale from


def test_nvml_finds_the_gpu_by_uuid_when_torch_knows_it():
    asked = []
    nvml = types.SimpleNamespace(nvmlDeviceGetHandleByUUID=lambda u: asked.append(("uuid", u)) or "h",
                                 nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or "h")
    telemetry._handle(nvml, 3, "58e0-ab")
    telemetry._handle(nvml, 3, "GPU-58e0-ab")
    telemetry._handle(nvml, 3, None)
    assert asked == [("uuid", "GPU-58e0-ab"), ("uuid", "GPU-58e0-ab"), ("index", 3)]


def test_gpu_calibration_runs_inside_the_devices_scope_and_ids_differ_per_gpu(tmp_path, monkeypatch):
    """cuda:1's events must be recorded on cuda:1, and two calibrated GPUs must not share an id."""
    torch = pytest.importorskip("torch")
    import contextlib

    from pytest_solgate import calibrate
    from pytest_solgate.engine import known_profiles
    from pytest_solgate.profiles import find_profile

    current = [0]

    @contextlib.contextmanager
    def device(index):
        saved, current[0] = current[0], index
        yield
        current[0] = saved

    datasheet = find_profile("h100-sxm")
    seen = []

    def fake_gpu_profile(datasheet, device_, key, name, l2, **_):
        seen.append(current[0])
        bandwidth, peaks = 3000.0, dict(datasheet.peak_tflops)
        return calibrate.HardwareProfile(
            id=f"{datasheet.id}-measured-{calibrate.measured_id_suffix(key)}", name=name, kind="gpu",
            memory_bandwidth_gbps=bandwidth, peak_tflops=peaks, ceilings="measured", derived_from=datasheet.id,
        )

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(calibrate, "gpu_profile", fake_gpu_profile)
    monkeypatch.setattr(calibrate, "device_key", lambda index: f"GPU-{index}a2b3c4d-0000")
    for index in (1, 3):
        calibrate.calibrate_gpu(tmp_path, index, datasheet, "NVIDIA H100 80GB HBM3", None)
    assert seen == [1, 3] and current[0] == 0
    ids = [p.id for p in known_profiles(tmp_path) if p.id.startswith("h100-sxm-measured")]
    assert sorted(ids) == ["h100-sxm-measured-1a2b3c4d", "h100-sxm-measured-3a2b3c4d"]  # no duplicate-id error


def test_a_worker_that_waited_for_the_lock_finds_the_calibration_and_does_not_repeat_it(tmp_path, monkeypatch):
    import contextlib

    from pytest_solgate import calibrate, engine, locking
    from pytest_solgate.profiles import find_profile, profile_to_toml
    from pytest_solgate.settings import Settings

    datasheet = find_profile("h100-sxm")
    path = calibrate.gpu_measured_path(tmp_path, datasheet.id, "GPU-feedbeef")
    other = calibrate.HardwareProfile(id="h100-sxm-measured-feedbeef", name="x", kind="gpu", memory_bandwidth_gbps=3000,
                                      peak_tflops={"fp32": 60}, ceilings="measured")

    @contextlib.contextmanager
    def lock_taken_while_another_worker_calibrated(key):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(profile_to_toml(other))  # the other worker finished while we waited
        yield

    def must_not_run(*args, **kwargs):
        raise AssertionError("calibrated twice")

    monkeypatch.setattr(locking, "device_lock", lock_taken_while_another_worker_calibrated)
    monkeypatch.setattr(calibrate, "calibrate_gpu", must_not_run)
    eng = engine.Engine(Settings(), cache_dir=tmp_path, announce=lambda text: None)
    got = eng._measured_gpu_profile(datasheet, backends.DeviceChoice("cuda", 0), "GPU-feedbeef", "NVIDIA H100 80GB HBM3", {})
    assert got.id == "h100-sxm-measured-feedbeef"


def test_gpu_calibration_times_through_the_sampling_loop_and_the_cuda_backend(monkeypatch):
    """No private timing loop: calibration uses take_timing with the CUDA backend (flush and hold)
    for at least half a second per figure; here the backend is a CPU one standing in for CUDA."""
    torch = pytest.importorskip("torch")
    from pytest_solgate import calibrate
    from pytest_solgate.profiles import find_profile

    made = []

    class StandIn(backends.CpuBackend):
        def __init__(self, torch_, device, l2_bytes, clock_mhz):
            super().__init__("cuda-stand-in")
            self.flushes = 0
            made.append(self)

        def flush(self):
            self.flushes += 1

    assert calibrate.CALIBRATION_SAMPLING.min_time >= 0.5  # sustained, not a burst
    monkeypatch.setattr(backends, "CudaBackend", StandIn)
    monkeypatch.setattr(calibrate, "CALIBRATION_SAMPLING",
                        calibrate.SamplingSettings(min_time=0.02, max_time=0.2, noise=0.5, min_samples=3, warmup_time=0))
    datasheet = find_profile("h100-sxm")
    bandwidth, peaks = calibrate.measure_gpu(torch, torch.device("cpu"), datasheet, None, matmul_size=64, copy_bytes=1 << 20)
    (backend,) = made
    assert backend.flushes > 10 and bandwidth > 0 and peaks["bf16_tensor"] > 0  # every figure went through it


def test_more_xdist_workers_than_gpus_is_refused_with_what_to_do(monkeypatch):
    from pytest_solgate.errors import OptionError

    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2, current_device=lambda: 0)
    monkeypatch.setattr(backends, "torch_or_none", lambda: types.SimpleNamespace(cuda=cuda))
    assert str(backends.choose_device("auto", worker_index=3, worker_count=2)) == "cuda:1"  # one worker per GPU
    with pytest.raises(OptionError, match=r"pytest -n 4 with 2 GPU\(s\) for --sol-device=auto: .* use -n 2"):
        backends.choose_device("auto", worker_index=3, worker_count=4)
    with pytest.raises(OptionError, match=r"pytest -n 2 with 1 GPU\(s\) for --sol-device=cuda:1"):
        backends.choose_device("cuda:1", worker_index=0, worker_count=2)
    assert str(backends.choose_device("cuda:1", worker_index=None)) == "cuda:1"  # no xdist


def test_short_kernels_are_timed_as_cuda_graph_replays_with_the_flush_outside(monkeypatch):
    monkeypatch.setattr(telemetry, "open_reader", lambda index, uuid=None: (None, "no telemetry: fake"))
    FakeEvent.log = []
    backend = backends.CudaBackend(fake_torch(), types.SimpleNamespace(index=0), l2_bytes=50_000_000, clock_mhz=1980)
    timing = take_timing(lambda: fake_launch(2e-6), backend,
                         SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0))
    assert timing.mode == "cuda-graph" and timing.batch == 10  # 20 us of work per replay
    assert timing.seconds == pytest.approx(2e-6) and "CUDA graph of 10 call(s)" in timing.notes[0]
    first = FakeEvent.log.index("replay 10")
    log = FakeEvent.log
    # flush and hold, then the start event, the replay of ten kernels, the stop event
    assert log[first - 3] == "flush 100000000" and log[first - 2].startswith("sleep") and log[first - 1] == "record"
    assert log[first + 1:first + 11] == ["kernel"] * 10 and log[first + 11] == "record"
    off = take_timing(lambda: fake_launch(2e-6), backend,
                      SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0, cuda_graph="off"))
    assert off.mode == "events"


def test_a_kernel_that_cannot_be_captured_falls_back_or_is_refused(monkeypatch):
    from pytest_solgate.errors import MeasureError

    monkeypatch.setattr(telemetry, "open_reader", lambda index, uuid=None: (None, "no telemetry: fake"))
    backend = backends.CudaBackend(fake_torch(), types.SimpleNamespace(index=0), l2_bytes=50_000_000, clock_mhz=1980)

    def syncs_on_the_host():
        if FakeGraph.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        fake_launch(2e-6)

    auto = take_timing(syncs_on_the_host, backend, SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0))
    assert auto.mode == "events" and "CUDA graph capture failed (RuntimeError)" in auto.notes[0]
    with pytest.raises(MeasureError, match="--sol-cuda-graph=on but the kernel cannot be captured"):
        take_timing(syncs_on_the_host, backend,
                    SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0, cuda_graph="on"))
