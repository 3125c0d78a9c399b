"""The reference's contract (issue 51 item 6): what a test hands as ``reference=``, ``args=``,
``outputs=`` and ``sol_clock`` is read as a kernel engineer expects, and a mistake in it is one
line naming both sides, with the test's own frames only."""

import re


def test_a_numpy_reference_is_compared_like_a_tensor(suite):
    result = suite("""
        import torch

        def add(x, y):
            busy(1e-3)
            return x + y

        def subtract(x, y):
            busy(1e-3)
            return x - y

        def numpy_add(x, y):
            return x.numpy() + y.numpy()

        def test_honest(sol):
            sol.measure(add, args=(torch.randn(256), torch.randn(256)), reference=numpy_add, bytes=1e3)

        def test_subtracts(sol):
            sol.measure(subtract, args=(torch.randn(256), torch.randn(256)), reference=numpy_add, bytes=1e3)
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines([r".*test_subtracts 'default': wrong result: result on new storage.*"])


def test_a_reference_that_cannot_be_compared_is_one_line_naming_both(suite):
    result = suite("""
        import torch

        def add(x, y):
            busy(1e-3)
            return x + y

        def two(x, y):
            busy(1e-3)
            return x + y, x - y

        def args():
            return torch.randn(64), torch.randn(64)

        def test_number(sol):
            sol.measure(add, args=args(), reference=lambda x, y: 3.0, bytes=1e3)

        def test_none(sol):
            sol.measure(add, args=args(), reference=lambda x, y: None, bytes=1e3)

        def test_count(sol):
            sol.measure(two, args=args(), reference=lambda x, y: x + y, bytes=1e3)

        def test_shape(sol):
            sol.measure(add, args=args(), reference=lambda x, y: (x + y).reshape(8, 8), bytes=1e3)

        def test_meta(sol):
            sol.measure(add, args=args(), reference=lambda x, y: torch.empty(64, device="meta"), bytes=1e3)
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(failed=5)
    out = result.stdout.str()
    for said in (r"test_number: sol.measure's reference= returned a float where the kernel's result is a tensor of shape \(64\)",
                 r"test_none: sol.measure's reference= returned None where the kernel's result is a tensor of shape \(64\)",
                 r"test_count: sol.measure's reference= returned 1 result\(s\), the kernel 2 \(result\[0\], result\[1\]\)",
                 r"test_shape 'default': wrong shape: result on new storage, new values \(between sampling rounds\) has "
                 r"shape \(64\), the reference's result shape \(8, 8\)",
                 r"test_meta: sol.measure's reference= returned a tensor on the meta device"):
        assert re.search(said, out), said
    assert "Traceback" not in out and "pytest_solgate/" not in out


def test_a_reference_or_factory_that_fails_shows_the_tests_frames_only(suite):
    result = suite("""
        import torch

        def add(x, y):
            busy(1e-3)
            return x + y

        def broken_reference(x, y):
            return x + y.reshape(3, -1)

        def broken_factory():
            raise ValueError("no inputs today")

        def test_reference_raises(sol):
            sol.measure(add, args=(torch.randn(64), torch.randn(64)), reference=broken_reference, bytes=1e3)

        def test_factory_raises(sol):
            sol.measure(add, args=broken_factory, bytes=1e3)

        def test_factory_returns_none(sol):
            sol.measure(add, args=lambda: None, bytes=1e3)

        def test_in_place_named_in_outputs(sol):  # x.add_(y) with outputs=0: the reference gets y alone
            def add_(x, y):
                busy(1e-3)
                x.add_(y)
            sol.measure(add_, args=(torch.randn(64), torch.randn(64)), outputs=0, reference=torch.add, bytes=1e3)
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    assert re.search(r"test_reference_raises: sol.measure's reference= raised RuntimeError: shape '\[3, -1\]'", out), out
    assert re.search(r"test_kernels.py\", line \d+, in broken_reference", out), out
    assert re.search(r"test_factory_raises: sol.measure's args= raised ValueError: no inputs today", out), out
    assert re.search(r"test_factory_returns_none: sol.measure's args= function returned NoneType, not a tuple", out), out
    assert re.search(r"test_in_place_named_in_outputs: sol.measure's reference= raised TypeError: .*the reference gets "
                     r"args= without the outputs= buffers: a kernel that also reads a buffer it writes \(x.add_\(y\)\) "
                     r"returns it instead", out), out
    assert "pytest_solgate/" not in out, out


def test_a_kernel_that_raises_on_the_new_values_is_one_line_naming_keep(suite):
    """A Cholesky is right, and raises on the values the checks write (no longer positive-definite):
    one line with the test's frames, naming keep=; with keep= naming the matrix it passes."""
    result = suite("""
        import torch

        def cholesky(m):
            busy(1e-3)
            return torch.linalg.cholesky(m)

        def spd():
            a = torch.randn(32, 32)
            return a @ a.T + 32 * torch.eye(32)

        def test_raises(sol):
            sol.measure(cholesky, args=(spd(),), reference=torch.linalg.cholesky, bytes=1e3)

        def test_kept(sol):
            sol.measure(cholesky, args=(spd(),), reference=torch.linalg.cholesky, bytes=1e3, keep=0)
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert re.search(r"test_raises: sol.measure's kernel, on new .* raised _?LinAlgError: .*positive-definite.*"
                     r"\(an SPD matrix, sorted boundaries\) goes in keep=", out), out
    assert re.search(r"test_kernels.py\", line \d+, in cholesky", out) and "pytest_solgate/" not in out, out


def test_outputs_true_or_false_is_refused(suite):
    result = suite("""
        import torch

        def copy(x, out):
            busy(1e-3)
            out.copy_(x)

        def test_true(sol):
            sol.measure(copy, args=(torch.randn(4), torch.empty(4)), outputs=True, bytes=1e3)

        def test_false(sol):
            sol.measure(copy, args=(torch.randn(4), torch.empty(4)), outputs=False, bytes=1e3)
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(failed=2)
    result.stdout.re_match_lines([rf".*test_{value}: sol.measure's outputs= names positions in args= \(0 to 1\) of the "
                                  rf"buffers the kernel writes, not {value.title()} \(e.g. outputs=2;.*" for value in ("true", "false")],
                                 consecutive=False)


def test_a_sol_clock_of_the_wrong_type_is_one_line_naming_it(suite):
    result = suite("""
        import pytest

        @pytest.fixture
        def sol_clock():
            return lambda: (0, 0, 0)

        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e3)
        """, "--sol-no-save", subprocess=True)
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([r".*the sol_clock fixture returned function, not a pytest_solgate.measure.backends.CpuClock"])
    assert "AttributeError" not in result.stdout.str()


def test_the_checks_own_work_runs_on_one_thread_the_kernels_calls_on_the_users_threads(suite):
    # Beside a busy neighbour a torch operation split over every core waits for the thread that lost
    # its core (a comparison read 300 ms for 3.5 ms): the checks' own work (the reference, the
    # comparisons, new values) runs on one thread; every call of the kernel, checked or timed, on the
    # threads the user set, which the measurement leaves as it found them.
    result = suite("""
        import torch

        SEEN = {"kernel": set(), "reference": set()}

        def add(x, y):
            SEEN["kernel"].add(torch.get_num_threads())
            busy(1e-3)
            return x + y

        def reference(x, y):
            SEEN["reference"].add(torch.get_num_threads())
            return x + y

        def test_threads(sol):
            torch.set_num_threads(2)
            sol.measure(add, args=(torch.randn(256), torch.randn(256)), reference=reference, bytes=1e3)
            assert SEEN == {"kernel": {2}, "reference": {1}} and torch.get_num_threads() == 2, SEEN
        """, "--sol-no-save", fake_clock=True, subprocess=True)
    result.assert_outcomes(passed=1)
