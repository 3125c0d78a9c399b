"""Report: the table printed after pytest's summary, fitted to the terminal's width.

As wide as it needs when the terminal allows (the test id last, so it is never cut). On a narrow
terminal each measurement takes two or more lines instead: its id (``short_id``: shortened at
the end of its function's name, its parameters kept), then its figures, wrapped at words.
"""

from __future__ import annotations

import math
import textwrap
from typing import Sequence

from pytest_solgate.record.outcome import TestOutcomes
from pytest_solgate.report.step_table import terminal_lines
from pytest_solgate.report.table import HEADERS, Row, counts, ordered, row
from pytest_solgate.results import Measurement
from pytest_solgate.support import units

INDENT = "    "
PROSE_WIDTH = 80  # the sentences under the table wrap here even on a wider terminal: they read as prose


def render(measurements: Sequence[Measurement], width: int | None = None, outcomes: TestOutcomes | None = None) -> list[str]:
    """The table (and what to say under it); ``outcomes``: pytest's, to mark the rows of tests that failed."""
    if not measurements:
        return ["no SOL measurements in this run"]
    rows = [row(m, measurements, outcomes) for m in ordered(measurements, outcomes)]
    table = _table(rows)
    prose = min(width or PROSE_WIDTH, PROSE_WIDTH)
    said = [*_prose(_totals(measurements), prose), *(line for text in _noisy(measurements) for line in _prose(text, prose))]
    if width is None or max(len(line) for line in table) <= width:
        return table + said + terminal_lines(measurements)
    lines = []
    for r in rows:
        lines.append(short_id(r.test, r.name, width))
        lines += _wrap(_figures(r), width - len(INDENT), INDENT)
    return lines + said + terminal_lines(measurements)


def _prose(text: str, width: int) -> list[str]:
    """A sentence of the summary wrapped at words, its continuation lines indented."""
    indent = "  " if text.startswith("  ") else ""
    return textwrap.wrap(text, width, subsequent_indent=indent + "  ", break_on_hyphens=False,
                         break_long_words=False) or [text]


def short_id(test: str, name: str, width: int) -> str:
    """``test [name]`` within ``width`` columns: the file's folders go first, then the function's
    name is shortened in its middle; its parameters and the measurement's name stay whole, so that
    ``test_add[fp32]`` and ``test_add[bf16]`` never read alike. Only when they alone are wider
    is the whole line cut in its middle."""
    full = f"{test} [{name}]"
    if len(full) <= width:
        return full
    path, _, function = test.rpartition("::")
    prefix = f"{path.rsplit('/', 1)[-1]}::" if path else ""
    base, bracket, params = function.partition("[")
    tail = f"{bracket}{params} [{name}]"
    if len(prefix) + len(base) + len(tail) <= width:
        return prefix + base + tail
    for head in (prefix, ""):  # the file's name goes before the function's does
        room = width - len(head) - len(tail)
        if room >= 12:
            return head + _middle_cut(base, room) + tail
    return _middle_cut(prefix + base + tail, width)


def _middle_cut(text: str, width: int) -> str:
    """``text`` within ``width`` columns, cut in its middle: names that share a long prefix (and
    names that share a long suffix) still read apart by the end (or the start) they keep."""
    if len(text) <= width:
        return text
    end = (width - 1) // 2
    return text[: width - 1 - end] + "…" + (text[-end:] if end else "")


def _table(rows: Sequence[Row]) -> list[str]:
    headers = (*HEADERS[1:], HEADERS[0])
    cells = [(*r.cells()[1:], r.cells()[0]) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(c) for c in cells)]


def _figures(r: Row) -> list[str]:
    """One measurement's figures as short phrases, most important first."""
    parts = [r.verdict_text, f"SOL {r.sol}" + (f" (budget {r.budget})" if r.budget != "-" else ""), f"time {r.time}",
             f"{r.achieved} {r.bound}-bound"]
    if r.change != "-":
        parts.append(f"vs baseline {r.change}")
    if r.reference != "-":
        parts.append(f"vs {r.reference}")
    return parts


def _wrap(parts: Sequence[str], width: int, indent: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}  {part}" if current else part
        if current and len(candidate) > width:
            lines.append(indent + current)
            candidate = part
        current = candidate
    if current:
        lines.append(indent + current)
    return lines


def _totals(measurements: Sequence[Measurement]) -> str:
    totals = ", ".join(f"{n} {verdict}" for verdict, n in counts(measurements).items())
    # The README's main job on a machine without a GPU: say once why the kernels are not gated.
    # (gate=False references are not gated anyway, and are timed on the CPU as they are.)
    interpreted = sum(m.gate and not m.timing.gated for m in measurements)
    if interpreted:
        totals += (f"; {interpreted} kernel(s) ran in the Triton interpreter (no GPU here), whose timings mean "
                   "nothing, so they are not gated (their correctness is); on a GPU the same command times and gates them")
    return totals


def _noisy(measurements: Sequence[Measurement]) -> list[str]:
    """Once a session, not on every verdict: what to change when measurements ran out of time
    before their noise target (every default CPU measurement on a small shared machine)."""
    noisy = [m for m in measurements if m.timing.noisy]
    if not noisy:
        return []
    lines = [f"{len(noisy)} of {units.plural(len(measurements), 'measurement')} noisy: the time budget ran out before "
             "the median's noise reached its target; give more --sol-max-time, or a wider --sol-noise on a shared machine"]
    # What this machine can reach, said once: the tightest noise any measurement of the session got.
    reached = [m for m in measurements if math.isfinite(m.timing.noise) and m.timing.noise > 0]
    if reached:
        best = min(reached, key=lambda m: m.timing.noise)
        lines.append(f"  this machine reached {units.noise(best.timing.noise)} at best this session "
                     f"({best.test} [{best.name}]): a --sol-noise below that is not met here")
    return lines
