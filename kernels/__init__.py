"""A small library of fast kernels, each gated by its own SOL test (see README.md)."""

import os


def interpreter() -> bool:
    """True when Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def row_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for kernels that keep one whole row in one program."""
    import triton

    block = triton.next_power_of_2(n_cols)
    return block, 4 if block <= 2048 else 8 if block <= 8192 else 16
