"""The ``solgate`` command as the tests run it: ``solgate_main`` calls its entry function in this
process, ``solgate_process`` starts it as users do (``python -m pytest_solgate.cli``).

In this process by default: a subprocess pays an interpreter, pytest_solgate, torch (`profiles`,
`detect`) and ruptures (`compare`, `history --changes`) each time, 0.3 to 2.5 s of CPU a command,
where the suite's worker has them imported once (tests/conftest.py). What a command does is the
same: ``main(argv)`` is all ``python -m pytest_solgate.cli`` runs (cli/__main__.py), it reads the
environment and the working folder as the process would, and what it prints and returns comes back
as a ``CompletedProcess``. An exception that escapes ``main`` comes back as the interpreter would
give it, a traceback on stderr and status 1, so that a test that says "no traceback" still can
fail. What only a process shows (a signal, the status through the interpreter's exit, output
written by a child to the terminal) is tested with ``solgate_process``."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback


def solgate_main(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``solgate ARGS`` in ``cwd``, run by its entry function in this process."""
    from pytest_solgate.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(args))
            except SystemExit as exit_:  # argparse's --help
                status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except Exception:  # as `python -m` would show it
                traceback.print_exc(file=sys.stderr)
                status = 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["solgate", *args], status, out.getvalue(), err.getvalue())


def solgate_process(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``solgate ARGS`` in ``cwd``, a process of its own, as a user starts it."""
    return subprocess.run([sys.executable, "-m", "pytest_solgate.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
