# ruff: noqa: F811  (test_history's repo fixtures are imported, and taken as arguments)
"""The ``solgate`` commands' bad input: the ini read exactly as pytest reads it (with pytest's own
messages for pytest's own rules), a history that does not exist, and an accept's reason. Each case
runs the real command in a real git repository; each message is checked for what a user acts on:
the file, the option, the value."""

import json
import os
import subprocess
import sys

import pytest
from test_history import STEADY, sqlite_repo  # noqa: F401 (a fixture)

from test_cli import solgate


def test_a_pytest_section_in_setup_cfg_is_one_line_naming_the_file(sqlite_repo):
    sqlite_repo.seed(STEADY)
    cfg = sqlite_repo.path / "setup.cfg"
    cfg.write_text("[pytest]\nsol_min_change = 0.4\n")
    for command in (("history", "--changes"), ("trend",), ("compare", "HEAD~1", "HEAD")):
        done = solgate(*command, cwd=sqlite_repo.path)
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert str(cfg) in done.stderr and "[tool:pytest]" in done.stderr  # the file, and what to write instead


@pytest.mark.parametrize("line, option, given", [
    ("sol_min_change = 0.4", "sol_min_change", "float: 0.4"),  # a typed value: pytest refuses it
    ("sol_history = 5", "sol_history", "int: 5"),
])
def test_typed_values_in_pytests_own_toml_table_are_refused_as_pytest_refuses_them(sqlite_repo, line, option, given):
    sqlite_repo.seed(STEADY)
    toml = sqlite_repo.path / "pyproject.toml"
    toml.write_text(f"[tool.pytest]\n{line}\n")
    tests = sqlite_repo.pytester.runpytest("--sol-device=cpu", "--sol-profile=synthetic.toml")
    assert tests.ret == pytest.ExitCode.USAGE_ERROR
    pytests_line = next(line for line in tests.stderr.lines if option in line)
    assert str(toml) in pytests_line and given in pytests_line, tests.stderr.lines
    done = solgate("history", "--changes", cwd=sqlite_repo.path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(toml) in done.stderr and f"'{option}'" in done.stderr and given in done.stderr
    assert "true or false" not in done.stderr  # not a boolean's advice for a string option
    toml.write_text('[tool.pytest]\nsol_min_change = "0.4"\n')  # a string: both read it
    listing = solgate("history", "--changes", "--json", cwd=sqlite_repo.path)
    assert listing.returncode == 0 and json.loads(listing.stdout)["min_change"] == 0.4, listing.stderr


@pytest.mark.parametrize("command", [
    ("accept", "HEAD", "--reason", "faster elsewhere"),
    ("history",),
    ("history", "--changes"),
    ("trend",),
    ("compare", "HEAD~1", "HEAD"),
])
def test_a_history_that_does_not_exist_is_an_error_and_is_not_created(sqlite_repo, command):
    sqlite_repo.seed(STEADY)
    typo = sqlite_repo.path / "typo.db"
    done = solgate(*command, "--history", "typo.db", cwd=sqlite_repo.path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert str(typo) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not typo.exists()


def test_import_of_an_empty_spool_creates_no_history(sqlite_repo):
    (sqlite_repo.path / ".solgate" / "history.db").unlink(missing_ok=True)
    done = solgate("import", "--spool", cwd=sqlite_repo.path)
    assert done.returncode == 0, done.stderr
    assert "spool" in done.stdout and "nothing" in done.stdout
    assert not (sqlite_repo.path / ".solgate" / "history.db").exists()


def test_a_reason_that_is_not_utf8_is_one_line_and_an_accept_echoes_the_reasons_first_line(sqlite_repo):
    sqlite_repo.seed(STEADY)
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    raw = subprocess.run([sys.executable.encode(), b"-m", b"pytest_solgate.cli", b"accept", b"HEAD", b"--reason", b"caf\xe9 slower"],
                         cwd=sqlite_repo.path, capture_output=True, env=env)
    stderr = raw.stderr.decode("utf-8", "replace")
    assert raw.returncode == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "--reason" in stderr and "UTF-8" in stderr
    reason = "the new layout is slower on purpose\n" + "x" * 10_000
    done = solgate("accept", "HEAD", "--reason", reason, cwd=sqlite_repo.path)
    assert done.returncode == 0, done.stderr
    assert "the new layout is slower on purpose" in done.stdout and "x" * 100 not in done.stdout
    assert len(done.stdout) < 400
