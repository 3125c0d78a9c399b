"""The GPU checks, in one script for a session that has a GPU for a few minutes.

It runs as it is on the GPU machine, which has Python, torch, triton, pytest, pytest-xdist,
jinja2, numpy, nvidia-ml-py and hypothesis, nothing else (no jsonschema, ruptures, psycopg or
hatchling), no network, and the project not installed:

- every pytest step registers the plugin itself, `-p no:solgate -p pytest_solgate.plugin` with the
  checkout on PYTHONPATH (`no:solgate` keeps an installed entry point from registering it twice),
  and the profiles are found in the checkout's hw_profiles/;
- each step is a subprocess under its own time limit (``step_limits``), sized from the Triton
  compiles it makes (counted under the interpreter by benchmarks/count_compiles.py, see COMPILES),
  the measurements it takes and the first H200 run's step times; the limits add up to at most
  BUDGET_SECONDS, which fits one 10-minute device command, twice within 15 minutes of device time
  (tests/test_gpu_check.py checks the sum). The last step, the fused GEMM's correctness (133
  compiles), gets all that is left of the budget when it starts, not an estimate of its own (the
  first H200 run cut it after 12 of 19 tests at its 48 s estimate with 165 s of the budget left): at
  its limit it is interrupted (SIGINT, so pytest writes its summary and --junitxml), then killed
  after GRACE_SECONDS, and its line says exactly which tests ran (pytest -v writes each result as
  it comes, to a log that keeps stderr). A failing or timed-out step is reported and the next runs;
- every step runs in one scratch folder outside the checkout, and shares one state folder
  ($SOLGATE_STATE_DIR): the calibrate step's profile is the one the sol-measured step scores
  against (that step refuses to run when none was cached, rather than calibrate again inside its
  first test). Nothing is written into the checkout (no bytecode, the CUDA epilogue built in the
  scratch folder: $KERNELS_BUILD_DIR); at most 8 files go to --out (default: $OUT, the folder a
  device command brings back, else a temporary folder): $OUT/results.md (the section for
  benchmarks/results/gpu.md, ready to commit), steps.json, checks.json (every verdict line: the self-checks,
  the device checks, the locked-clock and measured-ceiling checks), do_bench.json,
  sol-datasheet.json, sol-measured.json, sol-report.html and logs.tar.gz (every step's log, JSON and
  JUnit XML, and the calibrated profile).

Steps:

1. do_bench: the plugin's median next to `triton.testing.do_bench` on the same inputs, in one
   process, for the Triton kernels at the suite's GPU shapes (target: within 3 %), and vector_add
   once more with a flush that reads instead of writes (does the written flush leave dirty lines
   the kernel pays for?);
2. selfcheck: benchmarks/gpu_selfcheck.py, checks of the measurement path itself on the device
   (events against wall time, cold against warm L2, a graph against the stream, NVML's clock
   against the kernel's own clock stamps, capture after a failed capture), one verdict line each;
3. sol-datasheet: the kernel SOL tests (`kernels/tests/test_sol.py`) against datasheet ceilings,
   then again with `--sol-lock-clocks=base` (the locked-clock check: no throttle retakes, no budget
   failure that the unlocked pass does not have);
4. calibrate: `solgate calibrate` (measured ceilings, cached in the shared state folder);
5. sol-measured: the same tests against those measured ceilings (the measured-ceiling check: no
   SOL above 1.0, kernels and torch references alike);
6. device-checks: benchmarks/gpu_device_checks.py, issue 35's checks in one pytest process: the
   plugin's median against CUPTI's kernel time (torch.profiler) and CUDA events on six workloads
   (within 3 %), work on a side stream failing with its cause, the plugin's energy against NVML's
   total-energy counter (within 5 %). (It took the place of a run of tests/test_gpu_paths.py on
   the device: those tests run against their fake GPU, which CI runs anyway.)
7. correctness: `kernels/tests/test_correctness.py` but the fused GEMM's, once, on XDIST_WORKERS;
8. correctness-gemm: the fused GEMM's correctness tests, last, on XDIST_WORKERS.

    python benchmarks/gpu_check.py [--out DIR] [--dry-run]

`--dry-run` runs every step on a CPU machine in about two minutes, with the same command lines:
do_bench against a stand-in timer; the self-checks against the fake GPU of tests/fake_gpu.py;
the SOL steps for real on benchmarks/gpu_check_standin.py (the fp32 SOL tests' names, small torch
kernels), against the H200 datasheet profile (unlocked, then with the locked-clock option, which a
CPU has no clock for) and then against the CPU's ceilings that the calibrate step measured
(`solgate calibrate` runs for real), plus a collection of kernels/tests/test_sol.py; the device
checks on the CPU (three small workloads, the profiler's CPU time for CUPTI's; the side-stream and
energy cases skipped), their lines marked as not judged; a collection of the correctness tests,
which a CPU cannot run. CI runs it in a fresh venv with only the GPU machine's packages, triton pinned to
its version (.ci/run), so it fails where the real run would.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # gpu_device_checks, also where this file is imported as a module

# The plugin, registered without its entry point (the project is not installed on the GPU machine).
PLUGIN_ARGS = ["-p", "no:solgate", "-p", "pytest_solgate.plugin"]

# 5.5 minutes: one device command (10 minutes at most) holds it, and a rerun still fits in the
# 15 minutes of device time a task gets, machine start included.
BUDGET_SECONDS = 330
# Distinct Triton specializations each step compiles on a cold cache, counted under the
# interpreter (2026-12-03, this VM: `TRITON_INTERPRET=1 PYTHONPATH=benchmarks python -m pytest
# kernels/tests/test_correctness.py -p count_compiles`, and the same for test_sol.py): correctness
# 52 (_fused_gemm_kernel 19, _softmax_kernel 12, _layernorm_kernel 9, _add_kernel 6,
# _depthwise_kernel 6), the SOL tests 8 (one of them the GEMM). The interpreter runs the GEMM with
# one config; on a GPU it autotunes 7, so each GEMM specialization is 7 compiles there: the GEMM's
# correctness is 133 compiles, which is why it is a step of its own, last. The self-check compiles
# one kernel (measure/sm_clock.py's stamps).
COMPILES = {"do_bench": 3, "selfcheck": 1, "sol": 8 + 6, "correctness": 52 - 19, "correctness-gemm": 19 * 7}
# The first H200 run's step times (2026-12-04, issue 35; the estimates below are at or above them):
# do_bench 9 s, selfcheck 5, sol-datasheet 32, calibrate 20, sol-measured 24, gpu-paths 9,
# correctness 19 (its nvcc build included), correctness-gemm 46 when cut after 12 of 19 tests on
# 4 workers; the GEMM's 19 tests ran in 40 s on 8 workers.
# Seconds per cold Triton compile on the GPU machine: an estimate (0.5-2 s is usual for triton 3.x
# on Hopper) until the first GPU run's steps.json gives the real figure.
SECONDS_PER_COMPILE = 1.0
# The correctness steps run on this many pytest-xdist workers: their compiles are CPU work (16
# cores there), and correctness does not time anything.
XDIST_WORKERS = 8
AUTOTUNE_SECONDS = 0.15  # one autotune benchmark of one GEMM config (do_bench's 25 ms warm-up + 100 ms)
STARTUP_SECONDS = 10  # Python, torch and pytest starting in a step's process
NVCC_SECONDS = 20  # the CUDA C++ epilogue's nvcc build: the whole correctness step took 19 s on the H200
SOL_MAX_TIME = 1.0  # --sol-max-time of the SOL and do_bench measurements (2 s by default)
MEASUREMENT_SECONDS = SOL_MAX_TIME + 0.5  # one sol.measure at most: its time budget plus warm-up
DO_BENCH_SECONDS = 0.5  # one triton.testing.do_bench call
SOL_MEASUREMENTS = 18  # two per SOL test (the kernel and the torch reference)
# Three passes of three bandwidth patterns, two matmul sizes of five precisions and fp8, each
# figure at least 0.5 s (the H200 took 20 s for one pattern and one size).
CALIBRATION_SECONDS = 45
SELFCHECK_SECONDS = 6  # six timings of at most 0.5 s, a 20 ms and a 50 ms kernel, two captures
# The device checks: six workloads timed by the plugin and 30 calls each under the profiler and
# events, two side-stream cases, the energy case's measurement and its 2 s counter window, and the
# integrity cases (issue 42): the honest one a measurement, the three 4 MiB cheats about --sol-min-time each.
DEVICE_CHECK_MEASUREMENTS = 6 + 2 + 1 + 1
DEVICE_CHECK_EXTRA_SECONDS = 6 * 1.0 + 2.0 + 2.0 + 3 * 0.4
# A step cut short gets SIGINT first, so that pytest prints its summary and writes --junitxml,
# then this long before it is killed; the grace is inside the step's limit.
GRACE_SECONDS = 10

# A dry run's limits: a CPU's times say nothing of the GPU's, and a shared CI machine can take
# minutes to import torch eight times; the GPU limits are checked by tests/test_gpu_check.py.
DRY_STEP_SECONDS = 300
DRY_BUDGET_SECONDS = 1500

# Triton kernels also timed by do_bench, at the suite's GPU shapes (see inputs()).
DO_BENCH_KERNELS = ("vector_add", "softmax", "layernorm")
STEPS = ("do_bench", "selfcheck", "sol-datasheet", "calibrate", "sol-measured", "device-checks", "correctness",
         "correctness-gemm")
LAST_STEP = STEPS[-1]  # given all that is left of the budget when it starts
# The least the last step must be left by the others' limits (the budget test checks it): its 19
# tests took 40 s on 8 workers on the H200. At run time it gets all that is left, and the steps
# before it took about 190 s there (their first run's times, sol-datasheet twice), not their 287.
LAST_STEP_MINIMUM = 40


def wanted_seconds(label: str) -> float:
    """Each step's own estimate, from its compiles and measurements."""
    compile_seconds = {k: v * SECONDS_PER_COMPILE for k, v in COMPILES.items()}
    sol_measurements = SOL_MEASUREMENTS * MEASUREMENT_SECONDS
    return STARTUP_SECONDS + {
        # each kernel measured by the plugin and by do_bench, and vector_add twice more (the flush check)
        "do_bench": compile_seconds["do_bench"] + len(DO_BENCH_KERNELS) * (MEASUREMENT_SECONDS + DO_BENCH_SECONDS)
        + 2 * MEASUREMENT_SECONDS,
        "selfcheck": compile_seconds["selfcheck"] + SELFCHECK_SECONDS,
        # unlocked, then locked at the base clock (a second process: startup; Triton's cache compiled)
        "sol-datasheet": compile_seconds["sol"] + 2 * sol_measurements + STARTUP_SECONDS,
        "calibrate": CALIBRATION_SECONDS,
        "sol-measured": sol_measurements,  # compiled by sol-datasheet (Triton's cache); the profile cached by calibrate
        "device-checks": DEVICE_CHECK_MEASUREMENTS * MEASUREMENT_SECONDS + DEVICE_CHECK_EXTRA_SECONDS,
        "correctness": compile_seconds["correctness"] / XDIST_WORKERS + NVCC_SECONDS,
        "correctness-gemm": (compile_seconds["correctness-gemm"] + 19 * 7 * AUTOTUNE_SECONDS) / XDIST_WORKERS,
    }[label]


