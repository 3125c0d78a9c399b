"""Fast unit tests of the pure core: statistics, scoring and judging."""

import math
import random

import pytest

from pytest_solgate import judge, records, stats
from pytest_solgate.errors import MarkerError, WorkError
from pytest_solgate.profiles import HardwareProfile
from pytest_solgate.records import Measurement
from pytest_solgate.score import score
from pytest_solgate.work import make_work

H100 = HardwareProfile(
    id="h100-sxm", name="H100", kind="gpu", memory_bandwidth_gbps=3350,
    peak_tflops={"fp32": 67, "bf16_tensor": 989.4},
)


def test_memory_bound_score():
    work = make_work(bytes=3.35e12 * 1e-3, flops=1e6)  # exactly 1 ms of traffic
    s = score(work, 2e-3, H100)
    assert s.t_sol == pytest.approx(1e-3)
    assert s.sol == pytest.approx(0.5)
    assert s.bound == "memory"
    assert s.gbps == pytest.approx(3.35e12 * 1e-3 / 2e-3 / 1e9)
    assert s.mfu == pytest.approx(1e6 / 67e12 / 2e-3)


def test_compute_bound_score_uses_the_slowest_precision():
    work = make_work(flops={"bf16_tensor": 989.4e12 * 1e-3, "fp32": 67e12 * 0.5e-3}, bytes=1)
    s = score(work, 1.25e-3, H100)
    assert s.bound == "compute" and s.dominant_precision == "bf16_tensor"
    assert s.t_sol == pytest.approx(1e-3) and s.sol == pytest.approx(0.8) and s.mfu == pytest.approx(0.8)
    assert s.ridge == pytest.approx(989.4e12 / 3350e9)


def test_precision_the_profile_lacks():
    with pytest.raises(WorkError, match="'fp8_tensor', which profile 'h100-sxm' lacks; it has: fp32, bf16_tensor"):
        score(make_work(flops=1, precision="fp8_tensor"), 1.0, H100)


def test_median_interval_and_noise():
    assert stats.median([3, 1, 2]) == 2 and stats.median([1, 2, 3, 4]) == 2.5
    assert stats.relative_half_width([1.0] * 5) == math.inf
    assert stats.relative_half_width([1.0] * 50) == 0
    values = [1 + i / 1000 for i in range(101)]
    low, high = stats.median_interval(values)
    assert low < stats.median(values) < high


def test_mann_whitney():
    rng = random.Random(1)
    a = [rng.gauss(1, 0.01) for _ in range(30)]
    b = [rng.gauss(1.1, 0.01) for _ in range(30)]
    assert stats.mann_whitney_u(a, b) < 1e-8
    assert stats.mann_whitney_u(a, a) == 1.0
    assert stats.mann_whitney_u([], a) == 1.0


def measurement(sol=0.9, mfu=0.0, backend="cpu", gate=True, samples=None, profile="h100-sxm"):
    seconds = 1e-3
    return Measurement(
        test="t.py::test_k", name="default", profile=profile, backend=backend, flops={}, bytes=3.35e9 * sol,
        seconds=seconds, samples=tuple(samples or [seconds] * 20), noise=0.001, t_sol=seconds * sol, sol=sol,
        mfu=mfu, bound="memory", tflops=0, gbps=3.35e9 * sol / seconds / 1e9, gate=gate,
    )


SETTINGS = judge.JudgeSettings()


@pytest.mark.parametrize(
    "m, budget, verdict",
    [
        (measurement(0.9), judge.Budget(min=0.85), records.PASS),
        (measurement(0.7), judge.Budget(min=0.85), records.BELOW_BUDGET),
        (measurement(0.7), judge.Budget(min=(("a100*", 0.9), ("h100*", 0.6))), records.PASS),
        (measurement(0.7), judge.Budget(min=(("a100*", 0.9),)), records.PASS),
        (measurement(1.2), judge.Budget(min=0.5), records.ABOVE_SOL),
        (measurement(0.9, mfu=0.1), judge.Budget(mfu=0.5), records.BELOW_BUDGET),
        (measurement(0.2, gate=False), judge.Budget(min=0.85), records.NOT_GATED),
        (measurement(0.2, backend="triton-interpreter"), judge.Budget(min=0.85), records.NOT_GATED),
    ],
)
def test_verdicts(m, budget, verdict):
    assert judge.judge(m, budget, None, SETTINGS).verdict == verdict


