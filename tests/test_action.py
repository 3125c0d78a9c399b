"""The CI recipe for a user's repository (action.yml), exercised the way a workflow runs it.

The composite action's run steps read their inputs only through ``env:``, so the scripts in
action.yml can be run here as written: the plugin installed from a wheel built from this checkout
into a throw-away environment beside the runner's torch, then a user's suite in a throw-away git
repository, once as a push to the default branch (records the history) and once as a pull request
(judged against the base commit, history untouched). The GitHub-side steps (cache, artifact,
comment) are actions of GitHub's own; their wiring is checked against the inputs and the rules of
docs/ci.md, and .ci/run validates action.yml against GitHub's schema and lints the workflows.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from idle_machine import PROC_ROOT_VARIABLE

from solgate_testing import git, init_repo

ROOT = Path(__file__).resolve().parent.parent
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_yaml(path: Path):
    from ruamel.yaml import YAML  # check-jsonschema's YAML reader, a test dependency

    return YAML(typ="safe").load(path.read_text())


ACTION = load_yaml(ROOT / "action.yml")
INPUTS = ACTION["inputs"]
STEPS = {step.get("id") or step["name"]: step for step in ACTION["runs"]["steps"]}


def docs_workflow() -> dict:
    """The workflow docs/ci.md tells a user to copy (its first ```yaml block)."""
    from ruamel.yaml import YAML

    text = (ROOT / "docs" / "ci.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    return YAML(typ="safe").load(block)


def test_run_steps_take_their_inputs_through_env_only():
    """No ${{ }} inside a script (a pull request's text is never pasted into shell code), and
    every input an env entry names exists."""
    for name, step in STEPS.items():
        if "run" not in step:
            continue
        assert "${{" not in step["run"], name
        for value in step.get("env", {}).values():
            for expression in EXPRESSION.findall(str(value)):
                if expression.startswith("inputs."):
                    assert expression.removeprefix("inputs.") in INPUTS, (name, expression)


@pytest.mark.parametrize("source", ["sol-gate.yml", "docs/ci.md"])
def test_workflows_follow_the_rules_of_docs_ci(source):
    """This repository's workflow and the one docs/ci.md gives users: the action with inputs it
    has, concurrency per pull request and never cancelling a default-branch push, forks kept off
    the GPU runner."""
    workflow = load_yaml(ROOT / ".github" / "workflows" / source) if source.endswith(".yml") else docs_workflow()
    group = workflow["concurrency"]["group"]
    assert "github.ref" in group and "github.run_id" in group  # per PR; each push a group of its own
    assert workflow["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    job = workflow["jobs"]["gate"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert workflow["permissions"]["pull-requests"] == "write"
    (gate,) = [s for s in job["steps"] if "pytest-solgate" in s.get("uses", "") or s.get("uses") == "./"]
    assert set(gate.get("with", {})) <= set(INPUTS), set(gate["with"]) - set(INPUTS)
    checkout = job["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["fetch-depth"] == 0


def _run_step(step_id: str, env: dict, cwd: Path, outputs: Path) -> subprocess.CompletedProcess:
    """Run one of action.yml's run steps with bash, as the runner does, its inputs in ``env``."""
    step = STEPS[step_id]
    assert step["shell"] == "bash"
    # A workflow's environment has none of this suite's settings: no history, addopts or xdist
    # worker of the suite's, and no trusted test clock (the action refuses that one, where a test
    # gives it in ``env``).
    suites_own = ("SOLGATE_HISTORY", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "SOLGATE_TRUST_TEST_CLOCK")
    full = {**{k: v for k, v in os.environ.items() if k not in suites_own}, **env, "GITHUB_OUTPUT": str(outputs),
            "GITHUB_PATH": str(outputs.with_suffix(".path")), "GITHUB_STEP_SUMMARY": str(outputs.with_suffix(".summary"))}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=600)


def github_outputs(path: Path) -> dict:
    """A step's outputs as the runner reads $GITHUB_OUTPUT: NAME=VALUE lines and NAME<<DELIMITER
    blocks (the value is the lines up to the delimiter's own line)."""
    lines, found = path.read_text().split("\n"), {}
    while lines:
        line = lines.pop(0)
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter)
            found[name], lines = "\n".join(lines[:end]), lines[end + 1:]
        elif "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
    return found


def _inputs(**given: str) -> dict:
    """Every input as its env entry would see it: given, else the action's default."""
    return {name: str(given.get(name.replace("-", "_"), spec.get("default", ""))) for name, spec in INPUTS.items()}


def _step_env(step_id: str, inputs: dict, contexts: dict) -> dict:
    env = {}
    for key, value in STEPS[step_id].get("env", {}).items():
        env[key] = EXPRESSION.sub(lambda m: inputs[m.group(1).removeprefix("inputs.")] if m.group(1).startswith("inputs.")
                                  else contexts[m.group(1)], str(value))
    return env


USER_SUITE = '''
import pytest
import torch

WORK = 1  # multiplies per call: a change under review makes it do many times the work


# A tolerance no load reaches: a run of unchanged code would have to read 100 times slower than
# its base to fail it (a process at nice 10 beside busy neighbours has read 50 times slower on wall
# time), and 10,000 times the work is beyond it however the two runs are timed.
@pytest.mark.sol(min={"h100*": 0.85, "a100*": 0.8}, max_regression=0.99)
def test_scale(sol):
    x = torch.rand(1 << 14)
    out = torch.empty_like(x)

    def scale():
        for _ in range(WORK):
            torch.mul(x, 2.0, out=out)

    sol.measure(scale, bytes=sol.nbytes(x, out), flops={"fp32": x.numel()})
'''

# The user's own profile for their CPU CI runner (so the test need not calibrate this machine).
USER_PROFILE = '''
id = "ci-cpu"
name = "the CI runner's CPU"
kind = "cpu"
memory_bandwidth_gbps = 1000  # above any CPU's cache bandwidth: this small kernel, batched warm, cannot read above-sol
ceilings = "measured"
[peak_tflops]
fp32 = 0.1
'''


# A wheel built, installed into a fresh venv and run three times (30 s of a 2-core VM): .ci/run's long step
# runs it, beside the SIGKILL scenario; its verdicts do not depend on timing.
@pytest.mark.long(seconds=32)
def test_the_action_installs_the_plugin_and_gates_a_throwaway_repository(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("hatchling")
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("pytest_solgate-*.whl")

    repo = _their_repo(tmp_path)
    base = git(repo, "rev-parse", "HEAD")

    venv = tmp_path / "runner-temp" / "solgate-venv"
    # The runner's Python is this one (it has torch); the plugin comes from the wheel.
    inputs = _inputs(python=sys.executable, plugin=str(wheel), test_path="tests", pytest_args="-p no:cacheprovider")
    contexts = {"github.action_path": str(ROOT), "runner.temp": str(venv.parent), "github.event_name": "push",
                "github.event.pull_request.base.sha": "", "github.ref": "refs/heads/main",
                "github.event.repository.default_branch": "main"}
    outputs = tmp_path / "install.out"
    installed = _run_step("install", _step_env("install", inputs, contexts), repo, outputs)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "using the runner's torch" in installed.stdout and "Name: pytest-solgate" in installed.stdout
    assert (venv / "bin" / "python").exists() and str(venv / "bin") in outputs.with_suffix(".path").read_text()
    # The plugin is the wheel's, installed into the throw-away environment, not this checkout.
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import pytest_solgate; print(pytest_solgate.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr

    # A push to the default branch: judged, and recorded in the history the cache would carry.
    pushed = _run_step("run", _step_env("run", inputs, contexts), repo, tmp_path / "push.out")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert github_outputs(tmp_path / "push.out")["exit-code"] == "0"
    assert (repo / ".solgate" / "history.db").is_file()
    for name in ("sol-report.html", "sol-results.json", "sol-summary.md"):
        assert (repo / "sol-gate" / name).is_file(), name
    assert "none on ci-cpu" in (repo / "sol-gate" / "sol-summary.md").read_text()

    # A pull request on a machine that is always busy: a new commit judged against its base, beside
    # a /proc whose CPU pressure says that tasks waited for a CPU 80 % of the time; it reads the
    # history, never writes it. The change does the same work 10,000 times per call: no timing on any
    # machine, whatever its clock, hides that from a tolerance of 99 %. Against one baseline run
    # the gate cannot judge it (no spread shows the noise): pytest passes it as ambiguous, and the
    # action's `solgate check` fails the step, naming the machine's pressure (no silent green).
    recorded = (repo / ".solgate" / "history.db").read_bytes()
    pull = {**contexts, "github.event_name": "pull_request", "github.event.pull_request.base.sha": base,
            "github.ref": "refs/pull/1/merge"}
    (repo / "tests" / "test_kernels.py").write_text(USER_SUITE.replace("WORK = 1 ", "WORK = 10_000 "))
    git(repo, "commit", "-q", "-am", "a change under review: 10,000 times the work")
    with pressure_rising(tmp_path / "busy-proc", stall=0.8) as busy:
        slower = _pull_request(repo, inputs, pull, busy, tmp_path / "pr.out")
        assert slower["verdict"] == "ambiguous" and slower["baseline"]["change"] < -0.99, slower["reason"]
        assert slower["contended"].startswith("CPU pressure"), slower
        assert github_outputs(tmp_path / "pr.out")["exit-code"] == "1"
        # The same pull request with the change undone: unchanged code passes the check on the busy machine.
        git(repo, "revert", "--no-edit", "HEAD")
        unchanged = _pull_request(repo, inputs, pull, busy, tmp_path / "pr-unchanged.out")
        assert unchanged["contended"].startswith("CPU pressure") and unchanged["verdict"] == "pass", unchanged["reason"]
        assert github_outputs(tmp_path / "pr-unchanged.out")["exit-code"] == "0"
    assert (repo / ".solgate" / "history.db").read_bytes() == recorded
    assert "--sol-no-save" in json.loads((repo / "sol-gate" / "sol-results.json").read_text())["run"]["command"]


def _pull_request(repo: Path, inputs: dict, pull: dict, proc: Path, outputs: Path) -> dict:
    """The action's run step on a pull request, beside the /proc ``proc``: its one measurement. The
    step's exit status is that of its `solgate check` (the suite itself passes either way), and a
    failure names the machine's pressure."""
    step = _run_step("run", {**_step_env("run", inputs, pull), PROC_ROOT_VARIABLE: str(proc)}, repo, outputs)
    (m,) = json.loads((repo / "sol-gate" / "sol-results.json").read_text())["measurements"]
    assert m["baseline"] is not None and m["baseline"]["commit"] == pull["github.event.pull_request.base.sha"]
    assert "1 passed" in step.stdout, step.stdout + step.stderr  # what fails the step is the check
    unjudged = m["verdict"] == "ambiguous"
    assert step.returncode == int(unjudged), step.stdout + step.stderr
    said = "::error title=pytest-solgate::a slowdown beyond its tolerance could not be judged" in step.stdout
    assert said == unjudged and ("ambiguous: the machine was busy (CPU pressure " in step.stdout) == unjudged, step.stdout
    return m


@contextmanager
def pressure_rising(folder: Path, stall: float) -> Iterator[Path]:
    """A /proc (tests/idle_machine.py reads it in every session this test starts) whose CPU pressure
    counter rises with the monotonic clock at ``stall`` seconds a second, as on a machine where
    tasks waited for a CPU that share of the time: written every few milliseconds, whole (a
    rename), so that a measurement's reading over its sampling window is about ``stall``, far
    above the 25 % that marks it contended, whatever this machine's own load."""
    (folder / "pressure").mkdir(parents=True)
    target, stop = folder / "pressure" / "cpu", threading.Event()

    def write() -> None:
        started = time.monotonic()
        while True:
            total = round((time.monotonic() - started) * stall * 1e6)  # microseconds, as the kernel counts
            (folder / "pressure" / "cpu.new").write_text(f"some avg10={stall * 100:.2f} avg60=0.00 avg300=0.00 total={total}\n"
                                                         "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
            os.replace(folder / "pressure" / "cpu.new", target)
            if stop.wait(0.002):
                return

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while not target.exists():
        time.sleep(0.001)
    try:
        yield folder
    finally:
        stop.set()
        writer.join()


# --- the inputs, checked at the first step (issue 30, section 2, case 6) -------------------------
def _validate(tmp_path: Path, **given: str) -> subprocess.CompletedProcess:
    inputs = _inputs(**{"python": sys.executable, **given})
    contexts = {"github.action_path": str(ROOT), "runner.temp": str(tmp_path)}
    return _run_step("validate", _step_env("validate", inputs, contexts), tmp_path, tmp_path / "validate.out")


def test_the_first_step_checks_the_inputs_and_the_defaults_pass(tmp_path):
    assert ACTION["runs"]["steps"][0].get("id") == "validate"  # before anything is installed or written
    checked = set(EXPRESSION.findall(" ".join(map(str, STEPS["validate"]["env"].values()))))
    free = {"inputs.pytest-args", "inputs.install"}  # pytest's and pip's own arguments: they check them
    assert checked | free == {f"inputs.{name}" for name in INPUTS}, {f"inputs.{n}" for n in INPUTS} - checked - free
    done = _validate(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "::error" not in done.stdout
    assert re.fullmatch(r"[a-z0-9._-]+", github_outputs(tmp_path / "validate.out")["leg"])


@pytest.mark.parametrize("name, value", [
    ("output-dir", ""),  # once: mkdir '' failed, the step went on, and pytest wrote /sol-results.json
    ("output-dir", "/"),
    ("output-dir", "../elsewhere"),
    ("test-path", " "),
    ("python", "no-such-python3"),
    ("torch", ""),
    ("plugin", "no/such/pytest_solgate.whl"),
    ("plugin-extras", "triton changes"),
    ("history-url", "mysql://db/solgate"),
    ("baseline", "--all"),
    ("comment", "yes"),
    ("github-token", ""),
    ("leg", "h100 / cuda 12"),
    ("import-runs", "many"),
    ("ab", "sometimes"),
    ("ab-max-time", "0"),
])
def test_a_bad_input_is_one_error_line_naming_it_and_the_step_fails(tmp_path, name, value):
    done = _validate(tmp_path, **{name.replace("-", "_"): value})
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and f"input '{name}'" in errors[0], done.stdout
    assert not (tmp_path / "validate.out").exists() or "leg" not in github_outputs(tmp_path / "validate.out")


@pytest.mark.parametrize("pytest_args, environment", [
    ("--sol-trust-test-clock", {}),
    ("-o sol_trust_test_clock=true", {}),
    ("", {"SOLGATE_TRUST_TEST_CLOCK": "1"}),  # as a user's workflow could set it in env:
])
def test_the_action_refuses_a_trusted_test_clock(tmp_path, pytest_args, environment):
    """A clock from a test never makes a real result: a gate that trusts one is refused, by option
    or by variable, in one line naming pytest-args."""
    inputs = _inputs(python=sys.executable, pytest_args=pytest_args)
    contexts = {"github.action_path": str(ROOT), "runner.temp": str(tmp_path)}
    env = {**_step_env("validate", inputs, contexts), **environment}
    done = _run_step("validate", env, tmp_path, tmp_path / "validate.out")
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "input 'pytest-args' trusts a test's clock" in errors[0], done.stdout


# --- a history that survives GitHub (issue 31 item 1) --------------------------------------------
def test_cache_keys_artifacts_and_comments_are_per_leg_run_and_attempt():
    """A key is written once, so each run and attempt saves under its own (a re-run's save is
    never refused), restored by the leg's prefix; artifacts and the PR comment carry the leg, so
    matrix legs neither overwrite each other nor mix GPU models; the calibrated ceilings travel
    in the same cache as the history."""
    restore, save = STEPS["restore the history and the calibrated ceilings"], None
    for step in ACTION["runs"]["steps"]:
        if step.get("uses", "").startswith("actions/cache/save@"):
            save = step
    leg = "${{ steps.validate.outputs.leg }}"
    for step in (restore, save):
        key = step["with"]["key"]
        assert leg in key and key.endswith("${{ github.run_id }}-${{ github.run_attempt }}"), key
        assert step["with"]["path"].strip().splitlines() == [".solgate/history.db", ".solgate/profiles"]
    assert save["with"]["key"] == restore["with"]["key"]
    (prefix,) = restore["with"]["restore-keys"].strip().splitlines()
    assert restore["with"]["key"].startswith(prefix) and prefix.endswith(f"{leg}-")
    uploads = [s for s in ACTION["runs"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    names = [s["with"]["name"] for s in uploads]
    assert len(names) == 2 and all(leg in n and n.endswith("${{ github.run_id }}-${{ github.run_attempt }}") for n in names)
    fetch = STEPS["fetch the latest default-branch runs of this leg"]
    assert fetch["env"]["SOLGATE_RUN_PREFIX"] == f"sol-run-{leg}-" and any(n.startswith("sol-run-") for n in names)
    comment = STEPS["post or update the one PR comment"]
    assert comment["env"]["SOLGATE_LEG"] == leg and "leg=${process.env.SOLGATE_LEG}" in comment["with"]["script"]


def _their_repo(tmp_path: Path) -> Path:
    """A user's repository: one kernel with its budget, their CPU runner's profile, one commit."""
    repo = tmp_path / "their-repo"
    repo.mkdir()
    init_repo(repo)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_kernels.py").write_text(USER_SUITE)
    (repo / "ci-cpu.toml").write_text(USER_PROFILE)
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsol_profile = "ci-cpu.toml"\nsol_device = "cpu"\n')
    (repo / ".gitignore").write_text(".solgate/\nsol-gate/\n")
    # The wiring is under test, not this shared machine's load: its runs read an idle machine's
    # counters (conftest's SOLGATE_TEST_PROC_ROOT, which they inherit), so the push run is never
    # contended and is the pull request's baseline.
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a kernel and its budget")
    return repo


def _runs_in(history: Path) -> list[str]:
    from pytest_solgate.record.history import open_store

    with open_store(str(history)) as store:
        return sorted(run["run_uid"] for run in store.runs())


@pytest.mark.slow  # three pytest runs of one small kernel, on the CPU
def test_two_pushes_that_restored_one_cache_merge_and_an_import_is_idempotent(tmp_path):
    """Two pushes to main restore the same cache and each saves a history without the other's
    run; the next job restores the newer one, and the merge step imports both runs' JSON (as the
    artifacts carry them): it holds all three runs, and merging again adds nothing."""
    repo = _their_repo(tmp_path)
    fast = ["-p", "no:cacheprovider", "--sol-min-time=0.01", "--sol-max-time=0.2", "--sol-gate=warn"]

    def job(history: Path, json_out: Path | None = None):
        json_args = [f"--sol-json={json_out}"] if json_out else []
        done = subprocess.run([sys.executable, "-m", "pytest", "tests", *fast, f"--sol-history={history}", *json_args],
                              cwd=repo, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

    cached = tmp_path / "cache-before.db"
    job(cached)  # what both pushes restore
    runs = tmp_path / "runner-temp" / "solgate-runs"
    for push in ("a", "b"):
        history = tmp_path / f"history-{push}.db"
        history.write_bytes(cached.read_bytes())
        (tmp_path / push).mkdir()
        job(history, tmp_path / push / "sol-results.json")
        runs.mkdir(parents=True, exist_ok=True)
        import zipfile  # the artifact as downloadArtifact returns it: a zip of the uploaded file

        with zipfile.ZipFile(runs / f"sol-run-cpu-x86_64-{push}-1.zip", "w") as archive:
            archive.write(tmp_path / push / "sol-results.json", "sol-results.json")
    (repo / ".solgate").mkdir(exist_ok=True)
    (repo / ".solgate" / "history.db").write_bytes((tmp_path / "history-b.db").read_bytes())  # the newer cache
    everything = sorted(set(_runs_in(tmp_path / "history-a.db")) | set(_runs_in(tmp_path / "history-b.db")))
    assert len(everything) == 3 and len(_runs_in(repo / ".solgate" / "history.db")) == 2

    venv = Path(sys.executable).parent.parent  # this environment has `solgate`, as the action's would
    contexts = {"runner.temp": str(tmp_path / "runner-temp")}
    env = {**_step_env("merge", _inputs(), contexts), "SOLGATE_VENV": str(venv)}
    merged = _run_step("merge", env, repo, tmp_path / "merge.out")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert _runs_in(repo / ".solgate" / "history.db") == everything
    assert merged.stdout.count("imported run") == 1 and merged.stdout.count("nothing added") == 1, merged.stdout
    again = _run_step("merge", env, repo, tmp_path / "merge.out")
    assert again.returncode == 0 and again.stdout.count("nothing added") == 2, again.stdout
    assert _runs_in(repo / ".solgate" / "history.db") == everything


def _required_check(source: str) -> dict:
    workflow = load_yaml(ROOT / ".github" / "workflows" / source) if source.endswith(".yml") else docs_workflow()
    return workflow["jobs"]["required"]


@pytest.mark.parametrize("source", ["sol-gate.yml", "docs/ci.md"])
@pytest.mark.parametrize("from_fork, gate, passes", [
    ("false", "success", True),
    ("false", "failure", False),
    ("false", "cancelled", False),
    ("true", "skipped", False),  # a skipped job counts as success in branch protection: this one does not
])
def test_the_required_check_fails_unless_the_gate_ran_and_passed(tmp_path, source, from_fork, gate, passes):
    job = _required_check(source)
    assert job["needs"] == "gate" and job["if"] == "always()"  # never skipped itself
    (step,) = job["steps"]
    assert step["env"]["GATE_RESULT"] == "${{ needs.gate.result }}"
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env={**os.environ, "GATE_RESULT": gate, "FROM_FORK": from_fork},
                          capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode == 0) == passes, done.stdout
    if from_fork == "true":
        assert "::error title=sol-gate::not gated" in done.stdout


@pytest.mark.long(seconds=11)  # a git clone and a wheel build from it: .ci/run's long step runs it
def test_a_local_git_plugin_installs_on_the_runners_pip(tmp_path):
    """`plugin: git+file:///path` on pip 23.2 failed ('It looks like a path') in the form
    `pytest-solgate @ git+file:///...`; the install step spells the host out (docs/install.md)."""
    pytest.importorskip("hatchling")
    clone = tmp_path / "plugin-clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    venv = tmp_path / "runner-temp" / "solgate-venv"
    inputs = _inputs(python=sys.executable, plugin=f"git+file://{clone}")
    contexts = {"github.action_path": str(ROOT), "runner.temp": str(venv.parent)}
    env = {**_step_env("install", inputs, contexts), "PIP_NO_BUILD_ISOLATION": "1"}  # hatchling from the runner's site
    installed = _run_step("install", env, tmp_path, tmp_path / "install.out")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Name: pytest-solgate" in installed.stdout


# --- inputs that would write workflow commands or outputs of their own (issue 38 item 11) --------
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_an_input_with_a_line_break_is_refused_before_any_line_echoes_it(tmp_path, name):
    done = _validate(tmp_path, **{name.replace("-", "_"): "sol-gate\n::warning::forged\r"})
    assert done.returncode != 0
    lines = done.stdout.splitlines()
    assert not any(line.startswith("::warning") for line in lines), done.stdout  # no injected command
    errors = [line for line in lines if line.startswith("::error")]
    assert len(errors) == 1 and f"input '{name}'" in errors[0], done.stdout
    assert not (tmp_path / "validate.out").exists()


def _their_failing_repo(tmp_path: Path) -> tuple[Path, dict]:
    """A repository whose suite fails, and a stand-in for the action's venv: this Python."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_fails.py").write_text("def test_fails():\n    assert False\n")
    venv = tmp_path / "solgate-venv" / "bin"  # where the install step makes it: $RUNNER_TEMP/solgate-venv
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    contexts = {"runner.temp": str(tmp_path), "github.event_name": "push", "github.event.pull_request.base.sha": "",
                "github.ref": "refs/heads/main", "github.event.repository.default_branch": "main"}
    return repo, contexts


def test_an_output_dir_cannot_forge_the_exit_code_output(tmp_path):
    import site
    import venv

    repo, contexts = _their_failing_repo(tmp_path)
    # This step runs pytest with the plugin: the stand-in must be a real venv (a bare link to this
    # Python, with no pyvenv.cfg, runs the global interpreter, which has the plugin only by chance),
    # and one that sees this environment's packages, the plugin among them.
    standin = tmp_path / "solgate-venv"
    venv.EnvBuilder(clear=True, symlinks=True).create(standin)
    (purelib,) = (standin / "lib").glob("python*/site-packages")
    (purelib / "this-environment.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({folder!r})" for folder in site.getsitepackages()) + "\n")
    inputs = _inputs(test_path="test_fails.py", pytest_args="-p no:cacheprovider", output_dir="out\nexit-code=0\nx")
    ran = _run_step("run", _step_env("run", inputs, contexts), repo, tmp_path / "run.out")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    outputs = github_outputs(tmp_path / "run.out")
    assert outputs["exit-code"] == "1" and set(outputs) == {"exit-code", "report"}, outputs


