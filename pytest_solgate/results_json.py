"""Record: the saved record's format, the flat ``solgate/1`` record of one measurement (and its run's
facts), in one place: ``encode`` writes it, ``decode`` reads it back and checks it.

It is what ``--sol-json`` writes, what ``solgate import`` reads, what the history stores (the
measurements table's ``record_json``, the runs table's ``info_json``) and what travels from xdist
workers to the controller. Its fields and their order (``FIELDS``) are those of every earlier
version: a field added since is written only when set (and most of them last), so that an earlier
record writes back identical. ``decode`` reads a record of any earlier version (a field it lacks takes its
default, as does a null) and refuses, in one line that names the field, a record it cannot trust:
a field of the wrong type, a verdict it does not know, or a record of a newer format (one whose
``schema`` is not ``solgate/1``; this version writes none, the document around it says it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, Mapping, NamedTuple, NoReturn, TypeGuard, TypeVar, cast, overload

from pytest_solgate.declare.work import Work
from pytest_solgate.measure.backends import timings_gated
from pytest_solgate.measure.sampling import Timing
from pytest_solgate.results import (
    SCHEMA,
    AppliedBudget,
    BaselineComparison,
    Judgement,
    Measurement,
    RunInfo,
    TrendPoint,
    Verdict,
)
from pytest_solgate.score import Score
from pytest_solgate.score.step_breakdown import StepBreakdown
from pytest_solgate.support.errors import HistoryError

# The record's fields in the order every version writes them; the last ones only when set.
FIELDS = (
    "test", "name", "profile", "backend", "flops", "bytes", "seconds", "samples", "noise",
    "t_sol", "sol", "mfu", "bound", "tflops", "gbps", "intensity", "ridge", "gate", "ceilings", "device",
    "batch", "noisy", "throttled", "dropped_samples", "started_at", "finished_at", "worker", "notes",
    "telemetry", "telemetry_note", "environment", "ceilings_id", "sm_clock_mhz", "sol_at_clock", "sol_clock_mhz",
    "timing_mode", "verdict", "reason", "budget", "baseline", "trend",
    # added since the first records, written only when set:
    "contended", "contended_wait", "probe_seconds", "events_seconds", "kernel_span_seconds", "kernel_gap_seconds",
    "joules", "measured_bytes", "dram_ratio", "step", "part_of",
)
# The Timing fields the record keeps under another name.
TIMING_NAMES = {"mode": "timing_mode", "span_seconds": "kernel_span_seconds", "gap_seconds": "kernel_gap_seconds"}
# The Score fields the record keeps (the dominant precision and the tensor-core class are not kept).
SCORE_FIELDS = ("t_sol", "sol", "mfu", "bound", "tflops", "gbps", "intensity", "ridge", "sol_at_clock", "sol_clock_mhz")


# The Python types a JSON value of each kind reads as (a tuple is taken for a list: Python callers
# build records from tuples), checked by type first, the common case, then by isinstance.
NUMBER, TEXT, OBJECT = frozenset({int, float}), frozenset({str}), frozenset({dict})
# A record as JSON gives it, or as Python callers build it: its values are narrowed field by field.
Record = Mapping[str, object]
T = TypeVar("T")


def _is_number(value: object) -> TypeGuard[float]:
    return type(value) in NUMBER or (isinstance(value, (int, float)) and not isinstance(value, bool))  # a bool is no number


def _is_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str)


def _is_object(value: object) -> TypeGuard[Record]:
    return isinstance(value, Mapping)


class RecordError(HistoryError):
    """A saved record this version cannot read: one line naming the field at fault."""


# --- writing ------------------------------------------------------------------------------------


def encode(m: Measurement) -> dict[str, object]:
    """The flat ``solgate/1`` record of ``m``, its fields in ``FIELDS`` order."""
    parts = {**_identity(m), **_timing(m.timing), **_score(m.score), **_judgement(m.judgement), **_extras(m)}
    return {key: parts[key] for key in FIELDS if key in parts}


def _identity(m: Measurement) -> dict[str, object]:
    return {"test": m.test, "name": m.name, "profile": m.profile, "flops": dict(m.work.flops), "bytes": m.work.bytes,
            "gate": m.gate, "ceilings": m.ceilings, "device": m.device, "worker": m.worker, "notes": list(m.notes),
            "environment": dict(m.environment), "ceilings_id": m.ceilings_id, "trend": [dict(p) for p in m.trend]}


def _timing(timing: Timing) -> dict[str, object]:
    telemetry = dict(timing.telemetry) if timing.telemetry is not None else None
    optional = {TIMING_NAMES.get(name, name): getattr(timing, name)
                for name in ("probe_seconds", "events_seconds", "span_seconds", "gap_seconds")}
    return {"backend": timing.backend, "seconds": timing.seconds, "samples": list(timing.samples), "noise": timing.noise,
            "batch": timing.batch, "noisy": timing.noisy, "throttled": timing.throttled,
            "dropped_samples": timing.dropped_samples, "started_at": timing.started_at,
            "finished_at": timing.finished_at, "telemetry": telemetry, "telemetry_note": timing.telemetry_note,
            "sm_clock_mhz": timing.sm_clock_mhz, "timing_mode": timing.mode,
            **{key: value for key, value in optional.items() if value is not None}}


def _score(scored: Score) -> dict[str, object]:
    data = {name: getattr(scored, name) for name in SCORE_FIELDS}
    if data["sol_clock_mhz"] is None:
        del data["sol_clock_mhz"]
    return data


def _judgement(judgement: Judgement | None) -> dict[str, object]:
    if judgement is None:
        return {"verdict": None, "reason": "", "budget": {}, "baseline": None}
    baseline = _comparison(judgement.baseline) if judgement.baseline is not None else None
    return {"verdict": judgement.verdict.value, "reason": judgement.reason, "budget": _budget(judgement.budget),
            "baseline": baseline}


def _budget(budget: AppliedBudget) -> dict[str, object]:
    data: dict[str, object] = {"min": budget.min, "mfu": budget.mfu, "max_regression": budget.max_regression}
    if budget.by_marker:
        data["by_marker"] = True
    if budget.speedup is not None:
        data.update(speedup=budget.speedup, reference=budget.reference, achieved_speedup=budget.achieved_speedup)
    if budget.unmatched:
        data["unmatched"] = list(budget.unmatched)
    return data


def _comparison(baseline: BaselineComparison) -> dict[str, object]:
    """solgate/1 calls the statistic "test"; the probe's and the ceilings' fields only when set."""
    data: dict[str, object] = {
        "commit": baseline.commit, "oldest_commit": baseline.oldest_commit, "runs": baseline.runs,
        "run_id": baseline.run_id, "sol": baseline.sol, "change": baseline.change, "spread": baseline.spread,
        "noise_floor": baseline.noise_floor, "compared_on": baseline.compared_on,
        "environment_differs": list(baseline.environment_differs), "test": baseline.statistic,
        "confirmed": baseline.confirmed,
    }
    if baseline.by_probe:
        data.update(by_probe=True, raw_change=baseline.raw_change)
    if baseline.ceilings_changed:
        data["ceilings_changed"] = True
    return data


def _extras(m: Measurement) -> dict[str, object]:
    """The fields added since the first records: written only when set."""
    data: dict[str, object] = {"contended": m.contended or None, "contended_wait": m.contended_wait,
                            "joules": m.joules, "measured_bytes": m.measured_bytes, "part_of": m.part_of or None}
    if m.measured_bytes is not None and m.work.bytes:  # for readers of the JSON; decode does not read it
        data["dram_ratio"] = m.measured_bytes / m.work.bytes
    if m.step is not None:
        data["step"] = m.step.to_dict()
    return {key: value for key, value in data.items() if value is not None}


def encode_run(run: RunInfo) -> dict[str, object]:
    """A run's facts: the solgate/1 document's ``run`` and the runs table's ``info_json``."""
    return dataclasses.asdict(run)


