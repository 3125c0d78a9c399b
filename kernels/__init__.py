"""A small library of fast kernels, each gated by its own SOL test (see README.md)."""

import os


def interpreter() -> bool:
    """True when Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")
