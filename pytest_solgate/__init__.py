"""Wiring (the public API): pytest-solgate, speed-of-light budgets for GPU kernels, inside pytest.

Importing this package is cheap on purpose: it imports neither torch, triton nor pynvml, and the
plugin's own modules load only when a run needs them.
"""

__version__ = "0.1.0"

__all__ = ["PRECISIONS", "SolgateError", "Work", "__version__"]


def __getattr__(name: str):  # noqa: ANN202 - lazy re-exports
    if name == "Work":
        from pytest_solgate.declare.work import Work

        return Work
    if name == "PRECISIONS":
        from pytest_solgate.support.precisions import PRECISIONS

        return PRECISIONS
    if name == "SolgateError":
        from pytest_solgate.support.errors import SolgateError

        return SolgateError
    raise AttributeError(f"module 'pytest_solgate' has no attribute {name!r}")
