"""Declare: the work a kernel must do, validated.

``Work`` is what a test declares: FLOPs by precision class and the total fused bytes (the least
device-memory traffic the operation needs when fully fused). Validation happens here, once, so that
everything downstream can trust a ``Work``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Container, Iterable, Mapping, SupportsFloat

from pytest_solgate.support.errors import MeasureError, WorkError
from pytest_solgate.support.precisions import PRECISIONS, TENSOR_PRECISIONS, VECTOR_PRECISIONS  # noqa: F401

if TYPE_CHECKING:  # torch is imported where a count needs it
    import torch

# A count of work (FLOPs, bytes): a number, or a NumPy or torch scalar (anything float() takes).
Count = SupportsFloat
# FLOPs: one count in the declared precision, or counts by precision ({"bf16": 2e12, "fp32": 1e9}).
Flops = Count | Mapping[str, Count]


@dataclass(frozen=True)
class Work:
    """FLOPs by precision class, and bytes that must move to or from device memory."""

    flops: Mapping[str, float] = field(default_factory=dict)
    bytes: float = 0

    @property
    def total_flops(self) -> float:
        return float(sum(self.flops.values()))


# No kernel does 10**60 of anything; above this, the figures derived from a declaration (T_SOL in
# seconds, SOL, achieved TFLOP/s) could overflow a double and could not be written or imported.
# 10**30 bytes (an impossible declaration that above-sol reports) is still recorded and imported.
MAX_COUNT = 1e60


def _magnitude(value: int | float) -> str:
    """A huge count, short: 1e+70, or 10**400 for an integer no float can hold."""
    try:
        return f"{float(value):.3g}"
    except OverflowError:
        bits = int(value).bit_length()  # only an integer is too large for a float
        return f"10**{len(str(abs(value))) - 1}" if bits < 10_000 else f"an integer of {bits} bits"


def _check_count(what: str, value: object) -> float:
    """A count must be a finite, non-negative real number up to MAX_COUNT (bool is not a number here)."""
    if isinstance(value, bool):
        raise WorkError(f"{what}={value!r} is not a number; declare a count such as {what}=1e9")
    if not isinstance(value, (int, float)):
        # numpy and torch scalars have __float__; accept them, refuse strings and containers.
        if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WorkError(f"{what}={value!r} is not a number; declare a count such as {what}=1e9")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise WorkError(f"{what}={value!r} must be finite; declare the real count of the work")
    if value < 0:
        raise WorkError(f"{what}={_magnitude(value) if value < -MAX_COUNT else repr(value)} is negative; "
                        "work is a count of FLOPs or bytes, >= 0")
    if value > MAX_COUNT:
        raise WorkError(f"{what}={_magnitude(value)} is more than any kernel does (the limit is {MAX_COUNT:g}); "
                        "declare the real count of the work")
    return value


def _check_precision(precision: object) -> str:
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise WorkError(
            f"unknown precision {precision!r}; use one of: {', '.join(PRECISIONS)}"
        )
    return precision


def make_work(flops: Flops | None = None, bytes: Count | None = None, precision: str = "fp32") -> Work:
    """Validate a declaration as ``sol.measure`` receives it and return a ``Work``.

    ``flops`` is None, a number counted in ``precision``, or a mapping precision -> count.
    """
    counts: dict[str, float] = {}
    if flops is not None:
        if isinstance(flops, Mapping):
            for key, value in flops.items():
                counts[_check_precision(key)] = _check_count(f"flops[{key!r}]", value)
        else:
            counts[_check_precision(precision)] = _check_count("flops", flops)
    nbytes = 0 if bytes is None else _check_count("bytes", bytes)
    counts = {key: value for key, value in counts.items() if value > 0}
    if nbytes <= 0 and not counts:
        raise WorkError(
            "no work declared: pass bytes=... (total fused bytes) and/or flops=... with a positive count"
        )
    return Work(flops=counts, bytes=nbytes)


def nbytes(*arrays: object) -> int:
    """Sum of the sizes in bytes of torch tensors, NumPy arrays or anything with ``nbytes``."""
    total = 0
    for position, array in enumerate(arrays):
        size = getattr(array, "nbytes", None)
        if size is None and hasattr(array, "numel") and hasattr(array, "element_size"):
            size = array.numel() * array.element_size()
        if isinstance(size, bool) or not isinstance(size, int):
            raise WorkError(
                f"sol.nbytes argument {position} ({type(array).__name__}) has no nbytes; "
                "pass tensors or arrays"
            )
        total += size
    return total


def _precision_of_dtype(dtype: torch.dtype | None, tf32: bool) -> str | None:
    import torch

    if dtype == torch.float32:
        return "tf32_tensor" if tf32 else "fp32"
    if dtype == torch.float64:
        return "fp64"
    if dtype == torch.bfloat16:
        return "bf16_tensor"
    if dtype == torch.float16:
        return "fp16_tensor"
    if dtype == torch.int8:
        return "int8_tensor"
    if "float8" in str(dtype):
        return "fp8_tensor"
    return None


def first_dtype(values: Iterable[object]) -> torch.dtype | None:
    """The dtype of the first tensor among ``values`` (nested lists and tuples too), or None."""
    import torch

    for value in values:
        if isinstance(value, torch.Tensor):
            return value.dtype
        if isinstance(value, (list, tuple)):
            found = first_dtype(value)
            if found is not None:
                return found
    return None


def count_flops(fn: Callable[..., object], *args: object, **kwargs: object) -> dict[str, int]:
    """Run ``fn`` once under FlopCounterMode and return its FLOPs by precision class.

    The precision of each counted op comes from the dtype of its first floating-point input. Works
    on ``meta`` tensors. Ops FlopCounterMode does not know (pointwise, reductions) count as 0.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    by_precision: dict[str, int] = {}

    class _ByPrecision(FlopCounterMode):
        # FlopCounterMode aggregates by op; we also need the dtype each count was made in.
        def _count_flops(self, func_packet, out, op_args, op_kwargs):  # noqa: ANN001
            if func_packet in self.flop_registry:
                count = self.flop_registry[func_packet](*op_args, **op_kwargs, out_val=out)
                dtype = first_dtype(op_args)
                precision = _precision_of_dtype(dtype, tf32)
                if precision is None:
                    raise WorkError(
                        f"sol.count_flops: {func_packet} ran in {dtype}, which maps to no precision class"
                    )
                by_precision[precision] = by_precision.get(precision, 0) + int(count)
            return super()._count_flops(func_packet, out, op_args, op_kwargs)

    with _ByPrecision(display=False):
        fn(*args, **kwargs)
    return by_precision


