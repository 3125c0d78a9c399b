"""The device checks of issue 35's "Done when", one verdict line each for $OUT/results.md.

Run by benchmarks/gpu_check.py (its device-checks step), or alone:

    python benchmarks/gpu_device_checks.py [--dry-run] [--out FILE.json] [--work DIR]

One pytest process runs benchmarks/gpu_check_workloads.py with the plugin registered by name, and
this script reads the plugin's figures from its ``--sol-json`` (``seconds``, ``timing_mode``,
``joules``, ``verdict``, ``reason``) and its JUnit XML, never from the plugin's internals:

- cupti[WORKLOAD]: the plugin's median within 3 % of CUPTI's kernel time (torch.profiler) on the
  six workloads of issue 35 item 1, CUDA events beside them;
- side-stream[all|small]: a callable that launches its work on a side stream fails, and its failure
  names the cause (a stream, work still running); "small" keeps its SOL under 1;
- energy: the plugin's energy per call of a 1 GiB copy within 5 % of NVML's total-energy counter
  over about 2 s of back-to-back copies;
- integrity[CASE] (issue 42, docs/integrity.md): an honest add handed with its inputs passes; a
  CUDA graph replaying its first buffers, patched events and an unwaited copy to the host each
  fail naming their cause.

benchmarks/gpu_check.py judges two more from its own steps' JSON with the functions here:
- locked-clocks: the SOL suite under ``--sol-lock-clocks=base`` has no throttle retakes and no
  budget failure that the unlocked pass does not have;
- measured-ceilings: no SOL against the ceilings `solgate calibrate` measured exceeds 1.0.

In a dry run (a CPU) the workloads run small, the "CUPTI" figure is the profiler's CPU time and
the side-stream and energy cases are skipped: the lines say so and are not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_selfcheck import Verdict, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS_FILE = ROOT / "benchmarks" / "gpu_check_workloads.py"
PLUGIN_ARGS = ["-p", "no:solgate", "-p", "pytest_solgate.plugin"]
SIDE_FIGURES_VARIABLE = "SOLGATE_WORKLOADS_OUT"  # gpu_check_workloads.OUT_VARIABLE (that file imports torch)

TIMING_AGREE = 0.03  # plugin / CUPTI within 3 % (issue 35 item 1)
ENERGY_AGREE = 0.05  # plugin / counter within 5 % (item 5)
# Words of a failure that names work the timer could not see (item 4); a failure that says only
# "above-sol" and gives advice about declared bytes and caches does not.
HIDDEN_WORK_WORDS = ("stream", "still running", "hidden", "cannot see", "did not see")
FAILING = ("below-budget", "regressed", "above-sol")  # results.FAILING's values


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.2f} us" if seconds is not None else "-"


def _by_name(measurements: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in measurements}


def timing_verdicts(measurements: list[dict[str, Any]], side: list[dict[str, Any]], dry: bool) -> list[Verdict]:
    """One line per workload: the plugin's median against CUPTI's kernel time, events beside."""
    plugin = _by_name(measurements)
    verdicts = []
    for row in (r for r in side if "cupti_s" in r):
        workload = row["workload"]
        m = plugin.get(workload)
        check = f"cupti[{workload}]"
        if m is None:
            verdicts.append(Verdict(check, False, f"{check}: FAILED: the plugin's JSON has no measurement {workload!r}"))
            continue
        ratio = m["seconds"] / row["cupti_s"] if row["cupti_s"] else float("inf")
        figures = (f"plugin {_us(m['seconds'])} ({m.get('timing_mode') or 'timing mode not recorded'}), "
                   f"{'CUPTI' if not dry else 'profiler CPU time'} {_us(row['cupti_s'])}"
                   + (f" (span on the device {_us(row['cupti_span_s'])})" if row.get("cupti_span_s") else "")
                   + f", {'events' if not dry else 'host clock'} {_us(row.get('events_s'))}, plugin / CUPTI {ratio:.3f}")
        if dry:
            verdicts.append(Verdict(check, True, f"{check}: not judged (dry run on a CPU): {figures}"))
            continue
        ok = abs(ratio - 1) <= TIMING_AGREE
        verdicts.append(Verdict(check, ok, f"{check}: {'ok' if ok else 'FAILED'}: {figures} (target within "
                                           f"{TIMING_AGREE:.0%})"))
    return verdicts


def junit_cases(xml_text: str) -> dict[str, tuple[str, str]]:
    """Test name -> (outcome, message and text) from pytest's JUnit XML."""
    cases = {}
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        outcome, text = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                text = f"{found.get('message', '')}\n{found.text or ''}"
                break
        cases[case.get("name", "")] = (outcome, text)
    return cases


