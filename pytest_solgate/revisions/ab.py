"""Drive (after the stages, before the command): ``solgate ab BASE``, a paired A/B of HEAD against
a base on the same machine in the same job.

The base is checked out in a temporary worktree (pytest_solgate/revisions/worktree.py, as ``solgate bisect``
does); HEAD is the user's tree as it is. Rounds alternate which side runs first (HEAD, base; base,
HEAD; ...), each run its own pytest process, until every measurement's paired difference is
tight (judge/paired.py) or the time budget is spent. HEAD's runs are recorded in the history like
any run (unless ``record`` is off, as on a pull request); the base's are scratch. Returns facts
(``ABResult``); report/ab.py words them. Nothing here knows argparse.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pytest_solgate.judge import paired, verdict
from pytest_solgate.record import gitinfo
from pytest_solgate.results import REGRESSED, Measurement
from pytest_solgate.revisions import worktree
from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.settings import DEFAULT_MAX_REGRESSION

Key = tuple[str, str, str, str]  # test, name, profile, ceilings: the history's series key
DEFAULT_ROUNDS = 10
DEFAULT_MAX_TIME = 600.0  # seconds of A/B rounds before it judges on what it has


class ABError(SolgateError):
    """An A/B that cannot start (a ref that does not resolve, no test that measures, ...)."""


class NothingToPair(ABError):
    """None of the selected tests exists at the base (a pull request that adds the first ones):
    nothing to compare, which is not a usage error (the action skips its A/B on it)."""


class Stopped(ABError):
    """A signal stopped the A/B (SIGTERM, as `kill` and a CI runner's cancel send it): its pytest
    runs are stopped and its worktree removed on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"ab: stopped by {signal.Signals(signum).name}: its pytest runs were stopped and its "
                         "worktree removed; nothing was judged")
        self.signum = signum


@dataclass(frozen=True)
class Compared:
    key: Key
    judgement: paired.PairedJudgement
    base_sol: float  # geometric means over the rounds
    head_sol: float


@dataclass(frozen=True)
class ABResult:
    base: str  # the base commit
    head: str  # HEAD's commit ('' outside a commit)
    dirty: bool  # HEAD's tree has changes to tracked files: they are measured too
    tests: tuple[str, ...]
    compared: tuple[Compared, ...]
    rounds: int
    seconds: float
    stopped: str  # "tight", "time" (the budget ran out) or "rounds" (the most rounds were run)
    only_head: tuple[Key, ...] = ()  # measured at HEAD, never at the base
    failed: tuple[str, ...] = ()  # what went wrong, per run (the other tests' results still count)
    only_base: tuple[Key, ...] = ()  # measured at the base, never at HEAD (its test failed there?)
    no_sol: tuple[Key, ...] = ()  # measured on both sides without a SOL to compare (a step with no operator)
    skipped: tuple[str, ...] = ()  # what was left out before the rounds (a path new at HEAD, a module that
    # does not collect)

    @property
    def regressed(self) -> bool:
        return any(c.judgement.verdict == REGRESSED for c in self.compared)


def _judged(result: worktree.RunResult) -> dict[Key, Measurement]:
    return {(m.test, m.name, m.profile, m.ceilings): m for _, m in result.results if verdict.judged(m)}


def _has_sol(m: Measurement) -> bool:
    return math.isfinite(m.score.sol) and m.score.sol > 0


