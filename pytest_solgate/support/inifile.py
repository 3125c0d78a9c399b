"""Support: the ``sol_*`` ini options as pytest reads them, for the plugin and the ``solgate`` command.

``solgate history --changes`` must report the ``sol_min_change`` that ``pytest`` would use, and
``solgate accept`` must write to the ``sol_history`` that ``pytest`` records in. So the command
reads the ini the way pytest does, with pytest's own code: ``determine_setup`` finds the file (the
rootdir's ``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg``, the first with a pytest
section, and refuses a ``[pytest]`` section in ``setup.cfg``), and ``Config.getini`` reads each value
with the type the plugin registers (in pytest 9's native ``[tool.pytest]`` table, ``sol_min_change =
0.4`` is refused: the option is a string). Neither is public API, but each is the rule itself; a
pytest whose rule has another shape is read by hand (``_by_reading``).
"""

from __future__ import annotations

import configparser
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_solgate.support.errors import OptionError
from pytest_solgate.support.settings import OPTIONS, Option

if TYPE_CHECKING:  # pytest is imported where an ini file is read
    import pytest
    from _pytest.config import PytestPluginManager


def ini_type(option: Option) -> Literal["bool", "string"]:
    """The type the plugin registers ``option`` with (``parser.addini``): what pytest checks."""
    return "bool" if option.kind == "bool" else "string"


def sol_values(config: pytest.Config) -> dict[str, object]:
    """Each ``sol_*`` option set in the ini of a pytest ``Config``, as ``getini`` returns it; a value
    pytest refuses is one OptionError with pytest's message (which names the file and the option)."""
    import pytest

    values: dict[str, object] = {}
    for option in OPTIONS:
        try:
            value = config.getini(option.name)
        except TypeError as exc:  # pytest's own rule ([tool.pytest]: a value of another TOML type)
            raise OptionError(str(exc)) from None
        except (ValueError, pytest.UsageError) as exc:  # pytest's reading of an ini boolean names no option
            # (pytest 9.2 raises its type rule for [tool.pytest] here too: no boolean's advice for those)
            advice = "; give true or false" if option.kind == "bool" else ""
            raise OptionError(f"ini option {option.name}: {exc}{advice}") from None
        if not value:  # unset (or false: the same as unset, as the plugin has always read it)
            continue
        if not isinstance(value, (str, bool, int, float)):
            # A list where one value belongs ([tool.pytest.ini_options]): never a file named "['h.db']".
            raise OptionError(
                f"ini option {option.name} = {value!r}: give one {'true or false' if option.kind == 'bool' else 'value'} "
                f"(a string such as {option.name} = \"{option.default or '...'}\"), not a {type(value).__name__}"
            )
        values[option.name] = value
    return values


def sol_options(start: Path) -> tuple[dict[str, object], Path | None]:
    """The ``sol_*`` ini values pytest would read when started in ``start``, and the file they came
    from (None when there is none). Raises OptionError, one line naming the file, where pytest
    would refuse the file or a value in it."""
    found = _by_pytest(start)
    if found is None:
        found = _by_reading(start)
    return found


def _by_pytest(start: Path) -> tuple[dict[str, object], Path | None] | None:
    try:
        from _pytest.config import Config, PytestPluginManager
        from _pytest.config.findpaths import determine_setup
        from _pytest.outcomes import OutcomeException
    except ImportError:
        return None
    # Any: the keywords passed are picked at run time from the installed pytest's signature.
    wanted: dict[str, Any] = {"inifile": None, "override_ini": None, "args": [str(start)], "rootdir_cmd_arg": None,
              "invocation_dir": start}
    accepted = inspect.signature(determine_setup).parameters
    if not set(accepted) <= set(wanted):
        return None  # a pytest whose rule takes something we do not know to give
    try:
        found = determine_setup(**{k: v for k, v in wanted.items() if k in accepted})
    except OutcomeException as exc:  # pytest.fail: a [pytest] section in setup.cfg
        raise OptionError(f"{_nearest(start, 'setup.cfg') or 'setup.cfg'}: {exc.msg}") from None
    except Exception as exc:  # pytest's own error for a broken file (a TOML syntax error)
        raise OptionError(f"the pytest configuration file here cannot be read: {exc}") from None
    rootpath, path, inicfg = found[0], found[1], found[2]
    try:
        config = _reading_config(start, rootpath, path, inicfg, Config, PytestPluginManager)
    except (AttributeError, TypeError):
        # a pytest whose Config has another shape: its values as given (pytest 9 wraps each one)
        return {k: getattr(v, "value", v) for k, v in dict(inicfg).items() if k.startswith("sol_")}, path
    return sol_values(config), path


def _reading_config(start: Path, rootpath: Path, path: Path | None, inicfg: Any, config_class: type[pytest.Config],
                    manager: type[PytestPluginManager]) -> pytest.Config:
    """A pytest ``Config`` that only reads the ini file ``determine_setup`` found, with the ``sol_*``
    options registered as the plugin registers them: ``getini`` then applies pytest's own types.
    (``inicfg``: what ``determine_setup`` found, whose type differs between pytest versions.)

    The one place solgate writes pytest's private fields, on purpose: pytest has no public way to
    read an ini file without starting a session (``Config.parse`` loads every plugin and conftest,
    this one included), and these are the fields ``getini`` reads. A pytest whose Config has other
    fields raises AttributeError or TypeError here, and the caller reads the values as given."""
    config = config_class(manager(), invocation_params=config_class.InvocationParams(args=(), plugins=None, dir=start))
    for option in OPTIONS:
        config._parser.addini(option.name, help=option.help, default=None, type=ini_type(option))
    config._rootpath, config._inipath, config._inicfg = rootpath, path, inicfg
    return config


def _nearest(start: Path, name: str) -> Path | None:
    return next((folder / name for folder in (start, *start.parents) if (folder / name).is_file()), None)


# file name -> its pytest section (None: pyproject.toml's [tool.pytest.ini_options] table)
SECTIONS = (("pytest.ini", "pytest"), ("pyproject.toml", None), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))


def _by_reading(start: Path) -> tuple[dict[str, object], Path | None]:
    """pytest's rule read by hand: the nearest folder, from ``start`` up, with one of the files
    in SECTIONS that has a pytest section (``pytest.ini`` counts even without one)."""
    for folder in (start, *start.parents):
        for name, section in SECTIONS:
            path = folder / name
            if not path.is_file():
                continue
            if section is None:
                import tomllib

                table = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options")
                if table is not None:
                    return {k: v for k, v in table.items() if k.startswith("sol_")}, path
                continue
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path)
            if parser.has_section(section):
                return {k: v for k, v in parser.items(section) if k.startswith("sol_")}, path
            if name == "pytest.ini":
                return {}, path
    return {}, None