def side_stream_verdicts(cases: dict[str, tuple[str, str]], measurements: list[dict[str, Any]]) -> list[Verdict]:
    """Each side-stream case must fail, naming the hidden work, not as a fast kernel."""
    plugin = _by_name(measurements)
    verdicts = []
    for hidden in ("all", "small"):
        check = f"side-stream[{hidden}]"
        outcome, text = cases.get(f"test_side_stream[{hidden}]", ("missing", ""))
        m = plugin.get(f"side-stream-{hidden}") or {}
        said = " ".join(filter(None, [m.get("reason", ""), text])).strip()
        # The case's own names hold "stream": only the words around them may name the cause.
        words = said.lower().replace(f"side-stream-{hidden}", "").replace("test_side_stream", "")
        first = next((line.strip() for line in said.splitlines()
                      if any(w in line.lower().replace(f"side-stream-{hidden}", "") for w in HIDDEN_WORK_WORDS)),
                     said.splitlines()[0].strip() if said else "")[:240]
        sol = f"SOL {m['sol']:.3g}, " if isinstance(m.get("sol"), (int, float)) else ""
        if outcome == "skipped":
            verdicts.append(Verdict(check, True, f"{check}: not run ({first or 'skipped'})"))
        elif outcome == "missing":
            verdicts.append(Verdict(check, False, f"{check}: FAILED: the case did not run"))
        elif outcome == "passed":
            verdicts.append(Verdict(check, False, f"{check}: FAILED: it passed ({sol}{_us(m.get('seconds'))}): "
                                                  "the work on the side stream went unseen"))
        else:
            named = any(word in words for word in HIDDEN_WORK_WORDS)
            verdicts.append(Verdict(check, named, f"{check}: {'ok' if named else 'FAILED'}: it {outcome} "
                                                  f"({sol or ''}{'naming the cause' if named else 'without naming the hidden work'}): {first}"))
    return verdicts


def integrity_verdicts(cases: dict[str, tuple[str, str]]) -> list[Verdict]:
    """The honest case passes; each cheat fails with the words of its cause (the one line's)."""
    from gpu_check_workloads import INTEGRITY_CASES

    verdicts = []
    for case, words in INTEGRITY_CASES.items():
        check = f"integrity[{case}]"
        outcome, text = cases.get(f"test_integrity[{case}]", ("missing", ""))
        said = next((line.strip() for line in text.splitlines() if line.startswith("E ")),
                    text.strip().splitlines()[0] if text.strip() else "")[:240]
        if outcome == "skipped":
            verdicts.append(Verdict(check, True, f"{check}: not run ({said or 'skipped'})"))
        elif outcome == "missing":
            verdicts.append(Verdict(check, False, f"{check}: FAILED: the case did not run"))
        elif not words:
            ok = outcome == "passed"
            verdicts.append(Verdict(check, ok, f"{check}: {'ok: it passed' if ok else 'FAILED: a false flag: ' + said}"))
        else:
            ok = outcome in ("failed", "error") and words in text
            verdicts.append(Verdict(check, ok, f"{check}: {'ok' if ok else 'FAILED'}: it {outcome}"
                                               f"{'' if ok else f', not naming {words!r}'}: {said}"))
    return verdicts


