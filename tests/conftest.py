"""Shared helpers: a synthetic profile and kernels of known duration make verdicts deterministic."""

from __future__ import annotations

import textwrap

import pytest

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


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Write a test module (with ``busy`` in scope) and the synthetic profile; run pytest on it."""

    def run(body: str, *args: str, profile: bool = True, subprocess: bool = False, files: dict | None = None):
        pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
        pytester.makepyfile(test_kernels=KERNELS + textwrap.dedent(body))
        for name, text in (files or {}).items():
            (pytester.path / name).write_text(textwrap.dedent(text))
        options = [*FAST_TIMING, *(["--sol-profile=synthetic.toml"] if profile else []), *args]
        runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
        return runner(*options)

    return run


def pytest_configure(config):
    # pytester restores sys.modules after each in-process run; torch cannot be imported twice in
    # one process, so it is imported once up front, before any snapshot is taken.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
