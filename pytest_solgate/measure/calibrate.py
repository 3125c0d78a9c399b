"""Measure: ceilings measured on this machine (``solgate calibrate``), cached under ``.solgate/``.

A measured ceiling is what this machine reaches, so no honest kernel may read above it (docs/measurement.md):
memory bandwidth is the best of several access patterns (a
read-only reduction, two reads and a write, a copy; on a CPU also STREAM's triad), and
compute the best of the library's tuned matmuls per precision (torch.mm: cuBLAS on a GPU) over
more than one size. A copy alone was not enough: on an H200 it measured 4220 GB/s, and a Triton
vector add (two reads, one write) then read SOL 1.028 against it (issue 35). The profile says which
pattern and which size won.

CPUs have no datasheet ceiling a kernel can reach, so a CPU profile is always measured, over
buffers several times the last-level cache. On a GPU, calibration measures next to the datasheet
profile, and keeps the datasheet's figure for a precision it does not measure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol, Sequence, TypedDict

from pytest_solgate.declare.profiles import CacheLevel, DeviceFacts, HardwareProfile, load_profile, profile_to_toml
from pytest_solgate.measure import contention, sampling, telemetry
from pytest_solgate.measure.backends import CpuBackend, CudaBackend
from pytest_solgate.measure.devices import MIB, cpu_data_caches, last_level_cache_bytes
from pytest_solgate.measure.stopping import Stop
from pytest_solgate.support import atomic, stats
from pytest_solgate.support.atomic import ReportWriteError
from pytest_solgate.support.errors import ProfileError
from pytest_solgate.support.locations import user_cache_dir, user_cache_setting
from pytest_solgate.support.settings import SamplingSettings

if TYPE_CHECKING:  # torch is imported lazily, when a calibration runs
    import torch as torch_types

    from pytest_solgate.measure.capabilities import Backend
    from pytest_solgate.measure.step_profile import StepProfile

# The torch module, handed in by a caller that imported it (lazily): a module object, whose
# attributes mypy reads as Any (``ModuleType.__getattr__``).
Torch = ModuleType
CpuFigures = tuple[float, dict[str, float], dict[str, float]]  # GB/s, GB/s per pattern, TFLOP/s per precision
CpuCalibration = tuple[float, dict[str, float], dict[str, float], dict[str, float]]  # ... and each figure's spread
Fingerprint = Mapping[str, object]  # a CPU fingerprint: this process's (CpuFingerprint) or one read back from JSON


class CpuFingerprint(TypedDict):
    """What a CPU profile's id is made of (cpu_fingerprint)."""

    cpu: str
    cores: int | None
    threads: int
    torch: str
    python: str
    machine: str


class Work(Protocol):
    """A measurement's work: a kernel's declared work or a step operator's counted work."""

    @property
    def bytes(self) -> float: ...

    @property
    def flops(self) -> Mapping[str, float]: ...


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_fingerprint(torch: Torch) -> CpuFingerprint:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def fingerprint_key(fingerprint: Fingerprint) -> str:
    text = "|".join(f"{k}={fingerprint[k]}" for k in sorted(fingerprint))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# A CPU ceiling is the rate this machine sustains when it is not disturbed. A shared VM runs in
# phases (1024^3 fp32 matmuls here stepped between about 190 and 100 GFLOP/s from one second to
# the next), so the best single call is an outlier and a median lands in whichever phase it
# happens to meet, below what a kernel reaches in a good phase (torch adds then read SOL 1.33).
# The 90th percentile of the rate over many calls is what the machine reaches, reproducibly.
RATE_QUANTILE = 0.9
SECONDS_PER_FIGURE = 0.4
MIN_CALLS = 5


@dataclass(frozen=True)
class ForSeconds:
    """A calibration's stopping rule: sample for ``seconds`` (and at least MIN_CALLS samples), since
    its figure is a quantile over everything that time gave, not a median brought to a noise target."""

    seconds: float

    def decide(self, samples: Sequence[float], elapsed: float) -> Stop | None:
        return Stop(noisy=False) if len(samples) >= MIN_CALLS and elapsed >= self.seconds else None


def _sustained_rate(fn: Callable[[], object], work: float, seconds: float = SECONDS_PER_FIGURE,
                    backend: CpuBackend | None = None) -> float:
    """The RATE_QUANTILE quantile of ``work`` per second over calls of ``fn`` for ``seconds``, timed
    as a kernel's CPU measurement is: the tests' sampling loop (sampling.take_timing, its warm-up,
    its timer and its batching of short calls) on the CPU backend (``backend``: an unflushed one
    unless given)."""
    settings = SamplingSettings(min_time=seconds, max_time=seconds, noise=1.0, min_samples=MIN_CALLS, warmup_time=0.0)
    timing = sampling.take_timing(fn, backend or CpuBackend(), settings, rule=ForSeconds(seconds))
    return stats.quantile([work / max(sample, 1e-12) for sample in timing.samples], RATE_QUANTILE)


def _streaming_bandwidth(torch: Torch, n: int, seconds: float = SECONDS_PER_FIGURE) -> dict[str, float]:
    """GB/s of four streaming patterns over float32 buffers of n elements (bytes read + written):
    a read-only reduction, a copy, and two reads and a write twice (STREAM's add and triad). STREAM's
    scale moves what the copy moves, and each pattern costs seconds over buffers of 4x a large L3."""
    a, b, c = torch.rand(n), torch.rand(n), torch.rand(n)
    patterns = {
        "read": (lambda: torch.sum(a), 1),  # a read-only reduction
        "copy": (lambda: b.copy_(a), 2),
        "add": (lambda: torch.add(a, b, out=c), 3),
        "triad": (lambda: torch.add(b, c, alpha=3.0, out=a), 3),
    }
    return {name: _sustained_rate(fn, arrays * n * 4, seconds) / 1e9 for name, (fn, arrays) in patterns.items()}


