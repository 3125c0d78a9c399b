"""Results (the records every stage passes on): ``Measurement``, ``RunInfo`` and the verdicts.

A ``Measurement`` is composed of one typed part per stage, each the stage's own record:

- declare: ``Work`` (``work.py``): FLOPs by precision and bytes;
- measure: ``Timing`` (``measure/sampling.py``): the median, the samples and how they were taken;
- score: ``Score`` (``score/__init__.py``): T_SOL, SOL, MFU and the bound, against the profile named here;
- judge: ``Judgement`` (below): the ``Verdict``, its reason, the budget applied and the
  ``BaselineComparison``; ``None`` until judged;
- record: ``trend``, the history of the same measurement, oldest first.

Only the saved record, the ``solgate/1`` JSON, is flat: ``results_json.py`` writes it (``encode``)
and reads it back (``decode``); it is what ``--sol-json`` writes, what ``solgate import`` reads,
what the history stores, and what travels from xdist workers to the controller.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, TypedDict

from pytest_solgate.declare.work import Work
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

@dataclass(frozen=True)
class Judgement:
    """What the judge stage decided about one measurement, and why."""

    verdict: Verdict
    reason: str
    budget: AppliedBudget = AppliedBudget()
    baseline: BaselineComparison | None = None

    # Any: a change of any field, each of its own type (dataclasses.replace checks the names).
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


class TrendPoint(TypedDict):
    """One clean run of a measurement in its history, oldest first (record/store.py's trend)."""

    commit: str | None
    commit_time: str | None
    started_at: str
    sol: float


class CommitPoint(TypedDict):
    """One commit of a measurement's series in the history (record/store.py's commit_series): the
    median SOL and time of its clean runs, the newest run's verdict and every run's."""

    commit: str
    commit_time: str  # the commit's date, or its newest run's start where git does not know it
    started_at: str  # its newest run's start
    runs: list[float]  # the runs' SOL
    times: list[float]  # the runs' seconds
    contended: int  # how many of its runs measured on a busy machine
    verdict: str  # the newest run's, "-" where it was not judged
    verdicts: list[str]
    sol: float
    seconds: float


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
    # The record stage's history of this measurement, oldest first (record/store.py's trend).
    trend: tuple[TrendPoint, ...] = ()

    if TYPE_CHECKING:  # read through __getattr__ below (READ_THROUGH), typed here for the checker
        @property
        def flops(self) -> Mapping[str, float]: ...
        @property
        def bytes(self) -> float: ...
        @property
        def backend(self) -> str: ...
        @property
        def seconds(self) -> float: ...
        @property
        def samples(self) -> tuple[float, ...]: ...
        @property
        def noise(self) -> float: ...
        @property
        def t_sol(self) -> float: ...
        @property
        def sol(self) -> float: ...
        @property
        def mfu(self) -> float: ...
        @property
        def bound(self) -> str: ...
        @property
        def tflops(self) -> float: ...
        @property
        def gbps(self) -> float: ...
    else:  # the checker sees the typed attributes above instead, and no other name

        def __getattr__(self, name: str) -> object:
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
            if name == "from_dict":
                raise AttributeError("'Measurement' object has no attribute 'from_dict': the flat solgate/1 record "
                                     "is read by pytest_solgate.results_json.decode(record)")
            raise AttributeError(f"'Measurement' object has no attribute {name!r}")

    def to_dict(self) -> dict[str, object]:
        """The flat solgate/1 record, the JSON form (results_json.py writes it; ``decode`` reads it back)."""
        from pytest_solgate.results_json import encode

        return encode(self)

    @property
    def verdict(self) -> Verdict | None:
        """Set once judged."""
        return self.judgement.verdict if self.judgement is not None else None

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def replace(self, **changes: Any) -> "Measurement":  # Any: as Judgement.replace
        return dataclasses.replace(self, **changes)


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
