"""Fast unit tests of the pure core: statistics, scoring and judging."""

import dataclasses
import math

import pytest

from pytest_solgate import results
from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.declare.work import make_work
from pytest_solgate.judge import budget as budgets
from pytest_solgate.judge import memory_probe, verdict
from pytest_solgate.judge import window as windows
from pytest_solgate.results_json import encode
from pytest_solgate.score import score
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MarkerError, WorkError
from solgate_testing import changed, recorded

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


def measurement(sol=0.9, mfu=0.0, backend="cpu", gate=True, samples=None, profile="h100-sxm"):
    seconds = 1e-3
    return recorded(
        profile=profile, backend=backend, bytes=3.35e9 * sol, seconds=seconds, samples=tuple(samples or [seconds] * 20),
        noise=0.001, t_sol=seconds * sol, sol=sol, mfu=mfu, gbps=3.35e9 * sol / seconds / 1e9, gate=gate,
        ceilings="datasheet", verdict=None,
    )


SETTINGS = windows.JudgeSettings()


@pytest.mark.parametrize(
    "m, budget, expected",
    [
        (measurement(0.9), budgets.Budget(min=0.85), results.PASS),
        (measurement(0.7), budgets.Budget(min=0.85), results.BELOW_BUDGET),
        (measurement(0.7), budgets.Budget(min=(("a100*", 0.9), ("h100*", 0.6))), results.PASS),
        (measurement(0.7), budgets.Budget(min=(("a100*", 0.9),)), results.RECORDED),  # no budget here: nothing judged
        (measurement(1.2), budgets.Budget(min=0.5), results.ABOVE_SOL),
        (measurement(0.9, mfu=0.1), budgets.Budget(mfu=0.5), results.BELOW_BUDGET),
        (measurement(0.2, gate=False), budgets.Budget(min=0.85), results.NOT_GATED),
        (measurement(0.2, backend="triton-interpreter"), budgets.Budget(min=0.85), results.NOT_GATED),
    ],
)
def test_verdicts(m, budget, expected):
    assert verdict.judge(m, budget, None, SETTINGS).verdict == expected


def test_below_budget_message_is_actionable():
    m = verdict.judge(measurement(0.71, backend="cuda"), budgets.Budget(min=0.85), None, SETTINGS)
    first, facts = m.judgement.reason.splitlines()
    assert first == "test_k SOL 0.71 < budget 0.85"  # the figures to act on lead, within 80 columns
    assert "h100-sxm" in facts and "3.35 TB/s" in facts and "1 ms" in facts


def test_gate_off_and_warn():
    off = windows.JudgeSettings(gate="off")
    assert verdict.judge(measurement(0.1), budgets.Budget(min=0.85), None, off).verdict == results.NOT_GATED
    warn = windows.JudgeSettings(gate="warn")
    assert verdict.outcome(results.BELOW_BUDGET, warn) == "warn"
    assert verdict.outcome(results.BELOW_BUDGET, SETTINGS) == "fail"
    assert verdict.outcome(results.ABOVE_SOL, windows.JudgeSettings(above_one="warn")) == "warn"
    assert verdict.outcome(results.AMBIGUOUS, SETTINGS) == "warn"
    assert verdict.outcome(results.IMPROVED, SETTINGS) == "pass"


def window(*sols, noise=0.002, commit="a", ceilings_id="", environment=None):
    """A baseline window of runs with these SOLs, newest first, at commits a, b, c, ..."""
    runs = tuple(
        windows.BaselineRun(commit=chr(ord(commit) + i) * 40, run_id=f"r{i}", sol=sol, seconds=0.7e-3 / sol,
                          noise=noise, ceilings_id=ceilings_id, environment=environment or {})
        for i, sol in enumerate(sols)
    )
    return windows.BaselineWindow(runs=runs)


def at_sol(sol, noise=0.002):
    return changed(measurement(sol), t_sol=0.7e-3, seconds=0.7e-3 / sol, noise=noise)


# Five runs with 1.6 % run-to-run spread: the 99 % bound sits 6.4 % below their mean.
STEADY = (0.70, 0.72, 0.69, 0.71, 0.70)


