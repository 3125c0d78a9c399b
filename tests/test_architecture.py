"""The package's shape, as docs/architecture.md's "The stages" states it: the tree shows the stages (one
folder per stage that has more than one module; a one-module stage and the pieces that drive them
sit at the top level, named in TOP_LEVEL), imports run only down the stages, no two modules import
each other (directly or round a longer circle), and the pytest layer only translates hooks. A module
added outside the stages, an import that runs back up, or a circle fails here, named."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_solgate"

# In the order of docs/architecture.md: a stage may import the stages before it, never the ones after.
ORDER = ["support", "declare", "measure", "score", "results", "judge", "record", "report", "engine", "run", "wiring"]
# The stages that are one module, and the pieces that drive the stages, at the top of the package
# (a folder named here, like the command's ``cli/``, is that piece split into modules).
TOP_LEVEL = {"score": "score", "results": "results", "results_json": "results", "engine": "engine", "run": "run", "fixture": "run", "revisions": "run", "roles": "run",
             "plugin": "wiring", "hookspecs": "wiring", "cli": "wiring", "__init__": "wiring", "__main__": "wiring"}
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


# Measurement.to_dict (the public API) writes through the saved record's format, which builds
# Measurements when it reads: the one pair that imports each other, the records' side lazily.
ALLOWED_CIRCLES = [["results", "results_json"]]


def test_no_import_circles():
    found = [c for c in circles(graph()) if sorted(c) not in ALLOWED_CIRCLES]
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


# --- test seams are passed in; no module reads another's private fields; record/ holds no policy --

TESTS = Path(__file__).resolve().parent
# Test files that still replace attributes of the package's modules, and how many places do: a
# ratchet (issue 41 item 5) that counted 37 places down to none; a file not named here may replace none.
STILL_REPLACED: dict[str, int] = {}
# The seams that are passed in now: no test may replace them again.
# The fake clock is the sol_clock fixture's CpuClock (solgate_testing.FAKE_CLOCK_KERNELS), and
# contention reads the /proc of the session's Platform (the suite's: tests/idle_machine.py).
# NVML's reader and the SM clock stamps go to CudaBackend's constructor, torch to choose_device.
# A session's devices are a Platform (measure/platform.py) a stand-in plugin returns from the
# pytest_solgate_platform hook (tests/fake_gpu.py StandIn).
PASSED_IN = {"CPU_CLOCKS", "PROC", "PROC_ROOT", "now", "copy_probe", "contention", "open_reader", "open_stamps",
             "torch_or_none", "choose_device", "device_name", "device_facts", "make_backend", "device_scope",
             "set_device", "restore_at_exit", "cuda_profiler", "cpu_profile", "repeated_cpu_calibration",
             "quick_cpu_check", "flush", "gpu_profile", "device_key", "device_lock", "calibrate_gpu", "CudaBackend",
             "CALIBRATION_SAMPLING", "measure_gpu", "read_runs", "take_timing", "render_report"}


def _package_names(tree):
    """Names bound to a pytest_solgate module (or a name imported from one) by ``tree``'s imports."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("pytest_solgate")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_solgate"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def replaced_attributes(source):
    """(line, target) of every ``module.ATTR = ...`` and ``monkeypatch.setattr(module..., "ATTR", ...)``
    on a pytest_solgate module in ``source``, and in the test code it writes out as strings."""
    tree = ast.parse(source)
    found, package = [], _package_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "pytest_solgate" in node.value:
            try:
                found += [(node.lineno, target) for _, target in replaced_attributes(node.value)]
            except SyntaxError:
                pass
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and _root(target.value) in package:
                found.append((node.lineno, target.attr))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                and _root(node.func.value) == "monkeypatch" and len(node.args) >= 2
                and _root(node.args[0]) in package and isinstance(node.args[1], ast.Constant)):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_test_replaces_a_module_global_of_the_package():
    over, seams = [], []
    for path in sorted(TESTS.glob("*.py")):
        if path.name == Path(__file__).name:  # its own examples of what it refuses
            continue
        replaced = replaced_attributes(path.read_text())
        seams += [f"{path.name}:{line} replaces {name}" for line, name in replaced if name in PASSED_IN]
        if len(replaced) > STILL_REPLACED.get(path.name, 0):
            over.append(f"{path.name} replaces {len(replaced)} (at most {STILL_REPLACED.get(path.name, 0)}): "
                        + ", ".join(f"{name} at line {line}" for line, name in replaced))
    assert not seams, "pass these in (Engine, Run, the backend's constructor), do not replace them: " + "; ".join(seams)
    assert not over, "pass the seam in instead of replacing a module's attribute: " + "; ".join(over)


