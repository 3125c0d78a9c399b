"""Report: the table printed after pytest's summary."""

from __future__ import annotations

from typing import Sequence

from pytest_solgate.records import Measurement
from pytest_solgate.report.table import HEADERS, counts, ordered, row


def render(measurements: Sequence[Measurement]) -> list[str]:
    if not measurements:
        return ["no SOL measurements in this run"]
    # The test id goes last so that it is never cut, however narrow the terminal.
    headers = (*HEADERS[1:], HEADERS[0])
    rows = [(*cells[1:], cells[0]) for cells in (row(m, measurements).cells() for m in ordered(measurements))]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [
        line(headers),
        line(["-" * w for w in widths]),
        *(line(r) for r in rows),
        ", ".join(f"{n} {verdict}" for verdict, n in counts(measurements).items()),
    ]