def _matmul_tflops(torch: Torch, dtype: torch_types.dtype, size: int, seconds: float = SECONDS_PER_FIGURE) -> float:
    x = torch.rand(size, size, dtype=dtype)
    y = torch.rand(size, size, dtype=dtype)
    return _sustained_rate(lambda: torch.mm(x, y), 2 * size**3, seconds) / 1e12


def measure_cpu(torch: Torch, seconds: float = SECONDS_PER_FIGURE) -> CpuFigures:
    """(best bandwidth GB/s, GB/s per pattern, TFLOP/s per precision) on this CPU, once."""
    llc = last_level_cache_bytes()
    n = max(4 * llc, 64 * MIB) // 4  # float32 elements per buffer: each buffer >= 4x the LLC
    per_pattern = _streaming_bandwidth(torch, n, seconds)
    peaks = {"fp32": _matmul_tflops(torch, torch.float32, 1024, seconds),
             "fp64": _matmul_tflops(torch, torch.float64, 768, seconds)}
    return max(per_pattern.values()), per_pattern, peaks


def best_pattern(per_pattern: dict[str, float]) -> str:
    """The access pattern whose rate is the ceiling ("copy" where the figures do not say)."""
    return max(per_pattern, key=per_pattern.__getitem__) if per_pattern else "copy"


CPU_REPETITIONS = 3


def spread(values: list[float]) -> float:
    centre = stats.median(values)
    return (max(values) - min(values)) / centre if centre > 0 else float("inf")


def repeated_cpu_calibration(
    torch: Torch, repetitions: int = CPU_REPETITIONS, measure: Callable[[Torch], CpuFigures] = measure_cpu
) -> CpuCalibration:
    """The best of ``repetitions`` full calibrations, figure by figure, with each figure's spread.

    A ceiling is what the machine can do, so it is the best sustained rate seen (as STREAM reports
    the best rate of each kernel), not a typical one: a kernel measured in one of the VM's fast
    phases must not read above it. The spread is kept in the profile's notes, as information.
    """
    runs = [measure(torch) for _ in range(repetitions)]
    bandwidths = [run[0] for run in runs]
    per_pattern = {k: max(run[1][k] for run in runs) for k in runs[0][1]}
    peaks = {k: max(run[2][k] for run in runs) for k in runs[0][2]}
    spreads = {"bandwidth": spread(bandwidths), **{k: spread([run[2][k] for run in runs]) for k in runs[0][2]}}
    return max(bandwidths), per_pattern, peaks, spreads


# The cache levels' bandwidth (the cache-aware roofline's roofs, scored against by a whole step's
# operators: score/step_breakdown.py): the same streaming patterns over working sets that fit in each level,
# a quarter and a half of it (a torch call on a few KiB is mostly dispatch: the larger working set
# is what a level can give), each briefly, best of CPU_REPETITIONS.
CACHE_SHARES = (0.25, 0.5)
CACHE_SECONDS = 0.05


