"""Kernel suite setup: with no GPU, every Triton kernel runs through the Triton interpreter.

This must happen before anything imports triton, which is why it lives at the top of the
suite's conftest (pytest loads it before the test modules).
"""

import os


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if not _cuda_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    # NumPy, under the interpreter, warns when exp overflows to inf inside sigmoid; the result
    # (0 or 1) is the right one, and GPUs do not warn.
    config.addinivalue_line("filterwarnings", "ignore:overflow encountered in exp:RuntimeWarning")
