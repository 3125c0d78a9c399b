"""Drive (after the stages, before the command): ``solgate bisect``, the first commit at which the
selected measurements fall below GOOD's level.

The search returns facts (``Bisection``); ``cli/bisect.py`` and ``report/bisection.py`` word them. Nothing here knows argparse.

How it decides, top to bottom:

- **The range** is BAD's first-parent line back to GOOD (GOOD excluded); GOOD must lie on it.
- **GOOD's level** is GOOD's own clean, undisturbed runs of each selected measurement: those the
  history holds, topped up with runs made here until there are ``good_runs`` of them; one run of
  GOOD tops up every test short of runs (40 commits, two tests, nothing recorded: 10 runs).
- **A commit is bad** when one of its measurements, judged against that level by the gate's own
  rule (``verdict.rejudge``: beyond the tolerance and beyond the noise floor of the 99 %
  t prediction bound), reads ``regressed``. ``ambiguous`` (within the floor, or another
  environment) and everything else is not bad.
- **Binary search** between the newest good and the oldest bad commit, one run per probe. A commit
  whose tests fail or do not collect, or that measures none of the selected measurements, is
  skipped and a neighbour is tried (``git bisect skip``'s rule); when only skipped commits are left
  between good and bad, the answer is a range: "the first bad commit is one of ...".
- **Confirmation**, as the gate confirms a regression by re-measuring: the commit the search ends
  on must read bad twice (its two newest runs). A second reading that is not bad makes it a good
  commit (a flaky reading), and the search goes on above it.
- **Drift**: when the drop at the first bad commit is under half of BAD's whole drop, the level
  fell over several commits, and the answer says so (``drifts``).
- **Reuse**: a commit's clean runs already in the history (same test, name, profile and ceilings)
  are readings like the ones made here; a commit is run only for the node ids it lacks.
- **The history's story first**: where the history holds runs of the range, the gate's story of
  each series along BAD's first-parent line (judge/level.py: ``along``, the one ``story`` the gate,
  ``history --changes`` and ``compare`` tell) may already put a fall in it, at X after W (the
  commit the series read before X). The search looks at X and then W before any middle commit:
  read bad and good, they bracket the search to (W, X], so the bisection ends on the history's
  step (or inside it, among commits the history has no run of) unless its own readings say
  otherwise; the answer says which (``HistoryStep``, ``Bisection.agreeing``).

Each run happens in one temporary ``git worktree`` (pytest_solgate/revisions/worktree.py, shared with
``solgate ab``), checked out at the probed commit; the user's work tree, index and HEAD are never
touched, and the worktree is removed afterwards, also on a failure or Ctrl-C.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

from pytest_solgate.judge import verdict
from pytest_solgate.judge.level import MIN_CHANGE, Step, along, select
from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.record import baseline, gitinfo, history, store
from pytest_solgate.results import AMBIGUOUS, REGRESSED, Measurement
from pytest_solgate.revisions import worktree
from pytest_solgate.support.errors import SolgateError

Key = tuple[str, str, str, str]  # test, name, profile, ceilings: the history's series key
MAX_RANGE = 100_000  # first-parent commits read between BAD and GOOD
DEFAULT_GOOD_RUNS = 3  # two runs give a floor at t(0.99, 1) = 31.8 sd: three are the least useful


class BisectError(SolgateError):
    """A bisection that cannot start (a ref that does not resolve, GOOD not before BAD, ...)."""


# --- the facts a bisection returns --------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One measurement at one commit against GOOD's level."""

    key: Key
    sol: float
    level: float  # GOOD's level of this measurement: the window's centre
    change: float  # relative SOL change against the level
    floor: float | None  # the smallest drop the run-to-run noise cannot explain; None if unknown
    tolerance: float
    verdict: str  # the gate's verdict against the level: regressed, ambiguous, pass, improved
    reused: bool  # read from the history, not run here

    @property
    def below(self) -> bool:
        return self.verdict == REGRESSED.value