def test_window_regressed_ambiguous_improved_pass():
    got = verdict.judge(at_sol(0.56), budgets.Budget(), window(*STEADY), SETTINGS)
    assert got.verdict == results.REGRESSED, got.judgement.reason
    assert "vs 0.704 over 5 baseline runs from eeeeeeeeee to aaaaaaaaaa" in got.judgement.reason
    assert "tolerance 5.0%, noise floor 6.4%" in got.judgement.reason and "99 % t prediction bound over 5 runs" in got.judgement.reason
    info = encode(got)["baseline"]  # as the solgate/1 JSON holds it
    assert info["runs"] == 5 and info["commit"] == "a" * 40 and info["oldest_commit"] == "e" * 40
    assert abs(info["noise_floor"] - 0.0642) < 0.001 and info["test"] == "t-prediction-99" and info["compared_on"] == "sol"
    assert verdict.judge(at_sol(0.85), budgets.Budget(), window(*STEADY), SETTINGS).verdict == results.IMPROVED
    assert verdict.judge(at_sol(0.70), budgets.Budget(), window(*STEADY), SETTINGS).verdict == results.PASS
    # the marker's tolerance wins over the default
    assert verdict.judge(at_sol(0.56), budgets.Budget(max_regression=0.5), window(*STEADY), SETTINGS).verdict == results.PASS


def test_a_drop_within_the_noise_floor_is_ambiguous_and_names_the_floor():
    noisy = (0.70, 0.80, 0.60, 0.75, 0.65)  # +-10 % from run to run: the floor is near 35 %
    got = verdict.judge(at_sol(0.60), budgets.Budget(), window(*noisy), SETTINGS)
    assert got.verdict == results.AMBIGUOUS
    reason = got.judgement.reason
    assert "below this window's noise floor of" in reason
    # 0.2 % within each run, 11 % between runs: the advice is about the runner, not the tolerance
    assert "the noise is between runs (11.4% run to run, 0.1% within a run)" in reason
    assert "raising max_regression would hide real regressions" in reason
    assert got.judgement.baseline.noise_floor > 0.25


def test_noisy_runs_advise_a_longer_measurement_or_a_wider_tolerance():
    noisy = (0.70, 0.80, 0.60, 0.75, 0.65)
    got = verdict.judge(at_sol(0.60, noise=0.05), budgets.Budget(), window(*noisy, noise=0.05), SETTINGS)
    assert got.verdict == results.AMBIGUOUS
    assert "the runs' own noise (±2.6% within a run) is beyond the tolerance: give more --sol-min-time, or raise " \
           "max_regression above" in got.judgement.reason


def test_one_disturbed_run_cannot_widen_the_floor():
    # Nine runs at 0.70 +- 1 %, and one a neighbouring process slowed to half: before, its spread
    # became the floor (near 60 %) and a 25 % drop passed as ambiguous.
    disturbed = (0.70, 0.71, 0.69, 0.35, 0.70, 0.71, 0.70, 0.69, 0.70, 0.71)
    got = verdict.judge(at_sol(0.53), budgets.Budget(), window(*disturbed), SETTINGS)
    assert got.verdict == results.REGRESSED, got.judgement.reason
    assert got.judgement.baseline.noise_floor < 0.05
    assert "left out as far off the others: dddddddddd (SOL 0.350)" in got.judgement.reason


def test_a_mixed_window_names_the_runs_that_widen_it():
    # Runs at one level +- 3 % and one lower, not far enough to be left out as disturbed: the
    # floor is wide because of it, and the message says which run that is.
    mixed = (0.70, 0.72, 0.62, 0.69, 0.71, 0.68, 0.70, 0.61, 0.73)
    got = verdict.judge(at_sol(0.58), budgets.Budget(), window(*mixed), SETTINGS)
    assert got.verdict == results.AMBIGUOUS, got.judgement.reason
    assert "the window is mixed: the run at hhhhhhhhhh (SOL 0.610) widens it, and it leaves the window" in got.judgement.reason


def test_one_run_cannot_show_the_spread_so_a_drop_is_ambiguous():
    got = verdict.judge(at_sol(0.35), budgets.Budget(), window(0.70), SETTINGS)
    assert got.verdict == results.AMBIGUOUS
    assert "noise floor unknown (one run)" in got.judgement.reason and got.judgement.baseline.noise_floor is None