def step_limits(budget: float = BUDGET_SECONDS) -> dict[str, float]:
    """Every step's time limit: its own estimate, but the last step's, which is all the others
    leave of the budget (at run time, what is left when it starts). Their sum is the budget."""
    limits = {label: wanted_seconds(label) for label in STEPS if label != LAST_STEP}
    left = budget - sum(limits.values())
    if left < LAST_STEP_MINIMUM:
        raise ValueError(f"the steps before {LAST_STEP} want {sum(limits.values()):.0f} s of a {budget:.0f} s budget")
    limits[LAST_STEP] = left
    return limits


def step_limit(label: str, limits: dict[str, float], clock: "Clock", dry: bool = False) -> float:
    """A step's limit when it starts: its own, but the last step's, which is all that is left of
    the budget then (on a GPU; a dry run's steps each have DRY_STEP_SECONDS)."""
    return clock.left() if label == LAST_STEP and not dry else limits[label]


def is_pytest(args: list[str]) -> bool:
    """Whether a step's command runs pytest, from its program or module (``python -m pytest``,
    ``pytest``, ``py.test``), never from "pytest" anywhere in it: a checkout under a folder whose
    name holds "pytest" (pytest's own tmp_path does) made every step read as pytest."""
    program = Path(args[0]).name if args else ""
    if program in ("pytest", "py.test"):
        return True
    module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
    return module in ("pytest", "py.test")


