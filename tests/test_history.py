"""History and baselines, in a real git repository: pytester runs at successive commits."""

import json
import sqlite3

import pytest

from pytest_solgate.measure.extras import contention as real_contention  # conftest patches the module's in every test
from pytest_solgate.record import history, sqlite
from pytest_solgate.results import RunInfo
from pytest_solgate.results_json import encode
from solgate_testing import (  # noqa: F401
    FAKE_CLOCK_KERNELS,
    FAKE_CLOCK_TIMING,
    FAST_TIMING,
    KERNELS,
    SYNTHETIC_PROFILE,
    changed,
    git,
    init_repo,
    recorded,
)

KERNEL_TEST = FAKE_CLOCK_KERNELS + '''
import json, pathlib, random
import pytest

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())
FAKE_PROBE_NS[0] = round(SPEED.get("probe", 1e-3) * 1e9)  # the machine's memory speed in this run

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


class Repo:
    """A git repository with a kernel test; its history is the default SQLite file, or the
    PostgreSQL database that ``SOLGATE_HISTORY`` names."""

    def __init__(self, pytester, location=None):
        self.pytester = pytester
        self.path = pytester.path
        self.location = location or str(self.path / ".solgate" / "history.db")
        init_repo(self.path)
        pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
        (self.path / ".gitignore").write_text(".solgate/\n*.json.out\n")
        (self.path / "test_kernels.py").write_text(KERNEL_TEST)

    def git(self, *args):
        return git(self.path, *args)

    def commit(self, message, **speed):
        self.set_speed(**speed)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def set_speed(self, seconds=1e-3, **extra):
        (self.path / "speed.json").write_text(json.dumps({"seconds": seconds, **extra}))

    def run(self, *args, timing=FAKE_CLOCK_TIMING):
        result = self.pytester.runpytest(*timing, "--sol-profile=synthetic.toml", "--sol-json=out.json.out", *args)
        data = json.loads((self.path / "out.json.out").read_text())
        verdicts = {(m["test"].split("::")[-1]): m for m in data["measurements"]}
        return result, verdicts, data


    def seed(self, sols, environment=None, ceilings_id=None, seconds=None, contended=""):
        """A synthetic history: one commit and one clean run of test_kernel per SOL, oldest first,
        as if measured earlier on this runner. Returns the commits."""
        from pytest_solgate.declare.profiles import load_profile

        ceilings_id = ceilings_id or load_profile(self.path / "synthetic.toml").ceilings_id
        commits = []
        with self.store() as store:
            for i, sol in enumerate(sols):
                commits.append(self.commit(f"seed {i}"))
                run = RunInfo(id=f"seed-{i}-{commits[-1][:8]}", started_at=f"2026-11-01T00:{i:02d}:00+00:00",
                              commit=commits[-1], profile="synthetic", ceilings="measured")
                m = changed(
                    a_measurement(sol), test="test_kernels.py::test_kernel", t_sol=0.4e-3, seconds=seconds or 0.4e-3 / sol,
                    noise=0.002, ceilings_id=ceilings_id, environment=environment or {}, contended=contended,
                )
                store.record_run(run, [m])
        return commits


    def store(self):
        return history.open_store(self.location)


@pytest.fixture(params=["sqlite", "postgresql"])
def repo(request, pytester, monkeypatch):
    """The same repository with its history in each store."""
    if request.param == "sqlite":
        return Repo(pytester)
    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("SOLGATE_HISTORY", url)  # how CI passes a server's URL (a secret)
    return Repo(pytester, url)


@pytest.fixture
def sqlite_repo(pytester):
    """For what only a file can show: where it lives, and which option names it."""
    return Repo(pytester)


# The kernels run on the fake clock (solgate_testing.FAKE_CLOCK_KERNELS): the 1 ms kernel reads
# SOL 0.400 exactly, on any machine under any load. Five runs around SOL 0.39, +- 2 %: the window's
# noise floor is 8.0 %, and a 25 % slowdown is far beyond it.
STEADY = [0.390, 0.400, 0.380, 0.395, 0.385]


def test_a_window_of_runs_is_the_baseline_and_a_confirmed_regression_fails(repo):
    seeds = repo.seed(STEADY)
    head = repo.commit("slower", seconds=1.25e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=1, failed=1)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed", kernel["reason"]
    info = kernel["baseline"]
    assert info["runs"] == 5 and info["commit"] == seeds[-1] and info["oldest_commit"] == seeds[0]
    assert info["confirmed"] is True and info["change"] < -0.12 and info["noise_floor"] < 0.1
    result.stdout.fnmatch_lines([  # the verdict, the change and the floor first; the window, then why, after it
        "*regressed: test_kernel -17.9%, tolerance 5.0%, noise floor 8.0%",
        f"*  SOL 0.320 at {head[:10]} vs 0.390 over 5 baseline runs from {seeds[0][:10]} to {seeds[-1][:10]}",
        "*  regressed (beyond the tolerance and the noise: 99 % t prediction bound over 5 runs); confirmed by a "
        "re-measurement (SOL 0.320, then 0.320)*",
    ])
    assert verdicts["test_other"]["baseline"] is None  # never seeded: nothing to compare against


def test_the_window_is_the_last_k_runs(repo):
    repo.seed([0.2] * 3 + STEADY)  # older runs at another speed fall outside a window of 5
    repo.commit("same speed", seconds=1e-3)
    result, verdicts, _ = repo.run("--sol-baseline-window=5")
    assert verdicts["test_kernel"]["baseline"]["runs"] == 5
    assert verdicts["test_kernel"]["verdict"] == "pass", verdicts["test_kernel"]["reason"]
    result, verdicts, _ = repo.run("--sol-baseline-window=8", "--sol-no-save")
    # Not saved, yet the reports show the history its baseline came from (8 seeds + the run above).
    assert len(verdicts["test_kernel"]["trend"]) == 9
    # The 0.2 runs are an older level (a confirmed change point separates them): the window of 8 takes
    # only the 5 runs of this level. Before, they dragged the window down and widened its floor past 30 %.
    kernel = verdicts["test_kernel"]
    assert kernel["baseline"]["runs"] == 5 and abs(kernel["baseline"]["change"]) < 0.05, kernel["reason"]
    assert kernel["baseline"]["noise_floor"] < 0.1 and "level since the last confirmed change point at" in kernel["reason"]


def test_a_kernel_slow_only_in_its_first_block_passes(repo):
    repo.seed(STEADY)
    (repo.path / "test_kernels.py").write_text(FAKE_CLOCK_KERNELS + """
import pytest

def test_kernel(sol):
    # 2x slow while the first block is taken (nothing measured yet), normal speed afterwards.
    sol.measure(lambda: busy(2e-3 if not sol.measurements else 1e-3), bytes=0.4e6)
""")
    repo.commit("flaky first block")
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=1)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert ("a first block of samples read SOL 0.200 (a suspected regression); "
            "the re-measurement read 0.400 and did not confirm it") in kernel["reason"]
    assert kernel["sol"] == pytest.approx(0.4)  # the recorded result is the re-measurement


def test_a_drop_within_the_noise_floor_is_ambiguous_and_says_so(repo):
    repo.seed([0.40, 0.46, 0.34, 0.43, 0.37])  # +-10 % from run to run
    repo.commit("a little slower", seconds=1.2e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "ambiguous" and kernel["baseline"]["noise_floor"] > 0.2
    result.stdout.fnmatch_lines([
        # located at the test, not inside the plugin
        "*test_kernels.py:*: SolgateWarning: ambiguous: test_kernel -1?.?%, tolerance 5.0%, noise floor 3?.?%",
        "*  SOL * over 5 baseline runs from *",
        "*  within the run-to-run noise; the tolerance is below this window's noise floor of 3?.?%",
        "*  what to do: the noise is between runs (*% run to run, 0.1% within "
        "a run): the runner changes from run to run*raising max_regression would hide real regressions",
        "*-1?.?%, floor 3?.?%*ambiguous*test_kernels.py::test_kernel*",
    ])


def test_one_baseline_run_is_honest_about_its_unknown_noise(repo):
    a = repo.commit("A", seconds=1e-3)
    repo.run()
    repo.commit("B: slower", seconds=1.3e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "ambiguous" and kernel["baseline"]["commit"] == a
    assert kernel["baseline"]["runs"] == 1 and kernel["baseline"]["noise_floor"] is None
    result.stdout.fnmatch_lines(["*ambiguous: test_kernel -23.1%, tolerance 5.0%, noise floor unknown (one run)",
                                 "*  one baseline run cannot show the run-to-run noise*"])


def test_against_one_clean_run_a_drop_beyond_this_machines_noise_fails(repo):
    """The machine's run-to-run noise, from its runs of the same commit, judges a drop against a
    base with one clean run: a 3x slowdown is regressed, not `1 run ambiguous`."""
    from test_cli import solgate

    a = repo.commit("A", seconds=1e-3)
    repo.run("-k", "test_other")  # the machine's noise: another series, run twice at one commit
    repo.run()
    b = repo.commit("B: three times slower", seconds=3e-3)
    result, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed" and kernel["baseline"]["runs"] == 1, kernel["reason"]
    assert kernel["baseline"]["noise_floor"] is not None
    result.assert_outcomes(failed=1, passed=1)
    compared = solgate("compare", a, b, cwd=repo.path)  # compare follows the same rule
    (line,) = [line for line in compared.stdout.splitlines() if "test_kernel [default]" in line]
    assert compared.returncode == 1 and line.endswith("regressed"), compared.stdout + compared.stderr


def test_same_kernel_again_passes(repo):
    repo.seed(STEADY)
    repo.commit("docs only")
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    assert verdicts["test_kernel"]["verdict"] == "pass", verdicts["test_kernel"]["reason"]


def test_changed_ceilings_are_compared_on_time(repo):
    # The window was scored against other ceilings (SOL 0.8 at the same 1 ms): a changed profile
    # must not read as a 50 % regression.
    repo.seed([0.8] * 5, ceilings_id="recalibrated", seconds=1e-3)
    repo.commit("same speed")
    result, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert kernel["baseline"]["compared_on"] == "time" and abs(kernel["baseline"]["change"]) < 0.05
    assert "compared on time" not in kernel["reason"]  # said once per session, not per measurement
    said = " ".join(result.stdout.str().split())
    assert said.count("compared on time") == 1
    assert ("solgate: the ceilings of synthetic changed since the last run, so 1 measurement(s) "
            "(first: test_kernels.py::test_kernel [default]) are compared on time") in said  # which measurement
    assert ("Re-calibrated, raised by a re-check that ran faster, or an edited profile: nothing to do; if you did not "
            "mean to change them, `solgate profile synthetic` shows them") in said  # what to do
    # The next run's window still holds runs scored under the old ceilings, but the change is not
    # news any more: said in the session it happened, not in every session after (issue 44).
    repo.commit("same speed again")
    result, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["baseline"]["compared_on"] == "time"
    assert "compared on time" not in " ".join(result.stdout.str().split()), result.stdout.str()


def test_a_changed_environment_is_named_and_not_failed(repo):
    repo.seed(STEADY, environment={"torch": "0.0.1-elsewhere", "host": "another-runner"})
    repo.commit("slower, on a new torch", seconds=1.5e-3)
    result, verdicts, _ = repo.run()
    result.assert_outcomes(passed=2)
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "ambiguous", kernel["reason"]
    assert "would be a regression, but the baseline ran in another environment (host another-runner -> " in kernel["reason"]
    assert "torch 0.0.1-elsewhere -> " in kernel["reason"]
    assert kernel["baseline"]["environment_differs"]


def test_an_unresolvable_baseline_ref_is_a_usage_error(repo):
    repo.commit("A")
    result = repo.pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", "--sol-baseline=origin/nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sol-baseline=origin/nope: * has no such commit; fetch the ref*"])


def test_history_lives_at_the_git_top_level(sqlite_repo):
    repo = sqlite_repo
    (repo.path / "sub").mkdir()
    (repo.path / "sub" / "pytest.ini").write_text("[pytest]\n")
    (repo.path / "sub" / "test_here.py").write_text(KERNELS + "\ndef test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n")
    repo.commit("A")
    result = repo.pytester.runpytest(*FAST_TIMING, f"--sol-profile={repo.path / 'synthetic.toml'}", "sub")
    result.assert_outcomes(passed=1)
    assert (repo.path / ".solgate" / "history.db").exists()
    assert not (repo.path / "sub" / ".solgate").exists()


def test_change_points_are_found_at_the_commit_that_stepped(repo):
    from test_cli import solgate

    commits = repo.seed([0.400, 0.404, 0.397, 0.402, 0.399, 0.401, 0.300, 0.303, 0.298, 0.301, 0.299, 0.302])
    listing = solgate("history", "--changes", cwd=repo.path)
    assert listing.returncode == 0, listing.stderr
    (line,) = listing.stdout.strip().splitlines()
    assert line.startswith(f"{commits[6][:10]}   -25.0%") and "SOL 0.400 -> 0.300" in line
    trend = solgate("trend", "-o", "trend.html", cwd=repo.path)
    assert trend.returncode == 0, trend.stderr
    page = (repo.path / "trend.html").read_text()
    assert page.count('class="change"') == 1 and f"stepped at {commits[6][:10]}" in page


def test_dirty_run_is_recorded_but_never_a_baseline(repo):
    seeds = repo.seed(STEADY)
    repo.set_speed(seconds=2e-3)  # uncommitted change to a tracked file: dirty
    result, verdicts, data = repo.run()
    assert data["run"]["dirty"] is True and data["run"]["commit"] == seeds[-1]
    # auto on a dirty tree compares against HEAD itself, so the slow change is caught
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    repo.set_speed(seconds=1e-3)
    repo.commit("B")
    result, verdicts, _ = repo.run()
    # B's window is the clean runs, not the dirty slow one recorded after them
    assert verdicts["test_kernel"]["baseline"]["commit"] == seeds[-1]
    assert verdicts["test_kernel"]["baseline"]["runs"] == 5
    assert verdicts["test_kernel"]["verdict"] == "pass", verdicts["test_kernel"]["reason"]
    with repo.store() as store:
        assert [bool(r["dirty"]) for r in store.runs()] == [False] * 5 + [True, False]


def test_ancestor_walk_skips_commits_without_results(repo):
    seeds = repo.seed(STEADY)
    repo.commit("B: not measured", seconds=1e-3, note="b")
    repo.commit("C: not measured either", seconds=1e-3, note="c")
    repo.commit("D: slower", seconds=1.3e-3)
    result, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["baseline"]["commit"] == seeds[-1]
    assert verdicts["test_kernel"]["verdict"] == "regressed"


def test_baseline_none_and_explicit_ref(repo):
    seeds = repo.seed(STEADY)
    repo.commit("B", seconds=1.3e-3)
    result, verdicts, _ = repo.run("--sol-baseline=none")
    result.assert_outcomes(passed=2)
    assert verdicts["test_kernel"]["baseline"] is None
    repo.git("tag", "v1", seeds[-1])
    result, verdicts, _ = repo.run("--sol-baseline=v1", "--sol-no-save")
    assert verdicts["test_kernel"]["verdict"] == "regressed" and verdicts["test_kernel"]["baseline"]["commit"] == seeds[-1]


def test_tolerance_from_marker_and_option(repo):
    repo.seed(STEADY)
    repo.commit("B", seconds=1.25e-3, tolerance=0.5)
    result, verdicts, _ = repo.run("--sol-no-save")
    assert verdicts["test_kernel"]["verdict"] == "pass"  # the marker's 50 % wins
    repo.set_speed(seconds=1.25e-3)
    repo.commit("C")
    result, verdicts, _ = repo.run("--sol-max-regression=0.4", "--sol-baseline=HEAD~2")
    assert verdicts["test_kernel"]["verdict"] == "pass"


def test_no_save_records_nothing_and_outside_git_is_unknown(pytester, history_location):
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_k=KERNELS + "\ndef test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n")
    where = f"--sol-history={history_location}"
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", "--sol-no-save", where).assert_outcomes(passed=1)
    assert history.open_for_reading(history_location) is None  # not even empty tables
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", where).assert_outcomes(passed=1)
    with history.open_store(history_location) as store:
        (run,) = store.runs()
        assert run["commit_sha"] is None
        assert store.baseline_runs("test_k.py::test_k", "default", "synthetic", "measured", [], 10) == []


def test_history_option_and_ini(sqlite_repo):
    repo = sqlite_repo
    repo.commit("A")
    repo.run("--sol-history=elsewhere/h.db")
    assert (repo.path / "elsewhere" / "h.db").exists()
    repo.pytester.makeini("[pytest]\nsol_history = ini.db\n")
    repo.run()
    assert (repo.path / "ini.db").exists()


def test_run_records_every_field(repo):
    a = repo.commit("A")
    _, _, data = repo.run()
    with repo.store() as store:
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
    return recorded(noise=0.0, t_sol=sol * 1e-3, sol=sol)


def test_older_schema_is_migrated_not_thrown_away(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(sqlite.MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute(f"PRAGMA application_id = {sqlite.APPLICATION_ID}")
    db.execute("INSERT INTO runs (started_at, commit_sha, dirty, profile, ceilings) VALUES ('2026-01-01', ?, 0, 'synthetic', 'measured')", ("a" * 40,))
    db.execute("INSERT INTO measurements (run_id, test, name, profile, ceilings, sol, seconds, verdict, record_json) VALUES (1, 't.py::test_k', 'default', 'synthetic', 'measured', 0.5, 0.001, 'pass', ?)",
               (json.dumps(encode(a_measurement())),))
    db.commit()
    db.close()
    with sqlite.SqliteStore(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == sqlite.SCHEMA_VERSION
        (run,) = store.runs()
        assert run["run_uid"] == "legacy-1" and run["commit_sha"] == "a" * 40
        (base,) = store.baseline_runs("t.py::test_k", "default", "synthetic", "measured", ["a" * 40], 10)
        assert base.sol == 0.5 and base.commit == "a" * 40 and base.run_id == "legacy-1"
        assert store.record_run(a_run(), [a_measurement()])
        assert len(store.runs()) == 2


def test_a_run_is_written_once(history_location):
    with history.open_store(history_location) as store:
        assert store.record_run(a_run(), [a_measurement()]) is True
        assert store.record_run(a_run(), [a_measurement()]) is False
        assert len(store.results()) == 1
        assert store.integrity() == "ok"


def test_sqlite_runs_in_wal_mode(tmp_path):
    with sqlite.SqliteStore(tmp_path / "h.db") as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_foreign_and_corrupt_files_are_refused_and_left_alone(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("these are my notes\n" * 100)
    with pytest.raises(history.HistoryError, match="not a solgate history database"):
        sqlite.SqliteStore(text)
    assert text.read_text() == "these are my notes\n" * 100
    foreign = tmp_path / "other.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    with pytest.raises(history.HistoryError, match="not a solgate history .tables: customers."):
        sqlite.SqliteStore(foreign)
    assert foreign.read_bytes() == before


# --- one level of one series: what happens after the first regression --------------------------

def test_a_reverted_regression_leaves_the_window_and_its_relanding_is_caught_at_once(sqlite_repo):
    repo = sqlite_repo
    seeds = repo.seed(STEADY)
    repo.commit("C: slower", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    repo.commit("D: revert C", seconds=1e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "pass", verdicts["test_kernel"]["reason"]
    e = repo.commit("E: re-land C", seconds=1.25e-3)
    result, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    # Before: C's regressed run joined the window, its floor grew to 36 % and E was only ambiguous.
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert kernel["baseline"]["runs"] == 6 and kernel["baseline"]["oldest_commit"] == seeds[0]
    assert kernel["baseline"]["noise_floor"] < 0.1
    assert f"SOL 0.320 at {e[:10]}" in kernel["reason"] and "1 regressed run left out" in kernel["reason"]


def test_a_disturbed_run_in_the_window_does_not_hide_the_next_regression(sqlite_repo):
    repo = sqlite_repo
    # One run a neighbour slowed to half, in the middle (a one-commit outlier of the series), and one
    # at the newest commit (far off the others): neither widens the floor.
    repo.seed([0.390, 0.400, 0.380, 0.200, 0.395, 0.385, 0.390, 0.190])
    repo.commit("slower", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert kernel["baseline"]["noise_floor"] < 0.1
    assert "1 outlier run left out" in kernel["reason"] and "left out as far off the others: " in kernel["reason"]


def test_a_landed_step_becomes_the_level_once_the_next_commit_confirms_it(sqlite_repo):
    repo = sqlite_repo
    repo.seed(STEADY + [0.32, 0.32])  # a slowdown landed two commits ago and stayed
    repo.commit("same speed as the last two", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert kernel["baseline"]["runs"] == 2 and "level since the last confirmed change point at" in kernel["reason"]


def test_an_accepted_slowdown_is_the_new_level(repo):
    from test_cli import solgate

    repo.seed(STEADY)
    c = repo.commit("C: a deliberate slowdown (more precise)", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed"
    accepted = solgate("accept", c[:10], "test_kernel", "--reason", "exact softmax, 20 % slower", cwd=repo.path)
    assert accepted.returncode == 0, accepted.stderr
    assert f"accepted the level at {c[:10]} for 'test_kernel'" in accepted.stdout
    d = repo.commit("D: next change", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert kernel["baseline"]["commit"] == c and f"level since the accepted slowdown at {c[:10]}" in kernel["reason"]
    assert verdicts["test_other"]["verdict"] == "pass"  # the pattern named test_kernel only
    with repo.store() as store:
        (accept,) = store.accepts([d, c])
        assert accept["reason"] == "exact softmax, 20 % slower" and accept["pattern"] == "test_kernel"
    empty = solgate("accept", c, "--reason", " ", cwd=repo.path)
    assert empty.returncode == 2 and "--reason is empty" in empty.stderr
    unknown = solgate("accept", "nosuchref", "--reason", "x", cwd=repo.path)
    assert unknown.returncode == 2 and "'nosuchref' is not a commit" in unknown.stderr


# --- change points a reviewer can trust ------------------------------------------------------------

def changes(repo, *args):
    from test_cli import solgate

    listing = solgate("history", "--changes", *args, cwd=repo.path)
    assert listing.returncode == 0, listing.stderr
    return listing.stdout.strip().splitlines()


def test_a_step_at_the_newest_commit_is_placed_there_and_provisional(sqlite_repo):
    from test_cli import solgate

    commits = sqlite_repo.seed([0.400, 0.404, 0.397, 0.402, 0.399, 0.401, 0.300])
    (line,) = changes(sqlite_repo)
    # Before: listed on the innocent commit before it (a step needed two commits on each side).
    assert line.startswith(f"{commits[-1][:10]}   -25.1%") and "provisional: the newest commit" in line
    assert solgate("trend", "-o", "trend.html", cwd=sqlite_repo.path).returncode == 0
    page = (sqlite_repo.path / "trend.html").read_text()
    assert f"stepped at {commits[-1][:10]} (provisional)" in page
    listed = solgate("history", "--changes", "--json", cwd=sqlite_repo.path)
    (measurement,) = json.loads(listed.stdout)["measurements"]
    (step,) = measurement["steps"]
    assert step["commit"] == commits[-1] and step["after_commit"] == commits[-2] and step["provisional"] is True


def test_a_one_commit_glitch_is_an_outlier_not_two_steps(sqlite_repo):
    from test_cli import solgate

    commits = sqlite_repo.seed([0.400, 0.404, 0.397, 0.402, 0.280, 0.399, 0.401, 0.398])
    (line,) = changes(sqlite_repo)
    assert line.startswith(f"{commits[4][:10]}   -30.0%") and "outlier: one commit off its level, not a step" in line
    assert solgate("trend", "-o", "trend.html", cwd=sqlite_repo.path).returncode == 0
    page = (sqlite_repo.path / "trend.html").read_text()
    assert 'class="change"' not in page and 'class="outlier"' in page and f"outlier at {commits[4][:10]}" in page


def test_a_one_percent_step_is_not_listed_unless_asked(sqlite_repo):
    quiet = [0.4000, 0.4004, 0.3998, 0.4002, 0.3999, 0.4001, 0.4003, 0.3997]
    commits = sqlite_repo.seed(quiet + [v * 0.99 for v in quiet])  # 1 % on 0.05 % noise: real, but small
    assert changes(sqlite_repo) == ["no change points: no measurement's SOL stepped by 2.5% or more over the recorded commits"]
    (line,) = changes(sqlite_repo, "--min-change", "0.005")
    assert line.startswith(f"{commits[8][:10]}    -1.0%")


def test_a_zero_is_skipped_with_a_note(sqlite_repo):
    commits = sqlite_repo.seed([0.400, 0.404, 0.397, 0.402, 1e-9, 0.300, 0.303, 0.298, 0.301])
    with sqlite_repo.store() as store:  # a kernel that recorded SOL 0 (nothing declared, or a failure)
        store._rows("UPDATE measurements SET sol = 0 WHERE sol < 1e-6")
    lines = changes(sqlite_repo)
    assert lines[0].startswith(f"{commits[5][:10]}   -25.0%")
    assert lines[1] == "note: test_kernels.py::test_kernel [default] synthetic: 1 commit without a positive SOL skipped (zero or missing)"


# --- contention and interruption -------------------------------------------------------------------

PINNED = """
import os

# Every process of this test repository on one core: two runs at once really share it.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
"""


def test_two_runs_at_once_are_marked_contended_and_never_baselines(sqlite_repo, monkeypatch):
    import subprocess
    import sys
    import time

    from idle_machine import PROC_ROOT_VARIABLE

    monkeypatch.delenv(PROC_ROOT_VARIABLE)  # this machine's own /proc: the contention is real
    repo = sqlite_repo
    (repo.path / "conftest.py").write_text(PINNED)
    # Run B: a test that checks its results (untimed work, outside the device lock) until run A is
    # done, then measures. Run A, started while B works, measures a kernel on the same core. B waits
    # for A's end, not for a fixed time: on a loaded machine A's start-up alone took longer than 5 s.
    (repo.path / "test_b.py").write_text(KERNELS + """
import pathlib, time

def test_b(sol):
    done, started = pathlib.Path("a-done.out"), time.monotonic()
    while not done.exists() and time.monotonic() - started < 120:
        busy(0.05)
    sol.measure(lambda: busy(1e-4), bytes=1e3)
""")
    (repo.path / "test_a.py").write_text(KERNELS + "\ndef test_a(sol):\n    sol.measure(lambda: busy(2e-3), bytes=0.4e6)\n")
    repo.commit("A and B")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--sol-device=cpu", "--sol-min-time=0.5",
               "--sol-max-time=1", "--sol-profile=synthetic.toml"]
    b = subprocess.Popen([*command, "test_b.py", "--sol-json=b.json.out"], cwd=repo.path, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    time.sleep(3.0)  # B is past its start-up and spinning
    a = subprocess.run([*command, "test_a.py", "--sol-json=a.json.out", "-W", "default"], cwd=repo.path,
                       capture_output=True, text=True)
    (repo.path / "a-done.out").write_text("")
    b.communicate(timeout=120)
    assert a.returncode == 0, a.stdout + a.stderr
    (m,) = json.loads((repo.path / "a.json.out").read_text())["measurements"]
    # Two busy processes on one core: the tasks waited for it (CPU pressure), or, without PSI,
    # other processes kept it busy (busy time) or this process got little of it.
    assert m["contended"].startswith(("CPU pressure ", "other processes kept ", "this process got ")), m["contended"]
    assert any(note.startswith(f"contended: {m['contended']}") for note in m["notes"])
    assert "solgate: 1 measurement(s) taken while the machine was busy\n" in a.stdout
    with repo.store() as store:
        runs = store.baseline_runs("test_a.py::test_a", "default", "synthetic", "measured", [repo.git("rev-parse", "HEAD")], 10)
    assert [r.disturbed for r in runs] == ["contended"]


def test_contention_is_a_busy_core_on_a_cpu_and_another_run_on_a_gpu():
    from pytest_solgate.measure.contention import PROCESS_SHARE, Busy

    assert real_contention("", "r1", Busy(PROCESS_SHARE, 0.95, 2, False), on_cpu=True) == ""
    assert real_contention("", "r1", Busy(PROCESS_SHARE, 0.40, 2, True), on_cpu=True) == "this process got 40% of a core"
    busy = Busy(PROCESS_SHARE, 0.40, 2, True)
    assert real_contention("run r2 pid 7", "r1", busy, on_cpu=False) == "another solgate run (run r2 pid 7) was using this device"
    assert real_contention("run r1 pid 8", "r1", busy, on_cpu=False) == ""  # our own xdist worker
    assert real_contention("", "r1", busy, on_cpu=False) == ""  # a GPU's share is not visible from the host


def test_a_contended_run_cannot_fail_as_regressed():
    from pytest_solgate import results
    from pytest_solgate.judge import budget as budgets
    from pytest_solgate.judge import verdict
    from pytest_solgate.judge import window as windows
    from solgate_testing import changed

    window = windows.BaselineWindow(runs=tuple(
        windows.BaselineRun(commit=f"{i:040x}", run_id=f"r{i}", sol=sol, seconds=0.4e-3 / sol, noise=0.002)
        for i, sol in enumerate(STEADY)))
    slow = changed(a_measurement(0.2), t_sol=0.4e-3, seconds=2e-3, noise=0.002)
    assert verdict.judge(slow, budgets.Budget(), window, windows.JudgeSettings()).verdict == results.REGRESSED
    busy = changed(slow, contended="this process got 40% of a core while sampling: other processes were running on it")
    got = verdict.judge(busy, budgets.Budget(), window, windows.JudgeSettings())
    assert got.verdict == results.AMBIGUOUS
    assert "would be a regression, but the machine was busy while it measured (this process got 40%" in got.judgement.reason


def test_an_interrupted_session_is_recorded_as_interrupted_and_never_a_baseline(sqlite_repo):
    repo = sqlite_repo
    (repo.path / "test_kernels.py").write_text(FAKE_CLOCK_KERNELS + """
import os, signal

def test_1(sol):
    sol.measure(lambda: busy(1e-3), bytes=0.4e6)

def test_2(sol):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, after one test of seven

""" + "".join(f"def test_{i}(sol):\n    sol.measure(lambda: busy(1e-3), bytes=0.4e6)\n\n" for i in range(3, 8)))
    head = repo.commit("seven tests")
    result = repo.pytester.runpytest_subprocess(*FAKE_CLOCK_TIMING, "--sol-profile=synthetic.toml", "--sol-json=out.json.out")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*solgate: the session was interrupted: this run (1 measurement(s)) is recorded as "
                                 "interrupted, never used as a baseline, and its reports are partial*", "*KeyboardInterrupt*"])
    data = json.loads((repo.path / "out.json.out").read_text())
    assert data["run"]["status"] == "interrupted" and len(data["measurements"]) == 1
    with repo.store() as store:
        (run,) = store.runs()
        assert run["status"] == "interrupted"
        (base,) = store.baseline_runs("test_kernels.py::test_1", "default", "synthetic", "measured", [head], 10)
        assert base.disturbed == "interrupted"
    repo.commit("next")
    _, verdicts, _ = repo.run("-k", "test_1")
    assert verdicts["test_1"]["baseline"] is None  # the interrupted run is not a window


# --- the schema: version 4 (SQLite) / 2 (PostgreSQL) adds the run's status and the accepts ------

def test_a_version_3_history_opens_reads_and_gains_status_and_accepts(tmp_path):
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    for step in sqlite.MIGRATIONS[:3]:
        db.executescript(step)
    db.execute("PRAGMA user_version = 3")
    db.execute(f"PRAGMA application_id = {sqlite.APPLICATION_ID}")
    db.execute("INSERT INTO runs (run_uid, started_at, commit_sha, dirty, profile, ceilings) VALUES ('old', '2026-11-01', ?, 0, 'synthetic', 'measured')", ("a" * 40,))
    db.execute("INSERT INTO measurements (run_id, test, name, profile, ceilings, sol, seconds, verdict, record_json) VALUES (1, 't.py::test_k', 'default', 'synthetic', 'measured', 0.5, 0.001, 'pass', ?)",
               (json.dumps(encode(a_measurement())),))
    db.commit()
    db.close()
    with sqlite.SqliteStore(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == sqlite.SCHEMA_VERSION == 4
        (run,) = store.runs()
        assert run["status"] == "complete" and run["run_uid"] == "old"
        (base,) = store.baseline_runs("t.py::test_k", "default", "synthetic", "measured", ["a" * 40], 10)
        assert base.sol == 0.5 and base.disturbed == ""
        assert store.accepts(["a" * 40]) == []
        assert store.record_accept({"commit_sha": "a" * 40, "pattern": "*", "reason": "r", "accepted_at": "2026-12-03"})
        assert not store.record_accept({"commit_sha": "a" * 40, "pattern": "*", "reason": "r", "accepted_at": "2026-12-03"})


def test_a_version_1_postgres_history_is_migrated_in_place(postgres_url):
    from pytest_solgate.record import postgres

    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for statement in postgres.MIGRATIONS[0].split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("UPDATE solgate.meta SET value = '1' WHERE key = 'schema_version'")
        conn.execute("INSERT INTO solgate.runs (run_uid, started_at, commit_sha, dirty) VALUES ('old', '2026-11-01', %s, 0)", ("a" * 40,))
        conn.execute("INSERT INTO solgate.measurements (run_id, test, name, profile, ceilings, sol, seconds, verdict, record_json) "
                     "SELECT id, 't.py::test_k', 'default', 'synthetic', 'measured', 0.5, 0.001, 'pass', %s FROM solgate.runs",
                     (json.dumps(encode(a_measurement())),))
    with history.open_store(postgres_url) as store:
        (run,) = store.runs()
        assert run["status"] == "complete"
        (base,) = store.baseline_runs("t.py::test_k", "default", "synthetic", "measured", ["a" * 40], 10)
        assert base.sol == 0.5
        assert store.record_accept({"commit_sha": "a" * 40, "pattern": "*", "reason": "r", "accepted_at": "2026-12-03"})
        assert not store.record_accept({"commit_sha": "a" * 40, "pattern": "*", "reason": "r", "accepted_at": "2026-12-03"})
        assert [a["reason"] for a in store.accepts(["a" * 40])] == ["r"]


def test_compare_and_accept_say_when_a_commits_runs_were_all_contended(sqlite_repo):
    from test_cli import solgate

    (base,) = sqlite_repo.seed([0.40], contended="CPU pressure 90%: tasks waited for a CPU")
    (head,) = sqlite_repo.seed([0.30])
    compared = solgate("compare", base, head, cwd=sqlite_repo.path)
    assert compared.returncode == 2, compared.stdout + compared.stderr
    assert "none of its 1 recorded run(s) can be a baseline: 1 contended (the machine was busy" in compared.stderr
    listed = solgate("history", cwd=sqlite_repo.path).stdout.splitlines()
    assert [line.endswith("(contended: the machine was busy)") for line in listed[1:]] == [True, False], listed
    page = sqlite_repo.path.parent / "trend.html"
    assert solgate("trend", "-o", str(page), cwd=sqlite_repo.path).returncode == 0
    assert "its run was contended (the machine was busy): no clean run" in page.read_text()
    accepted = solgate("accept", base, "--reason", "slower on purpose", cwd=sqlite_repo.path)
    assert accepted.returncode == 0 and f"{base[:10]} has no clean run of these tests (1 recorded, 1 contended)" \
        in accepted.stderr, accepted.stderr


def test_compare_skips_what_was_not_gated_and_never_compares_a_commit_with_itself(sqlite_repo):
    from test_cli import solgate

    repo = sqlite_repo
    commits = repo.seed(STEADY + [0.30])
    head = commits[-1]
    with repo.store() as store:  # HEAD also ran its Triton kernel under the interpreter: not gated
        interpreted = changed(a_measurement(0.05), test="test_kernels.py::test_triton", backend="triton-interpreter",
                              verdict="not-gated", reason="TRITON_INTERPRET=1: the Triton interpreter's timings mean nothing")
        store.record_run(RunInfo(id="interp", started_at="2026-11-02T00:00:00+00:00", commit=head, profile="synthetic",
                                 ceilings="measured"), [interpreted])
    itself = solgate("compare", head, head, cwd=repo.path)
    assert itself.returncode == 2 and "are the same commit" in itself.stderr, itself.stdout + itself.stderr
    compared = solgate("compare", commits[-2], head, cwd=repo.path)
    (kernel,) = [line for line in compared.stdout.splitlines() if "test_kernel [default]" in line]
    assert " 0.385 " in kernel and kernel.endswith("ambiguous")  # BASE's own one run: no floor yet
    (triton,) = [line for line in compared.stdout.splitlines() if "test_triton" in line]
    assert triton.endswith("not gated (TRITON_INTERPRET=1)")


def test_a_memory_bound_kernel_is_judged_relative_to_the_memory_probe_across_commits(pytester):
    """Real git commits, real pytest runs: a run while the memory ran 15 % slow (kernel and probe
    alike) passes, and stays in the window; a commit that slows the kernel by 25 % at the usual
    memory speed is caught at once. Raw, the first would read -13 % against a flat window."""
    repo = Repo(pytester)
    for i in range(4):
        repo.commit(f"c{i}")
        repo.run()
    repo.commit("same code, slower memory", seconds=1.15e-3, probe=1.15e-3)
    result, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert kernel["baseline"]["by_probe"] and abs(kernel["baseline"]["change"]) < 0.005
    assert abs(kernel["baseline"]["raw_change"] + 0.13) < 0.005
    assert "relative to the memory probe" in kernel["reason"]
    repo.commit("slower code", seconds=1.25e-3)
    result, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    assert abs(verdicts["test_kernel"]["baseline"]["change"] + 0.2) < 0.005


def test_a_run_on_a_machine_in_a_state_the_window_never_saw_is_ambiguous_not_regressed(pytester):
    """The memory probe 35 % slow and the kernel 60 % slow (it follows the memory only in part):
    a disturbed minute of the machine, not the commit; the next run in the usual state decides."""
    repo = Repo(pytester)
    for i in range(4):
        repo.commit(f"c{i}")
        repo.run()
    repo.commit("same code, the machine in another state", seconds=1.6e-3, probe=1.35e-3)
    result, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "ambiguous", kernel["reason"]
    assert "the memory probe took 35.0% longer than over the baseline runs" in kernel["reason"]
    result.assert_outcomes(passed=2)
    repo.commit("the machine is back", seconds=1e-3, probe=1e-3)
    result, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "pass", verdicts["test_kernel"]["reason"]


def test_after_an_unaccepted_regression_the_next_commit_stays_red_and_names_where_the_level_fell(sqlite_repo):
    repo = sqlite_repo
    repo.seed(STEADY)
    c = repo.commit("C: slower", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    assert "the level fell at" not in verdicts["test_kernel"]["reason"]  # C itself: the fall is its own
    # D, E and F: innocent changes on top. From E on the step at C is a confirmed change point, and
    # it still does not become the level (before: it did, and E passed): red until reverted or accepted.
    for name in "DEF":
        repo.commit(f"{name}: an innocent change on top", seconds=1.25e-3)
        _, verdicts, _ = repo.run()
        kernel = verdicts["test_kernel"]
        assert kernel["verdict"] == "regressed", (name, kernel["reason"])
        assert f"the level fell at {c[:10]} (regressed there, neither reverted nor accepted" in kernel["reason"], kernel["reason"]
        assert " at ?" not in kernel["reason"], kernel["reason"]  # no level start named that is not one


def test_after_a_revert_and_a_relanding_later_commits_name_the_relanding(sqlite_repo):
    repo = sqlite_repo
    repo.seed(STEADY)
    repo.commit("C: slower", seconds=1.25e-3)
    repo.run()
    repo.commit("D: revert C", seconds=1e-3)
    repo.run()
    e = repo.commit("E: re-land C", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    repo.commit("F: an innocent change on top", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed", kernel["reason"]
    # before: C's fall ended at the revert, and nothing was named
    assert f"the level fell at {e[:10]} (regressed there" in kernel["reason"], kernel["reason"]


def test_on_a_pull_request_a_regression_inherited_from_the_base_is_named_and_does_not_fail_it(sqlite_repo, monkeypatch):
    repo = sqlite_repo
    repo.seed(STEADY)
    c = repo.commit("C: slower, landed unaccepted", seconds=1.25e-3)
    for _ in range(2):  # main's job, and a re-run of it
        _, verdicts, _ = repo.run()
        assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    base = repo.commit("D: on main, not measured yet (one run at the new level: the step is not confirmed)", seconds=1.25e-3)
    repo.git("checkout", "-q", "-b", "feature")
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    repo.commit("E: the PR's own change, no slower than its base", seconds=1.25e-3)
    result, verdicts, _ = repo.run(f"--sol-baseline={base}")
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert f"the level fell at {c[:10]} in the base" in kernel["reason"], kernel["reason"]
    assert result.ret == 0
    repo.commit("F: the PR slows it further", seconds=1.6e-3)
    _, verdicts, _ = repo.run(f"--sol-baseline={base}")
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]  # its own change still fails
    monkeypatch.delenv("GITHUB_EVENT_NAME")
    repo.commit("G: back to the base's speed", seconds=1.25e-3)
    _, verdicts, _ = repo.run(f"--sol-baseline={base}")
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]  # not a PR: red as on main


def test_compare_judges_the_two_commits_it_names_each_by_its_own_runs(sqlite_repo):
    """Issue 44 item 4: B a regression, C no change measured alike: `compare B C` read `regressed`
    against A's level (B's failed runs were left out as the gate leaves them); a revert of B read
    `ambiguous`. Now B's own runs are the base (its SOL in the base column)."""
    from test_cli import solgate

    repo = sqlite_repo
    repo.seed(STEADY)
    slower = repo.commit("slower", seconds=1.25e-3)
    for _ in range(3):
        _, verdicts, _ = repo.run()
        assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    unchanged = repo.commit("no change to the kernel", seconds=1.25e-3)
    repo.run()
    compared = solgate("compare", slower, unchanged, cwd=repo.path)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    (kernel,) = [line for line in compared.stdout.splitlines() if "test_kernel [default]" in line]
    assert kernel.split()[2:4] == ["0.320", "0.320"] and kernel.endswith("pass"), compared.stdout
    assert f"0 regressed at {unchanged[:10]} against {slower[:10]}" in compared.stdout
    assert f"at {slower[:10]} itself" in compared.stdout
    reverted = repo.commit("revert", seconds=1e-3)
    repo.run()
    for base in (slower, unchanged):  # three runs, then one run, of the slow level
        compared = solgate("compare", base, reverted, cwd=repo.path)
        (kernel,) = [line for line in compared.stdout.splitlines() if "test_kernel [default]" in line]
        assert compared.returncode == 0 and kernel.split()[-1] in ("pass", "improved"), compared.stdout


def test_a_slowdown_read_ambiguous_stays_out_of_the_window_the_revert_is_judged_against(sqlite_repo):
    """Issue 44 item 5, the newcomer's sequence: a 1.26x slowdown after the first clean runs reads
    `ambiguous` (the window cannot tell yet); it stayed in the window, and the revert then read a
    noise floor of 99.8 %. Now it is left out, and said so."""
    repo = sqlite_repo
    repo.seed([0.400])
    repo.commit("1.26x slower", seconds=1.26e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "ambiguous", verdicts["test_kernel"]["reason"]
    assert "two" in verdicts["test_kernel"]["reason"]  # how many clean runs the gate needs before it can fail
    repo.commit("revert", seconds=1e-3)
    _, verdicts, _ = repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["baseline"]["runs"] == 1 and "1 ambiguous slow run left out" in kernel["reason"], kernel["reason"]


GRAD_MODE_TEST = FAKE_CLOCK_KERNELS + '''
import json, pathlib
import torch

SPEED = json.loads(pathlib.Path(__file__).with_name("speed.json").read_text())
MODES = pathlib.Path(__file__).with_name("modes.out")

def kernel():
    with MODES.open("a") as out:
        out.write(f"{torch.is_grad_enabled()} {torch.is_inference_mode_enabled()}\\n")
    busy(SPEED["seconds"])

def test_kernel(sol):
    with torch.inference_mode():
        sol.measure(kernel, bytes=0.4e6)
'''


def test_the_re_measurement_of_a_suspected_regression_runs_under_the_test_bodys_torch_modes(sqlite_repo):
    # The confirmation runs after the body has left its `with torch.inference_mode():`; a step run
    # bare there records autograd's graph and reads slower than what it confirms.
    sqlite_repo.seed(STEADY)
    (sqlite_repo.path / "test_kernels.py").write_text(GRAD_MODE_TEST)
    sqlite_repo.commit("40 % slower", seconds=1.4e-3)
    result, verdicts, _ = sqlite_repo.run()
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed" and kernel["baseline"]["confirmed"] is True, kernel["reason"]
    modes = (sqlite_repo.path / "modes.out").read_text().splitlines()
    assert len(modes) > 20 and set(modes) == {"False True"}, sorted(set(modes))
