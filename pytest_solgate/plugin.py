"""Wiring (no stage of its own): the pytest layer: hooks and the ``sol`` fixture, wired to the engine. No measuring, scoring or
rendering happens here.

Data path: the ``sol`` fixture measures through the engine; right after the test body returns the
measurements are judged (so a miss fails that test in its call phase); the judged records ride on
the call-phase report (``report.solgate_records``), which pytest-xdist carries from workers to the
controller; on the controller ``pytest_runtest_logreport`` collects them, and only the controller
writes the history and the reports at the end of the session.
"""

from __future__ import annotations

import datetime
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from pytest_solgate.declare.work import measurement_name
from pytest_solgate.support.errors import HistoryError, HistoryUnavailable, MeasureError, OptionError, SolgateError
from pytest_solgate.support.locations import one_line, redact, resolve_history
from pytest_solgate.support.settings import (
    HISTORY_VARIABLE,
    OPTIONS,
    Settings,
    absolute_path,
    is_history_url,
    parse_settings,
)

if TYPE_CHECKING:
    from pytest_solgate.results import Measurement

# Only what every run needs is imported above: a suite that never measures must not pay for the
# engine, the history or the reports (benchmarks/overhead.py keeps us honest).
BUDGET_KEY = pytest.StashKey[Any]()
FIXTURE_KEY = pytest.StashKey["SolFixture"]()
RECORDS_KEY = pytest.StashKey[list]()