def step(label: str, action: Callable[[], str]) -> dict[str, Any]:
    """Run one guarded step and print its line as soon as it ends."""
    started = time.perf_counter()
    try:
        detail, ok = action(), True
    except Exception as exc:  # a failing step must not lose the others
        detail, ok = f"{type(exc).__name__}: {exc}", False
    seconds = time.perf_counter() - started
    print(f"{label:<16} {'ok' if ok else 'FAILED':<7} {seconds:6.1f} s  {detail}", flush=True)
    return {"step": label, "ok": ok, "seconds": seconds, "detail": detail}


def step_environment(work: Path) -> dict[str, str]:
    """The environment of every step: the checkout first on the path (nothing is installed), one
    state folder for all steps, and nothing written into the checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH", "")])])
    env["SOLGATE_STATE_DIR"] = str(work / ".solgate")  # read by pytest_solgate.record.gitinfo.state_dir
    # The per-user cache (a CPU's calibration, support/locations.user_cache_dir) in the same folder:
    # the dry run's calibrate step caches there, and the machine's home is left alone.
    env["SOLGATE_CACHE_DIR"] = str(work / ".solgate")
    env["KERNELS_BUILD_DIR"] = str(work / "kernels-build")  # the CUDA epilogue's nvcc build
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the checkout
    return env


# pytest -v's line for each test as it ends: "path::test PASSED" or, under xdist,
# "[gw0] [ 50%] PASSED path::test".
RESULT_LINE = re.compile(r"^(?:\[gw\d+\] \[\s*\d+%\] (?P<xo>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (?P<xid>\S+::\S+)"
                         r"|(?P<id>\S+::\S+) (?P<o>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)")
COLLECTED = re.compile(r"collected (\d+) items?(?: / (\d+) deselected)?|\[(\d+) items?\]")


def tests_that_ran(log: str) -> dict[str, str]:
    """Test id -> outcome for every test whose result the log shows (pytest -v)."""
    ran = {}
    for line in log.splitlines():
        found = RESULT_LINE.match(line.strip())
        if found:
            ran[found["xid"] or found["id"]] = found["xo"] or found["o"]
    return ran


def tests_collected(log: str) -> int | None:
    found = COLLECTED.search(log)
    if not found:
        return None
    if found[3]:
        return int(found[3])
    return int(found[1]) - int(found[2] or 0)


def what_ran(log: str) -> str:
    """'12 of 19 tests ran: 12 passed', from the log of a pytest step cut short."""
    ran = tests_that_ran(log)
    total = tests_collected(log)
    counts: dict[str, int] = {}
    for outcome in ran.values():
        counts[outcome.lower()] = counts.get(outcome.lower(), 0) + 1
    tally = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "none finished"
    return f"{len(ran)} of {total if total is not None else '?'} tests ran: {tally}"


def command(label: str, args: list[str], work: Path, limit: Callable[[], float], grace: float = GRACE_SECONDS) -> Callable[[], str]:
    """A subprocess step run in the scratch folder; its time limit is taken when it starts, from
    what the budget has left. Its stdout and stderr go to <work>/<label>.log as they come, so a
    step cut short keeps all it wrote; at the limit it gets SIGINT (pytest then prints its summary
    and writes --junitxml), and is killed ``grace`` seconds later."""

    def run() -> str:
        timeout = limit()
        log = work / f"{label}.log"
        with log.open("w") as sink:
            child = subprocess.Popen(args, cwd=work, env=step_environment(work), stdout=sink, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
            try:
                child.wait(timeout=max(1.0, timeout - grace))
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
                text = log.read_text(errors="replace")
                ran = f": {what_ran(text)}" if is_pytest(args) else ""
                raise TimeoutError(f"timed out after {timeout:.0f} s{ran} (log {log.name})") from None
        text = log.read_text(errors="replace")
        last = (text.strip().splitlines() or [""])[-1]
        if child.returncode != 0:
            raise RuntimeError(f"exit {child.returncode}: {last} (log {log.name})")
        return f"{last} (log {log.name})"

    return run


def pytest_command(tests: list[str], *options: str, verbosity: str = "-q") -> list[str]:
    """``verbosity="-v"``: each test's result is logged as it ends (``tests_that_ran``)."""
    return [sys.executable, "-m", "pytest", *tests, verbosity, "-p", "no:cacheprovider", *PLUGIN_ARGS, *options]