def test_against_one_clean_run_a_drop_beyond_the_machines_noise_fails():
    """The machine's run-to-run noise, known from its other series, judges a drop against one run."""
    quiet = dataclasses.replace(window(0.70), machine_noise=(0.02, 40))  # 2 % between runs, from 40 df
    third = verdict.judge(at_sol(0.70 / 3), budgets.Budget(), quiet, SETTINGS)
    assert third.verdict == results.REGRESSED, third.judgement.reason
    assert "this machine's run-to-run spread of 2.0% from its other series" in third.judgement.reason
    assert verdict.judge(at_sol(0.68), budgets.Budget(), quiet, SETTINGS).verdict == results.PASS
    # a drop this machine's noise can explain stays ambiguous
    noisy = dataclasses.replace(window(0.70), machine_noise=(0.20, 40))
    assert verdict.judge(at_sol(0.70 / 1.3), budgets.Budget(), noisy, SETTINGS).verdict == results.AMBIGUOUS


def test_within_run_precision_bounds_the_spread_from_below():
    # Identical run values cannot mean zero noise: each run's own precision (0.5 % half-width) counts.
    identical = window(0.7, 0.7, 0.7, noise=0.05)
    got = verdict.judge(at_sol(0.63), budgets.Budget(), identical, SETTINGS)
    assert got.verdict == results.AMBIGUOUS and got.judgement.baseline.spread >= 0.05 / stats.Z_95


def test_changed_ceilings_compare_times_not_sol():
    # The baseline scored 0.70 against other ceilings; its time equals this run's: no change.
    old = window(*[0.35] * 3, ceilings_id="old-ceilings")
    runs = tuple(r.__class__(**{**r.__dict__, "seconds": 1e-3}) for r in old.runs)
    m = changed(at_sol(0.70), seconds=1e-3, ceilings_id="new-ceilings")
    got = verdict.judge(m, budgets.Budget(), windows.BaselineWindow(runs=runs), SETTINGS)
    assert got.verdict == results.PASS and got.judgement.baseline.compared_on == "time"
    assert abs(got.judgement.baseline.change) < 1e-9 and got.judgement.baseline.compared_on == "time"


def test_environment_that_differs_turns_a_regression_ambiguous():
    differs = windows.BaselineWindow(runs=window(*STEADY).runs, environment_differs=("torch 2.12.0 -> 2.13.0",))
    got = verdict.judge(at_sol(0.56), budgets.Budget(), differs, SETTINGS)
    assert got.verdict == results.AMBIGUOUS and "another environment (torch 2.12.0 -> 2.13.0)" in got.judgement.reason


def test_confirmation_keeps_or_drops_a_suspected_regression():
    first = verdict.judge(at_sol(0.56), budgets.Budget(), window(*STEADY), SETTINGS)
    slow_again = verdict.judge(at_sol(0.55), budgets.Budget(), window(*STEADY), SETTINGS)
    kept = verdict.confirm(first, slow_again)
    assert kept.verdict == results.REGRESSED and kept.judgement.baseline.confirmed is True
    assert "confirmed by a re-measurement (SOL 0.560, then 0.550)" in kept.judgement.reason
    fine_now = verdict.judge(at_sol(0.70), budgets.Budget(), window(*STEADY), SETTINGS)
    cleared = verdict.confirm(first, fine_now)
    assert cleared.verdict == results.PASS and "did not confirm it" in cleared.judgement.reason
    assert cleared.sol == 0.70 and any("did not confirm" in note for note in cleared.notes)


def test_t_quantiles_and_spread():
    assert stats.t_quantile_99(1) == 31.821 and stats.t_quantile_99(9) == 2.821
    assert stats.t_quantile_99(35) == stats.t_quantile_99(30)  # the next smaller df: a wider bound
    assert stats.t_quantile_99(1000) == stats.Z_99
    assert stats.stdev([1.0]) == 0.0 and abs(stats.stdev([1.0, 2.0, 3.0]) - 1.0) < 1e-12


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
        budgets.parse_marker("t.py::test_k", args, kwargs)
    assert str(info.value).startswith("t.py::test_k: ")


