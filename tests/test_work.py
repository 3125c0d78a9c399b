import math

import pytest

from pytest_solgate.declare.work import PRECISIONS, count_flops, make_work, nbytes
from pytest_solgate.support.errors import WorkError


def test_number_is_counted_in_the_given_precision():
    work = make_work(flops=10, bytes=4, precision="bf16_tensor")
    assert work.flops == {"bf16_tensor": 10} and work.bytes == 4


def test_mapping_of_precisions():
    work = make_work(flops={"fp32": 5, "bf16_tensor": 7})
    assert work.total_flops == 12


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"flops": -1}, "flops=-1 is negative"),
        ({"bytes": math.nan}, "bytes=nan must be finite"),
        ({"bytes": math.inf}, "must be finite"),
        ({"flops": {"fp33": 1}}, "unknown precision 'fp33'"),
        ({"flops": 1, "precision": "half"}, "unknown precision 'half'"),
        ({"bytes": "lots"}, "bytes='lots' is not a number"),
        ({"bytes": True}, "is not a number"),
        ({}, "no work declared"),
        ({"flops": 0, "bytes": 0}, "no work declared"),
        ({"flops": {"fp32": -3}}, "flops['fp32']=-3 is negative"),
    ],
)
def test_bad_declarations_name_the_value(kwargs, fragment):
    with pytest.raises(WorkError, match=fragment.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        make_work(**kwargs)


def test_precisions_are_the_design_list():
    """Every precision class (docs/reference.md) is accepted in a declaration; anything else is refused, and
    the message lists the accepted ones."""
    design = ("fp64", "fp32", "fp16", "bf16", "fp64_tensor", "tf32_tensor", "fp16_tensor", "bf16_tensor",
              "fp8_tensor", "int8_tensor")
    for precision in design:
        assert make_work({precision: 1e9}, 1e6).flops == {precision: 1e9}
    with pytest.raises(WorkError, match="fp4_tensor.*" + ".*".join(design)):
        make_work({"fp4_tensor": 1e9}, 1e6)
    assert set(PRECISIONS) == set(design)


def test_nbytes_of_tensors_arrays_and_numel():
    torch = pytest.importorskip("torch")
    numpy = pytest.importorskip("numpy")

    class Sized:
        def numel(self):
            return 10

        def element_size(self):
            return 2

    assert nbytes(torch.empty(8, dtype=torch.float32), numpy.zeros(3, dtype=numpy.float64), Sized()) == 32 + 24 + 20
    with pytest.raises(WorkError, match="argument 1 .str. has no nbytes"):
        nbytes(torch.empty(1), "x")


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_count_flops_by_precision(device):
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 32, device=device)
    b = torch.randn(32, 16, device=device)
    assert count_flops(torch.mm, a, b) == {"fp32": 2 * 64 * 32 * 16}
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    assert count_flops(lambda: torch.mm(a16, b16) + 1) == {"bf16_tensor": 2 * 64 * 32 * 16}
    h = a.to(torch.float16)
    assert count_flops(lambda: (torch.mm(h, b.half()), torch.mm(a.double(), b.double()))) == {
        "fp16_tensor": 2 * 64 * 32 * 16,
        "fp64": 2 * 64 * 32 * 16,
    }


def test_count_flops_tf32_when_enabled():
    torch = pytest.importorskip("torch")
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        a = torch.randn(8, 8, device="meta")
        assert count_flops(torch.mm, a, a) == {"tf32_tensor": 2 * 8**3}
    finally:
        torch.set_float32_matmul_precision(previous)


def test_count_flops_pointwise_counts_nothing():
    torch = pytest.importorskip("torch")
    x = torch.randn(100, device="meta")
    assert count_flops(lambda: torch.softmax(x, 0)) == {}


def test_float64_matmuls_go_to_fp64_tensor_cores_where_the_profile_has_them():
    from pytest_solgate.declare.work import float64_on_tensor_cores

    counted = {"fp64": 1000, "fp32": 5}
    assert float64_on_tensor_cores(counted, {"fp64": 34, "fp64_tensor": 67, "fp32": 67}) == {"fp32": 5, "fp64_tensor": 1000}
    assert float64_on_tensor_cores(counted, {"fp64": 0.05, "fp32": 0.1}) == counted  # a CPU: vector fp64


def test_the_fixture_counts_float64_on_the_profiles_tensor_cores(suite):
    profile = """
id = "fp64-tc"
name = "A device with FP64 tensor cores"
kind = "cpu"
memory_bandwidth_gbps = 1
ceilings = "measured"
[peak_tflops]
fp64 = 0.001
fp64_tensor = 0.002
"""
    result = suite("""
        import torch

        def test_count(sol):
            a = torch.randn(8, 4, dtype=torch.float64, device="meta")
            assert sol.count_flops(torch.mm, a, a.T) == {"fp64_tensor": 2 * 8 * 4 * 8}
    """, "--sol-profile=fp64.toml", profile=False, files={"fp64.toml": profile})
    result.assert_outcomes(passed=1)