def decode_run(data: Record) -> RunInfo:
    """A run's facts as any version wrote them (fields of newer versions are left out)."""
    names = {f.name for f in dataclasses.fields(RunInfo)}
    # Any: the facts are passed on as JSON gave them, unchecked here (an import's are checked by
    # record/schema.py's JSON Schema; the runs table's are this package's own).
    known: dict[str, Any] = {key: value for key, value in data.items() if key in names}
    return RunInfo(**known)


# --- reading ------------------------------------------------------------------------------------


def decode(data: Record) -> Measurement:
    """A record of any pytest-solgate version; fields it lacks (or holds null) take their defaults.
    Facts the record does not keep (warm-up calls, the timing's own notes) read as zero and empty.
    A record that cannot be trusted raises RecordError naming the field."""
    fields = _record(data)
    try:
        return Measurement(
            test=fields.text("test", required=True), name=fields.text("name", required=True),
            profile=fields.text("profile", required=True),
            work=Work(flops=fields.numbers_by_name("flops"), bytes=fields.number("bytes", required=True)),
            timing=_read_timing(fields), score=_read_score(fields), gate=fields.flag("gate", True),
            ceilings=fields.text("ceilings") or "datasheet", ceilings_id=fields.text("ceilings_id"),
            environment=fields.texts_by_name("environment"), device=fields.text("device"),
            worker=fields.text("worker"), notes=fields.texts("notes"), contended=fields.text("contended"),
            contended_wait=fields.number("contended_wait"), judgement=_read_judgement(fields),
            trend=_read_trend(fields), joules=fields.number("joules"),
            measured_bytes=fields.number("measured_bytes"), step=_read_step(fields), part_of=fields.text("part_of"),
        )
    except RecordError as exc:
        raise RecordError(f"{_whose(data)}{exc}") from None