class SolgateWarning(UserWarning):
    """A verdict that warns instead of failing (ambiguous, or --sol-gate=warn), or a setup caveat."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solgate", "pytest-solgate: speed-of-light budgets for kernels")
    for option in OPTIONS:
        text = f"{option.help} (ini: {option.name})"
        if option.kind == "bool":
            group.addoption(option.flag, action="store_true", default=None, dest=option.name, help=text)
        elif option.kind == "path-or-default":
            group.addoption(option.flag, nargs="?", const="sol-report.html", default=None, dest=option.name, metavar="PATH", help=text)
        else:
            group.addoption(option.flag, default=None, dest=option.name, help=text)
        parser.addini(option.name, help=option.help, default=None, type="bool" if option.kind == "bool" else "string")


def _raw_settings(config: pytest.Config) -> dict[str, Any]:
    raw = {}
    for option in OPTIONS:
        value = config.getoption(option.name)
        if value is None and option.environment:
            value = os.environ.get(option.environment) or None
        if value is None:
            try:
                value = config.getini(option.name) or None
            except (ValueError, pytest.UsageError) as exc:  # pytest's reading of an ini boolean names no option
                raise OptionError(f"ini option {option.name}: {exc}; give true or false") from None
            if value is not None and not isinstance(value, (str, bool, int, float)):
                # A TOML list or table where one value belongs: never a file named "['h.db']".
                raise OptionError(
                    f"ini option {option.name} = {value!r}: give one {'true or false' if option.kind == 'bool' else 'value'} "
                    f"(a string such as {option.name} = \"{option.default or '...'}\"), not a {type(value).__name__}"
                )
        raw[option.name] = value
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
    except SolgateError as exc:
        raise pytest.UsageError(one_line(str(exc))) from None
    report = settings.report
    if report and (Path(report).is_dir() or report.endswith(".py")):
        raise pytest.UsageError(
            f"--sol-report took '{report}' as its output path; write --sol-report=PATH, or put --sol-report last"
        )
    try:
        session = SolgateSession(config, settings)
    except SolgateError as exc:
        raise pytest.UsageError(one_line(str(exc))) from None
    config.pluginmanager.register(session, "solgate-session")


class SolFixture:
    """What a test receives as ``sol``: ``measure``, ``speed_of_light``, ``nbytes``, ``count_flops``,
    ``device``, ``profile``."""

    def __init__(self, engine: Any, test: str) -> None:
        self._engine = engine
        self._test = test
        self._closed = False
        self.measurements: list[Measurement] = []

    @staticmethod
    def nbytes(*arrays: Any) -> int:
        """Sum of ``nbytes`` of tensors or arrays: the usual way to write total fused bytes."""
        from pytest_solgate.declare.work import nbytes

        return nbytes(*arrays)

    def count_flops(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, int]:
        """FLOPs of ``fn(*args, **kwargs)`` by precision, through FlopCounterMode (meta tensors work);
        float64 matmuls count as ``fp64_tensor`` on profiles that have FP64 tensor cores."""
        from pytest_solgate.declare.work import count_flops, float64_on_tensor_cores

        counted = count_flops(fn, *args, **kwargs)
        if not counted:
            warnings.warn(SolgateWarning(
                f"{self._test}: sol.count_flops counted 0 FLOPs: FlopCounterMode counts only matmuls, convolutions "
                "and attention, not pointwise ops, reductions, softmax or norms; declare flops= yourself "
                "(e.g. about 5 per element for a softmax)"), stacklevel=2)
        if "fp64" not in counted:
            return counted
        return float64_on_tensor_cores(counted, self.profile.peak_tflops)

    @property
    def device(self) -> Any:
        place = str(self._engine.context().device)
        try:
            import torch
        except ImportError:
            return place
        return torch.device(place)

    @property
    def profile(self) -> Any:
        return self._engine.context().profile

    def measure(
        self,
        fn: Callable[[], Any],
        *positional: Any,
        flops: Any = None,
        bytes: Any = None,
        precision: str | None = None,
        name: str | None = None,
        gate: bool = True,
    ) -> Measurement:
        __tracebackhide__ = True
        if positional:
            raise MeasureError(
                f"{self._test}: sol.measure(fn, {', '.join(repr(p) for p in positional)}): after the kernel it takes "
                "keywords only: flops=, bytes=, precision=, name=, gate= (e.g. sol.measure(fn, bytes=1e6))"
            )
        if self._closed:
            raise MeasureError(
                f"sol.measure called after the body of {self._test} returned (in a fixture's teardown?); it would "
                "never be judged: call it inside the test body"
            )
        try:
            name = measurement_name(self._test, name, {m.name for m in self.measurements})
            measurement = self._engine.measure(
                self._test, fn, flops=flops, bytes=bytes, precision=precision, name=name, gate=bool(gate)
            )
        except SolgateError as exc:
            raise exc.with_traceback(None) from None
        self.measurements.append(measurement)
        return measurement

    def speed_of_light(self, *, flops: Any = None, bytes: Any = None, precision: str | None = None) -> Any:
        """The floor of declared work on this session's profile, without running anything:
        ``.t_sol`` (seconds), ``.bound``, ``.intensity`` (FLOP/byte) and ``.ridge``."""
        __tracebackhide__ = True
        try:
            return self._engine.speed_of_light(flops=flops, bytes=bytes, precision=precision)
        except SolgateError as exc:
            raise exc.with_traceback(None) from None

    def close(self) -> None:
        self._closed = True


@pytest.fixture
def sol(request: pytest.FixtureRequest) -> Any:
    """Measure kernels against the speed of light: ``sol.measure(fn, bytes=..., flops=...)``."""
    session: SolgateSession = request.config.pluginmanager.get_plugin("solgate-session")
    fixture = SolFixture(session.engine, session.test_key(request.node.nodeid))
    request.node.stash[FIXTURE_KEY] = fixture
    yield fixture
    fixture.close()


class SolgateSession:
    """Per-session state of the plugin; registered as a plugin so its methods are hooks."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self.rootdir = Path(config.rootpath)
        from pytest_solgate.record import gitinfo

        # The history and the calibration cache live at the git top level (else the rootdir),
        # whichever directory pytest starts in; a relative --sol-history is taken from there too.
        self.project_root = gitinfo.project_root(self.rootdir)
        self.state_dir = gitinfo.state_dir(self.rootdir)
        self.history_location = self._history_location(settings.history)
        self._refuse_colliding_outputs(Path(config.invocation_params.dir))
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self.run_id = (getattr(config, "workerinput", {}) or {}).get("solgate_run_id") or _new_id()
        self.records: list[Any] = []
        self.messages: list[str] = []
        self._git: Any = None
        self._store: Any = None
        unavailable = self._open_store_at_start() if settings.baseline != "none" or not settings.no_save else None
        from pytest_solgate.record.baseline import BaselineChooser, start_commit

        if settings.baseline not in ("auto", "none") and not self.is_worker:
            start_commit(self.project_root, settings.baseline, gitinfo.facts(self.project_root))  # a bad ref fails now
        self.baselines = BaselineChooser(
            self.project_root, settings.baseline, settings.baseline_window, lambda: self.git, self._store_or_none,
            unavailable, settings.min_change,
        )
        # Where pytest's ids start, relative to the git top level: "" when the rootdir is the top.
        self.key_prefix = _relative_prefix(self.rootdir, self.project_root)
        self._engine: Any = None
        self.profile_option: Any = None  # resolved once, here: a bad --sol-profile fails before any test runs
        if settings.profile:
            from pytest_solgate.declare.profiles import resolve_profile_option

            self.profile_option = resolve_profile_option(settings.profile)

    @property
    def engine(self) -> Any:
        """The measuring engine, built on first use (by the first test that requests ``sol``)."""
        if self._engine is None:
            from pytest_solgate.engine import Engine

            self._engine = Engine(
                self.settings,
                cache_dir=self.state_dir,
                profile_option=self.profile_option,
                baseline_finder=self._baseline_window,
                head=lambda: (self.git.commit, self.git.dirty),
                run_id=self.run_id,
                announce=self._announce,
                warn=lambda text: warnings.warn(SolgateWarning(text), stacklevel=2),
            )
        return self._engine

    def test_key(self, nodeid: str) -> str:
        """The id a test's measurements are recorded under: pytest's node id made relative to the
        git top level, so that running from a subdirectory without an ini file (another rootdir)
        keeps the same key, and with it the baseline."""
        return self.key_prefix + nodeid

    def _baseline_window(self, test: str, *rest: Any) -> Any:
        """The baseline window under the git-top key; histories recorded before keys were made
        relative to the git top hold the rootdir-relative id: read those too."""
        window = self.baselines.window(test, *rest)
        if window is None and self.key_prefix and test.startswith(self.key_prefix):
            window = self.baselines.window(test[len(self.key_prefix):], *rest)
        return window

    def _refuse_colliding_outputs(self, invocation_dir: Path) -> None:
        from pytest_solgate.support.settings import refuse_colliding_outputs

        settings = self.settings
        targets = [] if is_history_url(self.history_location) else [("--sol-history", Path(self.history_location))]
        for flag, value in (("--sol-report", settings.report), ("--sol-json", settings.json),
                            ("--sol-markdown", settings.markdown), ("--sol-benchmark-action", settings.benchmark_action),
                            ("--junitxml", getattr(self.config.option, "xmlpath", None))):
            if value:
                targets.append((flag, absolute_path(str(value), invocation_dir)))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if settings.github_summary and summary:
            targets.append(("--sol-github-summary ($GITHUB_STEP_SUMMARY)", Path(summary)))
        refuse_colliding_outputs(targets)

    def _history_location(self, given: str) -> str:
        """The history the settings name, parsed as every ``solgate`` command parses it."""
        if self.config.getoption("sol_history") is not None:
            source = "--sol-history"
        elif os.environ.get(HISTORY_VARIABLE):
            source = HISTORY_VARIABLE
        else:
            source = "ini sol_history"
        return resolve_history(given, self.project_root, source)

    def _announce(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None and not self.is_worker:
            # Output capture is on during the test that triggers this: step around it.
            with capture.global_and_fixture_disabled():
                reporter.write_line(text)
        else:
            import sys

            print(text, file=sys.__stderr__)

    # --- git and baselines ----------------------------------------------------------------------

    @property
    def git(self) -> Any:
        """The commit being measured (and whether the tree is dirty), read once, when first needed."""
        if self._git is None:
            from pytest_solgate.record import gitinfo

            self._git = gitinfo.facts(self.rootdir)
        return self._git

    def _open_store(self) -> Any:
        from pytest_solgate.record import history

        if self._store is None:
            self._store = history.open_for_reading(self.history_location)
        return self._store

    def _open_store_at_start(self) -> str | None:
        """A foreign, corrupt or misconfigured history is refused now, before any test runs; an
        unreachable server is not: budgets are still judged and the run is spooled at the end.
        Returns why the history is unavailable, or None."""
        if not is_history_url(self.history_location) and not Path(self.history_location).exists():
            return None  # nothing to refuse, and the history module stays unimported
        try:
            self._open_store()
        except HistoryUnavailable as exc:
            if not self.is_worker:
                self.config.issue_config_time_warning(SolgateWarning(one_line(f"{UNAVAILABLE}: {exc}")), stacklevel=2)
            return str(exc)
        return None

    def _store_or_none(self) -> Any:
        try:
            return self._open_store()
        except HistoryUnavailable:
            raise  # the chooser remembers it and stops asking
        except HistoryError:
            return None

    # --- collection and running -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Resolve the device and profile before the first test when a test will measure, so that
        a CPU calibration (seconds) is announced on its own line, not among the progress dots.
        Under xdist the workers do it (the controller measures nothing)."""
        if self.is_worker or getattr(self.config.option, "dist", "no") != "no" or session.config.option.collectonly:
            return
        if any("sol" in getattr(item, "fixturenames", ()) for item in session.items):
            try:
                self.engine.context()
            except SolgateError:
                pass  # remembered: the first measurement fails with it, in its test

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        profile_ids: list[str] | None = None  # read once, and only when a marker has a {glob: budget}
        for item in items:
            marker = item.get_closest_marker("sol")
            if marker is None:
                continue
            from pytest_solgate.judge import verdict

            try:
                budget = verdict.parse_marker(item.nodeid, marker.args, marker.kwargs)
                if verdict.budget_globs(budget):
                    profile_ids = self._profile_ids() if profile_ids is None else profile_ids
                    verdict.check_budget_globs(item.nodeid, budget, profile_ids)
            except SolgateError as exc:
                raise pytest.UsageError(str(exc)) from None
            item.stash[BUDGET_KEY] = budget

    def _profile_ids(self) -> list[str]:
        """Every profile id a budget glob may name: the shipped and the user's profiles, the ones
        measured here, and the shapes of ids measured elsewhere (cpu-<key>, <id>-measured-<gpu>)."""
        from pytest_solgate.declare.profiles import builtin_profiles, known_profiles

        option = self.profile_option
        try:
            ids = {p.id for p in known_profiles(self.state_dir, option.folders if option else ())}
        except SolgateError:  # a damaged file in the calibration cache is re-measured later, not a marker error
            ids = {p.id for p in builtin_profiles()}
        if option is not None and option.profile is not None:
            ids.add(option.profile.id)
        return sorted(ids | {"cpu-0123456789"} | {f"{i}-measured-01234567" for i in ids if not i.startswith("cpu-")})

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Any:
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
        """Judge the test's measurements and return why they fail it (nothing when they do not);
        a verdict that warns is issued here, when the body passed."""
        from pytest_solgate.judge import verdict
        from pytest_solgate.report import machine

        fixture = item.stash.get(FIXTURE_KEY, None)
        measured = fixture.measurements if fixture else []
        marked = BUDGET_KEY in item.stash
        try:
            judged = self.engine.judge_test(self.test_key(item.nodeid), item.stash.get(BUDGET_KEY, verdict.Budget()), measured) if measured else []
        except SolgateError as exc:  # a budget the measurements cannot meet as declared (no reference)
            return [str(exc)]
        finally:
            if fixture is not None:
                fixture.close()  # a measurement after judging (a fixture's teardown) would be lost: refuse it
        item.stash[RECORDS_KEY] = judged
        for m in judged:
            item.user_properties.extend(machine.junit_properties(m))
        if marked and not measured and not body_failed:
            return [f"{item.nodeid}: marked sol but measured nothing; call sol.measure(...) in the test"]
        failures = []
        for m in judged:
            effect = self.engine.effect(m)
            if effect == "fail":  # as a note beside the test's own error, it says which verdict it is
                failures.append(f"{m.verdict}: {m.judgement.reason}" if body_failed else m.judgement.reason)
            elif effect == "warn" and not body_failed:
                # Located at the test, not at this line of the plugin.
                path, line, _ = item.location
                warnings.warn_explicit(SolgateWarning(f"{m.verdict}: {m.judgement.reason}"), SolgateWarning,
                                       str(self.config.rootpath / path), (line or 0) + 1)
        return failures

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        if report.when == "call" and RECORDS_KEY in item.stash:
            report.solgate_records = [m.to_dict() for m in item.stash.get(RECORDS_KEY, [])]
        if report.failed and call.excinfo is not None:
            from pytest_solgate.measure.backends import triton_driver_hint

            hint = triton_driver_hint(call.excinfo.value)
            if hint:
                report.sections.append(("solgate: Triton found no GPU", hint))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "solgate_records", None)
        if not data or self.is_worker:
            return
        from pytest_solgate.results import Measurement

        self.records += [Measurement.from_dict(d) for d in data]

    # --- xdist: one run id for the whole session -------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["solgate_run_id"] = self.run_id

    # --- end of session (controller only) -------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        wanted = (self.settings.report, self.settings.json, self.settings.markdown, self.settings.benchmark_action)
        if self.is_worker or not (self.records or any(wanted)):
            return
        from pytest_solgate.record import gitinfo
        from pytest_solgate.record.runinfo import build_run_info
        from pytest_solgate.report import outputs

        git = self.git if self.records else gitinfo.GitFacts()
        run = build_run_info(
            self.run_id,
            self.started_at,
            self.rootdir,
            git,
            self.records,
            "pytest " + " ".join(self.config.invocation_params.args),
            self.settings.baseline,
            interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
        )
        contended = [m for m in self.records if m.contended]
        if contended:
            self.messages.append(
                f"solgate: {len(contended)} measurement(s) taken while the machine was busy (contended: "
                f"{contended[0].contended}); they are recorded, never baselines, and cannot fail as regressed"
            )
        if run.status == "interrupted":
            # Recorded (what was measured is evidence) but never a baseline, and every output says so.
            self.messages.append(f"solgate: the session was interrupted: this run ({len(self.records)} measurement(s)) "
                                 "is recorded as interrupted, never used as a baseline, and its reports are partial")
        if self._store is not None:
            self._store.close()
            self._store = None
        if self.baselines.unavailable:
            self.messages.append(f"solgate: {UNAVAILABLE}: {self.baselines.unavailable}")
        if self.records:
            from pytest_solgate.record import save

            if self.settings.no_save:
                self.records, said = save.read_trends(self.history_location, self.records)
            else:
                self.records, said = save.save(self.history_location, self.state_dir, run, self.records)
            self.messages += said
        scored = self._engine.resolved_profile() if self._engine is not None else None
        self.messages += outputs.publish(
            self.settings, run, self.records, Path(self.config.invocation_params.dir), self.state_dir,
            self.profile_option, [scored] if scored is not None else [],
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        if not self.records and not self.messages:  # every report asked for leaves a message
            return
        from pytest_solgate.report import terminal

        terminalreporter.write_sep("=", "SOL summary")
        for line in terminal.render(self.records, self.config.get_terminal_writer().fullwidth):
            terminalreporter.write_line(line)
        for message in self.messages:
            terminalreporter.write_line(redact(message))  # a history URL's password never reaches the log


UNAVAILABLE = "baselines unavailable, so only budgets were judged"


def _relative_prefix(rootdir: Path, top: Path) -> str:
    """'sub/dir/' when pytest's rootdir is sub/dir under the git top level; '' when it is the top
    (or outside it: a rootdir above the repository keeps pytest's own ids)."""
    try:
        relative = Path(rootdir).resolve().relative_to(Path(top).resolve())
    except ValueError:
        return ""
    return "" if str(relative) == "." else relative.as_posix() + "/"


def _new_id() -> str:
    import uuid

    return uuid.uuid4().hex
