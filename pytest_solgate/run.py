"""Run: one session's lifecycle (a pytest session, or another driver's), with no pytest in it.

A ``Run`` opens the history at the start (a foreign or misconfigured one is refused before any test
runs; a server that cannot be reached is remembered, not fatal), knows the commit being measured,
chooses baselines, owns the engine, hands each test its ``sol`` object, judges the test's
measurements right after its body, and at the end records the run (or spools it) and writes the
outputs. The pytest plugin translates hooks into these calls and decides nothing; a driver other
than pytest (a benchmark, the command line) can use the same object.
"""

from __future__ import annotations

import datetime
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

from pytest_solgate.fixture import SolFixture
from pytest_solgate.record import gitinfo
from pytest_solgate.record.outcome import OutcomeTally
from pytest_solgate.roles import Controller, Role
from pytest_solgate.support.errors import (
    HistoryElsewhere,
    HistoryError,
    HistoryUnavailable,
    MarkerError,
    SolgateError,
)
from pytest_solgate.support.locations import (
    absolute_path,
    history_remedy,
    is_history_url,
    one_line,
    refuse_colliding_outputs,
    resolve_history,
)
from pytest_solgate.support.settings import Settings, history_required

# Only what every session needs is imported above: a suite that never measures must not pay for the
# engine, the judge, the history or the reports (benchmarks/overhead.py keeps us honest).
if TYPE_CHECKING:
    from pytest_solgate.declare.profiles import ProfileOption
    from pytest_solgate.engine.kernels import Engine
    from pytest_solgate.judge.budget import Budget as Budget  # re-exported: plugin.py's stash key holds one
    from pytest_solgate.judge.window import BaselineWindow
    from pytest_solgate.measure.backends import CpuClock
    from pytest_solgate.measure.ncu import DramTraffic
    from pytest_solgate.measure.platform import Platform
    from pytest_solgate.record.baseline import BaselineChooser
    from pytest_solgate.record.store import Store
    from pytest_solgate.results import Measurement

UNAVAILABLE = "baselines unavailable, so only budgets were judged"
HISTORY_REQUIRED = ("solgate: this run fails: its history was not saved and the history is required here "
                    "($CI is set, or --sol-require-history=yes); --sol-require-history=no lets it pass")


@dataclass(frozen=True)
class TestVerdicts:
    """What judging one test's measurements leaves its runner to do."""

    __test__ = False  # not a test class, whatever its name says

    records: list[Measurement]
    failures: list[str] = field(default_factory=list)  # why the test fails (notes on its own error, if any)
    warnings: list[str] = field(default_factory=list)  # what to warn about at the test


def new_run_id() -> str:
    return uuid.uuid4().hex


def guard_intact(integrity: str) -> Callable[[], tuple[str, ...]]:
    """The integrity checks' functions as they are now, for the plugin's hook to compare after each test
    (measure/integrity/tampering.py); nothing to compare under --sol-integrity=off."""
    if integrity == "off":
        return tuple
    from pytest_solgate.measure.integrity.tampering import GuardIntact

    return GuardIntact()


