"""The catalogue of bad inputs, each met the way a user meets it: a real pytest run or the CLI.

Every entry asserts a one-line message that names what is at fault and what to do, a non-zero
exit, and no traceback from the plugin's internals.
"""

import subprocess
import sys

import pytest

from solgate_command import solgate_main
from solgate_testing import FAST_TIMING, KERNELS, SYNTHETIC_PROFILE

GOOD_PROFILE = 'id = "x"\nname = "X"\nkind = "cpu"\nmemory_bandwidth_gbps = 1\n[peak_tflops]\nfp32 = 1\n'
PLAIN_TEST = "def test_x():\n    pass\n"

# (id, extra pytest arguments, files to write, the message fragment on its one ERROR line)
USAGE_ERRORS = [
    ("marker-positional", [], {"test_m.py": "import pytest\n@pytest.mark.sol(0.8)\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol takes keyword arguments only"),
    ("marker-unknown-keyword", [], {"test_m.py": "import pytest\n@pytest.mark.sol(budget=0.8)\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol got unknown argument 'budget'"),
    ("marker-out-of-range", [], {"test_m.py": "import pytest\n@pytest.mark.sol(min=1.5)\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol(min=1.5): must be in (0, 1]"),
    ("marker-string", [], {"test_m.py": "import pytest\n@pytest.mark.sol(min='high')\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol(min='high'): must be a number"),
    ("marker-mfu-zero", [], {"test_m.py": "import pytest\n@pytest.mark.sol(mfu=0)\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol(mfu=0): must be in (0, 1]"),
    ("marker-regression-one", [], {"test_m.py": "import pytest\n@pytest.mark.sol(max_regression=1)\ndef test_m(sol): pass\n"},
     "test_m.py::test_m: @pytest.mark.sol(max_regression=1): must be in [0, 1)"),
    ("marker-empty-mapping", [], {"test_m.py": "import pytest\n@pytest.mark.sol(min={})\ndef test_m(sol): pass\n"},
     "give at least one 'glob': budget"),
    ("marker-mapping-value", [], {"test_m.py": "import pytest\n@pytest.mark.sol(min={'h100*': 2})\ndef test_m(sol): pass\n"},
     "@pytest.mark.sol(min['h100*']=2): must be in (0, 1]"),
    ("marker-speedup-zero", [], {"test_m.py": "import pytest\n@pytest.mark.sol(speedup={'h100*': 0})\ndef test_m(sol): pass\n"},
     "@pytest.mark.sol(speedup['h100*']=0): must be a number of times faster > 0, e.g. 1.15"),
    ("marker-reference-not-a-name", [], {"test_m.py": "import pytest\n@pytest.mark.sol(speedup=1.2, reference=3)\ndef test_m(sol): pass\n"},
     "@pytest.mark.sol(reference=3): give the name= of a gate=False measurement"),
    ("profile-bad-toml", ["--sol-profile=p.toml"], {"p.toml": "id = [", "test_x.py": PLAIN_TEST}, "p.toml: invalid TOML"),
    ("profile-missing-field", ["--sol-profile=p.toml"], {"p.toml": GOOD_PROFILE.replace('name = "X"\n', ""), "test_x.py": PLAIN_TEST},
     "p.toml: missing required field 'name'"),
    ("profile-mistyped", ["--sol-profile=p.toml"], {"p.toml": GOOD_PROFILE.replace("= 1\n[", "= \"1\"\n["), "test_x.py": PLAIN_TEST},
     "p.toml: field 'memory_bandwidth_gbps' must be a number, got '1'"),
    ("profile-unknown-field", ["--sol-profile=p.toml"], {"p.toml": "vendor = 'x'\n" + GOOD_PROFILE, "test_x.py": PLAIN_TEST},
     "p.toml: unknown field 'vendor'"),
    ("profile-non-positive", ["--sol-profile=p.toml"], {"p.toml": GOOD_PROFILE.replace("fp32 = 1", "fp32 = -2"), "test_x.py": PLAIN_TEST},
     "p.toml: field 'peak_tflops.fp32' must be a finite number > 0, got -2"),
    ("profile-empty", ["--sol-profile=p.toml"], {"p.toml": "", "test_x.py": PLAIN_TEST}, "p.toml: the profile file is empty"),
    ("profile-directory", ["--sol-profile=p.toml"], {"p.toml/keep.txt": "", "test_x.py": PLAIN_TEST},
     "p.toml: a folder with no *.toml profiles in it; pass a profile file, an id, or a folder of profiles"),
    ("profile-folder-with-a-bad-file", ["--sol-profile=mine"], {"mine/bad.toml": "id = 3\n", "test_x.py": PLAIN_TEST},
     "mine/bad.toml: missing required field 'name'"),
    ("profile-unreadable", ["--sol-profile=/proc/self/mem"], {"test_x.py": PLAIN_TEST},
     "/proc/self/mem: cannot read the profile file"),
    ("profile-missing-file", ["--sol-profile=gone.toml"], {"test_x.py": PLAIN_TEST}, "gone.toml: no such profile file"),
    ("profile-unknown-id", ["--sol-profile=h100-sxn"], {"test_x.py": PLAIN_TEST}, "no profile with id 'h100-sxn'"),
    ("option-gate", ["--sol-gate=sometimes"], {"test_x.py": PLAIN_TEST}, "--sol-gate='sometimes' is not one of: fail, warn, off"),
    ("option-above-one", ["--sol-above-one=ignore"], {"test_x.py": PLAIN_TEST}, "--sol-above-one='ignore' is not one of: fail, warn"),
    ("option-noise", ["--sol-noise=low"], {"test_x.py": PLAIN_TEST}, "--sol-noise='low' is not a number"),
    ("option-min-time", ["--sol-min-time=-1"], {"test_x.py": PLAIN_TEST}, "--sol-min-time='-1': give seconds >= 0"),
    ("option-warmup-time", ["--sol-warmup-time=-0.1"], {"test_x.py": PLAIN_TEST}, "--sol-warmup-time='-0.1': give seconds >= 0"),
    ("option-max-below-min", ["--sol-min-time=3", "--sol-max-time=1"], {"test_x.py": PLAIN_TEST},
     "--sol-max-time=1 is below --sol-min-time=3; raise the budget"),
    ("option-device", ["--sol-device=gpu0"], {"test_x.py": PLAIN_TEST}, "--sol-device='gpu0' is not auto, cpu, cuda or cuda:N"),
    ("option-ceilings", ["--sol-ceilings=peak"], {"test_x.py": PLAIN_TEST}, "--sol-ceilings='peak' is not one of: datasheet, measured"),
    ("option-max-regression", ["--sol-max-regression=5%"], {"test_x.py": PLAIN_TEST}, "--sol-max-regression='5%' is not a number"),
    ("option-precision", ["--sol-precision=fp4"], {"test_x.py": PLAIN_TEST}, "--sol-precision='fp4' is not one of"),
    ("option-baseline", ["--sol-baseline=--x"], {"test_x.py": PLAIN_TEST}, "--sol-baseline='--x': give auto, none, or a git ref"),
    ("option-in-ini", [], {"pytest.ini": "[pytest]\nsol_noise = 2\n", "test_x.py": PLAIN_TEST}, "--sol-noise='2': give a fraction in (0, 1)"),
    ("option-report-swallows-path", ["--sol-report", "suite"], {"suite/test_x.py": PLAIN_TEST},
     "--sol-report took 'suite' as its output path, a folder: name the report's file, e.g. "
     "--sol-report=suite/sol-report.html (a bare --sol-report before a test path takes that path: put it last)"),
    ("option-report-is-a-folder", ["--sol-report=out"], {"out/keep.txt": "", "test_x.py": PLAIN_TEST},
     "--sol-report took 'out' as its output path, a folder: name the report's file, e.g. --sol-report=out/sol-report.html"),
    ("history-not-a-database", ["--sol-history=notes.txt"], {"notes.txt": "my notes\n" * 50, "test_x.py": PLAIN_TEST},
     "notes.txt: not a solgate history database"),
    ("history-foreign-sqlite", ["--sol-history=other.db"], {"test_x.py": PLAIN_TEST}, "not a solgate history (tables: orders)"),
    # Outputs that collide: refused before anything runs, so the history is never replaced.
    ("output-json-is-history", ["--sol-history=team.db", "--sol-json=team.db"], {"test_x.py": PLAIN_TEST},
     "--sol-history and --sol-json both name"),
    ("output-report-is-markdown", ["--sol-markdown=out.txt", "--sol-report=out.txt"], {"test_x.py": PLAIN_TEST},
     "--sol-report and --sol-markdown both name"),
    ("output-junit-is-json", ["--sol-json=r.xml", "--junitxml=r.xml"], {"test_x.py": PLAIN_TEST},
     "--sol-json and --junitxml both name"),
    ("ini-list-for-a-path", [], {"pyproject.toml": '[tool.pytest.ini_options]\nsol_history = ["h.db"]\n', "test_x.py": PLAIN_TEST},
     "ini option sol_history = ['h.db']: give one value"),
    ("ini-list-for-report", [], {"pyproject.toml": '[tool.pytest.ini_options]\nsol_report = ["a.html"]\n', "test_x.py": PLAIN_TEST},
     "ini option sol_report = ['a.html']: give one value"),
    ("profile-absurd-bandwidth", ["--sol-profile=p.toml"],
     {"p.toml": GOOD_PROFILE.replace("memory_bandwidth_gbps = 1", "memory_bandwidth_gbps = 1e300"), "test_x.py": PLAIN_TEST},
     "p.toml: field 'memory_bandwidth_gbps' = 1e+300 is not physically possible"),
    ("profile-empty-id", ["--sol-profile= "], {"test_x.py": PLAIN_TEST}, "the profile id is empty"),
    ("baseline-ref-missing", ["--sol-baseline=origin/main"], {"test_x.py": PLAIN_TEST},
     "--sol-baseline=origin/main: "),
    # Outputs are compared by the file they reach (the test makes real symlinks): link.db -> real/h.db.
    ("output-json-through-a-symlink", ["--sol-history=link.db", "--sol-json=real/h.db"], {"test_x.py": PLAIN_TEST},
     "--sol-history and --sol-json both name"),
    ("output-json-through-a-hard-link", ["--sol-history=hard.db", "--sol-json=real/h.db"], {"test_x.py": PLAIN_TEST},
     "--sol-history and --sol-json both name"),
    ("output-json-through-a-linked-folder", ["--sol-history=real/h.db", "--sol-json=alias/h.db"], {"test_x.py": PLAIN_TEST},
     "/real/h.db (as "),
    # History locations: a path or a postgresql:// URL; any other scheme is refused, never a folder.
    ("history-url-mysql", ["--sol-history=mysql://ci:hunter2@db.example/h"], {"test_x.py": PLAIN_TEST},
     "--sol-history=mysql://ci:***@db.example/h: a mysql:// history is not supported; give a SQLite file path"),
    ("history-url-sqlite", ["--sol-history=sqlite:///h.db"], {"test_x.py": PLAIN_TEST},
     "--sol-history=sqlite:///h.db: a sqlite:// history is not supported"),
    ("history-url-raw-percent", ["--sol-history=postgresql://ci:p%zzhunter2@127.0.0.1:9/h"], {"test_x.py": PLAIN_TEST},
     "postgresql://ci:***@127.0.0.1:9/h: not a PostgreSQL URL"),
    ("output-home-of-no-user", ["--sol-json=~nosuchuser/out.json"], {"test_x.py": PLAIN_TEST},
     "~nosuchuser/out.json: '~nosuchuser' is no user's home folder here; give the path in full"),
    ("ini-bool-not-a-truth-value", [], {"pytest.ini": "[pytest]\nsol_no_save = maybe\n", "test_x.py": PLAIN_TEST},
     "ini option sol_no_save: invalid truth value 'maybe'; give true or false"),
]


def listing(folder):
    """The names in ``folder`` a user would call theirs or ours: not Python's bytecode folder, nor
    pytest-benchmark's .benchmarks (where that plugin is installed)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in ("__pycache__", ".benchmarks"))


def write(pytester, files):
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def assert_one_line_error(result, fragment):
    errors = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(errors) == 1, result.stderr.lines
    assert fragment in errors[0], errors[0]
    index = result.stderr.lines.index(errors[0])
    assert not "".join(result.stderr.lines[index + 1:]).strip(), "the message must be one line"
    assert "Traceback" not in result.stderr.str() and "pytest_solgate/" not in result.stderr.str()


@pytest.mark.parametrize("case, args, files, fragment", USAGE_ERRORS, ids=[c[0] for c in USAGE_ERRORS])
def test_usage_errors(pytester, case, args, files, fragment):
    write(pytester, files)
    if case == "history-foreign-sqlite":
        import sqlite3

        db = sqlite3.connect(pytester.path / "other.db")
        db.execute("CREATE TABLE orders (id INTEGER)")
        db.commit()
        db.close()
    if case.startswith("output-json-through"):
        (pytester.path / "real").mkdir()
        (pytester.path / "link.db").symlink_to("real/h.db")
        (pytester.path / "alias").symlink_to("real", target_is_directory=True)
        if case.endswith("hard-link"):
            (pytester.path / "real" / "h.db").write_bytes(b"")
            (pytester.path / "hard.db").hardlink_to(pytester.path / "real" / "h.db")
    before = listing(pytester.path)
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line_error(result, fragment)
    assert "hunter2" not in result.stdout.str() + result.stderr.str()  # no password, in any form
    # nothing written: no folder named after a URL
    assert listing(pytester.path) == before
    if case == "history-not-a-database":
        assert (pytester.path / "notes.txt").read_text() == "my notes\n" * 50  # refused, never overwritten
    if case == "history-foreign-sqlite":
        import sqlite3

        assert sqlite3.connect(pytester.path / "other.db").execute("SELECT COUNT(*) FROM orders").fetchone() == (0,)


# (id, test body, the one line the failure shows)
TEST_FAILURES = [
    ("work-negative", "sol.measure(lambda: busy(1e-4), bytes=-5)", "bytes=-5 is negative"),
    ("work-nan", "sol.measure(lambda: busy(1e-4), flops=float('nan'))", "flops=nan must be finite"),
    ("work-infinite", "sol.measure(lambda: busy(1e-4), bytes=float('inf'))", "bytes=inf must be finite"),
    ("work-unknown-precision", "sol.measure(lambda: busy(1e-4), flops={'fp12': 3})", "unknown precision 'fp12'; use one of"),
    ("work-precision-profile-lacks", "sol.measure(lambda: busy(1e-4), flops={'fp8_tensor': 3})",
     "flops declared in 'fp8_tensor', which profile 'synthetic' lacks; it has: fp32, bf16_tensor"),
    ("work-none", "sol.measure(lambda: busy(1e-4))", "no work declared: pass bytes=... (total fused bytes)"),
    ("work-not-a-number", "sol.measure(lambda: busy(1e-4), bytes='1MB')", "bytes='1MB' is not a number"),
    ("not-callable", "sol.measure(42, bytes=1)", "sol.measure needs a zero-argument callable, got int: pass a callable that runs"),
    ("duplicate-name", "sol.measure(lambda: 0, bytes=1, name='k'); sol.measure(lambda: 0, bytes=1, name='k')",
     "a measurement named 'k' already exists in this test; give another name="),
    ("bad-name", "sol.measure(lambda: 0, bytes=1, name='')", "sol.measure(name='') must be a non-empty string"),
    # 1 s of declared work (at 1 GB/s) that a call of nothing cannot take, however loaded the machine
    ("instant-kernel", "sol.measure(lambda: None, bytes=1e9)", "is impossible"),
    ("positional-work", "sol.measure(lambda: busy(1e-4), 1e6)",
     "sol.measure(fn, 1000000.0): after the kernel it takes keywords only: flops=, bytes=, precision=, name=, gate="),
    ("async-kernel", "async def kernel():\n        busy(1e-4)\n    sol.measure(kernel, bytes=1e3)",
     "sol.measure got an async function; only its coroutine would be created, never run"),
    ("lambda-around-async", "async def kernel():\n        busy(1e-4)\n    sol.measure(lambda: kernel(), bytes=1e3)",
     "kernel returned an awaitable, so it only created a coroutine and ran nothing"),
    ("nested-measure", "sol.measure(lambda: sol.measure(lambda: busy(1e-4), bytes=1, name='inner'), bytes=1e3)",
     "sol.measure called inside the kernel of another measurement ('default')"),
    ("name-with-newline", "sol.measure(lambda: busy(1e-4), bytes=1e3, name='a\\nb')",
     "holds a newline or control character; every report shows names on one line"),
    ("mfu-without-flops", "sol.measure(lambda: busy(1e-4), bytes=1e3)",
     "has an MFU budget of 0.10 but declares no FLOPs"),
    ("work-beyond-any-float", "sol.measure(lambda: busy(1e-4), bytes=10**400)",
     "bytes=10**400 is more than any kernel does (the limit is 1e+60); declare the real count"),
    # One rule for what cannot be timed: refused before anything runs, saying what to pass instead.
    ("generator-function", "def kernel():\n        yield busy(1e-4)\n    sol.measure(kernel, bytes=1e3)",
     "sol.measure got a generator function; calling it only creates a generator, and none of its body runs: "
     "pass a callable that runs the work when called (e.g. lambda: list(kernel())"),
    ("lambda-around-generator", "def kernel():\n        yield busy(1e-4)\n    sol.measure(lambda: kernel(), bytes=1e3)",
     "kernel returned a generator, so none of the generator's body ran"),
    ("empty-rotation", "sol.measure([], bytes=1e3)",
     "sol.measure got an empty list of buffer sets: give one zero-argument callable per buffer set, at least one"),
    ("async-in-a-rotation", "async def kernel():\n        busy(1e-4)\n    sol.measure([lambda: busy(1e-4), kernel], bytes=1e3)",
     "sol.measure got an async function (buffer set 1 of the list)"),
]


@pytest.mark.parametrize("case, body, line", TEST_FAILURES, ids=[c[0] for c in TEST_FAILURES])
def test_failures_inside_a_test(suite, case, body, line):
    marker = {"mfu-without-flops": "@pytest.mark.sol(mfu=0.1)\n"}.get(case, "")
    result = suite(f"\nimport pytest\n\n{marker}def test_k(sol):\n    {body}\n")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert any(line in text for text in result.stdout.lines), line
    assert "pytest_solgate/" not in result.stdout.str()
    if case.startswith("work-"):  # one line at the user's call (issue 44): no traceback, no exception class
        result.stdout.fnmatch_lines([f"test_kernels.py:*: *{line}*"])
        assert "Error" not in result.stdout.str() and not any(text.startswith("E ") for text in result.stdout.lines)


def test_kernel_that_raises_keeps_its_own_traceback(suite):
    result = suite("def kernel():\n    raise ValueError('bad launch grid')\n\ndef test_k(sol):\n    sol.measure(kernel, bytes=1)\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*raise ValueError('bad launch grid')", "E       ValueError: bad launch grid"])
    assert "pytest_solgate/" not in result.stdout.str() and "SolgateError" not in result.stdout.str()
    result.stdout.no_fnmatch_line("*take_timing*")  # none of our frames in the traceback


def test_an_unusable_lock_folder_fails_the_test_in_one_line(suite, pytester, monkeypatch):
    (pytester.path / "not-a-folder").write_text("x")
    monkeypatch.setenv("SOLGATE_LOCK_DIR", str(pytester.path / "not-a-folder"))
    result = suite("def test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"test_kernels.py:*: cannot take the cpu device lock in SOLGATE_LOCK_DIR={pytester.path}/not-a-folder "
                                 "(*): point SOLGATE_LOCK_DIR at a folder this user can write, or unset it"])
    assert "pytest_solgate/" not in result.stdout.str() and "FileExistsError" not in result.stdout.str()


def test_an_output_name_as_long_as_the_folder_allows_is_written(suite, pytester):
    """The temporary file beside an output is named to fit wherever the output's own name fits."""
    json_name, report_name = "j" * 245 + ".json", "r" * 245 + ".html"
    result = suite("def test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n", f"--sol-json={json_name}",
                   f"--sol-report={report_name}", fake_clock=True)
    result.assert_outcomes(passed=1)
    assert (pytester.path / json_name).is_file() and (pytester.path / report_name).is_file()
    assert not [p for p in pytester.path.iterdir() if p.name.endswith(".tmp")]


def test_the_tests_own_error_stays_its_failure_and_the_verdict_is_a_note(suite):
    result = suite("""
        import pytest

        def reference():
            raise ValueError("reference broke")

        @pytest.mark.sol(speedup=1.5, reference="torch")
        def test_reference_raises(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.4e6)
            sol.measure(reference, bytes=0.4e6, name="torch", gate=False)

        @pytest.mark.sol(min=0.9)
        def test_wrong_result_after_measuring(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.4e6)
            assert 1 == 2, "wrong result"

        @pytest.mark.sol(speedup=1.5)
        def test_no_reference(sol):
            sol.measure(lambda: busy(1e-3), bytes=0.4e6)
    """, fake_clock=True)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "E       ValueError: reference broke",
        "E       solgate: test_kernels.py::test_reference_raises: @pytest.mark.sol(reference='torch') but the test has no "
        "gate=False measurement named so (it has: none)",
    ])
    result.stdout.fnmatch_lines(["E       AssertionError: wrong result", "E       assert 1 == 2",
                                 "E       solgate: below-budget: test_wrong_result_after_measuring SOL 0.40 < budget 0.90"])
    result.stdout.fnmatch_lines(["FAILED test_kernels.py::test_reference_raises - ValueError: reference broke",
                                 "FAILED test_kernels.py::test_wrong_result_after_measuring - AssertionError: wrong result"])
    said = [line for line in result.stdout.lines if line.startswith("test_kernels.py::test_no_reference: a speedup budget needs one reference")]
    assert len(said) == 1, out  # once, not once per re-raise
    assert "During handling of the above exception" not in out and "pytest_solgate/" not in out


def test_kernel_longer_than_the_time_budget_warns(suite):
    result = suite("def test_k(sol):\n    sol.measure(lambda: busy(0.2), bytes=1e6)\n", "--sol-min-time=0", "--sol-max-time=0.05",
                   fake_clock=True)  # 0.2 s exactly, however loaded the machine
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*one call takes 0.2* s, longer than the time budget --sol-max-time=0.05; raise it for more samples"])


def test_fixture_used_outside_its_test(suite):
    result = suite("saved = []\n\ndef test_a(sol):\n    saved.append(sol)\n\ndef test_b():\n    saved[0].measure(lambda: 0, bytes=1)\n")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["test_kernels.py:*: sol.measure called after the body of test_kernels.py::test_a returned*; "
                                 "it would never be judged: call it inside the test body"])


def test_a_measurement_in_a_fixtures_teardown_is_refused_not_lost(suite):
    result = suite("""
        import pytest

        @pytest.fixture
        def late(sol):
            yield
            sol.measure(lambda: busy(1e-4), bytes=1e3, name="late")

        def test_k(sol, late):
            sol.measure(lambda: busy(1e-4), bytes=1e3)
    """)
    result.assert_outcomes(passed=1, errors=1)  # the test passed; its teardown says what went wrong
    result.stdout.fnmatch_lines(["*sol.measure called after the body of test_kernels.py::test_k returned (in a fixture's teardown?)*"])


def test_benchmark_action_writes_no_empty_file(pytester):
    pytester.makepyfile(test_x=PLAIN_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--sol-benchmark-action=bench.json")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "bench.json").exists()
    result.stdout.fnmatch_lines(["solgate: nothing was measured, so no benchmark-action JSON was written to bench.json"])


def test_git_names_that_are_not_utf8_neither_fail_nor_lose_the_run(pytester):
    import json
    import os

    def git(*args):
        subprocess.run([b"git", *args], cwd=pytester.path, check=True, capture_output=True)

    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    pytester.makepyfile(test_k=KERNELS + "\ndef test_k(sol):\n    sol.measure(lambda: busy(1e-4), bytes=1e3)\n")
    odd = os.path.join(os.fsencode(pytester.path), b"caf\xe9.txt")  # Latin-1, not UTF-8
    with open(odd, "wb") as f:
        f.write(b"x")
    git(b"init", b"-q", b"-b", b"main")
    git(b"add", b"-A")
    git(b"-c", b"user.email=t@example.invalid", b"-c", b"user.name=t", b"commit", b"-q", b"-m", b"A")
    git(b"checkout", b"-q", b"-b", b"br\xe9nch")
    with open(odd, "wb") as f:
        f.write(b"changed")  # a modified tracked file with a non-UTF-8 name: the tree is dirty
    result = pytester.runpytest(*FAST_TIMING, "--sol-profile=synthetic.toml", "--sol-json=out.json")
    result.assert_outcomes(passed=1)
    run = json.loads((pytester.path / "out.json").read_text())["run"]
    assert run["dirty"] is True and run["commit"] and run["branch"].startswith("br")
    assert (pytester.path / ".solgate" / "history.db").exists()  # recorded


def test_sol_fixture_from_a_wider_scope_is_pytests_scope_error(pytester):
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)  # a profile: no calibration of this CPU (12 s)
    pytester.makepyfile(test_k="import pytest\n\n@pytest.fixture(scope='session')\ndef shared(sol):\n    return sol\n\n"
                               "def test_k(shared):\n    pass\n")
    result = pytester.runpytest("--sol-device=cpu", "--sol-profile=synthetic.toml")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ScopeMismatch*"])


CLI_ERRORS = [
    ("cli-no-command", [], "the following arguments are required: COMMAND"),
    ("cli-unknown-command", ["deploy"], "invalid choice: 'deploy'"),
    ("cli-profile-missing-id", ["profile"], "the following arguments are required: id"),
    ("cli-compare-one-ref", ["compare", "HEAD"], "the following arguments are required: head"),
    ("cli-compare-bad-tolerance", ["compare", "a", "b", "--max-regression", "x"], "argument --max-regression: invalid float value: 'x'"),
    ("cli-import-missing-file", ["import", "nothere.json"], "nothere.json: no such file"),
    ("cli-import-not-json", ["import", "broken.json"], "broken.json: not JSON"),
    ("cli-import-not-ours", ["import", "theirs.json"], "theirs.json: not a solgate/1 file"),
    ("cli-import-malformed", ["import", "half.json"], "half.json: the document = {'schema': 'solgate/1', 'run': {'id': 'r'}}: 'measurements' is a required property"),
    ("cli-import-samples-text", ["import", "poison.json"], "poison.json: measurements[0].samples = 'abc': it is not of type 'array'"),
    ("cli-import-sol-text", ["import", "poison-sol.json"], "poison-sol.json: measurements[0].sol = 'high': it is not of type 'number'"),
    ("cli-import-huge-number", ["import", "huge.json"], "huge.json: measurements[0].bytes = 1000"),
    ("cli-import-nan", ["import", "nan.json"], "nan.json: not JSON that solgate can import (NaN is not a number"),
    ("cli-import-null-required", ["import", "null.json"], "null.json: measurements[0].seconds = None: it is not of type 'number'"),
    ("cli-import-baseline-change-text", ["import", "poison-baseline.json"],
     "poison-baseline.json: measurements[0].baseline.change = 'a lot': it is not of type 'number'"),
    ("cli-import-strings-for-records", ["import", "strings.json"], "it is not of type 'object'; nothing was imported"),
    ("cli-profile-empty-id", ["profile", ""], "the profile id is empty"),
    ("cli-trend-onto-history", ["trend", "--history", "notes.txt", "-o", "notes.txt"], "is the history database itself"),
    ("cli-history-not-a-database", ["history", "--history", "notes.txt"], "notes.txt: not a solgate history database"),
    ("cli-history-directory", ["history", "--history", "."], "is a directory; --sol-history needs a database file path"),
    ("cli-detect-unknown-device", ["detect", "--name", "Potato GPU"], "no hardware profile matches device 'Potato GPU'"),
    ("cli-trend-no-history", ["trend", "--history", "none.db"], "none.db: no history database here yet"),
    ("cli-trend-onto-history-through-a-symlink", ["trend", "--history", "notes.txt", "-o", "notes-link.txt"],
     "is the history database itself"),
    ("cli-history-url-mysql", ["history", "--history", "mysql://ci:hunter2@db.example/h"],
     "--history=mysql://ci:***@db.example/h: a mysql:// history is not supported"),
    ("cli-import-into-a-sqlite-url", ["import", "half.json", "--history", "sqlite:///h.db"],
     "--history=sqlite:///h.db: a sqlite:// history is not supported"),
    ("cli-migrate-from-a-mysql-url", ["migrate", "mysql://ci:hunter2@db.example/h", "h.db"],
     "SOURCE=mysql://ci:***@db.example/h: a mysql:// history is not supported"),
    ("cli-history-home-of-no-user", ["history", "--history", "~nosuchuser/h.db"], "'~nosuchuser' is no user's home folder here"),
    ("cli-history-url-bad-timeout", ["history", "--history", "postgresql://ci:hunter2@127.0.0.1:9/h?connect_timeout=abc"],
     "postgresql://127.0.0.1:9/h: connect_timeout='abc' in the URL is not a whole number of seconds"),
    ("cli-history-raw-percent-password", ["history", "--history", "postgresql://ci:p%zzhunter2@127.0.0.1:9/h"],
     "postgresql://ci:***@127.0.0.1:9/h: not a PostgreSQL URL"),
]


@pytest.mark.parametrize("case, args, fragment", CLI_ERRORS, ids=[c[0] for c in CLI_ERRORS])
def test_cli_errors(tmp_path, case, args, fragment):
    (tmp_path / "broken.json").write_text("{ nope")
    (tmp_path / "theirs.json").write_text('{"benchmarks": [{"name": "x"}]}')
    (tmp_path / "half.json").write_text('{"schema": "solgate/1", "run": {"id": "r"}}')
    (tmp_path / "notes.txt").write_text("notes\n" * 100)
    import json

    good = {"test": "t.py::test_k", "name": "default", "profile": "p", "backend": "cpu", "flops": {}, "bytes": 1,
            "seconds": 1e-3, "samples": [1e-3], "noise": 0.01, "t_sol": 1e-4, "sol": 0.1, "mfu": 0, "bound": "memory",
            "tflops": 0, "gbps": 1}
    for name, change in (("poison", {"samples": "abc"}), ("poison-sol", {"sol": "high"}), ("huge", {"bytes": 10**400}),
                         ("null", {"seconds": None}),
                         ("poison-baseline", {"verdict": "pass", "baseline": {"commit": "a" * 40, "change": "a lot"}})):
        document = {"schema": "solgate/1", "run": {"id": "r", "started_at": "2026-12-02"}, "measurements": [{**good, **change}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(document))
    (tmp_path / "nan.json").write_text((tmp_path / "poison.json").read_text().replace('"abc"', "[NaN]"))
    (tmp_path / "strings.json").write_text('{"schema": "solgate/1", "run": {"id": "r", "started_at": "x"}, "measurements": ["a", "b"]}')
    (tmp_path / "notes-link.txt").symlink_to("notes.txt")
    before = listing(tmp_path)
    done = solgate_main(*args, cwd=tmp_path)  # in this process: no interpreter and its imports per case
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert listing(tmp_path) == before  # no folder named after a URL
    assert (tmp_path / "notes.txt").read_text() == "notes\n" * 100
    assert not (tmp_path / ".solgate").exists()  # a refused import writes nothing


def test_the_catalogue_has_at_least_thirty_entries():
    assert len(USAGE_ERRORS) + len(TEST_FAILURES) + len(CLI_ERRORS) + 4 >= 30


def test_one_history_from_any_subdirectory_for_pytest_and_every_command(pytester):
    """A relative history location is taken from the git top level by pytest and by every solgate
    command, whichever directory each starts in (docs/history.md)."""
    import os

    from solgate_testing import FAKE_CLOCK_KERNELS, init_repo

    top = pytester.path
    init_repo(top)
    sub = top / "kernels"
    sub.mkdir()
    (sub / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    (sub / "test_k.py").write_text(FAKE_CLOCK_KERNELS + "\ndef test_k(sol):\n    sol.measure(lambda: busy(1e-3), bytes=0.4e6)\n")
    env = {**os.environ, "SOLGATE_HISTORY": "team.db"}

    def run(*args):
        return subprocess.run([sys.executable, *args], cwd=sub, env=env, capture_output=True, text=True)

    done = run("-m", "pytest", *FAST_TIMING, "--sol-profile=synthetic.toml", "--sol-json=out.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"solgate: run recorded in {top / 'team.db'}" in done.stdout
    assert (top / "team.db").is_file() and not (sub / "team.db").exists()
    for listing in (run("-m", "pytest_solgate.cli", "history"),
                    run("-m", "pytest_solgate.cli", "history", "--history", "team.db")):
        assert listing.returncode == 0 and "test_k.py::test_k [default]" in listing.stdout, listing.stdout + listing.stderr
    imported = run("-m", "pytest_solgate.cli", "import", "out.json", "--history", "team.db")
    assert imported.returncode == 0 and f"is already in {top / 'team.db'}: nothing added" in imported.stdout, imported.stdout
    assert not (sub / "team.db").exists()  # never a second history beside the first


def test_a_history_url_in_the_environment_is_refused_and_never_printed(pytester, monkeypatch):
    """SOLGATE_HISTORY holds a secret: a scheme the plugin cannot open is refused by name, and its
    password is printed nowhere (never taken as a relative path, nor put in the run-recorded line)."""
    monkeypatch.setenv("SOLGATE_HISTORY", "mysql://ci:hunter2@db.example/h")
    pytester.makepyfile(test_x=PLAIN_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert_one_line_error(result, "SOLGATE_HISTORY=mysql://ci:***@db.example/h: a mysql:// history is not supported")
    assert "hunter2" not in result.stdout.str() + result.stderr.str()
    assert listing(pytester.path) == ["test_x.py"]


def test_every_test_this_page_names_exists():
    """docs/reliability.md quotes tests as evidence: each one it names (``file.py::test_name``, or a
    bare ``test_name`` from this catalogue or tests/test_faults.py) must exist, so that CI keeps
    running every test the page relies on."""
    import re
    from pathlib import Path

    tests = Path(__file__).parent
    page = (tests.parent / "docs" / "reliability.md").read_text()
    defined = {path.name: set(re.findall(r"^def (test_\w+)", path.read_text(), re.MULTILINE)) for path in tests.glob("test_*.py")}
    named = re.findall(r"(test_\w+\.py)::(test_\w+)", page)
    missing = [f"{file}::{name}" for file, name in named if name not in defined.get(file, set())]
    catalogue = defined["test_bad_input.py"] | defined["test_faults.py"]
    bare = set(re.findall(r"`(test_\w+)`", page)) - {name for _, name in named}
    missing += sorted(name for name in bare if name not in catalogue)
    assert named and not missing, f"docs/reliability.md names tests that do not exist: {missing}"
