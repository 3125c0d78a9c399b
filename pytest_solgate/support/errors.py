"""Support (every stage): the plugin's own error types.

Every error a user can cause is one of these, with a one-line message that names the thing at fault
(file, field, test, argument) and says what to do next. The pytest layer turns them into usage
errors or test failures; the CLI turns them into exit status 2. Anything else escaping is our bug.
"""

import os
import sys
import warnings
from types import FrameType

_PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class SolgateError(Exception):
    """Base class: a problem the user can fix, described in one line."""


class WorkError(SolgateError, ValueError):
    """A work declaration (flops, bytes, precision) is invalid."""


class ProfileError(SolgateError):
    """A hardware profile file is malformed, missing, or no profile matches the device."""


class MarkerError(SolgateError):
    """A ``@pytest.mark.sol`` argument is invalid."""


class OptionError(SolgateError):
    """A command-line or ini option has a bad value."""


class MeasureError(SolgateError):
    """A measurement could not be taken as asked (bad callable, fixture used after its test)."""


class HistoryError(SolgateError):
    """The history database cannot be opened or written, or is not ours."""


class NoHistoryYet(HistoryError):
    """Reading a history that was never written: not an error for lookups, which find nothing."""


class HistoryElsewhere(HistoryError):
    """This history cannot be used here (a folder that cannot be made, a read-only or foreign
    file): the fix is another location. Its message states the fact; the caller adds the advice,
    worded for the setting that named the history (support.locations.history_remedy)."""


class HistoryUnavailable(HistoryError):
    """The history server cannot be reached now (down, unreachable, connection lost): the run is
    judged without baselines and spooled for the next run to send."""


class ImportFileError(SolgateError):
    """A file given to ``solgate import`` is not a solgate/1 JSON run."""


def warn_at_users_code(warning: Warning) -> None:
    """Warn at the first line outside this package that led here (a test's ``sol.measure`` call),
    never at a line of the plugin (engine/kernels.py): that is where the user can act."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # stacklevel 2 is this function's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_FOLDER):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)
