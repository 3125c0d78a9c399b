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
2023.1 and later; 2022 versions add "Kernel Time"; 2023.2 and later add rule columns, empty here).
``--print-units base`` keeps values in bytes and nanoseconds, but other units are converted too.
The raw page (``--page raw``: one row per kernel, metric names as columns, a units row under the
header) is read as well.
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
from typing import Any, Callable, Sequence

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


def child_command(nodeid: str, rootdir: Path, device: str, profile: str | None) -> list[str]:
    """The pytest run of one node in the child: no history, no baseline, no gate, no xdist."""
    import sys

    args = [sys.executable, "-m", "pytest", nodeid, "--rootdir", str(rootdir), "-q", "-p", "no:cacheprovider",
            "-p", "no:xdist", "--sol-no-save", "--sol-baseline=none", "--sol-gate=off", f"--sol-device={device}"]
    if profile:
        args.append(f"--sol-profile={profile}")
    return args


def profile(nodeid: str, test: str, name: str, rootdir: Path, device: str, profile_option: str | None,
            run: Callable[..., Any] = subprocess.run) -> DramTraffic:
    """Run the child under ncu and return what it measured; raises NcuUnavailable or NcuFailed."""
    ncu = executable()
    if ncu is None:
        where = f"${NCU_VARIABLE}={os.environ[NCU_VARIABLE]}" if os.environ.get(NCU_VARIABLE) else "PATH"
        raise NcuUnavailable(f"ncu (Nsight Compute's CLI) is not on {where}: install Nsight Compute or put its "
                             "folder on PATH; measured bytes are left out")
    with tempfile.TemporaryDirectory(prefix="solgate-ncu-") as folder:
        log = Path(folder) / "ncu.csv"
        env = {**os.environ, CHILD_VARIABLE: json.dumps([test, name])}
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


def parse_csv(text: str) -> DramTraffic:
    """The sums of the three metrics over every kernel in ncu's CSV (details or raw page)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]  # "==PROF==" lines and app output are not CSV
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise NcuFailed("ncu profiled no kernel: the measurement's call launched none inside the profiler range, "
                        "or the profiled test did not reach it")
    header = rows[0]
    if "Metric Name" in header:
        return _details_page(header, rows[1:])
    return _raw_page(header, rows[1:])


def _details_page(header: list[str], rows: list[list[str]]) -> DramTraffic:
    at = {column: header.index(column) for column in ("ID", "Metric Name", "Metric Unit", "Metric Value")}
    sums = dict.fromkeys(METRICS, 0.0)
    kernels = set()
    for row in rows:
        if len(row) < len(header):
            continue
        metric = row[at["Metric Name"]]
        value = _number(row[at["Metric Value"]])
        if metric in sums and value is not None:
            sums[metric] += value * _scale(row[at["Metric Unit"]])
            kernels.add(row[at["ID"]])
    if not kernels:
        raise NcuFailed("ncu's report names none of " + ", ".join(METRICS))
    return DramTraffic(sums[READ], sums[WRITE], sums[DURATION], len(kernels))


def _raw_page(header: list[str], rows: list[list[str]]) -> DramTraffic:
    if not all(metric in header for metric in METRICS):
        raise NcuFailed("ncu's report names none of " + ", ".join(m for m in METRICS if m not in header))
    columns = {metric: header.index(metric) for metric in METRICS}
    units = rows[0] if rows and _number(rows[0][columns[READ]]) is None else None
    sums = dict.fromkeys(METRICS, 0.0)
    kernels = 0
    for row in rows[1:] if units else rows:
        values = {metric: _number(row[i]) for metric, i in columns.items()}
        if values[READ] is None:
            continue
        kernels += 1
        for metric, value in values.items():
            sums[metric] += (value or 0.0) * (_scale(units[columns[metric]]) if units else 1.0)
    if not kernels:
        raise NcuFailed("ncu profiled no kernel")
    return DramTraffic(sums[READ], sums[WRITE], sums[DURATION], kernels)
