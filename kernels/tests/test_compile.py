"""Every Triton kernel compiled ahead of time for Ampere (sm_80) and Hopper (sm_90), no GPU needed.

A kernel that does not compile for a target, overflows shared memory on it, or loses its 16-byte
loads or its tensor-core instructions fails here, on any machine, before a GPU runner sees it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled():
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run([sys.executable, "-m", "kernels.compile_check"], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_every_kernel_compiles_for_both_targets(compiled):
    errors = [r for r in compiled if "error" in r]
    assert not errors, errors
    kernels = {r["kernel"] for r in compiled}
    assert {"vector_add[fp32]", "vector_add[bf16]", "softmax[bf16]", "layernorm[bf16]", "depthwise_conv2d[fp32]"} <= kernels
    assert sum(k.startswith("fused_gemm[bf16") for k in kernels) == 7  # every autotune config
    for kernel in kernels:
        assert {r["cc"] for r in compiled if r["kernel"] == kernel} == {80, 90}, kernel
        assert all(r["cubin_bytes"] > 0 for r in compiled)


def test_shared_memory_fits_every_target(compiled):
    for r in compiled:
        assert r["shared"] <= r["shared_limit"], r


def test_loads_are_sixteen_bytes_wide(compiled):
    for r in compiled:
        assert r["wide_loads"] > 0, r


def test_gemm_uses_the_tensor_cores_of_each_generation(compiled):
    for r in compiled:
        if r["kernel"].startswith("fused_gemm"):
            assert r["wgmma"] if r["cc"] == 90 else r["mma_sync"], r
