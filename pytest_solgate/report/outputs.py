"""Report: at the end of a session, after the run is recorded (record/save.py), write every report
that was asked for.

Each step fails on its own with a one-line message; a failed write never changes a test's verdict
and never leaves a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from pytest_solgate.declare.profiles import HardwareProfile, ProfileOption
from pytest_solgate.record.outcome import TestOutcomes
from pytest_solgate.results import Measurement, RunInfo
from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.locations import absolute_path
from pytest_solgate.support.settings import Settings


def _profiles(
    option: ProfileOption | None, state_dir: Path, wanted: set[str], scored: Sequence[HardwareProfile] = ()
) -> dict[str, HardwareProfile]:
    from pytest_solgate.declare.profiles import known_profiles

    # The profiles this session scored against come first: they are what the SOL figures mean (a
    # CPU profile's ceilings may have been raised since, or its cache file may be gone).
    found: dict[str, HardwareProfile] = {p.id: p for p in scored}
    if option is not None and option.profile is not None:
        found.setdefault(option.profile.id, option.profile)
    try:
        for profile in known_profiles(state_dir, option.folders if option else ()):
            if profile.id in wanted:
                found.setdefault(profile.id, profile)
    except SolgateError:
        pass  # the reports still render; the roofline says no profile was found
    return found


def write_one(target: Path, what: str, render: Callable[[], str]) -> str:
    """Render one output and write it whole (atomically); what to say of it. A rendering that
    raises leaves the previous file as it was: a rendering bug must not take the run's verdicts
    with it."""
    from pytest_solgate.support import atomic

    try:
        return f"solgate: {what} written to {atomic.write_text(target, render(), what)}"
    except SolgateError as exc:
        return f"solgate: {exc}"
    except Exception as exc:
        return (f"solgate: the {what} could not be rendered ({type(exc).__name__}: {exc}); the previous file, if any, "
                "is untouched")


def publish(
    settings: Settings,
    run: RunInfo,
    measurements: Sequence[Measurement],
    invocation_dir: Path,
    state_dir: Path,
    profile_option: ProfileOption | None = None,
    scored_profiles: Sequence[HardwareProfile] = (),
    outcomes: TestOutcomes | None = None,
) -> list[str]:
    """Writes the reports, each with pytest's ``outcomes`` beside the verdicts; returns the messages to print."""
    from pytest_solgate.record import schema
    from pytest_solgate.report import ci_formats
    from pytest_solgate.support import atomic  # the GitHub step summary is appended to

    messages: list[str] = []
    measurements = list(measurements)

    def write(path: str | None, what: str, render: Callable[[], str]) -> None:
        if path:
            messages.append(write_one(absolute_path(path, invocation_dir), what, render))

    write(settings.json, "JSON results", lambda: schema.dump(run, measurements, outcomes))
    if settings.benchmark_action and not measurements:
        # github-action-benchmark rejects an empty list ("No benchmark result was found").
        messages.append(f"solgate: nothing was measured, so no benchmark-action JSON was written to {settings.benchmark_action}")
    else:
        write(settings.benchmark_action, "benchmark-action JSON", lambda: ci_formats.benchmark_action(measurements))
    if settings.markdown or (settings.github_summary and os.environ.get("GITHUB_STEP_SUMMARY")):
        from pytest_solgate.report import markdown

        text = markdown.render(run, measurements, outcomes)
        write(settings.markdown, "Markdown summary", lambda: text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if settings.github_summary and summary:
            try:
                atomic.append_text(summary, text, "Markdown summary")
                messages.append("solgate: Markdown summary appended to $GITHUB_STEP_SUMMARY")
            except SolgateError as exc:
                messages.append(f"solgate: {exc}")
    if settings.report:
        from pytest_solgate.report import html

        profiles = _profiles(profile_option, state_dir, {m.profile for m in measurements}, scored_profiles)
        write(settings.report, "HTML report", lambda: html.render_report(run, measurements, profiles, outcomes))
    return messages
