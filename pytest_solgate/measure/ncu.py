"""Measure: the DRAM bytes one call really moved, under Nsight Compute (``--sol-ncu``, opt-in).

ncu profiles a process, and the callable lives in the pytest process, which is already timing.
So for each gated GPU measurement the same test node runs once more in a child pytest under

    ncu --profile-from-start off --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
        --csv --print-units base --clock-control none --log-file LOG  python -m pytest NODE --sol-no-save ...

with ``SOLGATE_NCU_CHILD`` naming the measurement. In the child the plugin does not time that
measurement: it calls the callable a few times (compilation and autotuning stay outside the
profile), flushes the L2, and calls it once between ``torch.cuda.profiler.start()`` and
``stop()`` (cudaProfilerStart/Stop), the only kernels ncu profiles. The parent parses the CSV
and sums the metrics over those kernels (``parse_csv``). The child writes no history and no
report. ncu's default cache control flushes the caches before each profiled kernel, so the bytes
are a cold call's, as the timed samples are; a multi-kernel callable's intermediates then count
as DRAM traffic even where the L2 would have kept them (docs/measurement.md).

The CSV is ncu's default ("details") page: one row per kernel and metric, with "ID",
"Kernel Name", "Metric Name", "Metric Unit" and "Metric Value" among its columns (Nsight Compute
2023.1 and later; 2022 versions add "Kernel Time", NVTX filters add range columns). 2023.2 and
later add rule columns ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
"Estimated Speedup") to the header, and then write each metric row without them, ending in a
comma: a row is read by the names of the columns it has, never dropped for being shorter than the
header (issue 35: every metric of a real report with sections was lost so). Rule rows (an empty
"Metric Name") are not metrics. ``--print-units base`` keeps values in bytes and nanoseconds, but
other units are converted too. The raw page (``--page raw``: one row per kernel, metric names as
columns, a units row under the header) is read as well. the ncu CSV files in tests/data are samples of both.

The child pytest registers the plugin by name (``-p pytest_solgate.plugin``, the entry point
blocked so that an installed copy is not registered twice) and finds the package on PYTHONPATH:
where the project is not installed (the GPU machine), no entry point would register it and the
child would end on "unrecognized arguments: --sol-no-save".
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

CHILD_VARIABLE = "SOLGATE_NCU_CHILD"  # JSON [test key, measurement name] of the measurement to profile
NCU_VARIABLE = "SOLGATE_NCU"  # the ncu executable, when not the one on PATH
READ, WRITE, DURATION = "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"
METRICS = (READ, WRITE, DURATION)
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
TIMEOUT_SECONDS = 600
UNITS = {
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "kibyte": 2.0**10, "mibyte": 2.0**20, "gibyte": 2.0**30,
    "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
    "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
}


class NcuUnavailable(Exception):
    """ncu cannot profile on this machine (missing, no counter permission): no later try will do better."""


class NcuFailed(Exception):
    """This one profile gave no figure (the child failed, no kernel was profiled)."""


@dataclass(frozen=True)
class DramTraffic:
    """What ncu measured over the kernels of one call."""

    read_bytes: float
    write_bytes: float
    gpu_seconds: float
    kernels: int

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes


# --- the parent's side ---------------------------------------------------------------------------


def executable() -> str | None:
    chosen = os.environ.get(NCU_VARIABLE)
    return shutil.which(chosen) if chosen else shutil.which("ncu")


def command(ncu: str, log_file: Path, child: Sequence[str]) -> list[str]:
    # --clock-control none: ncu would lock the clocks to base for the child and reset them after,
    # undoing the session's --sol-lock-clocks; bytes moved do not depend on the clock.
    return [ncu, "--profile-from-start", "off", "--metrics", ",".join(METRICS), "--csv", "--print-units", "base",
            "--clock-control", "none", "--log-file", str(log_file), *child]


# The plugin registered by its module, its entry point ("solgate" in pyproject.toml) blocked.
PLUGIN_BY_NAME = ("-p", "no:solgate", "-p", "pytest_solgate.plugin")


def child_environment(test: str, name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the measurement to profile, and the folder this package was
    imported from first on PYTHONPATH, so that ``-p pytest_solgate.plugin`` imports this copy
    whether or not the project is installed."""
    import pytest_solgate

    env = dict(os.environ if environ is None else environ)
    package_root = str(Path(pytest_solgate.__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([package_root, *(p for p in paths if p != package_root)])
    env[CHILD_VARIABLE] = json.dumps([test, name])
    return env


def child_command(nodeid: str, rootdir: Path, device: str, profile: str | None) -> list[str]:
    """The pytest run of one node in the child: no history, no baseline, no gate, no xdist."""
    import sys

    args = [sys.executable, "-m", "pytest", nodeid, "--rootdir", str(rootdir), "-q", "-p", "no:cacheprovider",
            "-p", "no:xdist", *PLUGIN_BY_NAME, "--sol-no-save", "--sol-baseline=none", "--sol-gate=off",
            f"--sol-device={device}"]
    if profile:
        args.append(f"--sol-profile={profile}")
    return args


def profile(nodeid: str, test: str, name: str, rootdir: Path, device: str, profile_option: str | None,
            run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> DramTraffic:
    """Run the child under ncu and return what it measured; raises NcuUnavailable or NcuFailed."""
    ncu = executable()
    if ncu is None:
        where = f"${NCU_VARIABLE}={os.environ[NCU_VARIABLE]}" if os.environ.get(NCU_VARIABLE) else "PATH"
        raise NcuUnavailable(f"ncu (Nsight Compute's CLI) is not on {where}: install Nsight Compute or put its "
                             "folder on PATH; measured bytes are left out")
    with tempfile.TemporaryDirectory(prefix="solgate-ncu-") as folder:
        log = Path(folder) / "ncu.csv"
        env = child_environment(test, name)
        try:
            done = run(command(ncu, log, child_command(nodeid, rootdir, device, profile_option)), cwd=str(rootdir),
                       env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise NcuFailed(f"ncu did not finish within {TIMEOUT_SECONDS} s") from None
        except OSError as exc:
            raise NcuUnavailable(f"ncu could not be started ({exc.strerror or exc})") from None
        text = log.read_text(errors="replace") if log.is_file() else ""
    output = f"{text}\n{done.stdout}\n{done.stderr}"
    if PERMISSION_ERROR in output:
        raise NcuUnavailable(
            f"ncu may not read this GPU's performance counters ({PERMISSION_ERROR}): run as root, or have the admin "
            "load the driver with NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM); "
            "measured bytes are left out")
    try:
        return parse_csv(text)
    except NcuFailed as exc:
        status = f"; the profiled pytest exited with status {done.returncode}" if done.returncode else ""
        raise NcuFailed(f"{exc}{status}") from None


def _number(value: str) -> float | None:
    text = value.strip().replace(",", "")  # ncu groups thousands in its default output: "16,777,216"
    try:
        return float(text)
    except ValueError:
        return None  # "n/a": a metric this device does not have


def _scale(unit: str) -> float:
    return UNITS.get(unit.strip().lower(), 1.0) if unit.strip() else 1.0


def _records(text: str) -> tuple[list[str], list[list[str]]]:
    """ncu's table as the csv module reads it: the header (the line that starts with "ID": the
    "==PROF==" lines and application output before it are not CSV) and the records under it,
    quoted commas and newlines kept. A line after the header that is no record of the table (a
    "==WARNING==" line, output of the profiled process: one field) is left out."""
    lines = text.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if first is None:
        return [], []
    table = list(csv.reader(io.StringIO("".join(lines[first:]))))
    header, records = table[0], table[1:]
    return header, [record for record in records if len(record) > 1]  # a one-field line is no record of the table


def parse_csv(text: str) -> DramTraffic:
    """The sums of the three metrics over every kernel in ncu's CSV (details or raw page)."""
    header, rows = _records(text)
    if not header:
        raise NcuFailed("ncu profiled no kernel: the measurement's call launched none inside the profiler range, "
                        "or the profiled test did not reach it")
    if "Metric Name" in header:
        return _details_page(header, rows)
    return _raw_page(header, rows)


def _by_name(header: list[str], row: list[str]) -> dict[str, str]:
    """A record's fields by column name: a row shorter than the header (no rule columns, a
    trailing comma) has the columns it has; an extra empty field at the end is no column."""
    return dict(zip(header, row))


def _details_page(header: list[str], rows: list[list[str]]) -> DramTraffic:
    missing = [c for c in ("ID", "Metric Name", "Metric Unit", "Metric Value") if c not in header]
    if missing:
        raise NcuFailed(f"ncu's details page has no {', '.join(missing)} column")
    sums = dict.fromkeys(METRICS, 0.0)
    kernels = set()
    for record in rows:
        row = _by_name(header, record)
        metric = row.get("Metric Name", "")
        value = _number(row.get("Metric Value", ""))
        if metric in sums and value is not None:
            sums[metric] += value * _scale(row.get("Metric Unit", ""))
            kernels.add(row.get("ID", ""))
    if not kernels:
        raise NcuFailed("ncu's report names none of " + ", ".join(METRICS))
    return DramTraffic(sums[READ], sums[WRITE], sums[DURATION], len(kernels))


def _raw_page(header: list[str], rows: list[list[str]]) -> DramTraffic:
    if not all(metric in header for metric in METRICS):
        raise NcuFailed("ncu's report names none of " + ", ".join(m for m in METRICS if m not in header))
    records = [_by_name(header, row) for row in rows]
    units = records[0] if records and _number(records[0].get(READ, "")) is None else None
    sums = dict.fromkeys(METRICS, 0.0)
    kernels = 0
    for row in records[1:] if units else records:
        values = {metric: _number(row.get(metric, "")) for metric in METRICS}
        if values[READ] is None:
            continue
        kernels += 1
        for metric, value in values.items():
            sums[metric] += (value or 0.0) * (_scale(units.get(metric, "")) if units else 1.0)
    if not kernels:
        raise NcuFailed("ncu profiled no kernel")
    return DramTraffic(sums[READ], sums[WRITE], sums[DURATION], kernels)
