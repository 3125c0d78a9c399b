# ruff: noqa: F811  (test_bisect's repo fixture is imported, and taken as an argument)
"""No silent green (issue 44): the ways a newcomer got exit 0 from ``solgate ab`` (and ``solgate
bisect``, where the cause is the same) on a 3x slowdown. Each is the real command on a real git
repository whose kernel runs on the fake clock (test_bisect.py's), and each failed before its fix:
whatever stops a comparison is worked around (ab compares what both sides measured and says what
it could not) or is a non-zero exit naming it."""

import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

from test_action import _inputs, _run_step, _solgate_shim, _step_env
from test_bisect import repo  # noqa: F401 (a fixture)

from pytest_solgate.judge import paired
from pytest_solgate.report import ab as words
from solgate_testing import FAKE_CLOCK_KERNELS, git

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _row(stdout, text):
    return next(line for line in stdout.splitlines() if text in line)


def test_a_failing_or_erroring_other_test_on_either_side_still_compares_the_kernel(repo):
    # BASE: another test errors (a fixture that does not exist), and a step runs no operator (SOL 0)
    (repo.path / "test_other.py").write_text("def test_other(no_such_fixture):\n    pass\n")
    # (an empty tensor: an operator that moves nothing, so the step has no speed of light)
    (repo.path / "test_step.py").write_text("import torch\n\ndef test_idle_step(sol):\n"
                                            "    sol.measure_step(lambda: torch.empty(1), name='idle')\n")
    base = repo.commit("BASE", seconds=1e-3)
    (repo.path / "test_other.py").write_text("def test_other():\n    assert False, 'broken at HEAD'\n")
    repo.commit("3x slower, and the other test fails", seconds=3e-3)
    (repo.path / "notes.txt").write_text("a file, not a folder")
    done = repo.solgate("ab", base, "--rounds", "3", "--markdown", str(repo.path / "notes.txt" / "ab.md"))
    # the unwritable --markdown is said, and the regression's exit 1 stands
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot write the A/B table" in done.stderr and "Traceback" not in done.stderr
    assert _row(done.stdout, "test_kernel [default]").split()[-1] == "regressed"
    assert "test_step.py::test_idle_step [idle]" in done.stdout  # said, not paired: log(0) crashed paired.py
    assert "no SOL to compare" in _row(done.stdout, "[idle]")
    assert "failed: head (round 1): tests failed: FAILED test_other.py::test_other" in done.stdout
    assert "failed: base (round 1): tests failed: ERROR" in done.stdout
    # rounds after the first run only the undecided kernel: no failure after round 1, one measurement
    assert "(round 2)" not in done.stdout and "round 3, head: 1 measurement(s)" in done.stderr, done.stderr


def _in_subfolder(repo, message, seconds):
    """Commit the kernel in kernels/, the pytest.ini at the top (its --sol-profile=synthetic.toml,
    as pytest reads a path, relative to where pytest runs: a copy beside the kernel)."""
    repo.commit(message, seconds=seconds)
    (repo.path / "kernels").mkdir(exist_ok=True)
    shutil.copy(repo.path / "synthetic.toml", repo.path / "kernels")
    for name in ("test_kernels.py", "speed.json"):
        shutil.move(str(repo.path / name), str(repo.path / "kernels" / name))
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "--allow-empty", "-m", f"{message} (in kernels/)")
    return git(repo.path, "rev-parse", "HEAD")


def test_ab_and_bisect_from_a_subfolder_run_the_ids_from_the_rootdir(repo):
    good = _in_subfolder(repo, "BASE", 1e-3)
    _in_subfolder(repo, "3x slower", 3e-3)
    sub = repo.path / "kernels"
    done = repo.solgate("ab", good, "*::test_kernel", "--rounds", "3", "--no-record", cwd=sub)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _row(done.stdout, "kernels/test_kernels.py::test_kernel [default]").split()[-1] == "regressed"
    found = repo.solgate("bisect", good, "HEAD", "*::test_kernel", "--good-runs", "2", cwd=sub)
    assert found.returncode == 0, found.stdout + found.stderr
    assert f"first bad commit: {repo.commits[-1][:10]}" not in found.stdout  # the commit before the move
    assert "first bad commit:" in found.stdout


