"""Stand-ins for kernels/tests/test_sol.py in `gpu_check.py --dry-run`.

The same test and measurement names as the fp32 SOL tests, with torch kernels on the CPU: the
dry run then executes the SOL steps for real (the plugin registered without its entry point, the
sampling loop, scoring, the JSON, the HTML report, the results table) in seconds, where the kernel
suite under the Triton interpreter takes minutes. No budget marker: on a CPU against a GPU profile
every SOL is tiny, and the dry run checks the path, not the kernels.
"""

import pytest
import torch

from pytest_solgate.measure.devices import MIB, last_level_cache_bytes

# The vector add's buffers are as large as calibration's DRAM pattern (each at least 4x the
# last-level cache): a working set that stays in cache beats the measured DRAM ceiling, and the
# sol-measured step then reads a SOL above 1 (CI, 2026-12-05: 1.57 with 256 KiB buffers).
ADD_ELEMENTS = max(4 * last_level_cache_bytes(), 64 * MIB) // 4


@pytest.mark.parametrize("dtype", [torch.float32], ids=["fp32"])
def test_vector_add(sol, dtype):
    x, y = torch.randn(ADD_ELEMENTS, dtype=dtype), torch.randn(ADD_ELEMENTS, dtype=dtype)
    out = torch.empty_like(x)
    work = {"bytes": sol.nbytes(x, y, out), "flops": {"fp32": x.numel()}}
    sol.measure(lambda: torch.add(x, y, out=out), name="triton", **work)
    sol.measure(lambda: torch.add(x, y, out=out), name="torch", gate=False, **work)


@pytest.mark.parametrize("dtype", [torch.float32], ids=["fp32"])
def test_softmax(sol, dtype):
    x = torch.randn(64, 256, dtype=dtype)
    out = torch.empty_like(x)
    work = {"bytes": sol.nbytes(x, out), "flops": {"fp32": 5 * x.numel()}}
    sol.measure(lambda: torch.softmax(x, dim=-1, out=out), name="triton", **work)
    sol.measure(lambda: torch.softmax(x, dim=-1, out=out), name="torch", gate=False, **work)
