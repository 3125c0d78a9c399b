"""The solgate command: its entry function, run in this process as ``python -m pytest_solgate.cli``
runs it (tests/solgate_command.py), and a process of its own where the process is what is tested."""

import json
import os

import pytest

from solgate_command import solgate_main, solgate_process
from solgate_testing import (
    FAKE_CLOCK_KERNELS,
    FAKE_CLOCK_TIMING,
    SYNTHETIC_PROFILE,
    git,
    init_repo,
    recorded,
)

solgate = solgate_main  # in this process (tests/solgate_command.py); the other test files import it from here


def test_the_command_as_a_process_exits_with_the_status_it_prints():
    """What the in-process runs cannot show: the interpreter's exit carries main's status, argparse's
    --help exits 0 through SystemExit, and a bad input is one line on the process's stderr."""
    bad = solgate_process("frobnicate")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "invalid choice: 'frobnicate'" in bad.stderr, bad.stderr
    helped = solgate_process("compare", "--help")
    assert helped.returncode == 0 and "usage: solgate compare" in helped.stdout, helped.stderr
    fine = solgate_process("sol", "--bytes", "1e9")
    assert fine.returncode == 0 and "h100-sxm" in fine.stdout, fine.stderr


def test_help_on_every_subcommand():
    for command in ("profiles", "profile", "detect", "calibrate", "sol", "history", "trend", "compare", "import", "migrate", "init"):
        done = solgate(command, "--help")
        assert done.returncode == 0 and "usage: solgate " + command in done.stdout, command


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((), "the following arguments are required: COMMAND"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("profile",), "the following arguments are required: id"),
        (("profile", "h100-sxn"), "no profile with id 'h100-sxn'"),
        (("compare", "a"), "the following arguments are required: head"),
        (("import",), "import: give a --sol-json FILE, or --spool"),
        (("import", "missing.json"), "missing.json: no such file"),
        (("history", "--history", "nope.db"), "nope.db: no history database here yet"),
        (("detect", "--name", "Acme GPU 9000"), "no hardware profile matches device 'Acme GPU 9000'"),
        (("detect", "--device", "tpu"), "--sol-device='tpu' is not auto, cpu, cuda or cuda:N"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    done = solgate(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_profiles_profile_and_detect():
    listing = solgate("profiles").stdout
    assert "h100-sxm" in listing and "mi300x" in listing and "3350 GB/s" in listing
    shown = solgate("profile", "h200").stdout
    assert 'id = "h200"' in shown and "memory_bandwidth_gbps = 4800" in shown
    detected = solgate("detect", "--name", "NVIDIA H100 80GB HBM3")
    assert detected.stdout.strip() == "h100-sxm" and "*H100 80GB HBM3*" in detected.stderr
    warned = solgate("detect", "--name", "NVIDIA H100 80GB HBM3", "--sm-count", "114")
    assert "114 SMs" in warned.stderr
    assert solgate("detect", "--device", "cpu").stdout.startswith("cpu")


def test_import_is_idempotent_and_refuses_foreign_files(tmp_path):
    (tmp_path / "theirs.json").write_text(json.dumps({"benchmarks": []}))
    done = solgate("import", "theirs.json", "--history", "h.db", cwd=tmp_path)
    assert done.returncode == 2 and "not a solgate/1 file" in done.stderr
    (tmp_path / "broken.json").write_text("{not json")
    done = solgate("import", "broken.json", "--history", "h.db", cwd=tmp_path)
    assert done.returncode == 2 and "not JSON" in done.stderr


@pytest.fixture(params=["sqlite", "postgresql"])
def two_commits(request, pytester, monkeypatch):
    """A repository with commit A (1 ms, measured three times: a window with a spread) and commit
    B (the kernel 1.3 ms, its gate=False reference twice as slow), measured once. Its history is
    the default SQLite file, or a PostgreSQL database named by SOLGATE_HISTORY (pytest and the
    solgate commands read it alike). On the fake clock: the verdicts `compare` gives must not
    depend on how busy the machine was (a loaded run once made the window too noisy to judge)."""
    if request.param == "postgresql":
        monkeypatch.setenv("SOLGATE_HISTORY", request.getfixturevalue("postgres_url"))

    init_repo(pytester.path)
    pytester.makefile(".toml", synthetic=SYNTHETIC_PROFILE)
    (pytester.path / ".gitignore").write_text(".solgate/\n*.json\n*.html\n")
    commits = []
    for seconds, runs in ((1e-3, 3), (1.3e-3, 1)):
        # On the fake clock: a run measured while the machine is busy is contended and never a
        # baseline, so real timings on a loaded machine would leave A without a window.
        pytester.makepyfile(test_k=FAKE_CLOCK_KERNELS + f"\ndef test_k(sol):\n    sol.measure(lambda: busy({seconds}), bytes=0.5e6)\n"
                            f"    sol.measure(lambda: busy({seconds * 2 - 1e-3}), bytes=0.5e6, name='ref', gate=False)\n"
                            "\ndef test_same(sol):\n    sol.measure(lambda: busy(5e-4), bytes=0.2e6)\n")
        git(pytester.path, "add", "-A")
        git(pytester.path, "commit", "-q", "-m", f"{seconds}")
        commits.append(git(pytester.path, "rev-parse", "HEAD"))
        for _ in range(runs):
            pytester.runpytest(*FAKE_CLOCK_TIMING, "--sol-profile=synthetic.toml", f"--sol-json=run-{len(commits)}.json")
    return pytester.path, commits


def test_history_trend_compare(two_commits):
    path, (a, b) = two_commits
    listing = solgate("history", cwd=path)
    assert listing.returncode == 0 and listing.stdout.count("test_k.py::test_k [default]") == 4
    assert a[:10] in listing.stdout and b[:10] in listing.stdout
    assert solgate("history", "*same*", cwd=path).stdout.count("test_same") == 4
    compared = solgate("compare", a, b, cwd=path)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    assert f"1 regressed at {b[:10]} against {a[:10]}" in compared.stdout and "up to 10 clean runs" in compared.stdout
    # the reference slowed far more, but gate=False measurements are never judged
    (ref_row,) = [line for line in compared.stdout.splitlines() if "[ref]" in line]
    assert ref_row.endswith("not gated (gate=False)")
    itself = solgate("compare", a, a, cwd=path)  # a commit compared with itself: nothing to say
    assert itself.returncode == 2 and "are the same commit" in itself.stderr, itself.stderr
    assert solgate("compare", "HEAD~1", "HEAD", cwd=path).returncode == 1
    bad = solgate("compare", a, "nosuchref", cwd=path)
    assert bad.returncode == 2 and "'nosuchref' is neither a git ref" in bad.stderr
    trend = solgate("trend", "-o", "trend.html", cwd=path)
    assert trend.returncode == 0, trend.stderr
    page = (path / "trend.html").read_text()
    assert page.count('class="series"') == 3 and a[:8] in page and b[:8] in page
    assert "<script src" not in page


def test_import_merges_a_run_once(two_commits, tmp_path, request):
    path, _ = two_commits
    # Across stores: a run recorded beside a PostgreSQL history goes into a SQLite file, and back.
    target = tmp_path / "merged.db" if os.environ.get("SOLGATE_HISTORY") else request.getfixturevalue("postgres_url")
    first = solgate("import", str(path / "run-1.json"), "--history", str(target))
    assert first.returncode == 0 and "imported run" in first.stdout, first.stderr
    again = solgate("import", str(path / "run-1.json"), "--history", str(target))
    assert again.returncode == 0 and "nothing added" in again.stdout
    listing = solgate("history", "--history", str(target))
    assert listing.stdout.count("test_k.py::test_k [default]") == 1
    original = json.loads((path / "run-1.json").read_text())["measurements"]
    from pytest_solgate.record.history import open_store
    from pytest_solgate.results_json import encode
    with open_store(target) as store:
        stored = sorted((encode(m) for _, m in store.results()), key=lambda m: m["test"])
    for before, after in zip(sorted(original, key=lambda m: m["test"]), stored):
        assert after["samples"] == before["samples"] and after["sol"] == before["sol"] and after["verdict"] == before["verdict"]


def test_a_folder_of_user_profiles_joins_detection(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "acme.toml").write_text('id = "acme-x1"\nname = "Acme X1"\nkind = "gpu"\nmatch = ["*Acme X1*"]\n'
                                    'memory_bandwidth_gbps = 2000\n[peak_tflops]\nbf16_tensor = 500\n')
    (mine / "h100.toml").write_text('id = "h100-sxm"\nname = "our H100, clocks locked"\nkind = "gpu"\n'
                                    'match = ["*H100 80GB HBM3*"]\nmemory_bandwidth_gbps = 3000\n[peak_tflops]\nbf16_tensor = 800\n')
    done = solgate("detect", "--name", "Acme X1 rev B", "--dir", str(mine), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "acme-x1", done.stderr
    from pytest_solgate.declare.profiles import known_profiles

    by_id = {p.id: p for p in known_profiles(tmp_path / ".solgate", (str(mine),))}
    assert by_id["h100-sxm"].memory_bandwidth_gbps == 3000  # the user's file replaces the shipped one
    assert "h200" in by_id and "acme-x1" in by_id


def test_sol_profile_folder_is_checked_at_start(pytester):
    (pytester.path / "mine").mkdir()
    (pytester.path / "mine" / "ok.toml").write_text('id = "ok"\nname = "OK"\nkind = "gpu"\nmemory_bandwidth_gbps = 1\n'
                                                    '[peak_tflops]\nfp32 = 1\n')
    pytester.makepyfile("def test_x():\n    pass\n")
    pytester.runpytest("--sol-profile=mine").assert_outcomes(passed=1)


def test_compare_refuses_an_ambiguous_or_empty_sha(tmp_path, history_location):
    from pytest_solgate.record.history import open_store
    from pytest_solgate.results import RunInfo

    m = recorded(profile="p", samples=(1e-3,), noise=0.0, t_sol=1e-4, sol=0.1, ceilings="datasheet", verdict=None)
    with open_store(history_location) as store:
        for i, sha in enumerate(("abc1" + "0" * 36, "abc2" + "0" * 36)):
            store.record_run(RunInfo(id=f"r{i}", started_at=f"2026-12-02T00:0{i}:00", commit=sha), [m])
        where = store.location
    ambiguous = solgate("compare", "abc", "abc1", "--history", history_location, cwd=tmp_path)
    assert ambiguous.returncode == 2
    assert f"'abc' is ambiguous in {where}: abc100000000, abc200000000" in ambiguous.stderr
    empty = solgate("compare", "", "abc1", "--history", history_location, cwd=tmp_path)
    assert empty.returncode == 2 and f"'' is neither a git ref here nor a commit in {where}" in empty.stderr
    fine = solgate("compare", "abc1", "abc2", "--history", history_location, cwd=tmp_path)
    assert fine.returncode == 0, fine.stderr


def test_speed_of_light_without_timing():
    one = solgate("sol", "--bytes", "134217728", "--flops", "bf16_tensor=1.37e11", "--profile", "h200")
    assert one.returncode == 0, one.stderr
    header, row = one.stdout.strip().splitlines()
    # T_SOL = max(134217728 B / 4.8 TB/s, 1.37e11 / 989.4 TFLOP/s) = max(28.0 us, 138.5 us)
    assert row.split()[:4] == ["h200", "138", "us", "compute"] and "206 FLOP/B (bf16_tensor)" in row
    every = solgate("sol", "--bytes", "1e9").stdout.splitlines()
    rows = {line.split()[0]: line for line in every[1:]}
    assert "a100-sxm4-80gb" in rows and "mi300x" in rows and all("memory" in line for line in rows.values())
    lacking = solgate("sol", "--flops", "fp8_tensor=1e12").stdout
    assert "(no fp8_tensor roof)" in lacking and "h100-sxm" in lacking


@pytest.mark.parametrize("args, fragment", [
    ((), "sol: declare the work: --bytes N (total fused bytes) and/or --flops PRECISION=COUNT"),
    (("--flops", "bf16_tensor"), "write PRECISION=COUNT"),
    (("--flops", "bf16_tensor=lots"), "'lots' is not a number"),
    (("--flops", "fp12=1e9"), "unknown precision 'fp12'"),
    (("--bytes", "-1"), "bytes=-1.0 is negative"),
    (("--bytes", "1e9", "--profile", "h100-sxn"), "no profile with id 'h100-sxn'"),
])
def test_speed_of_light_bad_input(args, fragment):
    done = solgate("sol", *args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and fragment in done.stderr, done.stderr


def test_small_things_of_the_cli(two_commits, tmp_path):
    path, _ = two_commits
    by_name = solgate("history", "test_k*", cwd=path)  # ids start with the path; the name matches too
    assert by_name.stdout.count("test_k.py::test_k [default]") == 4
    assert by_name.stdout.splitlines()[0].split()[2] == "dirty"
    from pytest_solgate.declare.profiles import HardwareProfile, profile_to_toml

    cached = tmp_path / ".solgate" / "profiles" / "cpu-0123456789.toml"
    cached.parent.mkdir(parents=True)
    cached.write_text(profile_to_toml(HardwareProfile(id="cpu-0123456789", name="this CPU", kind="cpu",
                                                      memory_bandwidth_gbps=30, peak_tflops={"fp32": 0.1}, ceilings="measured")))
    shown = solgate("profile", "cpu-0123456789", cwd=tmp_path)
    assert shown.returncode == 0 and 'id = "cpu-0123456789"' in shown.stdout, shown.stderr
    unknown = solgate("profile", "h100-sxn", cwd=tmp_path).stderr
    assert "did you mean h100-nvl, h100-pcie, h100-sxm, h100?" in unknown or "did you mean h100" in unknown
    assert "rtx-4090" in unknown and "v100-sxm2" in unknown and "mi300x" in unknown  # every known id, not some


def test_this_cpus_profile_id_is_in_profiles_and_detect(tmp_path):
    """A CPU user looks for the id a budget glob names: `solgate detect` prints it and `solgate
    profiles` lists it, calibrated or not yet (it is the fingerprint's, known before measuring)."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.declare.profiles import HardwareProfile
    from pytest_solgate.measure import calibrate

    cpu_id = f"cpu-{calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))}"
    detected = solgate("detect", "--device", "cpu", cwd=tmp_path)
    assert detected.returncode == 0 and detected.stdout.strip() == cpu_id, detected.stderr
    assert "not calibrated yet" in detected.stderr
    listed = solgate("profiles", cwd=tmp_path).stdout
    assert f"{cpu_id:<16} this CPU, not calibrated yet" in listed and "h100-sxm" in listed
    calibrate.write_profile(calibrate.cpu_profile_path(calibrate.user_cache_dir(), cpu_id.removeprefix("cpu-")),
                            HardwareProfile(id=cpu_id, name="this CPU, measured", kind="cpu", memory_bandwidth_gbps=82,
                                            peak_tflops={"fp32": 0.1}, ceilings="measured"))
    assert "calibrated, cached in" in solgate("detect", "--device", "cpu", cwd=tmp_path).stderr
    listed = solgate("profiles", cwd=tmp_path).stdout
    assert any(line.startswith(cpu_id) and "82 GB/s" in line for line in listed.splitlines()), listed
    assert "not calibrated yet" not in listed
