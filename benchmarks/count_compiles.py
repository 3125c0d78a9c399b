"""Count the Triton compiles a pytest run would make on a GPU, by running it under the interpreter.

A pytest plugin (`-p count_compiles`, with benchmarks/ on PYTHONPATH). Under TRITON_INTERPRET=1
every launch goes through the interpreter's grid launcher; a GPU compiles once per distinct
specialization: the kernel, its arguments' dtypes, the integers Triton specializes on (1 and
multiples of 16), its constexpr and launch options (the autotuner launches every config, so each
config counts, though kernels that autotune only on a GPU, as kernels/fused_gemm.py does, launch one
config here). At the end it prints `count_compiles: N distinct specializations (per kernel: ...)`.

    TRITON_INTERPRET=1 PYTHONPATH=benchmarks python -m pytest kernels/tests/test_correctness.py -p count_compiles

benchmarks/gpu_check.py sizes its step time limits from these counts (see COMPILES there).
"""

from __future__ import annotations

from typing import Any

seen: set[tuple] = set()


def _specialization(value: Any) -> Any:
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return str(dtype)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):  # Triton specializes integers equal to 1 and multiples of 16
        return 1 if value == 1 else (16 if value % 16 == 0 else "int")
    if isinstance(value, float):
        return "float"
    return repr(value)


def pytest_configure(config: Any) -> None:
    from triton.runtime import interpreter

    original = interpreter.GridExecutor.__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = (getattr(self.fn, "__qualname__", repr(self.fn)), tuple(_specialization(a) for a in args),
               tuple(sorted((k, _specialization(v)) for k, v in kwargs.items())))
        seen.add(key)
        return original(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = counting


def pytest_terminal_summary(terminalreporter: Any) -> None:
    per_kernel: dict[str, int] = {}
    for key in seen:
        per_kernel[key[0]] = per_kernel.get(key[0], 0) + 1
    terminalreporter.write_line(
        f"count_compiles: {len(seen)} distinct specializations ("
        + ", ".join(f"{kernel} {count}" for kernel, count in sorted(per_kernel.items())) + ")"
    )
