"""The GPU-only paths, exercised here against fakes of torch.cuda and NVML (no GPU on CI).

They check the order of operations and the arithmetic; the real thing is checked by
benchmarks/gpu_check.py whenever a GPU is at hand (benchmarks/results/gpu.md).
"""

import contextlib
import types

import pytest
from fake_gpu import FakeGpu, FakeNvml, StandIn, cuda_backend, fake_nvml, fake_torch, quick, stamped_backend

from pytest_solgate.measure import backends, devices, telemetry
from pytest_solgate.measure.platform import Platform
from pytest_solgate.measure.sampling import take_timing
from pytest_solgate.support.settings import SamplingSettings


def test_the_fake_nvml_constants_are_pynvmls():
    pynvml = pytest.importorskip("pynvml")  # nvidia-ml-py, a core dependency
    for name in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_TEMPERATURE_GPU"):
        assert getattr(FakeNvml, name) == getattr(pynvml, name), name


def test_the_fake_gpu_queues_work_stamps_events_on_the_device_and_caches_in_l2():
    gpu = FakeGpu()
    torch = fake_torch(gpu)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(1e-3 * 1980e6))  # 1 ms of device time, queued in 4 us of host time
    start.record()
    gpu.streaming_kernel("x", 16_000_000)  # 4 us from DRAM
    stop.record()
    assert gpu.now == pytest.approx(2 * gpu.LAUNCH_SECONDS)  # the host did not wait
    with pytest.raises(RuntimeError, match="not ready"):
        start.elapsed_time(stop)
    torch.cuda.synchronize()
    assert start.time == pytest.approx(1e-3 + gpu.LAUNCH_SECONDS) and start.elapsed_time(stop) == pytest.approx(4e-3)
    start.record()
    gpu.streaming_kernel("x", 16_000_000)  # still in the L2, but launched after the start event: an idle gap
    stop.record()
    torch.cuda.synchronize()
    assert start.elapsed_time(stop) == pytest.approx((gpu.LAUNCH_SECONDS + 16e6 / 12e12) * 1e3)
    side = torch.cuda.Stream()
    assert side is not torch.cuda.current_stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() is side
    assert torch.cuda.current_stream() is gpu.default_stream


def test_cuda_backend_flushes_twice_the_l2_and_holds_the_stream_outside_the_timed_region(monkeypatch):
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    timing = take_timing(lambda: gpu.kernel(1e-3), backend, **quick(gpu))
    assert timing.backend == "cuda" and timing.seconds == pytest.approx(1e-3)
    log = gpu.log
    first = log.index("kernel")
    # flush (2 x 50 MB), then the spin, then the start event, then the kernel, then the stop event
    hold_cycles = int(140e-6 * 1980e6)  # 100 us + 2 x 20 us for a batch of one (nothing enqueued yet), at 1980 MHz
    assert log[first - 3:first + 2] == ["flush 100000000", f"sleep {hold_cycles}", "record", "kernel", "record"]
    # one synchronization per round, not per sample
    assert log.count("sync") < log.count("kernel")
    assert timing.telemetry is None and timing.telemetry_note == "no telemetry: fake"


