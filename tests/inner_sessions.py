"""A pytest plugin of solgate's own tests, loaded like tests/idle_machine.py into every pytest
session a test starts (``PYTEST_PLUGINS``, tests/conftest.py): those sessions leave hypothesis's
pytest plugin out. None of them runs a hypothesis test, and the plugin imports all of hypothesis
at the end of every session (its terminal summary): 0.7 s of CPU in each pytest subprocess, of
which the suite starts hundreds. The suite's own session keeps it (tests/test_fuzz.py).

PYTEST_DONT_REWRITE: imported before the sessions that load it, it is no module to rewrite.
"""

from __future__ import annotations

import pytest

MODULE = "inner_sessions"  # the name PYTEST_PLUGINS loads it by
HYPOTHESIS_PLUGIN = "hypothesispytest"  # the name hypothesis's entry point registers


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.set_blocked(HYPOTHESIS_PLUGIN)
