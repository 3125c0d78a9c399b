"""Wiring: ``python -m pytest_solgate.cli``, the ``solgate`` command."""

import sys

from pytest_solgate.cli import main

sys.exit(main())