def test_the_hold_outlasts_a_slow_python_launcher(monkeypatch):
    """A launcher that takes 2 ms to queue its kernel (an autotune wrapper, say) must not leave the
    GPU idle inside the timed region: the hold grows to twice the enqueue time."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)

    def slow_launch():
        gpu.host_work(0.002)  # host time spent before the kernel reaches the stream
        gpu.kernel(1e-4)

    timing = take_timing(slow_launch, backend, **quick(gpu))
    assert timing.seconds == pytest.approx(1e-4)  # no idle gap inside the timed region
    holds = [int(entry.split()[1]) / 1980e6 for entry in gpu.log if entry.startswith("sleep")]
    assert holds[0] == holds[1] == pytest.approx(140e-6, rel=1e-3)  # no call after the (compiling) first seen yet
    assert min(holds[2:]) >= 2 * 0.002 and max(holds) <= backends.MAX_HOLD_SECONDS


def test_nvml_reading_and_throttle_rules():
    reading = telemetry.NvmlReader(fake_nvml(), handle=object()).read()
    assert reading == {"sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980,
                       "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2619,
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


def test_without_nvml_telemetry_is_absent_and_says_why(monkeypatch):
    """Made absent here, so that this also passes on the GPU machine it is meant to check (it
    asserted that this machine has no NVML)."""
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert telemetry.open_reader(0) == (None, "no telemetry: nvidia-ml-py (pynvml) is not installed")

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=no_driver))
    reader, note = telemetry.open_reader(0)
    assert reader is None and note == "no telemetry: NVML did not start (NVML Shared Library Not Found)"


def test_device_choice_on_a_machine_without_cuda():
    torch = devices.torch_or_none()
    if torch is not None and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert str(devices.choose_device("auto", worker_index=3)) == "cpu"
    from pytest_solgate.support.errors import OptionError

    torch = devices.torch_or_none()
    if torch is not None and not torch.cuda.is_available():
        with pytest.raises(OptionError, match="no CUDA device is available"):
            devices.choose_device("cuda:1", None)


def test_gpu_calibration_logic_runs_on_cpu_tensors(tmp_path):
    """The GPU calibration, with a CPU timer and small sizes: every precision is measured, fp8 is
    skipped where unsupported, and the profile is written next to its datasheet one."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.declare.profiles import find_profile, load_profile
    from pytest_solgate.measure import calibrate

    def timer(fn):  # the plugin's own sampling loop, on the CPU backend
        quick = SamplingSettings(min_time=0, max_time=0.05, min_samples=3, warmup_time=0)
        return take_timing(fn, backends.CpuBackend("cpu"), quick)

    datasheet = find_profile("h100-sxm")
    profile, _faults = calibrate.gpu_profile(datasheet, torch.device("cpu"), "uuid-1", "NVIDIA H100 80GB HBM3", None,
                                             timer=timer, matmul_size=128, copy_bytes=8 << 20)
    assert "median of 3 passes" in profile.notes and "spread (max-min)/median: bandwidth" in profile.notes
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

        def read_telemetry(self):  # hot in every round: more than the recoveries can fix
            self.reads += 1
            return {"sm_clock_mhz": 1200, "sm_clock_max_mhz": 1980, "temperature_c": 88,
                    "throttle_reasons": ["hw_thermal_slowdown"]}

    platform = Platform(make_backend=lambda choice, l2, clock: ThrottlingBackend())
    result = suite("""
        def test_hot(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """, "--sol-json=out.json", "--sol-report=r.html", "--sol-min-time=0.1",
        # Registered by name, as on the GPU machine (benchmarks/gpu_check.py), where the project is
        # not installed and the inner pytest would have no entry point to load it from.
        "-p", "no:solgate", "-p", "pytest_solgate.plugin",
        # In process the plugin module is already imported, so pytest cannot rewrite it: not ours to count.
        "-W", "ignore::pytest.PytestAssertRewriteWarning", plugins=[StandIn(platform)])
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*'default' was throttled (hw_thermal_slowdown) and stayed throttled after 5 pauses to recover*"])
    m = json.loads((pytester.path / "out.json").read_text())["measurements"][0]
    assert m["throttled"] is True and m["dropped_samples"] > 0
    assert m["telemetry"]["sm_clock_mhz"] == {"min": 1200, "max": 1200}
    assert m["telemetry"]["throttle_reasons"] == ["hw_thermal_slowdown"]
    page = (pytester.path / "r.html").read_text()
    assert "sm_clock_mhz" in page and "1200" in page and "throttled" in page
    assert f"cpu ({m['timing_mode']})" in page  # the timing mode, e.g. events-capture-off on a GPU
    assert any("throttled sample(s)" in note for note in m["notes"])
    assert m["sm_clock_mhz"] == 1200  # the mean over the rounds kept
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

    from pytest_solgate.declare.profiles import find_profile, known_profiles
    from pytest_solgate.measure import calibrate

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
        ), []

    monkeypatch.setattr(torch.cuda, "device", device)
    for index in (1, 3):
        calibrate.calibrate_gpu(tmp_path, index, datasheet, "NVIDIA H100 80GB HBM3", None,
                                key=f"GPU-{index}a2b3c4d-0000", profile_of=fake_gpu_profile)
    assert seen == [1, 3] and current[0] == 0
    ids = [p.id for p in known_profiles(tmp_path) if p.id.startswith("h100-sxm-measured")]
    assert sorted(ids) == ["h100-sxm-measured-1a2b3c4d", "h100-sxm-measured-3a2b3c4d"]  # no duplicate-id error


