"""C = act(A @ B + bias) + residual, bf16/fp16 in, fp32 accumulation, the epilogue fused.

Fusing the bias, the activation and the residual add into the matmul's epilogue saves the unfused
sequence a full write and read of C (and a read of the residual into a separate kernel): the SOL
test measures both on the same inputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import interpreter

ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2}

if interpreter():
    # The interpreter runs every program in NumPy: one small config, no autotuning sweep.
    CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1)]
else:
    # Shapes that suit Hopper (large tiles, 3-4 stages of TMA-free pipelining) and Ampere.
    CONFIGS = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=3),
    ]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def _fused_gemm_kernel(
    a_ptr, b_ptr, bias_ptr, residual_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_rm, stride_rn, stride_cm, stride_cn,
    ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped ordering: consecutive programs share B tiles in L2.
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_size = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None].to(tl.int64) * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        if UPCAST:
            # Triton 3.9's interpreter gets bf16 tl.dot wrong; bf16 products are exact in fp32.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    if ACTIVATION == 2:
        # GELU, tanh form: x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)).
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    if HAS_RESIDUAL:
        r_ptrs = residual_ptr + rm[:, None].to(tl.int64) * stride_rm + rn[None, :] * stride_rn
        acc += tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def fused_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: str = "gelu",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"fused_gemm: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"fused_gemm: activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype) if out is None else out
    residual_arg = residual if residual is not None else out
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    _fused_gemm_kernel[grid](
        a, b, bias if bias is not None else out, residual_arg, out,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        residual_arg.stride(0), residual_arg.stride(1), out.stride(0), out.stride(1),
        ACTIVATION=ACTIVATIONS[activation], HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None,
        UPCAST=interpreter() and a.dtype == torch.bfloat16,
    )
    return out


def _activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x, approximate="tanh")
    return x


def reference(a, b, bias=None, residual=None, activation="gelu"):  # noqa: ANN001
    """In the inputs' precision's big brother: callers pass float64 copies for the truth."""
    c = a @ b
    if bias is not None:
        c = c + bias
    c = _activate(c, activation)
    return c + residual if residual is not None else c


def unfused_torch(a, b, bias, residual, activation="gelu"):  # noqa: ANN001
    """What a PyTorch user writes without a fused kernel: mm, then the epilogue as separate ops."""
    c = torch.mm(a, b)
    return _activate(c + bias, activation) + residual
