"""Judge (budgets): the ``@pytest.mark.sol`` arguments checked, and the budget that applies on a
profile (a float everywhere, a ``{profile-glob: value}`` mapping by its first matching glob)."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, TypeVar

from pytest_solgate.support.errors import MarkerError

BudgetSpec = float | tuple[tuple[str, float], ...] | None
Kept = TypeVar("Kept")
# How one marker argument is checked: (test, argument, its value) -> the value kept (of its field's
# type), or MarkerError.
Check = Callable[[str, str, object], Kept]


def _option(check: Check[Kept]) -> Kept | None:
    """A field of the marker's options: absent (None) unless given, then checked by ``check``."""
    return field(default=None, metadata={"check": check})


def _fraction(test: str, key: str, value: object, low_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number")
    if low_open and not 0 < value <= 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in (0, 1]")
    if not low_open and not 0 <= value < 1:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be in [0, 1)")
    return float(value)


def _budget_fraction(test: str, key: str, value: object) -> float:
    return _fraction(test, key, value, low_open=True)


def _allowed_drop(test: str, key: str, value: object) -> float:
    return _fraction(test, key, value, low_open=False)


def _factor(test: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): must be a number of times faster > 0, e.g. 1.15")
    return float(value)


def _per_profile(check: Check[float]) -> Check[BudgetSpec]:
    """``check`` on a number, which applies everywhere, or on each value of a {profile-glob: value} mapping."""

    def spec(test: str, key: str, value: object) -> BudgetSpec:
        if not isinstance(value, Mapping):
            return check(test, key, value)
        if not value:
            raise MarkerError(f"{test}: @pytest.mark.sol({key}={{}}): give at least one 'glob': budget")
        pairs = []
        for pattern, budget in value.items():
            if not isinstance(pattern, str) or not pattern:
                raise MarkerError(f"{test}: @pytest.mark.sol({key}=...): key {pattern!r} must be a profile-id glob string")
            pairs.append((pattern, check(test, f"{key}[{pattern!r}]", budget)))
        return tuple(pairs)

    return spec


def _measurement_name(test: str, key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise MarkerError(f"{test}: @pytest.mark.sol({key}={value!r}): give the name= of a gate=False measurement")
    return value


@dataclass(frozen=True)
class Budget:
    """The options of ``@pytest.mark.sol``: its fields are the marker's keyword arguments, in the
    order its messages list them, and each field's ``check`` is how its argument is checked."""

    min: BudgetSpec = _option(_per_profile(_budget_fraction))
    mfu: BudgetSpec = _option(_per_profile(_budget_fraction))
    max_regression: float | None = _option(_allowed_drop)
    speedup: BudgetSpec = _option(_per_profile(_factor))  # how many times faster than the test's gate=False reference
    reference: str | None = _option(_measurement_name)  # which reference, by name; else the test's only one


OPTIONS = dataclasses.fields(Budget)


def parse_marker(test: str, args: Sequence[object], kwargs: Mapping[str, object]) -> Budget:
    """Check ``@pytest.mark.sol`` arguments; errors name the test and the argument."""
    takes = ", ".join(f"{option.name}=" for option in OPTIONS)
    if args:
        raise MarkerError(f"{test}: @pytest.mark.sol takes keyword arguments only ({takes}), got positional {args[0]!r}")
    unknown = [k for k in kwargs if k not in {option.name for option in OPTIONS}]
    if unknown:
        raise MarkerError(f"{test}: @pytest.mark.sol got unknown argument {unknown[0]!r}; it takes {takes}")
    given = {option.name: option.metadata["check"] for option in OPTIONS if kwargs.get(option.name) is not None}
    return Budget(**{key: check(test, key, kwargs[key]) for key, check in given.items()})


def per_profile(budget: Budget) -> list[tuple[str, tuple[tuple[str, float], ...]]]:
    """(marker argument, its {glob: value} pairs) for each budget given per profile."""
    given = ((option.name, getattr(budget, option.name)) for option in OPTIONS)
    return [(key, spec) for key, spec in given if isinstance(spec, tuple)]


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