def ab(
    cwd: str | Path,
    base_ref: str,
    pattern: str | None,
    history_location: str,
    record: bool = True,
    rounds: int = DEFAULT_ROUNDS,
    max_time: float = DEFAULT_MAX_TIME,
    tolerance: float | None = None,
    pytest_args: Sequence[str] = (),
    paths: Sequence[str] = (),
    announce: Callable[[int, str, str], None] = lambda round_, side, state: None,
    clock: Callable[[], float] = time.monotonic,
) -> ABResult:
    """Round 1 collects and runs every selected test on both sides (one pytest process a side: the
    pattern deselects in the process that measures); later rounds only the tests with a paired
    measurement still undecided (a test that measures nothing, or only on one side, is not run
    again). A test that fails on one side costs its own measurements, never the side's others."""
    where = worktree.place(cwd, "ab")
    base = gitinfo.resolve(cwd, base_ref)
    if base is None:
        raise ABError(f"ab: BASE '{base_ref}' is not a commit of the git repository here; give a ref or sha "
                      "(on a pull request: the merge base, git merge-base origin/main HEAD)")
    facts = gitinfo.facts(cwd)
    started = clock()
    tally = _Tally(tolerance)
    with worktree.scratch("ab") as scratch:
        runner = worktree.Runner(where, scratch, history_location, record, "ab", pytest_args)
        try:
            base_paths, skipped = _paths_at_base(runner, base, paths)
            sides = _Sides(runner, base, record, pattern, list(paths), base_paths, announce)
            tests = _run_rounds(sides, tally, rounds, skipped, lambda: clock() - started >= max_time)
        finally:
            runner.close()
    return ABResult(base, facts.commit or "", facts.dirty, tests, tally.compared(), tally.done, clock() - started,
                    tally.stopped, tuple(sorted(tally.seen["head"] - tally.seen["base"])), tuple(tally.failed),
                    tuple(sorted(tally.seen["base"] - tally.seen["head"])),
                    tuple(sorted(tally.no_sol - set(tally.pairs))), tuple(skipped))


@dataclass(frozen=True)
class _Sides:
    """How each side runs: HEAD in the user's tree (recorded when ``record``), the base in its
    worktree (scratch); round 1 collects ``paths`` and deselects by ``pattern``, later rounds run
    the node ids still undecided."""

    runner: worktree.Runner
    base: str
    record: bool
    pattern: str | None
    head_paths: list[str]
    base_paths: list[str]
    announce: Callable[[int, str, str], None]

    def run(self, side: str, round_: int, running: list[str]) -> worktree.RunResult:
        commit = None if side == "head" else self.base
        record = self.record and side == "head"
        if round_ == 0:  # collect and measure at once
            return self.runner.run(commit, self.head_paths if side == "head" else self.base_paths, record=record,
                                   pattern=self.pattern, keep_going=True)
        return self.runner.run(commit, running, record=record, keep_going=True)


@dataclass
class _Tally:
    """What the rounds have gathered so far: each series' pairs and tolerance, what each side
    measured, what failed, how many rounds ran and why they stopped."""

    tolerance: float | None
    pairs: dict[Key, list[paired.Pair]] = field(default_factory=dict)
    tolerances: dict[Key, float] = field(default_factory=dict)
    seen: dict[str, set[Key]] = field(default_factory=lambda: {"head": set(), "base": set()})
    no_sol: set[Key] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    done: int = 0
    stopped: str = "rounds"

    def take(self, round_: int, side: str, result: worktree.RunResult) -> dict[Key, Measurement]:
        """One side's run of a round: its judged measurements, and its failure noted."""
        if result.failed:
            self.failed.append(f"{side} (round {round_ + 1}): {result.failed}")
        got = _judged(result)
        self.seen[side].update(got)
        return got

    def pair(self, head: dict[Key, Measurement], base: dict[Key, Measurement]) -> None:
        """A round's pairs: each series measured on both sides with a SOL on both."""
        for key, h in head.items():
            b = base.get(key)
            if b is None:
                continue
            if not (_has_sol(b) and _has_sol(h)):
                self.no_sol.add(key)
                continue
            self.pairs.setdefault(key, []).append(paired.Pair(b.score.sol, h.score.sol, b.timing.noise,
                                                              h.timing.noise))
            self.tolerances[key] = verdict.recorded_tolerance(h, self.tolerance, DEFAULT_MAX_REGRESSION)

    def undecided(self) -> set[str]:
        """The tests with a series whose paired difference is not yet tight."""
        return {key[0] for key, p in self.pairs.items() if not paired.judge_pairs(p, self.tolerances[key]).tight}

    def compared(self) -> tuple[Compared, ...]:
        return tuple(Compared(key, paired.judge_pairs(p, self.tolerances[key]), _geomean([x.base for x in p]),
                              _geomean([x.head for x in p]))
                     for key, p in sorted(self.pairs.items()))


