"""The sampling loop against a fake backend with a fake clock: deterministic and instant."""

import pytest

from pytest_solgate.measure.capabilities import Backend
from pytest_solgate.measure.sampling import SamplingSettings, take_timing
from pytest_solgate.support.errors import MeasureError


class FakeBackend(Backend):
    """Each call of the kernel advances a fake clock by ``durations[i]``."""

    name = "fake"
    min_sample_seconds = 100e-6
    telemetry_note = "fake"

    def __init__(self, durations, readings=None):
        self.now = 0.0
        self.durations = durations
        self.calls = 0
        self.flushes = 0
        self.syncs = 0
        self.readings = readings or []

    def clock(self):
        return self.now

    def kernel(self):
        self.now += self.durations(self.calls)
        self.calls += 1

    def flush(self):
        self.flushes += 1

    def hold(self, batch):
        pass

    def start(self):
        return self.now

    def stop(self, token):
        return token, self.now

    def synchronize(self):
        self.syncs += 1

    def elapsed(self, handle):
        return handle[1] - handle[0]

    def read_telemetry(self):
        return self.readings.pop(0) if self.readings else None


def run(backend, **settings):
    return take_timing(backend.kernel, backend, SamplingSettings(**settings), throttle_check=lambda r: r.get("bad", False), clock=backend.clock)


def test_steady_kernel_stops_on_noise_target_after_min_time():
    b = FakeBackend(lambda i: 1e-3)
    t = run(b, min_time=0.05, max_time=1.0, noise=0.01, min_samples=10, warmup_time=0.01)
    assert t.seconds == pytest.approx(1e-3)
    assert not t.noisy and t.batch == 1 and len(t.samples) >= 10
    assert t.warmup_calls >= 10  # 10 ms of warm-up at 1 ms per call
    assert b.flushes == t.warmup_calls + len(t.samples)
    assert b.syncs < len(t.samples)  # one synchronization per round of samples


def test_first_call_compiles_and_is_left_out():
    b = FakeBackend(lambda i: 0.5 if i == 0 else 1e-3)
    t = run(b, min_time=0.02, max_time=1.0, noise=0.01, warmup_time=0.01)
    assert t.seconds == pytest.approx(1e-3) and max(t.samples) == pytest.approx(1e-3)


def test_short_calls_are_batched():
    b = FakeBackend(lambda i: 1e-6)
    t = run(b, min_time=0.01, max_time=1.0, noise=0.01, warmup_time=0.001)
    assert t.batch == 100 and t.seconds == pytest.approx(1e-6)
    assert any("100 calls per sample" in n for n in t.notes)


def test_noisy_kernel_runs_out_of_budget_and_says_so():
    b = FakeBackend(lambda i: 1e-3 * (1 + (i * 7919 % 13) / 2))
    t = run(b, min_time=0.01, max_time=0.2, noise=0.001, warmup_time=0.001)
    assert t.noisy
    assert 0.2 <= b.now <= 0.3


def test_kernel_longer_than_the_budget_gets_one_sample_and_is_noisy():
    # two warm-up calls: after the first alone a slow kernel cannot be told from a compiling one
    b = FakeBackend(lambda i: 3.0)
    t = run(b, min_time=0.1, max_time=1.0, noise=0.01, warmup_time=0.05)
    assert len(t.samples) == 1 and t.warmup_calls == 2 and t.noisy


def run_pausing(backend, **settings):
    backend.pauses = 0

    def pause(seconds):
        backend.pauses += 1
        backend.now += seconds

    return take_timing(backend.kernel, backend, SamplingSettings(**settings), throttle_check=lambda r: r.get("bad", False),
                       clock=backend.clock, pause=pause)


