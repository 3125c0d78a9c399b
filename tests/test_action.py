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
from pathlib import Path

import pytest

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
    (job,) = workflow["jobs"].values()
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
    full = {**os.environ, **env, "GITHUB_OUTPUT": str(outputs), "GITHUB_PATH": str(outputs.with_suffix(".path")),
            "GITHUB_STEP_SUMMARY": str(outputs.with_suffix(".summary"))}
    full.pop("SOLGATE_HISTORY", None)
    full.pop("PYTEST_ADDOPTS", None)
    full.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=600)


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


@pytest.mark.sol(min={"h100*": 0.85, "a100*": 0.8})
def test_scale(sol):
    x = torch.rand(1 << 16)
    out = torch.empty_like(x)
    sol.measure(lambda: torch.mul(x, 2.0, out=out), bytes=sol.nbytes(x, out), flops={"fp32": x.numel()})
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


@pytest.mark.slow  # about 90 s here; its verdicts do not depend on timing, so it shares the CPU with the others
def test_the_action_installs_the_plugin_and_gates_a_throwaway_repository(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("hatchling")
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("pytest_solgate-*.whl")

    repo = tmp_path / "their-repo"
    repo.mkdir()
    init_repo(repo)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_kernels.py").write_text(USER_SUITE)
    (repo / "ci-cpu.toml").write_text(USER_PROFILE)
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsol_profile = "ci-cpu.toml"\nsol_device = "cpu"\n')
    (repo / ".gitignore").write_text(".solgate/\nsol-gate/\n")
    # The wiring is under test, not this shared machine's load: its runs read an idle machine's
    # counters, so the push run is never contended and is the pull request's baseline.
    idle = tmp_path / "idle-proc"
    (idle / "pressure").mkdir(parents=True)
    (idle / "pressure" / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (repo / "tests" / "conftest.py").write_text(
        "import pathlib\nfrom pytest_solgate.measure import contention\n\n"
        f"contention.PROC = pathlib.Path({str(idle)!r})\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a kernel and its budget")
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
    assert "exit-code=0" in (tmp_path / "push.out").read_text()
    assert (repo / ".solgate" / "history.db").is_file()
    for name in ("sol-report.html", "sol-results.json", "sol-summary.md"):
        assert (repo / "sol-gate" / name).is_file(), name
    assert "none on ci-cpu" in (repo / "sol-gate" / "sol-summary.md").read_text()

    # A pull request: a new commit judged against its base; it reads the history, never writes it.
    (repo / "tests" / "test_kernels.py").write_text(USER_SUITE.replace("1 << 16", "(1 << 16) + 1"))
    git(repo, "commit", "-q", "-am", "a change under review")
    recorded = (repo / ".solgate" / "history.db").read_bytes()
    pull = {**contexts, "github.event_name": "pull_request", "github.event.pull_request.base.sha": base,
            "github.ref": "refs/pull/1/merge"}
    warn = _inputs(python=sys.executable, plugin=str(wheel), test_path="tests",
                   pytest_args="-p no:cacheprovider --sol-gate=warn")  # the verdict depends on timing; the wiring does not
    reviewed = _run_step("run", _step_env("run", warn, pull), repo, tmp_path / "pr.out")
    assert reviewed.returncode == 0, reviewed.stdout + reviewed.stderr
    (m,) = json.loads((repo / "sol-gate" / "sol-results.json").read_text())["measurements"]
    assert m["baseline"] is not None and m["baseline"]["commit"] == base
    assert (repo / ".solgate" / "history.db").read_bytes() == recorded
    assert "--sol-no-save" in json.loads((repo / "sol-gate" / "sol-results.json").read_text())["run"]["command"]
