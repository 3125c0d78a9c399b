"""Record: the solgate/1 JSON format: ``dump`` writes it, ``read_run`` reads and checks it before
``solgate import`` (or the spool) writes anything.

A file from another runner is untrusted input: a record of the wrong type ("samples": "abc") or a
number out of range would poison every later run that reads it as a baseline. The check is a JSON
Schema run by the maintained ``jsonschema`` library.

The schema accepts everything the plugin itself writes (tests/test_faults.py feeds every verdict
back through ``solgate import`` and the spool), so its bounds are of two kinds:

- what was *measured* (seconds, samples, the SM clock) is bounded physically: no timing the plugin
  takes is longer than a day or negative, so such a number can only come from elsewhere;
- what was *declared* (FLOPs, bytes) is bounded as ``sol.measure`` bounds it (work.MAX_COUNT), and
  what is *derived* from a declaration (T_SOL, SOL, MFU, rates, intensity, speedups, changes) only
  by being a finite number: an impossible declaration is recorded as ``above-sol`` on purpose,
  and its record must reach the history like any other.
"""

from __future__ import annotations

import json
import math
import sys
from typing import NoReturn, Sequence, TypedDict, cast

from pytest_solgate.declare.work import MAX_COUNT
from pytest_solgate.record.outcome import COUNTED, FAILING, TestOutcomes
from pytest_solgate.results import SCHEMA, VERDICTS, Measurement, RunInfo
from pytest_solgate.results_json import RecordError, decode, decode_run, encode, encode_run
from pytest_solgate.support.errors import ImportFileError
from pytest_solgate.support.precisions import PRECISIONS

MAX_SECONDS = 86_400.0  # measured: no sample is longer than a day
FINITE = sys.float_info.max  # derived from a declaration: any finite number (10**400 is not one)
MAX_SAMPLES = 1_000_000
MAX_TEXT = 100_000


# A JSON Schema, or a part of one.
Schema = dict[str, object]


class Document(TypedDict):
    """A solgate/1 document as ``load`` returns it: checked against ``DOCUMENT``, its records not read yet."""

    schema: str
    run: dict[str, object]
    measurements: list[dict[str, object]]


def _number(maximum: float, minimum: float = 0.0, exclusive: bool = False) -> Schema:
    bound = {"exclusiveMinimum": minimum} if exclusive else {"minimum": minimum}
    return {"type": "number", "maximum": maximum, **bound}


def _text(max_length: int = MAX_TEXT) -> Schema:
    return {"type": "string", "maxLength": max_length}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


OPERATOR = {
    "type": "object",
    "required": ["operator", "seconds"],
    "properties": {
        "operator": {**_text(1_000), "minLength": 1},
        "module": _text(1_000),
        "class": _text(100),
        "calls": {"type": "integer", "minimum": 0, "maximum": 10**12},
        "seconds": _number(MAX_SECONDS),
        "samples": {"type": "array", "maxItems": MAX_SAMPLES, "items": _number(MAX_SECONDS)},
        "flops": {"type": "object", "propertyNames": {"enum": list(PRECISIONS)}, "additionalProperties": _number(MAX_COUNT)},
        "bytes": _number(MAX_COUNT),
        **{key: _number(FINITE) for key in ("t_sol", "sol")},
        "lost": {"type": "number", "minimum": -FINITE, "maximum": FINITE},  # below 0 for an operator faster than its floor
        "bound": {"enum": ["memory", "compute"]},
    },
}

STEP = {
    "type": "object",
    "required": ["seconds", "operators"],
    "properties": {
        "seconds": _number(MAX_SECONDS, exclusive=True),
        **{key: _number(MAX_SECONDS) for key in ("idle", "overlap", "carried_in")},
        **{key: _number(FINITE) for key in ("t_sol", "mfu", "idle_share")},
        "flops": {"type": "object", "propertyNames": {"enum": list(PRECISIONS)}, "additionalProperties": _number(MAX_COUNT)},
        "bytes": _number(MAX_COUNT),
        "precision": _nullable({"enum": list(PRECISIONS)}),
        "runs": {"type": "integer", "minimum": 0, "maximum": MAX_SAMPLES},
        "operators": {"type": "array", "maxItems": 100_000, "items": OPERATOR},
    },
}