def float64_on_tensor_cores(flops: dict[str, int], precisions: Container[str]) -> dict[str, int]:
    """Counted float64 FLOPs on the FP64 tensor cores when the profile has them.

    FlopCounterMode counts matmuls, convolutions and attention only, and on Ampere and Hopper
    cuBLAS runs those in float64 on the FP64 tensor cores (calibration measures that roof too);
    a profile without ``fp64_tensor`` (a CPU, a consumer GPU) keeps them as vector ``fp64``.
    """
    if "fp64" not in flops or "fp64_tensor" not in precisions:
        return flops
    moved = {k: v for k, v in flops.items() if k != "fp64"}
    moved["fp64_tensor"] = moved.get("fp64_tensor", 0) + flops["fp64"]
    return moved


def measurement_name(test: str, name: object, taken: set[str]) -> str:
    """The name of a test's next measurement: as given (printable, unique in the test), or the
    first free of ``default``, ``default-2``, ``default-3``, ..."""
    if name is None:
        name, number = "default", 1
        while name in taken:
            number += 1
            name = f"default-{number}"
        return name
    if not isinstance(name, str) or not name:
        raise MeasureError(f"{test}: sol.measure(name={name!r}) must be a non-empty string")
    if not name.isprintable():
        raise MeasureError(
            f"{test}: sol.measure(name={name!r}) holds a newline or control character; every report shows "
            "names on one line: give a printable name"
        )
    if name in taken:
        raise MeasureError(f"{test}: a measurement named {name!r} already exists in this test; give another name=")
    return name
