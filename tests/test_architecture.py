"""The package's shape, as the README's "How it works" states it: every module names its stage in
the first word of its docstring, and imports run only down the stages (a stage may use the ones
above it, never the ones below). A module added without a stage, or an import that runs back up,
fails here with the module and the import named."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_solgate"

# In the order of the README. Support modules (errors, options, units, statistics, atomic writes)
# serve every stage; Results are the records the stages pass on, composed of the declare, measure
# and score stages' own records; the engine drives the stages and the wiring hooks them to pytest
# and the command line.
STAGES = {"Support": 0, "Declare": 1, "Measure": 2, "Score": 3, "Results": 4, "Judge": 5, "Record": 6,
          "Report": 7, "Engine": 8, "Wiring": 9}


def modules():
    """Module name -> its source file, e.g. 'report.html' -> .../report/html.py."""
    return {".".join(path.relative_to(PACKAGE).with_suffix("").parts): path for path in sorted(PACKAGE.rglob("*.py"))}


def stage(path):
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return docstring.split(" ", 1)[0].rstrip(":")


def imported(path, known):
    """The package modules that ``path`` imports, at the top or inside a function. Importing the
    package itself is left out: Python runs ``__init__`` before any of its modules anyway."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name.startswith("pytest_solgate."):
                module = name.removeprefix("pytest_solgate.")
                if module in known:
                    found.add(module)
    return found


def test_every_module_names_its_stage():
    unnamed = {name: stage(path) for name, path in modules().items() if stage(path) not in STAGES}
    assert not unnamed, f"start each module's docstring with one of {', '.join(STAGES)}: {unnamed}"


def test_imports_run_only_down_the_stages():
    known = modules()
    upward = []
    for name, path in known.items():
        mine = STAGES[stage(path)]
        for other in sorted(imported(path, known)):
            theirs = STAGES[stage(known[other])]
            if theirs > mine:
                upward.append(f"{name} ({stage(path)}) imports {other} ({stage(known[other])})")
    assert not upward, "imports that run back up the stages: " + "; ".join(upward)


def test_support_modules_depend_on_support_alone():
    known = modules()
    leaks = [f"{name} imports {other} ({stage(known[other])})"
             for name, path in known.items() if stage(path) == "Support"
             for other in imported(path, known) if stage(known[other]) != "Support"]
    assert not leaks, "; ".join(leaks)


def test_the_check_sees_an_import_that_runs_back_up(tmp_path):
    # The checker itself: a judge-stage module importing the report stage is caught.
    module = tmp_path / "judge_like.py"
    module.write_text('"""Judge: a module that reaches down."""\nfrom pytest_solgate.report import table\n')
    assert stage(module) == "Judge" and imported(module, modules()) == {"report.table"}