MEASUREMENT = {
    "type": "object",
    "required": ["test", "name", "profile", "backend", "flops", "bytes", "seconds", "samples", "noise",
                 "t_sol", "sol", "mfu", "bound", "tflops", "gbps"],
    "properties": {
        "test": {**_text(10_000), "minLength": 1},
        "name": {**_text(1_000), "minLength": 1},
        "profile": {**_text(200), "minLength": 1},
        "backend": _text(100),
        "flops": {"type": "object", "propertyNames": {"enum": list(PRECISIONS)},
                  "additionalProperties": _number(MAX_COUNT)},
        "bytes": _number(MAX_COUNT),
        "seconds": _number(MAX_SECONDS, exclusive=True),
        "samples": {"type": "array", "maxItems": MAX_SAMPLES, "items": _number(MAX_SECONDS)},
        "noise": _nullable(_number(FINITE)),
        "t_sol": _number(FINITE),
        "sol": _number(FINITE),
        "mfu": _number(FINITE),
        "bound": {"enum": ["memory", "compute"]},
        "tflops": _number(FINITE),
        "gbps": _number(FINITE),
        "intensity": _nullable(_number(FINITE)),
        "ridge": _nullable(_number(FINITE)),
        "gate": {"type": "boolean"},
        "ceilings": {"enum": ["datasheet", "measured"]},
        "device": _text(1_000),
        "batch": {"type": "integer", "minimum": 1, "maximum": 10**9},
        "noisy": {"type": "boolean"},
        "throttled": {"type": "boolean"},
        "dropped_samples": {"type": "integer", "minimum": 0, "maximum": MAX_SAMPLES},
        "notes": {"type": "array", "maxItems": 1_000, "items": _text()},
        "verdict": _nullable({"enum": list(VERDICTS)}),
        "reason": _text(),
        "budget": _nullable({"type": "object", "properties": {
            **{key: _nullable(_number(1.0)) for key in ("min", "mfu", "max_regression")},
            "speedup": _nullable(_number(FINITE)),
            "reference": _nullable(_text(1_000)),
            "achieved_speedup": _nullable(_number(FINITE)),
        }}),
        "baseline": _nullable({"type": "object", "properties": {
            **{key: _text(100) for key in ("commit", "oldest_commit", "run_id", "test")},
            "runs": {"type": "integer", "minimum": 1, "maximum": 10**6},
            "sol": _number(FINITE),
            "change": _number(FINITE, minimum=-1.0),
            "spread": _nullable(_number(FINITE)),
            "noise_floor": _nullable(_number(1.0)),
            "compared_on": {"enum": ["sol", "time"]},
            "environment_differs": {"type": "array", "maxItems": 100, "items": _text(1_000)},
            "confirmed": {"type": "boolean"},
            "by_probe": {"type": "boolean"},
            "ceilings_changed": {"type": "boolean"},
            "raw_change": _nullable(_number(FINITE, minimum=-1.0)),
        }}),
        "telemetry": _nullable({"type": "object"}),
        "environment": {"type": "object", "additionalProperties": _text(1_000)},
        "ceilings_id": _text(100),
        "sm_clock_mhz": _nullable(_number(1e5)),
        "sol_at_clock": _nullable(_number(FINITE)),
        "sol_clock_mhz": _number(1e5),  # the clock sol's compute peaks are at, when clocks were locked
        # events-capture-off: events because an earlier capture of the session failed; kernel-timestamps: the
        # device's own kernel start/end (CUPTI, through torch.profiler); thread-cpu-time, perf-counter: CPU
        # timers; profiler-*: a whole step's operators under torch.profiler (sol.measure_step, measure/step_profile.py)
        "timing_mode": {"enum": ["events", "cuda-graph", "events-capture-off", "kernel-timestamps", "thread-cpu-time",
                                 "perf-counter", "profiler-cpu", "profiler-kernels"]},
        "events_seconds": _number(MAX_SECONDS),  # kernel-timestamps: the CUDA events' median per call (the cross-check)
        "kernel_span_seconds": _number(MAX_SECONDS),  # kernel-timestamps: first kernel start to last kernel end
        "kernel_gap_seconds": _number(MAX_SECONDS),  # kernel-timestamps: host time between a call's kernels
        "contended": _text(1_000),
        "contended_wait": _number(1.0),  # the share of a contended window this thread may have waited for a CPU
        "probe_seconds": _nullable(_number(MAX_SECONDS)),  # 0 where a clock did not advance (the fake clock)
        "joules": _number(FINITE),  # energy per call (NVML), only where measured
        "measured_bytes": _number(MAX_COUNT),  # DRAM bytes of one call under Nsight Compute (--sol-ncu)
        "dram_ratio": _number(FINITE),  # measured_bytes / bytes
        "trend": {"type": "array", "maxItems": 100_000, "items": {"type": "object"}},
        "step": STEP,  # a whole step's breakdown, on the step's record only (score/step_breakdown.py)
        "part_of": _text(1_000),  # on a step's operator series: the step's name
    },
}

