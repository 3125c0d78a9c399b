"""The saved record's format (pytest_solgate/results_json.py): every field is written and read
back, the records every earlier version wrote still read (from the history too), and a record that
cannot be trusted (a wrong type, a verdict or a format this version does not know) is refused in
one line that names the field, never a traceback."""

import dataclasses
import json
import math
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_solgate.declare.work import PRECISIONS
from pytest_solgate.judge.window import BaselineRun
from pytest_solgate.record.sqlite import SqliteStore
from pytest_solgate.results import VERDICTS, AppliedBudget, BaselineComparison, Measurement, RunInfo
from pytest_solgate.results_json import FIELDS, RecordError, baseline_facts, decode, decode_run, encode, encode_run
from pytest_solgate.score import Score
from pytest_solgate.score.step_breakdown import OperatorScore, StepBreakdown
from pytest_solgate.support.errors import HistoryError
from solgate_testing import git, init_repo

STEP = StepBreakdown(seconds=2e-3, t_sol=1e-3, flops={"bf16_tensor": 1e9}, bytes=1e6, mfu=0.4, precision="bf16_tensor",
                     idle=1e-4, overlap=0.0, runs=5, mode="profiler-kernels", kept=3, declared=True, notes=("n",),
                     noise=0.02, carried_in=1e-5,
                     operators=(OperatorScore(operator="aten::mm", module="Block", kind="matmul", calls=2, seconds=1.5e-3,
                                              samples=(1.5e-3,), flops={"bf16_tensor": 1e9}, bytes=1e6, t_sol=1e-3,
                                              sol=0.66, lost=5e-4, bound="compute", noise=0.01),))

# One record with every field of the format set to a value other than its default, in FIELDS order.
FULL = {
    "test": "t.py::test_k", "name": "fused", "profile": "h100-sxm", "backend": "cuda",
    "flops": {"bf16_tensor": 2e9}, "bytes": 4e8, "seconds": 1.2e-3, "samples": [1.1e-3, 1.2e-3, 1.3e-3], "noise": 0.02,
    "t_sol": 1e-3, "sol": 0.83, "mfu": 0.4, "bound": "memory", "tflops": 1.6, "gbps": 3e3, "intensity": 5.0,
    "ridge": 295.0, "gate": False, "ceilings": "measured", "device": "NVIDIA H100", "batch": 4, "noisy": True,
    "throttled": True, "dropped_samples": 2, "started_at": 1000.5, "finished_at": 1002.5, "worker": "gw1",
    "notes": ["a note"], "telemetry": {"sm_clock_mhz": [1980.0]}, "telemetry_note": "nvml", "environment": {"host": "a"},
    "ceilings_id": "h100@measured", "sm_clock_mhz": 1755.0, "sol_at_clock": 0.9, "sol_clock_mhz": 1980.0,
    "timing_mode": "kernel-timestamps", "verdict": "ambiguous", "reason": "within the noise",
    "budget": {"min": 0.5, "mfu": 0.3, "max_regression": 0.04, "by_marker": True, "speedup": 1.2, "reference": "eager",
               "achieved_speedup": 1.5, "unmatched": ["min"]},
    "baseline": {"commit": "b" * 40, "oldest_commit": "a" * 40, "runs": 5, "run_id": "r5", "sol": 0.9, "change": -0.08,
                 "spread": 0.01, "noise_floor": 0.06, "compared_on": "time", "environment_differs": ["torch"],
                 "test": "t-prediction-99", "confirmed": True, "by_probe": True, "raw_change": -0.1,
                 "ceilings_changed": True},
    "trend": [{"commit": "a" * 40, "sol": 0.9, "started_at": "2026-12-01"}],
    "contended": "another process on its cores", "contended_wait": 0.1, "probe_seconds": 1e-3, "events_seconds": 1.3e-3,
    "kernel_span_seconds": 1.1e-3, "kernel_gap_seconds": 1e-5, "joules": 0.5, "measured_bytes": 5e8, "dram_ratio": 1.25,
    "step": STEP.to_dict(), "part_of": "block",
}
# What a Measurement holds that its record does not keep: derived again on reading, or not recorded.
NOT_KEPT = {"warmup_calls", "wall_seconds", "hidden_work", "gated", "dominant_precision", "tensor_class"}


def test_every_field_of_the_format_is_written_back_as_it_was_read():
    assert list(FULL) == list(FIELDS)  # the record above sets every field, in order
    m = decode(json.loads(json.dumps(FULL)))
    assert encode(m) == FULL and list(encode(m)) == list(FULL)
    assert [list(encode(m)[part]) for part in ("budget", "baseline")] == [list(FULL["budget"]), list(FULL["baseline"])]