def test_a_worker_that_waited_for_the_lock_finds_the_calibration_and_does_not_repeat_it(tmp_path, monkeypatch):
    import contextlib

    from pytest_solgate.declare.profiles import find_profile, profile_to_toml
    from pytest_solgate.measure import calibrate, context

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

    got = context.measured_gpu_profile(tmp_path, datasheet, devices.DeviceChoice("cuda", 0), "GPU-feedbeef",
                                       "NVIDIA H100 80GB HBM3", {}, announce=lambda text: None,
                                       calibrating=must_not_run, lock=lock_taken_while_another_worker_calibrated)
    assert got.id == "h100-sxm-measured-feedbeef"


def test_gpu_calibration_times_through_the_sampling_loop_and_the_cuda_backend():
    """No private timing loop: calibration uses take_timing with the CUDA backend (flush and hold)
    for at least half a second per figure; here the backend is a CPU one standing in for CUDA."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.declare.profiles import find_profile
    from pytest_solgate.measure import calibrate

    class StandIn(backends.CpuBackend):
        def __init__(self):
            super().__init__("cuda-stand-in")
            self.flushes = 0

        def flush(self):
            self.flushes += 1

    assert calibrate.CALIBRATION_SAMPLING.min_time >= 0.5  # sustained, not a burst
    backend = StandIn()
    timer = calibrate.sampling_timer(backend, calibrate.SamplingSettings(min_time=0.02, max_time=0.2, noise=0.5,
                                                                         min_samples=3, warmup_time=0))
    datasheet = find_profile("h100-sxm")
    figures = calibrate.measure_gpu(torch, torch.device("cpu"), datasheet, None, timer=timer, matmul_size=64,
                                    copy_bytes=1 << 20)
    assert backend.flushes > 10 and figures["bandwidth:copy"][0] > 0 and figures["bf16_tensor:mm64"][0] > 0  # all through it
    assert figures["bf16_tensor:mm64"][1].backend == "cuda-stand-in"  # the timing comes back with the figure


def test_more_xdist_workers_than_gpus_is_refused_with_what_to_do(monkeypatch):
    from pytest_solgate.support.errors import OptionError

    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2, current_device=lambda: 0)
    torch = types.SimpleNamespace(cuda=cuda)
    assert str(devices.choose_device("auto", worker_index=3, worker_count=2, torch=torch)) == "cuda:1"  # one worker per GPU
    with pytest.raises(OptionError, match=r"pytest -n 4 with 2 GPU\(s\) for --sol-device=auto: .* use -n 2"):
        devices.choose_device("auto", worker_index=3, worker_count=4, torch=torch)
    with pytest.raises(OptionError, match=r"pytest -n 2 with 1 GPU\(s\) for --sol-device=cuda:1"):
        devices.choose_device("cuda:1", worker_index=0, worker_count=2, torch=torch)
    assert str(devices.choose_device("cuda:1", worker_index=None, torch=torch)) == "cuda:1"  # no xdist


def cold_rotation(gpu, sets=8, nbytes=16_000_000, then=None):
    """A 4 us kernel rotating over 8 buffer sets of 16 MB (128 MB > the 50 MB L2): batched five
    calls to a sample, each cold, so a sample of several calls that --sol-cuda-graph=auto captures.
    ``then`` runs after each kernel (a host sync, say)."""
    from pytest_solgate.measure.callables import rotating

    def call(i):
        gpu.streaming_kernel(f"set {i}", nbytes)
        if then is not None:
            then()

    return {"fn": rotating([lambda i=i: call(i) for i in range(sets)]), "rotation_sets": sets, "bytes_per_call": nbytes}


def test_a_batch_of_short_calls_is_timed_as_cuda_graph_replays_with_the_flush_outside(monkeypatch):
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    rotation = cold_rotation(gpu)
    timing = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu))
    assert timing.mode == "cuda-graph" and timing.batch == 5
    assert timing.seconds == pytest.approx(4e-6, rel=1e-3) and "CUDA graph of 5 call(s)" in timing.notes[0]
    log = gpu.log
    first = log.index("replay 5")
    # flush and hold, then the start event, the replay of five kernels, the stop event
    assert log[first - 3] == "flush 100000000" and log[first - 2].startswith("sleep") and log[first - 1] == "record"
    assert log[first + 1:first + 7] == ["kernel"] * 5 + ["record"]
    rotation = cold_rotation(gpu)
    off = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu, cuda_graph="off"))
    assert off.mode == "events"


def test_a_sample_of_one_call_is_never_captured(monkeypatch):
    """The hold already keeps a lone call's launch out of its timed region; a capture would only
    risk the allocator's state (see below) for nothing."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    for setting in ("auto", "on"):
        timing = take_timing(lambda: gpu.kernel(2e-6), backend, **quick(gpu, cuda_graph=setting))
        assert timing.mode == "events" and timing.batch == 1 and timing.seconds == pytest.approx(2e-6)
    assert not any(entry.startswith("replay") for entry in gpu.log)
    assert "one call per sample is not captured" in timing.notes[0]  # said when on was asked for


