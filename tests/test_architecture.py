"""The package's shape, as docs/reference.md's "How it works" states it: the tree shows the stages (one
folder per stage that has more than one module; a one-module stage and the pieces that drive them
sit at the top level, named in TOP_LEVEL), imports run only down the stages, no two modules import
each other (directly or round a longer circle), and the pytest layer only translates hooks. A module
added outside the stages, an import that runs back up, or a circle fails here, named."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_solgate"

# In the order of docs/reference.md: a stage may import the stages before it, never the ones after.
ORDER = ["support", "declare", "measure", "score", "results", "judge", "record", "report", "engine", "run", "wiring"]
# The stages that are one module, and the pieces that drive the stages, at the top of the package
# (a folder named here, like the command's ``cli/``, is that piece split into modules).
TOP_LEVEL = {"score": "score", "results": "results", "engine": "engine", "run": "run", "fixture": "run", "revisions": "run",
             "plugin": "wiring", "cli": "wiring", "__init__": "wiring", "__main__": "wiring"}
# The judge decides in budget, window and verdict and words in wording; the command is one module
# per command group: a module of either that grows past this many lines does two things again.
MAX_LINES = {"judge": 320, "cli": 300}
# What the pytest layer may not import: it translates hooks to the run object, which decides.
PLUGIN_MAY_NOT_IMPORT = ("record", "judge")
PLUGIN_MAX_LINES = 250


def modules():
    """Module name -> its source file, e.g. 'report.html' -> .../report/html.py; a folder's
    ``__init__`` is the folder's own name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def stage(name):
    """The stage a module belongs to: its folder, or its (or its folder's) entry in TOP_LEVEL."""
    folder = name.split(".")[0]
    return TOP_LEVEL.get(name, TOP_LEVEL.get(folder, folder))


def imported(path, known):
    """The package modules ``path`` imports, at the top or inside a function (a lazy import is
    still a dependency). Importing the package itself is left out."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            module = name.removeprefix("pytest_solgate.")
            if name.startswith("pytest_solgate.") and module in known:
                found.add(module)
    return found


def graph():
    known = modules()
    return {name: imported(path, known) - {name} for name, path in known.items()}


def circles(edges):
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_sits_in_a_stage():
    lost = [name for name in modules() if stage(name) not in ORDER]
    assert not lost, (f"put each module in a stage folder ({', '.join(s for s in ORDER if s not in TOP_LEVEL.values())}) "
                      f"or name it in TOP_LEVEL: {lost}")


def test_imports_run_only_down_the_stages():
    upward = [f"{name} ({stage(name)}) imports {other} ({stage(other)})"
              for name, others in graph().items() for other in sorted(others)
              if ORDER.index(stage(other)) > ORDER.index(stage(name))]
    assert not upward, "imports that run back up the stages: " + "; ".join(upward)


def test_no_import_circles():
    found = circles(graph())
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_pytest_layer_only_translates_hooks():
    source = modules()["plugin"]
    lines = len(source.read_text().splitlines())
    assert lines < PLUGIN_MAX_LINES, f"plugin.py has {lines} lines: move decisions to run.py"
    reached = [other for other in imported(source, modules()) if stage(other) in PLUGIN_MAY_NOT_IMPORT]
    assert not reached, f"plugin.py imports {reached}: the run object (run.py) talks to the store, git and judge"


def test_the_judge_and_the_command_are_split_into_small_modules():
    """judge/ decides in budget, window and verdict and words in wording; the command is one module
    per command group: none grows back into a module that does everything."""
    long = [f"{name} ({lines} lines, at most {MAX_LINES[name.split('.')[0]]})" for name, path in modules().items()
            if name.split(".")[0] in MAX_LINES and "." in name
            and (lines := len(path.read_text().splitlines())) > MAX_LINES[name.split(".")[0]]]
    assert not long, "split these: " + "; ".join(long)
    assert {"judge.budget", "judge.window", "judge.verdict", "judge.wording", "cli.common"} <= set(modules())


def test_the_checks_see_what_they_guard(tmp_path):
    # An upward import and a circle in a made-up graph are both caught.
    assert stage("judge.verdict") == "judge" and stage("plugin") == "wiring" and stage("score") == "score"
    assert stage("cli.compare") == "wiring" and stage("cli") == "wiring"
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    module = tmp_path / "judge_like.py"
    module.write_text('"""A module that reaches down."""\nfrom pytest_solgate.report import table\n')
    assert imported(module, modules()) == {"report", "report.table"}