def test_every_field_of_a_measurement_is_in_the_format_or_named_as_not_kept():
    """A field added to a record class that the format neither writes nor reads stays at its default here."""
    m = decode(FULL)
    parts = [m, m.work, m.timing, m.score, m.judgement, m.judgement.budget, m.judgement.baseline]
    at_default = [f"{type(part).__name__}.{f.name}" for part in parts for f in dataclasses.fields(part)
                  if f.name not in NOT_KEPT and f.default is not dataclasses.MISSING and getattr(part, f.name) == f.default]
    assert at_default == [], "write and read these in results_json.py, or name them in NOT_KEPT"
    assert m.timing.wall_seconds == 2.0 and m.timing.gated  # derived from the record


numbers = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False).map(lambda x: x + 0.0)  # no -0.0: it reads as 0.0
positive = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False)
texts = st.text(min_size=1, max_size=12)


@st.composite
def records(draw):
    """A record with every field set to drawn values (and the optional fields left out or not)."""
    record = {key: draw(st.just(value) | _like(value)) for key, value in FULL.items()}
    record["flops"] = draw(st.dictionaries(st.sampled_from(PRECISIONS), positive, max_size=3))
    record["samples"] = draw(st.lists(positive, max_size=30))
    record["noise"] = draw(positive | st.just(math.inf))
    record["verdict"] = draw(st.sampled_from([str(v) for v in VERDICTS]))
    record["environment"] = draw(st.dictionaries(texts, texts, max_size=3))
    for key in draw(st.sets(st.sampled_from(FIELDS[FIELDS.index("contended"):]))):  # the fields written only when set
        del record[key]
    if "measured_bytes" in record and record["bytes"]:
        record["dram_ratio"] = record["measured_bytes"] / record["bytes"]
    else:
        record.pop("dram_ratio", None)
    return {key: record[key] for key in FIELDS if key in record}