def test_throttled_rounds_are_taken_again_after_a_pause_not_dropped():
    # The clocks fall for two rounds, then recover: those rounds are discarded and re-sampled.
    readings = [{}, {"bad": True}, {"bad": True}] + [{}] * 1000
    b = FakeBackend(lambda i: 1e-3, readings=readings)
    t = run_pausing(b, min_time=0.05, max_time=0.5, noise=0.01, warmup_time=0.001)
    assert b.pauses == 2 and t.dropped_samples > 0 and not t.throttled
    assert len(t.samples) >= 10 and "in 2 round(s)" in t.notes[0] and "taken again after a 50 ms pause" in t.notes[0]


def test_throttling_that_does_not_recover_is_kept_and_flagged():
    readings = [{}] + [{"bad": True}] * 1000
    b = FakeBackend(lambda i: 1e-3, readings=readings)
    t = run_pausing(b, min_time=0.05, max_time=0.5, noise=0.01, warmup_time=0.001)
    assert t.throttled and b.pauses == 5 and t.samples  # five recoveries, then the samples are kept
    assert "later rounds stayed throttled and were kept" in t.notes[0]


def test_telemetry_is_read_while_the_round_runs_not_after_the_synchronize():
    order = []

    class Recording(FakeBackend):
        def synchronize(self):
            order.append("sync")

        def read_telemetry(self):
            order.append("read")
            return {}

    b = Recording(lambda i: 1e-3)
    run(b, min_time=0.01, max_time=0.1, noise=0.5, min_samples=3, warmup_time=0.001)
    sampling = order[order.index("read"):]  # the warm-up synchronizes each call and reads nothing
    # No reading before sampling (the device is idle then); each round: read, then sync.
    assert set(order[:order.index("read")]) == {"sync"} and sampling == ["read", "sync"] * (len(sampling) // 2)


def test_not_callable():
    with pytest.raises(MeasureError, match="zero-argument callable, got int"):
        take_timing(3, FakeBackend(lambda i: 1), SamplingSettings())


def test_a_compiling_first_call_stays_out_of_the_estimate_and_the_samples():
    # The first call compiles for 2 s (longer than the whole time budget); the kernel takes 10 us.
    b = FakeBackend(lambda i: 2.0 if i == 0 else 10e-6)
    t = run(b, min_time=0.01, max_time=0.5, noise=0.01, min_samples=10, warmup_time=0.005)
    assert t.warmup_calls > 4  # not just the compiling call
    assert t.batch == 10  # batched from the 10 us estimate, not from the 2 s compile
    assert t.seconds == pytest.approx(10e-6) and max(t.samples) == pytest.approx(10e-6)


def test_the_pipeline_keeps_the_calmer_attempt_with_what_it_read(tmp_path, monkeypatch):
    """A disturbed attempt is taken again, and the calmer one stands whole: its timing and what its
    timer read beside it (a step's profile), never one attempt's timing with the other's reading."""
    from types import SimpleNamespace

    from pytest_solgate.measure import pipeline
    from pytest_solgate.measure.extras import Findings
    from pytest_solgate.measure.sampling import Timing

    monkeypatch.setenv("SOLGATE_LOCK_DIR", str(tmp_path))
    import contextlib

    context = SimpleNamespace(lock_key="cpu", device=SimpleNamespace(kind="cpu"), scope=contextlib.nullcontext)
    attempts = iter([(2e-3, "first reading", 5.0), (1e-3, "second reading", 1.0)])
    ranks = []

    def attempt():
        seconds, read, rank = next(attempts)
        ranks.append(rank)
        return Timing(seconds=seconds, samples=(seconds,), noise=0.0, batch=1, warmup_calls=1, noisy=False,
                      backend="fake", started_at=0.0, finished_at=0.0, wall_seconds=0.0), read

    class Disturbed:
        holds_device = True

        def before(self):
            pass

        def after(self, taken):
            return Findings(fields={"contended": "busy"}, retake=True, rank=ranks[-1])

    measured = pipeline.measure("t", "k", lambda: None, context, attempt, [Disturbed()], "me", max_time=1.0)
    assert (measured.timing.seconds, measured.read) == (1e-3, "second reading")