def step_commands(out: Path, work: Path, dry: bool) -> dict[str, list[list[str]]]:
    """Each step's command lines (a dry run's SOL steps run the stand-in suite, then collect the real one)."""
    sol_file = str(ROOT / "kernels/tests/test_sol.py")
    sol_tests = [str(ROOT / "benchmarks/gpu_check_standin.py")] if dry else [sol_file]
    quick = ["--sol-min-time=0", "--sol-max-time=0.2"] if dry else [f"--sol-max-time={SOL_MAX_TIME:g}"]
    sol = ["--sol-no-save", "--sol-baseline=none", *quick]
    collect = [pytest_command([sol_file], "--collect-only")] if dry else []
    correctness = [str(ROOT / "kernels/tests/test_correctness.py")]
    # -v: each test's result is in the log as it ends; --junitxml: the whole list when pytest ends
    # (or is interrupted); -n: the compiles on several cores (xdist registered by name, as the
    # plugin is, for a pytest that loads no entry points).
    reported = ["-p", "no:xdist", "-p", "xdist.plugin", "-n", str(XDIST_WORKERS)]
    dry_flag = ["--dry-run"] if dry else []
    return {
        "do_bench": [[sys.executable, str(Path(__file__).resolve()), "--step", "do_bench", "--out", str(out), *dry_flag]],
        "selfcheck": [[sys.executable, str(ROOT / "benchmarks/gpu_selfcheck.py"), "--out", str(work / "selfcheck.json"),
                       *dry_flag]],
        # The datasheet: a dry run names the H200's (a CPU has none); on the GPU it is detected.
        # Then the same tests with the SM clock locked at base, compared in checks.json.
        "sol-datasheet": [pytest_command(sol_tests, *sol, *(["--sol-profile=h200"] if dry else []),
                                         f"--sol-json={out}/sol-datasheet.json", f"--sol-report={out}/sol-report.html"),
                          pytest_command(sol_tests, *sol, *(["--sol-profile=h200"] if dry else []),
                                         "--sol-lock-clocks=base", f"--sol-json={work}/sol-locked.json"),
                          *collect],
        "calibrate": [[sys.executable, "-m", "pytest_solgate.cli", "calibrate"]],
        # The calibrate step's profile, from the shared state folder: the GPU's, or in a dry run the CPU's.
        "sol-measured": [pytest_command(sol_tests, *sol, "--sol-ceilings=measured", f"--sol-json={out}/sol-measured.json")],
        "device-checks": [[sys.executable, str(ROOT / "benchmarks/gpu_device_checks.py"), "--out",
                           str(work / "device-checks.json"), "--work", str(work), *dry_flag]],
        "correctness": [pytest_command(correctness, *reported, f"--junitxml={work}/correctness.xml", "-k", "not fused_gemm",
                                       *(["--collect-only"] if dry else []), verbosity="-v")],
        "correctness-gemm": [pytest_command(correctness, *reported, f"--junitxml={work}/correctness-gemm.xml", "-k",
                                            "fused_gemm", *(["--collect-only"] if dry else []), verbosity="-v")],
    }


