"""Judge (budgets): the ``@pytest.mark.sol`` arguments checked, and the budget that applies on a
profile (a float everywhere, a ``{profile-glob: value}`` mapping by its first matching glob)."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_solgate.support.errors import MarkerError

MARKER_KEYS = ("min", "mfu", "max_regression", "speedup", "reference")

BudgetSpec = float | tuple[tuple[str, float], ...] | None


@dataclass(frozen=True)
class Budget:
    min: BudgetSpec = None
    mfu: BudgetSpec = None
    max_regression: float | None = None
    speedup: BudgetSpec = None  # how many times faster than the test's gate=False reference
    reference: str | None = None  # which reference, by name; else the test's only one


def _fraction(test: str, key: str, value: Any, low_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number")
    if low_open and not 0 < value <= 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in (0, 1]")
    if not low_open and not 0 <= value < 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in [0, 1)")
    return float(value)


def _factor(test: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number of times faster > 0, e.g. 1.15")
    return float(value)


def _budget_spec(test: str, key: str, value: Any) -> BudgetSpec:
    if value is None:
        return None
    check = (lambda k, v: _factor(test, k, v)) if key == "speedup" else (lambda k, v: _fraction(test, k, v, low_open=True))
    if isinstance(value, Mapping):
        if not value:
            raise MarkerError(f"{test}: @pytest.mark.sol({key}={{}}): give at least one 'glob': budget")
        pairs = []
        for pattern, budget in value.items():
            if not isinstance(pattern, str) or not pattern:
                raise MarkerError(f"{test}: @pytest.mark.sol({key}=...): key {pattern!r} must be a profile-id glob string")
            pairs.append((pattern, check(f"{key}[{pattern!r}]", budget)))
        return tuple(pairs)
    return check(key, value)


def parse_marker(test: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Budget:
    """Check ``@pytest.mark.sol`` arguments; errors name the test and the argument."""
    if args:
        raise MarkerError(
            f"{test}: @pytest.mark.sol takes keyword arguments only (min=, mfu=, max_regression=, speedup=, reference=), "
            f"got positional {args[0]!r}"
        )
    unknown = [k for k in kwargs if k not in MARKER_KEYS]
    if unknown:
        raise MarkerError(
            f"{test}: @pytest.mark.sol got unknown argument {unknown[0]!r}; it takes min=, mfu=, max_regression=, "
            "speedup=, reference="
        )
    max_regression = kwargs.get("max_regression")
    if max_regression is not None:
        max_regression = _fraction(test, "max_regression", max_regression, low_open=False)
    reference = kwargs.get("reference")
    if reference is not None and (not isinstance(reference, str) or not reference):
        raise MarkerError(f"{test}: @pytest.mark.sol(reference={reference!r}): give the name= of a gate=False measurement")
    return Budget(
        min=_budget_spec(test, "min", kwargs.get("min")),
        mfu=_budget_spec(test, "mfu", kwargs.get("mfu")),
        max_regression=max_regression,
        speedup=_budget_spec(test, "speedup", kwargs.get("speedup")),
        reference=reference,
    )


def per_profile(budget: Budget) -> list[tuple[str, tuple[tuple[str, float], ...]]]:
    """(marker argument, its {glob: value} pairs) for each budget given per profile."""
    return [(key, spec) for key, spec in (("min", budget.min), ("mfu", budget.mfu), ("speedup", budget.speedup))
            if isinstance(spec, tuple)]


def budget_globs(budget: Budget) -> list[tuple[str, str]]:
    """(marker argument, profile glob) for every {glob: value} budget of the marker."""
    return [(key, pattern) for key, spec in per_profile(budget) for pattern, _ in spec]


def check_budget_globs(test: str, budget: Budget, profile_ids: Sequence[str]) -> None:
    """A profile glob that matches no known profile id is a typo that silently removes the gate
    (``{"H100": 0.8}``): refuse it, naming the glob and the ids it was probably meant to be."""
    import difflib

    for key, pattern in budget_globs(budget):
        if any(fnmatch.fnmatchcase(profile_id, pattern) for profile_id in profile_ids):
            continue
        close = difflib.get_close_matches(pattern.lower().rstrip("*"), profile_ids, n=4, cutoff=0.5)
        # Ids are lowercase and joined by '-': 'CPU_*' is 'cpu-*' mistyped, and the ids it then
        # matches (this CPU's 'cpu-c99b8b40d6') are the close matches a difflib ratio misses.
        respelled = pattern.lower().replace("_", "-")
        matched = [i for i in profile_ids if fnmatch.fnmatchcase(i, respelled)]
        if matched:
            close = [respelled, *matched[:3]] if respelled != pattern.lower() or "*" in pattern else matched[:4]
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise MarkerError(
            f"{test}: @pytest.mark.sol({key}={{{pattern!r}: ...}}): the glob {pattern!r} matches no known profile id "
            f"(globs are case-sensitive, ids lowercase); {hint}see `solgate profiles` (this machine's: `solgate detect`)"
        )


def budget_on(spec: BudgetSpec, profile_id: str) -> float | None:
    """A float applies everywhere; a mapping applies its first matching glob, else nothing."""
    if spec is None or isinstance(spec, float):
        return spec
    for pattern, budget in spec:
        if fnmatch.fnmatchcase(profile_id, pattern):
            return budget
    return None

