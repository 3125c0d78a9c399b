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
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
'''

FAST_TIMING = ["--sol-device=cpu", "--sol-min-time=0.02", "--sol-max-time=0.3", "-p", "no:cacheprovider"]


def git(cwd, *args: str) -> str:
    """Run git in ``cwd``; its output, stripped."""
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def init_repo(cwd) -> None:
    """A fresh git repository on branch main, with a committer."""
    git(cwd, "init", "-q", "-b", "main")
    git(cwd, "config", "user.email", "test@example.invalid")
    git(cwd, "config", "user.name", "test")