RUN = {
    "type": "object",
    "required": ["id", "started_at"],
    "properties": {
        "id": {**_text(200), "minLength": 1},
        "started_at": {**_text(100), "minLength": 1},
        "commit": _nullable(_text(100)),
        "commit_time": _nullable(_text(100)),
        "branch": _nullable(_text(1_000)),
        "dirty": {"type": "boolean"},
        **{key: _text() for key in ("host", "device", "driver", "cuda", "torch", "triton", "python", "plugin",
                                    "profile", "ceilings", "command", "baseline_ref")},
        "status": {"enum": ["complete", "interrupted"]},
        # pytest's outcome (record/outcome.py): absent from files written before it was recorded
        "tests": {"type": "object", "properties": {
            **{key: {"type": "integer", "minimum": 0, "maximum": 10**9} for key in COUNTED.values()},
            "failures": {"type": "object", "maxProperties": 100_000,
                         "additionalProperties": {"enum": list(FAILING.values())}},
        }},
    },
}

DOCUMENT = {
    "type": "object",
    "required": ["schema", "run", "measurements"],
    "properties": {
        "schema": {"const": SCHEMA},
        "run": RUN,
        "measurements": {"type": "array", "maxItems": 100_000, "items": MEASUREMENT},
    },
}


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number a measurement can have")


def load(text: str, where: str) -> Document:
    """Parse and check a solgate/1 document; any fault is one ImportFileError naming the field."""
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError is a ValueError too
        detail = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise ImportFileError(f"{where}: not JSON that solgate can import ({detail}); give a file written by --sol-json") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ImportFileError(f"{where}: not a {SCHEMA} file (no \"schema\": \"{SCHEMA}\"); give a file written by pytest --sol-json")
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(DOCUMENT).iter_errors(document))
    if error is not None:
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".") or "the document"
        value = " ".join(repr(error.instance).split())
        value = _short(value, 60)
        raise ImportFileError(
            f"{where}: {field} = {value}: {_short(error.message.replace(repr(error.instance), 'it', 1))}; "
            "nothing was imported"
        )
    return cast(Document, document)  # its shape checked against DOCUMENT just above


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite(value: object) -> object:
    """JSON has no NaN or Infinity: write null instead, so any parser can read the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dump(run: RunInfo, measurements: Sequence[Measurement], outcomes: TestOutcomes | None = None) -> str:
    """One run as a solgate/1 document (``--sol-json``, the spool); pytest's ``outcomes``, where
    known, as the run's ``tests``."""
    document = {
        "schema": SCHEMA,
        "run": {**encode_run(run), **({"tests": outcomes.to_dict()} if outcomes is not None else {})},
        "measurements": [encode(m) for m in measurements],
    }
    return json.dumps(_finite(document), indent=2, sort_keys=False) + "\n"


def read_run(text: str, where: str) -> tuple[RunInfo, list[Measurement]]:
    """The run and measurements of a checked solgate/1 document (``dump`` writes an unknown noise
    as null: ``decode`` reads a null noise as infinite)."""
    document = load(text, where)
    try:
        return decode_run(document["run"]), [decode(m) for m in document["measurements"]]
    except RecordError as exc:
        raise ImportFileError(f"{where}: {exc}; nothing was imported") from None
