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
# $KERNELS_BUILD_DIR moves the build out of the checkout (benchmarks/gpu_check.py writes nothing there).
BUILD_DIR = Path(os.environ.get("KERNELS_BUILD_DIR") or Path(__file__).with_name("_build"))
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


def cudart_dir(compiler: str) -> Path | None:
    """The toolkit's library folder holding libcudart.so, next to nvcc or under CUDA_HOME."""
    homes = [Path(compiler).resolve().parent.parent]
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        homes.insert(0, Path(os.environ.get("CUDA_HOME") or os.environ["CUDA_PATH"]))
    homes += sorted(Path("/usr/local").glob("cuda*"), reverse=True)
    for home in homes:
        for lib in ("lib64", "lib", "targets/x86_64-linux/lib"):
            if (home / lib / "libcudart.so").exists():
                return home / lib
    return None


def nvcc_command(output: Path) -> list[str]:
    compiler = nvcc()
    if compiler is None:
        raise BuildError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    command = [compiler, "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "--use_fast_math"]
    # The CUDA runtime as a shared library (not nvcc's static default), found through an rpath: the
    # driver/runtime version check in _library() then speaks for the runtime this library uses.
    command += ["-cudart", "shared"]
    lib = cudart_dir(compiler)
    if lib is not None:
        command += ["-Xlinker", f"-rpath,{lib}"]
    for arch in ARCHS:
        command += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    return command + ["-o", str(output), str(SOURCE)]


def build(build_dir: Path = BUILD_DIR) -> Path:
    """Compile the .cu file (cached by the hash of its source and flags) and return the library."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(ARCHS).encode() + b" cudart-shared").hexdigest()[:12]
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


def _version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def check_versions(lib: ctypes.CDLL) -> None:
    """Refuse a driver that cannot run this build's CUDA runtime, naming both versions."""
    driver, runtime = ctypes.c_int(0), ctypes.c_int(0)
    lib.solgate_cuda_versions.argtypes = [ctypes.POINTER(ctypes.c_int)] * 2
    lib.solgate_cuda_versions(ctypes.byref(driver), ctypes.byref(runtime))
    if driver.value == 0:
        raise BuildError("no NVIDIA driver found: the CUDA C++ kernel needs an NVIDIA GPU and its driver")
    if driver.value < runtime.value:
        raise BuildError(
            f"the CUDA toolkit that built the kernel (CUDA {_version(runtime.value)}) is newer than the driver "
            f"supports (CUDA {_version(driver.value)}): build with an older nvcc (CUDA_HOME) or update the driver"
        )


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    check_versions(lib)
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
