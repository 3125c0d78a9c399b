"""Drive (after the stages, before the command): what ``solgate compare``, ``history --changes``
and ``trend`` read from an open history and decide: commits resolved, windows chosen and judged,
each series' story told. The commands parse their arguments, open the history and print."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from pytest_solgate.judge import changepoints, commits, level, like_pressure, verdict
from pytest_solgate.record import baseline, gitinfo, store
from pytest_solgate.report import trend
from pytest_solgate.results import CommitPoint
from pytest_solgate.support.errors import SolgateError

STORY_COMMITS = 100_000  # first-parent commits read from HEAD back to BASE for the story between them
Key = tuple[str, str, str, str]  # test, name, profile, ceilings


class QueryError(SolgateError):
    """A commit that does not resolve, or a commit with nothing to compare: one line, exit 2."""


@dataclass(frozen=True)
class ComparedCommits:
    base: str
    head: str
    rows: list[commits.Row]


def find_commit(ref: str, shas: set[str], history_path: str) -> str:
    """A git ref, or a unique prefix of a commit in the history."""
    try:
        sha = gitinfo.resolve(".", ref) if ref else None
    except gitinfo.AmbiguousCommit as exc:
        raise QueryError(f"compare: {exc}") from None
    if sha:
        return sha
    matches = sorted(s for s in shas if ref and s.startswith(ref))
    if len(matches) > 1:
        raise QueryError(f"compare: '{ref}' is ambiguous in {history_path}: {', '.join(m[:12] for m in matches)}")
    if not matches:
        raise QueryError(f"compare: '{ref}' is neither a git ref here nor a commit in {history_path}")
    return matches[0]


def compare(history: store.Store, base_ref: str, head_ref: str, window: int, min_change: float,
            settings: verdict.JudgeSettings, given: float | None) -> ComparedCommits:
    """HEAD's results against BASE's own runs (``window`` of them), by the gate's rule, with the
    gate's story between them."""
    shas = history.commits()
    base_sha, head_sha = find_commit(base_ref, shas, history.location), find_commit(head_ref, shas, history.location)
    if base_sha == head_sha:
        raise QueryError(f"compare: '{base_ref}' and '{head_ref}' are the same commit; give two commits")
    head = {(m.test, m.name, m.profile, m.ceilings): m  # oldest first, so the newest clean run wins
            for run, m in history.results_at(head_sha) if not run["dirty"]}
    if not head:
        raise QueryError(f"compare: no clean results for '{head_ref}' in {history.location}")
    base = {key: history.baseline_runs(*key, [base_sha], window) for key, m in head.items() if verdict.judged(m)}
    # The gate's story of each series along HEAD's first-parent line, as far back as BASE.
    chain = gitinfo.first_parent_chain(".", head_sha, STORY_COMMITS)
    stories = {}
    for key in base:
        runs, accepted = (baseline.runs_between(history, key, chain, chain.index(base_sha))
                          if commits.on_line(chain, base_sha) else ([], []))
        stories[key] = commits.between(runs, accepted, chain, base_sha, min_change)
    hosts = {str(m.environment.get("host", "")) for m in head.values()} - {""}
    noise = baseline.machine_noise(history, hosts.pop()) if len(hosts) == 1 else None  # as the gate reads it
    rows = commits.compare(head, base, dataclasses.replace(settings, commit=head_sha), given, stories, noise)
    if not any(row.comparison for row in rows):
        raise QueryError(f"compare: no clean results for '{base_ref}' in {history.location} "
                         f"({_why_none(base)}compare reads each commit's own runs: measure it there first)")
    return ComparedCommits(base_sha, head_sha, rows)


def _why_none(base: dict) -> str:
    """Why BASE's recorded runs are no baseline, when it has some: all contended, interrupted, ..."""
    kinds: dict[str, int] = {}
    for runs in base.values():
        for run in runs:
            kinds[run.kept_out] = kinds.get(run.kept_out, 0) + 1
    if not kinds:
        return ""
    said = ", ".join(f"{count} {kind or 'kept out'}" for kind, count in sorted(kinds.items()))
    busy = " (the machine was busy while they measured)" if "contended" in kinds else ""
    if any(like_pressure.judges_as_busy(run) for runs in base.values() for run in runs):
        busy = " (the machine was busy while they measured: they judge a run of HEAD only when it was busy too)"
    return f"none of its {sum(kinds.values())} recorded run(s) can be a baseline: {said}{busy}; "


def series(results: Sequence[tuple[store.RunRow, store.Summary]]) -> dict[Key, list[CommitPoint]]:
    """One point per commit of each series (``store.commit_series``), commits timed by git."""
    shas = sorted({run["commit_sha"] for run, _ in results if run["commit_sha"] and not run["dirty"]})
    return store.commit_series(results, gitinfo.commit_times(".", shas))


def stories(results: Sequence[tuple[store.RunRow, store.Summary]], min_change: float
            ) -> list[tuple[Key, list[CommitPoint], level.Story]]:
    """Each series with its points and the gate's story of them, sorted."""
    return [(key, points, level.series_story(points, min_change)) for key, points in sorted(series(results).items())]


def trend_panels(history: store.Store, pattern: str | None, min_change: float, last: int) -> tuple[list[trend.Panel], str]:
    """The trend page's panels, one per series, and a note when change points could not be found."""
    panels, note = [], ""
    for (test, name, profile, ceilings), points in sorted(series(history.summaries(pattern)).items()):
        try:  # over the whole series: a step is found with all the evidence there is
            changes = level.series_story(points, min_change).changes
        except changepoints.ChangePointsUnavailable as exc:
            changes, note = changepoints.Changes(), str(exc)
        newest = history.newest(test, name, profile, ceilings)
        budget = newest.judgement.budget.min if newest is not None and newest.gate and newest.judgement else None
        panels.append(trend.panel(
            test, name, profile, points, [points[cp.index]["commit"] for cp in changes.points], budget, last,
            provisional=[points[cp.index]["commit"] for cp in changes.points if cp.provisional],
            outliers=[points[o.index]["commit"] for o in changes.outliers],
        ))
    return panels, note

