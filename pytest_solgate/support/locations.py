"""Support (options): where things are written: one parser for history locations, one redaction for
every message that can hold one, and one rule for when two paths are the same file.

The plugin (``--sol-history``, ini ``sol_history``, ``$SOLGATE_HISTORY``) and every ``solgate``
command (``--history``, ``migrate SOURCE DESTINATION``) read a history location through
``resolve_history``: a SQLite file path, taken from the git top level when relative (so pytest and
``solgate`` find the same history from any subdirectory, as docs/history.md promises), or a
``postgresql://`` / ``postgres://`` URL. Anything else with a scheme (``mysql://``, ``sqlite:///``)
is refused: taken as a path it would grow folders named after the URL and print its password.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from pytest_solgate.support.errors import OptionError

HISTORY_URL_SCHEMES = ("postgresql://", "postgres://")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# A URL's password (any scheme), and a conninfo or query parameter's: ``user:PASSWORD@``, ``password=...``.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@]*@")
_PARAMETER_PASSWORD = re.compile(r"(password=)[^\s&]*", re.IGNORECASE)
MASK = "***"

# The passwords of the locations parsed in this process. A driver may echo a password on its own,
# outside any URL (psycopg quotes a badly percent-encoded one: 'invalid percent-encoded token:
# "p%zz..."'), where no pattern can tell it is one; so every password the parser has seen is masked
# wherever it appears. Process-wide because any message can reach any exit (the CLI's stderr, a
# pytest usage error, the terminal summary). One shorter than MIN_SECRET is masked in URLs only:
# masking every "pw" or "a" in every message would garble them.
_SECRETS: set[str] = set()
MIN_SECRET = 4


def absolute_path(path: str, base: Path) -> Path:
    """A path option as the user meant it: ``~`` expanded, a relative path taken from ``base``
    (the directory pytest started in for outputs, the git top level for the history)."""
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # ~name of no user here: pathlib raises, it does not leave it alone
        raise OptionError(f"{path}: '{str(path).split('/')[0]}' is no user's home folder here; give the path in full") from None
    return p if p.is_absolute() else base / p


CACHE_DIR_VARIABLE = "SOLGATE_CACHE_DIR"
XDG_CACHE_VARIABLE = "XDG_CACHE_HOME"


def user_cache_setting() -> tuple[Path, str]:
    """Where what belongs to this machine rather than to one clone is cached (the CPU's
    calibrated ceilings), and the setting that put it there (for the advice of a message):
    ``$SOLGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-solgate``, else
    ``~/.cache/pytest-solgate``. Shared by every clone, so one profile id holds one set of ceilings.
    A relative ``$XDG_CACHE_HOME`` is ignored, as the XDG base directory rule says: taken as given
    it would make a cache per working directory."""
    given = os.environ.get(CACHE_DIR_VARIABLE)
    if given:
        return Path(given).expanduser(), CACHE_DIR_VARIABLE
    xdg = os.environ.get(XDG_CACHE_VARIABLE, "")
    if os.path.isabs(xdg):
        return Path(xdg) / "pytest-solgate", XDG_CACHE_VARIABLE
    return Path.home() / ".cache" / "pytest-solgate", "HOME"


def user_cache_dir() -> Path:
    """The folder of ``user_cache_setting``."""
    return user_cache_setting()[0]


def is_history_url(location: str | Path) -> bool:
    """A history server's URL (PostgreSQL), as opposed to the path of a SQLite file."""
    return str(location).startswith(HISTORY_URL_SCHEMES)


def _remember_password(url: str) -> None:
    authority = url.split("://", 1)[1]
    if "@" not in authority:
        return
    userinfo = authority.rsplit("@", 1)[0]  # a raw '@' in the password: the host follows the last one
    user, colon, password = userinfo.partition(":")
    if colon:
        _SECRETS.update(secret for secret in (password, unquote(password)) if len(secret) >= MIN_SECRET)


def resolve_history(given: str, top: Path, source: str) -> str:
    """The history ``given`` names, as a store opens it: a PostgreSQL URL unchanged, a path made
    absolute from ``top`` (the git top level). ``source`` names where it came from (an option or a
    variable) for the error. Any other scheme is an ``OptionError``."""
    text = str(given)
    match = _SCHEME.match(text)
    if match:
        _remember_password(text)
        if not is_history_url(text):
            raise OptionError(
                f"{source}={redact(text)}: a {match.group(1)}:// history is not supported; give a SQLite file path "
                f"(e.g. .solgate/history.db) or a {' or '.join(HISTORY_URL_SCHEMES)} URL"
            )
        return text
    return str(absolute_path(text, top))


def history_remedy(source: str) -> str:
    """What to change when the history cannot be opened or written, worded for the setting that
    named it (``source``: ``--sol-history``, ``SOLGATE_HISTORY``, ``ini sol_history`` or
    ``default``): never "pass --sol-history" to a user who passed it."""
    if source == "--sol-history":
        return "give --sol-history a history this machine can write"
    if source == "default":
        return "pass --sol-history=PATH (or set $SOLGATE_HISTORY)"
    if source.startswith("ini "):
        return f"change {source.removeprefix('ini ')} in the ini file, or pass --sol-history=PATH"
    return f"point ${source} at a history this machine can write"


def redact(text: str) -> str:
    """``text`` with every password masked: in a URL of any scheme, in a ``password=`` parameter,
    and every password of a location parsed here, wherever it appears. For every message, the run
    record's command line, reports and JSON: credentials never leave the process."""
    text = _PARAMETER_PASSWORD.sub(rf"\1{MASK}", _URL_PASSWORD.sub(rf"\1{MASK}@", text))
    for secret in sorted(_SECRETS, key=len, reverse=True):  # the longest first: no half-masked password
        text = text.replace(secret, MASK)
    return text


def one_line(text: str) -> str:
    """A message as a user sees it: passwords masked and line breaks folded (a driver's message may
    end in a newline, or split a quoted value over two lines)."""
    return " ".join(redact(text).split())


def _identity(path: str | Path) -> tuple[object, ...]:
    """What a path reaches: the file itself (device and inode: a symlink or a hard link reaches the
    same one) when it exists, else the path with every symlink on the way resolved."""
    try:
        status = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("file", status.st_dev, status.st_ino)


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether writing ``a`` would write ``b``, however each is spelled."""
    return _identity(a) == _identity(b)


def refuse_colliding_outputs(targets: list[tuple[str, Path]]) -> None:
    """No output may overwrite the history or another output of the same run: ``targets`` are
    (option, path) pairs; two options reaching one file is a usage error naming both."""
    seen: dict[tuple[object, ...], tuple[str, Path]] = {}
    for flag, path in targets:
        key = _identity(path)
        if key in seen:
            first, first_path = seen[key]
            same = f"{path}" if str(first_path) == str(path) else f"{first_path} (as {path})"
            raise OptionError(f"{first} and {flag} both name {same}: one would overwrite the other; give each its own path")
        seen[key] = (flag, path)