class BaselineFacts(NamedTuple):
    """What a baseline run (judge/window.py BaselineRun) takes from its record, read without the
    rest: a window read never builds the records' samples, timings and scores (a tuple, not a
    dataclass: it is made for every run a window reads)."""

    sol: float
    seconds: float
    noise: float  # inf where unknown
    ceilings_id: str
    environment: dict[str, str]
    verdict: str  # '' where the run was not judged
    timer: str  # the record's timing_mode ('' where an early record has none)
    contended: bool
    noisy: bool
    probe_seconds: float | None
    sm_clock_mhz: float | None
    contended_wait: float | None  # the share of its sampling the thread waited for a core (judge/like_pressure.py)
    # How the run itself was judged against its window (None where it was not):
    judged_against: str  # the window's newest commit
    judged_change: float | None
    judged_floor: float | None
    judged_tolerance: float | None


def baseline_facts(data: Record) -> BaselineFacts:
    """The facts of ``data`` (a record as ``decode`` reads it) that a baseline run needs, checked as decode checks them."""
    fields = _record(data)
    try:
        verdict = _read_verdict(fields)
        baseline, budget = fields.part("baseline") or Fields({}, ""), fields.part("budget") or Fields({}, "")
        return BaselineFacts(
            sol=fields.number("sol", required=True), seconds=fields.number("seconds", required=True),
            noise=_read_noise(fields), ceilings_id=fields.text("ceilings_id"),
            environment=fields.texts_by_name("environment"), verdict=verdict.value if verdict is not None else "",
            timer=fields.text("timing_mode"), contended=bool(fields.text("contended")), noisy=fields.flag("noisy"),
            probe_seconds=fields.number("probe_seconds"), sm_clock_mhz=fields.number("sm_clock_mhz"),
            contended_wait=fields.number("contended_wait"),
            judged_against=baseline.text("commit"), judged_change=baseline.number("change"),
            judged_floor=baseline.number("noise_floor"), judged_tolerance=budget.number("max_regression"),
        )
    except RecordError as exc:
        raise RecordError(f"{_whose(data)}{exc}") from None


def _record(data: Record) -> Fields:
    """``data``'s fields, once it is a record of this format."""
    if not isinstance(data, Mapping):
        raise RecordError(f"a record is a JSON object, not {_shown(data)}")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise RecordError(f"{_whose(data)}schema = {_shown(data['schema'])}: a record of a newer pytest-solgate "
                          f"(this one reads {SCHEMA}); upgrade pytest-solgate")
    return Fields(data, "")


def _read_noise(fields: Fields) -> float:
    """A null noise is an unknown one: the JSON writes an infinite noise as null."""
    noise: float = fields.number("noise", math.inf, required=True)
    return noise


