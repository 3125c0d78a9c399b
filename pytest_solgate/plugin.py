"""Wiring: the pytest layer. It translates pytest's hooks into calls on the run object (``run.py``),
which makes every decision: no measuring, judging, recording or rendering happens here. Data path: the ``sol`` fixture measures through the run's engine; right after the test body returns the
measurements are judged (so a miss fails that test in its call phase); the judged records ride on
the call-phase report (``report.solgate_records``), which pytest-xdist carries from workers to the
controller; on the controller ``pytest_runtest_logreport`` collects them, and only the controller
writes the history and the reports at the end of the session.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Generator, Iterator, Sequence

import pytest

from pytest_solgate import hookspecs
from pytest_solgate.roles import carried, role_of
from pytest_solgate.support.errors import SolgateError, warn_at_users_code
from pytest_solgate.support.inifile import ini_type, sol_values
from pytest_solgate.support.locations import one_line, redact
from pytest_solgate.support.settings import OPTIONS, Settings, check_report_path, naming_history, parse_settings

if TYPE_CHECKING:
    from pytest_solgate.fixture import SolFixture
    from pytest_solgate.measure.backends import CpuClock
    from pytest_solgate.results import Measurement
    from pytest_solgate.run import Budget

# Only what every run needs is imported here and in run.py: a suite that never measures must not pay
# for the engine, the history or the reports (benchmarks/overhead.py keeps us honest).
BUDGET_KEY: pytest.StashKey[Budget] = pytest.StashKey()  # the test's checked marker (plugin.py imports no judge module)
FIXTURE_KEY = pytest.StashKey["SolFixture"]()
RECORDS_KEY = pytest.StashKey[Sequence["Measurement"]]()


class SolgateWarning(UserWarning):
    """A verdict that warns instead of failing (ambiguous, or --sol-gate=warn), or a setup caveat."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solgate", "pytest-solgate: speed-of-light budgets for kernels")
    for option in OPTIONS:
        text = f"{option.help} (ini: {option.name})".replace("%", "%%")  # argparse %-formats help: 95% printed a dict
        if option.kind == "bool":
            group.addoption(option.flag, action="store_true", default=None, dest=option.name, help=text)
        elif option.kind == "path-or-default":
            group.addoption(option.flag, nargs="?", const="sol-report.html", default=None, dest=option.name, metavar="PATH", help=text)
        else:
            group.addoption(option.flag, default=None, dest=option.name, help=text)
        parser.addini(option.name, help=option.help, default=None, type=ini_type(option))


def _raw_settings(config: pytest.Config) -> dict[str, object]:
    ini = sol_values(config)  # read as the `solgate` command reads it (support/inifile.py)
    raw = {}
    for option in OPTIONS:
        value = config.getoption(option.name)
        if value is None and option.environment:
            value = os.environ.get(option.environment) or None
        raw[option.name] = ini.get(option.name) if value is None else value
    return raw


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sol(min=None, mfu=None, max_regression=None, speedup=None, reference=None): speed-of-light budget "
        "for the test's measurements; min/mfu are floats in (0, 1] or {profile-glob: float} mappings; speedup "
        "is times faster than the gate=False measurement named by reference",
    )
    try:
        settings = parse_settings(_raw_settings(config))
        check_report_path(settings.report)
        session = SolgateSession(config, settings)
    except SolgateError as exc:
        raise pytest.UsageError(one_line(str(exc))) from None
    config.pluginmanager.register(session, "solgate-session")


def _around_capture(capture_off: Callable[[], ContextManager[None]], write: Callable[[str], None], line: str) -> None:
    with capture_off():  # capture is on during the test that triggers this: step around it
        write(line)


@pytest.fixture
def sol_clock() -> CpuClock | None:
    """The clock the CPU backend times on (None: the machine's); override it to return a
    ``backends.CpuClock``: a fake one, so a test of a gate cannot depend on the load (docs/reference.md)."""
    return None


@pytest.fixture
def sol(request: pytest.FixtureRequest, sol_clock: CpuClock | None) -> Iterator[SolFixture]:
    """Measure kernels against the speed of light: ``sol.measure(fn, bytes=..., flops=...)``."""
    session: SolgateSession | None = request.config.pluginmanager.get_plugin("solgate-session")
    assert session is not None, "registered at pytest_configure"
    fixture = session.run.fixture(request.node.nodeid, sol_clock)
    request.node.stash[FIXTURE_KEY] = fixture
    yield fixture
    fixture.close()


