"""Issue 35, items 1 and 4: GPU samples timed from the device's own kernel timestamps (CUPTI
through torch.profiler), and work on a side stream caught from them.

The parsing runs on a recorded trace (tests/data/kernel_trace.json, kineto's fields) and on the
fake GPU's profiler (tests/fake_gpu.py), whose events stamp kernels when the device runs them and
whose CUDA events cost device time around each sample, as an H200's read about 3 us (issue 35).
"""

import json
from pathlib import Path

import pytest
from fake_gpu import FakeGpu, FakeProfile, FakeStream, cuda_backend, quick

from pytest_solgate.measure import kernel_trace
from pytest_solgate.measure.sampling import KERNEL_TIMESTAMPS, kernel_timed, take_timing

RECORDED = Path(__file__).parent / "data" / "kernel_trace.json"


def recorded():
    return kernel_trace.from_dicts(json.loads(RECORDED.read_text())["events"])


def test_the_recorded_trace_gives_each_sample_its_kernels_summed_with_span_and_gaps():
    samples = kernel_trace.sample_kernels(recorded())
    assert sorted(samples) == [0, 1, 2, 3]
    one = samples[0]  # one add: its own 1.66 us, not the hold, the flush or the done-marker's fill
    assert (one.kernels, one.busy_seconds, one.span_seconds, one.gap_seconds) == (1, 1.66e-6, 1.66e-6, 0.0)
    two = samples[1]  # an add, 2.3 us of host time, a GEMM: the kernels summed, the gap the host's
    assert two.kernels == 2 and two.busy_seconds == pytest.approx(1.66e-6 + 6.66e-6)
    assert two.span_seconds == pytest.approx(1.66e-6 + 2.3e-6 + 6.66e-6) and two.gap_seconds == pytest.approx(2.3e-6)
    replay = samples[2]  # a graph replay: four kernels under the one cudaGraphLaunch's correlation id
    assert replay.kernels == 4 and replay.busy_seconds == pytest.approx(4 * 1.66e-6)
    assert not any(s.hidden for s in (one, two, replay))


def test_the_recorded_side_stream_kernel_is_hidden_work_however_small():
    """Sample 3's add on stream 13 ran during the hold, before the timed region: 1.66 us that the
    events on stream 7 never saw; the sample is flagged, naming the stream."""
    hidden = kernel_trace.sample_kernels(recorded())[3].hidden
    assert "stream(s) 13" in hidden and "1.66 us" in hidden


def test_the_real_profilers_events_read_as_trace_events():
    """torch.profiler on this CPU: a record_function range comes back with its name, its thread
    and nanosecond times; the adapter reads kineto's events as the CUDA backend's session does."""
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with kernel_trace.marked(torch, kernel_trace.SAMPLE, 41):
            torch.add(torch.ones(4), 1)
    events = kernel_trace.from_kineto(prof.profiler.kineto_results.events())
    marked = [e for e in events if e.name == "solgate-sample-41"]
    assert len(marked) == 1 and not marked[0].on_device and marked[0].end_ns > marked[0].start_ns > 0
    inside = [e for e in events if e.name == "aten::add"]
    assert inside and marked[0].start_ns <= inside[0].start_ns < marked[0].end_ns
    assert inside[0].resource == marked[0].resource  # the same host thread


def short_kernel_gpu(monkeypatch, seconds=2e-6, event_seconds=3e-6):
    gpu = FakeGpu()
    gpu.event_seconds = event_seconds
    return gpu, cuda_backend(gpu, kernel_timestamps=True)


def test_a_2_us_kernel_reads_its_own_time_not_the_events_overhead(monkeypatch):
    gpu, backend = short_kernel_gpu(monkeypatch)
    sessions = FakeProfile.sessions
    timing = take_timing(lambda: gpu.kernel(2e-6), backend, **quick(gpu))
    assert timing.mode == KERNEL_TIMESTAMPS and timing.seconds == pytest.approx(2e-6, rel=0.03)
    assert timing.events_seconds == pytest.approx(5e-6, rel=0.03)  # the events' reading, kept as the cross-check
    assert FakeProfile.sessions == sessions + 1  # one profiler session for all the samples, not one per sample
    assert len(timing.samples) > 3


