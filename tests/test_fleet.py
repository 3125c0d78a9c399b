"""Like with like across a fleet (issue 36): runners alike in GPU model, driver, CUDA, torch,
triton, Python and clock setting are one environment for baselines, whatever their host names.

Real pytester runs at real commits with one shared history, on the fake clock (each runner's speed
is exact, so a runner a few percent off the others is that and nothing else); the host name each
run records is set per run, as an ephemeral runner gets a new one every job.
"""

import math
import re
import socket
import statistics

import pytest
from test_history import Repo

# Each runner a few percent faster or slower than the others, as two GPUs of one model are.
FIXED = {"runner-a": 1.00, "runner-b": 1.03, "runner-c": 0.97, "runner-d": 1.02}


@pytest.fixture
def fleet(pytester, monkeypatch):
    repo = Repo(pytester)

    def run_on(host, message, factor):
        # socket.gethostname is what the run's environment and its run record read as the host
        monkeypatch.setattr(socket, "gethostname", lambda: host)
        repo.commit(message, seconds=1e-3 * factor)
        result, verdicts, data = repo.run()
        assert data["run"]["host"] == host
        return result, verdicts["test_kernel"]

    return run_on


EPHEMERAL = (1.00, 1.03, 0.97, 1.02, 0.98, 1.01)  # one job each, a new host every job


def _ephemeral_history(fleet):
    """A new host every job, each a few percent off the others, all of them passing."""
    for job, factor in enumerate(EPHEMERAL):
        _, kernel = fleet(f"ephemeral-{job}", f"main {job}", factor)
        assert kernel["verdict"] != "regressed", kernel["reason"]


def test_fixed_runners_taking_commits_in_turn_catch_a_slowdown(fleet):
    for turn in range(2):
        for host, factor in FIXED.items():
            _, kernel = fleet(host, f"main {turn} on {host}", factor)
            if turn:  # every runner's own spread off the others is within the host spread
                assert kernel["verdict"] == "pass", kernel["reason"]
    result, kernel = fleet("runner-b", "1.3x slower", FIXED["runner-b"] * 1.3)
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "4 hosts: spread between hosts 2.6% (per-host levels), in the noise floor" in kernel["reason"]


def test_an_ephemeral_runner_fails_a_slowdown_and_names_the_host_spread(fleet):
    _ephemeral_history(fleet)
    result, kernel = fleet("ephemeral-new", "1.3x slower", 0.99 * 1.3)
    assert kernel["verdict"] == "regressed", kernel["reason"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    reason = kernel["reason"]
    assert re.search(r"6 hosts: spread between hosts [1-9]\.\d% \(run to run\)", reason) and "host ephemeral-new is new to it" in reason, reason
    assert "the host spread of " in reason and "another environment" not in reason, reason


def test_an_ephemeral_runner_passes_an_unchanged_commit(fleet):
    _ephemeral_history(fleet)
    result, kernel = fleet("ephemeral-new", "docs only", 0.99)
    assert kernel["verdict"] == "pass", kernel["reason"]
    assert result.ret == pytest.ExitCode.OK
    assert "host ephemeral-new is new to it" in kernel["reason"], kernel["reason"]


def test_per_host_levels_measure_the_spread_a_pooled_window_hides():
    from pytest_solgate.judge import hosts

    # Eight runs of one runner and two of another 6 % slower: run to run the window spreads 2.5 %,
    # but a run on a third, unseen runner may be as far off as the two runners are from each other.
    values = [0.0] * 8 + [math.log(0.94)] * 2
    named = ["runner-a"] * 8 + ["runner-b"] * 2
    fleet = hosts.between_hosts(values, named, "runner-new")
    assert fleet.per_host and fleet.hosts == 2 and fleet.new_host == "runner-new"
    assert fleet.between == pytest.approx(abs(math.log(0.94)) / math.sqrt(2))
    assert fleet.sd > 1.5 * statistics.stdev(values)
    # One host (or none named) has no spread between hosts; a host with one run has no level of its own.
    assert hosts.between_hosts(values, ["runner-a"] * 10, "runner-a") is None
    assert hosts.between_hosts(values, [""] * 10, "") is None
    single = hosts.between_hosts(values[:3], ["x", "y", "z"], "y")
    assert not single.per_host and single.new_host == "" and single.sd == pytest.approx(statistics.stdev(values[:3]))
