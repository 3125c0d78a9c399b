"""CPU calibration: repetitions, their spread, and what gets cached (fake figures, no timing)."""

import importlib.util

import pytest

from pytest_solgate.measure import calibrate

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the CPU profile reads torch's facts")


def figures(bandwidths, fp32s):
    """A fake measure_cpu that returns the given bandwidths and fp32 peaks, one per repetition."""
    runs = iter(zip(bandwidths, fp32s))

    def measure(torch):
        bandwidth, fp32 = next(runs)
        return bandwidth, {"copy": bandwidth, "triad": bandwidth * 0.9}, {"fp32": fp32, "fp64": fp32 / 2}

    return measure


def test_repetitions_give_the_best_figures_and_their_spreads():
    bandwidth, per_pattern, peaks, spreads = calibrate.repeated_cpu_calibration(
        None, 5, figures([20, 21, 22, 19, 20], [0.10, 0.11, 0.10, 0.10, 0.09])
    )
    # A ceiling is the best sustained rate seen, as STREAM reports it: not a typical one.
    assert bandwidth == 22 and per_pattern["copy"] == 22 and peaks == {"fp32": 0.11, "fp64": 0.055}
    assert spreads["bandwidth"] == pytest.approx(3 / 20) and spreads["fp32"] == pytest.approx(0.02 / 0.10)


def quick(bandwidth, fp32):
    """A fake quick_cpu_check: the figures one session's re-check sees."""
    return lambda torch: (bandwidth, {"copy": bandwidth}, {"fp32": fp32, "fp64": fp32 / 2})


def test_ceilings_are_cached_even_when_repetitions_disagree_and_only_rise(tmp_path):
    said = []

    def disagreeing(torch):  # the 32 vs 52 GB/s phases of this VM
        return calibrate.repeated_cpu_calibration(torch, 5, figures([32, 52, 33, 34, 32], [0.1] * 5))

    first = calibrate.cpu_profile(tmp_path, said.append, disagreeing)
    (cached,) = tmp_path.rglob("cpu-*.toml")
    assert first.memory_bandwidth_gbps == 52 and "best of 3 repetitions" in said[-1]
    assert "spread (max-min)/median: bandwidth 60.6%" in cached.read_text()
    # A session in a slow phase finds the cache and lowers nothing.
    slow = calibrate.cpu_profile(tmp_path, said.append, recheck=quick(30, 0.05))
    assert slow == first and slow.ceilings_id == first.ceilings_id
    # A session in a faster phase raises the ceilings it beat, for itself and every later session.
    fast = calibrate.cpu_profile(tmp_path, said.append, recheck=quick(55, 0.08))
    assert fast.memory_bandwidth_gbps == 55 and fast.peak_tflops == first.peak_tflops
    assert "raised them" in said[-1] and "bandwidth 52.0 -> 55.0 GB/s" in fast.notes
    assert calibrate.cpu_profile(tmp_path, said.append, recheck=quick(40, 0.05)) == fast
    # `solgate calibrate` (full=True) measures all repetitions again and keeps what was higher.
    full = calibrate.cpu_profile(tmp_path, said.append, lambda torch: (45.0, {"copy": 45.0}, {"fp32": 0.2, "fp64": 0.1}, {}),
                                 full=True)
    assert full.memory_bandwidth_gbps == 55 and full.peak_tflops == {"fp32": 0.2, "fp64": 0.1}
    # a raised ceiling is a new identity: history compares times across it, never SOL
    assert fast.ceilings_id != first.ceilings_id and fast.id == first.id


def test_raise_ceilings_is_the_identity_when_nothing_rose():
    from pytest_solgate.declare.profiles import HardwareProfile

    profile = HardwareProfile(id="cpu-x", name="x", kind="cpu", memory_bandwidth_gbps=40, peak_tflops={"fp32": 0.1},
                              ceilings="measured")
    assert calibrate.raise_ceilings(profile, 39.9, {"fp32": 0.1}) is profile
    assert calibrate.raise_ceilings(profile, 40, {"fp32": 0.12}).peak_tflops == {"fp32": 0.12}


# --- one calibration per machine, shared by every clone (issue 31 item 4) ------------------------
def test_two_clones_on_one_machine_share_one_calibration_and_an_old_one_is_merged(tmp_path):
    """The same id once held 82 GB/s in one clone and 75 GB/s in another: each clone cached its
    own. Now the per-user cache holds the machine's one calibration; a clone's own from before is
    merged in under the same id (its baselines keep working), its ceilings where they are higher."""
    import torch

    said = []
    clone_a, clone_b = tmp_path / "a" / ".solgate", tmp_path / "b" / ".solgate"
    key = calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))
    older = calibrate.HardwareProfile(id=f"cpu-{key}", name="this CPU", kind="cpu", memory_bandwidth_gbps=82,
                                      peak_tflops={"fp32": 0.05, "fp64": 0.02}, ceilings="measured")
    calibrate.write_profile(calibrate.cpu_profile_path(clone_a, key), older)  # clone a calibrated before
    first = calibrate.cpu_profile(clone_b, said.append, lambda torch: (75.0, {"copy": 75.0}, {"fp32": 0.1, "fp64": 0.04}, {}))
    assert first.memory_bandwidth_gbps == 75 and first.id == f"cpu-{key}"
    in_a = calibrate.cpu_profile(clone_a, said.append, recheck=quick(10, 0.01))
    in_b = calibrate.cpu_profile(clone_b, said.append, recheck=quick(10, 0.01))
    assert in_a == in_b and in_a.id == older.id  # one id, one set of ceilings, in every clone
    assert in_a.memory_bandwidth_gbps == 82 and in_a.peak_tflops == {"fp32": 0.1, "fp64": 0.04}
    shared = calibrate.cpu_profile_path(calibrate.user_cache_dir(), key)
    assert shared.is_file() and not calibrate.cpu_profile_path(clone_b, key).exists()
    assert calibrate.this_cpu(tmp_path / "elsewhere") == (older.id, in_a)