def test_a_kernel_that_cannot_be_captured_falls_back_or_is_refused(monkeypatch):
    from pytest_solgate.support.errors import MeasureError

    gpu = FakeGpu()
    backend = cuda_backend(gpu)

    rotation = cold_rotation(gpu, then=gpu.host_sync)  # .item() on each result
    with pytest.raises(MeasureError, match="--sol-cuda-graph=on but the kernel cannot be captured"):
        take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu, cuda_graph="on"))
    backend = cuda_backend(gpu := FakeGpu())
    rotation = cold_rotation(gpu, then=gpu.host_sync)
    auto = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu))
    assert auto.mode == "events-capture-off" and "CUDA graph capture failed (RuntimeError)" in auto.notes[0]


def test_a_short_kernel_is_timed_on_a_cold_l2_one_call_per_sample(monkeypatch):
    """A 4 us kernel over 16 MB (under the 50 MB L2): batched after one flush, calls 2..N read it
    from the L2 at three times DRAM speed and the median (1.9 us) beats the DRAM roof. Timed one
    call per sample, each after a flush, it reads 4 us, in a graph of one call or with events."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    kernel = lambda: gpu.streaming_kernel("x", 16_000_000)  # noqa: E731
    auto = take_timing(kernel, backend, **quick(gpu))
    assert auto.mode == "events" and auto.batch == 1 and auto.seconds == pytest.approx(4e-6, rel=1e-3)
    assert not any(note.startswith("5 calls per sample") for note in auto.notes)
    events = take_timing(kernel, backend, **quick(gpu, cuda_graph="off"))
    assert events.mode == "events" and events.batch == 1 and events.seconds == pytest.approx(4e-6, rel=1e-3)


@pytest.mark.parametrize("sets, nbytes, batched", [(8, 16_000_000, True), (3, 16_000_000, False), (8, 1_000_000, False)])
def test_rotation_batches_only_when_its_sets_outnumber_the_calls_and_exceed_the_l2(monkeypatch, sets, nbytes, batched):
    from pytest_solgate.measure.callables import rotating

    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    calls = [lambda i=i: gpu.streaming_kernel(f"set {i}", nbytes) for i in range(sets)]
    timing = take_timing(rotating(calls), backend, rotation_sets=sets, bytes_per_call=nbytes, **quick(gpu))
    assert timing.seconds == pytest.approx(nbytes / gpu.dram_rate, rel=1e-3)  # cold either way
    if batched:  # 20 us / 4 us = 5 calls per sample, on 8 sets of 16 MB (128 MB > 50 MB of L2)
        assert timing.batch == 5 and any("rotation of 8 buffer sets" in note for note in timing.notes)
    else:
        assert timing.batch == 1
        assert any(note.startswith("one call per sample") and "buffer sets" in note for note in timing.notes)


def test_the_hold_is_sized_from_steady_state_calls_not_the_compiling_one(monkeypatch):
    """The first call compiles (2 s of host time). Sized from it, every sample's hold would be the
    10 ms maximum, and the device would spend about 90 % of each round spinning, so the telemetry
    read during a round would describe the spin, not the kernel."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    calls = [0]

    def kernel():
        calls[0] += 1
        if calls[0] == 1:
            gpu.host_work(2.0)  # Triton compiles on the first call
        gpu.kernel(1e-3)

    timing = take_timing(kernel, backend, **quick(gpu, min_time=0.05, max_time=0.2))
    assert timing.seconds == pytest.approx(1e-3)
    holds = [int(entry.split()[1]) / 1980e6 for entry in gpu.log if entry.startswith("sleep")]
    sampling_holds = holds[timing.warmup_calls:]
    assert max(sampling_holds) <= 150e-6  # 100 us + 2 x 20 us, not 10 ms
    kernels = [i for i, op in enumerate(gpu.ops) if op[2] == "kernel"]
    sampling = gpu.ops[kernels[timing.warmup_calls - 1] + 1:]
    spin, work = (sum(end - start for start, end, what in sampling if what.startswith(kind)) for kind in ("sleep", "kernel"))
    assert spin < 0.2 * work  # the device runs the kernel, not the spin, while rounds are read


