"""Support (the vocabulary of declare and score): the precision classes: one key per kind of arithmetic unit (kept tiny: imported at start-up)."""

VECTOR_PRECISIONS = ("fp64", "fp32", "fp16", "bf16")
TENSOR_PRECISIONS = (
    "fp64_tensor",
    "tf32_tensor",
    "fp16_tensor",
    "bf16_tensor",
    "fp8_tensor",
    "int8_tensor",
)
PRECISIONS = VECTOR_PRECISIONS + TENSOR_PRECISIONS