@dataclass(frozen=True)
class Probe:
    """What one look at a commit found: its readings, or why it was skipped."""

    commit: str
    position: int  # 1 for the commit after GOOD ... len(range) for BAD
    readings: tuple[Reading, ...] = ()
    skipped: str = ""  # why the commit could not be judged (tests failed, nothing collected, ...)
    ran: bool = False  # a run was made here (False: every reading came from the history)
    confirmation: bool = False  # the second reading of the commit the search ended on

    @property
    def bad(self) -> bool:
        return not self.skipped and any(r.below for r in self.readings)

    @property
    def ambiguous(self) -> bool:
        """Not bad, but a reading the gate would not pass either (within GOOD's noise, another
        environment, a busy machine): never read as "at GOOD's level"."""
        return not self.skipped and not self.bad and any(r.verdict == AMBIGUOUS.value for r in self.readings)


@dataclass(frozen=True)
class Level:
    """GOOD's level of one measurement: the runs it stands on."""

    key: Key
    sol: float  # the geometric mean of the runs' SOL
    runs: int
    reused: int  # of them read from the history


@dataclass(frozen=True)
class Drift:
    """A measurement whose level fell over several commits, not at the first bad one: the step at
    that commit is less than half of BAD's whole drop against GOOD."""

    key: Key
    total: float  # BAD's relative SOL change against GOOD's level
    step: float  # the relative change at the first bad commit, against the newest commit read at the level before it
    since: str  # that commit (GOOD when no commit between was read at the level)


DRIFT_SHARE = 0.5  # a step under this share of the whole drop: the level fell gradually


@dataclass(frozen=True)
class HistoryStep:
    """A fall the history's story puts in the range (judge/level.py: ``along``): at ``step.commit``
    (``position`` in the range), after ``step.since`` (``since``: its position, 0 for GOOD or older)."""

    key: Key
    step: Step
    position: int
    since: int


@dataclass(frozen=True)
class Bisection:
    good: str
    bad: str
    commits: tuple[str, ...]  # the range, oldest first: GOOD's first-parent child ... BAD
    subjects: Mapping[str, str]  # commit -> its subject line
    tests: tuple[str, ...]  # the node ids bisected
    levels: tuple[Level, ...]
    probes: tuple[Probe, ...]  # in the order they were made, GOOD's level runs excluded
    culprit: str | None = None  # the first bad commit, when it is one commit
    candidates: tuple[str, ...] = ()  # the first bad commit is one of these (skipped commits hid it)
    skipped: tuple[str, ...] = ()  # commits that could not be judged
    good_runs_made: int = 0  # runs made at GOOD for its level
    flaky: tuple[str, ...] = ()  # commits read bad once and not again on their confirmation
    unclear: tuple[str, ...] = ()  # commits read ambiguous twice: neither good nor bad, skipped
    drift: tuple[Drift, ...] = ()  # measurements whose level fell gradually rather than at the culprit
    history: tuple[HistoryStep, ...] = ()  # the falls the history's story puts in the range, oldest first

    @property
    def found(self) -> bool:
        return bool(self.culprit or self.candidates)

    @property
    def agreeing(self) -> HistoryStep | None:
        """The history's fall whose commits (after ``since``, up to its own) hold the first bad
        commit found: the bisection and the history tell one story; None when none does."""
        first_bad = self.culprit or (self.candidates[-1] if self.candidates else None)
        if first_bad is None:
            return None
        at = self.commits.index(first_bad) + 1
        return next((fall for fall in self.history if fall.since < at <= fall.position), None)

    @property
    def runs(self) -> int:
        """Every pytest run this bisection made, GOOD's level included."""
        return self.good_runs_made + sum(p.ran for p in self.probes)

    @property
    def reused(self) -> int:
        return sum(r.reused for p in self.probes for r in p.readings)


# --- git ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    where: worktree.Place  # the repository's top level and where the command started in it
    good: str
    bad: str
    commits: tuple[str, ...]
    subjects: Mapping[str, str]
    older: tuple[str, ...] = ()  # GOOD and its first-parent ancestors, nearest first (the story's lookback)


