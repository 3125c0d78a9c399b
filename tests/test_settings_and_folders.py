"""Settings and the folders they name (issue 38 items 1-6, 13, 16): one history and one state folder
for the plugin and every command, whichever directory each starts in; a per-user cache that cannot
be written costs a calibration, never a test; warnings at the user's code; a profile id that the
user's own settings changed is named, with how to keep it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import types

import pytest

from solgate_testing import FAKE_CLOCK_KERNELS, FAKE_CLOCK_TIMING, FAST_TIMING, SYNTHETIC_PROFILE, git, init_repo

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the CPU profile reads torch's facts")

PASSING = """
    def test_one(sol):
        sol.measure(lambda: busy(1e-3), bytes=0.4e6)

    def test_two(sol):
        sol.measure(lambda: busy(1e-3), bytes=0.4e6)
"""


def solgate(*args, cwd, env=None):
    import os

    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def fake_calibration():
    """The CPU calibration with fixed figures (1 GB/s, 1 GFLOP/s): the real cpu_profile, its cache
    and its messages, without the seconds of measuring, handed to a session as a stand-in's
    platform (``plugins``). A test appends to ``rechecks`` what the next sessions' re-checks read,
    as shares of those figures."""
    import functools

    from fake_gpu import StandIn

    from pytest_solgate.measure import calibrate
    from pytest_solgate.measure.platform import Platform

    figures = (1.0, {"copy": 1.0}, {"fp32": 0.001, "fp64": 0.0005}, {"bandwidth": 0.01})
    rechecks: list[float] = []  # what the next sessions' re-checks read, as shares of the calibration (else 1.0)

    def recheck(torch, *args, **kwargs):
        share = rechecks.pop(0) if rechecks else 1.0
        return share * figures[0], {"copy": share * figures[1]["copy"]}, {k: share * v for k, v in figures[2].items()}

    profile = functools.partial(calibrate.cpu_profile, calibration=lambda torch, *a, **k: figures, recheck=recheck)
    return types.SimpleNamespace(rechecks=rechecks, plugins=[StandIn(Platform(cpu_profile=profile))])


# --- 13: --help ---------------------------------------------------------------------------------


def test_help_prints_every_options_text_including_a_percent_sign(pytester):
    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = " ".join(result.stdout.str().split())  # argparse wraps the help over lines
    assert "target relative 95% half-width of the median" in text
    assert "option_strings" not in text  # argparse's dict, printed where a lone % was


def test_the_warmup_time_option_sets_how_long_the_warm_up_runs(suite):
    # The calls before the first sample's memory probe are the warm-up's. A fake kernel's call takes
    # no wall time: a warm-up of 0 s is its first call and a few more, one of 0.5 s (wall time, as
    # every warm-up) hundreds more on any machine.
    body = """
        WARM_UP = [0, True]  # calls so far, and whether no sample was taken yet

        def kernel():
            WARM_UP[0] += WARM_UP[1]
            busy(1e-3)

        @pytest.fixture
        def sol_clock():
            def probe():  # after each sample, never in the warm-up
                WARM_UP[1] = False
                FAKE_NS[0] += FAKE_PROBE_NS[0]
            return CpuClock(now=lambda: (FAKE_NS[0],) * 3, probe=probe)

        def test_one(sol):
            WARM_UP[:] = [0, True]  # an in-process run may find the module of the run before
            sol.measure(kernel, bytes=0.4e6)
            print(f"warm-up calls={WARM_UP[0]}")
    """
    counts = []
    for seconds in ("0", "0.5"):
        result = suite(body, f"--sol-warmup-time={seconds}", "-s", "--sol-no-save", fake_clock=True)
        result.assert_outcomes(passed=1)
        counts.append(int(next(line for line in result.stdout.lines if "warm-up calls=" in line).rsplit("=", 1)[1]))
    assert counts[0] <= 10 and counts[1] > 100, counts


# --- 6: a warning points at the test, not at the plugin -----------------------------------------


def test_a_gpu_option_on_the_cpu_warns_at_the_tests_measure_call(suite):
    result = suite("""
        def test_one(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.4e6)
    """, "--sol-lock-clocks=max", fake_clock=True)
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    at = next(i for i, line in enumerate(lines) if "SolgateWarning: --sol-lock-clocks=max" in line)
    # The location is the test module's sol.measure line, where the user can act; never engine.py.
    assert lines[at].split(": SolgateWarning")[0].rsplit("/", 1)[-1].startswith("test_kernels.py:"), lines[at]
    assert "sol.measure(" in lines[at + 1]
    assert not any("pytest_solgate" in line and "SolgateWarning" in line for line in lines)


# --- 2: a relative SOLGATE_STATE_DIR is one folder from any subdirectory -------------------------


def test_a_relative_state_dir_from_a_subdirectory_is_the_one_solgate_import_reads(pytester, monkeypatch):
    init_repo(pytester.path)
    sub = pytester.path / "sub"
    sub.mkdir()
    (sub / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    (sub / "test_kernels.py").write_text(FAKE_CLOCK_KERNELS + textwrap.dedent(PASSING))
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "kernels")
    monkeypatch.setenv("SOLGATE_STATE_DIR", "state")
    monkeypatch.chdir(sub)
    unreachable = "postgresql://solgate@127.0.0.1:9/history?connect_timeout=2"
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", f"--sol-history={unreachable}")
    result.assert_outcomes(passed=2)
    # Spooled at the git top level's state/, not at sub/state/: where a command from the top looks.
    assert [p.suffix for p in (pytester.path / "state" / "spool").iterdir()] == [".json"]
    assert not (sub / "state").exists()
    status, said = solgate("import", "--spool", "--history", "h.db", cwd=pytester.path, env={"SOLGATE_STATE_DIR": "state"})
    assert status == 0 and said.startswith("1 spooled run(s) sent to"), said
    # and from the subdirectory too: the same folder
    status, said = solgate("history", "--history", "h.db", cwd=sub, env={"SOLGATE_STATE_DIR": "state"})
    assert status == 0 and "sub/test_kernels.py::test_one" in said, said


# --- 1: SOLGATE_STATE_DIR moves the calibration cache and the spool, never the history -----------


def test_the_state_dir_does_not_move_the_history_for_the_plugin_or_the_commands(pytester, monkeypatch, tmp_path):
    init_repo(pytester.path)
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_kernels=FAKE_CLOCK_KERNELS + textwrap.dedent(PASSING))
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "kernels")
    elsewhere = tmp_path / "shared-state"
    monkeypatch.setenv("SOLGATE_STATE_DIR", str(elsewhere))
    pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml").assert_outcomes(passed=2)
    assert (pytester.path / ".solgate" / "history.db").is_file()  # the plugin: the history keeps its place
    assert not (elsewhere / "history.db").exists()
    status, said = solgate("history", cwd=pytester.path, env={"SOLGATE_STATE_DIR": str(elsewhere)})
    assert status == 0 and "test_kernels.py::test_one" in said, said


# --- 3, 4: the per-user cache ----------------------------------------------------------------------


@needs_torch
def test_a_cache_variable_naming_a_file_measures_anyway_and_says_so_once(suite, pytester, monkeypatch, fake_calibration):
    blocker = pytester.path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("SOLGATE_CACHE_DIR", str(blocker))
    result = suite(PASSING, profile=False, fake_clock=True, plugins=fake_calibration.plugins)
    result.assert_outcomes(passed=2)
    said = [line for line in result.stdout.lines if "not cached" in line]
    assert len(said) == 1 and "$SOLGATE_CACHE_DIR" in said[0] and str(blocker) in said[0], result.stdout.str()


@needs_torch
def test_a_relative_xdg_cache_home_is_ignored(suite, pytester, monkeypatch, tmp_path, fake_calibration):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("SOLGATE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative-cache")
    suite(PASSING, profile=False, fake_clock=True, plugins=fake_calibration.plugins).assert_outcomes(passed=2)
    assert not (pytester.path / "relative-cache").exists()
    assert list((home / ".cache" / "pytest-solgate" / "profiles").glob("cpu-*.toml"))
    # An absolute one is the cache, as before.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    suite(PASSING, profile=False, fake_clock=True, plugins=fake_calibration.plugins).assert_outcomes(passed=2)
    assert list((tmp_path / "xdg" / "pytest-solgate" / "profiles").glob("cpu-*.toml"))


# --- 5: a budget glob's advice names this CPU's real id ----------------------------------------------


@needs_torch
def test_a_misspelt_cpu_glob_is_offered_this_cpus_real_id_before_any_calibration(pytester):
    import torch

    from pytest_solgate.measure import calibrate

    this_cpu = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    # The module imports no torch at collection, and nothing was ever calibrated (an empty cache).
    pytester.makepyfile(test_kernels="""
        import pytest

        @pytest.mark.sol(min={"cpu_*": 0.5})
        def test_k(sol):
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"'{this_cpu}'" in err and "cpu-0123456789" not in err, err