def test_telemetry_leaves_the_idle_reading_out(monkeypatch):
    """Read before sampling, the GPU is idle (345 MHz here): that reading describes no kernel, and
    in the telemetry range it read as a clock drop to 345 MHz."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu, nvml=FakeNvml(gpu))
    timing = take_timing(lambda: gpu.kernel(1e-3), backend, throttle_check=telemetry.is_throttled, **quick(gpu))
    assert timing.telemetry["sm_clock_mhz"] == {"min": 1980, "max": 1980} and not timing.throttled
    assert timing.telemetry["readings"] == gpu.log.count("sync") - timing.warmup_calls  # one per round


def test_nvml_throttling_is_judged_against_the_peak_clock_as_nvbench_judges_it():
    """nvbench (nvbench/detail/measure_cold.cu, gpu_frequency.cxx) judges the SM clock over each
    trial against the device's default SM clock rate, cudaDeviceProp::clockRate: on H100/H200 that
    is the 1980 MHz peak, not NVML's (deprecated) default applications clock, which this fake sets
    to 1755 MHz. 1400 MHz is under 75 % of 1980 (1485): throttled, though it is above 75 % of 1755."""
    nvml = FakeNvml(clock_mhz=1400, max_mhz=1980, default_mhz=1755)
    slow = telemetry.NvmlReader(nvml, handle=object()).read()
    assert "sm_clock_default_mhz" not in slow and telemetry.is_throttled(slow)
    fine = telemetry.NvmlReader(FakeNvml(clock_mhz=1500, max_mhz=1980, default_mhz=1755), handle=object()).read()
    assert not telemetry.is_throttled(fine)


def test_the_nvml_reader_calls_nothing_nvidia_ml_py_marks_deprecated():
    """nvidia-ml-py marks deprecated calls with a '# DEPRECATED' comment above their def ("will be
    removed in CUDA 14.0"): nvmlDeviceGetDefaultApplicationsClock, ...ClocksThrottleReasons and
    nvmlDeviceGetTemperature among them."""
    import inspect
    import re

    pynvml = pytest.importorskip("pynvml")
    source = inspect.getsource(pynvml)
    deprecated = set(re.findall(r"#\s*DEPRECATED[^\n]*\n\s*def (nvml\w+)", source, flags=re.IGNORECASE))
    assert "nvmlDeviceGetDefaultApplicationsClock" in deprecated and "nvmlDeviceGetTemperature" in deprecated
    nvml = FakeNvml()
    telemetry.NvmlReader(nvml, handle=object()).read()
    assert nvml.called and not nvml.called & deprecated, nvml.called & deprecated
    assert all(hasattr(pynvml, name) for name in nvml.called)  # and each call exists in nvidia-ml-py


def test_a_failed_capture_leaves_the_process_on_the_stream_it_was_on(monkeypatch):
    """torch.cuda.graph's __exit__ raises in capture_end() before its stream context exits: without
    an outer stream context of our own, later measurements and the user's code ran on the capture
    stream."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)

    rotation = cold_rotation(gpu, then=gpu.host_sync)  # .item() on the result
    timing = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu))
    assert "CUDA graph capture failed (RuntimeError)" in timing.notes[0]
    assert gpu.current is gpu.default_stream
    later = take_timing(lambda: gpu.kernel(1e-3), backend, **quick(gpu))
    assert later.seconds == pytest.approx(1e-3) and gpu.current is gpu.default_stream


def test_sol_device_cuda_under_xdist_spreads_workers_like_auto(monkeypatch):
    """--sol-device=cuda under xdist put every worker on cuda:0 without a word."""
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2, current_device=lambda: 0)
    torch = types.SimpleNamespace(cuda=cuda)
    assert [str(devices.choose_device("cuda", worker_index=w, worker_count=2, torch=torch)) for w in (0, 1)] == ["cuda:0", "cuda:1"]
    assert str(devices.choose_device("cuda", worker_index=None, torch=torch)) == "cuda:0"  # no xdist: the current device


