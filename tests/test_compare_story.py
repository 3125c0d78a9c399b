# ruff: noqa: F811  (test_history's repo fixture is imported, and taken as an argument)
"""``solgate compare BASE HEAD`` tells the gate's story between the two (issue 41): the steps of each
measurement's series along HEAD's first-parent line after BASE, and a fall the gate failed that HEAD
is still below, as the gate and ``solgate history --changes`` tell them (judge/level.py: ``story``).
The verdict stays HEAD's against BASE's own runs. Real commits, real pytest runs on the fake clock,
the real command."""

from test_history import STEADY, sqlite_repo  # noqa: F401 (a fixture)

from test_cli import solgate


def history_lines(done):
    """The lines under the table about the story (the rows' own are indented under them)."""
    return [line for line in done.stdout.splitlines() if line.startswith("history:")]


def row(done):
    (line,) = [line for line in done.stdout.splitlines() if "test_kernel [default]" in line]
    return line


def under_the_kernel(done):
    """The story's lines under test_kernel's row."""
    from itertools import takewhile

    lines = done.stdout.splitlines()
    return list(takewhile(lambda line: line.startswith("  history: "), lines[lines.index(row(done)) + 1:]))


def test_compare_names_the_fall_the_gate_failed_between_base_and_head_and_that_it_is_still_red(sqlite_repo):
    repo = sqlite_repo
    seeds = repo.seed(STEADY)
    fall = repo.commit("C: slower", seconds=1.25e-3)
    _, verdicts, _ = repo.run()
    assert verdicts["test_kernel"]["verdict"] == "regressed", verdicts["test_kernel"]["reason"]
    for name in "DE":
        head = repo.commit(f"{name}: an innocent change on top", seconds=1.25e-3)
        _, verdicts, _ = repo.run()
        assert f"the level fell at {fall[:10]}" in verdicts["test_kernel"]["reason"]  # the gate: red since C

    # BASE before the fall: BASE's own one run cannot tell (ambiguous, no floor), and the story
    # names the fall the gate failed between them, and that HEAD is still below it
    done = solgate("compare", seeds[-1], head, cwd=repo.path)
    assert done.returncode == 0 and row(done).endswith("ambiguous"), done.stdout + done.stderr
    (told,) = under_the_kernel(done)
    assert f"the gate's story has a step at {fall[:10]} -17.9% (SOL 0.390 -> 0.320, after {seeds[-1][:10]})" in told, done.stdout
    assert "the gate failed this fall" in told and "still red at HEAD" in told, done.stdout
    assert "provisional" not in told  # D and E confirm it

    # BASE after the fall: compare passes (BASE's own runs, as documented), and says the gate is red since C
    done = solgate("compare", fall, head, cwd=repo.path)
    assert done.returncode == 0 and row(done).endswith("pass"), done.stdout + done.stderr
    (told,) = under_the_kernel(done)
    assert f"the gate has been red since {fall[:10]} -17.9%" in told and "neither reverted nor accepted" in told, done.stdout
    assert f"against {fall[:10]}'s own runs" in told

    # the same series as `solgate history --changes` lists it: one step, at the same commit
    changes = solgate("history", "--changes", "test_kernel", cwd=repo.path)
    (step,) = [line for line in changes.stdout.splitlines() if "::test_kernel " in line and " -> " in line]
    assert step.startswith(fall[:10]), changes.stdout

    # reverted: the revert reads as the gain it is, and the story is no longer red
    revert = repo.commit("F: revert C", seconds=1e-3)
    repo.run()
    done = solgate("compare", head, revert, cwd=repo.path)
    assert done.returncode == 0 and row(done).split()[-1] in ("pass", "improved"), done.stdout
    (told,) = under_the_kernel(done)
    assert f"a step at {revert[:10]} +" in told and "provisional" in told and "red" not in told, done.stdout


def test_compare_says_when_the_story_has_no_step_between_them(sqlite_repo):
    repo = sqlite_repo
    seeds = repo.seed(STEADY)
    done = solgate("compare", seeds[-3], seeds[-1], cwd=repo.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert history_lines(done) == [f"history: no step between {seeds[-3][:10]} and {seeds[-1][:10]} in the gate's "
                                   "story (as `solgate history --changes` tells it)"], done.stdout
    assert under_the_kernel(done) == []
    assert done.stdout.splitlines()[-1].startswith("0 regressed at")  # the line that sums up stays last


def test_compare_of_a_base_off_heads_first_parent_line_says_it_tells_no_story(sqlite_repo):
    repo = sqlite_repo
    seeds = repo.seed(STEADY)
    repo.git("checkout", "-q", "-b", "side", seeds[-2])
    side = repo.commit("a side branch", seconds=1e-3)
    repo.run()
    done = solgate("compare", seeds[-1], side, cwd=repo.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert history_lines(done) == [f"history: {seeds[-1][:10]} is not on {side[:10]}'s first-parent line here: the "
                                   "gate's story between them is not told"], done.stdout