def _run_rounds(sides: _Sides, tally: _Tally, rounds: int, skipped: list[str],
                out_of_time: Callable[[], bool]) -> tuple[str, ...]:
    """Rounds alternate which side runs first until no test is undecided, the time is out or
    ``rounds`` ran; returns the tests selected on both sides."""
    tests: tuple[str, ...] = ()
    running: list[str] = []
    for round_ in range(rounds):
        got: dict[str, dict[Key, Measurement]] = {}
        ran: dict[str, tuple[str, ...]] = {}
        for side in ("head", "base") if round_ % 2 == 0 else ("base", "head"):
            result = sides.run(side, round_, running)
            if round_ == 0:
                ran[side] = _selected(side, sides.base, sides.pattern, result)
            got[side] = tally.take(round_, side, result)
            sides.announce(round_ + 1, side, "; ".join(
                [f"{len(got[side])} measurement(s)", *([result.failed] if result.failed else [])]))
        if round_ == 0:
            tests = _paired_tests(ran, sides.base, skipped)
            running = list(tests)
        tally.pair(got["head"], got["base"])
        tally.done = round_ + 1
        undecided = tally.undecided()
        running = [test for test in running if test in undecided]
        if not running:
            tally.stopped = "tight" if tally.pairs else "rounds"  # nothing pairs: more rounds would pair nothing
            break
        if out_of_time():
            tally.stopped = "time"
            break
    return tests


def _paired_tests(ran: dict[str, tuple[str, ...]], base: str, skipped: list[str]) -> tuple[str, ...]:
    """The tests round 1 ran on both sides, in HEAD's order; none is nothing to pair."""
    tests = tuple(test for test in ran["head"] if test in set(ran["base"]))
    if not tests:
        raise NothingToPair(f"ab: none of the {len(ran['head'])} selected test(s) exists at BASE "
                            f"{base[:10]}: nothing to pair" + "".join(f"; {note}" for note in skipped))
    return tests


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _paths_at_base(runner: worktree.Runner, base: str, paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Where pytest collects at the base (``paths``; none: its own testpaths), and what was left
    out: a path the base does not have yet (new at HEAD) has nothing to be paired with."""
    at = f"at BASE {base[:10]}"
    try:
        folder = runner.folder(base)
    except worktree.WorktreeError as exc:
        raise ABError(str(exc)) from None
    base_paths = [path for path in paths if (folder / path.partition("::")[0]).exists()]
    at_head = runner.folder(None)
    nowhere = [path for path in paths if path not in base_paths and not (at_head / path.partition("::")[0]).exists()]
    if nowhere:
        raise ABError(f"ab: --path {', '.join(nowhere)}: no such file or folder at HEAD or {at}; give a path pytest "
                      "collects from, relative to where solgate runs")
    if paths and not base_paths:
        raise NothingToPair(f"ab: none of the paths ({', '.join(paths)}) exists {at}: nothing to pair")
    return base_paths, [f"{path}: not {at} (new at HEAD): nothing to pair" for path in paths if path not in base_paths]


def _selected(side: str, base: str, pattern: str | None, result: worktree.RunResult) -> tuple[str, ...]:
    """The node ids a side's first round ran (those matching ``pattern``), or why there are none:
    HEAD's are a usage error; the base's, nothing to pair (a pull request that adds the first tests)."""
    at = "at HEAD" if side == "head" else f"at BASE {base[:10]}"
    if result.ran:
        return result.ran
    if not result.collected:
        raise ABError(f"ab: {at} pytest collects nothing: {result.failed or 'no tests collected'}")
    if side == "head":
        raise ABError(f"ab: no test {at} matches '{pattern}' ({result.collected} collected); "
                      "give a glob or text of a test id, e.g. 'test_matmul*'")
    raise NothingToPair(f"ab: none of the selected test(s) exists {at}: nothing to pair")
