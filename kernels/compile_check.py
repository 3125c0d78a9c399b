"""Ahead-of-time compilation of every Triton kernel for Ampere (sm_80) and Hopper (sm_90).

Triton compiles to PTX and cubin without a GPU, so this runs anywhere; run it outside the
interpreter (``TRITON_INTERPRET`` unset). For each kernel, target and configuration it reports
the shared memory used, the warps, whether global loads are 16 bytes wide (``ld.global.v4``) and
whether matrix instructions are used (``wgmma`` on Hopper, ``mma.sync`` on Ampere), as JSON lines:

    python -m kernels.compile_check
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor

TARGETS = {80: 166912, 90: 232448}  # compute capability -> max shared memory per block (bytes)
ALIGNED = [["tt.divisibility", 16]]


def _compile(fn, signature, constexprs, aligned, cc, num_warps, num_stages=3):  # noqa: ANN001
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(signature)
    attrs = {(names.index(name),): ALIGNED for name in aligned}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(source, target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps, "num_stages": num_stages})
    ptx = kernel.asm["ptx"]
    return {
        "cc": cc,
        "shared": kernel.metadata.shared,
        "shared_limit": TARGETS[cc],
        "num_warps": kernel.metadata.num_warps,
        "wide_loads": ptx.count("ld.global.v4") + ptx.count("ld.global.nc.v4"),
        "wgmma": "wgmma.mma_async" in ptx,
        "mma_sync": "mma.sync" in ptx,
        "cubin_bytes": len(kernel.asm["cubin"]),
    }


def cases():  # noqa: ANN201
    """(kernel name, fn, signature, constexprs, aligned args, num_warps, num_stages)."""
    from kernels import depthwise_conv2d, fused_gemm, layernorm, softmax, vector_add

    for dtype in ("fp32", "bf16"):
        p = f"*{dtype}"
        yield (f"vector_add[{dtype}]", vector_add._add_kernel,
               {"x_ptr": p, "y_ptr": p, "out_ptr": p, "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": vector_add.BLOCK},
               ["x_ptr", "y_ptr", "out_ptr", "n"], 8, 3)
        yield (f"softmax[{dtype}]", softmax._softmax_kernel,
               {"x_ptr": p, "out_ptr": p, "n_rows": "i32", "n_cols": "i32", "x_stride": "i32", "out_stride": "i32",
                "BLOCK": "constexpr"}, {"BLOCK": 4096},
               ["x_ptr", "out_ptr", "n_cols", "x_stride", "out_stride"], 8, 3)
        yield (f"layernorm[{dtype}]", layernorm._layernorm_kernel,
               {"x_ptr": p, "w_ptr": p, "b_ptr": p, "out_ptr": p, "n_cols": "i32", "stride": "i32", "eps": "fp32",
                "BLOCK": "constexpr"}, {"BLOCK": 4096},
               ["x_ptr", "w_ptr", "b_ptr", "out_ptr", "n_cols", "stride"], 8, 3)
    yield ("depthwise_conv2d[fp32]", depthwise_conv2d._depthwise_kernel,
           {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", "H": "i32", "W": "i32", "C": "i32",
            "HAS_BIAS": "constexpr", "BLOCK_W": "constexpr", "BLOCK_C": "constexpr"},
           {"HAS_BIAS": True, "BLOCK_W": 16, "BLOCK_C": 64}, ["x_ptr", "w_ptr", "b_ptr", "out_ptr", "C"], 4, 3)
    gemm = fused_gemm._fused_gemm_kernel.fn  # the JITFunction under the autotuner
    for dtype in ("bf16", "fp16"):
        p = f"*{dtype}"
        signature = {"a_ptr": p, "b_ptr": p, "bias_ptr": p, "residual_ptr": p, "c_ptr": p, "M": "i32", "N": "i32", "K": "i32",
                     **{f"stride_{s}": "i32" for s in ("am", "ak", "bk", "bn", "rm", "rn", "cm", "cn")},
                     **{k: "constexpr" for k in ("ACTIVATION", "HAS_BIAS", "HAS_RESIDUAL", "UPCAST", "BLOCK_M", "BLOCK_N",
                                                  "BLOCK_K", "GROUP_M")}}
        configs = fused_gemm.CONFIGS if dtype == "bf16" else fused_gemm.CONFIGS[:1]
        for config in configs:
            constexprs = {"ACTIVATION": 2, "HAS_BIAS": True, "HAS_RESIDUAL": True, "UPCAST": False, **config.kwargs}
            # Unit inner strides are what the launcher sees for contiguous tensors.
            constexprs.update({"stride_ak": 1, "stride_bn": 1, "stride_rn": 1, "stride_cn": 1})
            for key in ("stride_ak", "stride_bn", "stride_rn", "stride_cn"):
                signature[key] = "constexpr"
            aligned = ["a_ptr", "b_ptr", "bias_ptr", "residual_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk",
                       "stride_rm", "stride_cm"]
            shape = "x".join(str(config.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
            yield (f"fused_gemm[{dtype},{shape},w{config.num_warps},s{config.num_stages}]", gemm, dict(signature),
                   constexprs, aligned, config.num_warps, config.num_stages)


def compile_for(cc: int) -> list[str]:
    """Every kernel compiled for one target, a JSON line each."""
    lines = []
    for name, fn, signature, constexprs, aligned, warps, stages in cases():
        try:
            result = {"kernel": name, **_compile(fn, signature, constexprs, aligned, cc, warps, stages)}
        except Exception as exc:  # report every failure, not just the first
            result = {"kernel": name, "cc": cc, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        lines.append(json.dumps(result))
    return lines


def main() -> None:
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        sys.exit("kernels.compile_check: unset TRITON_INTERPRET: the interpreter compiles nothing")
    # One process per target: compiling is all CPU, and the kernel suite runs this before it
    # measures anything (27 s on one core of the 2-core CI machine).
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(len(TARGETS), os.cpu_count() or 1), mp_context=spawn) as pool:
        for lines in pool.map(compile_for, TARGETS):
            print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
