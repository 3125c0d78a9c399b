"""A CUDA C++ kernel: out = gelu(x + bias) + residual in bf16 with 16-byte loads.

Built with nvcc for sm_80 and sm_90 into a shared library, loaded with ctypes, and launched on
torch's current stream. ctypes keeps the build to one nvcc call (no torch extension toolchain).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("csrc") / "bias_gelu_residual.cu"
BUILD_DIR = Path(__file__).with_name("_build")
ARCHS = ("80", "90")  # Ampere and Hopper, named explicitly


class BuildError(RuntimeError):
    pass


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home, "bin", "nvcc") if home else None
    return str(candidate) if candidate and candidate.exists() else None


def nvcc_command(output: Path) -> list[str]:
    compiler = nvcc()
    if compiler is None:
        raise BuildError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    command = [compiler, "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "--use_fast_math"]
    for arch in ARCHS:
        command += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    return command + ["-o", str(output), str(SOURCE)]


def build(build_dir: Path = BUILD_DIR) -> Path:
    """Compile the .cu file (cached by the hash of its source and flags) and return the library."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(ARCHS).encode()).hexdigest()[:12]
    library = build_dir / f"libsolgate_epilogue-{digest}.so"
    if library.exists():
        return library
    build_dir.mkdir(parents=True, exist_ok=True)
    temporary = library.with_suffix(f".{os.getpid()}.tmp.so")
    done = subprocess.run(nvcc_command(temporary), capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"nvcc failed on {SOURCE.name}:\n{done.stderr.strip()}")
    os.replace(temporary, library)
    return library


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    fn = lib.solgate_bias_gelu_residual_bf16
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return lib


def bias_gelu_residual(
    x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    if not x.is_cuda:
        raise ValueError("bias_gelu_residual runs on CUDA tensors only")
    if x.dtype != torch.bfloat16 or bias.dtype != torch.bfloat16 or residual.dtype != torch.bfloat16:
        raise ValueError("bias_gelu_residual takes bf16 tensors")
    if x.dim() != 2 or residual.shape != x.shape or bias.shape != (x.shape[1],):
        raise ValueError(f"shapes: x {tuple(x.shape)}, bias {tuple(bias.shape)}, residual {tuple(residual.shape)}")
    x, bias, residual = x.contiguous(), bias.contiguous(), residual.contiguous()
    out = torch.empty_like(x) if out is None else out
    stream = torch.cuda.current_stream(x.device).cuda_stream
    status = _library().solgate_bias_gelu_residual_bf16(
        x.data_ptr(), bias.data_ptr(), residual.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], stream
    )
    if status != 0:
        raise RuntimeError(f"bias_gelu_residual launch failed with CUDA error {status}")
    return out


def reference(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x + bias, approximate="tanh") + residual