class SolgateSession:
    """The pytest side of a session: hooks translated into calls on the run object (``run.py``).
    Registered as a plugin so that its methods are hooks."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        from pytest_solgate.run import Run

        self.config = config
        history_source = naming_history(config.getoption("sol_history"), os.environ, config.getini("sol_history"))
        self.run = Run(
            settings,
            rootdir=Path(config.rootpath),
            invocation_dir=Path(config.invocation_params.dir),
            command="pytest " + " ".join(config.invocation_params.args),
            history_source=history_source,
            role=role_of(config),
            outputs=[("--junitxml", getattr(config.option, "xmlpath", None))],
            announce=self._announce,
            warn=lambda text: warn_at_users_code(SolgateWarning(text)),
            warn_at_start=lambda text: config.issue_config_time_warning(SolgateWarning(text), stacklevel=2),
            platform=config.hook.pytest_solgate_platform(config=config),  # a stand-in's devices and /proc, if one says
        )

    def _announce(self, text: str) -> None:
        plugins = self.config.pluginmanager
        reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
        self.run.role.announce(text, None if reporter is None or capture is None else
                               lambda line: _around_capture(capture.global_and_fixture_disabled, reporter.write_line, line))

    # --- collection and running -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Resolve the device and profile before the first test that measures, where the role does (roles.py)."""
        if not session.config.option.collectonly and any("sol" in getattr(i, "fixturenames", ()) for i in session.items):
            self.run.role.before_tests(self._resolve_context)

    def _resolve_context(self) -> None:
        try:
            self.run.engine.context()
        except SolgateError:
            pass  # remembered: the first measurement fails with it, in its test

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            marker = item.get_closest_marker("sol")
            if marker is not None:
                try:
                    item.stash[BUDGET_KEY] = self.run.budget(item.nodeid, marker.args, marker.kwargs)
                except SolgateError as exc:
                    raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, object, object]:
        if FIXTURE_KEY not in pyfuncitem.stash and BUDGET_KEY not in pyfuncitem.stash:
            return (yield)  # neither measures nor is marked: nothing to judge
        try:
            result = yield
        except BaseException as exc:
            # The test's own exception stays its failure (a correctness assert after measuring, a
            # reference that raised); what the verdicts say is added to it as notes, never in its place.
            failures = self._judge_item(pyfuncitem, body_failed=True)
            if isinstance(exc, Exception):
                for failure in failures:
                    exc.add_note(f"solgate: {failure}")
            raise
        # Failed here, outside the handler above: no "During handling of the above exception" chain.
        failures = self._judge_item(pyfuncitem, body_failed=False)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return result

    def _judge_item(self, item: pytest.Item, body_failed: bool) -> list[str]:
        """Judge the test's measurements (run.judge_test), keep the records, warn at the test; why they fail it."""
        from pytest_solgate.report import ci_formats

        fixture = item.stash.get(FIXTURE_KEY, None)
        try:
            verdicts = self.run.judge_test(item.nodeid, item.stash.get(BUDGET_KEY, None),
                                           fixture.measurements if fixture else [], body_failed)
        finally:
            if fixture is not None:
                fixture.close()  # a measurement after judging (a fixture's teardown) would be lost: refuse it
        item.stash[RECORDS_KEY] = verdicts.records
        for m in verdicts.records:
            item.user_properties.extend(ci_formats.junit_properties(m))
        path, line, _ = item.location  # warnings point at the test, not at this line of the plugin
        for text in verdicts.warnings:
            warnings.warn_explicit(SolgateWarning(text), SolgateWarning, str(self.config.rootpath / path), (line or 0) + 1)
        return verdicts.failures

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when == "call" and RECORDS_KEY in item.stash:  # xdist carries the report's own attribute along
            report.solgate_records = carried(item.stash[RECORDS_KEY])  # type: ignore[attr-defined]
        if not report.failed or call.excinfo is None:
            return report
        from pytest_solgate.run import at_users_call, triton_hint

        if call.excinfo.errisinstance(SolgateError):
            report.longrepr = at_users_call(call.excinfo, item.config.rootpath)
        elif hint := triton_hint(call.excinfo.value):
            report.sections.append(("solgate: Triton found no GPU", hint))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "solgate_records", None)
        if data:
            self.run.role.receive(self.run.records, data)
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        self.run.test_reported(report.nodeid, category)  # pytest's own counting: failed, error, skipped, xfailed...

    # --- xdist: one run id for the whole session -------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:  # Any: xdist's WorkerController (xdist ships no types)
        node.workerinput["solgate_run_id"] = self.run.run_id

    # --- end of session (controller only) -------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.run.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED) and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # pytest returns what this hook leaves here

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.run.close()  # --sol-lock-clocks: restored however the session ended (a failure, Ctrl-C)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.run.role.summarizes() or not (self.run.records or self.run.messages):  # every report asked for leaves a message
            return
        from pytest_solgate.report import terminal

        terminalreporter.write_sep("=", "SOL summary")
        for line in terminal.render(self.run.records, self.config.get_terminal_writer().fullwidth, self.run.tally.outcomes()):
            terminalreporter.write_line(line)
        for message in self.run.messages:
            terminalreporter.write_line(redact(message))  # a history URL's password never reaches the log