def resolve_span(cwd: str | Path, good_ref: str, bad_ref: str) -> Span:
    """GOOD and BAD resolved (through ``gitinfo.resolve``, as every command resolves a commit) and
    the first-parent range between them; a one-line error for each thing that does not fit."""
    where = worktree.place(cwd, "bisect")
    resolved = []
    for role, ref in (("GOOD", good_ref), ("BAD", bad_ref)):
        sha = gitinfo.resolve(cwd, ref)
        if sha is None:
            raise BisectError(f"bisect: {role} '{ref}' is not a commit of the git repository here; give a ref or sha")
        resolved.append(sha)
    good, bad = resolved
    if good == bad:
        raise BisectError(f"bisect: GOOD and BAD are the same commit ({good[:10]}); give GOOD before BAD")
    line = gitinfo.first_parent_chain(cwd, bad, MAX_RANGE)
    if good not in line:
        side = "is an ancestor of BAD but not on its first-parent line (a merged branch)" if gitinfo.git(
            cwd, "merge-base", "--is-ancestor", good, bad) is not None else "is not an ancestor of BAD"
        raise BisectError(f"bisect: GOOD {good_ref} ({good[:10]}) {side}; give a GOOD on BAD's first-parent "
                          f"history (git log --first-parent {bad_ref})")
    commits = tuple(reversed(line[:line.index(good)]))
    out = gitinfo.git(cwd, "log", "--no-walk=unsorted", "--stdin", "--format=%H %s",
                      stdin="\n".join(commits) + "\n") or ""
    subjects = dict((line.split(" ", 1) + [""])[:2] for line in out.splitlines())
    return Span(where, good, bad, commits, subjects, tuple(line[line.index(good):][:gitinfo.MAX_ANCESTORS]))


# --- the search ---------------------------------------------------------------------------------


class Evidence:
    """Every run of every commit the bisection knows: the history's and the ones made here."""

    def __init__(self, reader: store.Store | None, runner: worktree.Runner, tests: Sequence[str]) -> None:
        self.reader = reader
        self.runner = runner
        self.tests = list(tests)
        self.runs: dict[str, list[dict[Key, tuple[store.RunRow, Measurement, bool]]]] = {}

    def recorded(self, commit: str) -> list[dict[Key, tuple[store.RunRow, Measurement, bool]]]:
        """The history's clean runs at ``commit`` of the selected tests, oldest first (read once)."""
        if commit not in self.runs:
            runs: dict[str, dict[Key, tuple[store.RunRow, Measurement, bool]]] = {}
            for run, m in (self.reader.results_at(commit) if self.reader is not None else []):
                if not run["dirty"] and m.test in self.tests and verdict.judged(m):
                    runs.setdefault(run["run_uid"], {})[series(m)] = (run, m, True)
            self.runs[commit] = list(runs.values())
        return self.runs[commit]

    def run(self, commit: str, tests: Sequence[str]) -> str:
        """Run ``tests`` at ``commit`` and keep the run; why it gave nothing, or ''."""
        result = self.runner.run(commit, tests)
        if result.failed:
            return result.failed
        made = {series(m): (run, m, False) for run, m in result.results if verdict.judged(m)}
        self.recorded(commit).append(made)
        return ""


def series(m: Measurement) -> Key:
    return (m.test, m.name, m.profile, m.ceilings)