def test_sol_at_the_measured_clock_scales_compute_roofs_only():
    from pytest_solgate.declare.profiles import DeviceFacts

    gpu = HardwareProfile(id="g", name="g", kind="gpu", memory_bandwidth_gbps=1000, peak_tflops={"bf16_tensor": 1000},
                          device=DeviceFacts(boost_clock_mhz=2000))
    gemm = make_work({"bf16_tensor": 1e12}, 1e6, "fp32")  # compute-bound: 1 ms at the datasheet peak
    assert score(gemm, 2e-3, gpu).sol == pytest.approx(0.5)
    # at 1000 MHz the compute roof halves: the 2 ms run was at its speed of light for that clock
    assert score(gemm, 2e-3, gpu, 1000).sol_at_clock == pytest.approx(1.0)
    copy = make_work(None, 1e9, "fp32")  # memory-bound: the SM clock does not move its roof
    assert score(copy, 2e-3, gpu, 1000).sol_at_clock == pytest.approx(score(copy, 2e-3, gpu).sol)
    assert score(gemm, 2e-3, gpu, None).sol_at_clock is None
    assert score(gemm, 2e-3, gpu, 2500).sol_at_clock == pytest.approx(0.5)  # boost above the datasheet: no credit


def test_sol_is_printed_with_enough_digits():
    from pytest_solgate.support import units

    assert [units.sol(v) for v in (0.8234, 0.1, 0.0049, 0.005, 0.0, 1.33)] == ["0.82", "0.10", "0.0049", "0.005", "0.00", "1.33"]


# --- the memory probe: a memory-bound kernel judged relative to the machine's memory speed ----------

# Ten runs of one kernel while the machine's memory ran at these speeds (1.0 = usual): its SOL and
# its probe's time both follow the speed, as on a shared VM (docs/measurement.md).
MEMORY_SPEEDS = (1.0, 0.9, 1.1, 0.95, 1.05, 0.88, 1.12, 1.0, 0.93, 1.07)


def probed_window(speeds=MEMORY_SPEEDS, probe_missing_at=None):
    return windows.BaselineWindow(runs=tuple(
        windows.BaselineRun(commit=f"{i:040x}", run_id=f"r{i}", sol=0.5 * s, seconds=0.7e-3 / (0.5 * s), noise=0.002,
                            probe_seconds=None if i == probe_missing_at else 1e-3 / s)
        for i, s in enumerate(speeds)
    ))


def probed(sol, probe_seconds, bound="memory"):
    return changed(measurement(sol), t_sol=0.7e-3, seconds=0.7e-3 / sol, noise=0.002, probe_seconds=probe_seconds,
                   bound=bound)


def test_a_run_on_slow_memory_passes_relative_to_the_probe():
    # the same kernel while the memory runs 15 % slow: its SOL is 15 % lower, and so is the probe's speed
    got = verdict.judge(probed(0.5 * 0.85, 1e-3 / 0.85), budgets.Budget(), probed_window(), SETTINGS)
    assert got.verdict == results.PASS, got.judgement.reason
    info = encode(got)["baseline"]
    assert info["by_probe"] is True and abs(info["change"]) < 0.01 and abs(info["raw_change"] + 0.15) < 0.01
    assert "relative to the memory probe timed beside each sample" in got.judgement.reason
    assert f"the SOL itself changed {info['raw_change']:+.1%}" in got.judgement.reason


def test_a_kernel_slowed_by_a_commit_is_caught_relative_to_the_probe_and_missed_raw():
    slower = probed(0.5 / 1.2, 1e-3)  # the code does 1.2x the work; the memory runs at its usual speed
    got = verdict.judge(slower, budgets.Budget(), probed_window(), SETTINGS)
    assert got.verdict == results.REGRESSED, got.judgement.reason
    assert abs(got.judgement.baseline.change + 1 / 6) < 0.01
    # Raw, the window's memory swings (7 % run to run) hide the same drop; a compute-bound kernel is
    # compared raw, as is any comparison where a baseline run has no probe.
    as_compute = probed(0.5 / 1.2, 1e-3, bound="compute")
    raw = verdict.judge(as_compute, budgets.Budget(), probed_window(), SETTINGS)
    assert raw.verdict == results.AMBIGUOUS and "by_probe" not in encode(raw)["baseline"]
    older = verdict.judge(slower, budgets.Budget(), probed_window(probe_missing_at=3), SETTINGS)
    assert older.verdict == results.AMBIGUOUS and not older.judgement.baseline.by_probe