def calibrated_profiles(work: Path) -> list[Path]:
    return sorted((work / ".solgate" / "profiles").glob("*.toml"))


def needs_calibrated_profile(work: Path, run: Callable[[], str]) -> Callable[[], str]:
    """The sol-measured step runs only on the profile the calibrate step cached: without one, it
    would calibrate again inside its first test (and score against figures calibrate refused)."""

    def checked() -> str:
        if not calibrated_profiles(work):
            raise RuntimeError(f"the calibrate step cached no profile in {work / '.solgate' / 'profiles'} "
                               "(its figures were not fit to cache: see calibrate.log); not run")
        return run()

    return checked


def run_commands(label: str, commands: list[list[str]], work: Path, clock: Clock, limit_seconds: float) -> Callable[[], str]:
    """The step's commands one after another, all of them within the step's limit (and the budget).
    A command that fails does not stop the next (the locked pass runs where a test of the unlocked
    one failed); the step fails with every command's line."""

    def run() -> str:
        started = time.monotonic()

        def left() -> float:
            return clock.limit(limit_seconds - (time.monotonic() - started))

        details, failures = [], []
        for i, args in enumerate(commands):
            try:
                details.append(command(label if i == 0 else f"{label}-{i}", args, work, left)())
            except Exception as exc:  # reported with the others' lines below
                failures.append(exc)
                details.append(f"{type(exc).__name__}: {exc}")
        if len(commands) == 1 and failures:
            raise failures[0]
        if failures:
            raise RuntimeError(f"{len(failures)} of {len(commands)} commands failed: " + "; ".join(details))
        return "; ".join(details)

    return run


class Clock:
    """The overall budget: each step gets at most its own limit and what is left."""

    def __init__(self, budget: float) -> None:
        self.deadline = time.monotonic() + budget

    def limit(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.deadline - time.monotonic()))

    def left(self) -> float:
        return self.limit(float("inf"))


# --- step 1: do_bench, in its own process ----------------------------------------------------------