def _read_verdict(fields: Fields) -> Verdict | None:
    if fields.text("verdict") == "":
        return None
    try:
        return Verdict(fields.data["verdict"])
    except ValueError:
        fields.fault("verdict", "not a verdict this pytest-solgate knows (a newer one wrote it?); upgrade pytest-solgate")


def _read_timing(fields: Fields) -> Timing:
    backend = fields.text("backend", required=True)
    started_at, finished_at = fields.number("started_at") or 0.0, fields.number("finished_at") or 0.0
    return Timing(
        seconds=fields.number("seconds", required=True), samples=fields.numbers("samples"),
        noise=_read_noise(fields),
        batch=fields.count("batch") or 1, warmup_calls=0, noisy=fields.flag("noisy"), backend=backend,
        started_at=started_at, finished_at=finished_at, wall_seconds=max(finished_at - started_at, 0.0),
        throttled=fields.flag("throttled"), dropped_samples=fields.count("dropped_samples"),
        sm_clock_mhz=fields.number("sm_clock_mhz"), mode=fields.text("timing_mode") or "events",
        telemetry=fields.object("telemetry"), telemetry_note=fields.text("telemetry_note"),
        probe_seconds=fields.number("probe_seconds"), events_seconds=fields.number("events_seconds"),
        span_seconds=fields.number("kernel_span_seconds"), gap_seconds=fields.number("kernel_gap_seconds"),
        gated=timings_gated(backend),  # a record keeps its backend's name: whether it gates is what that backend declares
    )


def _read_score(fields: Fields) -> Score:
    return Score(t_sol=fields.number("t_sol", required=True), sol=fields.number("sol", required=True),
                 mfu=fields.number("mfu", required=True), bound=fields.text("bound", required=True),
                 tflops=fields.number("tflops", required=True), gbps=fields.number("gbps", required=True),
                 intensity=fields.number("intensity"), ridge=fields.number("ridge"),
                 sol_at_clock=fields.number("sol_at_clock"), sol_clock_mhz=fields.number("sol_clock_mhz"))


def _read_judgement(fields: Fields) -> Judgement | None:
    verdict = _read_verdict(fields)
    if verdict is None:
        return None
    budget, baseline = fields.part("budget"), fields.part("baseline")
    return Judgement(verdict=verdict, reason=fields.text("reason"),
                     budget=_read_budget(budget) if budget is not None else AppliedBudget(),
                     baseline=_read_comparison(baseline) if baseline is not None and baseline.data else None)


def _read_budget(fields: Fields) -> AppliedBudget:
    return AppliedBudget(min=fields.number("min"), mfu=fields.number("mfu"),
                         max_regression=fields.number("max_regression"), speedup=fields.number("speedup"),
                         reference=fields.text("reference", None), achieved_speedup=fields.number("achieved_speedup"),
                         unmatched=fields.texts("unmatched"), by_marker=fields.flag("by_marker"))


def _read_comparison(fields: Fields) -> BaselineComparison:
    """Also reads the shorter baseline of early histories (one run, no window fields)."""
    commit = fields.text("commit")
    return BaselineComparison(
        commit=commit, oldest_commit=fields.text("oldest_commit") or commit, runs=fields.count("runs") or 1,
        run_id=fields.text("run_id"), sol=fields.number("sol") or 0.0, change=fields.number("change") or 0.0,
        spread=fields.number("spread"), noise_floor=fields.number("noise_floor"),
        compared_on=fields.text("compared_on") or "sol",
        environment_differs=fields.texts("environment_differs"), statistic=fields.text("test"),
        confirmed=fields.flag("confirmed"), by_probe=fields.flag("by_probe"), raw_change=fields.number("raw_change"),
        ceilings_changed=fields.flag("ceilings_changed"),
    )


def _read_trend(fields: Fields) -> tuple[TrendPoint, ...]:
    """The points as store.trend wrote them, checked only as objects: a report shows them, nothing judges them."""
    return cast("tuple[TrendPoint, ...]", fields.objects("trend"))


def _read_step(fields: Fields) -> StepBreakdown | None:
    step = fields.object("step")
    if not step:
        return None
    try:
        return StepBreakdown.from_dict(step)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        fields.fault("step", f"not a step's breakdown ({type(exc).__name__}: {exc})")


