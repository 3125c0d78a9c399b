"""The part a session plays under pytest-xdist (pytest-cov's ``Central``/``DistWorker``): what a
``Controller`` does that a ``Worker`` leaves to it, so that no decision asks "am I a worker?".

A session without xdist is a ``Controller`` that measures too. Under xdist the workers measure and
judge their tests; their records travel to the controller on the call-phase reports, and only the
controller checks the run's settings against the repository, records the run, writes the outputs
and says what there is to say on the terminal. No pytest here: the plugin picks the role
(``plugin.py``), the run plays it (``run.py``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    import pytest

    from pytest_solgate.results import Measurement

Say = Callable[[str], None]


def on_stderr(text: str) -> None:
    """A line on the process's own stderr (pytest's capture of the test is stepped around)."""
    print(text, file=sys.__stderr__)


class Role(Protocol):
    """What a session does by its part: each method is one thing a controller and a worker do differently."""

    run_id: str | None  # the run's id where another process made it (None: a fresh one)

    def announce(self, text: str, on_terminal: Say | None) -> None: ...
    def before_tests(self, resolve: Callable[[], None]) -> None: ...
    def at_start(self, check: Callable[[], object]) -> None: ...
    def warn_at_start(self, warn: Say, text: str) -> None: ...
    def receive(self, records: list[Measurement], data: Sequence[Mapping[str, object]]) -> None: ...
    def finish(self, record: Callable[[], bool]) -> bool: ...
    def summarizes(self) -> bool: ...


class Controller:
    """The session that records: pytest's own, or pytest-xdist's controller (``distributed``)."""

    def __init__(self, distributed: bool = False) -> None:
        self.distributed = distributed  # xdist's workers measure: the controller measures nothing
        self.run_id: str | None = None  # a fresh one: the controller hands it to its workers

    def announce(self, text: str, on_terminal: Say | None) -> None:
        """A line now: on the terminal where pytest has one, else on stderr."""
        (on_terminal or on_stderr)(text)

    def before_tests(self, resolve: Callable[[], None]) -> None:
        """Resolve the device before the first test that measures, so that a CPU calibration is
        announced on its own line, not among the progress dots; under xdist the workers do it."""
        if not self.distributed:
            resolve()

    def at_start(self, check: Callable[[], object]) -> None:
        """What is checked once a session, before any test runs (a bad --sol-baseline ref)."""
        check()

    def warn_at_start(self, warn: Say, text: str) -> None:
        warn(text)

    def receive(self, records: list[Measurement], data: Sequence[Mapping[str, object]]) -> None:
        """A finished test's records, as they reached this process on its report (a worker's too)."""
        from pytest_solgate.results_json import decode

        records += [decode(d) for d in data]

    def finish(self, record: Callable[[], bool]) -> bool:
        """Record the run and write the outputs (``record``); True when the session must fail."""
        return record()

    def summarizes(self) -> bool:
        """Whether this process writes the SOL summary at the end."""
        return True


class Worker:
    """A pytest-xdist worker: measures and judges its tests, records nothing, says nothing at the
    end; its controller does (it shares the controller's run id, for the device lock)."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id

    def announce(self, text: str, on_terminal: Say | None) -> None:
        on_stderr(text)  # a worker has no terminal of its own

    def before_tests(self, resolve: Callable[[], None]) -> None:
        pass  # resolved by the first test that measures: its announcement goes to stderr anyway

    def at_start(self, check: Callable[[], object]) -> None:
        pass  # the controller checked it

    def warn_at_start(self, warn: Say, text: str) -> None:
        pass  # the controller warns, once

    def receive(self, records: list[Measurement], data: Sequence[Mapping[str, object]]) -> None:
        pass  # its records travel to the controller on the report

    def finish(self, record: Callable[[], bool]) -> bool:
        return False  # the controller records the run

    def summarizes(self) -> bool:
        return False


def carried(records: Sequence[Measurement]) -> list[dict[str, object]]:
    """A finished test's records as they travel on its report: their saved form (results_json.py),
    which the controller's ``receive`` reads back."""
    from pytest_solgate.results_json import encode

    return [encode(m) for m in records]


def role_of(config: pytest.Config) -> Role:
    """The part the process of this pytest ``config`` plays: an xdist worker (its config has
    ``workerinput``, with the controller's run id), or the controller (``-n``: xdist's)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Worker(workerinput.get("solgate_run_id"))
    return Controller(distributed=getattr(config.option, "dist", "no") != "no")