def inputs(torch: Any, kernel: str, device: str, dry: bool) -> tuple[str, Callable[[], Any]]:
    """The suite's GPU shapes (small ones in a dry run) and a zero-argument call of the kernel."""
    from kernels import layernorm, softmax, vector_add

    if kernel == "vector_add":
        n = (1 << 14) if dry else (1 << 28)
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        out = torch.empty_like(x)
        return f"{n}", lambda: vector_add.add(x, y, out)
    rows, cols = (64, 128) if dry else (32768, 4096)
    x = torch.randn(rows, cols, device=device)
    out = torch.empty_like(x)
    if kernel == "softmax":
        return f"{rows}x{cols}", lambda: softmax.softmax(x, out)
    w, b = torch.randn(cols, device=device), torch.randn(cols, device=device)
    return f"{rows}x{cols}", lambda: layernorm.layernorm(x, w, b, out=out)


def flush_by_reading(torch: Any, call: Callable[[], Any]) -> dict[str, float]:
    """vector_add timed with the usual flush (a write of twice the L2) and with one that reads the
    same buffer: a written flush leaves dirty lines that the timed kernel may pay to write back."""
    from pytest_solgate.measure import backends, sampling
    from pytest_solgate.support.settings import SamplingSettings

    device = torch.device("cuda", torch.cuda.current_device())
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    seconds = {}
    for mode in ("write", "read"):
        backend = backends.CudaBackend(torch, device, l2_bytes, None, flush_by_reading=mode == "read")
        seconds[mode] = sampling.take_timing(call, backend, SamplingSettings(max_time=SOL_MAX_TIME)).seconds
    return {"write_flush_s": seconds["write"], "read_flush_s": seconds["read"], "read_over_write": seconds["read"] / seconds["write"]}


def do_bench_comparison(out: Path, dry: bool) -> str:
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch

    from pytest_solgate.engine import Engine
    from pytest_solgate.support.settings import parse_settings

    if dry:
        def do_bench(fn: Callable[[], Any], return_mode: str = "median") -> float:  # stand-in, in ms
            fn()
            started = time.perf_counter()
            for _ in range(3):
                fn()
            return (time.perf_counter() - started) / 3 * 1e3

        settings = parse_settings({"sol_device": "cpu", "sol_min_time": "0", "sol_max_time": "0.05", "sol_profile": "h100-sxm"})
    else:
        from triton.testing import do_bench

        settings = parse_settings({"sol_max_time": f"{SOL_MAX_TIME:g}"})
    from pytest_solgate.record.gitinfo import state_dir

    engine = Engine(settings, state_dir(Path.cwd()), announce=lambda text: None)  # the shared state folder
    device = "cpu" if dry else "cuda"
    rows = []
    for kernel in DO_BENCH_KERNELS:
        shape, call = inputs(torch, kernel, device, dry)
        # Only the medians are compared here; the declared work does not enter them.
        m = engine.measure(f"gpu_check::{kernel}", call, bytes=1e6)
        theirs = do_bench(call, return_mode="median") / 1e3
        row = {"kernel": kernel, "shape": shape, "solgate_s": m.timing.seconds, "do_bench_s": theirs,
               "ratio": m.timing.seconds / theirs, "timing_mode": m.timing.mode}
        if kernel == "vector_add" and not dry:
            row.update(flush_by_reading(torch, call))
        rows.append(row)
    (out / "do_bench.json").write_text(json.dumps(rows, indent=2))
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    return f"worst ratio {worst['ratio']:.3f} ({worst['kernel']}; target within 3 %)"