def test_a_window_that_does_not_follow_the_probe_is_compared_raw():
    # The kernel's SOL swings with the memory speed, but the probe swung otherwise (a kernel that
    # is limited by something else): relative to the probe the window would be wider, not narrower.
    probes = (1.0, 1.12, 0.9, 1.1, 0.92, 1.08, 0.95, 1.05, 0.9, 1.1)
    runs = tuple(
        windows.BaselineRun(commit=f"{i:040x}", run_id=f"r{i}", sol=0.5 * s, seconds=0.7e-3 / (0.5 * s), noise=0.002,
                            probe_seconds=1e-3 * p)
        for i, (s, p) in enumerate(zip(MEMORY_SPEEDS, probes))
    )
    got = verdict.judge(probed(0.5 / 1.2, 1e-3), budgets.Budget(), windows.BaselineWindow(runs=runs), SETTINGS)
    assert got.verdict == results.AMBIGUOUS and not got.judgement.baseline.by_probe, got.judgement.reason
    # and three runs cannot show which way their spread goes
    few = verdict.judge(probed(0.5 / 1.2, 1e-3), budgets.Budget(), probed_window(MEMORY_SPEEDS[:3]), SETTINGS)
    assert not few.judgement.baseline.by_probe


def test_follows_probe_needs_a_clear_gain():
    raw = [0.0, 0.1, -0.1, 0.05, -0.05]
    assert memory_probe.follows_probe(raw, [v * 0.5 for v in raw], 0.0)
    assert not memory_probe.follows_probe(raw, [v * 0.9 for v in raw], 0.0)  # narrower, but not clearly


def test_the_probe_comparison_round_trips_and_older_records_write_back_identical():
    got = verdict.judge(probed(0.5 * 0.85, 1e-3 / 0.85), budgets.Budget(), probed_window(), SETTINGS)
    again = changed(got)  # through the solgate/1 JSON and back
    assert again.timing.probe_seconds == got.timing.probe_seconds
    assert again.judgement.baseline == got.judgement.baseline and again.judgement.baseline.by_probe
    plain = encode(verdict.judge(at_sol(0.70), budgets.Budget(), window(*STEADY), SETTINGS))
    assert "probe_seconds" not in plain and "by_probe" not in plain["baseline"]


def test_a_run_whose_probe_left_the_windows_range_regresses_only_beyond_its_shift():
    # a steady machine (probe within 1 %), then a minute when everything ran slow: the probe 30 %
    # and this kernel, which does not follow it exactly, 45 %
    steady = probed_window(speeds=(1.0, 0.99, 1.01, 1.0, 0.995, 1.005, 1.0, 0.99, 1.01, 1.0))
    got = verdict.judge(probed(0.5 / 1.45, 1.3e-3), budgets.Budget(), steady, SETTINGS)
    assert got.verdict == results.AMBIGUOUS, got.judgement.reason
    assert "the memory probe took 30.0% longer than over the baseline runs, beyond their range" in got.judgement.reason
    assert "within the noise floor plus the probe's own shift" in got.judgement.reason
    # a drop beyond the floor plus the probe's 30 %: even a kernel slowed as much as the memory
    # cannot explain it
    beyond = verdict.judge(probed(0.5 / 2.2, 1.3e-3), budgets.Budget(), steady, SETTINGS)
    assert beyond.verdict == results.REGRESSED and "and the machine's shift by the memory probe" in beyond.judgement.reason
    faster = verdict.judge(probed(0.5 * 1.6, 0.7e-3), budgets.Budget(), steady, SETTINGS)  # +12 % relative
    assert faster.verdict == results.PASS and "would be an improvement, but the memory probe took 30.0% less" in faster.judgement.reason
    # the same drop with the probe where the window had it is a regression
    assert verdict.judge(probed(0.5 / 1.45, 1e-3), budgets.Budget(), steady, SETTINGS).verdict == results.REGRESSED