# --- 16: a profile id the user's own settings changed ----------------------------------------------


@needs_torch
def test_changing_torch_threads_names_the_new_profile_id_and_how_to_keep_the_old(suite, pytester, fake_calibration):
    import torch

    from pytest_solgate.measure import calibrate

    threads = torch.get_num_threads()
    before = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    first = suite(PASSING, profile=False, fake_clock=True, plugins=fake_calibration.plugins)
    first.assert_outcomes(passed=2)
    assert "profile id is now" not in first.stdout.str()
    conftest = f"import torch\ntorch.set_num_threads({threads + 1})\n"
    try:
        second = suite(PASSING, profile=False, fake_clock=True, files={"conftest.py": conftest},
                       plugins=fake_calibration.plugins)
        after = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    finally:
        torch.set_num_threads(threads)
    second.assert_outcomes(passed=2)
    said = [line for line in second.stdout.lines if "profile id is now" in line]
    assert len(said) == 1, second.stdout.str()
    assert after in said[0] and before in said[0] and f"torch.set_num_threads({threads})" in said[0]
    # Back to the old count: said again (the id changed again), and a run that changes nothing is quiet.
    (pytester.path / "conftest.py").unlink()
    third = suite(PASSING, profile=False, fake_clock=True, plugins=fake_calibration.plugins)
    assert f"torch.set_num_threads({threads + 1})" in third.stdout.str()
    assert "profile id is now" not in suite(PASSING, profile=False, fake_clock=True,
                                            plugins=fake_calibration.plugins).stdout.str()


