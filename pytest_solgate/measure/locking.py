"""Measure: a per-device file lock, so that two processes never time on the same device at once.

The lock files live in one folder per machine (not per checkout), so two pytest runs from different
checkouts on one runner exclude each other too. ``SOLGATE_LOCK_DIR`` moves the folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

from pytest_solgate.support.errors import MeasureError

LOCK_DIR_VARIABLE = "SOLGATE_LOCK_DIR"


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or Path(tempfile.gettempdir()) / "solgate-locks")


@contextlib.contextmanager
def device_lock(device_key: str, holder: str = "") -> Iterator[str]:
    """Hold an exclusive ``flock`` on the device's lock file for the duration of the block.

    Yields who held the lock when it had to be waited for ('' when it was free): the ``holder``
    text the other process wrote into the file (its solgate run id and pid), so that a run can
    tell another solgate run on its device from its own xdist workers (measure/extras.py)."""
    import fcntl

    folder = lock_dir()
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", device_key) + ".lock")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except OSError as exc:
        where = f"SOLGATE_LOCK_DIR={folder}" if os.environ.get(LOCK_DIR_VARIABLE) else f"the lock folder {folder}"
        raise MeasureError(
            f"cannot take the {device_key} device lock in {where} ({exc.strerror or exc}): "
            f"point {LOCK_DIR_VARIABLE} at a folder this user can write, or unset it"
        ) from None
    with handle:
        waited_for = ""
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            waited_for = handle.read().strip() or "another process"
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(holder or f"pid {os.getpid()}")
        handle.flush()
        try:
            yield waited_for
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