# --- the results ----------------------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def table(out: Path) -> list[str]:
    """kernel, shape, median, achieved, SOL, torch's SOL, do_bench median and the ratio."""
    path = out / "sol-datasheet.json"
    if not path.exists():
        return ["(no SOL results: the sol-datasheet step wrote none)"]
    bench = {}
    if (out / "do_bench.json").exists():
        bench = {row["kernel"]: row for row in json.loads((out / "do_bench.json").read_text())}
    measurements = json.loads(path.read_text())["measurements"]
    if not measurements:
        return ["(no SOL measurements)"]
    lines = [f"{'test':<36} {'name':<13} {'shape':>10} {'median':>11} {'achieved':>15} {'SOL':>6} "
             f"{'torch SOL':>9} {'do_bench':>11} {'ratio':>6}"]
    for m in (m for m in measurements if m["gate"]):
        test = m["test"].split("::")[-1]
        torch_sol = next((r["sol"] for r in measurements if r["test"] == m["test"] and not r["gate"]), None)
        achieved = f"{m['gbps']:.0f} GB/s" if m["bound"] == "memory" else f"{m['tflops']:.1f} TFLOP/s"
        # do_bench timed the fp32 variant of each kernel (vector_add, softmax, layernorm).
        kernel = test.removeprefix("test_").split("[")[0]
        row = bench.get(kernel) if "[bf16]" not in test else None
        lines.append(" ".join([
            f"{test:<36}", f"{m['name']:<13}", f"{row['shape'] if row else '-':>10}", f"{m['seconds'] * 1e6:>9.1f}us",
            f"{achieved:>15}", f"{m['sol']:>6.3f}", f"{torch_sol:>9.3f}" if torch_sol is not None else f"{'-':>9}",
            f"{row['do_bench_s'] * 1e6:>9.1f}us" if row else f"{'-':>11}",
            f"{row['ratio']:>6.3f}" if row else f"{'-':>6}",  # both medians from the do_bench process
        ]))
    return lines


def _budget(m: dict[str, Any]) -> str:
    budget = m.get("budget") or {}
    value = budget.get("min")
    return f"{value:g}" if isinstance(value, (int, float)) else "-"


