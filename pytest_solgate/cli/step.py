"""Wiring (the ``solgate`` command): ``step``: a PyTorch profiler trace recorded elsewhere (a GPU
job's, a teammate's) ranked as ``sol.measure_step`` ranks a step (measure/kineto.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("step", help="rank a PyTorch profiler trace's operators by time lost against SOL")
    p.add_argument("trace", help="a trace as torch.profiler exports it (.json or .json.gz), or a folder of them, one per rank")
    p.add_argument("--profile", required=True, help="the hardware the trace ran on: a profile id (`solgate profiles`) or a .toml path")
    p.add_argument("--top", type=int, default=10, help="operators listed (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print each trace's whole breakdown as JSON")
    p.set_defaults(run=cmd_step)


def cmd_step(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import find_profile, known_profiles
    from pytest_solgate.measure import kineto
    from pytest_solgate.report import step_table
    from pytest_solgate.score.step_breakdown import score_step
    from pytest_solgate.support.errors import ProfileError

    try:
        profile = find_profile(args.profile, known_profiles(common.state_dir()))
    except ProfileError as exc:
        raise UsageFailure(f"step {args.trace}: {exc}") from None
    found = Path(args.trace)
    read = []
    for path in kineto.rank_files(found) if found.is_dir() else [found]:
        trace = kineto.load(path)
        read.append((trace, score_step(kineto.profile_trace(trace), profile)))
    read.sort(key=lambda pair: (pair[0].rank is None, pair[0].rank or 0))  # rank-10 after rank-9, not rank-1
    if args.json:
        print(json.dumps([{"trace": t.path, "rank": t.rank, "device": t.device_name, "profile": profile.id, **b.to_dict()}
                          for t, b in read], indent=1))
        return 0
    for trace, breakdown in read:
        where = ", ".join(part for part in (f"rank {trace.rank}" if trace.rank is not None else "", trace.device_name) if part)
        print("\n".join(step_table.trace_lines(trace.path, where, profile.id, breakdown, args.top)))
    return 0
