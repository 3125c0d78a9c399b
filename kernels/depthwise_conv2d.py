"""Depthwise 3x3 convolution, NHWC, stride 1, padding 1: memory-bound (9 MACs per element)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _depthwise_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, H, W, C, HAS_BIAS: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr
):
    nh = tl.program_id(0)  # one (image, row) pair
    n = nh // H
    h = nh % H
    ws = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = cs < C
    acc = tl.zeros((BLOCK_W, BLOCK_C), dtype=tl.float32)
    image = x_ptr + n.to(tl.int64) * H * W * C
    for dh in tl.static_range(3):
        row = h + dh - 1
        rows = tl.zeros((BLOCK_W,), dtype=tl.int32) + row  # as a block: masks stay block-shaped
        for dw in tl.static_range(3):
            col = ws + dw - 1
            inside = (col >= 0) & (col < W) & (rows >= 0) & (rows < H)
            mask = inside[:, None] & c_mask[None, :]
            x = tl.load(image + (row * W + col)[:, None].to(tl.int64) * C + cs[None, :], mask=mask, other=0.0)
            w = tl.load(w_ptr + (dh * 3 + dw) * C + cs, mask=c_mask, other=0.0)
            acc += x.to(tl.float32) * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + cs, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    out_mask = (ws < W)[:, None] & c_mask[None, :]
    out = out_ptr + (nh.to(tl.int64) * W + ws[:, None]) * C + cs[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def depthwise_conv2d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``x`` is [N, H, W, C] (NHWC, contiguous); ``weight`` is [3, 3, C]; ``bias`` is [C]."""
    if x.dim() != 4 or weight.shape != (3, 3, x.shape[3]):
        raise ValueError(f"depthwise_conv2d: x {tuple(x.shape)} (NHWC) and weight {tuple(weight.shape)} (3, 3, C)")
    x = x.contiguous()
    N, H, W, C = x.shape
    out = torch.empty_like(x) if out is None else out
    block_c = min(64, triton.next_power_of_2(C))
    block_w = 16
    grid = (N * H, triton.cdiv(W, block_w), triton.cdiv(C, block_c))
    _depthwise_kernel[grid](
        x, weight.contiguous(), bias if bias is not None else x, out, H, W, C,
        HAS_BIAS=bias is not None, BLOCK_W=block_w, BLOCK_C=block_c, num_warps=4,
    )
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's depthwise conv on the same NHWC data (channels_last memory format)."""
    C = x.shape[3]
    nchw = x.permute(0, 3, 1, 2)
    filters = weight.permute(2, 0, 1).unsqueeze(1)  # [C, 1, 3, 3]
    return torch.nn.functional.conv2d(nchw, filters, bias, padding=1, groups=C).permute(0, 2, 3, 1)