def test_without_the_profiler_the_events_time_it_and_say_so(monkeypatch):
    gpu = FakeGpu()
    gpu.event_seconds = 3e-6
    backend = cuda_backend(gpu)
    timing = take_timing(lambda: gpu.kernel(2e-6), backend, **quick(gpu))
    assert not backend.capabilities.kernel_timestamps
    assert timing.mode == "events" and timing.seconds == pytest.approx(5e-6, rel=0.03) and timing.events_seconds is None


def test_a_call_of_several_kernels_sums_them_and_leaves_the_host_gap_out(monkeypatch):
    gpu, backend = short_kernel_gpu(monkeypatch)

    def two_kernels():
        gpu.kernel(3e-6)
        gpu.host_sync()  # .item() between the launches: the device idles while Python goes on
        gpu.host_work(5e-6)
        gpu.kernel(4e-6)

    timing = take_timing(two_kernels, backend, **quick(gpu))
    assert timing.seconds == pytest.approx(7e-6, rel=0.03)
    # the gap: 5 us of Python and the 4 us launch, the host's time, recorded beside the kernels' sum
    assert timing.gap_seconds == pytest.approx(9e-6, rel=0.03)
    assert timing.span_seconds == pytest.approx(timing.seconds + timing.gap_seconds)


def test_a_batch_replayed_as_a_cuda_graph_is_summed_per_call(monkeypatch):
    gpu, backend = short_kernel_gpu(monkeypatch, seconds=2e-6)
    calls = [lambda i=i: gpu.streaming_kernel(f"set {i}", 16_000_000) for i in range(8)]
    from pytest_solgate.measure.callables import rotating

    timing = take_timing(rotating(calls), backend, rotation_sets=8, bytes_per_call=16_000_000, **quick(gpu))
    assert "CUDA graph" in " ".join(timing.notes) and timing.batch > 1
    assert timing.mode == KERNEL_TIMESTAMPS and timing.seconds == pytest.approx(4e-6, rel=0.03)


@pytest.mark.parametrize("side_seconds", [20e-6, 0.5e-6])
def test_work_on_a_side_stream_is_flagged_even_when_small(monkeypatch, side_seconds):
    """The side stream is not held, so its kernel runs before the timed region; however small a
    part of the call it is (0.5 us beside a 10 us kernel: the SOL stays under 1), it is caught."""
    gpu, backend = short_kernel_gpu(monkeypatch)
    side = FakeStream(gpu, "side")

    def with_side_work():
        gpu.kernel(10e-6)
        gpu.launch("side kernel", lambda: side_seconds, stream=side)

    timing = take_timing(with_side_work, backend, **quick(gpu))
    assert f"stream(s) {side.number}" in timing.hidden_work


def test_a_side_stream_joined_to_the_timed_stream_is_not_hidden(monkeypatch):
    """side.wait_stream(current) before and current.wait_stream(side) after: the work lies inside
    the timed region, and both kernels count."""
    gpu, backend = short_kernel_gpu(monkeypatch)
    side = FakeStream(gpu, "side")

    def joined():
        side.wait_stream(gpu.current)
        gpu.launch("side kernel", lambda: 3e-6, stream=side)
        gpu.kernel(2e-6)
        gpu.current.wait_stream(side)

    timing = take_timing(joined, backend, **quick(gpu))
    assert timing.hidden_work == "" and timing.mode == KERNEL_TIMESTAMPS


def test_kernel_times_that_exceed_the_events_fall_back_to_the_events_with_why():
    traced = tuple(kernel_trace.SampleKernels(1, 9e-6, 9e-6, 0.0, (7,)) for _ in range(3))
    timed = kernel_timed((5e-6, 5e-6, 5e-6), traced, 1, "events")
    assert timed.mode == "events" and timed.samples == (5e-6,) * 3 and "more than the 5 us the events saw" in timed.note
    missing = kernel_timed((5e-6,) * 3, (traced[0], None, traced[1]), 1, "events")
    assert missing.mode == "events" and "1 of 3 samples had no kernel timestamps" in missing.note
    fine = kernel_timed((5e-6,) * 3, tuple(kernel_trace.SampleKernels(1, 2e-6, 2e-6, 0.0, (7,)) for _ in range(3)), 1, "events")
    assert fine.mode == KERNEL_TIMESTAMPS and fine.samples == (2e-6,) * 3 and fine.events_seconds == 5e-6
