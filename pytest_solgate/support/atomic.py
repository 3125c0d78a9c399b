"""Support (record and report): atomic file writes: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pytest_solgate.support.errors import SolgateError


class ReportWriteError(SolgateError):
    """A report could not be written where asked."""


SUFFIX = ".tmp"
RANDOM_CHARACTERS = 8  # what tempfile.mkstemp puts between the prefix and the suffix


def temporary_prefix(target: Path) -> str:
    """``.<name>.``, the target's name cut short enough that the whole temporary name fits in the
    folder's longest file name: a temporary file fits wherever its target does (a legal
    250-character report name must not fail for a temporary name of 264)."""
    try:
        longest = os.pathconf(target.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    room = max(longest - 2 - RANDOM_CHARACTERS - len(SUFFIX), 0)
    name = os.fsencode(target.name)[:room].decode(errors="ignore")  # limits are in bytes: never half a character
    return f".{name}."


def write_text(path: str | Path, text: str, what: str) -> Path:
    """Write ``text`` so that readers see the old file or the new one, never half of one."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=temporary_prefix(target), suffix=SUFFIX, dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
    except OSError as exc:
        raise ReportWriteError(f"cannot write the {what} to {target}: {exc.strerror or exc}; choose another path") from None
    return target


def append_text(path: str | Path, text: str, what: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise ReportWriteError(f"cannot append the {what} to {path}: {exc.strerror or exc}") from None