def results_markdown(out: Path, steps: list[dict[str, Any]], dry: bool) -> str:
    """The section benchmarks/results/gpu.md holds for a GPU run, ready to paste: where, when, with what;
    every gated measurement's SOL against the datasheet and the measured ceilings, the torch
    reference's SOL, do_bench; the flush check; the steps."""
    datasheet, measured = _load(out / "sol-datasheet.json"), _load(out / "sol-measured.json")
    run = datasheet.get("run") or measured.get("run") or {}
    bench = {row["kernel"]: row for row in json.loads((out / "do_bench.json").read_text())} if (out / "do_bench.json").exists() else {}
    versions = ", ".join(f"{k} {run[k]}" for k in ("driver", "cuda", "torch", "triton", "python") if run.get(k))
    device = run.get("device") or ("a CPU (dry run)" if dry else "unknown device")
    ok = sum(s["ok"] for s in steps)
    lines = [
        f"### {'Dry run' if dry else 'GPU run'} on {device}: `python benchmarks/gpu_check.py{' --dry-run' if dry else ''}`",
        "",
        f"{datetime.date.today().isoformat()}, host {run.get('host', platform.node())}, {versions or 'versions unknown'}; "
        f"{ok} of {len(steps)} steps ok in {sum(s['seconds'] for s in steps):.0f} s.",
        "",
        "| test | name | median | achieved | budget | SOL (datasheet) | SOL (measured) | SOL at clock | torch SOL | do_bench | plugin / do_bench | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(m["test"], m["name"]): m for m in measured.get("measurements", [])}
    rows = datasheet.get("measurements", [])
    for m in (m for m in rows if m["gate"]):
        test = m["test"].split("::")[-1]
        again = by_key.get((m["test"], m["name"]))
        reference = next((r for r in rows if r["test"] == m["test"] and not r["gate"]), None)
        achieved = f"{m['gbps']:.0f} GB/s" if m["bound"] == "memory" else f"{m['tflops']:.1f} TFLOP/s"
        kernel = test.removeprefix("test_").split("[")[0]
        row = bench.get(kernel) if test.endswith("[fp32]") else None
        cells = [
            test, m["name"], f"{m['seconds'] * 1e6:.1f} us", achieved, _budget(m), f"{m['sol']:.3f}",
            f"{again['sol']:.3f}" if again else "-",
            f"{m['sol_at_clock']:.3f}" if m.get("sol_at_clock") is not None else "-",
            f"{reference['sol']:.3f}" if reference else "-",
            f"{row['do_bench_s'] * 1e6:.1f} us" if row else "-",
            # The plugin's median and do_bench's, taken in one process on the same inputs: the SOL
            # step's median comes from another process, with other tensors and another warm-up.
            f"{row['ratio']:.3f}" if row else "-",
            m.get("verdict", "-"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if not rows:
        lines.append("| (no SOL measurements: the sol-datasheet step wrote none) |" + " |" * 11)
    flush = bench.get("vector_add", {})
    if "read_over_write" in flush:
        lines += ["", f"Flush check (vector_add): {flush['write_flush_s'] * 1e6:.1f} us after the written flush, "
                      f"{flush['read_flush_s'] * 1e6:.1f} us after a flush that reads (ratio {flush['read_over_write']:.3f})."]
    checks = json.loads((out / "checks.json").read_text()) if (out / "checks.json").exists() else []
    if checks:
        lines += ["", "Checks of the measurement path (benchmarks/gpu_selfcheck.py, benchmarks/gpu_device_checks.py):", ""]
        lines += [f"- {check['line']}" for check in checks]
    lines += ["", "| step | ok | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s['step']} | {'ok' if s['ok'] else 'FAILED'} | {s['seconds']:.1f} | {s['detail'].replace('|', '/')} |"
              for s in steps]
    return "\n".join(lines) + "\n"


def all_checks(out: Path, work: Path, dry: bool) -> list[dict[str, Any]]:
    """Every verdict line of the run: the self-checks' and the device checks' (written by their
    steps), and the locked-clock and measured-ceiling checks judged here from the SOL steps' JSON."""
    import gpu_device_checks as device_checks

    def written(name: str, check: str) -> list[dict[str, Any]]:
        path = work / name
        if path.is_file():
            return json.loads(path.read_text())
        return [asdict(device_checks.Verdict(check, False, f"{check}: FAILED: its step wrote no verdicts (see its log)"))]

    unlocked = device_checks.load_measurements(out / "sol-datasheet.json")
    locked = device_checks.load_measurements(work / "sol-locked.json")
    measured = device_checks.load_measurements(out / "sol-measured.json")
    return [*written("selfcheck.json", "selfcheck"), *written("device-checks.json", "device-checks"),
            asdict(device_checks.locked_clock_verdict(unlocked, locked, dry)),
            asdict(device_checks.measured_ceiling_verdict(measured, device_checks.DRY_RUN_LIMIT if dry else 1.0))]


def archive_logs(work: Path, out: Path) -> None:
    """Every step's log, JSON and JUnit XML and the calibrated profile(s), in one file (a device
    command brings back 8)."""
    with tarfile.open(out / "logs.tar.gz", "w:gz") as archive:
        for path in (sorted(work.glob("*.log")) + sorted(work.glob("*.xml")) + sorted(work.glob("*.json"))
                     + sorted(work.glob("*.jsonl")) + calibrated_profiles(work)):
            archive.add(path, arcname=path.relative_to(work).as_posix())


def default_out() -> Path:
    """$OUT (the folder a device command brings back), else a temporary folder: never the checkout."""
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(tempfile.gettempdir()) / "solgate-gpu-check"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the results go (default: $OUT, else a temporary folder)")
    parser.add_argument("--dry-run", action="store_true", help="run every step on a CPU machine")
    parser.add_argument("--step", choices=["do_bench"], help=argparse.SUPPRESS)  # one step, in its own process
    args = parser.parse_args()
    out = (args.out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dry = args.dry_run
    if args.step == "do_bench":
        sys.path.insert(0, str(ROOT))
        print(do_bench_comparison(out, dry))
        return
    import torch

    if not dry and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; use --dry-run to walk the steps on a CPU")
        sys.exit(0)
    where = "dry run on the CPU" if dry else f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    budget = DRY_BUDGET_SECONDS if dry else BUDGET_SECONDS
    print(f"gpu_check: {where}; torch {torch.__version__}; budget {budget} s; results in {out}", flush=True)
    clock = Clock(budget)
    work = Path(tempfile.mkdtemp(prefix="solgate-gpu-check-"))  # the steps' cwd: their state folder, logs, builds
    commands = step_commands(out, work, dry)
    limits = {label: DRY_STEP_SECONDS for label in STEPS} if dry else step_limits(budget)
    results = []
    for label in STEPS:
        action = run_commands(label, commands[label], work, clock, step_limit(label, limits, clock, dry))
        if label == "sol-measured":
            action = needs_calibrated_profile(work, action)
        results.append(step(label, action))
    (out / "steps.json").write_text(json.dumps(results, indent=2))
    (out / "checks.json").write_text(json.dumps(all_checks(out, work, dry), indent=2))
    (out / "results.md").write_text(results_markdown(out, results, dry))
    archive_logs(work, out)
    for line in table(out):
        print(line)
    for check in json.loads((out / "checks.json").read_text()):
        print(check["line"])
    failed = [r["step"] for r in results if not r["ok"]]
    print(f"gpu_check: {len(results) - len(failed)} of {len(results)} steps ok" + (f"; failed: {', '.join(failed)}" if failed else "")
          + f"; results in {out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