class Run:
    """One session, start to end: the history, the baselines, the ``sol`` objects, the records and
    the outputs; its measurements are its engine's (engine/, built on first use). ``rootdir`` is
    where the tests' ids start, ``invocation_dir`` where relative output paths start,
    ``history_source`` which setting named the history (for its messages), ``outputs`` the other
    files the session writes ((flag, path) pairs, --junitxml say), so that none of them can
    overwrite the history. ``announce`` prints a line now, ``warn`` warns at the code being run,
    ``warn_at_start`` warns before any test runs."""

    def __init__(
        self,
        settings: Settings,
        *,
        rootdir: Path,
        invocation_dir: Path,
        command: str,
        history_source: str,
        role: Role | None = None,
        outputs: Sequence[tuple[str, object]] = (),
        announce: Callable[[str], None],
        warn: Callable[[str], None],
        warn_at_start: Callable[[str], None],
        platform: Platform | None = None,
    ) -> None:
        self.settings = settings
        self.guard_intact = guard_intact(settings.integrity)  # before any test module is imported
        self.platform = platform  # the devices to measure on; None: this machine's (measure/platform.py)
        self.rootdir = rootdir
        self.invocation_dir = invocation_dir
        self.command = command
        self.role: Role = role or Controller()  # pytest-xdist's part for this process (roles.py)
        self.announce = announce
        self.warn = warn
        # The history and the calibration cache live at the git top level (else the rootdir),
        # whichever directory the session starts in; a relative --sol-history is taken from there too.
        self.project_root = gitinfo.project_root(rootdir)
        self.state_dir = gitinfo.state_dir(rootdir)
        self.history_source = history_source
        self.history_location = resolve_history(settings.history, self.project_root, history_source)
        self.history_lost = False  # set when the run could not be recorded and the history is required: the session fails
        self._refuse_colliding_outputs(outputs)
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self.run_id = self.role.run_id or new_run_id()
        self.records: list[Measurement] = []
        self.messages: list[str] = []
        self.tally = OutcomeTally()  # pytest's outcome of each test, beside the verdicts in every report
        self._git: gitinfo.GitFacts | None = None
        self._store: Store | None = None
        self._engine: Engine | None = None
        self._known_ids: list[str] | None = None  # the profile ids a budget glob may name, read on first use
        unavailable = self._open_store_at_start(warn_at_start) if settings.baseline != "none" or not settings.no_save else None
        self.baselines = self._baseline_chooser(unavailable)
        # Where pytest's ids start, relative to the git top level: "" when the rootdir is the top.
        self.key_prefix = _relative_prefix(rootdir, self.project_root)
        self.profile_option: ProfileOption | None = None  # resolved once, here: a bad --sol-profile fails before any test runs
        if settings.profile:
            from pytest_solgate.declare.profiles import resolve_profile_option

            self.profile_option = resolve_profile_option(settings.profile)

    def _baseline_chooser(self, unavailable: str | None) -> BaselineChooser:
        """What chooses each measurement's baseline window (record/baseline.py, by judge/level.py's
        rule); a --sol-baseline ref that names no commit fails now, once a session (the role's check)."""
        from pytest_solgate.judge.level import is_pull_request, window
        from pytest_solgate.record.baseline import BaselineChooser, start_commit

        settings = self.settings
        if settings.baseline not in ("auto", "none"):
            self.role.at_start(lambda: start_commit(self.project_root, settings.baseline, gitinfo.facts(self.project_root)))
        return BaselineChooser(
            self.project_root, settings.baseline, settings.baseline_window, lambda: self.git, self._store_or_none,
            window, unavailable, settings.min_change, is_pull_request(os.environ.get("GITHUB_EVENT_NAME", "")),
        )

    # --- what the session measures with ---------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The measuring engine, built on first use (by the first test that measures)."""
        if self._engine is None:
            from pytest_solgate.engine import Engine

            self._engine = Engine(
                self.settings,
                cache_dir=self.state_dir,
                profile_option=self.profile_option,
                baseline_finder=self._baseline_window,
                head=lambda: (self.git.commit, self.git.dirty),
                run_id=self.run_id,
                announce=self.announce,
                warn=self.warn,
                dram_profiler=self._profile_dram,
                platform=self.platform,
            )
        return self._engine

    def _profile_dram(self, test: str, name: str) -> DramTraffic:
        """--sol-ncu: the test node run again under Nsight Compute for one measurement (measure/ncu.py)."""
        from pytest_solgate.measure import ncu

        nodeid = test[len(self.key_prefix):] if self.key_prefix and test.startswith(self.key_prefix) else test
        device = str(self.engine.context().device)
        profile = self.settings.profile
        if profile and Path(absolute_path(profile, self.invocation_dir)).is_file():
            profile = str(absolute_path(profile, self.invocation_dir))  # the child starts in the rootdir
        return ncu.profile(nodeid, test, name, self.rootdir, device, profile)

    def close(self) -> None:
        """The session is over (pytest's unconfigure): the engine gives the device its clocks back."""
        if self._engine is not None:
            self._engine.close()

    @property
    def git(self) -> gitinfo.GitFacts:
        """The commit being measured (and whether the tree is dirty), read once, when first needed."""
        if self._git is None:
            self._git = gitinfo.facts(self.rootdir)
        return self._git

    def test_key(self, nodeid: str) -> str:
        """The id a test's measurements are recorded under: pytest's node id made relative to the
        git top level, so that running from a subdirectory without an ini file (another rootdir)
        keeps the same key, and with it the baseline."""
        return self.key_prefix + nodeid

    def _baseline_window(self, test: str, name: str, profile: str, ceilings: str,
                         head_environment: Mapping[str, str]) -> BaselineWindow | None:
        """The baseline window under the git-top key; histories recorded before keys were made
        relative to the git top hold the rootdir-relative id: read those too."""
        rest = (name, profile, ceilings, head_environment)
        window = self.baselines.window(test, *rest)
        if window is None and self.key_prefix and test.startswith(self.key_prefix):
            window = self.baselines.window(test[len(self.key_prefix):], *rest)
        return window

    # --- the history at the start ---------------------------------------------------------------

    def _refuse_colliding_outputs(self, outputs: Sequence[tuple[str, object]]) -> None:
        settings = self.settings
        targets = [] if is_history_url(self.history_location) else [("--sol-history", Path(self.history_location))]
        for flag, value in (("--sol-report", settings.report), ("--sol-json", settings.json),
                            ("--sol-markdown", settings.markdown), ("--sol-benchmark-action", settings.benchmark_action),
                            *outputs):
            if value:
                targets.append((flag, absolute_path(str(value), self.invocation_dir)))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if settings.github_summary and summary:
            targets.append(("--sol-github-summary ($GITHUB_STEP_SUMMARY)", Path(summary)))
        refuse_colliding_outputs(targets)

    def _open_store(self) -> Store | None:
        from pytest_solgate.record import history

        if self._store is None:
            self._store = history.open_for_reading(self.history_location)
        return self._store

    def _open_store_at_start(self, warn_at_start: Callable[[str], None]) -> str | None:
        """A foreign, corrupt or misconfigured history is refused now, before any test runs; an
        unreachable server is not: budgets are still judged and the run is spooled at the end.
        Returns why the history is unavailable, or None."""
        if not is_history_url(self.history_location) and not Path(self.history_location).exists():
            return None  # nothing to refuse, and the history module stays unimported
        try:
            self._open_store()
        except HistoryUnavailable as exc:
            self.role.warn_at_start(warn_at_start, one_line(f"{UNAVAILABLE}: {exc}"))
            return str(exc)
        except HistoryElsewhere as exc:
            raise HistoryElsewhere(f"{exc}; {history_remedy(self.history_source)}") from None
        return None

    def _store_or_none(self) -> Store | None:
        try:
            return self._open_store()
        except HistoryUnavailable:
            raise  # the chooser remembers it and stops asking
        except HistoryError:
            return None

    # --- each test ------------------------------------------------------------------------------

    def fixture(self, nodeid: str, clock: CpuClock | None = None) -> SolFixture:
        """What the test ``nodeid`` receives as ``sol``, timing on ``clock`` (the ``sol_clock``
        fixture's) where it is not None."""
        return SolFixture(self.engine, self.test_key(nodeid), self.warn, clock)

    def budget(self, nodeid: str, args: Sequence[object], kwargs: Mapping[str, object]) -> Budget:
        """The ``sol`` marker's arguments, checked: a bad one, or a profile glob that matches no
        known profile (a typo would remove the gate), raises MarkerError naming the test."""
        from pytest_solgate.judge.budget import budget_globs, check_budget_globs, parse_marker

        budget = parse_marker(nodeid, args, kwargs)
        if budget_globs(budget):
            try:
                check_budget_globs(nodeid, budget, self._profile_ids())
            except MarkerError:
                if not self._import_torch_for_cpu_id():
                    raise
                # The advice then names this CPU's real id (cpu-<fingerprint>), not the shape's stand-in.
                check_budget_globs(nodeid, budget, self._profile_ids())
        return budget

    def _import_torch_for_cpu_id(self) -> bool:
        """Import torch (which this CPU's profile id reads) when the known ids stood in a
        placeholder for it: worth its second only on the way to an error. Whether the ids changed."""
        import importlib.util
        import sys

        if "torch" in sys.modules or importlib.util.find_spec("torch") is None:
            return False
        import torch  # noqa: F401

        self._known_ids = None
        return True

    def _profile_ids(self) -> list[str]:
        """Every profile id a budget glob may name: the shipped and the user's profiles, the ones
        measured here, and the shapes of ids measured elsewhere (cpu-<key>, <id>-measured-<gpu>).
        Read once."""
        if self._known_ids is None:
            from pytest_solgate.declare.profiles import builtin_profiles, known_profiles

            option = self.profile_option
            try:
                ids = {p.id for p in known_profiles(self.state_dir, option.folders if option else ())}
            except SolgateError:  # a damaged file in the calibration cache is re-measured later, not a marker error
                ids = {p.id for p in builtin_profiles()}
            if option is not None and option.profile is not None:
                ids.add(option.profile.id)
            cpu = self._this_cpu_id()
            # The shapes of ids measured elsewhere stand in where this machine's are not known.
            shapes = {cpu or "cpu-0123456789"} | {f"{i}-measured-01234567" for i in ids if not i.startswith("cpu-")}
            self._known_ids = sorted(ids | shapes)
        return self._known_ids

    @staticmethod
    def _this_cpu_id() -> str | None:
        """This CPU's profile id, when torch is already imported (the test modules import it;
        collection never pays for importing it here)."""
        import sys

        if "torch" not in sys.modules:
            return None
        from pytest_solgate.measure import calibrate

        return f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(sys.modules['torch']))}"

    def judge_test(self, nodeid: str, budget: Budget | None, measured: list[Measurement], body_failed: bool) -> TestVerdicts:
        """Judge a test's measurements right after its body. ``failures`` says why they fail the
        test (nothing when they do not); when the body itself failed they are notes on its error,
        each naming its verdict, and nothing warns."""
        from pytest_solgate.judge.budget import Budget

        if measured and (replaced := self.guard_intact()):  # the checks' own functions, compared first
            return TestVerdicts([], [f"{nodeid}: tampered timing: {', '.join(replaced)} replaced since the session "
                                     "started: nothing it measured was checked"])
        try:
            judged = self.engine.judge_test(self.test_key(nodeid), budget or Budget(), measured) if measured else []
        except SolgateError as exc:  # a budget the measurements cannot meet as declared (no reference)
            return TestVerdicts([], [str(exc)])
        if budget is not None and not measured and not body_failed:
            return TestVerdicts(judged, [f"{nodeid}: marked sol but measured nothing; call sol.measure(...) in the test"])
        failures, warnings = [], []
        for m in judged:
            assert m.judgement is not None  # judge_test judges every measurement it returns
            effect = self.engine.effect(m)
            if effect == "fail":  # as a note beside the test's own error, it says which verdict it is
                failures.append(_led_by_verdict(m.verdict, m.judgement.reason) if body_failed else m.judgement.reason)
            elif effect == "warn" and not body_failed:
                warnings.append(_led_by_verdict(m.verdict, m.judgement.reason))
        return TestVerdicts(judged, failures, warnings)

    def test_reported(self, nodeid: str, category: str) -> None:
        """One of pytest's reports of ``nodeid`` (a phase of the test, a worker's too under xdist), in
        pytest's own category ('passed', 'failed', 'error', 'skipped', ...; '' for a phase that passed quietly)."""
        self.tally.add(self.test_key(nodeid), category)

    # --- the end --------------------------------------------------------------------------------

    def finish(self, interrupted: bool) -> bool:
        """Record the run (or spool it), then write every output asked for, where this process's
        role records; what there is to say goes to ``messages``. True when the session must fail: a
        required history was not written."""
        return self.role.finish(lambda: self._record_and_publish(interrupted))

    def _record_and_publish(self, interrupted: bool) -> bool:
        wanted = (self.settings.report, self.settings.json, self.settings.markdown, self.settings.benchmark_action)
        if not (self.records or any(wanted)):
            return False
        from pytest_solgate.measure import ncu_child

        if ncu_child.is_child():
            return False  # an --sol-ncu child profiles one call: it records and writes nothing
        from pytest_solgate.record.runinfo import build_run_info
        from pytest_solgate.report import outputs

        git = self.git if self.records else gitinfo.GitFacts()
        run = build_run_info(self.run_id, self.started_at, self.rootdir, git, self.records, self.command,
                             self.settings.baseline, interrupted=interrupted)
        contended = [m for m in self.records if m.contended]
        if contended:
            self.messages.append(contended_line(len(contended), contended[0].contended))
        # Once per session, and only in the session whose ceilings differ from the last run's: the
        # runs before the change stay in the windows (compared on time) for several sessions more.
        changed = [m for m in self.records if m.judgement and m.judgement.baseline and m.judgement.baseline.ceilings_changed]
        if changed:
            self.messages.append(ceilings_changed_line(len(changed), changed[0]))
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
                saved = save.save(self.history_location, self.state_dir, run, self.records, history_remedy(self.history_source))
                self.records, said = saved.measurements, saved.messages
                if saved.lost and history_required(self.settings.require_history, os.environ):
                    self.history_lost = True
                    said.append(HISTORY_REQUIRED)
            self.messages += said
        scored = self._engine.resolved_profile() if self._engine is not None else None
        self.messages += outputs.publish(
            self.settings, run, self.records, self.invocation_dir, self.state_dir,
            self.profile_option, [scored] if scored is not None else [], self.tally.outcomes(),
        )
        return self.history_lost


