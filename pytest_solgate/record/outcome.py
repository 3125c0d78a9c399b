"""Record: pytest's own outcome of a run (passed, failed, errors, skipped), kept beside the verdicts
so that no report of a run whose tests failed reads as green, and which tests failed, so that a
measurement of a test that failed its own assertion is marked with that failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# pytest's categories (its hook ``pytest_report_teststatus``) as its summary line counts them.
COUNTED = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped",
           "xfailed": "xfailed", "xpassed": "xpassed"}
FAILING = {"failed": "test failed", "error": "test error"}  # a row's mark, by category


@dataclass(frozen=True)
class TestOutcomes:
    """How the run's tests ended, as pytest counts them, and the failure of each test that failed."""

    __test__ = False  # not a test class, whatever its name says

    counts: Mapping[str, int] = field(default_factory=dict)  # passed, failed, errors, skipped, xfailed, xpassed
    failures: Mapping[str, str] = field(default_factory=dict)  # test key -> "test failed" or "test error"

    @property
    def failing(self) -> bool:
        return bool(self.counts.get("failed") or self.counts.get("errors"))

    def of(self, test: str) -> str:
        """'test failed', 'test error', or '' for a test that did not fail."""
        return self.failures.get(test, "")

    def to_dict(self) -> dict[str, int | dict[str, str]]:
        """The run's ``tests`` in a solgate/1 document (written for its readers; solgate reads no run's tests back)."""
        return {**{name: self.counts.get(name, 0) for name in COUNTED.values()}, "failures": dict(self.failures)}


class OutcomeTally:
    """Tallies pytest's reports (each phase of each test) as they arrive, on the controller too
    under xdist; ``outcomes`` is the run's outcome so far."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._failures: dict[str, str] = {}

    def add(self, test: str, category: str) -> None:
        """One report of ``test`` in pytest's ``category`` ('' for a setup or teardown that passed)."""
        counted = COUNTED.get(category)
        if counted is not None:
            self._counts[counted] = self._counts.get(counted, 0) + 1
        if category in FAILING:
            self._failures.setdefault(test, FAILING[category])

    def outcomes(self) -> TestOutcomes:
        return TestOutcomes(dict(self._counts), dict(self._failures))


def summary(outcomes: TestOutcomes | None) -> str:
    """pytest's counts in its words, failures first: '5 failed, 1 error, 23 passed' ('' when none)."""
    if outcomes is None:
        return ""
    words = {"errors": "error"}  # pytest says '1 error', '2 errors'
    parts = []
    for name in ("failed", "errors", "passed", "skipped", "xfailed", "xpassed"):  # a failure leads
        n = outcomes.counts.get(name, 0)
        if n:
            word = words.get(name, name) + ("s" if name == "errors" and n != 1 else "")
            parts.append(f"{n} {word}")
    return ", ".join(parts)