def energy_per_call(m: dict[str, Any]) -> float | None:
    """The plugin's energy per call from its JSON: ``joules``, else the first number in a field
    named for joules or energy (the record may name it otherwise once energy is reworked)."""
    if isinstance(m.get("joules"), (int, float)):
        return m["joules"]
    return next((v for k, v in m.items() if ("joule" in k or "energy" in k) and isinstance(v, (int, float))
                 and not isinstance(v, bool)), None)


def energy_verdict(measurements: list[dict[str, Any]], side: list[dict[str, Any]], skipped: str = "") -> Verdict:
    """The plugin's joules per call of the 1 GiB copy against the counter's over ~2 s."""
    if skipped:
        return Verdict("energy", True, f"energy: not run ({skipped})")
    counter = next((r for r in side if r.get("workload") == "energy-copy-1GiB"), None)
    m = _by_name(measurements).get("energy-copy-1GiB")
    if counter is None or m is None:
        return Verdict("energy", False, "energy: FAILED: the energy case wrote no figures (see the device-checks log)")
    joules = energy_per_call(m)
    gigabytes = counter["bytes"] / 1e9
    theirs = f"NVML's total-energy counter {counter['counter_joules_per_call'] / gigabytes:.3f} J/GB " \
             f"({counter['counter_watts']:.0f} W mean over {counter['counter_calls']} back-to-back copies)"
    if not isinstance(joules, (int, float)):
        return Verdict("energy", False, f"energy: FAILED: the plugin recorded no energy for the 1 GiB copy; {theirs}")
    ratio = joules / counter["counter_joules_per_call"]
    ok = abs(ratio - 1) <= ENERGY_AGREE
    return Verdict("energy", ok, f"energy: {'ok' if ok else 'FAILED'}: the plugin {joules / gigabytes:.3f} J/GB, "
                                 f"{theirs}; plugin / counter {ratio:.3f} (target within {ENERGY_AGREE:.0%})")


def locked_clock_verdict(unlocked: list[dict[str, Any]], locked: list[dict[str, Any]], dry: bool = False) -> Verdict:
    """The locked pass: no throttle retakes, and no budget failure the unlocked pass lacks."""
    if not locked:
        return Verdict("locked-clocks", False, "locked-clocks: FAILED: the locked pass wrote no measurements")
    retakes = sum(m.get("dropped_samples") or 0 for m in locked)
    throttled = sorted(f"{m['test'].split('::')[-1]}/{m['name']}" for m in locked if m.get("throttled"))
    failed_unlocked = {(m["test"], m["name"]) for m in unlocked if m.get("verdict") in FAILING}
    new_failures = sorted(f"{m['test'].split('::')[-1]}/{m['name']} ({m.get('verdict')}: "
                          f"{(m.get('reason') or '').splitlines()[0][:120] if m.get('reason') else ''})"
                          for m in locked if m.get("verdict") in FAILING and (m["test"], m["name"]) not in failed_unlocked)
    clocks = sorted({(m.get("environment") or {}).get("sm_clocks", "") for m in locked} - {""})
    facts = (f"{len(locked)} measurements under {', '.join(clocks) or 'no recorded clock state'}: {retakes} throttle "
             f"retakes, {len(throttled)} throttled{' (' + ', '.join(throttled) + ')' if throttled else ''}, "
             f"{len(new_failures)} budget failures the unlocked pass does not have"
             + (f": {'; '.join(new_failures)}" if new_failures else ""))
    if dry:
        return Verdict("locked-clocks", True, f"locked-clocks: not judged (dry run on a CPU, no clock to lock): {facts}")
    ok = retakes == 0 and not throttled and not new_failures
    return Verdict("locked-clocks", ok, f"locked-clocks: {'ok' if ok else 'FAILED'}: {facts}")


# A dry run's CPU ceilings come from a few seconds of calibration on a shared machine, and its
# stand-in add is calibration's own streaming pattern: it reads about 1.0 by design, a little either
# side with the machine's phase. There the limit is the plugin's own (verdict.ABOVE_SOL_LIMIT): a
# cache-resident add read 1.57 in CI, far beyond it. On a GPU the ceilings are best rates of
# minutes of patterns, and 1.0 holds.
DRY_RUN_LIMIT = 1.05


