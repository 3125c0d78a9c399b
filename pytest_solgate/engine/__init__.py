"""The engine: the measuring half of a run (``run.py``'s ``Run`` owns one). It takes the callables a
test hands the fixture, a kernel (``kernels``) or a whole step (``steps``), through one measuring
pipeline and judges them (declare -> measure -> score -> judge). It knows nothing of pytest;
``run.py`` records and reports what it returns."""

from pytest_solgate.engine.kernels import Engine

__all__ = ["Engine"]
