"""Support: the ini options pytest would read here, for the ``solgate`` command.

``solgate history --changes`` must report the ``sol_min_change`` that ``pytest`` would use, and
``solgate accept`` must write to the ``sol_history`` that ``pytest`` records in. pytest finds its
configuration file (the rootdir's ``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg``,
in that order, the first that has a pytest section) with ``determine_setup``; it is not public API
but it is the rule itself, so it is used where its shape is the known one, and the same files are
read the same way where it is not.
"""

from __future__ import annotations

import configparser
import inspect
from pathlib import Path
from typing import Any

from pytest_solgate.support.errors import OptionError


def sol_options(start: Path) -> tuple[dict[str, Any], Path | None]:
    """The ``sol_*`` ini values found from ``start`` (as given, strings or TOML values), and the
    file they came from (None when there is none)."""
    found = _by_pytest(start)
    if found is None:
        found = _by_reading(start)
    values, path = found
    return {k: v for k, v in values.items() if k.startswith("sol_")}, path


def _by_pytest(start: Path) -> tuple[dict[str, Any], Path | None] | None:
    try:
        from _pytest.config.findpaths import determine_setup
    except ImportError:
        return None
    wanted = {"inifile": None, "override_ini": None, "args": [str(start)], "rootdir_cmd_arg": None,
              "invocation_dir": start}
    accepted = inspect.signature(determine_setup).parameters
    if not set(accepted) <= set(wanted):
        return None  # a pytest whose rule takes something we do not know to give
    try:
        found = determine_setup(**{k: v for k, v in wanted.items() if k in accepted})
    except Exception as exc:  # pytest's own error for a broken file (a TOML syntax error)
        raise OptionError(f"the pytest configuration file here cannot be read: {exc}") from None
    path, config = found[1], found[2]
    # pytest 9 wraps each value (ConfigValue(value=..., origin=...)); earlier ones give it bare
    return {key: getattr(value, "value", value) for key, value in dict(config).items()}, path


SECTIONS = (("pytest.ini", "pytest"), ("pyproject.toml", None), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))


def _by_reading(start: Path) -> tuple[dict[str, Any], Path | None]:
    """pytest's rule read by hand: the nearest folder, from ``start`` up, with one of the files
    in SECTIONS that has a pytest section (``pytest.ini`` counts even without one)."""
    for folder in (start, *start.parents):
        for name, section in SECTIONS:
            path = folder / name
            if not path.is_file():
                continue
            if name == "pyproject.toml":
                import tomllib

                table = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options")
                if table is not None:
                    return dict(table), path
                continue
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path)
            if parser.has_section(section):
                return dict(parser.items(section)), path
            if name == "pytest.ini":
                return {}, path
    return {}, None
