"""Correctness helpers shared by the kernel tests."""

from __future__ import annotations

import torch

# Normwise relative error bounds by output dtype (against a float64 reference).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}
TF32_TOLERANCE = 3e-4

GPU = torch.cuda.is_available()


def cuda_kernel_skip_reason() -> str | None:
    """Why the CUDA C++ kernel cannot run here, or None: it needs a GPU and nvcc (pip's torch
    ships no nvcc), so a GPU machine without a toolkit skips cleanly instead of failing."""
    from kernels import cuda_epilogue

    if not GPU:
        return "the CUDA C++ kernel needs an NVIDIA GPU to run"
    if cuda_epilogue.nvcc() is None:
        return "the CUDA C++ kernel needs nvcc (install the CUDA toolkit or set CUDA_HOME)"
    return None
DEVICE = torch.device("cuda") if GPU else torch.device("cpu")


def on_device(gpu_value, cpu_value):  # noqa: ANN001, ANN201
    """Shapes that fill a GPU (data many times its L2), small ones under the interpreter."""
    return gpu_value if GPU else cpu_value


def randn(*shape: int, dtype: torch.dtype = torch.float32, device: torch.device = DEVICE) -> torch.Tensor:
    """Fresh random values (never zeros), so that a kernel that writes nothing cannot pass."""
    return torch.randn(*shape, device=device, dtype=torch.float32).add_(0.01).to(dtype)


def poisoned_like(t: torch.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """An output buffer full of NaN: any element the kernel forgets to write fails the check."""
    return torch.full(shape or t.shape, float("nan"), device=t.device, dtype=t.dtype)


def relative_error(out: torch.Tensor, truth: torch.Tensor) -> float:
    """max |out - truth| / max |truth|, in float64: robust where truth crosses zero."""
    out64, truth64 = out.double(), truth.double()
    scale = truth64.abs().max().clamp_min(1e-30)
    return ((out64 - truth64).abs().max() / scale).item()


def assert_matches(out: torch.Tensor, truth: torch.Tensor, tolerance: float | None = None) -> None:
    assert out.shape == truth.shape, f"shape {tuple(out.shape)} != {tuple(truth.shape)}"
    finite = torch.isfinite(out)
    assert bool(finite.all()), f"{int((~finite).sum())} non-finite elements (unwritten, NaN or Inf)"
    bound = TOLERANCE[out.dtype] if tolerance is None else tolerance
    error = relative_error(out, truth)
    assert error <= bound, f"relative error {error:.3g} > {bound:g} for {out.dtype}"
