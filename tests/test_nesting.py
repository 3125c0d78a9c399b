"""A measurement inside another's callable, of any kind (a step inside a step, ``sol.measure``
inside a step, a step inside ``sol.measure``, measure inside measure), fails its test in one line
naming the outer measurement (docs/reliability.md), never waits forever on the device lock the
outer one holds. The runs are subprocesses with a timeout: a wait on the lock fails the test instead
of hanging the suite."""

NESTED = '''
import time
import torch

X = torch.ones(8)

def busy(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

def test_step_in_step(sol):
    sol.measure_step(lambda: sol.measure_step(lambda: X + 1, name="inner"), name="outer")

def test_measure_in_step(sol):
    sol.measure_step(lambda: (X + 1, sol.measure(lambda: busy(1e-4), bytes=1e3, name="inner")), name="outer")

def test_step_in_measure(sol):
    sol.measure(lambda: sol.measure_step(lambda: X + 1, name="inner"), bytes=1e3, name="outer")

def test_measure_in_measure(sol):
    sol.measure(lambda: sol.measure(lambda: busy(1e-4), bytes=1e3, name="inner"), bytes=1e3, name="outer")
'''

PROFILE = '''
id = "fast"
name = "Far faster than this CPU"
kind = "cpu"
memory_bandwidth_gbps = 10000
ceilings = "measured"
source = "tests"

[peak_tflops]
fp32 = 100
'''


def test_nesting_of_any_kind_is_one_line_naming_the_outer_measurement(pytester):
    pytester.makefile(".toml", fast=PROFILE)
    pytester.makepyfile(test_nested=NESTED)
    result = pytester.runpytest_subprocess("--sol-device=cpu", "--sol-min-time=0.02", "--sol-max-time=0.3",
                                           "--sol-profile=fast.toml", "--sol-no-save", "-p", "no:cacheprovider",
                                           timeout=300)
    result.assert_outcomes(failed=4)
    tail = "measure each on its own, from the test body"
    result.stdout.fnmatch_lines_random([
        f"*test_nested.py:*: test_nested.py::test_step_in_step: sol.measure_step called inside the step of another "
        f"measurement ('outer'); {tail}",
        f"*test_nested.py:*: test_nested.py::test_measure_in_step: sol.measure called inside the step of another "
        f"measurement ('outer'); {tail}",
        f"*test_nested.py:*: test_nested.py::test_step_in_measure: sol.measure_step called inside the kernel of another "
        f"measurement ('outer'); {tail}",
        f"*test_nested.py:*: test_nested.py::test_measure_in_measure: sol.measure called inside the kernel of another "
        f"measurement ('outer'); {tail}",
    ])
    assert "pytest_solgate/" not in result.stdout.str()
