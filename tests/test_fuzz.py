"""Property tests (hypothesis) of the parsers and the pure core."""

import json
import math
import string
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_solgate import cli
from pytest_solgate.declare.profiles import builtin_profiles, load_profile, match_device
from pytest_solgate.declare.work import PRECISIONS, make_work
from pytest_solgate.record.schema import dump
from pytest_solgate.record.sqlite import SqliteStore
from pytest_solgate.results import RunInfo
from pytest_solgate.results_json import decode
from pytest_solgate.score import score
from pytest_solgate.support.errors import ProfileError
from test_profiles import DEVICE_NAMES

KEYS = ["id", "name", "kind", "match", "memory_bandwidth_gbps", "source", "notes", "ceilings", "peak_tflops", "device",
        "fp32", "bf16_tensor", "sm_count", "l2_cache_mb", "colour"]
scalars = st.one_of(
    st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(string.ascii_letters + string.digits + " -_*", max_size=12),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
tables = st.dictionaries(st.sampled_from(KEYS), values, max_size=8)
documents = st.dictionaries(st.sampled_from(KEYS), st.one_of(values, tables), max_size=10)


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def to_toml(document):
    lines = [f"{k} = {toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for key, table in document.items():
        if isinstance(table, dict):
            lines.append(f"[{key}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    return "\n".join(lines) + "\n"


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents)
def test_profile_parser_raises_only_its_own_error(tmp_path, document):
    path = tmp_path / "p.toml"
    path.write_text(to_toml(document))
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
    else:
        assert profile.memory_bandwidth_gbps > 0 and all(v > 0 for v in profile.peak_tflops.values())


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_profile_parser_on_arbitrary_text(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    try:
        load_profile(path)
    except ProfileError:
        pass


PROFILE = builtin_profiles()[0]
positive = st.floats(min_value=1e-12, max_value=1e15, allow_nan=False, allow_infinity=False)
work_counts = st.dictionaries(st.sampled_from(sorted(PROFILE.peak_tflops)), positive, max_size=3)


@given(work_counts, positive, st.floats(min_value=1e-9, max_value=1e3), st.floats(min_value=1.0, max_value=1e3))
def test_scoring_is_monotonic_and_never_nan(flops, nbytes, seconds, factor):
    work = make_work(flops=flops or None, bytes=nbytes)
    base = score(work, seconds, PROFILE)
    slower = score(work, seconds * factor, PROFILE)
    more = score(make_work(flops={k: v * factor for k, v in flops.items()} or None, bytes=nbytes * factor), seconds, PROFILE)
    for s in (base, slower, more):
        assert not any(math.isnan(x) for x in (s.t_sol, s.sol, s.mfu, s.tflops, s.gbps))
    assert slower.sol <= base.sol * (1 + 1e-12)
    assert more.sol >= base.sol * (1 - 1e-12)


names = st.one_of(st.sampled_from(sorted(DEVICE_NAMES)), st.text(max_size=30),
                  st.sampled_from(sorted(DEVICE_NAMES)).map(lambda n: n + " rev2"))


@given(names, st.randoms())
def test_matcher_does_not_depend_on_profile_order(name, rng):
    profiles = builtin_profiles()
    shuffled = profiles[:]
    rng.shuffle(shuffled)

    def pick(ps):
        try:
            return match_device(name, ps).profile.id
        except ProfileError:
            return None

    assert pick(profiles) == pick(shuffled)


finite = st.floats(min_value=1e-9, max_value=1e9, allow_nan=False)
# Times and scores within the physical bounds that `solgate import` checks (pytest_solgate/record/schema.py).
duration = st.floats(min_value=1e-9, max_value=1e4, allow_nan=False)
ratio = st.floats(min_value=1e-9, max_value=1e3, allow_nan=False)
measurements = st.builds(
    lambda **fields: decode(fields),  # as a flat solgate/1 record
    test=st.text(min_size=1, max_size=40).map(lambda t: "t.py::" + t),
    name=st.text(min_size=1, max_size=10),
    profile=st.sampled_from(["h100-sxm", "cpu-x"]),
    backend=st.sampled_from(["cuda", "cpu", "triton-interpreter"]),
    flops=st.dictionaries(st.sampled_from(PRECISIONS), finite, max_size=2),
    bytes=finite, seconds=duration, samples=st.lists(duration, min_size=1, max_size=20).map(tuple),
    noise=st.one_of(ratio, st.just(math.inf)), t_sol=duration, sol=ratio, mfu=ratio,
    bound=st.sampled_from(["memory", "compute"]), tflops=finite, gbps=finite,
    verdict=st.sampled_from(["pass", "below-budget", "not-gated"]), reason=st.text(max_size=50),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(measurements, min_size=1, max_size=4))
def test_json_records_round_trip_through_import(tmp_path, ms):
    run = RunInfo(id=uuid.uuid4().hex,  # not `random`: hypothesis seeds it per example
                   started_at="2026-12-02T00:00:00+00:00", commit="a" * 40)
    path = tmp_path / f"{run.id}.json"
    path.write_text(dump(run, ms))
    db = tmp_path / "h.db"
    assert cli.main(["import", str(path), "--history", str(db)]) == 0
    assert cli.main(["import", str(path), "--history", str(db)]) == 0  # twice: nothing added
    with SqliteStore(db) as store:
        stored = [m for r, m in store.results() if r["run_uid"] == run.id]
    assert stored == list(ms)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(measurements, st.sampled_from(["samples", "sol", "seconds", "flops", "bound", "noise", "test", "bytes", "budget",
                                     "baseline"]), json_values)
def test_import_of_any_poisoned_field_is_refused_or_valid_never_a_traceback(tmp_path, m, field, value):
    import json

    document = json.loads(dump(RunInfo(id=uuid.uuid4().hex, started_at="2026-12-02T00:00:00+00:00"), [m]))
    document["measurements"][0][field] = value
    path = tmp_path / f"{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(document))
    db = tmp_path / "poison.db"
    status = cli.main(["import", str(path), "--history", str(db)])  # raises nothing
    assert status in (0, 2)
    if status == 0:  # what was accepted reads back as a usable record
        with SqliteStore(db) as store:
            for _, stored in store.results():
                assert isinstance(stored.sol, (int, float)) and all(isinstance(s, (int, float)) for s in stored.samples)
                if stored.judgement is not None and stored.judgement.budget.min is not None:
                    assert isinstance(stored.judgement.budget.min, (int, float))
                if stored.judgement is not None and stored.judgement.baseline is not None:
                    assert isinstance(stored.judgement.baseline.change, (int, float))