def test_below_budget_message_is_actionable():
    m = judge.judge(measurement(0.71), judge.Budget(min=0.85), None, SETTINGS)
    assert m.reason.startswith("test_k SOL 0.71 < budget 0.85 on h100-sxm: ")
    assert "of 3.35 TB/s (memory-bound), median 1 ms ±0.1% over 20 samples" in m.reason


def test_gate_off_and_warn():
    off = judge.JudgeSettings(gate="off")
    assert judge.judge(measurement(0.1), judge.Budget(min=0.85), None, off).verdict == records.NOT_GATED
    warn = judge.JudgeSettings(gate="warn")
    assert judge.outcome(records.BELOW_BUDGET, warn) == "warn"
    assert judge.outcome(records.BELOW_BUDGET, SETTINGS) == "fail"
    assert judge.outcome(records.ABOVE_SOL, judge.JudgeSettings(above_one="warn")) == "warn"
    assert judge.outcome(records.AMBIGUOUS, SETTINGS) == "warn"
    assert judge.outcome(records.IMPROVED, SETTINGS) == "pass"


def test_baseline_regressed_ambiguous_improved():
    rng = random.Random(7)
    tight_old = [1e-3 * rng.gauss(1, 0.002) for _ in range(30)]
    base = judge.Baseline(commit="a" * 40, sol=0.7, sol_samples=tuple(0.7e-3 / s for s in tight_old))
    slower = [s * 1.2 for s in tight_old]
    m = measurement(0.58, samples=slower).replace(t_sol=0.7e-3, seconds=stats.median(slower), sol=0.7e-3 / stats.median(slower))
    got = judge.judge(m, judge.Budget(), base, SETTINGS)
    assert got.verdict == records.REGRESSED
    assert "vs 0.700 at aaaaaaaaaa" in got.reason and "tolerance 5.0%" in got.reason and "p=" in got.reason
    noisy_base = judge.Baseline(commit="b" * 40, sol=0.7, sol_samples=(0.3, 1.2, 0.7, 0.2, 1.5))
    assert judge.judge(m, judge.Budget(), noisy_base, SETTINGS).verdict == records.AMBIGUOUS
    faster = [s / 1.2 for s in tight_old]
    f = m.replace(samples=tuple(faster), seconds=stats.median(faster), sol=0.7e-3 / stats.median(faster))
    assert judge.judge(f, judge.Budget(), base, SETTINGS).verdict == records.IMPROVED
    same = m.replace(samples=tuple(tight_old), seconds=stats.median(tight_old), sol=0.7e-3 / stats.median(tight_old))
    assert judge.judge(same, judge.Budget(), base, SETTINGS).verdict == records.PASS
    # the marker's tolerance wins over the default
    assert judge.judge(m, judge.Budget(max_regression=0.5), base, SETTINGS).verdict == records.PASS


@pytest.mark.parametrize(
    "args, kwargs, fragment",
    [
        ((0.85,), {}, "keyword arguments only"),
        ((), {"minimum": 0.8}, "unknown argument 'minimum'"),
        ((), {"min": 1.5}, r"min=1.5\): must be in \(0, 1\]"),
        ((), {"min": 0}, r"must be in \(0, 1\]"),
        ((), {"min": "0.8"}, "must be a number"),
        ((), {"mfu": -0.1}, "mfu=-0.1"),
        ((), {"max_regression": 1.0}, r"must be in \[0, 1\)"),
        ((), {"min": {"h100*": 2}}, "min\\['h100\\*'\\]=2"),
        ((), {"min": {}}, "at least one"),
        ((), {"min": {3: 0.5}}, "must be a profile-id glob string"),
        ((), {"min": True}, "must be a number"),
    ],
)
def test_marker_errors_name_test_and_argument(args, kwargs, fragment):
    with pytest.raises(MarkerError, match=fragment) as info:
        judge.parse_marker("t.py::test_k", args, kwargs)
    assert str(info.value).startswith("t.py::test_k: ")