def test_the_run_step_names_an_empty_output_dir(tmp_path):
    repo, contexts = _their_failing_repo(tmp_path)
    ran = _run_step("run", _step_env("run", _inputs(output_dir=""), contexts), repo, tmp_path / "run.out")
    assert ran.returncode != 0
    (error,) = [line for line in ran.stdout.splitlines() if line.startswith("::error")]
    assert "input 'output-dir'" in error and "mkdir" not in ran.stderr


# --- the paired A/B on a pull request (issue 36 item 2) --------------------------------------------
def _solgate_shim(folder: Path) -> Path:
    """A stand-in for the action's environment: bin/solgate runs this checkout's command."""
    (folder / "bin").mkdir(parents=True)
    shim = folder / "bin" / "solgate"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m pytest_solgate.cli \"$@\"\n")
    shim.chmod(0o755)
    return folder


def test_on_a_pull_request_the_ab_step_runs_against_the_merge_base_and_its_table_joins_the_comment(tmp_path):
    from test_bisect import Repo

    path = tmp_path / "project"
    path.mkdir()
    repo = Repo(path)
    base = repo.commit("main", seconds=1e-3)
    repo.commit("the pull request: 1.2x slower", seconds=1.2e-3)
    venv = _solgate_shim(tmp_path / "venv")
    (path / "sol-gate").mkdir()
    (path / "sol-gate" / "sol-summary.md").write_text("the suite's summary\n")
    contexts = {"runner.temp": str(tmp_path), "github.event_name": "pull_request",
                "github.event.pull_request.base.sha": base}
    env = {**_step_env("ab", _inputs(test_path="test_kernels.py", ab_max_time="300"), contexts),
           "SOLGATE_VENV": str(venv), "TMPDIR": str(repo.scratch),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),  # tests/: the suite's idle_machine plugin
           # The repository times on the tests' fake clock (test_bisect.Repo), trusted here as by the
           # rest of this suite, so that the A/B's verdict is exact; a workflow's validate step refuses it.
           "SOLGATE_TRUST_TEST_CLOCK": "1"}
    done = _run_step("ab", env, path, tmp_path / "ab.out")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exit-code=1" in (tmp_path / "ab.out").read_text()
    summary = (path / "sol-gate" / "sol-summary.md").read_text()
    assert summary.startswith("the suite's summary") and f"A/B against the base {base[:10]}: 1 regressed" in summary
    assert "| -16.7% |" in summary and "**regressed**" in summary
    assert not (path / ".solgate" / "history.db").exists()  # a pull request writes no history
    # a push (ab: auto) does not run it
    pushed = _run_step("ab", {**env, "SOLGATE_EVENT": "push"}, path, tmp_path / "push.out")
    assert pushed.returncode == 0 and "no A/B on a push event" in pushed.stdout
