"""LayerNorm forward with weight and bias, fused; statistics in fp32 for bf16/fp16 inputs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import row_config


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    mask = columns < n_cols
    x = tl.load(x_ptr + row * stride + columns, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    variance = tl.sum(centred * centred, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(variance + eps)
    w = tl.load(w_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + columns, mask=mask, other=0.0).to(tl.float32)
    y = centred * rstd * w + b
    tl.store(out_ptr + row * stride + columns, y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, out: torch.Tensor | None = None
) -> torch.Tensor:
    """LayerNorm over the last dimension of a 2-D tensor (one program per row)."""
    if x.dim() != 2 or weight.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
        raise ValueError(f"layernorm: x {tuple(x.shape)}, weight {tuple(weight.shape)}, bias {tuple(bias.shape)}")
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape
    block, num_warps = row_config(n_cols)
    _layernorm_kernel[(n_rows,)](x, weight, bias, out, n_cols, x.stride(0), eps, BLOCK=block, num_warps=num_warps)
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)
