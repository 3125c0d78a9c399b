"""benchmarks/gpu_device_checks.py's verdicts, from the files the plugin writes (--sol-json, JUnit
XML) and the workloads' side figures, as the next H200 run will hand them over (issue 35's "Done
when"): the figures are those of the first H200 run where it measured them."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_device_checks as checks  # noqa: E402


def measurement(name, seconds=1e-3, test="benchmarks/gpu_check_workloads.py::test_timing", **extra):
    return {"test": test, "name": name, "seconds": seconds, "sol": 0.5, "verdict": "pass", "reason": "", **extra}


# issue 35 item 1: plugin, CUPTI and events on the first H200 run
FIRST_RUN = {"copy-1GiB-fp32": (507.6, 508.1, 509.1), "add-256K-fp32": (4.70, 1.66, 5.10)}


def test_the_plugin_is_judged_against_cuptis_kernel_time_within_3_percent():
    measurements = [measurement(w, plugin * 1e-6, timing_mode="events") for w, (plugin, _, _) in FIRST_RUN.items()]
    side = [{"workload": w, "cupti_s": cupti * 1e-6, "events_s": events * 1e-6} for w, (_, cupti, events) in FIRST_RUN.items()]
    copy, add = checks.timing_verdicts(measurements, side, dry=False)
    assert copy.ok and copy.line == ("cupti[copy-1GiB-fp32]: ok: plugin 507.60 us (events), CUPTI 508.10 us, "
                                     "events 509.10 us, plugin / CUPTI 0.999 (target within 3%)")
    assert not add.ok and add.line.startswith("cupti[add-256K-fp32]: FAILED: plugin 4.70 us") and "2.831" in add.line
    fixed = checks.timing_verdicts([measurement("add-256K-fp32", 1.69e-6, timing_mode="cupti")], side[1:], dry=False)
    assert fixed[0].ok and "(cupti)" in fixed[0].line
    # a dry run's figures are the CPU's: shown, not judged
    (dry,) = checks.timing_verdicts(measurements[1:], side[1:], dry=True)
    assert dry.ok and dry.line.startswith("cupti[add-256K-fp32]: not judged (dry run on a CPU)")
    (missing,) = checks.timing_verdicts([], side[:1], dry=False)
    assert not missing.ok and "has no measurement 'copy-1GiB-fp32'" in missing.line


def junit(*cases):
    body = "".join(f'<testcase classname="benchmarks.gpu_check_workloads" name="{name}" time="1.0">{inner}</testcase>'
                   for name, inner in cases)
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'


ABOVE_SOL = ('<failure message="Failed: side-stream-all: SOL 84.6 is above 1: the kernel ran faster than the '
             'hardware allows; check the declared bytes, or whether the cache served it">...</failure>')
NAMED = ('<failure message="Failed: side-stream-small: work was still running on the device when the timed stream '
         'was done (launched on another stream): the timer could not see it">...</failure>')


def test_the_side_stream_cases_must_fail_naming_the_hidden_work():
    """The first H200 run: 1.98 us, SOL 84.6, failed as above-sol with advice about declared bytes."""
    plugin = [measurement("side-stream-all", 1.98e-6, sol=84.6, verdict="above-sol"), measurement("side-stream-small")]
    before = checks.side_stream_verdicts(checks.junit_cases(junit(("test_side_stream[all]", ABOVE_SOL),
                                                                  ("test_side_stream[small]", ""))), plugin)
    assert [v.ok for v in before] == [False, False]
    assert "without naming the hidden work" in before[0].line and "SOL 84.6" in before[0].line
    assert "it passed" in before[1].line and "went unseen" in before[1].line  # small enough to stay under 1
    after = checks.side_stream_verdicts(checks.junit_cases(junit(("test_side_stream[all]", NAMED.replace("small", "all")),
                                                                 ("test_side_stream[small]", NAMED))), [])
    assert all(v.ok for v in after)
    assert after[1].line.startswith("side-stream[small]: ok: it failed (naming the cause): Failed: side-stream-small: "
                                    "work was still running")
    skipped = checks.side_stream_verdicts(checks.junit_cases(junit(
        ("test_side_stream[all]", '<skipped message="a CPU has no CUDA streams (dry run)"/>'))), [])
    assert skipped[0].ok and skipped[0].line == "side-stream[all]: not run (a CPU has no CUDA streams (dry run))"
    assert not skipped[1].ok and skipped[1].line == "side-stream[small]: FAILED: the case did not run"


def test_energy_is_judged_against_the_total_energy_counter_within_5_percent():
    """The first H200 run: the plugin 0.169-0.171 J/GB, the counter 0.146 J/GB (615 W)."""
    gib2 = 2 * (1 << 30)  # a 1 GiB copy moves 2 GiB
    counter = {"workload": "energy-copy-1GiB", "counter_joules_per_call": 0.146 * gib2 / 1e9, "counter_watts": 615.0,
               "counter_calls": 3900, "bytes": gib2}
    overstated = checks.energy_verdict([measurement("energy-copy-1GiB", joules=0.170 * gib2 / 1e9)], [counter])
    assert not overstated.ok and overstated.line.startswith("energy: FAILED: the plugin 0.170 J/GB, NVML's total-energy "
                                                            "counter 0.146 J/GB (615 W mean over 3900 back-to-back copies)")
    right = checks.energy_verdict([measurement("energy-copy-1GiB", joules=0.149 * gib2 / 1e9)], [counter])
    assert right.ok and "plugin / counter 1.021" in right.line
    renamed = checks.energy_verdict([measurement("energy-copy-1GiB", energy_joules_per_call=0.149 * gib2 / 1e9)], [counter])
    assert renamed.ok
    none = checks.energy_verdict([measurement("energy-copy-1GiB")], [counter])
    assert not none.ok and "recorded no energy" in none.line
    assert checks.energy_verdict([], [], skipped="no NVML").line == "energy: not run (no NVML)"


def sol_record(test, name, verdict="pass", sol=0.8, **extra):
    return {"test": f"kernels/tests/test_sol.py::{test}", "name": name, "verdict": verdict, "sol": sol, "reason": "",
            **extra}


def test_the_locked_pass_has_no_throttle_retakes_and_no_budget_failure_the_unlocked_one_lacks():
    """The first H200 run: at the locked base clock every sample read as throttled and was retaken,
    and the fused GEMM failed its 0.60 budget at 0.57 ("throttled: check cooling, power and clocks")."""
    unlocked = [sol_record("test_fused_gemm", "triton", sol=0.669), sol_record("test_depthwise", "triton", "below-budget")]
    locked_env = {"environment": {"sm_clocks": "locked base"}}
    broken = [sol_record("test_fused_gemm", "triton", "below-budget", 0.57, dropped_samples=40, throttled=True,
                         reason="throttled: check cooling, power and clocks", **locked_env),
              sol_record("test_depthwise", "triton", "below-budget", **locked_env)]
    verdict = checks.locked_clock_verdict(unlocked, broken)
    assert not verdict.ok
    assert verdict.line == ("locked-clocks: FAILED: 2 measurements under locked base: 40 throttle retakes, 1 throttled "
                            "(test_fused_gemm/triton), 1 budget failures the unlocked pass does not have: "
                            "test_fused_gemm/triton (below-budget: throttled: check cooling, power and clocks)")
    good = [sol_record("test_fused_gemm", "triton", sol=0.62, **locked_env),
            sol_record("test_depthwise", "triton", "below-budget", **locked_env)]  # fails unlocked too
    assert checks.locked_clock_verdict(unlocked, good).ok
    assert checks.locked_clock_verdict(unlocked, good, dry=True).line.startswith("locked-clocks: not judged (dry run")
    assert not checks.locked_clock_verdict(unlocked, []).ok


def test_no_sol_against_measured_ceilings_may_exceed_one():
    """The first H200 run against the 4220 GB/s copy: vector_add 1.028, bf16 1.020, CUDA epilogue 1.012."""
    before = [sol_record("test_vector_add[fp32]", "triton", sol=1.028, profile="h200-measured-1a2b"),
              sol_record("test_vector_add[bf16]", "triton", sol=1.020), sol_record("test_softmax[fp32]", "torch", sol=0.5)]
    verdict = checks.measured_ceiling_verdict(before)
    assert not verdict.ok and verdict.line == ("measured-ceilings: FAILED: 2 of 3 SOLs above 1.00 against "
                                               "h200-measured-1a2b: test_vector_add[fp32]/triton 1.028, "
                                               "test_vector_add[bf16]/triton 1.020")
    after = [dict(m, sol=m["sol"] * 4220 / 4400) for m in before]  # against a faster pattern's ceiling
    verdict = checks.measured_ceiling_verdict(after)
    assert verdict.ok and "none above 1.00 (highest test_vector_add[fp32]/triton 0.986)" in verdict.line
    assert not checks.measured_ceiling_verdict([]).ok
    # A dry run's limit is the plugin's: calibration's own pattern reads about 1.0 on a shared CPU
    dry = [sol_record("test_vector_add[fp32]", "triton", sol=1.02, profile="cpu-1a2b")]
    assert checks.measured_ceiling_verdict(dry, checks.DRY_RUN_LIMIT).ok
    cached = [sol_record("test_vector_add[fp32]", "triton", sol=1.57, profile="cpu-1a2b")]  # CI: a cache-resident add
    assert not checks.measured_ceiling_verdict(cached, checks.DRY_RUN_LIMIT).ok


def test_the_failing_verdicts_are_the_plugins():
    """The script reads verdicts from the JSON without importing the plugin (its parent process has
    no checkout on sys.path on the device); the values must stay the plugin's."""
    from pytest_solgate.results import FAILING

    assert set(checks.FAILING) == {verdict.value for verdict in FAILING}
