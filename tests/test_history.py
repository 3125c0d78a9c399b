"""History and baselines, in a real git repository: pytester runs at successive commits."""

import json
import sqlite3
import subprocess

import pytest

from pytest_solgate import history
from pytest_solgate.records import Measurement, RunInfo
from solgate_testing import FAST_TIMING, KERNELS, SYNTHETIC_PROFILE  # noqa: F401

KERNEL_TEST = KERNELS + '''
import json, pathlib, random
import pytest

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())

@pytest.mark.sol(max_regression=SPEED.get("tolerance"))
def test_kernel(sol):
    if SPEED.get("spread"):
        rng = random.Random(SPEED["seed"])
        sol.measure(lambda: busy(rng.uniform(*SPEED["spread"])), bytes=0.4e6)
    else:
        sol.measure(lambda: busy(SPEED["seconds"]), bytes=0.4e6)

def test_other(sol):
    sol.measure(lambda: busy(5e-4), bytes=0.1e6)
'''


# Enough samples (about 100 per measurement) that a shared, busy CI machine cannot blur a real
# 25 % slowdown into `ambiguous`.
HISTORY_TIMING = ["--sol-device=cpu", "--sol-min-time=0.1", "--sol-max-time=0.5", "-p", "no:cacheprovider"]


class Repo:
    def __init__(self, pytester):
        self.pytester = pytester
        self.path = pytester.path
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "test@example.invalid")
        self.git("config", "user.name", "test")
        pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
        (self.path / ".gitignore").write_text(".solgate/\n*.json.out\n")
        (self.path / "test_kernels.py").write_text(KERNEL_TEST)

    def git(self, *args):
        return subprocess.run(["git", *args], cwd=self.path, check=True, capture_output=True, text=True).stdout.strip()

    def commit(self, message, **speed):
        self.set_speed(**speed)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def set_speed(self, seconds=1e-3, **extra):
        (self.path / "speed.json").write_text(json.dumps({"seconds": seconds, **extra}))

    def run(self, *args, timing=HISTORY_TIMING):
        result = self.pytester.runpytest(*timing, "--sol-profile=synthetic.toml", "--sol-json=out.json.out", *args)
        data = json.loads((self.path / "out.json.out").read_text())
        verdicts = {(m["test"].split("::")[-1]): m for m in data["measurements"]}
        return result, verdicts, data


@pytest.fixture
def repo(pytester):
    return Repo(pytester)


def test_regression_fails_the_test_naming_both_commits(repo):
    a = repo.commit("A", seconds=1e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    assert verdicts["test_kernel"]["baseline"] is None  # nothing before A
    b = repo.commit("B: slower", seconds=1.25e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=1, failed=1)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed"
    assert kernel["baseline"]["commit"] == a and kernel["baseline"]["change"] < -0.15
    result.stdout.fnmatch_lines([
        f"*test_kernel SOL 0.??? at {b[:10]} vs 0.??? at {a[:10]}: -*%, tolerance 5.0%, Mann-Whitney U p=* < 0.001: regressed*"
    ])
    assert verdicts["test_other"]["verdict"] == "pass"


def test_same_kernel_twice_passes(repo):
    repo.commit("A")
    repo.run()
    repo.commit("B: docs only")
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    assert verdicts["test_kernel"]["verdict"] == "pass" and verdicts["test_kernel"]["baseline"]["commit"]


def test_noisy_large_drop_is_ambiguous_and_warns(repo):
    few_samples = ["--sol-device=cpu", "--sol-min-time=0", "--sol-max-time=0.001", "-p", "no:cacheprovider"]
    repo.commit("A", spread=[0.5e-3, 5e-3], seed=1)
    repo.run(timing=few_samples)
    repo.commit("B", spread=[0.5e-3, 7e-3], seed=2)
    result, verdicts, _ = repo.run(timing=few_samples)
    kernel = verdicts["test_kernel"]
    assert kernel["baseline"]["change"] < -0.05, kernel["baseline"]
    assert kernel["verdict"] == "ambiguous", kernel["reason"]
    assert result.parseoutcomes()["passed"] == 2
    result.stdout.fnmatch_lines(["*SolgateWarning: ambiguous: *too noisy to call a regression*"])


def test_dirty_run_is_recorded_but_never_a_baseline(repo):
    a = repo.commit("A", seconds=1e-3)
    repo.run()
    repo.set_speed(seconds=2e-3)  # uncommitted change to a tracked file: dirty
    result, verdicts, data = repo.run()
    assert data["run"]["dirty"] is True and data["run"]["commit"] == a
    # auto on a dirty tree compares against HEAD itself, so the slow change is caught
    assert verdicts["test_kernel"]["verdict"] == "regressed"
    repo.set_speed(seconds=1e-3)
    repo.commit("B")
    result, verdicts, _ = repo.run()
    # B's baseline is A's clean run, not the dirty slow one recorded after it
    assert verdicts["test_kernel"]["baseline"]["commit"] == a
    assert verdicts["test_kernel"]["verdict"] == "pass"
    with history.HistoryStore(repo.path / ".solgate" / "history.db") as store:
        assert [bool(r["dirty"]) for r in store.runs()] == [False, True, False]


def test_ancestor_walk_skips_commits_without_results(repo):
    a = repo.commit("A", seconds=1e-3)
    repo.run()
    repo.commit("B: not measured", seconds=1e-3, note="b")
    repo.commit("C: not measured either", seconds=1e-3, note="c")
    repo.commit("D: slower", seconds=1.3e-3)
    result, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["baseline"]["commit"] == a
    assert verdicts["test_kernel"]["verdict"] == "regressed"


def test_baseline_none_and_explicit_ref(repo):
    a = repo.commit("A", seconds=1e-3)
    repo.run()
    repo.commit("B", seconds=1.3e-3)
    result, verdicts, _ = repo.run("--sol-baseline=none")
    result.assert_outcomes(passed=2)
    assert verdicts["test_kernel"]["baseline"] is None
    repo.git("tag", "v1", a)
    result, verdicts, _ = repo.run("--sol-baseline=v1", "--sol-no-save")
    assert verdicts["test_kernel"]["verdict"] == "regressed" and verdicts["test_kernel"]["baseline"]["commit"] == a


def test_tolerance_from_marker_and_option(repo):
    repo.commit("A", seconds=1e-3)
    repo.run()
    repo.commit("B", seconds=1.25e-3, tolerance=0.5)
    result, verdicts, _ = repo.run("--sol-no-save")
    assert verdicts["test_kernel"]["verdict"] == "pass"  # the marker's 50 % wins
    repo.set_speed(seconds=1.25e-3)
    repo.commit("C")
    result, verdicts, _ = repo.run("--sol-max-regression=0.4", "--sol-baseline=HEAD~2")
    assert verdicts["test_kernel"]["verdict"] == "pass"


def test_no_save_records_nothing_and_outside_git_is_unknown(pytester):
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_k=KERNELS + "\ndef test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n")
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", "--sol-no-save").assert_outcomes(passed=1)
    assert not (pytester.path / ".solgate" / "history.db").exists()
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml").assert_outcomes(passed=1)
    with history.HistoryStore(pytester.path / ".solgate" / "history.db") as store:
        (run,) = store.runs()
        assert run["commit_sha"] is None
        assert store.baseline("test_k.py::test_k", "default", "synthetic", "measured", []) is None


