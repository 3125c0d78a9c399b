"""The documentation against the repository (issue 38 items 17-19): the README a newcomer reads in
five minutes, whose two commands are the ones .ci/run runs; docs/ pages whose counts agree with
their lists; and no doc or code comment naming a file of this repository that does not exist."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_LIMIT = 8000  # the anchors' READMEs are 4,400-7,500 characters (issue 38)


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [name for name in listed.stdout.splitlines() if (ROOT / name).exists()]


# --- the README ------------------------------------------------------------------------------------


def readme_commands() -> list[str]:
    """The commands of the shell block under "The two commands", in order (comments left out)."""
    section = README.read_text().split("## The two commands\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```(?:bash|sh)\n(.*?)```", section, re.S)
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def ci_pytest_commands() -> list[str]:
    """The pytest commands .ci/run runs through run_pytest, in order."""
    script = (ROOT / ".ci" / "run").read_text()
    return [line.strip().removeprefix("run_pytest ") for line in script.splitlines()
            if line.strip().startswith("run_pytest python")]


def test_the_readme_is_short():
    assert len(README.read_text()) <= README_LIMIT, f"README.md is {len(README.read_text())} characters"


def test_the_readmes_two_commands_are_the_ones_ci_runs():
    commands = readme_commands()
    assert len(commands) == 2, commands  # "The two commands" lists two
    ci = ci_pytest_commands()
    assert set(commands) <= set(ci), (commands, ci)
    # and the long scenarios that the README's test command leaves out (pyproject's addopts)
    assert [command for command in ci if command not in commands] == ["python -m pytest tests -m long -n 2"], ci
    assert "python -m pytest kernels --sol-report" in commands and "python -m pytest tests -n 2" in commands


def test_the_readmes_picture_exists_and_is_a_png():
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert pictures, "the README shows no picture of the report"
    for picture in pictures:
        assert (ROOT / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture


def test_every_readme_link_reaches_a_file():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


# --- counted lists in docs/ --------------------------------------------------------------------------

NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def test_a_doc_that_counts_its_steps_lists_that_many():
    """docs/ci.md once said "Five steps:" over six numbered ones."""
    counted = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        for match in re.finditer(r"\b(Two|Three|Four|Five|Six|Seven|Eight) (?:steps|commands):\n(.*?)(?=^#+ |\Z)", text, re.S | re.M):
            steps = re.findall(r"^\d+\. ", match.group(2), re.M)
            assert len(steps) == NUMBERS[match.group(1).lower()], (page.name, match.group(0)[:60], len(steps))
            counted += 1
    assert counted, "no counted list found: the pattern no longer reads docs/ci.md"


def test_the_ci_page_speaks_of_the_users_runner_and_lists_only_extras_that_exist():
    import tomllib

    # `changes` is kept, empty, so old install lines still work; the docs no longer offer it.
    extras = {name for name, needs in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
              ["optional-dependencies"].items() if needs}
    text = (ROOT / "docs" / "ci.md").read_text()
    for named in re.findall(r"pytest-solgate\[([a-z,]+)\]", text):
        assert set(named.split(",")) <= extras, named
    action_extras = re.search(r"plugin-extras:.*?description: \"(.*?)\"", (ROOT / "action.yml").read_text(), re.S)
    for quoted in re.findall(r"'([a-z]+)'", action_extras.group(1)):
        assert quoted in extras, f"action.yml's plugin-extras names '{quoted}', no extra of pyproject.toml"
    assert "device session" not in text and "device time" not in text  # the project's own sessions, not a user's runner


# --- no doc or comment names a file that does not exist ------------------------------------------------

# A repository path: folders then a name (docs/ci.md, pytest_solgate/record/save.py, record/gitinfo.resolve)
# or a bare page or module name (a design page, measure.py).
PATH = re.compile(r"(?<![\w./~$<-])(?>((?:[.\w-]+/)+[\w.-]*|[\w-]+\.(?:md|py)\b))(?![/<-])(::)?")
# Files that are the user's, not this repository's (the docs tell users to write them).
USERS_FILES = {"conftest.py", "setup.py", "pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", "README.md"}


def _prose(path: str, text: str):
    """(line number, text) of what a reader reads as this repository's prose: Markdown outside code
    blocks (those are the user's files), and a Python file's comments and docstrings."""
    if path.endswith(".md"):
        fenced = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced:
                yield number, line
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        is_docstring = token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        if token.type == tokenize.COMMENT or is_docstring:
            yield token.start[0], token.string


def _reaches(token: str, page: str, files: set[str], folders: set[str]) -> bool | None:
    """Whether ``token`` (named in ``page``) is a file or folder of the repository: from the top,
    from the page's folder, or inside the package; a dotted name after a module (``record/
    gitinfo.resolve``) names that module. None: not a repository path at all."""
    token = token.rstrip(".")
    name = token.rstrip("/")
    here = str(Path(page).parent)
    top_folders = {f.split("/")[0] for f in folders} | {f.split("/")[1] for f in folders if f.startswith("pytest_solgate/")}
    local = {f.removeprefix(here + "/").split("/")[0] for f in folders if f.startswith(here + "/")}
    if "/" in token and name.split("/")[0] not in top_folders | local:
        return None  # a user's path (.solgate/, src/) or a URL piece: not ours to check
    if "/" not in token and page.startswith("tests/") and not name.endswith(".md"):
        return None  # the tests name the throw-away modules they write; a page they cite must exist
    if "/" not in token and name in USERS_FILES:
        return None
    if "/" not in token:
        return any(Path(f).name == name for f in files)
    module = re.sub(r"\.\w+$", ".py", name) if not name.endswith((".md", ".py")) else name
    for candidate in (name, f"{here}/{name}", f"pytest_solgate/{name}", module, f"pytest_solgate/{module}"):
        if candidate in files or candidate in folders:
            return True
    return False


def missing_files(root: Path, files: list[str]) -> list[str]:
    known = set(files)
    folders = {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}
    pages = [f for f in files if f.endswith(".md") and (f.startswith("docs/") or "/" not in f or f == "kernels/README.md")]
    code = [f for f in files if f.endswith(".py") and not f.startswith("tests/data/")]
    missing = []
    for page in pages + code:
        for number, text in _prose(page, (root / page).read_text(errors="replace")):
            for token, test_id in PATH.findall(text):
                if test_id and page.startswith("tests/"):
                    continue  # a test id in a throw-away repository the test writes
                token = token.rstrip(".")
                if _reaches(token, page, known, folders) is False and not _ignored(root, token):
                    missing.append(f"{page}:{number}: {token}")
    return missing


def _ignored(root: Path, path: str) -> bool:
    """A path git ignores on purpose (a build folder such as kernels/_build/): named, never committed."""
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=root, capture_output=True).returncode == 0


def test_no_doc_or_comment_names_a_file_that_does_not_exist():
    missing = missing_files(ROOT, tracked_files())
    assert not missing, "\n".join(missing)


def test_the_scan_finds_a_page_or_module_that_is_not_there(tmp_path):
    """The scan itself: the kinds of mention that once named nothing (issue 38 counted 17)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "As DESIGN.md says, see docs/gone.md and docs/a.md.\n```python\n# docs/in-a-users-file.md\n```\n"
    )
    (tmp_path / "pkg" / "m.py").write_text('"""Writes after record.py; see pkg/m.helper and pkg/none.py."""\n# docs/a.md\n')
    found = missing_files(tmp_path, ["docs/a.md", "pkg/m.py"])
    assert found == ["docs/a.md:1: DESIGN.md", "docs/a.md:1: docs/gone.md", "pkg/m.py:1: record.py",
                     "pkg/m.py:1: pkg/none.py"], found