def level_bandwidth(torch: Torch, size_bytes: int, seconds: float = CACHE_SECONDS) -> float:
    """GB/s (bytes read plus written) of the best streaming pattern over working sets that fit in a
    cache of ``size_bytes``."""
    best = 0.0
    for share in CACHE_SHARES:
        n = max(int(size_bytes * share) // 12, 256)  # float32 elements: three buffers fill the share
        best = max(best, *_streaming_bandwidth(torch, n, seconds).values())
    return best


def measure_cpu_caches(torch: Torch, repetitions: int = CPU_REPETITIONS,
                       caches: dict[str, int] | None = None) -> tuple[CacheLevel, ...]:
    """This CPU's data caches (sysfs) with the bandwidth each reaches, best of ``repetitions``."""
    sizes = cpu_data_caches() if caches is None else caches
    return tuple(
        CacheLevel(name=name, size_mb=size / 1e6,
                   bandwidth_gbps=max(level_bandwidth(torch, size) for _ in range(repetitions)),
                   source=f"measured by pytest-solgate: streaming patterns over {', '.join(f'{s:.0%}' for s in CACHE_SHARES)}"
                          f" of the level, best of {repetitions}")
        for name, size in sizes.items())


def with_caches(profile: HardwareProfile, caches: tuple[CacheLevel, ...]) -> HardwareProfile:
    """``profile`` with its cache levels' bandwidths raised to ``caches``' where higher (new levels
    added); the same object when nothing changed. Like the other ceilings, they only rise."""
    known = {level.name: level for level in profile.caches}
    merged = {**known}
    for level in caches:
        old = known.get(level.name)
        if old is None or level.bandwidth_gbps > old.bandwidth_gbps:
            merged[level.name] = level
    if merged == known:
        return profile
    return dataclasses.replace(profile, caches=tuple(sorted(merged.values(), key=lambda level: level.size_mb)))


def cpu_caches(profile: HardwareProfile, announce: Callable[[str], None] = print,
               measure: Callable[[Torch], tuple[CacheLevel, ...]] | None = None,
               measured: dict[str, tuple[CacheLevel, ...]] | None = None) -> HardwareProfile:
    """``profile`` with this CPU's cache levels, for a whole step's cache-aware floors. A calibration
    measures them with the ceilings and caches them (cpu_profile); a profile without them (cached
    before levels were, or handed in by a test) gets them measured here, once a process
    (``measured``: the levels measured so far, by profile id), and never written: scoring a step
    does not write the user's cache. Only steps ask: a kernel's floor is DRAM's (sol.measure flushes
    the cache). A profile that is not this CPU's calibration (a file passed with --sol-profile) is
    returned as it is."""
    import torch

    if profile.kind != "cpu" or profile.caches or profile.ceilings != "measured":
        return profile
    if profile.id != f"cpu-{fingerprint_key(cpu_fingerprint(torch))}":
        return profile
    measured = MEASURED_LEVELS if measured is None else measured
    if profile.id not in measured:
        announce("solgate: measuring this CPU's cache bandwidths for this session's steps (a few seconds; "
                 "`solgate calibrate` measures and caches them) ...")
        measured[profile.id] = (measure or measure_cpu_caches)(torch)
    return with_caches(profile, measured[profile.id])


def step_ceilings(profile: HardwareProfile, measured: StepProfile, announce: Callable[[str], None] = print) -> HardwareProfile:
    """The ceilings a step's operators are scored against: this CPU's with its cache levels
    (cpu_caches), and where they were measured while the machine was busy, their compute peaks
    raised to what the step's operators reached (``measured``: a step_profile.StepProfile), as a
    kernel's timing raises them (raised_to_reach), so that no operator reads above-sol against
    them. Only the peaks: an operator's bytes may come from a cache level, not from DRAM."""
    profile = cpu_caches(profile, announce)
    if not profile.busy:
        return profile
    for key, work in measured.work.items():
        times = [run.operators[key] for run in measured.runs if run.operators.get(key, 0.0) > 0]
        if times and work.flops:
            profile = raised_to_reach(profile, dataclasses.replace(work, bytes=0.0), min(times))
    return profile


# The cache levels measured in this process for a profile that came without them (cpu_caches).
MEASURED_LEVELS: dict[str, tuple[CacheLevel, ...]] = {}


# Each session that finds a cached CPU profile measures the streaming patterns and matmuls once
# more, briefly, before its first measurement: a ceiling cached in one of the VM's slow phases
# (its bandwidth moves between about 32 and 55 GB/s from process to process) is raised to what
# the machine does now (when it does more than RAISE_MARGIN better), so the session's kernels are
# scored against a rate measured in their phase.
RECHECK_SECONDS = 0.25


def quick_cpu_check(torch: Torch) -> CpuFigures:
    """One short repetition of the calibration (about 2 s): (GB/s, GB/s per pattern, TFLOP/s)."""
    return measure_cpu(torch, RECHECK_SECONDS)


# A session's re-check raises a cached ceiling only when it beats it by more than this. The
# re-check's own figures (0.25 s each) move by a few percent from one process to the next: 8 fresh
# processes on the development VM read 0.94-1.04 of the cached ceilings, and raising on any gain
# raised one figure by 0.5-1 % in nearly every session, gave the profile a new ceilings_id each
# time, and so compared every run's baselines on time (issue 44). 5 % is what an honest kernel may
# read above SOL 1.0 before it fails (judge/verdict.py, ABOVE_SOL_LIMIT): a ceiling within it of
# what the machine does now keeps such a kernel under the limit.
RAISE_MARGIN = 0.05


def raise_ceilings(profile: HardwareProfile, bandwidth: float, peaks: dict[str, float],
                   margin: float = 0.0) -> HardwareProfile:
    """``profile`` with every ceiling raised to the rate just seen where that is more than
    ``margin`` higher; the same object when nothing rose. Ceilings only rise: a slow phase never
    lowers what the machine did."""

    def beaten(new: float, old: float) -> bool:
        return new > old * (1 + margin)

    raised_bandwidth = bandwidth if beaten(bandwidth, profile.memory_bandwidth_gbps) else profile.memory_bandwidth_gbps
    raised_peaks = {k: peaks[k] if beaten(peaks.get(k, 0.0), v) else v for k, v in profile.peak_tflops.items()}
    if raised_bandwidth == profile.memory_bandwidth_gbps and raised_peaks == dict(profile.peak_tflops):
        return profile
    rose = [f"bandwidth {profile.memory_bandwidth_gbps:.1f} -> {raised_bandwidth:.1f} GB/s"] * (
        raised_bandwidth > profile.memory_bandwidth_gbps
    ) + [f"{k} {profile.peak_tflops[k] * 1e3:.1f} -> {v * 1e3:.1f} GFLOP/s" for k, v in raised_peaks.items()
         if v > profile.peak_tflops[k]]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return dataclasses.replace(
        profile, memory_bandwidth_gbps=raised_bandwidth, peak_tflops=raised_peaks, measured_at=now,
        notes=f"{profile.notes}; raised {now}: {', '.join(rose)}",
    )


def cpu_profile_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "profiles" / f"cpu-{key}.toml"


def cached_profile(path: Path) -> HardwareProfile | None:
    """A calibrated profile from the cache, or None when there is none or it is damaged."""
    if not path.is_file():
        return None
    try:
        return load_profile(path)
    except ProfileError:
        return None  # a damaged cache entry is re-measured, never trusted


def _shared_calibration(cache_dir: Path, key: str) -> tuple[Path, HardwareProfile | None]:
    """This machine's CPU calibration, in the per-user cache every clone shares (one id, one set
    of ceilings: two clones once held 82 and 75 GB/s under one id), with a clone's own earlier
    calibration (``cache_dir``, its .solgate) merged in: its ceilings where they are higher, as a
    re-check would raise them. Same id, so the histories recorded under it keep their baselines."""
    path = cpu_profile_path(user_cache_dir(), key)
    shared = cached_profile(path)
    local_path = cpu_profile_path(cache_dir, key)
    local = cached_profile(local_path) if local_path.resolve() != path.resolve() else None
    if local is None:
        return path, shared
    merged = local if shared is None else raise_ceilings(shared, local.memory_bandwidth_gbps, dict(local.peak_tflops))
    if merged is not shared:
        merged = _cache(path, merged, lambda text: None)  # the clone's own copy still holds them
    return path, merged


# A calibration's repetitions that disagree by more than this ((max - min) / median of a figure)
# were disturbed, whatever the pressure read: on this VM quiet calibrations disagreed by up to 61 %
# (its bandwidth moves between levels from process to process), one taken beside a busy build by 267 %.
MAX_CPU_SPREAD = 1.0
# The note on a measurement scored against ceilings measured while the machine was busy (its
# record, and the run's facts: record/runinfo.py).
BUSY_NOTE = "scored against ceilings measured while the machine was busy"
BUSY_CEILINGS = "measured while busy"  # the run's ceilings, in its header, when any measurement was


def busy_reason(reading: contention.Busy, spreads: dict[str, float]) -> str:
    """Why a calibration was disturbed ('' when it was not): the CPU pressure that other processes
    put on it (a contention.Busy) and the figures whose repetitions disagreed beyond MAX_CPU_SPREAD."""
    reasons = [contention.busy_phrase(reading)] if reading.contended else []
    reasons += [f"{figure} spread {value:.0%} between repetitions" for figure, value in spreads.items()
                if value > MAX_CPU_SPREAD]
    return "; ".join(reasons)


def raised_to_reach(profile: HardwareProfile, work: Work, seconds: float) -> HardwareProfile:
    """Ceilings measured while the machine was busy (``profile.busy``) raised so that ``work``
    done in ``seconds`` reads SOL 1.0 at most: the bandwidth to what it moved, the peaks of its
    precisions by the factor its compute beat them by; the same object when nothing rose (and for
    quiet or datasheet ceilings, which a kernel that beats them is judged against: above-sol)."""
    if not profile.busy or seconds <= 0:
        return profile
    bandwidth = max(profile.memory_bandwidth_gbps, work.bytes / seconds / 1e9)
    compute_time = sum(f / profile.peak_flops(k) for k, f in work.flops.items() if f and k in profile.peak_tflops)
    factor = max(1.0, compute_time / seconds)
    peaks = {k: v * factor if work.flops.get(k) else v for k, v in profile.peak_tflops.items()}
    if bandwidth == profile.memory_bandwidth_gbps and factor == 1.0:
        return profile
    return raise_ceilings(profile, bandwidth, peaks)


def cpu_profile(
    cache_dir: Path,
    announce: Callable[[str], None] = print,
    calibration: Callable[[Torch], CpuCalibration] | None = None,
    recheck: Callable[[Torch], CpuFigures] | None = None,
    full: bool = False,
    readers: contention.Readers | None = None,
    caches: Callable[[Torch], tuple[CacheLevel, ...]] | None = None,
) -> HardwareProfile:
    """The measured CPU profile for this machine: calibrated once (about 10 s) and cached, then
    re-checked briefly in each session and raised when the machine does better than it says.
    ``full`` (``solgate calibrate``) re-checks with a whole calibration instead. A first
    calibration taken while the machine was busy (``readers``: the clocks and /proc it reads, the
    session's Platform.contention; this machine's unless given) serves this session only, as
    ``busy`` ceilings, and is not cached.

    A calibration measures the cache levels too (``caches``, measure_cpu_caches: a few seconds),
    for the steps' cache-aware floors; a session's re-check does not.

    ``calibration`` (torch -> figures, as ``repeated_cpu_calibration`` returns them), ``recheck``
    (as ``quick_cpu_check``) and ``caches`` exist so that tests can hand in figures; figures
    handed in come with no cache levels unless ``caches`` hands them in too."""
    levels = caches or (measure_cpu_caches if calibration is None else (lambda torch: ()))
    calibrate = calibration or repeated_cpu_calibration
    import torch

    fingerprint = cpu_fingerprint(torch)
    key = fingerprint_key(fingerprint)
    path, cached = _shared_calibration(cache_dir, key)
    if cached is not None:
        return _rechecked(cached, path, torch, calibrate if full else None, recheck or quick_cpu_check, levels,
                          announce)
    announce(f"solgate: measuring this CPU's ceilings once, best of {CPU_REPETITIONS} repetitions (cached in {path}) ...")
    readers = readers or contention.Readers()  # this machine's clocks and /proc
    started, before = time.perf_counter(), readers.snapshot()
    calibrated = calibrate(torch)
    measured_levels = levels(torch)
    busy = busy_reason(contention.between(before, readers.snapshot()), calibrated[3])
    profile = _measured_cpu_profile(fingerprint, key, calibrated, measured_levels, busy, time.perf_counter() - started)
    if busy:
        # A busy machine's rates are lower bounds: cached, they would be the machine's ceilings
        # for every later session, and an honest kernel in a quiet moment would read above-sol.
        announce(f"solgate: this CPU's ceilings were measured while the machine was busy ({busy}): they serve this "
                 "session only and are not cached; a measurement that beats one raises it before it is scored "
                 "(never above-sol against them). Calibrate on a quiet machine: solgate calibrate")
        return profile
    return _cache(path, profile, announce)


def _rechecked(cached: HardwareProfile, path: Path, torch: Torch, calibrate: Callable[[Torch], CpuCalibration] | None,
               recheck: Callable[[Torch], CpuFigures], levels: Callable[[Torch], tuple[CacheLevel, ...]],
               announce: Callable[[str], None]) -> HardwareProfile:
    """The cached profile raised to what the machine does now: by a whole calibration with its cache
    levels (``calibrate``, for ``solgate calibrate``), else by a session's brief ``recheck``; the
    raised ceilings cached."""
    full = calibrate is not None
    if calibrate is not None:
        announce(f"solgate: measuring this CPU's ceilings, best of {CPU_REPETITIONS} repetitions; they only rise ({path}) ...")
    figures = calibrate(torch) if calibrate is not None else recheck(torch)
    # `solgate calibrate` keeps whatever it measured higher; a session's brief re-check only
    # what is beyond its own noise, so that a session that changes nothing keeps the ceilings.
    # A re-check under load only reads lower: it can raise nothing it should not.
    raised = raise_ceilings(cached, figures[0], figures[2], 0.0 if full else RAISE_MARGIN)
    if full:
        raised = with_caches(raised, levels(torch))
    if raised is not cached:
        announce(f"solgate: this CPU ran faster than its cached ceilings; raised them ({path})")
        raised = _cache(path, raised, announce)
    return raised


def _measured_cpu_profile(fingerprint: Fingerprint, key: str, calibrated: CpuCalibration,
                          levels: Sequence[CacheLevel], busy: str, seconds: float) -> HardwareProfile:
    """The profile a CPU calibration of ``seconds`` gives: its ceilings, cache levels and where
    they came from (host, best pattern, spreads, fingerprint)."""
    bandwidth, per_pattern, peaks, spreads = calibrated
    spread_text = ", ".join(f"{k} {v:.1%}" for k, v in spreads.items())
    return HardwareProfile(
        id=f"cpu-{key}",
        name=f"{fingerprint['cpu']} ({fingerprint['cores']} cores, {fingerprint['threads']} torch threads)",
        kind="cpu",
        memory_bandwidth_gbps=bandwidth,
        peak_tflops=peaks,
        source=f"measured by pytest-solgate on {socket.gethostname()} in {seconds:.1f} s; "
        f"bandwidth from the {best_pattern(per_pattern)} pattern",
        notes=f"best of {CPU_REPETITIONS} repetitions, spread (max-min)/median: {spread_text}; "
        + "streaming GB/s: " + ", ".join(f"{k} {v:.1f}" for k, v in per_pattern.items())
        + f" (best: {best_pattern(per_pattern)})"
        + "; fingerprint: " + ", ".join(f"{k}={v}" for k, v in sorted(fingerprint.items())),
        ceilings="measured",
        measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        busy=busy,
        caches=tuple(sorted(levels, key=lambda level: level.size_mb)),
    )


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``'s lock file beside it, held while a session reads the
    cached profile and writes its own back: xdist workers, two projects and two CI jobs on one
    runner share the per-user cache, and without it one session's write dropped what another had
    just written (its raised ceilings, its cache levels). An ``OSError`` when it cannot be taken."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def merged_profile(on_disk: HardwareProfile | None, mine: HardwareProfile) -> HardwareProfile:
    """What a session writes over what the cache holds now (pure): one set of ceilings of one CPU,
    every one the higher of the two (ceilings only rise), and every cache level either measured;
    ``on_disk`` itself when ``mine`` adds nothing to it, ``mine`` when the cache holds no profile of its id."""
    if on_disk is None or on_disk.id != mine.id:
        return mine
    raised = raise_ceilings(on_disk, mine.memory_bandwidth_gbps, dict(mine.peak_tflops))
    missing = {k: v for k, v in mine.peak_tflops.items() if k not in on_disk.peak_tflops}
    if missing:
        raised = dataclasses.replace(raised, peak_tflops={**raised.peak_tflops, **missing})
    return with_caches(raised, mine.caches)


def _cache(path: Path, profile: HardwareProfile, announce: Callable[[str], None]) -> HardwareProfile:
    """Cache a CPU calibration in the per-user cache, merged under the cache's lock with what
    another session wrote since this one read it (merged_profile); the profile the cache holds
    now. A cache that cannot be written (its variable names a file, a read-only folder) costs a
    calibration per session, never a test."""
    try:
        with cache_lock(path):
            on_disk = cached_profile(path)
            merged = merged_profile(on_disk, profile)
            if merged is not on_disk:
                write_profile(path, merged)
        return merged
    except (ReportWriteError, OSError) as exc:
        folder, variable = user_cache_setting()
        setting = f"${variable} ({folder})" if variable != "HOME" else f"the default cache {folder}"
        why = exc if isinstance(exc, ReportWriteError) else f"cannot lock {path}: {exc.strerror or exc}"
        announce(f"solgate: this CPU's calibration is not cached: {why}. {setting} must be a folder this user can "
                 f"write; until it is, every session measures the ceilings again (set $SOLGATE_CACHE_DIR to one)")
        return profile


# What a CPU profile's id is made of that the user sets: a change of one splits the history, since
# baselines are kept per profile id (see say_id_change).
USER_SET = {
    "threads": "torch.set_num_threads({old}) (or OMP_NUM_THREADS={old}) before the first measurement, as before",
    "torch": "measure with torch {old}, as before",
    "python": "measure with Python {old}, as before",
}
# The id a project's sessions last ran under, in its state folder (.solgate, gitinfo.state_dir):
# per project, not per user. In the per-user cache it was one id for every project and every
# command on the machine, so a new project pinned to one thread was told "threads 2 -> 1" because
# another project ran at torch's default (issue 44).
LAST_CPU_FILE = "last-cpu-profile.json"


def same_machine(before: Fingerprint, now: Fingerprint) -> bool:
    """Whether two fingerprints differ at most in what the user sets (USER_SET)."""
    return not any(before.get(k) != now.get(k) for k in now if k not in USER_SET)


def id_change(before: Fingerprint, now: Fingerprint) -> dict[str, tuple[object, object]]:
    """What the user changed between two fingerprints of one machine ({field: (before, now)}):
    empty when nothing did, or when they belong to different machines (another CPU, core count)."""
    if not same_machine(before, now):
        return {}
    return {k: (before.get(k), now[k]) for k in USER_SET if k in now and before.get(k) != now[k]}


def id_change_message(before_id: str, now_id: str, changed: dict[str, tuple[object, object]]) -> str:
    what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
    keep = "; ".join(USER_SET[k].format(old=old) for k, (old, _) in changed.items())
    return (f"solgate: this CPU's profile id is now {now_id}, was {before_id} ({what}): baselines are kept per "
            f"profile id, so this history starts again under {now_id}. To keep {before_id}: {keep}")


def last_session_fingerprint(state_dir: Path) -> dict[str, object] | None:
    """The CPU fingerprint this project's sessions last ran under, or None (none ran yet, or the
    file is damaged: never an error)."""
    import json

    try:
        fingerprint = json.loads((state_dir / LAST_CPU_FILE).read_text())["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return fingerprint if isinstance(fingerprint, dict) else None


def say_id_change(state_dir: Path, announce: Callable[[str], None], fingerprint: Fingerprint | None = None) -> None:
    """Announce a CPU profile id that differs from the one this project's sessions used last on this
    machine for a reason the user controls (torch.set_num_threads in a conftest, a torch upgrade),
    and remember this one in the project's ``state_dir``. Sessions call it, nothing else: what
    another project, `solgate detect` or `solgate calibrate` ran under is no change to this
    project's history. ``fingerprint``: this process's (cpu_fingerprint), unless given."""
    import json

    if fingerprint is None:
        import torch

        fingerprint = cpu_fingerprint(torch)
    now_id = f"cpu-{fingerprint_key(fingerprint)}"
    before = last_session_fingerprint(state_dir)
    if before is not None and fingerprint_key(before) == fingerprint_key(fingerprint):
        return
    changed = id_change(before, fingerprint) if before is not None else {}
    if before is not None and changed:
        announce(id_change_message(f"cpu-{fingerprint_key(before)}", now_id, changed))
    try:
        atomic.write_text(state_dir / LAST_CPU_FILE, json.dumps({"id": now_id, "fingerprint": fingerprint}),
                          "last CPU profile id")
    except ReportWriteError:
        pass  # an unwritable state folder is said where the run is recorded


@dataclass(frozen=True)
class CpuIds:
    """Which CPU profile id a project's tests use, for `solgate detect`, `profiles` and `calibrate`,
    which run without the tests' conftest. The id holds torch's thread count, which a conftest may
    set (the quickstart's pins one thread): the tests' id is the one at the thread count their
    sessions last ran with on this machine, else (no session yet) this process's."""

    id: str
    threads: int  # the torch threads of ``id``
    calibration: HardwareProfile | None  # ``id``'s cached calibration, when there is one
    from_tests: bool  # ``threads`` is what this project's sessions last ran with on this machine
    here_id: str  # the id at this process's threads (torch's default, without the tests' conftest)
    here_threads: int
    one_thread_id: str  # the id at one thread, which the quickstart's conftest pins


def cpu_ids(state_dir: Path) -> CpuIds:
    """This CPU's ids as ``CpuIds`` says (from fingerprints: nothing is measured)."""
    import torch

    now = cpu_fingerprint(torch)
    before = last_session_fingerprint(state_dir)
    tests_threads = before.get("threads") if before is not None and same_machine(before, now) else None
    from_tests = isinstance(tests_threads, int)
    threads = tests_threads if isinstance(tests_threads, int) else now["threads"]
    key = fingerprint_key({**now, "threads": threads})
    return CpuIds(
        id=f"cpu-{key}", threads=threads, calibration=_shared_calibration(state_dir, key)[1], from_tests=from_tests,
        here_id=f"cpu-{fingerprint_key(now)}", here_threads=now["threads"],
        one_thread_id=f"cpu-{fingerprint_key({**now, 'threads': 1})}",
    )


def write_profile(path: Path, profile: HardwareProfile) -> None:
    """Atomic: a crash leaves the old file or the new one, never half of one."""
    atomic.write_text(path, profile_to_toml(profile), "calibrated profile")


# --- GPU -----------------------------------------------------------------------------------------


def gpu_measured_path(cache_dir: Path, datasheet_id: str, device_key: str) -> Path:
    return cache_dir / "profiles" / f"{datasheet_id}-measured-{device_key}.toml"


def device_key(index: int) -> str:
    """A name for one physical GPU that survives CUDA_VISIBLE_DEVICES renumbering: its UUID."""
    import torch

    from pytest_solgate.measure.devices import cuda_uuid

    return cuda_uuid(torch, index) or f"index{index}"


def measured_id_suffix(device_key: str) -> str:
    """A short, id-safe form of a device's UUID ('GPU-1a2b3c4d-...' -> '1a2b3c4d')."""
    text = "".join(c for c in device_key.lower().removeprefix("gpu-") if c.isalnum())
    return text[:8] or "unknown"


def calibrate_gpu(
    cache_dir: Path,
    index: int,
    datasheet: HardwareProfile,
    device_name: str,
    l2_bytes: int | None,
    announce: Callable[[str], None] = print,
    key: str | None = None,
    profile_of: Callable[..., tuple[HardwareProfile, list[str]]] | None = None,
) -> tuple[HardwareProfile, Path | None]:
    """Measure GPU ``index`` and cache the profile per device under ``cache_dir``; the path is
    None when the calibration was not fit to cache (``announce`` then says why). ``key`` (the
    device's UUID, else read) and ``profile_of`` (``gpu_profile``'s arguments -> its result) are
    passed in by tests, which calibrate CPU tensors with a timer of their own."""
    import torch

    key = key or device_key(index)
    # Inside the device's scope: events and work then share cuda:index's current stream (recorded
    # on cuda:0 while the work ran on cuda:N, the ceilings came out far too high).
    with torch.cuda.device(index):
        profile, faults = (profile_of or gpu_profile)(datasheet, torch.device("cuda", index), key, device_name, l2_bytes)
    if faults:
        announce(
            f"solgate: {device_name}'s calibration is not fit to cache ({'; '.join(faults)}): the GPU is busy, hot "
            "or its clocks move; its ceilings serve this session only and are not cached. Calibrate on a quiet, "
            "cool GPU: solgate calibrate"
        )
        return profile, None
    path = gpu_measured_path(cache_dir, datasheet.id, key)
    write_profile(path, profile)
    return profile, path


# GPU ceilings are measured the way tests are: the same sampling loop and CUDA backend (L2 flush,
# the stream held while the calls are queued, throttled rounds taken again), for long enough to
# reach the sustained clocks and power state that tests run in, not a burst of a dozen
# host-synchronized calls; and, as on the CPU, GPU_REPETITIONS times over, so that a figure
# measured while the GPU was shared, hot or changing clocks shows as a spread and is not cached.
CALIBRATION_SAMPLING = SamplingSettings(min_time=0.5, max_time=3.0, noise=0.01, min_samples=10, warmup_time=0.2)
GPU_REPETITIONS = 3
# A GPU's passes whose spread ((max - min) / median) exceeds this disagree: the device was shared,
# hot or its clocks moved, and such ceilings serve this session only, never cached. (A dedicated
# GPU holds its clocks; the CPU path keeps the best rate instead, as a shared VM's cannot.)
MAX_GPU_SPREAD = 0.10


def sampling_timer(backend: Backend, settings: SamplingSettings = CALIBRATION_SAMPLING) -> "Timer":
    """A calibration's timer: the tests' sampling loop (take_timing) on ``backend`` (the CUDA
    backend on a GPU), with a throttled round taken again."""
    return lambda fn: sampling.take_timing(fn, backend, settings, telemetry.is_throttled)


Timer = Callable[[Callable[[], object]], sampling.Timing]  # fn -> the Timing of its calls


@dataclass(frozen=True)
class Figure:
    """One calibrated ceiling over its repetitions."""

    rate: float  # GB/s or TFLOP/s: the median over the repetitions
    spread: float  # (max - min) / median over the repetitions
    clock_mhz: float | None  # the mean SM clock the samples ran at, when NVML read one
    faults: tuple[str, ...] = ()  # "noisy", "throttled (...)": why this figure must not be cached


def _pattern_bandwidth(torch: Torch, device: torch_types.device, pattern: str, size: int, timer: Timer
                       ) -> tuple[float, sampling.Timing]:
    """GB/s (bytes read plus written) of one access pattern over float32 buffers of ``size`` bytes each."""
    src = torch.empty(size // 4, dtype=torch.float32, device=device).uniform_()
    if pattern == "read":  # a read-only reduction: one buffer read, one number written
        timing = timer(lambda: torch.sum(src))
        return src.numel() * 4 / timing.seconds / 1e9, timing
    dst = torch.empty_like(src)
    if pattern == "copy":
        timing = timer(lambda: dst.copy_(src))
        return 2 * src.numel() * 4 / timing.seconds / 1e9, timing
    other = torch.empty_like(src).uniform_()  # "add": two reads and a write, as a vector add
    timing = timer(lambda: torch.add(src, other, out=dst))
    return 3 * src.numel() * 4 / timing.seconds / 1e9, timing


# The access patterns of the bandwidth ceiling, the copy first (the one pattern measured before
# issue 35): which one is fastest depends on the device (on an H200 a two-reads-one-write kernel
# beat the copy by 3 %), so all are measured and the best is the ceiling.
BANDWIDTH_PATTERNS = ("copy", "read", "add")
PATTERN_WORDS = {"copy": "copy", "read": "read-only reduction", "add": "two reads and a write"}


def _mm_tflops(torch: Torch, device: torch_types.device, dtype: torch_types.dtype, size: int, timer: Timer
               ) -> tuple[float, sampling.Timing]:
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    timing = timer(lambda: torch.mm(a, b))
    return 2 * size**3 / timing.seconds / 1e12, timing


def _fp8_tflops(torch: Torch, device: torch_types.device, size: int, timer: Timer) -> tuple[float, sampling.Timing]:
    a = torch.randn(size, size, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(size, size, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.tensor(1.0, device=device)
    # Fast accumulation, as FP8 GEMMs in practice (and the datasheet's peak) use it.
    run = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)  # noqa: E731
    timing = timer(run)
    return 2 * size**3 / timing.seconds / 1e12, timing


MATMUL_CASES = (  # precision class, dtype name, TF32 allowed
    ("fp32", "float32", False),
    ("tf32_tensor", "float32", True),
    ("bf16_tensor", "bfloat16", False),
    ("fp16_tensor", "float16", False),
    ("fp64_tensor", "float64", False),
)
# Each precision's library matmul at two cube sizes, the larger first: a large GEMM can run at a
# lower sustained clock under the power cap (an H200 held 1355-1540 MHz under long bf16 GEMMs), a
# smaller one can miss the best tile shapes; the faster is the ceiling.
MATMUL_SIZE_DIVISORS = (1, 2)


def figure_key(figure: str, candidate: str) -> str:
    """One candidate of one ceiling in a calibration pass: "bandwidth:copy", "bf16_tensor:mm8192"."""
    return f"{figure}:{candidate}"


def measure_gpu(
    torch: Torch,
    device: torch_types.device,
    datasheet: HardwareProfile,
    l2_bytes: int | None,
    timer: Timer | None = None,
    matmul_size: int = 8192,
    copy_bytes: int | None = None,
) -> dict[str, tuple[float, sampling.Timing]]:
    """One pass over one GPU: ``{figure_key(ceiling, candidate): (rate, timing), ...}``, every
    bandwidth pattern (GB/s counting bytes read plus written) and every matmul size per precision
    (TFLOP/s); ``best_candidates`` reduces the passes to one figure per ceiling.

    ``timer``, ``matmul_size`` and ``copy_bytes`` exist so that the same code can be exercised on a
    CPU in tests; on a GPU the defaults are the CUDA backend, 8192^3 and 4096^3 matmuls and buffers
    far beyond L2.
    """
    timer = timer or sampling_timer(CudaBackend(torch, device, l2_bytes, None))
    if copy_bytes is None:
        free, _total = torch.cuda.mem_get_info(device)
        copy_bytes = min(max(16 * (l2_bytes or 64 * MIB), 1024 * MIB), free // 8)  # "add" holds three buffers
    figures = {figure_key("bandwidth", pattern): _pattern_bandwidth(torch, device, pattern, copy_bytes, timer)
               for pattern in BANDWIDTH_PATTERNS}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for precision, dtype_name, tf32 in MATMUL_CASES:
            if precision not in datasheet.peak_tflops:
                continue
            torch.backends.cuda.matmul.allow_tf32 = tf32
            dtype = getattr(torch, dtype_name)
            # Non-tensor fp32 and fp64 are an order of magnitude slower: smaller cubes suffice.
            largest = matmul_size // 2 if dtype_name in ("float32", "float64") and not tf32 else matmul_size
            for size in (largest // divisor for divisor in MATMUL_SIZE_DIVISORS):
                figures[figure_key(precision, f"mm{size}")] = _mm_tflops(torch, device, dtype, size, timer)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    if "fp8_tensor" in datasheet.peak_tflops and hasattr(torch, "_scaled_mm"):
        try:
            figures[figure_key("fp8_tensor", f"scaled_mm{matmul_size}")] = _fp8_tflops(torch, device, matmul_size, timer)
        except (RuntimeError, TypeError, NotImplementedError):
            pass  # fp8 matmul is not supported on this device or build: keep the other figures
    return figures


def repeated_figures(passes: list[dict[str, tuple[float, sampling.Timing]]]) -> dict[str, Figure]:
    """Each figure (each candidate of a ceiling) over the passes: the median rate, its spread, the
    mean SM clock of its samples and why it must not be cached (a noisy or throttled timing in any
    pass, a spread over 10 %)."""
    figures = {}
    for key in passes[0]:
        rates = [one[key][0] for one in passes if key in one]
        timings = [one[key][1] for one in passes if key in one]
        clocks = [t.sm_clock_mhz for t in timings if t.sm_clock_mhz]
        faults = []
        if any(t.noisy for t in timings):
            faults.append(f"{key} noisy")
        throttled = sorted({r for t in timings if t.throttled for r in telemetry.throttle_reasons(t.telemetry)})
        if any(t.throttled for t in timings):
            faults.append(f"{key} throttled ({', '.join(throttled) or 'SM clock under 75% of its default'})")
        figure_spread = spread(rates)
        if figure_spread > MAX_GPU_SPREAD:
            faults.append(f"{key} spread {figure_spread:.0%} > {MAX_GPU_SPREAD:.0%}")
        figures[key] = Figure(stats.median(rates), figure_spread, stats.mean(clocks) if clocks else None, tuple(faults))
    return figures


def best_candidates(figures: dict[str, Figure]) -> dict[str, tuple[str, Figure]]:
    """Each ceiling's best candidate: ``{ceiling: (candidate, figure)}`` (the highest median rate)."""
    best: dict[str, tuple[str, Figure]] = {}
    for key, figure in figures.items():
        ceiling, _, candidate = key.partition(":")
        if ceiling not in best or figure.rate > best[ceiling][1].rate:
            best[ceiling] = (candidate, figure)
    return best


def gpu_profile(
    datasheet: HardwareProfile,
    device: torch_types.device,
    device_key: str,
    device_name: str,
    l2_bytes: int | None,
    repetitions: int = GPU_REPETITIONS,
    timer: Timer | None = None,
    matmul_size: int = 8192,
    copy_bytes: int | None = None,
) -> tuple[HardwareProfile, list[str]]:
    """The measured profile of one GPU (the median of ``repetitions`` passes), and the reasons it
    must not be cached (empty when it may be)."""
    import torch

    candidates = repeated_figures([measure_gpu(torch, device, datasheet, l2_bytes, timer, matmul_size, copy_bytes)
                                   for _ in range(repetitions)])
    best = best_candidates(candidates)
    pattern, bandwidth = best.pop("bandwidth")
    figures = {k: figure for k, (_, figure) in best.items()}
    kept = [k for k in datasheet.peak_tflops if k not in figures]
    merged = {**dict(datasheet.peak_tflops), **{k: f.rate for k, f in figures.items()}}
    # Each measured peak holds at the clock it was measured at (so sol_at_clock does not scale it
    # twice); a peak kept from the datasheet keeps the datasheet's clock.
    clocks = {k: v for k, v in datasheet.peak_clock_mhz.items() if k in kept}
    clocks.update({k: f.clock_mhz for k, f in figures.items() if f.clock_mhz})
    profile = HardwareProfile(
        # One id per physical GPU: two calibrated GPUs of one box must not collide in the cache.
        id=f"{datasheet.id}-measured-{measured_id_suffix(device_key)}",
        name=f"{device_name} (measured ceilings)",
        kind="gpu",
        memory_bandwidth_gbps=bandwidth.rate,
        peak_tflops=merged,
        match=(),
        source=f"measured by solgate calibrate on {socket.gethostname()}, torch {torch.__version__}; "
        f"bandwidth from the {PATTERN_WORDS.get(pattern, pattern)} pattern",
        notes=_gpu_notes(candidates, best, pattern, bandwidth, figures, kept, repetitions),
        derived_from=datasheet.id,
        ceilings="measured",
        measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=datasheet.device if isinstance(datasheet.device, DeviceFacts) else DeviceFacts(),
        peak_clock_mhz=clocks,
    )
    faults = [fault for figure in candidates.values() for fault in figure.faults]  # a fault in any candidate
    return profile, faults


def _gpu_notes(candidates: dict[str, Figure], best: dict[str, tuple[str, Figure]], pattern: str, bandwidth: Figure,
               figures: dict[str, Figure], kept: list[str], repetitions: int) -> str:
    """How a GPU's ceilings were measured: every bandwidth pattern's rate and the best, each
    precision's best matmul size, the passes, each figure's spread, what was kept from the datasheet."""
    spreads = ", ".join(f"{k} {f.spread:.1%}" for k, f in {"bandwidth": bandwidth, **figures}.items())
    patterns = ", ".join(f"{PATTERN_WORDS.get(key.partition(':')[2], key)} {f.rate:.0f}" for key, f in candidates.items()
                         if key.startswith("bandwidth:"))
    sizes = ", ".join(f"{k} {candidate}" for k, (candidate, _) in best.items())
    return (f"bandwidth the best of {len(BANDWIDTH_PATTERNS)} access patterns, GB/s counting bytes read plus written: "
            f"{patterns} (best: {PATTERN_WORDS.get(pattern, pattern)}); compute the best of torch.mm per precision "
            f"over {len(MATMUL_SIZE_DIVISORS)} cube sizes on random data (best: {sizes}); each figure the median of "
            f"{repetitions} passes of the plugin's own sampling loop over at least 0.5 s (CUDA backend, L2 flushed); "
            f"spread (max-min)/median: {spreads}"
            + (f"; kept from the datasheet: {', '.join(kept)}" if kept else ""))
