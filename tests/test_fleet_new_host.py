# ruff: noqa: F811  (the repo fixture of test_history is imported, and taken as an argument)
"""Few runs on a fleet's new host: against a base of one clean run a drop beyond the run-to-run
noise fails, where the noise is this host's (its other series) or, on a host new to the history
(an ephemeral runner's first job), its fleet's; the gate and `solgate compare` read it alike.

Real pytester runs at real commits with one shared history, on the fake clock; the host each run
records is set per run (socket.gethostname), as tests/test_fleet.py sets it.
"""

import socket

from test_history import repo  # noqa: F401 (fixture: the history in SQLite and in PostgreSQL)

from test_cli import solgate


def test_a_drop_beyond_the_fleets_noise_fails_against_one_clean_run_on_a_new_host(repo, monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "runner-a")
    a = repo.commit("A", seconds=1e-3)
    repo.run("-k", "test_other")  # the fleet's noise: runner-a ran another series twice at one commit
    repo.run()  # test_kernel's one clean run at A
    monkeypatch.setattr(socket, "gethostname", lambda: "ephemeral-1")  # a runner the history never saw
    b = repo.commit("B: three times slower", seconds=3e-3)
    result, verdicts, data = repo.run()
    assert data["run"]["host"] == "ephemeral-1"
    kernel = verdicts["test_kernel"]
    assert kernel["verdict"] == "regressed" and kernel["baseline"]["runs"] == 1, kernel["reason"]
    assert "host ephemeral-1 has no runs of its own twice at a commit: the fleet's run-to-run spread" in kernel["reason"]
    result.assert_outcomes(failed=1, passed=1)
    compared = solgate("compare", a, b, cwd=repo.path)  # compare reads the noise as the gate does
    (line,) = [line for line in compared.stdout.splitlines() if "test_kernel [default]" in line]
    assert compared.returncode == 1 and line.endswith("regressed"), compared.stdout + compared.stderr
