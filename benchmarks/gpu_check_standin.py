"""Stand-ins for kernels/tests/test_sol.py in `gpu_check.py --dry-run`.

The same test and measurement names as the fp32 SOL tests, with small torch kernels on the CPU: the
dry run then executes the SOL steps for real (the plugin registered without its entry point, the
sampling loop, scoring, the JSON, the HTML report, the results table) in seconds, where the kernel
suite under the Triton interpreter takes minutes. No budget marker: on a CPU against a GPU profile
every SOL is tiny, and the dry run checks the path, not the kernels.
"""

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float32], ids=["fp32"])
def test_vector_add(sol, dtype):
    x, y = torch.randn(1 << 16, dtype=dtype), torch.randn(1 << 16, dtype=dtype)
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
