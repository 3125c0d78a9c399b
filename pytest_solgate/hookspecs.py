"""The hooks pytest-solgate calls on other plugins (registered by plugin.py's ``pytest_addhooks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_solgate.measure.platform import Platform


@pytest.hookspec(firstresult=True)
def pytest_solgate_platform(config: pytest.Config) -> Platform | None:
    """The devices the session measures on: a ``pytest_solgate.measure.platform.Platform``, or
    None for this machine's. A plugin that stands in for a GPU returns its own (solgate's tests
    pass a fake GPU's with ``pytester.runpytest(plugins=[...])``: tests/fake_gpu.py)."""
