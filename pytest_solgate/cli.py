"""Wiring (no stage of its own): the ``solgate`` command: thin wiring from subcommands to the engine, history and reports.

Every bad input is one line on stderr and exit status 2; ``compare`` exits 1 when a result regressed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_solgate.support.errors import SolgateError
from pytest_solgate.support.locations import is_history_url
from pytest_solgate.support.settings import Settings


class UsageFailure(SolgateError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, as for every bad input
        raise UsageFailure(f"{self.prog}: {message} (see {self.prog} --help)")


def _history_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--history", default=None,
        help="the history: a SQLite file or a postgresql:// URL (default: $SOLGATE_HISTORY, else "
             ".solgate/history.db at the git top level, else here)",
    )


def _min_change_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--min-change", type=float, default=None,
        help="smallest relative SOL step listed as a change point (default: sol_min_change, else "
             f"{Settings().min_change})",
    )


def _ini() -> tuple[dict[str, Any], Settings, str]:
    """The ``sol_*`` ini options pytest would read here (support/inifile.py), parsed as the plugin
    parses them, and the file they came from: every command's defaults are pytest's."""
    from pytest_solgate.support.errors import OptionError
    from pytest_solgate.support.inifile import sol_options
    from pytest_solgate.support.settings import parse_settings

    raw, path = sol_options(Path.cwd())
    try:
        return raw, parse_settings(raw), str(path)
    except OptionError as exc:
        raise UsageFailure(f"{path}: {exc}") from None


def _min_change(args: argparse.Namespace) -> float:
    value = args.min_change if args.min_change is not None else _ini()[1].min_change
    if not 0 <= value < 1:
        raise UsageFailure(f"--min-change={value}: give a fraction in [0, 1), e.g. 0.025")
    return value


def _history_path(args: argparse.Namespace) -> str:
    """The history a command reads or writes, parsed as the plugin parses ``--sol-history``: a
    relative path is taken from the git top level, whichever directory the command starts in."""
    import os

    from pytest_solgate.support.settings import HISTORY_VARIABLE

    if args.history:
        return _location(args.history, "--history")
    if os.environ.get(HISTORY_VARIABLE):
        return _location(os.environ[HISTORY_VARIABLE], HISTORY_VARIABLE)
    raw, settings, ini_path = _ini()
    if raw.get("sol_history"):  # as pytest reads it: the same history for the plugin and the command
        return _location(settings.history, f"sol_history in {ini_path}")
    return str(_state_dir() / "history.db")


def _location(given: str, source: str) -> str:
    from pytest_solgate.record import gitinfo
    from pytest_solgate.support.locations import resolve_history

    return resolve_history(given, gitinfo.project_root(Path.cwd()), source)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="solgate", description="pytest-solgate: speed-of-light budgets for kernels")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("profiles", help="list the known hardware profiles")
    p.add_argument("--dir", action="append", default=[], help="also read profiles from this folder")
    p = sub.add_parser("profile", help="show one profile as TOML")
    p.add_argument("id", help="a profile id (see `solgate profiles`) or a path to a .toml file")
    p = sub.add_parser("detect", help="which profile this machine (or a given device name) gets, and why")
    p.add_argument("--name", help="match this device name instead of reading the device")
    p.add_argument("--sm-count", type=int, help="with --name: the device's multiprocessor count, for the cross-check")
    p.add_argument("--dir", action="append", default=[], help="also detect among the profiles in this folder")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p = sub.add_parser("calibrate", help="measure this machine's ceilings and write a profile")
    p.add_argument("-o", "--output", help="write the profile TOML here (default: cache it under .solgate/)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p = sub.add_parser("sol", help="the speed of light of declared work on one or every profile (no timing)")
    p.add_argument("--bytes", type=float, default=None, help="total fused bytes")
    p.add_argument("--flops", action="append", default=[], metavar="P=N",
                   help="FLOPs in a precision class, e.g. bf16_tensor=1.37e11 (repeat for several)")
    p.add_argument("--profile", help="one profile id or .toml path (default: every shipped profile)")
    p = sub.add_parser("history", help="list recorded results")
    p.add_argument("pattern", nargs="?", help="only tests whose id matches this glob or contains this text")
    p.add_argument("--changes", action="store_true", help="list the commits where a measurement's SOL stepped (change points)")
    p.add_argument("--json", action="store_true", help="with --changes: print them as JSON (steps, outliers, skipped commits)")
    _min_change_arg(p)
    _history_arg(p)
    p = sub.add_parser("trend", help="write an HTML page of SOL over commits: one small panel per measurement")
    p.add_argument("-o", "--output", default="sol-trend.html", help="output path (default: %(default)s)")
    p.add_argument("pattern", nargs="?", help="only tests matching this glob or text")
    p.add_argument("--last", type=int, default=100,
                   help="show each measurement's newest N commits; 0 for all (default: %(default)s)")
    _min_change_arg(p)
    _history_arg(p)
    p = sub.add_parser("compare", help="two commits' results side by side; exit 1 on a regression")
    p.add_argument("base", help="the base commit (a git ref or sha)")
    p.add_argument("head", help="the head commit (a git ref or sha)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance (default: each measurement's recorded max_regression, else "
                        f"sol_max_regression, else {Settings().max_regression})")
    p.add_argument("--window", type=int, default=None,
                   help="clean runs along BASE's first-parent ancestry that form the baseline (default: "
                        f"sol_baseline_window, else {Settings().baseline_window})")
    _min_change_arg(p)
    _history_arg(p)
    p = sub.add_parser("accept", help="accept a deliberate slowdown at COMMIT: its level becomes the baseline from there on")
    p.add_argument("commit", help="the commit whose new level is accepted (a git ref or sha)")
    p.add_argument("pattern", nargs="?", default="*", help="only tests whose id matches this glob or contains this text (default: all)")
    p.add_argument("--reason", required=True, help="why the slowdown is accepted (kept in the history, shown in verdicts)")
    _history_arg(p)
    p = sub.add_parser("import", help="merge a --sol-json file from another runner (or the spool) into the history")
    p.add_argument("file", nargs="?", help="a JSON file written by pytest --sol-json")
    p.add_argument("--spool", action="store_true", help="send the runs spooled in .solgate/spool/ while the server was away")
    _history_arg(p)
    p = sub.add_parser("migrate", help="copy every run from one history to another (SQLite <-> PostgreSQL); idempotent")
    p.add_argument("source", help="the history to read: a SQLite file or a postgresql:// URL")
    p.add_argument("destination", help="the history to write: a SQLite file or a postgresql:// URL")
    p = sub.add_parser("init", help="create or upgrade the history's tables (once, as a PostgreSQL database's owner)")
    _history_arg(p)
    _bisect_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except SolgateError as exc:
        from pytest_solgate.support.locations import one_line

        message = one_line(str(exc))  # one line, and never a history URL's password
        print(f"solgate: error: {message}" if not message.startswith("solgate") else message, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `solgate ... | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import builtin_profiles_dir, known_profiles, load_profiles

    listed = load_profiles([builtin_profiles_dir(), *args.dir])
    shown = {p.id for p in listed}
    # Then the ones measured here (this CPU's calibration, GPUs calibrated with `solgate calibrate`):
    # their ids are what a budget glob names on this machine.
    listed += [p for p in known_profiles(_state_dir()) if p.id not in shown]
    for profile in listed:
        peak = max(profile.peak_tflops.items(), key=lambda kv: kv[1])
        print(f"{profile.id:<16} {profile.name:<46} {profile.memory_bandwidth_gbps:>7.0f} GB/s  {peak[1]:>7g} TFLOP/s {peak[0]}")
    cpu_id, calibrated = _this_cpu()
    if cpu_id is not None and calibrated is None:
        print(f"{cpu_id:<16} this CPU, not calibrated yet (`solgate calibrate`, or the first run that measures on it)")
    return 0


def _this_cpu() -> tuple[str | None, Any]:
    """This CPU's profile id and its cached calibration; (None, None) without torch."""
    from pytest_solgate.measure import calibrate

    try:
        return calibrate.this_cpu(_state_dir())
    except ImportError:
        return None, None


