"""Wiring (the ``solgate`` command): the hardware profiles: ``profiles``, ``profile``, ``detect``,
``calibrate`` and ``sol``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest_solgate.cli.common as common
from pytest_solgate.cli.common import UsageFailure

if TYPE_CHECKING:
    from pytest_solgate.cli.common import Subcommands
    from pytest_solgate.measure.calibrate import CpuIds


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("profiles", help="list the known hardware profiles")
    p.add_argument("--dir", action="append", default=[], help="also read profiles from this folder")
    p.set_defaults(run=cmd_profiles)
    p = sub.add_parser("profile", help="show one profile as TOML")
    p.add_argument("id", help="a profile id (see `solgate profiles`) or a path to a .toml file")
    p.set_defaults(run=cmd_profile)
    p = sub.add_parser("detect", help="which profile this machine (or a given device name) gets, and why")
    p.add_argument("--name", help="match this device name instead of reading the device")
    p.add_argument("--sm-count", type=int, help="with --name: the device's multiprocessor count, for the cross-check")
    p.add_argument("--dir", action="append", default=[], help="also detect among the profiles in this folder")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.set_defaults(run=cmd_detect)
    p = sub.add_parser("calibrate", help="measure this machine's ceilings and write a profile")
    p.add_argument("-o", "--output", help="write the profile TOML here (default: cache it under .solgate/)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.set_defaults(run=cmd_calibrate)
    p = sub.add_parser("sol", help="the speed of light of declared work on one or every profile (no timing)")
    p.add_argument("--bytes", type=float, default=None, help="total fused bytes")
    p.add_argument("--flops", action="append", default=[], metavar="P=N",
                   help="FLOPs in a precision class, e.g. bf16_tensor=1.37e11 (repeat for several)")
    p.add_argument("--profile", help="one profile id or .toml path (default: every shipped profile)")
    p.set_defaults(run=cmd_sol)


def cmd_profiles(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import builtin_profiles_dir, known_profiles, load_profiles

    listed = load_profiles([builtin_profiles_dir(), *args.dir])
    shown = {p.id for p in listed}
    # Then the ones measured here (this CPU's calibration, GPUs calibrated with `solgate calibrate`):
    # their ids are what a budget glob names on this machine.
    listed += [p for p in known_profiles(common.state_dir()) if p.id not in shown]
    for profile in listed:
        peak = max(profile.peak_tflops.items(), key=lambda kv: kv[1])
        print(f"{profile.id:<16} {profile.name:<46} {profile.memory_bandwidth_gbps:>7.0f} GB/s  {peak[1]:>7g} TFLOP/s {peak[0]}")
    ids = _this_cpu()
    if ids is not None and ids.calibration is None:
        print(f"{ids.id:<16} this CPU, not calibrated yet (`solgate calibrate`, or the first run that measures on it)")
    return 0



def _this_cpu() -> CpuIds | None:
    """This CPU's profile ids as this project's tests use them (calibrate.CpuIds); None without torch."""
    from pytest_solgate.measure import calibrate

    try:
        return calibrate.cpu_ids(common.state_dir())
    except ImportError:
        return None


def threads_line(ids: CpuIds) -> str:
    """What `solgate detect` and `solgate calibrate` say of the torch threads in a CPU's id: they
    run without the tests' conftest, which may set another count (the quickstart's pins one)."""
    if ids.from_tests and ids.threads == ids.here_threads:
        return f"  at {ids.threads} torch thread(s), as this project's tests last ran here"
    if ids.from_tests:
        return (f"  at {ids.threads} torch thread(s), as this project's tests last ran here; without their conftest "
                f"torch has {ids.here_threads} here, which is another id ({ids.here_id})")
    quickstart = (f" (the quickstart's conftest pins torch.set_num_threads(1): {ids.one_thread_id})"
                  if ids.here_threads != 1 else "")
    return (f"  at {ids.here_threads} torch thread(s), torch's default here; no test of this project has run here "
            f"yet, and tests that set another count run under another id{quickstart}")



def cmd_profile(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import find_profile, known_profiles, profile_to_toml

    # Shipped profiles and the ones measured here (cached under .solgate/profiles).
    print(profile_to_toml(find_profile(args.id, known_profiles(common.state_dir()))), end="")
    return 0



def cmd_sol(args: argparse.Namespace) -> int:
    """T_SOL, bound, intensity and ridge of declared work: a planning tool, nothing is timed."""
    from pytest_solgate.declare.profiles import builtin_profiles, find_profile, known_profiles
    from pytest_solgate.declare.work import make_work
    from pytest_solgate.score import missing_precisions, speed_of_light
    from pytest_solgate.support import units

    flops: dict[str, float] = {}
    for entry in args.flops:
        precision, equals, count = entry.partition("=")
        if not equals:
            raise UsageFailure(f"sol: --flops {entry!r}: write PRECISION=COUNT, e.g. --flops bf16_tensor=1.37e11")
        try:
            flops[precision.strip()] = float(count)
        except ValueError:
            raise UsageFailure(f"sol: --flops {entry!r}: {count!r} is not a number") from None
    if not flops and args.bytes is None:
        raise UsageFailure("sol: declare the work: --bytes N (total fused bytes) and/or --flops PRECISION=COUNT")
    work = make_work(flops or None, args.bytes)
    # --profile knows the profiles measured here too (cpu-<key>, <gpu>-measured-<id>), as `solgate profile` does.
    profiles = [find_profile(args.profile, known_profiles(common.state_dir()))] if args.profile else builtin_profiles()
    print(f"{'profile':<16} {'T_SOL':>10}  {'bound':<8} {'intensity':>14}  ridge")
    for profile in profiles:
        missing = missing_precisions(work, profile)
        if missing:
            print(f"{profile.id:<16} {'-':>10}  {'-':<8} {'-':>14}  (no {', '.join(missing)} roof)")
            continue
        at = speed_of_light(work, profile)
        intensity = f"{at.intensity:.3g} FLOP/B" if at.intensity is not None else "-"
        ridge = f"{at.ridge:.3g} FLOP/B ({at.dominant_precision})" if at.ridge is not None else "-"
        print(f"{profile.id:<16} {units.seconds(at.t_sol):>10}  {at.bound:<8} {intensity:>14}  {ridge}")
    return 0



def cmd_detect(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import detect, known_profiles

    cache = common.state_dir()
    if args.name:
        match = detect(args.name, {"sm_count": args.sm_count}, known_profiles(cache, tuple(args.dir)))
        print(match.profile.id)
        print(f"  '{args.name}' matched glob '{match.pattern}' of {match.profile.path}", file=sys.stderr)
        if match.warning:
            print(f"  warning: {match.warning}", file=sys.stderr)
        return 0
    from pytest_solgate.measure import devices

    choice = devices.choose_device(args.device, None)
    if choice.kind == "cpu":
        ids = _this_cpu()
        if ids is None:
            print("cpu (measured)")
            print("  no GPU: the profile is measured on this CPU; its id needs torch", file=sys.stderr)
            return 0
        print(ids.id)
        where = (f"calibrated, cached in {ids.calibration.path}" if ids.calibration is not None
                 else "not calibrated yet: `solgate calibrate`, or the first run that measures on it")
        print(f"  no GPU: the profile is measured on this CPU ({where}); budget globs name it, e.g. 'cpu-*'", file=sys.stderr)
        print(threads_line(ids), file=sys.stderr)
        return 0
    name = devices.device_name(choice)
    facts = devices.device_facts(choice)
    match = detect(name, facts, known_profiles(cache, tuple(args.dir)))
    print(match.profile.id)
    print(f"  device {choice} is '{name}' ({facts.get('sm_count')} SMs); matched glob '{match.pattern}'", file=sys.stderr)
    if match.warning:
        print(f"  warning: {match.warning}", file=sys.stderr)
    return 0



def cmd_calibrate(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import detect, known_profiles, profile_to_toml
    from pytest_solgate.measure import calibrate, devices

    cache = common.state_dir()
    choice = devices.choose_device(args.device, None)
    if choice.kind == "cpu":
        import torch

        # The id this project's tests use: at the torch threads they last ran with here (their
        # conftest may set them), not at this process's default.
        ids = calibrate.cpu_ids(cache)
        torch.set_num_threads(ids.threads)
        print(f"solgate: calibrating {ids.id}", file=sys.stderr)
        print(threads_line(ids), file=sys.stderr)
        # calibrate means measure now; a cached profile's ceilings are kept where they were higher
        # (they only rise: delete cpu-*.toml in the per-user cache, `solgate detect` names it, to start again)
        profile = calibrate.cpu_profile(cache, lambda text: print(text, file=sys.stderr), full=True)
    else:
        name = devices.device_name(choice)
        facts = devices.device_facts(choice)
        datasheet = detect(name, facts, known_profiles(cache)).profile
        print(f"solgate: calibrating {name} against {datasheet.id} ...", file=sys.stderr)
        say = lambda text: print(text, file=sys.stderr)  # noqa: E731
        profile, path = calibrate.calibrate_gpu(cache, choice.cuda_index, datasheet, name, facts.get("l2_bytes"), announce=say)
        if path is not None:
            print(f"solgate: cached in {path}", file=sys.stderr)
    if args.output:
        calibrate.write_profile(Path(args.output), profile)
    print(profile_to_toml(profile), end="")
    return 0



