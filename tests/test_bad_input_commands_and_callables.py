# ruff: noqa: F811  (test_history's repo fixtures are imported, and taken as arguments)
"""Bad input to the commands and to ``sol.measure``: commits the commands are given (ambiguous
short shas, accepts that could never apply), the ini options they read as pytest does, arguments
checked before a history is opened, and callables that cannot be timed. Each case through the real
CLI, real git repositories and real pytest runs, refused in one line that names the thing at fault."""

import collections
import json
import subprocess

import pytest
from test_history import STEADY, sqlite_repo  # noqa: F401 (a fixture)

from test_cli import solgate


def many_commits(path, count):
    """``count`` empty commits on top of HEAD in one ``git fast-import`` (deterministic shas: fixed
    dates and messages), so that some short prefixes start two commits."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True, check=True).stdout.strip()
    stream = []
    for i in range(count):
        message = f"filler {i}\n"
        stream.append(f"commit refs/heads/main\ncommitter t <t@example.invalid> {1_700_000_000 + i} +0000\n"
                      f"data {len(message)}\n{message}" + (f"from {head}\n" if i == 0 else "") + "\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input="".join(stream), text=True, check=True)


def ambiguous_prefix(repo):
    """A 4-digit prefix that starts two or more commits of the repository, and those commits."""
    shas = repo.git("rev-list", "--all").split()
    groups = collections.defaultdict(list)
    for sha in shas:
        groups[sha[:4]].append(sha)
    prefix, candidates = next((p, c) for p, c in sorted(groups.items()) if len(c) > 1)
    # git itself: the prefix is ambiguous (rev-parse --verify prints nothing for it)
    assert subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{prefix}^{{commit}}"], cwd=repo.path,
                          capture_output=True).returncode != 0
    return prefix, sorted(candidates)


@pytest.fixture
def crowded_repo(sqlite_repo):
    sqlite_repo.seed(STEADY)
    many_commits(sqlite_repo.path, 1200)
    return sqlite_repo


def test_an_ambiguous_short_sha_is_named_ambiguous_with_its_candidates_in_every_command(crowded_repo):
    prefix, candidates = ambiguous_prefix(crowded_repo)
    said = f"'{prefix}' is ambiguous: it is the start of {len(candidates)} commits ({candidates[0][:12]}"
    accept = solgate("accept", prefix, "--reason", "x", cwd=crowded_repo.path)
    assert accept.returncode == 2 and said in accept.stderr and "accept:" in accept.stderr, accept.stderr
    assert "is not a commit" not in accept.stderr
    compare = solgate("compare", prefix, "HEAD", cwd=crowded_repo.path)
    assert compare.returncode == 2 and said in compare.stderr and "compare:" in compare.stderr, compare.stderr
    result = crowded_repo.pytester.runpytest("--sol-device=cpu", "--sol-profile=synthetic.toml", f"--sol-baseline={prefix}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--sol-baseline={prefix}: {said}*give more digits*"])
    for candidate in candidates[:6]:
        assert candidate[:12] in accept.stderr


def test_an_accept_whose_pattern_matches_no_recorded_test_is_refused_with_the_close_matches(sqlite_repo):
    sqlite_repo.seed(STEADY)
    head = sqlite_repo.git("rev-parse", "HEAD")
    typo = solgate("accept", head, "test_kernl*", "--reason", "x", cwd=sqlite_repo.path)
    assert typo.returncode == 2, typo.stdout
    assert "the pattern 'test_kernl*' matches no recorded test" in typo.stderr and "did you mean 'test_kernel'?" in typo.stderr
    with sqlite_repo.store() as store:
        assert store.all_accepts() == []  # nothing written
    right = solgate("accept", head, "test_kern*", "--reason", "x", cwd=sqlite_repo.path)
    assert right.returncode == 0, right.stderr
    assert "for 'test_kern*' (1 recorded test(s): test_kernel)" in right.stdout


def test_an_accept_of_a_commit_off_the_first_parent_chain_is_refused(sqlite_repo):
    sqlite_repo.seed(STEADY)
    sqlite_repo.git("checkout", "-q", "-b", "side")
    side = sqlite_repo.commit("on a side branch")
    sqlite_repo.git("checkout", "-q", "main")
    sqlite_repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")  # an ancestor, but not a first parent
    done = solgate("accept", side, "test_kernel", "--reason", "x", cwd=sqlite_repo.path)
    assert done.returncode == 2
    assert f"{side[:10]} ('{side}') is not on the first-parent chain of HEAD" in done.stderr
    assert "the accept would never apply" in done.stderr


INI_FILES = {
    "pytest.ini": "[pytest]\nsol_min_change = 0.4\n",
    "pyproject.toml": '[tool.pytest.ini_options]\nsol_min_change = "0.4"\n',
    "tox.ini": "[pytest]\nsol_min_change = 0.4\n",
    "setup.cfg": "[tool:pytest]\nsol_min_change = 0.4\n",
}


@pytest.mark.parametrize("name", INI_FILES)
def test_every_command_reads_the_ini_options_pytest_reads(sqlite_repo, name):
    sqlite_repo.seed(STEADY)
    (sqlite_repo.path / name).write_text(INI_FILES[name])
    listing = solgate("history", "--changes", "--json", cwd=sqlite_repo.path)
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout)["min_change"] == 0.4
    given = solgate("history", "--changes", "--json", "--min-change=0.1", cwd=sqlite_repo.path)
    assert json.loads(given.stdout)["min_change"] == 0.1  # the command line still wins


def test_pytests_order_of_ini_files_and_sol_history_from_the_ini(sqlite_repo):
    sqlite_repo.seed(STEADY)
    (sqlite_repo.path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsol_min_change = "0.3"\n')
    (sqlite_repo.path / "pytest.ini").write_text("[pytest]\nsol_min_change = 0.4\nsol_history = elsewhere.db\n")
    (sqlite_repo.path / ".solgate" / "history.db").rename(sqlite_repo.path / "elsewhere.db")
    listing = solgate("history", "--changes", "--json", cwd=sqlite_repo.path)
    assert listing.returncode == 0, listing.stderr
    data = json.loads(listing.stdout)
    assert data["min_change"] == 0.4  # pytest.ini first, as pytest reads it
    assert [m["test"] for m in data["measurements"]] == ["test_kernels.py::test_kernel"]  # read from elsewhere.db
    bad = sqlite_repo.path / "pytest.ini"
    bad.write_text("[pytest]\nsol_min_change = lots\n")
    refused = solgate("history", "--changes", cwd=sqlite_repo.path)
    assert refused.returncode == 2 and f"{bad}: --sol-min-change='lots' is not a number" in refused.stderr


@pytest.mark.parametrize("history", ["nothere.db", "postgresql://nobody@192.0.2.1:5432/x?connect_timeout=30"])
def test_arguments_are_checked_before_anything_is_opened(tmp_path, history):
    import time

    started = time.monotonic()
    done = solgate("history", "--json", "--history", history, cwd=tmp_path)
    assert done.returncode == 2 and "history: --json goes with --changes" in done.stderr, done.stderr
    assert time.monotonic() - started < 20  # never waited on the unreachable server
    assert not (tmp_path / "nothere.db").exists()


def test_a_rotation_lists_own_type_error_shows_no_frame_of_ours(suite):
    result = suite("def add(x, y):\n    return x\n\ndef test_k(sol):\n"
                   "    sol.measure([lambda: add(1), lambda: add(2)], bytes=1e3)\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * TypeError: add() missing 1 required positional argument: 'y'"])
    assert "pytest_solgate/" not in result.stdout.str() and "call_next" not in result.stdout.str()


@pytest.mark.parametrize("body, line", [
    ("def kernel(x):\n        busy(1e-4)\n    sol.measure(kernel, bytes=1e3)",
     "test_kernels.py::test_k: sol.measure needs a zero-argument callable; 'test_k.<locals>.kernel' takes an argument 'x'"),
    ("sol.measure(lambda x, y: busy(1e-4), bytes=1e3)",
     "sol.measure needs a zero-argument callable; the lambda takes 2 arguments ('x', 'y')"),
    ("sol.measure([lambda: busy(1e-4), lambda x: busy(x)], bytes=1e3)",
     "sol.measure needs a zero-argument callable (buffer set 1 of the list); the lambda takes an argument 'x'"),
], ids=["function", "lambda", "in-a-rotation"])
def test_a_callable_that_takes_an_argument_is_refused_before_timing(suite, body, line):
    result = suite(f"\ndef test_k(sol):\n    {body}\n")
    result.assert_outcomes(failed=1)
    assert any(line in text for text in result.stdout.lines), result.stdout.str()
    assert "pytest_solgate/" not in result.stdout.str()


def test_callables_with_defaults_or_star_args_are_timed(suite):
    result = suite("\ndef test_k(sol):\n    sol.measure(lambda n=1e-4, *rest, **options: busy(n), bytes=1e3)\n", fake_clock=True)
    result.assert_outcomes(passed=1)


PLUGINS_OWN_CPU_TIMER = """
    import os

    import pytest
    from idle_machine import readers_from

    from pytest_solgate.measure.platform import Platform


    @pytest.hookimpl(tryfirst=True)
    def pytest_solgate_platform(config):
        return Platform(contention=readers_from(os.environ))
