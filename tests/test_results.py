"""The result record: typed parts per stage in memory, the flat solgate/1 JSON on disk.

``data/solgate1-bfa3cec.json`` was written by pytest-solgate at commit bfa3cec, before a
``Measurement`` was composed of parts (three runs of a suite with a budget, a speedup gate and a
plain measurement; samples cut to five, host renamed). Files like it are in users' histories and
CI artefacts: they must read back whole, and what this version writes must keep their shape.
"""

import json
from pathlib import Path

import pytest

from pytest_solgate import cli
from pytest_solgate.declare.work import Work
from pytest_solgate.measure.sampling import Timing
from pytest_solgate.record import schema
from pytest_solgate.record.sqlite import SqliteStore
from pytest_solgate.results import AppliedBudget, BaselineComparison, Judgement, Verdict
from pytest_solgate.results_json import decode, encode
from pytest_solgate.score import Score
from solgate_testing import git, init_repo

EARLIER = Path(__file__).parent / "data" / "solgate1-bfa3cec.json"


def earlier_records():
    return json.loads(EARLIER.read_text())["measurements"]


# Fields this version adds after the earlier file's (docs/measurement-cpu.md, "The memory probe"): a reader
# of the earlier fields finds them all, in their order, with their types.
ADDED_FIELDS = {"probe_seconds", "by_probe", "raw_change"}


def extends(written, earlier):
    """Whether the shape ``written`` is ``earlier`` with only ADDED_FIELDS after its own fields."""
    if not isinstance(earlier, list) or not isinstance(written, list):
        return written == earlier
    head, extra = written[:len(earlier)], written[len(earlier):]
    return (all(w[0] == e[0] and extends(w[1], e[1]) for w, e in zip(head, earlier))
            and all(key in ADDED_FIELDS for key, _ in extra))


def shape(value):
    """The keys of a record and of its nested records, in order: what a reader of the file sees."""
    if isinstance(value, dict):
        return [(key, shape(item)) for key, item in value.items()]
    return type(value).__name__ if value is not None else None


def test_an_earlier_versions_records_read_back_whole_and_write_back_identical():
    for record in earlier_records():
        m = decode(record)
        assert encode(m) == record
        assert list(encode(m)) == list(record)  # the same fields in the same order
        if record["baseline"]:
            assert list(encode(m)["baseline"]) == list(record["baseline"])
        assert list(encode(m)["budget"]) == list(record["budget"])


def test_a_record_is_composed_of_one_typed_part_per_stage():
    speedup = next(r for r in earlier_records() if r["name"] == "fast")
    m = decode(speedup)
    assert isinstance(m.work, Work) and m.work.bytes == speedup["bytes"]
    assert isinstance(m.timing, Timing) and m.timing.samples == tuple(speedup["samples"])
    assert isinstance(m.score, Score) and m.score.sol == speedup["sol"]
    assert isinstance(m.judgement, Judgement) and m.judgement.verdict is Verdict.PASS
    assert m.judgement.budget == AppliedBudget(max_regression=0.05, speedup=1.2, reference="slow",
                                               achieved_speedup=speedup["budget"]["achieved_speedup"])
    assert isinstance(m.judgement.baseline, BaselineComparison) and m.judgement.baseline.runs == 2
    # The attributes users of sol.measure read (m.sol, m.seconds, ...) read through to the parts
    assert (m.sol, m.seconds, m.bound, m.bytes, m.verdict) == (
        speedup["sol"], speedup["seconds"], speedup["bound"], speedup["bytes"], "pass")


def test_a_flat_read_of_a_field_that_moved_says_where_it_lives():
    m = decode(earlier_records()[0])
    with pytest.raises(AttributeError, match=r"no attribute 'reason': read m.judgement.reason \(once judged"):
        m.reason  # noqa: B018
    with pytest.raises(AttributeError, match=r"read m.timing.mode, or m.to_dict\(\)\['timing_mode'\]"):
        m.timing_mode  # noqa: B018
    assert m.judgement.reason == earlier_records()[0]["reason"] and m.timing.mode == "events"
    with pytest.raises(AttributeError, match=r"no attribute 'nothing'$"):
        m.nothing  # noqa: B018
    # every field of the flat record is reachable: as an attribute, or through the message
    fields = set(earlier_records()[0])
    plain = {f for f in fields if f in ("test", "name", "profile", "gate", "ceilings", "ceilings_id", "environment",
                                         "device", "worker", "notes", "verdict", "trend")}
    for name in fields - plain:
        try:
            getattr(m, name)
        except AttributeError as exc:
            assert "read m." in str(exc), name


def test_an_unjudged_record_has_no_judgement_and_writes_the_empty_fields():
    record = {**earlier_records()[0], "verdict": None, "reason": "", "budget": {}, "baseline": None}
    m = decode(record)
    assert m.judgement is None and m.verdict is None and not m.failed
    assert encode(m) == record


def test_an_early_baseline_without_window_fields_reads_as_one_run():
    early = {"commit": "a" * 40, "run_id": "r1", "sol": 0.5, "change": -0.02}
    comparison = decode({**earlier_records()[0], "baseline": early}).judgement.baseline
    assert (comparison.runs, comparison.oldest_commit, comparison.noise_floor) == (1, "a" * 40, None)


def test_this_version_writes_the_records_of_the_earlier_one(suite, pytester):
    """A real run (budget, speedup gate, history baseline): every record has the earlier file's
    fields, in its order, with values of the same JSON types."""
    body = """
        import pytest

        @pytest.mark.sol(min=0.3)
        def test_budget(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6)

        @pytest.mark.sol(speedup=1.2, reference="slow")
        def test_speedup(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.5e6, name="fast")
            sol.measure(lambda: busy(2e-3), bytes=0.5e6, name="slow", gate=False)

        def test_plain(sol):
            sol.measure(lambda: busy(5e-4), flops={"fp32": 1e5}, bytes=1e5)
    """
    init_repo(pytester.path)
    (pytester.path / ".gitignore").write_text(".solgate/\nout.json\n")
    for run in range(3):  # two clean runs at earlier commits form the third one's baseline window
        git(pytester.path, "add", "-A")
        git(pytester.path, "commit", "-q", "--allow-empty", "-m", f"run {run}")
        suite(body, "--sol-json=out.json", fake_clock=True).assert_outcomes(passed=3)
    written = json.loads((pytester.path / "out.json").read_text())["measurements"]
    earlier = {(r["test"].split("::")[-1], r["name"]): r for r in earlier_records()}
    assert len(written) == len(earlier) == 4
    for record in written:
        before = earlier[(record["test"].split("::")[-1], record["name"])]
        for volatile in ("samples", "notes", "trend", "environment", "telemetry"):  # lengths differ run to run
            record.pop(volatile), before.pop(volatile)
        assert extends(shape(record), shape(before)), record["test"]


def test_the_earlier_file_imports_into_a_history_and_reads_back(tmp_path):
    db = tmp_path / "h.db"
    assert cli.main(["import", str(EARLIER), "--history", str(db)]) == 0
    _, expected = schema.read_run(EARLIER.read_text(), str(EARLIER))
    with SqliteStore(db) as store:
        stored = [m for _, m in store.results()]
    assert stored == expected and all(isinstance(m.verdict, Verdict) for m in stored)
