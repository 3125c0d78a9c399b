"""Declare (the hardware side): hardware profiles, the TOML format, its loader, the registry and the device-name matcher.

A profile gives the ceilings SOL is measured against: memory bandwidth and dense peak FLOP/s per
precision class. This module only reads, checks and matches; detecting the device and measuring
ceilings live elsewhere, so this stays free of torch and NVML.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, TypedDict

from pytest_solgate.support.errors import ProfileError
from pytest_solgate.support.locations import user_cache_dir
from pytest_solgate.support.precisions import PRECISIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
TOP_LEVEL_KEYS = {
    "id",
    "name",
    "kind",
    "match",
    "memory_bandwidth_gbps",
    "source",
    "notes",
    "derived_from",
    "ceilings",
    "measured_at",
    "peak_tflops",
    "peak_clock_mhz",
    "device",
    "cache",
}
REQUIRED_KEYS = ("id", "name", "kind", "memory_bandwidth_gbps", "peak_tflops")
DEVICE_NUMBER_KEYS = ("sm_count", "boost_clock_mhz", "l2_cache_mb", "memory_gb")
DEVICE_KEYS = set(DEVICE_NUMBER_KEYS) | {"arch"}
CEILINGS = ("datasheet", "measured")
CACHE_KEYS = {"size_mb", "bandwidth_gbps", "source"}


@dataclass(frozen=True)
class CacheLevel:
    """One level of the memory hierarchy above DRAM (the cache-aware roofline's roofs): its size and
    the read-plus-write bandwidth a working set that fits in it reaches (``[cache.L2]`` in TOML)."""

    name: str  # "L1", "L2", "L3"
    size_mb: float
    bandwidth_gbps: float
    source: str = ""  # where the figure comes from: a citation, or "measured by ..."

    @property
    def size_bytes(self) -> float:
        return self.size_mb * 1e6

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bandwidth_gbps * 1e9


@dataclass(frozen=True)
class DeviceFacts:
    sm_count: int | None = None
    boost_clock_mhz: float | None = None
    l2_cache_mb: float | None = None
    memory_gb: float | None = None
    arch: str | None = None  # e.g. "gfx942": identifies AMD parts that report a generic name

    @property
    def l2_bytes(self) -> int | None:
        """The datasheet's L2 in bytes, the unit the timing backends flush in (TOML keeps MB)."""
        return int(self.l2_cache_mb * 1e6) if self.l2_cache_mb else None


@dataclass(frozen=True)
class HardwareProfile:
    id: str
    name: str
    kind: str  # "gpu" or "cpu"
    memory_bandwidth_gbps: float
    peak_tflops: Mapping[str, float]
    match: tuple[str, ...] = ()
    source: str = ""
    notes: str = ""
    derived_from: str = ""
    ceilings: str = "datasheet"
    measured_at: str = ""
    device: DeviceFacts = field(default_factory=DeviceFacts)
    # The SM clock each peak was quoted (datasheet) or measured (calibration) at, when it is not
    # the boost clock: Hopper's tensor-core peaks are quoted at 1830 MHz, not its 1980 MHz boost.
    peak_clock_mhz: Mapping[str, float] = field(default_factory=dict)
    # The cache levels, smallest first (empty: every byte is held against DRAM's bandwidth). Only a
    # whole step's operators are scored against them (score/step_breakdown.py); sol.measure flushes the
    # cache, so its floor stays DRAM's, and they are left out of ceilings_id.
    caches: tuple[CacheLevel, ...] = ()
    path: str = field(default="", compare=False)
    # Why these measured ceilings were taken while the machine was busy ('' when it was quiet, or
    # for a datasheet): such ceilings are lower bounds, serve one session, are raised by whatever
    # beats them and are never written to a file (measure/calibrate.py).
    busy: str = field(default="", compare=False)

    @property
    def memory_bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bandwidth_gbps * 1e9

    def peak_flops(self, precision: str) -> float:
        """FLOP/s for one precision class."""
        return self.peak_tflops[precision] * 1e12

    @property
    def ceilings_id(self) -> str:
        """A short hash of the numbers SOL is scored against. A re-calibrated CPU or an edited
        profile file gets a new one, so history never compares SOL across different ceilings."""
        import hashlib

        numbers = [f"{self.memory_bandwidth_gbps:.6g}"] + [f"{k}={v:.6g}" for k, v in sorted(self.peak_tflops.items())]
        return hashlib.sha256("|".join(numbers).encode()).hexdigest()[:12]

    def roof_clock_mhz(self, precision: str) -> float | None:
        """The SM clock ``precision``'s peak holds at: its own, else the boost clock, else None."""
        return self.peak_clock_mhz.get(precision) or self.device.boost_clock_mhz

    def ridge_point(self, precision: str) -> float:
        """Arithmetic intensity (FLOP/byte) where this precision's roof meets the bandwidth roof."""
        return self.peak_flops(precision) / self.memory_bandwidth


def builtin_profiles_dir() -> Path:
    """Where the shipped profiles are: inside the installed package, or the checkout's top level."""
    packaged = Path(__file__).resolve().parents[1] / "hw_profiles"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "hw_profiles"


def _positive_number(path: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{path}: field '{key}' must be a number, got {value!r}")
    if not value > 0 or value == float("inf"):
        raise ProfileError(f"{path}: field '{key}' must be a finite number > 0, got {value!r}")
    if not PHYSICAL_RANGE[0] <= value <= PHYSICAL_RANGE[1]:
        raise ProfileError(
            f"{path}: field '{key}' = {value!r} is not physically possible; give a value from "
            f"{PHYSICAL_RANGE[0]:g} to {PHYSICAL_RANGE[1]:g} in the datasheet's units (GB/s, TFLOP/s, MB, MHz)"
        )
    return float(value)


# Every profile number, in its datasheet unit: 10 PB/s, 10 EFLOP/s or 10 million SMs is no device,
# and such a number breaks the roofline's axes; 1e-9 TFLOP/s is still a (very slow) CPU.
PHYSICAL_RANGE = (1e-9, 1e7)


def _string(path: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ProfileError(f"{path}: field '{key}' must be a string, got {value!r}")
    return value


def parse_profile(data: Mapping[str, object], path: str) -> HardwareProfile:
    """Check a parsed TOML document and build the profile; every error names path and field."""
    profile_id, kind, ceilings, match = _identity(data, path)
    peak_tflops = _peak_tflops(path, data["peak_tflops"])
    peak_clock_mhz = _peak_clocks(path, data.get("peak_clock_mhz", {}), peak_tflops)
    device = _device_facts(path, data.get("device", {}))
    caches = _cache_levels(path, data.get("cache", {}))
    return HardwareProfile(
        id=profile_id,
        name=_string(path, "name", data["name"]),
        kind=kind,
        memory_bandwidth_gbps=_positive_number(
            path, "memory_bandwidth_gbps", data["memory_bandwidth_gbps"]
        ),
        peak_tflops=peak_tflops,
        match=match,
        source=_string(path, "source", data.get("source", "")),
        notes=_string(path, "notes", data.get("notes", "")),
        derived_from=_string(path, "derived_from", data.get("derived_from", "")),
        ceilings=ceilings,
        measured_at=_string(path, "measured_at", data.get("measured_at", "")),
        device=device,
        peak_clock_mhz=peak_clock_mhz,
        caches=caches,
        path=path,
    )


def _identity(data: Mapping[str, object], path: str) -> tuple[str, str, str, tuple[str, ...]]:
    """The document's fields all known and the required ones there; its id, kind, ceilings and
    match globs checked."""
    unknown = sorted(set(data) - TOP_LEVEL_KEYS)
    if unknown:
        raise ProfileError(
            f"{path}: unknown field '{unknown[0]}'; allowed fields: {', '.join(sorted(TOP_LEVEL_KEYS))}"
        )
    for key in REQUIRED_KEYS:
        if key not in data:
            raise ProfileError(f"{path}: missing required field '{key}'")
    profile_id = _string(path, "id", data["id"])
    if not ID_PATTERN.match(profile_id):
        raise ProfileError(
            f"{path}: field 'id' must be lowercase letters, digits and '-', got {profile_id!r}"
        )
    kind = _string(path, "kind", data["kind"])
    if kind not in ("gpu", "cpu"):
        raise ProfileError(f"{path}: field 'kind' must be \"gpu\" or \"cpu\", got {kind!r}")
    ceilings = _string(path, "ceilings", data.get("ceilings", "datasheet"))
    if ceilings not in CEILINGS:
        raise ProfileError(f"{path}: field 'ceilings' must be one of {CEILINGS}, got {ceilings!r}")
    match = data.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
        raise ProfileError(f"{path}: field 'match' must be a list of device-name globs, got {match!r}")
    return profile_id, kind, ceilings, tuple(match)


def _peak_tflops(path: str, peaks: object) -> dict[str, float]:
    """``[peak_tflops]``: TFLOP/s per precision, at least one."""
    if not isinstance(peaks, dict):
        raise ProfileError(f"{path}: field 'peak_tflops' must be a table of precision = TFLOP/s")
    if not peaks:
        raise ProfileError(f"{path}: field 'peak_tflops' needs at least one precision")
    peak_tflops = {}
    for key, value in peaks.items():
        if key not in PRECISIONS:
            raise ProfileError(
                f"{path}: unknown field 'peak_tflops.{key}'; precisions are: {', '.join(PRECISIONS)}"
            )
        peak_tflops[key] = _positive_number(path, f"peak_tflops.{key}", value)
    return peak_tflops


def _peak_clocks(path: str, clocks: object, peak_tflops: Mapping[str, float]) -> dict[str, float]:
    """``[peak_clock_mhz]``: the SM clock a precision's peak holds at, for precisions it gives."""
    if not isinstance(clocks, dict):
        raise ProfileError(f"{path}: field 'peak_clock_mhz' must be a table of precision = MHz")
    peak_clock_mhz = {}
    for key, value in clocks.items():
        if key not in peak_tflops:
            raise ProfileError(f"{path}: field 'peak_clock_mhz.{key}' names no precision of 'peak_tflops'")
        peak_clock_mhz[key] = _positive_number(path, f"peak_clock_mhz.{key}", value)
    return peak_clock_mhz


def _device_facts(path: str, table: object) -> DeviceFacts:
    """``[device]``: SM count, boost clock, L2 and memory size, architecture."""
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: field 'device' must be a table")
    unknown = sorted(set(table) - DEVICE_KEYS)
    if unknown:
        raise ProfileError(
            f"{path}: unknown field 'device.{unknown[0]}'; allowed: {', '.join(sorted(DEVICE_KEYS))}"
        )
    numbers = {key: _positive_number(path, f"device.{key}", table[key]) for key in DEVICE_NUMBER_KEYS if key in table}
    sm_count = numbers.get("sm_count")
    return DeviceFacts(
        sm_count=None if sm_count is None else int(sm_count),
        boost_clock_mhz=numbers.get("boost_clock_mhz"),
        l2_cache_mb=numbers.get("l2_cache_mb"),
        memory_gb=numbers.get("memory_gb"),
        arch=_string(path, "device.arch", table["arch"]) if "arch" in table else None,
    )


def _cache_levels(path: str, table: object) -> tuple[CacheLevel, ...]:
    """``[cache.NAME]`` tables (size_mb, bandwidth_gbps, source), smallest first."""
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: field 'cache' must be a table of levels, e.g. [cache.L2] with size_mb and bandwidth_gbps")
    levels = []
    for name, level in table.items():
        if not isinstance(level, dict):
            raise ProfileError(f"{path}: field 'cache.{name}' must be a table with size_mb and bandwidth_gbps")
        unknown = sorted(set(level) - CACHE_KEYS)
        if unknown:
            raise ProfileError(f"{path}: unknown field 'cache.{name}.{unknown[0]}'; allowed: {', '.join(sorted(CACHE_KEYS))}")
        for key in ("size_mb", "bandwidth_gbps"):
            if key not in level:
                raise ProfileError(f"{path}: missing field 'cache.{name}.{key}'")
        levels.append(CacheLevel(name=name, size_mb=_positive_number(path, f"cache.{name}.size_mb", level["size_mb"]),
                                 bandwidth_gbps=_positive_number(path, f"cache.{name}.bandwidth_gbps", level["bandwidth_gbps"]),
                                 source=_string(path, f"cache.{name}.source", level.get("source", ""))))
    return tuple(sorted(levels, key=lambda level: level.size_mb))


def load_profile(path: str | Path) -> HardwareProfile:
    """Read one profile file; any problem is a ``ProfileError`` naming the file."""
    where = str(path)
    p = Path(path)
    if p.is_dir():
        raise ProfileError(f"{where}: is a directory, not a profile file; pass a .toml file")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"{where}: no such profile file; check the path or use a profile id") from None
    except OSError as exc:
        raise ProfileError(f"{where}: cannot read the profile file ({exc.strerror})") from None
    if not raw.strip():
        raise ProfileError(f"{where}: the profile file is empty; see `solgate profile h100-sxm` for an example")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{where}: not UTF-8 text; a profile is a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: invalid TOML: {exc}") from None
    return parse_profile(data, where)


def load_profiles(folders: Iterable[str | Path]) -> list[HardwareProfile]:
    """All profiles in the folders, sorted by id; an id defined twice is an error."""
    by_id: dict[str, HardwareProfile] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.toml")):
            profile = load_profile(path)
            if profile.id in by_id:
                raise ProfileError(
                    f"{path}: profile id '{profile.id}' is already defined by {by_id[profile.id].path}"
                )
            by_id[profile.id] = profile
    return [by_id[key] for key in sorted(by_id)]


def builtin_profiles() -> list[HardwareProfile]:
    return load_profiles([builtin_profiles_dir()])


def find_profile(spec: str, profiles: Iterable[HardwareProfile] | None = None) -> HardwareProfile:
    """``--sol-profile``: a path to a TOML file, or the id of a known profile."""
    if not spec.strip():
        raise ProfileError(f"the profile id is empty ({spec!r}); give an id from `solgate profiles` or a path to a .toml file")
    if spec.endswith(".toml") or "/" in spec or Path(spec).exists():
        return load_profile(spec)
    known = list(profiles) if profiles is not None else builtin_profiles()
    for profile in known:
        if profile.id == spec:
            return profile
    close = [p.id for p in known if p.id.split("-")[0] == spec.split("-")[0]]
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ProfileError(
        f"no profile with id '{spec}'; {hint}known ids: {', '.join(sorted(p.id for p in known))} "
        "(or pass a path to a .toml file)"
    )


@dataclass(frozen=True)
class ProfileOption:
    """What ``--sol-profile`` asks for: one profile (a file or an id), or a folder to detect among."""

    profile: HardwareProfile | None = None
    folders: tuple[str, ...] = ()


def resolve_profile_option(spec: str | None) -> ProfileOption:
    """Check ``--sol-profile`` at start-up; every file in a given folder is checked too."""
    if not spec:
        return ProfileOption()
    if Path(spec).is_dir():
        if not load_profiles([spec]):
            raise ProfileError(
                f"{spec}: a folder with no *.toml profiles in it; pass a profile file, an id, or a folder of profiles"
            )
        return ProfileOption(folders=(spec,))
    return ProfileOption(profile=find_profile(spec))


def _normalize(name: str) -> str:
    return " ".join(name.split()).lower()


def _specificity(pattern: str) -> int:
    """How much of a glob is literal text: the longest match is the most specific one."""
    return len(re.sub(r"\[[^\]]*\]|[*?]", "", pattern))


@dataclass(frozen=True)
class Match:
    profile: HardwareProfile
    pattern: str
    warning: str = ""


def match_device(
    name: str,
    profiles: Iterable[HardwareProfile],
    sm_count: int | None = None,
    arch: str | None = None,
) -> Match:
    """Pick the profile whose ``match`` glob fits ``name`` best (longest literal text wins).

    Ties go to the smaller profile id, so the result never depends on the order of the files.
    AMD parts that report a generic name fall back to ``device.arch``. The SM count, when known on
    both sides, is a second check that only warns.
    """
    normalized = _normalize(name)
    best: tuple[int, str, HardwareProfile, str] | None = None
    for profile in profiles:
        for pattern in profile.match:
            if fnmatch.fnmatchcase(normalized, _normalize(pattern)):
                key = (-_specificity(pattern), profile.id)
                if best is None or key < (best[0], best[1]):
                    best = (key[0], key[1], profile, pattern)
    if best is None and arch:
        candidates = sorted(
            (p for p in profiles if p.device.arch and arch.lower().startswith(p.device.arch.lower())),
            key=lambda p: p.id,
        )
        if candidates:
            best = (0, candidates[0].id, candidates[0], f"arch {candidates[0].device.arch}")
    if best is None:
        raise ProfileError(
            f"no hardware profile matches device '{name}'; pass --sol-profile=ID|PATH "
            "(see `solgate profiles`), add a profile to hw_profiles/, or run `solgate calibrate`"
        )
    profile, pattern = best[2], best[3]
    warning = ""
    if sm_count is not None and profile.device.sm_count is not None and sm_count != profile.device.sm_count:
        warning = (
            f"device '{name}' has {sm_count} SMs but profile '{profile.id}' says "
            f"{profile.device.sm_count}; it may be another part: check with `solgate detect` "
            "or pass --sol-profile"
        )
    return Match(profile=profile, pattern=pattern, warning=warning)


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        # Six significant digits, not decimal places: measured CPU peaks can be 1e-5 TFLOP/s.
        return repr(float(f"{value:.6g}"))
    return str(value)


def profile_to_toml(profile: HardwareProfile) -> str:
    """Write a profile in the same format the loader reads (used by calibration)."""
    lines = [
        f"id = {_toml_value(profile.id)}",
        f"name = {_toml_value(profile.name)}",
        f"kind = {_toml_value(profile.kind)}",
        f"match = {_toml_value(list(profile.match))}",
        f"memory_bandwidth_gbps = {_toml_value(profile.memory_bandwidth_gbps)}",
        f"ceilings = {_toml_value(profile.ceilings)}",
    ]
    for key in ("source", "notes", "derived_from", "measured_at"):
        value = getattr(profile, key)
        if value:
            lines.append(f"{key} = {_toml_value(value)}")
    lines += ["", "[peak_tflops]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in profile.peak_tflops.items()]
    if profile.peak_clock_mhz:
        lines += ["", "[peak_clock_mhz]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in profile.peak_clock_mhz.items()]
    facts = {
        key: getattr(profile.device, key)
        for key in (*DEVICE_NUMBER_KEYS, "arch")
        if getattr(profile.device, key) is not None
    }
    if facts:
        lines += ["", "[device]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in facts.items()]
    for level in profile.caches:
        lines += ["", f"[cache.{level.name}]", f"size_mb = {_toml_value(level.size_mb)}",
                  f"bandwidth_gbps = {_toml_value(level.bandwidth_gbps)}"]
        if level.source:
            lines.append(f"source = {_toml_value(level.source)}")
    return "\n".join(lines) + "\n"


def known_profiles(cache_dir: Path, folders: tuple[str, ...] = ()) -> list[HardwareProfile]:
    """The user's folders (``--sol-profile=DIR``), then the shipped profiles, then measured ones:
    this machine's CPU calibration in the per-user cache (support.locations.user_cache_dir), then
    those cached under .solgate/profiles; a user's profile replaces a shipped one with the same id."""
    by_id: dict[str, HardwareProfile] = {}
    measured = [folder for folder in (user_cache_dir() / "profiles", cache_dir / "profiles") if folder.is_dir()]
    # One folder at a time: the shared cache and a clone's .solgate may both hold this CPU's id
    # (the clone's from before the shared cache); the shared one is the calibration in use.
    for group in (load_profiles(folders), builtin_profiles(), *(load_profiles([folder]) for folder in measured)):
        for profile in group:
            by_id.setdefault(profile.id, profile)
    return [by_id[key] for key in sorted(by_id)]


class DriverFacts(TypedDict, total=False):
    """What the driver says of a device (``devices.device_facts``; a trace's device entry)."""

    sm_count: int | None
    l2_bytes: int | None
    arch: str | None
    total_memory: int | None


def detect(name: str, facts: DriverFacts, profiles: Iterable[HardwareProfile]) -> Match:
    """The profile of a device, from its name and what the driver says of it (``facts`` as
    ``devices.device_facts`` gives them: SM count and architecture cross-check the name)."""
    return match_device(name, profiles, facts.get("sm_count"), facts.get("arch"))
