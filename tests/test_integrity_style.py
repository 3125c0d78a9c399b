"""One style taught everywhere (issue 51 item 7): every example a user copies hands its inputs
(``args=``) and, where it is gated, a ``reference=``; the pull-request recipe runs the strict checks."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TAUGHT = ["README.md", "docs/quickstart.md", "docs/writing-tests.md", "docs/ci.md", "kernels/tests/test_sol.py",
          *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "examples").rglob("*.py")))]


def calls(text: str) -> list[str]:
    """Each ``sol.measure(...)`` call in ``text``, whole (its parentheses balanced)."""
    found = []
    for match in re.finditer(r"sol\.measure\(", text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        found.append(text[match.start():end + 1])
    return found


@pytest.mark.parametrize("path", TAUGHT)
def test_every_example_hands_its_inputs_and_a_gated_one_its_reference(path):
    measured = calls((ROOT / path).read_text())
    for call in measured:
        if call.endswith("...)"):  # prose that names the bare form, not an example
            continue
        assert "args=" in call, f"{path}: {call}"
        assert "gate=False" in call or "reference=" in call, f"{path}: {call}"


def test_the_pull_request_recipe_runs_the_strict_checks():
    from pytest_solgate.support.settings import OPTIONS

    integrity = next(o for o in OPTIONS if o.name == "sol_integrity")
    assert "strict" in integrity.choices
    assert "pytest-args: --sol-integrity=strict" in (ROOT / "docs/ci.md").read_text()