class GoodLevel:
    """GOOD's level of each measurement: GOOD's clean, undisturbed runs of it, newest first (the
    history's first), topped up with runs at GOOD until there are ``good_runs``."""

    def __init__(self, evidence: Evidence, good: str, good_runs: int) -> None:
        self.evidence = evidence
        self.good = good
        self.good_runs = good_runs
        self.made = 0  # runs made at GOOD
        self.absent: set[Key] = set()  # measured at a probed commit, never at GOOD

    def keys(self) -> list[Key]:
        return sorted({key for run in self.evidence.recorded(self.good) for key in run})

    def _runs(self, key: Key) -> list[tuple[BaselineRun, bool]]:
        found = []
        for run in reversed(self.evidence.recorded(self.good)):
            if key in run:
                row, m, from_history = run[key]
                kept = store.baseline_run(row, m)
                if not kept.kept_out:  # interrupted, contended, noisy, not gated: never a baseline
                    found.append((kept, from_history))
        return found

    def _run(self, tests: Sequence[str]) -> None:
        failed = self.evidence.run(self.good, tests)
        self.made += 1
        if failed:
            raise BisectError(f"bisect: at GOOD {self.good[:10]} the selected tests give no results: {failed}; "
                              "give a GOOD where they pass")

    def start(self) -> list[str]:
        """The level of every measurement GOOD has (one run made first when the history has none),
        and the tests that measure them: those are the ones bisected."""
        if not self.keys():
            self._run(self.evidence.tests)
        if not self.keys():
            raise BisectError(f"bisect: at GOOD {self.good[:10]} the selected tests measure nothing the gate judges "
                              "(sol.measure with gate=True, not under TRITON_INTERPRET=1); select tests that do")
        for key in self.keys():
            self.window(key)
        return sorted({key[0] for key in self.keys()})

    def window(self, key: Key) -> list[BaselineRun] | None:
        """GOOD's runs of ``key``, topped up to ``good_runs``; None when GOOD does not measure it."""
        if key in self.absent:
            return None
        for _ in range(2 * self.good_runs):
            runs = [run for run, _ in self._runs(key)]
            if len(runs) >= self.good_runs:
                return runs
            self._run(self._short_of_runs(key))
            if key not in self.keys():  # e.g. a measurement added after GOOD, or another profile's
                self.absent.add(key)
                return None
        raise BisectError(f"bisect: GOOD {self.good[:10]}'s runs of {key[0]} [{key[1]}] were disturbed (noisy or "
                          f"contended) run after run: {len(runs)} of {self.good_runs} usable after {self.made} runs; "
                          "a noisy run's time budget ran out first: raise it (solgate bisect ... -- --sol-max-time=30), "
                          "or bisect on a quieter machine")

    def _short_of_runs(self, key: Key) -> list[str]:
        """The tests to run at GOOD to top up ``key``: its own, and every other test whose level
        is short of runs too, so that one run of GOOD tops up all of them (not one run per test)."""
        short = {other[0] for other in self.keys()
                 if other not in self.absent and other[0] in self.evidence.tests and len(self._runs(other)) < self.good_runs}
        return sorted(short | {key[0]})

    def levels(self) -> tuple[Level, ...]:
        facts = []
        for key in self.keys():
            runs = self._runs(key)
            if key not in self.absent and len(runs) >= self.good_runs:
                sols = [run.sol for run, _ in runs]
                facts.append(Level(key, _geometric_mean(sols), len(runs), sum(reused for _, reused in runs)))
        return tuple(facts)