def test_an_id_change_on_another_machine_is_not_the_users_doing():
    from pytest_solgate.measure.calibrate import id_change

    here = {"cpu": "X", "cores": 2, "threads": 2, "torch": "2.13.0", "python": "3.11.7", "machine": "x86_64"}
    assert id_change(here, {**here, "threads": 1}) == {"threads": (2, 1)}
    assert id_change(here, {**here, "cores": 4, "threads": 4}) == {}  # another machine: a new id is expected
    assert id_change(here, here) == {}


def test_json_of_the_last_id_is_what_the_plugin_wrote(tmp_path):
    """A damaged marker is ignored, never an error."""
    from pytest_solgate.measure import calibrate

    (tmp_path / calibrate.LAST_CPU_FILE).write_text("{not json")
    said = []
    calibrate.say_id_change(tmp_path, said.append, {"cpu": "X", "threads": 1})
    assert said == [] and json.loads((tmp_path / calibrate.LAST_CPU_FILE).read_text())["fingerprint"]["threads"] == 1
    assert calibrate.last_session_fingerprint(tmp_path) == {"cpu": "X", "threads": 1}


@needs_torch
def test_a_project_is_told_of_its_own_id_changes_only_and_detect_names_the_id_its_tests_use(pytester, fake_calibration):
    """A brand-new project pinned to other torch threads than the default (the quickstart's conftest
    pins one) was told "threads 2 -> 1 ... To keep cpu-...: torch.set_num_threads(2)", because the
    last id was remembered per user and another project had run at the default; and `solgate
    detect`, run without the tests' conftest, showed an id the tests do not use (issue 44)."""
    import torch

    from pytest_solgate.measure import calibrate

    threads = torch.get_num_threads()
    default_id = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    pinned_id = f"cpu-{calibrate.fingerprint_key({**calibrate.cpu_fingerprint(torch), 'threads': threads + 1})}"
    one_thread_id = f"cpu-{calibrate.fingerprint_key({**calibrate.cpu_fingerprint(torch), 'threads': 1})}"
    for name in ("other", "new"):
        project = pytester.path / name
        project.mkdir()
        init_repo(project)
        (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        (project / "test_kernels.py").write_text(FAKE_CLOCK_KERNELS + textwrap.dedent(PASSING))
    (pytester.path / "new" / "conftest.py").write_text(f"import torch\ntorch.set_num_threads({threads + 1})\n")

    def session(name):
        try:
            result = pytester.runpytest(*FAKE_CLOCK_TIMING, name, plugins=fake_calibration.plugins)
        finally:
            torch.set_num_threads(threads)  # the new project's conftest set this process's torch
        result.assert_outcomes(passed=2)
        return result.stdout.str()

    def detect(name):
        done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "detect", "--device", "cpu"],
                              cwd=pytester.path / name, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip(), " ".join(done.stderr.split())

    assert "profile id is now" not in session("other")  # another project, at torch's default threads
    # Before its tests ever ran, detect names the id at torch's default and says the tests' may differ.
    printed, said = detect("new")
    assert printed == default_id and "no test of this project has run here yet" in said, said
    if threads != 1:
        assert f"the quickstart's conftest pins torch.set_num_threads(1): {one_thread_id}" in said
    # The new project's first session: no change of its own to tell.
    assert "profile id is now" not in session("new")
    # From then on detect names the id its tests use, though it runs without their conftest.
    printed, said = detect("new")
    assert printed == pinned_id, said
    assert f"at {threads + 1} torch thread(s), as this project's tests last ran here" in said
    assert f"without their conftest torch has {threads} here, which is another id ({default_id})" in said
    # The other project's next session is not told of the new project's threads either.
    assert "profile id is now" not in session("other")
    assert detect("other")[0] == default_id


