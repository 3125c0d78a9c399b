"""Results (the records every stage passes on): ``Measurement``, ``RunInfo`` and the verdicts.

A ``Measurement`` is composed of one typed part per stage, each the stage's own record:

- declare: ``Work`` (``work.py``): FLOPs by precision and bytes;
- measure: ``Timing`` (``measure/sampling.py``): the median, the samples and how they were taken;
- score: ``Score`` (``score/__init__.py``): T_SOL, SOL, MFU and the bound, against the profile named here;
- judge: ``Judgement`` (below): the ``Verdict``, its reason, the budget applied and the
  ``BaselineComparison``; ``None`` until judged;
- record: ``trend``, the history of the same measurement, oldest first.

Only the ``solgate/1`` JSON is flat (``to_dict``/``from_dict``): it is what ``--sol-json`` writes,
what ``solgate import`` reads, what the history stores, and what travels from xdist workers to the
controller; its fields and their order are those of every earlier version.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from pytest_solgate.declare.work import Work
from pytest_solgate.measure.backends import timings_gated
from pytest_solgate.measure.sampling import Timing
from pytest_solgate.score import Score
from pytest_solgate.score.step_breakdown import StepBreakdown

SCHEMA = "solgate/1"


class Verdict(str, enum.Enum):
    """The verdicts (docs/reference.md, "Verdicts"). A ``str``, so it is its own JSON value and compares with text."""

    BELOW_BUDGET = "below-budget"
    REGRESSED = "regressed"
    ABOVE_SOL = "above-sol"
    AMBIGUOUS = "ambiguous"
    IMPROVED = "improved"
    PASS = "pass"
    RECORDED = "recorded"  # gated, but nothing to judge it by yet: no budget on its profile, no baseline
    NOT_GATED = "not-gated"

    __str__ = str.__str__  # "pass", not "Verdict.PASS", in f-strings, Jinja and JSON

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    @property
    def failing(self) -> bool:
        """Fails its test unless --sol-gate=warn/off (or --sol-above-one=warn) says otherwise."""
        return self in FAILING


PASS = Verdict.PASS
BELOW_BUDGET = Verdict.BELOW_BUDGET
REGRESSED = Verdict.REGRESSED
AMBIGUOUS = Verdict.AMBIGUOUS
IMPROVED = Verdict.IMPROVED
ABOVE_SOL = Verdict.ABOVE_SOL
RECORDED = Verdict.RECORDED
NOT_GATED = Verdict.NOT_GATED
VERDICTS = tuple(Verdict)  # worst first: the order of every report
FAILING = (BELOW_BUDGET, REGRESSED, ABOVE_SOL)


@dataclass(frozen=True)
class AppliedBudget:
    """The budgets that applied to one measurement on its profile (a glob resolved to a number)."""

    min: float | None = None
    mfu: float | None = None
    max_regression: float | None = None
    speedup: float | None = None  # times faster than `reference`; with it, the speedup achieved
    reference: str | None = None
    achieved_speedup: float | None = None
    # Marker arguments given as {profile-glob: value} with no glob matching this profile
    # ("min", "mfu", "speedup"): the report says "none on <profile>", not a silent "-".
    unmatched: tuple[str, ...] = ()
    # max_regression came from the test's marker (per test: it wins over any run-wide setting or
    # a command's --max-regression when the run is judged again by compare, bisect or ab).
    by_marker: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"min": self.min, "mfu": self.mfu, "max_regression": self.max_regression}
        if self.by_marker:
            data["by_marker"] = True
        if self.speedup is not None:
            data.update(speedup=self.speedup, reference=self.reference, achieved_speedup=self.achieved_speedup)
        if self.unmatched:
            data["unmatched"] = list(self.unmatched)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AppliedBudget":
        known = _known(cls, data)
        if "unmatched" in known:
            known["unmatched"] = tuple(known["unmatched"] or ())
        return cls(**known)


@dataclass(frozen=True)
class BaselineComparison:
    """A measurement against its baseline window (the last clean runs at ancestor commits)."""

    commit: str  # the newest run of the window
    oldest_commit: str
    runs: int
    run_id: str
    sol: float  # the window's centre: geometric mean of its runs' SOL
    change: float  # relative SOL change against the centre
    spread: float | None  # run-to-run relative standard deviation; None with one run
    noise_floor: float | None  # the smallest drop run-to-run noise cannot explain (99 %); None if unknown
    compared_on: str = "sol"  # or "time", when the ceilings changed since the baseline
    environment_differs: tuple[str, ...] = ()
    statistic: str = ""
    confirmed: bool = False  # a regression a second block of samples showed again
    # The change was judged relative to the memory probe (a memory-bound kernel on the CPU);
    # raw_change is then the SOL's own change against the window's plain centre.
    by_probe: bool = False
    raw_change: float | None = None
    # The window's newest run was scored under other ceilings: they changed since the last run.
    ceilings_changed: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["environment_differs"] = list(self.environment_differs)
        statistic, confirmed = data.pop("statistic"), data.pop("confirmed")
        by_probe, raw_change = data.pop("by_probe"), data.pop("raw_change")
        probe = {"by_probe": True, "raw_change": raw_change} if by_probe else {}  # only when set, as before
        changed = {"ceilings_changed": True} if data.pop("ceilings_changed") else {}
        return {**data, "test": statistic, "confirmed": confirmed, **probe, **changed}  # solgate/1 calls the statistic "test"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BaselineComparison":
        """Also reads the shorter baseline of early histories (one run, no window fields)."""
        commit = data.get("commit") or ""
        return cls(
            commit=commit,
            oldest_commit=data.get("oldest_commit") or commit,
            runs=data.get("runs") or 1,
            run_id=data.get("run_id") or "",
            sol=data.get("sol") or 0.0,
            change=data.get("change") or 0.0,
            spread=data.get("spread"),
            noise_floor=data.get("noise_floor"),
            compared_on=data.get("compared_on") or "sol",
            environment_differs=tuple(data.get("environment_differs") or ()),
            statistic=data.get("test") or "",
            confirmed=bool(data.get("confirmed")),
            by_probe=bool(data.get("by_probe")),
            raw_change=data.get("raw_change"),
            ceilings_changed=bool(data.get("ceilings_changed")),
        )


@dataclass(frozen=True)
class Judgement:
    """What the judge stage decided about one measurement, and why."""

    verdict: Verdict
    reason: str
    budget: AppliedBudget = AppliedBudget()
    baseline: BaselineComparison | None = None

    def replace(self, **changes: Any) -> "Judgement":
        return dataclasses.replace(self, **changes)


# The flat attributes of a Measurement that sol.measure's users read (m.sol, m.seconds, ...), by the part that holds them.
READ_THROUGH = {
    "work": ("flops", "bytes"),
    "timing": ("backend", "seconds", "samples", "noise"),
    "score": ("t_sol", "sol", "mfu", "bound", "tflops", "gbps"),
}
_PART_OF = {name: part for part, names in READ_THROUGH.items() for name in names}
# Where the other fields of the flat record live, for the error that a flat read gets.
MOVED = {
    **{name: f"judgement.{name}" for name in ("reason", "budget", "baseline")},
    **{name: f"timing.{name}" for name in ("batch", "noisy", "throttled", "dropped_samples", "started_at",
                                             "finished_at", "telemetry", "telemetry_note", "sm_clock_mhz")},
    "timing_mode": "timing.mode",
    **{name: f"score.{name}" for name in ("intensity", "ridge", "sol_at_clock", "sol_clock_mhz")},
}


@dataclass(frozen=True)
class Measurement:
    """One measured kernel: who (test, name), its parts per stage, and the context that makes two
    runs comparable (the profile and its ceilings identity, the device, the environment)."""

    test: str
    name: str
    profile: str  # the id of the hardware profile it was scored against
    work: Work
    timing: Timing
    score: Score
    gate: bool = True  # False: a reference, recorded and shown, never judged
    ceilings: str = "datasheet"  # or "measured": where the profile's numbers come from
    # Like with like: the identity of the ceilings (profile numbers) scored against, and the facts
    # that make two runs comparable (host, device and its UUID, driver, CUDA, torch, triton, Python).
    ceilings_id: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    device: str = ""
    worker: str = ""  # the xdist worker that measured it
    notes: tuple[str, ...] = ()  # what a reader of the result should know (the timing's notes included)
    # Why the machine was busy while this was measured (another process on its cores, another
    # solgate run waiting for the device), or "": a contended result is never a baseline.
    contended: str = ""
    # With ``contended`` on a CPU: the share of the sampling window this thread may have waited for a
    # CPU (measure/contention.py), which bounds how much slower the contention can have made it.
    contended_wait: float | None = None
    judgement: Judgement | None = None
    # On a GPU: energy per call from NVML's counter (measure/block.py), and the DRAM bytes one call
    # moved under Nsight Compute (--sol-ncu, measure/ncu.py); None where not measured (left out of the JSON).
    joules: float | None = None
    measured_bytes: float | None = None
    # A whole step (sol.measure_step, steps.py): on the step's record, where its time went; on each
    # of its top operators' records, the step's name (their budgets are the step's, see judge/step_budgets.py).
    step: StepBreakdown | None = None
    part_of: str = ""
    # The record stage's history of this measurement, oldest first: [{"commit", "sol", "started_at"}].
    trend: tuple[Mapping[str, Any], ...] = ()

    def __getattr__(self, name: str) -> Any:
        """The attributes promised to the user of ``sol.measure`` (``m.sol``, ``m.seconds``,
        ``m.bound``, ...), read from the part that holds each: one place per value."""
        part = _PART_OF.get(name)
        if part is not None:
            return getattr(getattr(self, part), name)
        if name in MOVED:
            raise AttributeError(
                f"'Measurement' object has no attribute {name!r}: read m.{MOVED[name]}"
                + (" (once judged; m.judgement is None before)" if MOVED[name].startswith("judgement") else "")
                + f", or m.to_dict()[{name!r}] for the flat solgate/1 record"
            )
        raise AttributeError(f"'Measurement' object has no attribute {name!r}")

    @property
    def verdict(self) -> Verdict | None:
        """Set once judged."""
        return self.judgement.verdict if self.judgement is not None else None

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def replace(self, **changes: Any) -> "Measurement":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The flat ``solgate/1`` record."""
        timing, scored, judgement = self.timing, self.score, self.judgement
        return {
            "test": self.test,
            "name": self.name,
            "profile": self.profile,
            "backend": timing.backend,
            "flops": dict(self.work.flops),
            "bytes": self.work.bytes,
            "seconds": timing.seconds,
            "samples": list(timing.samples),
            "noise": timing.noise,
            "t_sol": scored.t_sol,
            "sol": scored.sol,
            "mfu": scored.mfu,
            "bound": scored.bound,
            "tflops": scored.tflops,
            "gbps": scored.gbps,
            "intensity": scored.intensity,
            "ridge": scored.ridge,
            "gate": self.gate,
            "ceilings": self.ceilings,
            "device": self.device,
            "batch": timing.batch,
            "noisy": timing.noisy,
            "throttled": timing.throttled,
            "dropped_samples": timing.dropped_samples,
            "started_at": timing.started_at,
            "finished_at": timing.finished_at,
            "worker": self.worker,
            "notes": list(self.notes),
            "telemetry": dict(timing.telemetry) if timing.telemetry is not None else None,
            "telemetry_note": timing.telemetry_note,
            "environment": dict(self.environment),
            "ceilings_id": self.ceilings_id,
            "sm_clock_mhz": timing.sm_clock_mhz,
            "sol_at_clock": scored.sol_at_clock,
            **({"sol_clock_mhz": scored.sol_clock_mhz} if scored.sol_clock_mhz is not None else {}),
            "timing_mode": timing.mode,
            "verdict": judgement.verdict.value if judgement else None,
            "reason": judgement.reason if judgement else "",
            "budget": judgement.budget.to_dict() if judgement else {},
            "baseline": judgement.baseline.to_dict() if judgement and judgement.baseline else None,
            "trend": [dict(point) for point in self.trend],
            # Last, and only when set: the records of earlier versions write back identical.
            **({"contended": self.contended} if self.contended else {}),
            **({"contended_wait": self.contended_wait} if self.contended_wait is not None else {}),
            **({"probe_seconds": timing.probe_seconds} if timing.probe_seconds is not None else {}),
            **({"events_seconds": timing.events_seconds} if timing.events_seconds is not None else {}),
            **({"kernel_span_seconds": timing.span_seconds} if timing.span_seconds is not None else {}),
            **({"kernel_gap_seconds": timing.gap_seconds} if timing.gap_seconds is not None else {}),
            **({"joules": self.joules} if self.joules is not None else {}),
            **({"measured_bytes": self.measured_bytes} if self.measured_bytes is not None else {}),
            # measured over declared bytes, for readers of the JSON (derived: from_dict does not read it)
            **({"dram_ratio": self.measured_bytes / self.work.bytes} if self.measured_bytes is not None and self.work.bytes else {}),
            **({"step": self.step.to_dict()} if self.step is not None else {}),
            **({"part_of": self.part_of} if self.part_of else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        """A record of any pytest-solgate version; fields it lacks take their defaults. Facts the
        JSON does not keep (warm-up calls, the timing's own notes) read as zero and empty."""
        started_at, finished_at = data.get("started_at") or 0.0, data.get("finished_at") or 0.0
        timing = Timing(
            seconds=data["seconds"],
            samples=tuple(data.get("samples") or ()),
            noise=data["noise"],
            batch=data.get("batch") or 1,
            warmup_calls=0,
            noisy=bool(data.get("noisy")),
            backend=data["backend"],
            started_at=started_at,
            finished_at=finished_at,
            wall_seconds=max(finished_at - started_at, 0.0),
            throttled=bool(data.get("throttled")),
            dropped_samples=data.get("dropped_samples") or 0,
            sm_clock_mhz=data.get("sm_clock_mhz"),
            mode=data.get("timing_mode") or "events",
            telemetry=data.get("telemetry"),
            telemetry_note=data.get("telemetry_note") or "",
            probe_seconds=data.get("probe_seconds"),
            events_seconds=data.get("events_seconds"),
            span_seconds=data.get("kernel_span_seconds"),
            gap_seconds=data.get("kernel_gap_seconds"),
            # A record keeps its backend's name: whether that backend's timings gate is what it declares.
            gated=timings_gated(data["backend"]),
        )
        # The score's fields keep their names in the JSON (the dominant precision is not kept).
        score_fields: dict[str, Any] = {f.name: data.get(f.name) for f in dataclasses.fields(Score)}
        scored = Score(**score_fields)
        judgement = None
        if data.get("verdict") is not None:
            baseline = data.get("baseline")
            judgement = Judgement(
                verdict=Verdict(data["verdict"]),
                reason=data.get("reason") or "",
                budget=AppliedBudget.from_dict(data.get("budget") or {}),
                baseline=BaselineComparison.from_dict(baseline) if baseline else None,
            )
        return cls(
            test=data["test"],
            name=data["name"],
            profile=data["profile"],
            work=Work(flops=dict(data.get("flops") or {}), bytes=data["bytes"]),
            timing=timing,
            score=scored,
            gate=data.get("gate", True),
            ceilings=data.get("ceilings") or "datasheet",
            ceilings_id=data.get("ceilings_id") or "",
            environment=dict(data.get("environment") or {}),
            device=data.get("device") or "",
            worker=data.get("worker") or "",
            notes=tuple(data.get("notes") or ()),
            contended=str(data.get("contended") or ""),
            contended_wait=data.get("contended_wait"),
            judgement=judgement,
            trend=tuple(data.get("trend") or ()),
            joules=data.get("joules"),
            measured_bytes=data.get("measured_bytes"),
            step=StepBreakdown.from_dict(data["step"]) if data.get("step") else None,
            part_of=str(data.get("part_of") or ""),
        )


@dataclass(frozen=True)
class RunInfo:
    """Facts about one pytest run: where, on what, at which commit."""

    id: str
    started_at: str
    commit: str | None = None
    commit_time: str | None = None
    branch: str | None = None
    dirty: bool = False
    host: str = ""
    device: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    python: str = ""
    plugin: str = ""
    profile: str = ""
    ceilings: str = ""
    command: str = ""
    baseline_ref: str = ""
    status: str = "complete"  # or "interrupted" (Ctrl-C): recorded, never a baseline

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunInfo":
        return cls(**_known(cls, data))


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that name a field of ``cls`` (newer files may have more)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}