def _geometric_mean(values: Sequence[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def history_falls(reader: store.Store | None, span: Span, keys: Sequence[Key], min_change: float = MIN_CHANGE) -> tuple[HistoryStep, ...]:
    """The falls the gate's story puts in the range, for each of ``keys``: ``along`` over
    the runs the history holds along BAD's first-parent line, down to GOOD and the lookback before it."""
    if reader is None:
        return ()
    chain = [*reversed(span.commits), *span.older]
    position = {commit: i + 1 for i, commit in enumerate(span.commits)}
    found = []
    for key in keys:
        runs, accepted = baseline.runs_between(reader, key, chain, len(span.commits))
        for step in along(runs, chain, accepted, min_change).steps:
            if step.commit in position and step.point.change < 0:
                found.append(HistoryStep(key, step, position[step.commit], position.get(step.since, 0)))
    return tuple(sorted(found, key=lambda fall: (fall.position, fall.key)))


class Search:
    """Binary search over the range with ``git bisect skip``'s rule, confirming the answer. The
    history's falls (``hints``: their commits, and the commits read before them) are looked at
    before any middle commit."""

    def __init__(self, evidence: Evidence, span: Span, level: GoodLevel, tolerance: float | None,
                 announce: Callable[[Probe], None], hints: Sequence[int] = ()) -> None:
        self.evidence = evidence
        self.span = span
        self.level = level
        self.tolerance = tolerance
        self.announce = announce
        self.probes: list[Probe] = []
        self.skipped: set[int] = set()
        self.flaky: list[str] = []
        self.unclear: list[str] = []
        self.hints = list(hints)

    def read(self, newest: Mapping[Key, tuple[store.RunRow, Measurement, bool]], commit: str) -> tuple[Reading, ...]:
        """Each measurement of ``newest`` judged against GOOD's level by the gate's own rule."""
        settings = verdict.JudgeSettings(gate="fail", commit=commit)
        readings = []
        for key, (_, m, reused) in sorted(newest.items()):
            runs = self.level.window(key) if key[0] in self.evidence.tests else None
            window = select(runs, m.environment) if runs else None  # like with like, as the gate chooses
            if window is None:
                continue
            compared = verdict.rejudge(m, window, settings, self.tolerance)
            readings.append(Reading(key, m.score.sol, compared.centre, compared.change, compared.floor,
                                    compared.facts.tolerance,
                                    compared.verdict.value, reused))
        return tuple(readings)

    def look(self, position: int, confirmation: bool = False) -> Probe:
        """The newest reading of each measurement at ``position`` (1-based in the range). A run is
        made for the tests whose measurements the history lacks there: one reading, or for a
        confirmation two (the second is the confirming one)."""
        commit = self.span.commits[position - 1]
        depth = 2 if confirmation else 1
        have = merged(self.evidence.recorded(commit), skip=depth - 1)
        missing = [test for test in self.evidence.tests if not any(key[0] == test for key in have)]
        failed = self.evidence.run(commit, missing) if missing else ""
        readings = () if failed else self.read(merged(self.evidence.recorded(commit), skip=0), commit)
        if not failed and not readings:
            failed = "measured none of the selected measurements (another profile or ceilings than GOOD's runs?)"
        probe = Probe(commit, position, readings, failed, bool(missing), confirmation)
        self.probes.append(probe)
        self.announce(probe)
        return probe

    def confirmed(self, position: int) -> bool:
        """Whether the commit the search ended on reads bad twice: a measurement below the level in
        both of its two newest readings (the gate's rule: a regression stands only when the
        re-measurement regressed too). A commit that cannot be run again keeps its first reading."""
        commit = self.span.commits[position - 1]
        probe = self.look(position, confirmation=True)
        if probe.skipped:
            return True
        before = self.read(merged(self.evidence.recorded(commit), skip=1), commit)
        return any(now.below and then.below for now in probe.readings for then in before if then.key == now.key)

    def pick(self, low: int, high: int) -> int | None:
        """The commit to look at between ``low`` (good) and ``high`` (bad): the first of the
        history's hints there, else the middle one, else the nearest one not skipped, as
        ``git bisect skip`` moves to a neighbour."""
        hinted = [position for position in self.hints if low < position < high and position not in self.skipped]
        if hinted:
            return hinted[0]
        middle = (low + high) // 2
        for step in range(high - low):
            for position in (middle - step, middle + step):
                if low < position < high and position not in self.skipped:
                    return position
        return None

    def run(self) -> tuple[int, int]:
        """(newest good, oldest bad) positions once no commit between them is left to judge; 0 is
        GOOD. An oldest bad of 0: BAD does not read below GOOD's level (nothing to find)."""
        last = len(self.span.commits)
        probe = self.look(last)
        if probe.skipped:
            self.skipped.add(last)
        if not probe.bad:
            return 0, 0
        low, bad = 0, {last}
        while bad:
            high = min(bad)
            position = self.pick(low, high)
            if position is not None:
                probe = self.look(position)
                if probe.ambiguous:  # measured again, as the gate re-measures, never taken as good
                    probe = self.look(position, confirmation=True)
                    if probe.ambiguous:
                        self.unclear.append(probe.commit)
                        self.skipped.add(position)
                        continue
                if probe.skipped:
                    self.skipped.add(position)
                elif probe.bad:
                    bad.add(position)
                else:
                    low = position
                continue
            if self.confirmed(high):
                return low, high
            # read bad once, not on its re-measurement: a flaky reading; a good commit after all
            self.flaky.append(self.span.commits[high - 1])
            bad = {b for b in bad if b > high}
            low = high
        return low, 0


def drifts(probes: Sequence[Probe], good: str, culprit: str | None, bad: str) -> tuple[Drift, ...]:
    """The measurements below at ``culprit`` whose drop there, against the newest commit read at
    GOOD's level before it, is under ``DRIFT_SHARE`` of BAD's whole drop: a gradual drift."""
    first = {p.commit: p for p in reversed(probes) if not p.skipped and not p.confirmation}
    if culprit is None or culprit not in first or bad not in first:
        return ()
    at = first[culprit]
    found = []
    for reading in at.readings:
        total = next((r.change for r in first[bad].readings if r.key == reading.key), None)
        if not reading.below or total is None or total >= 0:
            continue
        before = [(p.position, p.commit, r.sol) for p in first.values() if p.position < at.position
                  for r in p.readings if r.key == reading.key and not r.below]
        since, sol = next(((c, v) for _, c, v in sorted(before, reverse=True)), (good, reading.level))
        step = reading.sol / sol - 1
        if _log_share(step, total) < DRIFT_SHARE:
            found.append(Drift(reading.key, total, step, since))
    return tuple(found)


def _log_share(step: float, total: float) -> float:
    import math

    return math.log1p(step) / math.log1p(total)


Held = TypeVar("Held")  # what a run holds for each measurement


def merged(runs: Sequence[Mapping[Key, Held]], skip: int) -> dict[Key, Held]:
    """Each measurement's newest reading among ``runs`` (oldest first), leaving out the newest
    ``skip`` readings of each: skip=1 gives the reading before the newest, for a confirmation."""
    newest: dict[Key, list[Held]] = {}
    for run in runs:
        for key, value in run.items():
            newest.setdefault(key, []).append(value)
    return {key: values[-1 - skip] for key, values in newest.items() if len(values) > skip}


def selected_tests(reader: store.Store | None, runner: worktree.Runner, good: str, pattern: str | None) -> list[str]:
    """The node ids to bisect: the matching tests GOOD's recorded runs measured, else the matching
    tests collected at GOOD."""
    recorded = sorted({m.test for run, m in (reader.results_at(good) if reader is not None else [])
                       if not run["dirty"] and store.matches(pattern, m.test, m.name) and verdict.judged(m)})
    if recorded:
        return recorded
    return runner.matching(good, f"at GOOD {good[:10]}", pattern)[0]


def bisect(
    cwd: str | Path,
    good_ref: str,
    bad_ref: str,
    pattern: str | None,
    history_location: str,
    record: bool = False,
    good_runs: int = DEFAULT_GOOD_RUNS,
    tolerance: float | None = None,
    announce: Callable[[Probe], None] = lambda probe: None,
    pytest_args: Sequence[str] = (),
    min_change: float = MIN_CHANGE,
) -> Bisection:
    """Find the first commit after GOOD, on BAD's first-parent line, whose selected measurements
    fall below GOOD's level (see the module's docstring for the rule). ``announce`` hears of each
    probe as it is made."""
    span = resolve_span(cwd, good_ref, bad_ref)
    reader = history.open_store(history_location, create=True) if record else history.open_for_reading(history_location)
    try:
        with worktree.scratch("bisect") as scratch:
            runner = worktree.Runner(span.where, scratch, history_location, record, "bisect", pytest_args)
            try:
                tests = selected_tests(reader, runner, span.good, None if pattern in (None, "*") else pattern)
                evidence = Evidence(reader, runner, tests)
                level = GoodLevel(evidence, span.good, good_runs)
                evidence.tests = tests = level.start()
                history_steps = history_falls(reader, span, level.keys(), min_change)
                search = Search(evidence, span, level, tolerance, announce,
                                [position for step in history_steps for position in (step.position, step.since)])
                low, high = search.run()
            finally:
                runner.close()
    finally:
        if reader is not None:
            reader.close()
    between = tuple(span.commits[p - 1] for p in range(low + 1, high) if p in search.skipped)
    first_bad = span.commits[high - 1] if high else None
    return Bisection(
        good=span.good, bad=span.bad, commits=span.commits, subjects=span.subjects, tests=tuple(tests),
        levels=level.levels(), probes=tuple(search.probes),
        culprit=first_bad if first_bad and not between else None,
        candidates=(*between, first_bad) if first_bad and between else (),
        skipped=tuple(span.commits[p - 1] for p in sorted(search.skipped)), good_runs_made=level.made,
        flaky=tuple(search.flaky), unclear=tuple(search.unclear),
        drift=drifts(search.probes, span.good, first_bad if not between else None, span.bad),
        history=history_steps,
    )
