"""Integrity: the precision a kernel computes in, against the one it declares.

A kernel declared fp32 that casts to fp16 or bf16 and back is named two ways: the dtypes of the
operators its call runs (a TorchDispatchMode, as measure/step_profile.py counts operators: it sees torch
operators, not the inside of a Triton or CUDA kernel), and its result's error, judged at the
tolerance of the declared precision rather than a loose one the test chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

# Mantissa bits (the implicit one included) of each declared precision class and torch dtype.
PRECISION_BITS = {"fp64": 53, "fp64_tensor": 53, "fp32": 24, "tf32_tensor": 11, "fp16": 11, "fp16_tensor": 11,
                  "bf16": 8, "bf16_tensor": 8, "fp8_tensor": 4, "int8_tensor": 8}
DTYPE_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8, "float8_e4m3fn": 4, "float8_e5m2": 3,
              "float8_e4m3fnuz": 4, "float8_e5m2fnuz": 3, "complex128": 53, "complex64": 24}
# The relative error (against |reference| + the reference's RMS) a result may carry at each
# number of mantissa bits: a few roundings of the format plus what a long reduction adds.
TOLERANCE = {53: 1e-10, 24: 1e-4, 11: 2e-3, 8: 1.6e-2, 4: 0.125, 3: 0.25}


def bits_of_dtype(dtype: object) -> int | None:
    return DTYPE_BITS.get(str(dtype).replace("torch.", ""))


def tolerance(bits: int) -> float:
    return TOLERANCE.get(bits) or min((t for b, t in TOLERANCE.items() if b <= bits), default=0.25)


def allowed_bits(declared: Iterable[str], explicit: bool, tensor_dtypes: Iterable[object]) -> int:
    """The fewest mantissa bits the kernel may compute with: the lowest of its declared precisions
    (when it declared FLOPs or a precision), and of its float inputs' and outputs' dtypes (a bf16
    copy declares bytes only: its bf16 operators are its data's, not a shortcut)."""
    bits = [PRECISION_BITS[p] for p in declared if p in PRECISION_BITS] if explicit else []
    bits += [b for b in (bits_of_dtype(d) for d in tensor_dtypes) if b is not None]
    return min(bits, default=24)


@dataclass(frozen=True)
class LowerOperator:
    operator: str  # e.g. aten._to_copy.default
    dtype: str  # e.g. float16


def lower_operators(fn: Callable[[], object], bits: int) -> tuple[LowerOperator, ...]:
    """The operators of one call of ``fn`` whose floating result has fewer mantissa bits than
    ``bits``. A call that fails under the dispatch mode tells nothing (()), never an error."""
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return ()
    seen: dict[tuple[str, str], None] = {}

    class Dtypes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode is untyped
        def __torch_dispatch__(self, func: Callable[..., object], types: object, args: Sequence[object] = (),
                               kwargs: Mapping[str, object] | None = None) -> object:
            out = func(*args, **(kwargs or {}))
            for value in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    found = bits_of_dtype(value.dtype)
                    if found is not None and found < bits:
                        seen[(str(func), str(value.dtype).replace("torch.", ""))] = None
            return out

    try:
        with Dtypes():  # type: ignore[no-untyped-call]
            fn()
    except Exception:  # noqa: BLE001 - a kernel the mode cannot run is judged by its error alone
        return ()
    return tuple(LowerOperator(op, dtype) for op, dtype in seen)