def test_a_kernel_in_a_git_submodule_is_checked_out_at_base_or_the_error_says_so(repo, tmp_path):
    library = tmp_path / "kernlib"
    library.mkdir()
    git(library, "init", "-q", "-b", "main")
    (library / "kern.py").write_text("def slowdown():\n    return 1.0\n")
    git(library, "add", "-A")
    git(library, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "kern")
    git(repo.path, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "kernlib")
    (repo.path / "conftest.py").write_text("import pathlib, sys\n\nsys.path.insert(0, str(pathlib.Path(__file__).parent / 'kernlib'))\n")
    (repo.path / "test_sub.py").write_text(FAKE_CLOCK_KERNELS + (
        "from kern import slowdown\n\n"
        "@pytest.mark.sol(max_regression=0.05)\ndef test_sub(sol):\n"
        "    sol.measure(lambda: busy(1e-3 * slowdown()), bytes=0.4e6)\n"))
    base = repo.commit("BASE", seconds=1e-3)
    (repo.path / "kernlib" / "kern.py").write_text("def slowdown():\n    return 3.0\n")
    git(repo.path / "kernlib", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-qam", "3x")
    repo.commit("the submodule's kernel 3x slower")
    allowed = {**os.environ, "TMPDIR": str(repo.scratch), "GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}
    done = subprocess.run([sys.executable, "-m", "pytest_solgate.cli", "ab", base, "*::test_sub", "--rounds", "3",
                           "--no-record"], cwd=repo.path, capture_output=True, text=True, env=allowed)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _row(done.stdout, "test_sub.py::test_sub [default]").split()[-1] == "regressed"
    # where git may not check the submodule out (here: file:// refused), one line names it
    refused = repo.solgate("ab", base, "*::test_sub", "--rounds", "3", "--no-record",
                           env={"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow",
                                "GIT_CONFIG_VALUE_0": "never"})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "git submodules at" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_a_folder_new_at_head_and_an_unknown_pytest_option_are_one_line_each(repo):
    base = repo.commit("BASE", seconds=1e-3)
    (repo.path / "new").mkdir()
    (repo.path / "new" / "test_new.py").write_text("def test_new():\n    pass\n")
    shutil.copy(repo.path / "synthetic.toml", repo.path / "new")  # pytest reads the ini's profile path from here
    repo.commit("3x slower, and a new folder", seconds=3e-3)
    # run from the new folder: BASE has no such folder (a raw FileNotFoundError before)
    inside = repo.solgate("ab", base, "--rounds", "3", "--no-record", cwd=repo.path / "new")
    assert inside.returncode == 2 and "the folder new it runs from does not exist at" in inside.stderr, inside.stderr
    assert len(inside.stderr.strip().splitlines()) == 1, inside.stderr
    # --path new at HEAD: left out and said; the kernel's path is compared
    done = repo.solgate("ab", base, "--rounds", "3", "--no-record", "--path", "test_kernels.py", "--path", "new")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "left out: new: not at BASE" in done.stdout
    only_new = repo.solgate("ab", base, "--no-record", "--path", "new")
    assert only_new.returncode == 3 and "none of the paths (new) exists at BASE" in only_new.stderr, only_new.stderr
    # an option pytest does not know is named (before: 'pytest usage error: rootdir: ...')
    unknown = repo.solgate("ab", base, "--no-record", "--", "--no-such-option")
    assert unknown.returncode == 2 and "unrecognized arguments: --no-such-option" in unknown.stderr, unknown.stderr


def test_the_actions_ab_step_skips_with_a_note_where_base_has_no_tests_to_pair(repo, tmp_path):
    (repo.path / "README.md").write_text("a project without measured tests yet\n")
    for name in ("test_kernels.py", "speed.json"):
        (repo.path / name).unlink(missing_ok=True)
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", "before any kernel")
    base = git(repo.path, "rev-parse", "HEAD")
    _in_subfolder(repo, "the first measured tests folder", 1e-3)
    contexts = {"runner.temp": str(tmp_path), "github.event_name": "pull_request",
                "github.event.pull_request.base.sha": base}
    env = {**_step_env("ab", _inputs(test_path="kernels", ab_max_time="300"), contexts),
           "SOLGATE_VENV": str(_solgate_shim(tmp_path / "venv")), "TMPDIR": str(repo.scratch),
           "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}  # tests/: the suite's idle_machine plugin
    done = _run_step("ab", env, repo.path, tmp_path / "ab.out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exit-code=0" in (tmp_path / "ab.out").read_text()
    assert "::notice title=pytest-solgate::no A/B" in done.stdout and "none of the paths (kernels)" in done.stderr


def test_the_markdown_table_escapes_pipes_and_backticks_through_the_plugins_escaper():
    judgement = paired.judge_pairs([paired.Pair(0.4, 0.2)] * 3, 0.05)
    key = ("test_k.py::test_h[a|b-c`d]", "default", "synthetic", "measured")
    result = SimpleNamespace(base="b" * 40, head="h" * 40, dirty=False, rounds=3, stopped="tight",
                             compared=[SimpleNamespace(key=key, judgement=judgement, base_sol=0.4, head_sol=0.2)],
                             only_head=(), only_base=(), no_sol=(), skipped=(), failed=("head (round 1): `x` | y",))
    table = words.markdown(result)
    row = next(line for line in table.splitlines() if "test_h" in line)
    assert row.replace("\\|", "").count("|") == 7 and row.rstrip(" |").endswith("**regressed**"), row
    assert "test_h[a\\|b-c\\`d]" in row and "`" not in row.replace("\\`", "")
    assert "- head (round 1): \\`x\\` \\| y" in table