class Fields:
    """One record's fields (or one nested record's, ``where`` its name), read by type: a missing
    field or a null is the default given; a value of another type is a RecordError naming the field."""

    __slots__ = ("data", "where")

    def __init__(self, data: Record, where: str) -> None:
        self.data, self.where = data, where

    def fault(self, key: str, problem: str) -> NoReturn:
        raise RecordError(f"{self.where}{key} = {_shown(self.data.get(key))}: {problem}")

    def wrong(self, key: str, wanted: str) -> NoReturn:
        self.fault(key, f"not {wanted} (no pytest-solgate writes that)")

    def _missing(self, key: str) -> NoReturn:
        raise RecordError(f"{self.where}{key} is missing: the record cannot be read without it")

    @overload
    def number(self, key: str, default: float, required: bool = False) -> float: ...
    @overload
    def number(self, key: str, default: None = None, *, required: Literal[True]) -> float: ...
    @overload
    def number(self, key: str, default: None = None, required: bool = False) -> float | None: ...

    def number(self, key: str, default: float | None = None, required: bool = False) -> float | None:
        """A number; ``required``: missing is a RecordError (a null there still reads as ``default``,
        None, which no pytest-solgate writes: the required overload types what a writer writes)."""
        value = self.data.get(key)
        if value is None:
            if required and key not in self.data:
                self._missing(key)
            return default
        if type(value) not in NUMBER and not _is_number(value):
            self.wrong(key, "a number")
        return cast(float, value)  # checked: an int or a float, by type or by isinstance

    def count(self, key: str) -> int:
        """A whole number, 0 where there is none (1.0 is one: JSON Schema, which checks imports, says so)."""
        value = self.data.get(key)
        if value is None:
            return 0
        if type(value) is not int and not (type(value) is float and value.is_integer()):
            self.wrong(key, "a whole number")
        return int(value)

    @overload
    def text(self, key: str, default: str = "", required: bool = False) -> str: ...
    @overload
    def text(self, key: str, default: None, required: bool = False) -> str | None: ...

    def text(self, key: str, default: str | None = "", required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required and key not in self.data:
                self._missing(key)
            return default
        if not isinstance(value, str):
            self.wrong(key, "text")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.wrong(key, "true or false")
        return value

    def _array(self, key: str, kinds: frozenset[type], kind: Callable[[object], TypeGuard[T]], what: str) -> tuple[T, ...]:
        value = self.data.get(key)
        if not value:
            return ()
        if not isinstance(value, (list, tuple)) or not (kinds.issuperset(map(type, value))
                                                         or all(kind(item) for item in value)):
            self.wrong(key, f"a list of {what}")
        return cast("tuple[T, ...]", tuple(value))  # every item checked above (mypy narrows no all())

    def numbers(self, key: str) -> tuple[float, ...]:
        return self._array(key, NUMBER, _is_number, "numbers")

    def texts(self, key: str) -> tuple[str, ...]:
        return self._array(key, TEXT, _is_text, "text")

    def objects(self, key: str) -> tuple[Record, ...]:
        return self._array(key, OBJECT, _is_object, "objects")

    def object(self, key: str) -> Record | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not _is_object(value):
            self.wrong(key, "an object")
        return value

    def part(self, key: str) -> Fields | None:
        value = self.object(key)
        return Fields(value, f"{self.where}{key}.") if value is not None else None

    def numbers_by_name(self, key: str) -> dict[str, float]:
        value = self.object(key) or {}
        if not all(_is_number(v) for v in value.values()):
            self.wrong(key, "an object of numbers")
        return cast("dict[str, float]", dict(value))  # every value checked above

    def texts_by_name(self, key: str) -> dict[str, str]:
        value = self.object(key) or {}
        if not all(_is_text(v) for v in value.values()):
            self.wrong(key, "an object of text")
        return cast("dict[str, str]", dict(value))  # every value checked above


def _whose(data: Record) -> str:
    test, name = data.get("test"), data.get("name")
    if isinstance(test, str) and isinstance(name, str):
        return f"the record of {test} [{name}]: "
    return "a record: "


def _shown(value: object, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
