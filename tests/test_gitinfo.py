"""The git facts a run is recorded with (record/gitinfo.py), read from real repositories."""

from __future__ import annotations

from pytest_solgate.record.gitinfo import GitFacts, facts
from solgate_testing import git, init_repo


def test_no_repository_and_no_commit_yet_are_unknown(tmp_path):
    assert facts(tmp_path) == GitFacts()
    init_repo(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")  # staged, never committed
    assert facts(tmp_path) == GitFacts()


def test_commit_time_branch_and_what_makes_a_tree_dirty(tmp_path):
    init_repo(tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-q", "-m", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    clean = facts(tmp_path)
    assert clean == GitFacts(head, git(tmp_path, "show", "-s", "--format=%cI", head), "main", False)
    (tmp_path / "report.html").write_text("untracked")  # untracked files leave the tree clean
    assert not facts(tmp_path).dirty
    (tmp_path / "a.py").write_text("x = 2\n")
    assert facts(tmp_path).dirty
    git(tmp_path, "add", "a.py")  # staged counts too
    assert facts(tmp_path).dirty
    git(tmp_path, "commit", "-q", "-m", "two")
    git(tmp_path, "checkout", "-q", "--detach", head)
    detached = facts(tmp_path)
    assert (detached.commit, detached.branch, detached.dirty) == (head, None, False)
    git(tmp_path, "checkout", "-q", "-b", "feature/x-y")
    assert facts(tmp_path).branch == "feature/x-y"
