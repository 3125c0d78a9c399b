"""pytest-solgate: speed-of-light budgets for GPU kernels, inside pytest.

Importing this package is cheap on purpose: it imports neither torch, triton nor pynvml. Those are
loaded only when a measurement needs them.
"""

__version__ = "0.1.0"

from pytest_solgate.errors import SolgateError  # noqa: E402
from pytest_solgate.work import PRECISIONS, Work  # noqa: E402

__all__ = ["PRECISIONS", "SolgateError", "Work", "__version__"]
