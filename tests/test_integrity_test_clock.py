"""A clock from a test never makes a real result (issue 51 item 3): a measurement timed on a clock
the plugin did not choose (the sol_clock fixture) is marked in every output, never gated, never a
baseline, never `pass`, unless the session trusts it explicitly (the project's own tests, through the
variable tests/conftest.py sets); the GitHub action refuses that."""

import json
from pathlib import Path

# On the fake clock (tests/solgate_testing.py): a sol_clock fixture whose kernel reads exactly 1 ms.
GATED = """
    @pytest.mark.sol(min=0.01)
    def test_k(sol):
        sol.measure(lambda: busy(1e-3), bytes=0.5e6)
    """


def test_a_sol_clock_fixture_makes_no_real_result(suite, monkeypatch, tmp_path):
    monkeypatch.delenv("SOLGATE_TRUST_TEST_CLOCK")
    history = tmp_path / "history.db"
    result = suite(GATED, "--sol-json=out.json", "--sol-report=out.html", f"--sol-history={history}",
                   subprocess=True, fake_clock=True)
    result.assert_outcomes(passed=1)
    measured = json.loads(Path("out.json").read_text())["measurements"][0]
    assert measured["verdict"] == "not-gated", measured
    assert any(note.startswith("test clock: timed on a clock the test passed in") for note in measured["notes"])
    assert measured["reason"].startswith("test clock:"), measured
    assert "test clock: timed on a clock the test passed in" in Path("out.html").read_text()
    assert "test clock" in result.stdout.str()  # the terminal


def test_trusted_explicitly_the_fake_clock_is_judged(suite):
    # tests/conftest.py sets SOLGATE_TRUST_TEST_CLOCK for every test: the project's own opt-in.
    result = suite(GATED, "--sol-json=out.json", "--sol-no-save", subprocess=True, fake_clock=True)
    result.assert_outcomes(passed=1)
    measured = json.loads(Path("out.json").read_text())["measurements"][0]
    assert measured["verdict"] == "pass" and not any("test clock" in n for n in measured["notes"]), measured


def test_a_trusted_fake_clock_is_not_checked_against_the_real_one(suite):
    # The fake clock reads 1 ms a call; the call's real CPU time is 5 ms (a loaded CI runner read
    # 5.6 ms for an honest kernel's one call). The second clock compares the plugin's timer with
    # the thread's CPU time; a test's clock is not real time, and is not compared.
    result = suite("""
        import time

        import torch

        def test_k(sol):
            def kernel(x):
                end = time.thread_time() + 5e-3
                while time.thread_time() < end:
                    pass
                busy(1e-3)
                return x + 1
            sol.measure(kernel, args=(torch.randn(64),), reference=lambda x: x + 1, bytes=1e3)
        """, "--sol-integrity=strict", "--sol-no-save", "--sol-max-time=30", fake_clock=True)
    result.assert_outcomes(passed=1)


def test_the_action_refuses_the_trusted_test_clock():
    action = (Path(__file__).parents[1] / "action.yml").read_text()
    assert "sol-trust-test-clock" in action and "SOLGATE_TRUST_TEST_CLOCK" in action
