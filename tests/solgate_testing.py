"""Constants shared by the test modules: a synthetic profile and kernels of known duration."""

# 1 GB/s and 1 GFLOP/s: a 1 ms busy-wait declared as 0.95 MB has SOL 0.95, as 0.5 MB has SOL 0.5.
SYNTHETIC_PROFILE = """
id = "synthetic"
name = "Synthetic test device"
kind = "cpu"
memory_bandwidth_gbps = 1
ceilings = "measured"
source = "tests"

[peak_tflops]
fp32 = 0.001
bf16_tensor = 0.002
"""

KERNELS = '''
import time

def busy(seconds):
    # spin until this thread has used ``seconds`` of CPU: what the CPU timer reads, however busy
    # the machine (a spin on wall time would do less work, and read less, when preempted)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
'''

# The same ``busy`` on a fake clock: the CPU backend's timer reads a counter that ``busy`` advances
# by exactly ``seconds``, so every sample is exact and a verdict cannot depend on how loaded the
# machine is. Everything else (sampling loop, cache flush, scoring, judging, history) is real.
FAKE_CLOCK_KERNELS = '''
import pytest
from pytest_solgate.measure.backends import CpuClock

FAKE_NS = [0]
FAKE_PROBE_NS = [1_000_000]  # the memory probe reads 1 ms: the memory's usual speed, unless a test sets another

def busy(seconds):
    FAKE_NS[0] += round(seconds * 1e9)

@pytest.fixture
def sol_clock():
    # wall, thread CPU and process CPU time alike: the kernel runs on its thread alone, never waiting
    return CpuClock(now=lambda: (FAKE_NS[0],) * 3, probe=lambda: FAKE_NS.__setitem__(0, FAKE_NS[0] + FAKE_PROBE_NS[0]))
'''

FAST_TIMING = ["--sol-device=cpu", "--sol-min-time=0.02", "--sol-max-time=0.3", "--sol-warmup-time=0.01", "-p",
               "no:cacheprovider"]
# On the fake clock every sample is exact: sampling stops at ten samples and the noise target,
# whatever the load. The time budget is wall time, though, and on a loaded machine 0.3 s can run
# out before ten samples, which flags the run noisy (never a baseline) and changes the verdicts
# (seen with two CPU hogs beside the suite). A budget these runs never reach keeps them exact.
# The warm-up is wall time too, and a fake kernel's call takes none: 10 ms of it are hundreds of calls
# that warm nothing; 5 ms still make a hundred.
FAKE_CLOCK_TIMING = [*FAST_TIMING, "--sol-max-time=30", "--sol-warmup-time=0.005"]


def git(cwd, *args: str) -> str:
    """Run git in ``cwd``; its output, stripped."""
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def init_repo(cwd) -> None:
    """A fresh git repository on branch main, with a committer; Python's bytecode folders are
    ignored, as a user's global gitignore does (pytest writes them beside every test file)."""
    git(cwd, "init", "-q", "-b", "main")
    with open(f"{cwd}/.git/info/exclude", "w") as exclude:
        exclude.write("__pycache__/\n")
    git(cwd, "config", "user.email", "test@example.invalid")
    git(cwd, "config", "user.name", "test")


# A recorded measurement in the flat solgate/1 form: 1 ms, SOL 0.5 on the synthetic profile, passed.
RECORD = dict(
    test="t.py::test_k", name="default", profile="synthetic", backend="cpu", flops={}, bytes=1.0, seconds=1e-3,
    samples=(1e-3,) * 10, noise=0.01, t_sol=5e-4, sol=0.5, mfu=0.0, bound="memory", tflops=0.0, gbps=1.0,
    ceilings="measured", verdict="pass",
)


def recorded(**fields):
    """A ``Measurement`` as the history or an imported file holds it: ``RECORD`` with ``fields``
    (flat solgate/1 names) changed, read through ``format.decode``."""
    from pytest_solgate.results_json import decode

    return decode({**RECORD, **fields})


def changed(measurement, **fields):
    """``measurement`` with flat solgate/1 fields changed (``sol=``, ``seconds=``, ...)."""
    from pytest_solgate.results_json import decode, encode

    return decode({**encode(measurement), **fields})