def test_history_option_and_ini(repo):
    repo.commit("A")
    repo.run("--sol-history=elsewhere/h.db")
    assert (repo.path / "elsewhere" / "h.db").exists()
    repo.pytester.makeini("[pytest]\nsol_history = ini.db\n")
    repo.run()
    assert (repo.path / "ini.db").exists()


def test_run_records_every_field(repo):
    a = repo.commit("A")
    _, _, data = repo.run()
    with history.HistoryStore(repo.path / ".solgate" / "history.db") as store:
        (run,) = store.runs()
        assert run["commit_sha"] == a and run["branch"] == "main" and run["dirty"] == 0
        assert run["host"] and run["python"] and run["plugin"] and run["profile"] == "synthetic"
        assert run["ceilings"] == "measured" and "pytest" in run["command"] and run["run_uid"] == data["run"]["id"]
        results = store.results()
        assert len(results) == 2
        stored = {m.test: m for _, m in results}
        original = {m["test"]: m for m in data["measurements"]}
        for test, m in stored.items():
            assert list(m.samples) == original[test]["samples"] and m.sol == original[test]["sol"]


# --- the store on its own ----------------------------------------------------------------------

def a_run(run_id="r1", commit="c" * 40, dirty=False):
    return RunInfo(id=run_id, started_at="2026-12-01T00:00:00+00:00", commit=commit, dirty=dirty, profile="synthetic")


def a_measurement(sol=0.5):
    return Measurement(test="t.py::test_k", name="default", profile="synthetic", backend="cpu", flops={}, bytes=1.0,
                       seconds=1e-3, samples=(1e-3,) * 10, noise=0.0, t_sol=sol * 1e-3, sol=sol, mfu=0.0,
                       bound="memory", tflops=0.0, gbps=1.0, ceilings="measured", verdict="pass")


def test_older_schema_is_migrated_not_thrown_away(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(history.MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute(f"PRAGMA application_id = {history.APPLICATION_ID}")
    db.execute("INSERT INTO runs (started_at, commit_sha, dirty, profile, ceilings) VALUES ('2026-01-01', ?, 0, 'synthetic', 'measured')", ("a" * 40,))
    db.execute("INSERT INTO measurements (run_id, test, name, profile, ceilings, sol, seconds, verdict, record_json) VALUES (1, 't.py::test_k', 'default', 'synthetic', 'measured', 0.5, 0.001, 'pass', ?)",
               (json.dumps(a_measurement().to_dict()),))
    db.commit()
    db.close()
    with history.HistoryStore(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
        (run,) = store.runs()
        assert run["run_uid"] == "legacy-1" and run["commit_sha"] == "a" * 40
        base = store.baseline("t.py::test_k", "default", "synthetic", "measured", ["a" * 40])
        assert base.sol == 0.5 and len(base.sol_samples) == 10
        assert store.record_run(a_run(), [a_measurement()])
        assert len(store.runs()) == 2


def test_a_run_is_written_once(tmp_path):
    with history.HistoryStore(tmp_path / "h.db") as store:
        assert store.record_run(a_run(), [a_measurement()]) is True
        assert store.record_run(a_run(), [a_measurement()]) is False
        assert len(store.results()) == 1
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_foreign_and_corrupt_files_are_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("these are my notes\n" * 100)
    with pytest.raises(history.HistoryError, match="not a solgate history database"):
        history.HistoryStore(text)
    assert text.read_text() == "these are my notes\n" * 100
    foreign = tmp_path / "other.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    with pytest.raises(history.HistoryError, match="not a solgate history .tables: customers."):
        history.HistoryStore(foreign)
    assert foreign.read_bytes() == before
