"""Shared helpers: a synthetic profile and kernels of known duration make verdicts deterministic."""

from __future__ import annotations

import textwrap

import pytest

from solgate_testing import FAST_TIMING, KERNELS, SYNTHETIC_PROFILE


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Write a test module (with ``busy`` in scope) and the synthetic profile; run pytest on it."""

    def run(body: str, *args: str, profile: bool = True, subprocess: bool = False, files: dict | None = None):
        pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
        pytester.makepyfile(test_kernels=KERNELS + textwrap.dedent(body))
        for name, text in (files or {}).items():
            (pytester.path / name).write_text(textwrap.dedent(text))
        options = [*FAST_TIMING, *(["--sol-profile=synthetic.toml"] if profile else []), *args]
        runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
        return runner(*options)

    return run


def pytest_configure(config):
    # pytester restores sys.modules after each in-process run; torch cannot be imported twice in
    # one process, so it is imported once up front, before any snapshot is taken.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