def _cmd_profile(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import find_profile, known_profiles, profile_to_toml

    # Shipped profiles and the ones measured here (cached under .solgate/profiles).
    print(profile_to_toml(find_profile(args.id, known_profiles(_state_dir()))), end="")
    return 0


def _cmd_sol(args: argparse.Namespace) -> int:
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
    profiles = [find_profile(args.profile, known_profiles(_state_dir()))] if args.profile else builtin_profiles()
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


def _cmd_detect(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import detect, known_profiles

    cache = _state_dir()
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
        cpu_id, calibrated = _this_cpu()
        print(cpu_id or "cpu (measured)")
        where = (f"calibrated, cached in {calibrated.path}" if calibrated is not None
                 else "not calibrated yet: `solgate calibrate`, or the first run that measures on it")
        print(f"  no GPU: the profile is measured on this CPU ({where}); budget globs name it, e.g. 'cpu-*'", file=sys.stderr)
        return 0
    name = devices.device_name(choice)
    facts = devices.device_facts(choice)
    match = detect(name, facts, known_profiles(cache, tuple(args.dir)))
    print(match.profile.id)
    print(f"  device {choice} is '{name}' ({facts.get('sm_count')} SMs); matched glob '{match.pattern}'", file=sys.stderr)
    if match.warning:
        print(f"  warning: {match.warning}", file=sys.stderr)
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from pytest_solgate.declare.profiles import detect, known_profiles, profile_to_toml
    from pytest_solgate.measure import calibrate, devices

    cache = _state_dir()
    choice = devices.choose_device(args.device, None)
    if choice.kind == "cpu":

        # calibrate means measure now; a cached profile's ceilings are kept where they were higher
        # (they only rise: delete cpu-*.toml in the per-user cache, `solgate detect` names it, to start again)
        profile = calibrate.cpu_profile(cache, lambda text: print(text, file=sys.stderr), full=True)
    else:
        name = devices.device_name(choice)
        facts = devices.device_facts(choice)
        datasheet = detect(name, facts, known_profiles(cache)).profile
        print(f"solgate: calibrating {name} against {datasheet.id} ...", file=sys.stderr)
        say = lambda text: print(text, file=sys.stderr)  # noqa: E731
        profile, path = calibrate.calibrate_gpu(cache, choice.index, datasheet, name, facts.get("l2_bytes"), announce=say)
        if path is not None:
            print(f"solgate: cached in {path}", file=sys.stderr)
    if args.output:
        calibrate.write_profile(Path(args.output), profile)
    print(profile_to_toml(profile), end="")
    return 0


def _state_dir() -> Path:
    from pytest_solgate.record import gitinfo

    return gitinfo.state_dir(Path.cwd())


def _open_history(location: str, create: bool = False) -> Any:
    from pytest_solgate.record import history

    return history.open_store(location, create=create)


def _cmd_history(args: argparse.Namespace) -> int:
    from pytest_solgate.support import units

    if args.json and not args.changes:  # arguments are checked before anything is opened
        raise UsageFailure("history: --json goes with --changes")
    min_change = _min_change(args)
    with _open_history(_history_path(args)) as store:
        results = store.summaries(args.pattern)
    if args.changes:
        return _print_changes(results, min_change, args.json)
    if not results:
        print("no recorded results" + (f" match '{args.pattern}'" if args.pattern else ""))
        return 0
    print(f"{'started':<20} {'commit':<10} {'dirty':<5} {'profile':<14} {'SOL':>7} {'time':>10}  {'verdict':<12} test [name]")
    for run, m in results:
        print(
            f"{run['started_at'][:19]:<20} {(run['commit_sha'] or 'unknown')[:10]:<10} {'yes' if run['dirty'] else '':<5} "
            f"{m.profile[:14]:<14} {units.sol_fine(m.sol):>7} {units.seconds(m.seconds):>10}  {m.verdict or '-':<12} {m.test} [{m.name}]"
        )
    return 0


def _series(results: list) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    from pytest_solgate.record import gitinfo, store

    commits = sorted({run["commit_sha"] for run, _ in results if run["commit_sha"] and not run["dirty"]})
    return store.commit_series(results, gitinfo.commit_times(".", commits))


def _changes_of(points: list[dict[str, Any]], min_change: float) -> Any:
    """The change points of one series, with the commits the gate failed as regressed named too
    (changepoints.find): `--changes`, its JSON and the trend page tell the gate's story."""
    from pytest_solgate.judge import changepoints

    regressed = [i for i, p in enumerate(points) if p.get("regressed")]
    return changepoints.find([p["sol"] for p in points], min_change, regressed)


def _changes_json(test: str, name: str, profile: str, points: list, changes: Any) -> dict[str, Any]:
    return {
        "test": test, "name": name, "profile": profile,
        "steps": [{"commit": points[cp.index]["commit"], "after_commit": points[cp.index - 1]["commit"],
                   "before": cp.before, "after": cp.after, "change": cp.change, "provisional": cp.provisional,
                   "by_gate": cp.by_gate}
                  for cp in changes.points],
        "outliers": [{"commit": points[o.index]["commit"], "sol": o.value, "level": o.level, "change": o.change}
                     for o in changes.outliers],
        "skipped": [points[i]["commit"] for i in changes.skipped],
    }


def _print_changes(results: list, min_change: float, as_json: bool = False) -> int:
    import json

    from pytest_solgate.support import units

    found = 0
    notes = []
    listed = []
    for (test, name, profile, _ceilings), points in sorted(_series(results).items()):
        changes = _changes_of(points, min_change)
        if as_json:
            listed.append(_changes_json(test, name, profile, points, changes))
            continue
        for cp in changes.points:
            found += 1
            before, at = points[cp.index - 1], points[cp.index]
            print(
                f"{at['commit'][:10]} {units.percent(cp.change, signed=True):>8}  SOL {units.sol_fine(cp.before)} -> {units.sol_fine(cp.after)}  "
                f"{test} [{name}] {profile} (after {before['commit'][:10]}, {at['commit_time'][:10]})"
                + ("  provisional: the newest commit; the next one confirms it" if cp.provisional else "")
                + ("; the gate failed it as regressed" if cp.by_gate else "")
            )
        for outlier in changes.outliers:
            found += 1
            at = points[outlier.index]
            print(
                f"{at['commit'][:10]} {units.percent(outlier.change, signed=True):>8}  SOL {outlier.value:.3f} "
                f"(level {outlier.level:.3f})  {test} [{name}] {profile} ({at['commit_time'][:10]})  outlier: one commit "
                "off its level, not a step"
            )
        if changes.note:
            notes.append(f"{test} [{name}] {profile}: {changes.note}")
    if as_json:
        print(json.dumps({"min_change": min_change, "measurements": listed}, indent=1))
        return 0
    if not found:
        print(f"no change points: no measurement's SOL stepped by {units.percent(min_change)} or more over the recorded commits")
    for note in notes:
        print(f"note: {note}")
    return 0


def _cmd_trend(args: argparse.Namespace) -> int:
    from pytest_solgate.judge import changepoints
    from pytest_solgate.report import html, trend
    from pytest_solgate.support import atomic

    if args.last < 0:
        raise UsageFailure(f"trend: --last={args.last}: give a number of commits, or 0 for all")
    from pytest_solgate.support.locations import same_file

    history_path = _history_path(args)
    min_change = _min_change(args)
    if not is_history_url(history_path) and same_file(args.output, history_path):
        raise UsageFailure(f"trend: -o {args.output} is the history database itself; write the page elsewhere")
    panels = []
    note = ""
    with _open_history(history_path) as store:
        history_path = store.location  # never a password on the page
        for (test, name, profile, ceilings), points in sorted(_series(store.summaries(args.pattern)).items()):
            try:  # over the whole series: a step is found with all the evidence there is
                changes = _changes_of(points, min_change)
            except changepoints.ChangePointsUnavailable as exc:
                changes, note = changepoints.Changes(), str(exc)
            newest = store.newest(test, name, profile, ceilings)
            budget = newest.judgement.budget.min if newest is not None and newest.gate and newest.judgement else None
            panels.append(trend.panel(
                test, name, profile, points, [points[cp.index]["commit"] for cp in changes.points], budget, args.last,
                provisional=[points[cp.index]["commit"] for cp in changes.points if cp.provisional],
                outliers=[points[o.index]["commit"] for o in changes.outliers],
            ))
    target = atomic.write_text(args.output, html.render_trend(panels, history_path, note), "trend page")
    print(f"trend of {len(panels)} measurement(s) written to {target}" + (f" ({note})" if note else ""))
    return 0


def _find_commit(ref: str, shas: set[str], history_path: str) -> str:
    """A git ref, or a unique prefix of a commit in the history."""
    from pytest_solgate.record import gitinfo

    try:
        sha = gitinfo.resolve(".", ref) if ref else None
    except gitinfo.AmbiguousCommit as exc:
        raise UsageFailure(f"compare: {exc}") from None
    if sha:
        return sha
    matches = sorted(s for s in shas if ref and s.startswith(ref))
    if len(matches) > 1:
        raise UsageFailure(f"compare: '{ref}' is ambiguous in {history_path}: {', '.join(m[:12] for m in matches)}")
    if not matches:
        raise UsageFailure(f"compare: '{ref}' is neither a git ref here nor a commit in {history_path}")
    return matches[0]


def _cmd_compare(args: argparse.Namespace) -> int:
    from pytest_solgate import results
    from pytest_solgate.judge import verdict
    from pytest_solgate.record import baseline, gitinfo
    from pytest_solgate.support import units

    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    ini = _ini()[1]
    if args.window is None:
        args.window = ini.baseline_window
    if not 1 <= args.window <= 100:
        raise UsageFailure(f"--window={args.window}: give a whole number of runs from 1 to 100")
    min_change = _min_change(args)
    with _open_history(_history_path(args)) as store:
        history_path = store.location
        shas = store.commits()
        base_sha, head_sha = _find_commit(args.base, shas, history_path), _find_commit(args.head, shas, history_path)
        head: dict[tuple[str, str, str, str], Any] = {}
        for run, m in store.results_at(head_sha):  # oldest first, so the newest clean run wins
            if not run["dirty"]:
                head[(m.test, m.name, m.profile, m.ceilings)] = m
        if not head:
            raise UsageFailure(f"compare: no clean results for '{args.head}' in {history_path}")
        # The base is a window along BASE's first-parent ancestry, as the plugin's baseline is;
        # HEAD itself is never in it (comparing a commit with itself, or with a BASE after it).
        commits = [c for c in gitinfo.first_parent_chain(".", base_sha) or [base_sha] if c != head_sha]
        windows = {
            key: baseline.window_from(store, key, commits, args.window, m.environment, min_change)
            for key, m in head.items() if _gated(m)
        }
    if not any(windows.values()):
        itself = " other than HEAD's own (a commit is never in its own window)" if base_sha == head_sha else ""
        raise UsageFailure(f"compare: no clean results for '{args.base}' or its ancestors in {history_path}{itself}")
    settings = verdict.JudgeSettings(gate="fail", commit=head_sha, max_regression=ini.max_regression)
    regressed = 0
    print(f"{'test [name]':<60} {'base':>7} {'head':>7} {'change':>8} {'floor':>7}  verdict")
    for key, h in sorted(head.items()):
        label = f"{key[0]} [{key[1]}]"
        if not _gated(h):
            why = "gate=False" if not h.gate else (h.judgement.reason if h.judgement else "not gated")
            print(f"{label:<60} {'':>7} {units.sol_fine(h.score.sol):>7} {'':>8} {'':>7}  not gated ({why.split(':')[0]})")
            continue
        window = windows.get(key)
        if window is None:
            print(f"{label:<60} {'':>7} {units.sol_fine(h.score.sol):>7} {'':>8} {'':>7}  only in head")
            continue
        tolerance = args.max_regression
        if tolerance is None and h.judgement is not None:
            tolerance = h.judgement.budget.max_regression
        tolerance = settings.max_regression if tolerance is None else tolerance
        result = verdict.against_window(h, window, tolerance, settings)
        regressed += result.verdict == results.REGRESSED
        floor = units.percent(result.floor) if result.floor is not None else "?"
        print(f"{label:<60} {units.sol_fine(result.centre):>7} {units.sol_fine(h.score.sol):>7} {units.percent(result.change, True):>8} {floor:>7}  "
              f"{result.verdict}")
    print(f"{regressed} regressed between {base_sha[:10]} and {head_sha[:10]} "
          f"(base: up to {args.window} clean runs along its first-parent ancestry; not re-measured)")
    return 1 if regressed else 0


def _gated(m: Any) -> bool:
    """Whether the plugin judged ``m``: only those are compared (the rule is the judge's)."""
    from pytest_solgate.judge import verdict

    return verdict.judged(m)


def _cmd_accept(args: argparse.Namespace) -> int:
    """Record a deliberate slowdown: from COMMIT on, the baseline of the matching measurements is
    the level COMMIT shows (baseline.level), not the one before it."""
    import datetime
    import getpass

    from pytest_solgate.record import gitinfo

    reason = args.reason.strip()
    if not reason:
        raise UsageFailure("accept: --reason is empty; say why the slowdown is accepted (it is kept in the history)")
    try:
        sha = gitinfo.resolve(".", args.commit)
    except gitinfo.AmbiguousCommit as exc:
        raise UsageFailure(f"accept: {exc}") from None
    if sha is None:
        raise UsageFailure(f"accept: '{args.commit}' is not a commit of the git repository here; give a ref or sha")
    if not gitinfo.is_first_parent_ancestor(".", sha):
        # Baselines are read along HEAD's first-parent chain: an accept anywhere else never applies.
        raise UsageFailure(f"accept: {sha[:10]} ('{args.commit}') is not on the first-parent chain of HEAD, where "
                           "baselines are read, so the accept would never apply; accept the commit as it landed on "
                           "this branch (after a squash or rebase, its new sha)")
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = ""
    accept = {"commit_sha": sha, "pattern": args.pattern, "reason": reason, "accepted_by": who,
              "accepted_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with _open_history(_history_path(args), create=True) as store:
        matched = _accepted_tests(args.pattern, store.tests(), store.location)
        store.record_accept(accept)
        location = store.location
    scope = "every test" if args.pattern == "*" else f"{args.pattern!r} ({len(matched)} recorded test(s): {_listed(matched)})"
    print(f"accepted the level at {sha[:10]} for {scope} in {location}: baselines start there from now on ({reason})")
    return 0


def _accepted_tests(pattern: str, tests: list[str], location: str) -> list[str]:
    """The recorded tests an accept's pattern matches; none is refused, with the close matches
    (an accept that matches nothing would never apply, and would say it did)."""
    import difflib

    from pytest_solgate.record.store import matches

    matched = [test for test in tests if matches(pattern, test)]
    if matched or pattern == "*":
        return matched
    names = sorted({test.split("::")[-1] for test in tests})
    close = difflib.get_close_matches(pattern.strip("*"), names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    raise UsageFailure(f"accept: the pattern {pattern!r} matches no recorded test in {location} "
                       f"({len(tests)} recorded); {hint}see `solgate history`")


def _listed(names: list[str], most: int = 3) -> str:
    shown = ", ".join(name.split("::")[-1] for name in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _cmd_import(args: argparse.Namespace) -> int:
    from pytest_solgate.record import schema, spool
    from pytest_solgate.support.errors import ImportFileError

    if args.spool == bool(args.file):
        raise UsageFailure("import: give a --sol-json FILE, or --spool (not both)")
    history_path = _history_path(args)  # a bad location is refused before the file is read
    if args.spool:
        with _open_history(history_path, create=True) as store:
            sent = spool.send(store, _state_dir())
            location = store.location
        for problem in sent.problems:
            print(f"solgate: {problem}", file=sys.stderr)
        print(f"{sent.sent} spooled run(s) sent to {location}"
              + (f", {sent.already_there} already there" if sent.already_there else "")
              + (f"; {sent.left} left in the spool: the server went away again" if sent.left else ""))
        return 1 if sent.left or sent.problems else 0
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot read it ({exc})") from None
    run, measurements = schema.read_run(text, str(path))  # every field checked before anything is written
    with _open_history(history_path, create=True) as store:
        added = store.record_run(run, measurements)
        location = store.location
    if added:
        print(f"imported run {run.id[:12]} ({len(measurements)} measurements) into {location}")
    else:
        print(f"run {run.id[:12]} is already in {location}: nothing added")
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    """Every run of SOURCE into DESTINATION, each in its own transaction: run ids are unique, so
    running it again (or after an interruption) adds only what is missing."""
    from pytest_solgate.support.locations import same_file

    source_at, destination_at = _location(args.source, "SOURCE"), _location(args.destination, "DESTINATION")
    if is_history_url(source_at) == is_history_url(destination_at) and (
        source_at == destination_at or (not is_history_url(source_at) and same_file(source_at, destination_at))
    ):
        raise UsageFailure("migrate: SOURCE and DESTINATION are the same history")
    copied = present = 0
    with _open_history(source_at) as source, _open_history(destination_at, create=True) as destination:
        for run, measurements in source.whole_runs():
            if destination.record_run(run, measurements):
                copied += 1
            else:
                present += 1
        for accept in source.all_accepts():  # the accepted slowdowns travel with the runs
            destination.record_accept(accept)
        print(f"{copied} run(s) copied from {source.location} to {destination.location}, {present} already there")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    with _open_history(_history_path(args), create=True) as store:
        print(f"history ready at {store.location} (schema up to date)")
    return 0


# --- solgate bisect (the engine is pytest_solgate/bisect.py; the words report/bisection.py) ---------


def _bisect_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bisect", help="the first commit between GOOD and BAD whose measurements fall below GOOD's level",
        description="Find the first commit after GOOD, on BAD's first-parent line, at which a selected measurement "
                    "falls below GOOD's level by more than the tolerance AND the noise floor the gate would use "
                    "(regressed). Each probed commit is checked out in a temporary git worktree (your tree, index "
                    "and HEAD untouched) and its tests are run there with the plugin, about log2(N) runs; commits "
                    "whose tests fail or do not collect are skipped and named; results already in the history are "
                    "reused. Exit status: 0 found, 1 not found, 2 usage error.",
    )
    p.add_argument("good", help="a commit where the measurements were fine (a git ref or sha)")
    p.add_argument("bad", help="a later commit, on GOOD's first-parent descendants, where they fell")
    p.add_argument("pattern", nargs="?", default=None,
                   help="only tests whose id matches this glob or contains this text (default: every test that measures)")
    p.add_argument("--record", action="store_true",
                   help="save each probe's run into the history (default: a scratch history, nothing saved)")
    p.add_argument("--good-runs", type=int, default=None,
                   help="runs of GOOD its level stands on, recorded ones counted (default: 3; at least 2)")
    p.add_argument("--max-regression", type=float, default=None,
                   help="tolerance (default: each measurement's max_regression as the gate applied it)")
    _history_arg(p)


def _cmd_bisect(args: argparse.Namespace) -> int:
    from pytest_solgate import bisect
    from pytest_solgate.report import bisection

    good_runs = bisect.DEFAULT_GOOD_RUNS if args.good_runs is None else args.good_runs
    if not 2 <= good_runs <= 50:
        raise UsageFailure(f"bisect: --good-runs={good_runs}: give 2 to 50 (one run shows no run-to-run noise)")
    if args.max_regression is not None and not 0 <= args.max_regression < 1:
        raise UsageFailure(f"--max-regression={args.max_regression}: give a fraction in [0, 1)")
    span = bisect.resolve_span(".", args.good, args.bad)  # refs checked before the history is opened
    found = bisect.bisect(
        ".", args.good, args.bad, args.pattern, _history_path(args), record=args.record, good_runs=good_runs,
        tolerance=args.max_regression,
        announce=lambda probe: print(bisection.progress(probe, len(span.commits)), file=sys.stderr, flush=True),
    )
    print("\n".join(bisection.lines(found)))
    return 0 if found.found else 1


COMMANDS = {
    "profiles": _cmd_profiles,
    "profile": _cmd_profile,
    "detect": _cmd_detect,
    "calibrate": _cmd_calibrate,
    "sol": _cmd_sol,
    "history": _cmd_history,
    "trend": _cmd_trend,
    "compare": _cmd_compare,
    "accept": _cmd_accept,
    "import": _cmd_import,
    "migrate": _cmd_migrate,
    "init": _cmd_init,
    "bisect": _cmd_bisect,
}

if __name__ == "__main__":
    sys.exit(main())
