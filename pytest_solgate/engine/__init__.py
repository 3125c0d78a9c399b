"""The engine: one measuring session of the stages (declare -> measure -> score -> judge) for the
callables a test hands the fixture: a kernel (``kernels``) or a whole step (``steps``). It knows
nothing of pytest; ``run.py`` records and reports what it returns."""

from pytest_solgate.engine.kernels import Engine

__all__ = ["Engine"]