def _like(value):
    """Another value of the same kind (a count stays at least 1, a text non-empty: the record's defaults)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(min_value=1, max_value=10**6)
    if isinstance(value, float):
        return numbers
    if isinstance(value, str) and value in ("datasheet", "measured", "memory", "compute", "sol", "time"):
        return st.just(value)
    return st.text(min_size=1, max_size=20) if isinstance(value, str) else st.just(value)


@settings(max_examples=60, deadline=None)
@given(records())
def test_any_record_round_trips_through_the_json_field_for_field(record):
    text = json.dumps(record, allow_nan=True)  # as the history stores it
    written = encode(decode(json.loads(text)))
    assert written == record and list(written) == list(record)
    assert json.dumps(written, allow_nan=True) == text


# --- the records of earlier versions --------------------------------------------------------------

# As the first version (5970a6c) wrote a judged record: no environment, ceilings id, clock or timer,
# an unknown noise (Infinity), and the one-run baseline with its rank test.
FIRST = json.loads("""{"test": "t.py::test_k", "name": "default", "profile": "synthetic", "backend": "cpu",
  "flops": {}, "bytes": 1.0, "seconds": 0.001, "samples": [0.001, 0.001], "noise": Infinity, "t_sol": 0.0005, "sol": 0.5,
  "mfu": 0.0, "bound": "memory", "tflops": 0.0, "gbps": 1.0, "intensity": null, "ridge": null, "gate": true,
  "ceilings": "measured", "device": "cpu", "batch": 1, "noisy": false, "throttled": false, "dropped_samples": 0,
  "started_at": 1.0, "finished_at": 2.0, "worker": "", "notes": [], "telemetry": null, "telemetry_note": "",
  "verdict": "pass", "reason": "ok", "budget": {"min": null, "mfu": null, "max_regression": 0.05},
  "baseline": {"commit": "%s", "sol": 0.49, "run_id": "r0", "change": 0.02, "p_value": 0.4, "test": "mann-whitney-u"},
  "trend": []}""" % ("0" * 40))
# As 81efaaf wrote it (the baseline window): the environment and ceilings id, a window's baseline.
WINDOW = {**{k: v for k, v in FIRST.items() if k not in ("verdict", "reason", "budget", "baseline", "trend")},
          "noise": 0.01, "environment": {"host": "runner-a", "torch": "2.13.0"}, "ceilings_id": "synthetic@measured",
          "verdict": "ambiguous", "reason": "r", "budget": {"min": 0.3, "mfu": None, "max_regression": 0.05},
          "baseline": {"commit": "0" * 40, "oldest_commit": "0" * 40, "runs": 1, "run_id": "r0", "sol": 0.55,
                       "change": -0.09, "spread": None, "noise_floor": None, "compared_on": "sol",
                       "environment_differs": [], "test": "t-prediction-99", "confirmed": False},
          "trend": []}
# As b67163d wrote it (the SM clock beside SOL), unjudged: a reference measurement of a run with gate off.
CLOCK = {**{k: v for k, v in WINDOW.items() if k not in ("verdict", "reason", "budget", "baseline", "trend")},
         "gate": False, "sm_clock_mhz": None, "sol_at_clock": None, "verdict": None, "reason": "", "budget": {},
         "baseline": None, "trend": []}
RUN_COLUMNS = {"host": "runner-b", "torch": "2.12.0"}  # the run's own facts, for records without an environment


def a_history(path, *records):
    """A history holding ``records``, one run each at commits 1, 2, ... (newest last), written as rows."""
    with SqliteStore(path):
        pass
    db = sqlite3.connect(path)
    for i, record in enumerate(records, 1):
        text = record if isinstance(record, str) else json.dumps(record)  # a string: a damaged row as it is
        run = RunInfo(id=f"run-{i}", started_at=f"2026-12-0{i}", commit=f"{i:040x}", **RUN_COLUMNS)
        db.execute("INSERT INTO runs (run_uid, started_at, commit_sha, dirty, host, torch, status, info_json) "
                   "VALUES (?, ?, ?, 0, ?, ?, 'complete', ?)",
                   (run.id, run.started_at, run.commit, run.host, run.torch, json.dumps(encode_run(run))))
        db.execute("INSERT INTO measurements (run_id, test, name, profile, ceilings, sol, seconds, verdict, record_json) "
                   "VALUES (?, 't.py::test_k', 'default', 'synthetic', 'measured', 0.5, 0.001, ?, ?)",
                   (i, "pass", text))
    db.commit()
    db.close()
    return path


def test_the_records_of_every_earlier_version_read_from_the_history(tmp_path):
    path = a_history(tmp_path / "h.db", FIRST, WINDOW, CLOCK)
    with SqliteStore(path) as store:
        runs = store.baseline_runs("t.py::test_k", "default", "synthetic", "measured", [f"{i:040x}" for i in (3, 2, 1)], 10)
        (_, clock), (_, window), (_, first) = reversed(store.results())
    assert runs == [
        BaselineRun(commit=f"{3:040x}", run_id="run-3", started_at="2026-12-03", sol=0.5, seconds=0.001, noise=0.01,
                    ceilings_id="synthetic@measured", environment={"host": "runner-a", "torch": "2.13.0"}),
        BaselineRun(commit=f"{2:040x}", run_id="run-2", started_at="2026-12-02", sol=0.5, seconds=0.001, noise=0.01,
                    ceilings_id="synthetic@measured", environment={"host": "runner-a", "torch": "2.13.0"},
                    verdict="ambiguous", judged_against="0" * 40, judged_change=-0.09, judged_tolerance=0.05),
        BaselineRun(commit=f"{1:040x}", run_id="run-1", started_at="2026-12-01", sol=0.5, seconds=0.001, noise=math.inf,
                    environment=RUN_COLUMNS, verdict="pass", judged_against="0" * 40, judged_change=0.02,
                    judged_tolerance=0.05),
    ]
    assert first.timing.noise == math.inf and first.timing.mode == "events" and first.ceilings_id == ""
    assert first.judgement.baseline == BaselineComparison(commit="0" * 40, oldest_commit="0" * 40, runs=1, run_id="r0",
                                                          sol=0.49, change=0.02, spread=None, noise_floor=None,
                                                          statistic="mann-whitney-u")
    assert window.judgement.budget == AppliedBudget(min=0.3, max_regression=0.05) and window.environment["host"] == "runner-a"
    assert clock.judgement is None and clock.gate is False and clock.timing.sm_clock_mhz is None


def test_a_baseline_reads_the_same_facts_as_the_whole_record():
    """The window reads only what a baseline needs (format.baseline_facts): the same values decode reads."""
    for record in (FULL, FIRST, WINDOW, CLOCK):
        m, facts = decode(record), baseline_facts(record)
        judged = m.judgement.baseline if m.judgement else None
        assert (facts.sol, facts.seconds, facts.noise, facts.ceilings_id, facts.environment) == (
            m.score.sol, m.timing.seconds, m.timing.noise, m.ceilings_id, m.environment)
        assert (facts.verdict, facts.contended, facts.noisy, facts.probe_seconds, facts.sm_clock_mhz) == (
            m.verdict or "", bool(m.contended), m.timing.noisy, m.timing.probe_seconds, m.timing.sm_clock_mhz)
        assert (facts.judged_against, facts.judged_change, facts.judged_floor) == (
            (judged.commit, judged.change, judged.noise_floor) if judged else ("", None, None))
        assert facts.judged_tolerance == (m.judgement.budget.max_regression if m.judgement else None)
        assert facts.timer in ("", m.timing.mode)  # '' where an early record names no timer


# --- records that cannot be trusted ---------------------------------------------------------------

UNTRUSTED = [
    ({"noise": "abc"}, "noise = 'abc': not a number"),
    ({"samples": [1e-3, "x"]}, "samples = [0.001, 'x']: not a list of numbers"),
    ({"baseline": {**FULL["baseline"], "change": "-8%"}}, "baseline.change = '-8%': not a number"),
    ({"budget": {"max_regression": True}}, "budget.max_regression = True: not a number"),
    ({"gate": "yes"}, "gate = 'yes': not true or false"),
    ({"environment": {"host": 3}}, "environment = {'host': 3}: not an object of text"),
    ({"batch": 1.5}, "batch = 1.5: not a whole number"),
    ({"verdict": "slower"}, "verdict = 'slower': not a verdict this pytest-solgate knows"),
    ({"schema": "solgate/2"}, "schema = 'solgate/2': a record of a newer pytest-solgate (this one reads solgate/1)"),
    ({"seconds": "DROP"}, "seconds is missing"),
]


@pytest.mark.parametrize("change, said", UNTRUSTED, ids=[said.split(" ")[0] for _, said in UNTRUSTED])
def test_a_record_that_cannot_be_trusted_is_one_line_naming_the_field(change, said):
    record = {key: value for key, value in {**FULL, **change}.items() if value != "DROP"}
    with pytest.raises(RecordError) as raised:
        decode(record)
    message = str(raised.value)
    assert message.startswith("the record of t.py::test_k [fused]: ") and said in message and "\n" not in message
    assert isinstance(raised.value, HistoryError)


def test_a_history_row_that_cannot_be_read_names_the_history_and_the_field(tmp_path):
    newer = {**WINDOW, "schema": "solgate/2"}
    path = a_history(tmp_path / "h.db", newer)
    with SqliteStore(path) as store:
        for read in (lambda: store.baseline_runs("t.py::test_k", "default", "synthetic", "measured", [f"{1:040x}"], 5),
                     store.results, lambda: list(store.whole_runs())):
            with pytest.raises(HistoryError, match=f"^{path}: the record of t.py::test_k \\[default\\]: schema = "
                                                   "'solgate/2': a record of a newer pytest-solgate .*; upgrade pytest-solgate$"):
                read()
    damaged = a_history(tmp_path / "damaged.db", '{"test": "t.py::test_k", "sol": 0.')
    with SqliteStore(damaged) as store, pytest.raises(HistoryError, match="a measurement's record is not JSON"):
        store.results()


def test_a_run_whose_baseline_is_a_newer_record_says_so_in_one_line(suite, pytester):
    """A real run at the next commit reads the newer record as its baseline: the test fails with the
    history's path and the field, and no line of the plugin's internals."""
    init_repo(pytester.path)
    (pytester.path / ".gitignore").write_text(".solgate/\n")
    body = """
        def test_k(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "first")
    suite(body, fake_clock=True).assert_outcomes(passed=1)
    history = pytester.path / ".solgate" / "history.db"
    db = sqlite3.connect(history)
    (record,) = db.execute("SELECT record_json FROM measurements").fetchone()
    db.execute("UPDATE measurements SET record_json = ?", (json.dumps({**json.loads(record), "schema": "solgate/2"}),))
    db.commit()
    db.close()
    git(pytester.path, "commit", "-q", "--allow-empty", "-m", "second")
    result = suite(body, fake_clock=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{history}: the record of test_kernels.py::test_k [[]default[]]: schema = 'solgate/2': "
                                 "a record of a newer pytest-solgate (this one reads solgate/1); upgrade pytest-solgate*"])
    assert "results_json.py" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_a_run_and_its_facts_are_kept_whole():
    run = RunInfo(id="r1", started_at="2026-12-01", commit="a" * 40, dirty=True, host="h", status="interrupted")
    assert decode_run({**json.loads(json.dumps(encode_run(run))), "a field of a newer version": 1}) == run


def test_a_measurement_writes_its_flat_record_and_says_where_it_is_read():
    # Measurement.to_dict() gives the JSON form (the public API); it is the format's own encode
    assert decode(FULL).to_dict() == encode(decode(FULL)) == json.loads(json.dumps(FULL))
    with pytest.raises(AttributeError, match=r"read by pytest_solgate.results_json.decode\(record\)"):
        decode(FULL).from_dict  # noqa: B018
    assert isinstance(decode(FULL), Measurement) and isinstance(decode(FULL).score, Score)