def test_sol_at_clock_scales_each_roof_from_the_clock_it_was_quoted_or_measured_at():
    from pytest_solgate.declare.profiles import DeviceFacts, HardwareProfile, find_profile
    from pytest_solgate.declare.work import make_work
    from pytest_solgate.score import score

    h200 = find_profile("h200")
    # Hopper's tensor peaks hold at 1830 MHz, the vector ones at the 1980 MHz boost.
    assert h200.peak_tflops["bf16_tensor"] == pytest.approx(132 * 4096 * 1830e6 / 1e12, rel=1e-3)
    assert h200.peak_tflops["fp32"] == pytest.approx(132 * 256 * 1980e6 / 1e12, rel=1e-2)
    gemm = make_work({"bf16_tensor": 989.4e9}, 1e6, "fp32")  # 1 ms at the datasheet peak
    at_1830 = score(gemm, 2e-3, h200, 1830)
    assert at_1830.sol_at_clock == pytest.approx(at_1830.sol)  # the clock the peak is quoted at: no change
    vector = make_work({"fp32": 67e9}, 1e6, "fp32")
    assert score(vector, 2e-3, h200, 1830).sol_at_clock == pytest.approx(0.5 * 1980 / 1830, rel=1e-3)
    # Calibration measured bf16 at 1650 MHz (the power cap): a run at 1650 MHz is not scaled again.
    measured = HardwareProfile(id="h200-measured-x", name="m", kind="gpu", memory_bandwidth_gbps=4300,
                               peak_tflops={"bf16_tensor": 790.0}, ceilings="measured",
                               device=DeviceFacts(boost_clock_mhz=1980), peak_clock_mhz={"bf16_tensor": 1650})
    run = score(make_work({"bf16_tensor": 790e9}, 1e6, "fp32"), 1.25e-3, measured, 1650)
    assert run.sol == pytest.approx(0.8) and run.sol_at_clock == pytest.approx(0.8)


def test_peak_clocks_are_checked_and_written_back(tmp_path):
    from pytest_solgate.declare.profiles import find_profile, load_profile, profile_to_toml
    from pytest_solgate.support.errors import ProfileError

    h200 = find_profile("h200")
    path = tmp_path / "p.toml"
    path.write_text(profile_to_toml(h200))
    assert load_profile(path).peak_clock_mhz == h200.peak_clock_mhz and h200.roof_clock_mhz("fp32") == 1980
    path.write_text(profile_to_toml(h200).replace("tf32_tensor = 1830", "fp4_tensor = 1830"))
    with pytest.raises(ProfileError, match="'peak_clock_mhz.fp4_tensor' names no precision of 'peak_tflops'"):
        load_profile(path)


def calibration_timing(seconds, clock_mhz=1700.0, throttled=False, noisy=False):
    from pytest_solgate.measure.sampling import Timing

    return Timing(seconds=seconds, samples=(seconds,), noise=0.0, batch=1, warmup_calls=1, noisy=noisy, backend="cuda",
                  started_at=0.0, finished_at=0.0, wall_seconds=0.0, throttled=throttled, sm_clock_mhz=clock_mhz,
                  telemetry={"throttle_reasons": ["hw_thermal_slowdown"]} if throttled else None)