def test_shell_lines_of_the_readme_parse():
    for command in readme_commands():
        shlex.split(command)


# --- what a newcomer copies (issue 44) -------------------------------------------------------------


def test_the_quickstarts_gitignore_covers_what_a_session_writes():
    """The quickstart's venv, history, report and trend page are never committed by a newcomer who
    copies its `.gitignore` (it once left out `.venv/` and `sol-trend.html`)."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    block = text.split("`.gitignore`:", 1)[1].split("```", 2)[1]
    ignored = set(block.split())
    assert {".venv/", ".solgate/", "sol-report.html", "sol-trend.html"} <= ignored, ignored


def test_no_install_line_fetches_torchs_cuda_build_by_accident():
    """A bare `pip install torch` resolves to a CUDA build of several GB on Linux: every install
    line in the README and docs pins the version or names the CPU index."""
    bare = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"pip install (?:--\S+ )*torch(?:\s|$)", code) and "--index-url" not in code:
                bare.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "pin torch (torch==2.13.0) or name the CPU index:\n" + "\n".join(bare)


def test_profiles_and_results_cite_only_what_a_reader_can_open():
    """hw_profiles/ once cited a file outside the repository, and the results cited scripts under
    /tmp: every path they cite is a file of this repository."""
    cited = []
    for page in sorted((ROOT / "hw_profiles").glob("*.toml")):
        for path in re.findall(r"[\w./-]+/[\w.-]+\.(?:md|py|toml)", page.read_text()):
            if not (ROOT / path).exists():
                cited.append(f"{page.name}: {path}")
    for page in sorted([*(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks" / "results").rglob("*.md")]):
        for path in re.findall(r"/tmp/[\w./-]+\.(?:sh|py)\b", page.read_text()):
            cited.append(f"{page.relative_to(ROOT)}: {path}")
    assert not cited, "cite a file of the repository (benchmarks/ holds the scripts):\n" + "\n".join(cited)


# --- the troubleshooting page (issue 50) ------------------------------------------------------------


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lowercase, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_link_to_a_heading_reaches_one():
    """`[..](#anchor)` and `[..](PAGE#anchor)` in docs/ and the lab notebook: the page exists and
    has that heading."""
    broken = []
    for page in sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks" / "results").glob("*.md")]):
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            if not linked.is_file() or anchor not in heading_anchors(linked.read_text()):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, broken


def test_the_anchor_rule_reads_githubs_slugs():
    assert heading_anchors("## My test failed: below-budget\n## It says `not-gated`\n") == {
        "my-test-failed-below-budget", "it-says-not-gated"}


def test_the_troubleshooting_page_answers_every_verdict_and_session_line():
    from pytest_solgate import results, run
    from pytest_solgate.judge import integrity, verdict_wording, wording

    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    headings = " ".join(re.findall(r"^#+ (.+)$", page, re.M))
    missing = [str(v) for v in results.VERDICTS if str(v) not in headings]
    said = [run.UNAVAILABLE, run.HISTORY_REQUIRED.split(";")[0], verdict_wording.NOT_JUDGED,
            verdict_wording.INTERPRETED, verdict_wording.GATE_OFF, wording.CONTENDED, verdict_wording.NOISY]
    missing += [line for line in said if line not in page]
    # every integrity cause, and the lines that fail a run with no verdict of their own
    causes = [words.split(":")[0] for words in integrity.WORDS.values()]
    missing += [line for line in [*causes, "served from a cache", "tampered reference", "test clock:",
                                  "could not judge: not a pass"] if line not in page]
    assert not missing, f"docs/troubleshooting.md says nothing of: {missing}"
    for page_name in ("README.md", "docs/reference.md"):
        assert "troubleshooting.md" in (ROOT / page_name).read_text(), page_name


# --- docs/ is for users; the lab notebook is benchmarks/results/ (issue 50) -----------------------------

# A page that tells how the code got here ("Until issue 44 ...", "the first version ..."): the reader
# of a reference wants what is, not what was.
NARRATION = re.compile(r"\b(?:[Ii]ssue \d+|[Uu]ntil issue|[Bb]efore issue|[Ss]ince issue|[Tt]he first version)\b")
# The user pages together, in bytes: a reference and its guides, read in an afternoon (issue 50).
DOCS_LIMIT = 120_000  # the 120 KB, read as bytes


def narrated(page: Path) -> list[str]:
    return [f"{page.name}:{number}: {line.strip()[:80]}" for number, line in _prose(str(page), page.read_text())
            if NARRATION.search(line)]


def test_the_user_pages_tell_what_is_not_how_it_got_there():
    told = [line for page in sorted((ROOT / "docs").glob("*.md")) for line in narrated(page)]
    assert not told, "move the history to the commit messages, the figures to benchmarks/results/:\n" + "\n".join(told)


def docs_size(docs: Path) -> int:
    return sum(len(page.read_bytes()) for page in docs.glob("*.md"))


def test_the_user_pages_stay_within_their_limit():
    size = docs_size(ROOT / "docs")
    pages = sorted(((len(p.read_bytes()), p.name) for p in (ROOT / "docs").glob("*.md")), reverse=True)
    assert size <= DOCS_LIMIT, (f"docs/*.md is {size} bytes, over {DOCS_LIMIT}: move figures to benchmarks/results/, "
                                f"history to the commit messages; largest: {pages[:3]}")


def test_the_size_rule_counts_every_page(tmp_path):
    (tmp_path / "a.md").write_bytes(b"x" * (100 * 1024))
    (tmp_path / "b.md").write_bytes(b"y" * (21 * 1024))  # 121 KiB in all
    (tmp_path / "notes.txt").write_bytes(b"z" * 1024)  # not a page
    assert docs_size(tmp_path) == 121 * 1024 > DOCS_LIMIT


def test_the_narration_rule_finds_a_history_of_the_code(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# P\n\nUntil issue 44 the id was kept once per user.\n```\nissue 3 in a user's log\n```\n")
    assert narrated(page) == ["p.md:3: Until issue 44 the id was kept once per user."]


def test_the_lab_notebook_lives_beside_the_benchmarks():
    assert not [f for f in tracked_files() if f.startswith(("docs/results", "docs/runs/"))]
    index = (ROOT / "benchmarks" / "results" / "README.md").read_text()
    pages = {p.name for p in (ROOT / "benchmarks" / "results").glob("*.md")} - {"README.md"}
    assert pages and all(f"]({name}" in index for name in pages), "every results page is in the index"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", index):
        assert (ROOT / "benchmarks" / "results" / target).exists(), target
