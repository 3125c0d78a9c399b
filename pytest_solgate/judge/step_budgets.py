"""Judge (whole steps): which of a test's budgets apply to each record of a step (pure, no I/O).

A step's record takes the marker's budgets (``mfu=`` above all: the figure a team reports). Its
operators' records (``part_of`` the step) take only the regression budget: an elementwise operator
has no MFU, and a softmax's SOL is not the step's; what matters of them is that they got no slower.
"""

from __future__ import annotations

import dataclasses

from pytest_solgate.judge.verdict import Budget
from pytest_solgate.results import Measurement


def budget_for(budget: Budget, m: Measurement) -> Budget:
    """The budget ``m`` is judged against: the test's, less min/mfu/speedup for an operator series."""
    if not m.part_of:
        return budget
    return dataclasses.replace(budget, min=None, mfu=None, speedup=None, reference=None)


def takes_speedup(m: Measurement) -> bool:
    """Whether a ``speedup=`` budget applies to ``m`` (an operator series is no candidate kernel)."""
    return m.gate and not m.part_of
