"""Wiring (the ``solgate`` command): ``step``: a PyTorch profiler trace recorded elsewhere (a GPU
job's, a teammate's) ranked as ``sol.measure_step`` ranks a step (measure/kineto.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands
    from pytest_solgate.declare.profiles import HardwareProfile
    from pytest_solgate.measure.kineto import Trace

# What a CPU-only trace is held against when no --profile names the CPU it ran on: no roof at all.
NO_ROOF = "no-roof"


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("step", help="rank a PyTorch profiler trace's operators by time lost against SOL")
    p.add_argument("trace", help="a trace as torch.profiler exports it (.json or .json.gz), or a folder of them, one per rank")
    p.add_argument("--profile", default=None,
                   help="the hardware the trace ran on: a profile id (`solgate profiles`) or a .toml path (default: the "
                        "profile that matches the device the trace names in its deviceProperties)")
    p.add_argument("--top", type=_at_least_one, default=10, help="operators listed, at least 1 (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print each trace's whole breakdown as JSON")
    p.set_defaults(run=cmd_step)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1 (how many operators to list)")
    return value


def trace_profile(trace: Trace, given: HardwareProfile | None, profiles: Sequence[HardwareProfile]
                  ) -> tuple[HardwareProfile, str]:
    """The profile a trace's step is held against, and a note ('' for none): ``given``
    (``--profile``) where there is one, with a note where the trace's device is another part;
    else the profile matching the device the trace names; a CPU-only trace, no roof (T_SOL 0)."""
    from pytest_solgate.declare.profiles import HardwareProfile, match_device
    from pytest_solgate.support.errors import ProfileError

    name = trace.device_name
    try:
        found = match_device(name, profiles, trace.device_facts.get("sm_count"), trace.device_facts.get("arch")).profile \
            if name else None
    except ProfileError:
        found = None
    if given is not None:
        if name and found is not None and found.id != given.id:
            return given, (f"the trace ran on '{name}' (profile {found.id}), but --profile {given.id} ({given.name}) is "
                           "what its figures are held against")
        if name and found is None and given.match:
            return given, (f"the trace ran on '{name}', which --profile {given.id} ({given.name}) does not match: its "
                           "figures are held against that profile as asked")
        return given, ""
    if found is not None:
        return found, ""
    if trace.activities:
        what = f"its device '{name}' matches no known profile" if name else "it names no device (no deviceProperties)"
        raise UsageFailure(f"step {trace.path}: {what}; pass --profile ID (`solgate profiles`) or a .toml path")
    return (HardwareProfile(id=NO_ROOF, name="no roof", kind="cpu", memory_bandwidth_gbps=math.inf, peak_tflops={}),
            "a CPU-only trace and no --profile: no roof to hold it to, so T_SOL is 0 and operators rank by time; pass "
            "--profile with the CPU's profile (`solgate calibrate` measures this one)")


def cmd_step(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import find_profile, known_profiles
    from pytest_solgate.measure import kineto
    from pytest_solgate.report import step_table
    from pytest_solgate.score.step_breakdown import score_step
    from pytest_solgate.support.errors import ProfileError

    profiles = known_profiles(common.state_dir())
    try:
        given = find_profile(args.profile, profiles) if args.profile is not None else None
    except ProfileError as exc:
        raise UsageFailure(f"step {args.trace}: {exc}") from None
    found = Path(args.trace)
    read = []
    for path in kineto.rank_files(found) if found.is_dir() else [found]:
        trace = kineto.load(path)
        profile, note = trace_profile(trace, given, profiles)
        breakdown = score_step(kineto.profile_trace(trace), profile)
        if note:
            breakdown = dataclasses.replace(breakdown, notes=(note, *breakdown.notes))
        read.append((trace, profile, breakdown))
    read.sort(key=lambda found: (found[0].rank is None, found[0].rank or 0))  # rank-10 after rank-9, not rank-1
    if args.json:
        print(json.dumps([{"trace": t.path, "rank": t.rank, "device": t.device_name, "profile": p.id, **b.to_dict()}
                          for t, p, b in read], indent=1, allow_nan=False))
        return 0
    for trace, profile, breakdown in read:
        where = ", ".join(part for part in (f"rank {trace.rank}" if trace.rank is not None else "", trace.device_name) if part)
        print("\n".join(step_table.trace_lines(trace.path, where, profile.id, breakdown, args.top)))
    return 0
