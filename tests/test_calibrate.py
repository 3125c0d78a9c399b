"""CPU calibration: repetitions, their spread, and what gets cached (fake figures, no timing)."""

import importlib.util

import pytest

from pytest_solgate import calibrate

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the CPU profile reads torch's facts")


def figures(bandwidths, fp32s):
    """A fake measure_cpu that returns the given bandwidths and fp32 peaks, one per repetition."""
    runs = iter(zip(bandwidths, fp32s))

    def measure(torch):
        bandwidth, fp32 = next(runs)
        return bandwidth, {"copy": bandwidth, "triad": bandwidth * 0.9}, {"fp32": fp32, "fp64": fp32 / 2}

    return measure


def test_repetitions_give_medians_and_spreads():
    bandwidth, per_pattern, peaks, spreads = calibrate.repeated_cpu_calibration(
        None, 5, figures([20, 21, 22, 19, 20], [0.10, 0.11, 0.10, 0.10, 0.09])
    )
    assert bandwidth == 20 and per_pattern["copy"] == 20 and peaks == {"fp32": 0.10, "fp64": 0.05}
    assert spreads["bandwidth"] == pytest.approx(3 / 20) and spreads["fp32"] == pytest.approx(0.02 / 0.10)


def test_agreeing_repetitions_are_cached_and_disagreeing_ones_are_not(tmp_path):
    said = []

    def agreeing(torch):
        return calibrate.repeated_cpu_calibration(torch, 5, figures([20, 20.5, 20.2, 19.9, 20.1], [0.1] * 5))

    def disagreeing(torch):  # the 7.5 vs 21.5 GB/s of a busy VM
        return calibrate.repeated_cpu_calibration(torch, 5, figures([7.5, 21.5, 20, 12, 20], [0.1] * 5))

    busy = calibrate.cpu_profile(tmp_path / "busy", said.append, disagreeing)
    assert busy.memory_bandwidth_gbps == 20 and not list((tmp_path / "busy").rglob("*.toml"))
    assert "repetitions disagree (bandwidth spread 70% > 10%" in said[-1] and "not cached" in said[-1]
    quiet = calibrate.cpu_profile(tmp_path / "quiet", said.append, agreeing)
    (cached,) = (tmp_path / "quiet").rglob("cpu-*.toml")
    assert "spread (max-min)/median: bandwidth 3.0%" in cached.read_text()
    assert calibrate.cpu_profile(tmp_path / "quiet", said.append, disagreeing) == quiet  # from the cache
    # a re-calibration that moved the ceilings is a new identity: history compares times across it
    assert busy.ceilings_id != quiet.ceilings_id and busy.id == quiet.id