def _relative_prefix(rootdir: Path, top: Path) -> str:
    """'sub/dir/' when pytest's rootdir is sub/dir under the git top level; '' when it is the top
    (or outside it: a rootdir above the repository keeps pytest's own ids)."""
    try:
        relative = Path(rootdir).resolve().relative_to(Path(top).resolve())
    except ValueError:
        return ""
    return "" if str(relative) == "." else relative.as_posix() + "/"


class _TracebackEntry(Protocol):
    @property
    def path(self) -> object: ...

    @property
    def lineno(self) -> int: ...


class RaisedInfo(Protocol):
    """What is read of pytest's ExceptionInfo (this module imports no pytest)."""

    @property
    def traceback(self) -> Sequence[_TracebackEntry]: ...

    @property
    def value(self) -> BaseException: ...


def at_users_call(excinfo: RaisedInfo, rootpath: Path) -> str:
    """A declaration the user got wrong (no bytes=, a bad name) as one line at their own call,
    '<file>:<line>: no work declared: ...': no traceback, no exception class."""
    package = Path(__file__).resolve().parent
    users = [e for e in excinfo.traceback if package not in Path(str(e.path)).resolve().parents]
    where = f"{os.path.relpath(Path(str(users[-1].path)), rootpath)}:{users[-1].lineno + 1}: " if users else ""
    return f"{where}{one_line(str(excinfo.value))}"