# --- issue 44 item 1: the ceilings change only when they really do -----------------------------------


@needs_torch
def test_runs_that_change_nothing_are_not_told_the_ceilings_changed(pytester, fake_calibration):
    """Every run after the first once said "1 measurement(s) compared on time: the ceilings changed
    since their baselines", with no recalibration: each session's brief re-check raised a ceiling by
    its own noise (0.5-1 % on the development VM), and a raised ceiling is a new ceilings identity.
    Runs on consecutive commits, on this CPU's own calibration, as a new project makes them."""
    # What each later session's re-check reads, as a share of the calibration: within its own
    # noise, a little faster each time; then a truly faster machine; then a slower one.
    fake_calibration.rechecks.extend([1.01, 1.02, 1.03, 1.2, 1.0])
    init_repo(pytester.path)
    (pytester.path / ".gitignore").write_text(".solgate/\n__pycache__/\n*.json\n")
    pytester.makepyfile(test_kernels=FAKE_CLOCK_KERNELS + textwrap.dedent(PASSING))

    def run(commit):
        git(pytester.path, "add", "-A")
        git(pytester.path, "commit", "-q", "--allow-empty", "-m", commit)
        result = pytester.runpytest(*FAKE_CLOCK_TIMING, "--sol-json=out.json", plugins=fake_calibration.plugins)
        result.assert_outcomes(passed=2)
        baselines = [m["baseline"] for m in json.loads((pytester.path / "out.json").read_text())["measurements"]]
        return " ".join(result.stdout.str().split()), baselines  # the session's lines wrap at 80 columns

    first, _ = run("first")
    assert "measuring this CPU's ceilings once" in first
    for commit in ("second", "third", "fourth"):
        said, baselines = run(commit)
        assert "compared on time" not in said and "raised them" not in said, said
        assert all(b["compared_on"] == "sol" for b in baselines), baselines
    # A re-check well beyond its noise raises the ceilings: said once, in that session, naming
    # the first measurement and what to do ...
    said, baselines = run("fifth")
    assert "raised them" in said and all(b["compared_on"] == "time" for b in baselines)
    assert "the ceilings of cpu-" in said and "changed since the last run, so 2 measurement(s) (first: test_kernels.py::test_one [default]) are compared on time" in said
    assert "nothing to do; if you did not mean to change them, `solgate profile cpu-" in said
    # ... and not in the next session, whose windows still hold runs from before the raise.
    said, baselines = run("sixth")
    assert all(b["compared_on"] == "time" for b in baselines) and "compared on time" not in said, said
