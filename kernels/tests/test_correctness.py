"""Every kernel against a float64 PyTorch reference, with NaN-poisoned outputs and odd shapes."""

import subprocess

import pytest
import torch

from kernels import depthwise_conv2d, fused_gemm, layernorm, softmax, vector_add
from kernels.tests.helpers import DEVICE, GPU, assert_matches, cuda_kernel_skip_reason, poisoned_like, randn

FLOATS = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", [1, 1000, 4096, 4096 * 3 + 17])
def test_vector_add(dtype, n):
    x, y = randn(n, dtype=dtype), randn(n, dtype=dtype)
    out = poisoned_like(x)
    assert vector_add.add(x, y, out) is out
    assert_matches(out, vector_add.reference(x.double(), y.double()))
    assert_matches(vector_add.add(x, y), vector_add.reference(x.double(), y.double()))


@pytest.mark.parametrize("dtype", FLOATS, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 781), (37, 1000), (64, 128)])
def test_softmax(dtype, rows, cols):
    x = randn(rows, cols, dtype=dtype) * 4
    out = poisoned_like(x)
    softmax.softmax(x, out)
    assert_matches(out, torch.softmax(x.double(), dim=-1))


def test_softmax_is_stable_for_large_inputs():
    x = randn(4, 300) * 1e4
    out = softmax.softmax(x)
    assert_matches(out, torch.softmax(x.double(), dim=-1))


@pytest.mark.parametrize("dtype", FLOATS, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 500), (33, 1000), (64, 256)])
def test_layernorm(dtype, rows, cols):
    x = randn(rows, cols, dtype=dtype) * 3 + 1
    w, b = randn(cols, dtype=dtype), randn(cols, dtype=dtype)
    out = poisoned_like(x)
    layernorm.layernorm(x, w, b, out=out)
    truth = torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
    # bf16 outputs of O(1) values: statistics in fp32 keep the error at output rounding.
    assert_matches(out, truth)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("activation", ["gelu", "relu", "none"])
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (37, 45, 70), (64, 96, 128)])
def test_fused_gemm(dtype, activation, m, n, k):
    a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
    bias, residual = randn(n, dtype=dtype), randn(m, n, dtype=dtype)
    out = poisoned_like(a, (m, n))
    fused_gemm.fused_gemm(a, b, bias, residual, activation, out=out)
    truth = fused_gemm.reference(a.double(), b.double(), bias.double(), residual.double(), activation)
    assert_matches(out, truth)


def test_fused_gemm_without_epilogue_inputs():
    a, b = randn(40, 50, dtype=torch.float16), randn(50, 30, dtype=torch.float16)
    assert_matches(fused_gemm.fused_gemm(a, b, activation="none"), a.double() @ b.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 7, 9, 5), (1, 16, 17, 70)])
def test_depthwise_conv2d(dtype, shape):
    x = randn(*shape, dtype=dtype)
    w, b = randn(3, 3, shape[3], dtype=dtype), randn(shape[3], dtype=dtype)
    out = poisoned_like(x)
    depthwise_conv2d.depthwise_conv2d(x, w, b, out=out)
    assert_matches(out, depthwise_conv2d.reference(x.double(), w.double(), b.double()))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="cannot multiply"):
        fused_gemm.fused_gemm(randn(3, 4), randn(5, 6))
    with pytest.raises(ValueError, match="must match"):
        vector_add.add(randn(3), randn(4))


def test_cuda_kernel_compiles_for_ampere_and_hopper(tmp_path):
    """Where nvcc exists, a broken .cu file fails CI even with no GPU to run it on."""
    from kernels import cuda_epilogue

    if cuda_epilogue.nvcc() is None:
        pytest.skip("nvcc is not installed")
    command = cuda_epilogue.nvcc_command(tmp_path / "probe.so")
    assert "arch=compute_90,code=sm_90" in command and "arch=compute_80,code=sm_80" in command
    library = cuda_epilogue.build(tmp_path)
    assert library.stat().st_size > 0
    # The vectorized path really issues 16-byte loads and stores on Hopper.
    ptx = tmp_path / "epilogue.ptx"
    subprocess.run([cuda_epilogue.nvcc(), "-ptx", "-arch=sm_90", "-o", str(ptx), str(cuda_epilogue.SOURCE)], check=True)
    text = ptx.read_text()
    assert "ld.global.nc.v4.u32" in text or "ld.global.v4.u32" in text
    assert "st.global.v4.u32" in text
    # The runtime is linked as a shared library, so its version check speaks for what runs.
    linked = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    assert "libcudart.so" in linked and "not found" not in linked, linked
    if not GPU:  # no driver here: a clear message, not CUDA error 35 at the first launch
        import ctypes

        with pytest.raises(cuda_epilogue.BuildError, match="no NVIDIA driver found"):
            cuda_epilogue.check_versions(ctypes.CDLL(str(library)))


def fake_library(driver, runtime):
    """A stand-in for the built library whose solgate_cuda_versions reports these versions."""
    import types

    def versions(driver_ref, runtime_ref):
        driver_ref._obj.value, runtime_ref._obj.value = driver, runtime
        return 0

    return types.SimpleNamespace(solgate_cuda_versions=versions)


@pytest.mark.parametrize("driver, runtime, message", [
    (12040, 13000, r"toolkit that built the kernel \(CUDA 13.0\) is newer than the driver supports \(CUDA 12.4\)"),
    (0, 12040, "no NVIDIA driver found"),
])
def test_a_driver_older_than_the_toolkit_is_a_clear_error(driver, runtime, message):
    from kernels import cuda_epilogue

    with pytest.raises(cuda_epilogue.BuildError, match=message):
        cuda_epilogue.check_versions(fake_library(driver, runtime))
    cuda_epilogue.check_versions(fake_library(13000, 12040))  # a newer driver runs an older runtime


@pytest.mark.skipif(cuda_kernel_skip_reason() is not None, reason=str(cuda_kernel_skip_reason()))
@pytest.mark.parametrize("rows, cols", [(1, 8), (3, 13), (257, 1024)])
def test_cuda_bias_gelu_residual(rows, cols):
    from kernels import cuda_epilogue

    x, r = randn(rows, cols, dtype=torch.bfloat16), randn(rows, cols, dtype=torch.bfloat16)
    bias = randn(cols, dtype=torch.bfloat16)
    out = poisoned_like(x)
    cuda_epilogue.bias_gelu_residual(x, bias, r, out)
    assert_matches(out, cuda_epilogue.reference(x.double(), bias.double(), r.double()))


def test_device_is_what_the_suite_expects():
    assert DEVICE.type == ("cuda" if GPU else "cpu")