@pytest.mark.parametrize("trouble, fault", [
    ("spread", "bandwidth:copy spread 23% > 10%"),  # rates 1, 1/1.3, 1
    ("throttled", "bf16_tensor:mm16 throttled (hw_thermal_slowdown)"),
    ("noisy", "fp32:mm8 noisy"),
    (None, None),
])
def test_gpu_calibration_repeats_and_refuses_to_cache_noisy_throttled_or_spread_figures(tmp_path, monkeypatch, trouble, fault):
    """One repetition, no spread or throttle check, Timing.noisy ignored: a hot or shared GPU baked
    low ceilings into the cache for good. Now three passes, and a fault keeps them out of it."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.declare.profiles import find_profile
    from pytest_solgate.measure import calibrate

    datasheet = find_profile("h100-sxm")
    order = []  # figures in the order one pass times them
    calibrate.measure_gpu(torch, torch.device("cpu"), datasheet, None, timer=lambda fn: order.append(fn) or
                          calibration_timing(1e-3), matmul_size=16, copy_bytes=1 << 16)
    per_pass = len(order)
    # copy, read, add; then each precision's larger and smaller cube: fp32, tf32_tensor, bf16_tensor, ...
    bandwidth_call, fp32_call, bf16_call = 0, 3, 7
    calls = [0]

    def timer(fn):
        index, calls[0] = calls[0], calls[0] + 1
        which, repetition = index % per_pass, index // per_pass
        slow = trouble == "spread" and which == bandwidth_call and repetition == 1
        return calibration_timing(1.3e-3 if slow else 1e-3, clock_mhz=1650.0 if which == bf16_call else 1980.0,
                                  throttled=trouble == "throttled" and which == bf16_call and repetition == 2,
                                  noisy=trouble == "noisy" and which == fp32_call and repetition == 0)

    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())

    def profile_of(datasheet_, cuda_device, key, name, l2):  # CPU tensors stand in for cuda:0
        return calibrate.gpu_profile(datasheet_, torch.device("cpu"), key, name, l2, timer=timer, matmul_size=16,
                                     copy_bytes=1 << 16)

    said = []
    profile, path = calibrate.calibrate_gpu(tmp_path, 0, datasheet, "NVIDIA H100 80GB HBM3", None, announce=said.append,
                                            key="GPU-0a2b3c4d", profile_of=profile_of)
    assert calls[0] == 3 * per_pass  # three passes over every figure
    assert profile.peak_clock_mhz["bf16_tensor"] == 1650.0  # each peak keeps the clock it was measured at
    assert profile.peak_clock_mhz["fp8_tensor" if "fp8_tensor" in profile.peak_clock_mhz else "fp32"] > 0
    cached = calibrate.gpu_measured_path(tmp_path, datasheet.id, "GPU-0a2b3c4d")
    if fault is None:
        assert path == cached and cached.is_file() and not said
    else:
        assert path is None and not cached.exists()
        (line,) = said
        assert fault in line and "not cached" in line and "solgate calibrate" in line


def test_the_flush_can_read_instead_of_write_for_the_dirty_line_check(monkeypatch):
    gpu = FakeGpu()
    reader = backends.CudaBackend(fake_torch(gpu), types.SimpleNamespace(index=0), l2_bytes=gpu.l2_bytes, clock_mhz=1980,
                                  host_clock=gpu.clock, flush_by_reading=True,
                                  open_reader=lambda index, uuid=None: (None, "no telemetry: fake"))
    timing = take_timing(lambda: gpu.streaming_kernel("x", 16_000_000), reader, **quick(gpu))
    assert timing.seconds == pytest.approx(4e-6, rel=1e-3)  # still cold
    assert "read flush 100000000" in gpu.log and "flush 100000000" not in gpu.log


@pytest.mark.parametrize("profile_id", ["h100-sxm", "h100-pcie", "h100-nvl", "h200"])
def test_hopper_tensor_peaks_are_at_the_clock_their_profile_names(profile_id):
    """A Hopper SM does 4096 dense bf16 FLOP per clock: the datasheet's tensor peak fixes its clock."""
    from pytest_solgate.declare.profiles import find_profile

    profile = find_profile(profile_id)
    clock = profile.roof_clock_mhz("bf16_tensor")
    assert profile.peak_tflops["bf16_tensor"] == pytest.approx(profile.device.sm_count * 4096 * clock * 1e6 / 1e12, rel=2e-3)
    assert profile.roof_clock_mhz("fp32") == profile.device.boost_clock_mhz


# --- issue 28: capture failures, the SM clock over each sample, the hold --------------------------