"""


def test_a_short_kernel_on_a_loaded_machine_raises_no_warning_of_ours_under_w_error(suite):
    """A first clean run under `-W error` failed once under load: a 4 us kernel whose sampling the
    load stretched past 1.5x the time budget, with fewer samples than wanted, was warned as "one
    call takes 3.96e-06 s, longer than the time budget". The warning is said from the call's own
    time now. The load is simulated on the fake clock passed in (sol_clock): the kernel's own time
    is exact, but the memory probe after each sample takes 0.2 s of real time, as a loaded
    machine's would, so the sampling outlasts the 0.1 s budget with few samples. The rounds of
    samples stay short only where each sample pays the plugin's own cache flush (a round is sized
    by the warm-up calls' wall time, the flush included): the session times on the plugin's CPU
    timer, not the suite's, which leaves the flush out on a test's clock (tests/idle_machine.py)."""
    result = suite("""
        import time
        from pytest_solgate.measure.backends import CpuClock

        @pytest.fixture
        def sol_clock():
            return CpuClock(now=lambda: (FAKE_NS[0],) * 3, probe=lambda: time.sleep(0.2))

        def test_k(sol):
            m = sol.measure(lambda: busy(4e-6), bytes=1e3)
            assert m.timing.wall_seconds > 0.15 and len(m.timing.samples) < 10, m.timing
        """, "-W", "error", "--sol-max-time=0.1", fake_clock=True, files={"conftest.py": PLUGINS_OWN_CPU_TIMER})
    result.assert_outcomes(passed=1)
    assert "SolgateWarning" not in result.stdout.str()


@pytest.mark.parametrize("command", [("history",), ("trend", "-o", "t.html"), ("compare", "HEAD~1", "HEAD")])
def test_outside_a_git_repository_the_commands_say_so_and_what_to_do(tmp_path, monkeypatch, command):
    """Once only 'no history database here yet', as if a run would help: outside a repository
    there is no top level to find the history at (issue 44)."""
    monkeypatch.delenv("SOLGATE_HISTORY", raising=False)
    done = solgate(*command, cwd=tmp_path)
    assert done.returncode != 0
    assert "is not in a git repository" in done.stderr and "--history PATH" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