def measured_ceiling_verdict(measured: list[dict[str, Any]], limit: float = 1.0) -> Verdict:
    """No kernel and no torch reference above ``limit`` (1.0 on a GPU) against the measured ceilings."""
    if not measured:
        return Verdict("measured-ceilings", False, "measured-ceilings: FAILED: the sol-measured step wrote no measurements")
    above = sorted((m for m in measured if isinstance(m.get("sol"), (int, float)) and m["sol"] > limit),
                   key=lambda m: -m["sol"])
    highest = max(measured, key=lambda m: m.get("sol") or 0.0)
    profile = measured[0].get("profile", "?")
    if above:
        listed = ", ".join(f"{m['test'].split('::')[-1]}/{m['name']} {m['sol']:.3f}" for m in above)
        return Verdict("measured-ceilings", False, f"measured-ceilings: FAILED: {len(above)} of {len(measured)} SOLs "
                                                   f"above {limit:.2f} against {profile}: {listed}")
    return Verdict("measured-ceilings", True, (
        f"measured-ceilings: ok: {len(measured)} SOLs against {profile}, none above {limit:.2f} (highest "
        f"{highest['test'].split('::')[-1]}/{highest['name']} {highest.get('sol', 0.0):.3f})"))


def load_measurements(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()).get("measurements", []) if path.is_file() else []


def load_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


# A dry run times the three smallest workloads (a shared 2-core CI machine takes half a minute a
# measurement under load); the side-stream and energy cases are collected and skipped.
DRY_RUN_SELECTION = "gemm-bf16-1024 or copy-4MiB or add-256K or side_stream or energy or integrity"


def workloads_command(work: Path, dry: bool) -> list[str]:
    timing = ["--sol-min-time=0", "--sol-max-time=0.2", "-k", DRY_RUN_SELECTION] if dry else ["--sol-max-time=1"]
    return [sys.executable, "-m", "pytest", str(WORKLOADS_FILE), "-q", "-rA", "-p", "no:cacheprovider", *PLUGIN_ARGS,
            "--sol-no-save", "--sol-baseline=none", *timing, f"--sol-json={work / 'device-checks-sol.json'}",
            f"--junitxml={work / 'device-checks.xml'}"]


def run(work: Path, dry: bool) -> tuple[list[Verdict], int]:
    """Run the workloads in one pytest process; the verdicts and pytest's exit status."""
    side_path = work / "device-checks-side.jsonl"
    side_path.unlink(missing_ok=True)
    env = {**os.environ, SIDE_FIGURES_VARIABLE: str(side_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH", "")])])
    done = subprocess.run(workloads_command(work, dry), cwd=work, env=env)
    measurements = load_measurements(work / "device-checks-sol.json")
    side = load_lines(side_path)
    xml = work / "device-checks.xml"
    cases = junit_cases(xml.read_text()) if xml.is_file() else {}
    energy_outcome, energy_text = cases.get("test_energy", ("missing", ""))
    skipped = (energy_text.strip().splitlines() or ["skipped"])[0] if energy_outcome == "skipped" else ""
    verdicts = [*timing_verdicts(measurements, side, dry), *side_stream_verdicts(cases, measurements),
                energy_verdict(measurements, side, skipped), *integrity_verdicts(cases)]
    return verdicts, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run on a CPU: small workloads, nothing judged")
    parser.add_argument("--out", type=Path, help="write the verdicts here as JSON")
    parser.add_argument("--work", type=Path, help="where pytest's JSON, XML and the side figures go (default: a temporary folder)")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="solgate-device-checks-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    verdicts, status = run(work, args.dry_run)
    report(verdicts, args.out, "device checks")
    # pytest exits 1 when tests failed (the side-stream cases must): the verdicts judge those. Any
    # other status (interrupted, a usage error, nothing collected) means the checks did not run.
    if status not in (0, 1) or not verdicts:
        print(f"device checks: pytest exited {status}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