def test_after_a_failed_capture_capture_is_off_for_the_session_and_said_once(monkeypatch):
    """On torch 2.11 (before pytorch#180395) a failed capture stays in the caching allocator's
    captures_underway, and every later capture fails an internal assert (the fake GPU models it).
    That was swallowed as "capture failed" for every later kernel: each one silently switched to
    events. Capture is now off for the rest of the session after the first failure, which is said
    once and recorded as the timing mode."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    rotation = cold_rotation(gpu, then=gpu.host_sync)  # a kernel that calls .item()
    failed = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu))
    assert failed.mode == "events-capture-off"
    assert sum("CUDA graph capture failed (RuntimeError)" in note for note in failed.notes) == 1
    assert gpu.captures_underway  # the allocator's state after the failure, as on torch 2.11
    with pytest.raises(RuntimeError, match="captures_underway"):
        fake_torch(gpu).cuda.empty_cache()  # the user's own empty_cache() fails too: torch's bug, not ours
    rotation = cold_rotation(gpu)  # a kernel that could be captured
    later = take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu))
    assert later.mode == "events-capture-off" and later.seconds == pytest.approx(4e-6, rel=1e-3)
    assert not any("capture" in note for note in later.notes)  # said once, with the failure
    from pytest_solgate.support.errors import MeasureError

    rotation = cold_rotation(gpu)
    with pytest.raises(MeasureError, match="capture is off for this session: an earlier capture failed"):
        take_timing(rotation.pop("fn"), backend, **rotation, **quick(gpu, cuda_graph="on"))


def test_the_schema_knows_the_capture_off_timing_mode():
    from pytest_solgate.measure.phases import EVENTS_CAPTURE_OFF
    from pytest_solgate.record import schema

    assert EVENTS_CAPTURE_OFF in schema.MEASUREMENT["properties"]["timing_mode"]["enum"]



def test_throttled_samples_are_judged_by_the_sm_clock_over_each_sample_and_discarded(monkeypatch):
    """nvbench's rule: the SM clock over the timed region (clock64 ticks over globaltimer
    nanoseconds around each trial) under 75 % of the peak clock throttles that trial, which is
    discarded and followed by a recovery pause. Here the SMs run at 1200 MHz (a 1 ms kernel takes
    1.65 ms) for 13 sampling calls, then at 1980: NVML, read once per round after queueing it,
    read 1980 MHz in the round where throttling ended, and the five throttled samples of that round
    were kept. Judged per sample, every throttled sample is discarded, and the discarded rounds'
    NVML readings stay out of the telemetry range."""
    gpu = FakeGpu()
    backend = stamped_backend(gpu, nvml=FakeNvml(gpu))
    assert backend.peak_clock_mhz == 1980  # cudaDevAttrClockRate, from torch's device properties
    calls = [0]
    sampling_from = 4  # the warm-up's calls (the first call plus three, warmup_time 0)

    def kernel():
        calls[0] += 1
        throttled = sampling_from < calls[0] <= sampling_from + 13
        gpu.sm_mhz = 1200 if throttled else 1980
        gpu.kernel(1e-3 * 1980 / gpu.sm_mhz)

    timing = take_timing(kernel, backend, throttle_check=telemetry.is_throttled, **quick(gpu, min_samples=10, max_time=0.5))
    assert timing.warmup_calls == sampling_from
    assert timing.dropped_samples == 13 and not timing.throttled
    assert max(timing.samples) == pytest.approx(1e-3, rel=1e-6) and timing.sm_clock_mhz == pytest.approx(1980, rel=1e-3)
    assert timing.telemetry["sm_clock_mhz"]["min"] == 1980  # the discarded rounds' readings are left out
    assert any(note.startswith("13 throttled sample(s) in ") for note in timing.notes)


def test_throttling_that_outlasts_the_recoveries_is_kept_and_flagged_by_the_sample_clock(monkeypatch):
    gpu = FakeGpu()
    backend = stamped_backend(gpu)  # no NVML at all: the stamps alone judge
    gpu.sm_mhz = 1200
    timing = take_timing(lambda: gpu.kernel(1e-3), backend, throttle_check=telemetry.is_throttled, **quick(gpu))
    assert timing.throttled and timing.dropped_samples > 0 and timing.sm_clock_mhz == pytest.approx(1200, rel=1e-3)


def test_the_sm_clock_arithmetic_and_its_reference():
    from pytest_solgate.measure import sm_clock

    assert sm_clock.clock_mhz((1_000, 0), (1_001_000, 1_980_000)) == pytest.approx(1980)  # 1.98M cycles in 1 ms
    assert sm_clock.clock_mhz((0, 0), (1_000_000, 1_980_000)) is None  # a stamp no block on SM 0 wrote
    # 10 us apart: a 1 us global timer cannot give the clock of so short a sample; NVML judges it
    assert sm_clock.clock_mhz((1_000, 0), (11_000, 19_800)) is None
    assert sm_clock.is_below_threshold(1400, 1980) and not sm_clock.is_below_threshold(1500, 1980)
    assert not sm_clock.is_below_threshold(None, 1980)
    props = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_properties=lambda d: types.SimpleNamespace()))
    assert sm_clock.peak_clock_mhz(props, 0, nvml_max_mhz=1980, fallback_mhz=1755) == 1980  # torch without clock_rate
    assert sm_clock.peak_clock_mhz(props, 0, nvml_max_mhz=None, fallback_mhz=1755) == 1755


def test_one_slow_enqueue_does_not_stretch_every_later_hold(monkeypatch):
    """stop() raised the hold's enqueue estimate to the largest seen: one 6 ms pause (a GC) while
    sampling pushed every later hold of the measurement to 10 ms, and the device spent each round
    spinning. The hold is sized from the warm-up's steady-state calls only."""
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    calls = [0]

    def kernel():
        calls[0] += 1
        if calls[0] == 8:  # in the first round of sampling
            gpu.host_work(0.006)
        gpu.kernel(1e-4)

    timing = take_timing(kernel, backend, **quick(gpu, min_samples=30, max_time=0.2))
    holds = [int(entry.split()[1]) / 1980e6 for entry in gpu.log if entry.startswith("sleep")]
    assert len(holds) > 12 and max(holds[10:]) <= 150e-6, max(holds[10:])
    assert timing.seconds == pytest.approx(1e-4)