def contended_line(count: int, first_reason: str, width: int = 80) -> str:
    """The end-of-session line about contended measurements, wrapped to the terminal's 80 columns
    as the SOL table is: what happened first, then why (the first one's reading), then what it means."""
    import textwrap

    lines = [f"solgate: {count} measurement(s) taken while the machine was busy"]
    lines += textwrap.wrap(f"({first_reason});", width, initial_indent="  ", subsequent_indent="  ")
    lines.append("  judged on the thread's CPU time, or against runs as busy (docs/history.md)")
    return "\n".join(lines)


def ceilings_changed_line(count: int, first: Measurement, width: int = 80) -> str:
    """The end-of-session line about measurements whose ceilings changed since their last run
    (``first`` the first of them), wrapped to 80 columns as ``contended_line`` is."""
    import textwrap

    return "\n".join(textwrap.wrap(
        f"solgate: the ceilings of {first.profile} changed since the last run, so {count} measurement(s) "
        f"(first: {first.test} [{first.name}]) are compared on time: SOLs under other ceilings are not "
        "comparable, times are. Re-calibrated, raised by a re-check that ran faster, or an edited profile: "
        f"nothing to do; if you did not mean to change them, `solgate profile {first.profile}` shows them",
        width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False))


def _led_by_verdict(verdict: object, reason: str) -> str:
    """A verdict's reason led by the verdict, once (a comparison's message already starts with it)."""
    return reason if reason.startswith(f"{verdict}:") else f"{verdict}: {reason}"


def triton_hint(exc: BaseException) -> str | None:
    """What to do when a test failed because Triton found no GPU ('' otherwise)."""
    from pytest_solgate.measure.backends import triton_driver_hint  # only when a test failed

    return triton_driver_hint(exc)