def private_names(tree):
    """The private names a module defines: its functions, classes and globals, and ``self._x``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def foreign_private_reads(known=None):
    """``x._name`` where ``_name`` is private to another package module (as far as ast can tell:
    defined there, not in the module that reads it)."""
    known = known or modules()
    trees = {name: ast.parse(path.read_text()) for name, path in known.items()}
    defined = {name: private_names(tree) for name, tree in trees.items()}
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and node.attr not in defined[name] and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                owners = [other for other, names in defined.items() if node.attr in names and other != name]
                if owners:
                    found.append(f"{name}:{node.lineno} reads {node.attr} of {'/'.join(sorted(owners))}")
    return found


def test_no_module_reads_another_modules_private_fields():
    found = foreign_private_reads()
    assert not found, "give the owner a public method or field instead: " + "; ".join(found)


def test_record_imports_no_judge_policy_only_its_types():
    """record/ reads and writes; what the gate decides lives in judge/. A record module may name a
    judge type (a class, for the rows it builds) but calls no judge function and imports no judge module."""
    known = modules()
    policy = []
    for name, path in known.items():
        if stage(name) != "record":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                policy += [f"{name} imports {a.name}" for a in node.names if a.name.startswith("pytest_solgate.judge")]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_solgate.judge"):
                policy += [f"{name} imports {node.module}.{a.name}" for a in node.names
                           if not a.name[:1].isupper() or a.name.isupper()]  # a class is a type; a CONSTANT or a module is not
    assert not policy, "move the decision to judge/ (record/ only reads and writes): " + "; ".join(policy)


def test_the_seam_and_privacy_checks_see_what_they_guard():
    written = ('from pytest_solgate.measure import extras, contention\n'
               'contention.PROC = 1\n'
               'def f(monkeypatch):\n    monkeypatch.setattr(extras, "CPU_CLOCKS", 2)\n'
               'CODE = "from pytest_solgate.measure import backends\\nbackends.X = 3\\n"\n')
    assert sorted(name for _, name in replaced_attributes(written)) == ["CPU_CLOCKS", "PROC", "X"]
    assert replaced_attributes("import os\nos.environ = {}\n") == []
    tree = ast.parse("class E:\n    def __init__(self):\n        self._unsaid = []\n")
    assert private_names(tree) == {"_unsaid"}


def test_only_the_roles_ask_which_part_of_xdist_a_process_plays():
    """pytest-xdist's controller and worker are objects (roles.py, pytest-cov's Central/DistWorker):
    nothing else asks whether it runs in a worker and branches on the answer."""
    asking = [f"{name}:{number}" for name, path in modules().items() if name != "roles"
              for number, line in enumerate(path.read_text().splitlines(), 1)
              if "is_worker" in line or "workerinput" in line and "node.workerinput" not in line]
    assert not asking, "let the role decide (pytest_solgate/roles.py): " + "; ".join(asking)


# The pieces a maintainer reads first, where a function fits a screen (the engine, the run, the
# wiring): one that grows past it does two things again (nvbench's measure_cold, one screen a kind).
ONE_SCREEN = 50
SCREEN_SIZED = ("engine", "run", "roles", "plugin", "fixture")


def long_functions(source, limit=ONE_SCREEN):
    """The functions of ``source`` longer than ``limit`` lines, as 'name (lines)'."""
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_the_engine_the_run_and_the_wiring_read_one_screen_a_function():
    long = [f"{name}: {', '.join(found)}" for name, path in modules().items()
            if name.split(".")[0] in SCREEN_SIZED and (found := long_functions(path.read_text()))]
    assert not long, f"split these by idea (at most {ONE_SCREEN} lines a function): " + "; ".join(long)
    assert long_functions("def f():\n" + "    x = 1\n" * ONE_SCREEN) == ["f (51 lines)"]


def test_no_shipped_module_reads_a_test_only_variable():
    """What a test changes about the machine reaches the session through a plugin's Platform (the
    suite's own: tests/idle_machine.py), never through a variable the shipped code reads for tests."""
    reading = [f"{name}:{number}" for name, path in modules().items()
               for number, line in enumerate(path.read_text().splitlines(), 1) if "SOLGATE_TEST_" in line]
    assert not reading, "hand it in through the Platform (measure/platform.py) instead: " + "; ".join(reading)
