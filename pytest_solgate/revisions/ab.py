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

import time
from dataclasses import dataclass
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
    failed: tuple[str, ...] = ()  # why a run gave nothing, per failed run

    @property
    def regressed(self) -> bool:
        return any(c.judgement.verdict == REGRESSED for c in self.compared)


def _judged(result: worktree.RunResult) -> dict[Key, Measurement]:
    return {(m.test, m.name, m.profile, m.ceilings): m for _, m in result.results if verdict.judged(m)}


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
    where = worktree.place(cwd, "ab")
    base = gitinfo.resolve(cwd, base_ref)
    if base is None:
        raise ABError(f"ab: BASE '{base_ref}' is not a commit of the git repository here; give a ref or sha "
                      "(on a pull request: the merge base, git merge-base origin/main HEAD)")
    facts = gitinfo.facts(cwd)
    started = clock()
    with worktree.scratch("ab") as scratch:
        runner = worktree.Runner(where, scratch, history_location, record, "ab", pytest_args)
        try:
            tests = _selected(runner, base, pattern, paths)
            pairs: dict[Key, list[paired.Pair]] = {}
            tolerances: dict[Key, float] = {}
            only_head: set[Key] = set()
            failed: list[str] = []
            done = stopped = 0
            for round_ in range(rounds):
                sides = ("head", "base") if round_ % 2 == 0 else ("base", "head")
                got: dict[str, dict[Key, Measurement]] = {}
                for side in sides:
                    result = runner.run(None if side == "head" else base, tests, record=record and side == "head")
                    if result.failed:
                        failed.append(f"{side} (round {round_ + 1}): {result.failed}")
                    got[side] = _judged(result)
                    announce(round_ + 1, side, result.failed or f"{len(got[side])} measurement(s)")
                for key, h in got["head"].items():
                    b = got["base"].get(key)
                    if b is None:
                        only_head.add(key)
                        continue
                    pairs.setdefault(key, []).append(paired.Pair(b.score.sol, h.score.sol, b.timing.noise,
                                                                 h.timing.noise))
                    tolerances[key] = verdict.recorded_tolerance(h, tolerance, DEFAULT_MAX_REGRESSION)
                done = round_ + 1
                if not got["head"] and not got["base"] and round_ == 0:
                    break  # nothing measures: more rounds would fail alike
                judgements = [paired.judge_pairs(p, tolerances[k]) for k, p in pairs.items()]
                if judgements and paired.decided(judgements):
                    stopped = 1
                    break
                if clock() - started >= max_time:
                    stopped = 2
                    break
        finally:
            runner.close()
    compared = tuple(
        Compared(key, paired.judge_pairs(p, tolerances[key]), _geomean([x.base for x in p]), _geomean([x.head for x in p]))
        for key, p in sorted(pairs.items()))
    return ABResult(base, facts.commit or "", facts.dirty, tuple(tests), compared, done, clock() - started,
                    ("rounds", "tight", "time")[stopped], tuple(sorted(only_head - set(pairs))), tuple(failed))


def _geomean(values: Sequence[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def _selected(runner: worktree.Runner, base: str, pattern: str | None, paths: Sequence[str]) -> list[str]:
    """The node ids HEAD's tree collects that match ``pattern`` and exist at the base too (a test
    the change adds has nothing to be paired with). ``paths``: where pytest collects (default: its
    own testpaths)."""
    chosen = runner.matching(None, "at HEAD", pattern, paths)
    at_base = set(runner.matching(base, f"at BASE {base[:10]}", None, paths))
    both = [test for test in chosen if test in at_base]
    if not both:
        raise ABError(f"ab: none of the {len(chosen)} selected test(s) exists at BASE {base[:10]}: nothing to pair")
    return both
