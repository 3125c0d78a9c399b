"""The ``@pytest.mark.sol`` options are ``Budget``'s fields (judge/budget.py): the keys the marker
takes, the order its messages list them in, and the check each one gets."""

import dataclasses

import pytest

from pytest_solgate.judge import budget as budgets
from pytest_solgate.support.errors import MarkerError

TAKES = "min=, mfu=, max_regression=, speedup=, reference="


def test_the_marker_takes_the_fields_of_budget_and_its_messages_list_them():
    assert ", ".join(f"{f.name}=" for f in dataclasses.fields(budgets.Budget)) == TAKES
    with pytest.raises(MarkerError) as unknown:
        budgets.parse_marker("t.py::t", (), {"min": 0.5, "minimum": 0.5})
    assert str(unknown.value) == f"t.py::t: @pytest.mark.sol got unknown argument 'minimum'; it takes {TAKES}"
    with pytest.raises(MarkerError) as positional:
        budgets.parse_marker("t.py::t", (0.8,), {})
    assert str(positional.value) == f"t.py::t: @pytest.mark.sol takes keyword arguments only ({TAKES}), got positional 0.8"


def test_each_option_is_checked_by_its_own_field():
    given = {"min": {"h100*": 0.8, "*": 1}, "mfu": 0.4, "max_regression": 0, "speedup": 2, "reference": "torch"}
    got = budgets.parse_marker("t.py::t", (), given)
    assert got == budgets.Budget(min=(("h100*", 0.8), ("*", 1.0)), mfu=0.4, max_regression=0.0, speedup=2.0,
                                 reference="torch")
    assert budgets.per_profile(got) == [("min", (("h100*", 0.8), ("*", 1.0)))]
    assert budgets.parse_marker("t.py::t", (), {"min": None, "reference": None}) == budgets.Budget()
    refused = {  # each field's own check: a budget in (0, 1], a tolerated drop in [0, 1), a factor > 0, a name
        "mfu": ({"a*": 1.5}, "t.py::t: @pytest.mark.sol(mfu['a*']=1.5): must be in (0, 1]"),
        "max_regression": (1, "t.py::t: @pytest.mark.sol(max_regression=1): must be in [0, 1)"),
        "speedup": (0, "t.py::t: @pytest.mark.sol(speedup=0): must be a number of times faster > 0, e.g. 1.15"),
        "reference": ("", "t.py::t: @pytest.mark.sol(reference=''): give the name= of a gate=False measurement"),
    }
    for key, (value, message) in refused.items():
        with pytest.raises(MarkerError) as error:
            budgets.parse_marker("t.py::t", (), {key: value})
        assert str(error.value) == message
