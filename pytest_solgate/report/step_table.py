"""Report (whole steps): where each step's time went, for the terminal and the HTML report.

Read from the step's own record (``Measurement.step``), so a report rebuilt from the JSON or the
history shows the same. The terminal gets the step's line, its top five operators by time lost and
the sum that checks them; the HTML report a bar by operator class and the whole ranking.
"""

from __future__ import annotations

from typing import Sequence

from pytest_solgate.results import Measurement
from pytest_solgate.score.step_breakdown import CLASSES, IDLE, StepBreakdown
from pytest_solgate.support import units

TERMINAL_TOP = 5
HTML_TOP = 25  # rows of the ranking table; the rest are summed in one line
CLASS_COLOURS = {"matmul": "#1f77b4", "attention": "#7a3fd1", "normalization": "#2e9e5b",
                 "elementwise": "#d99a00", "copies": "#8c564b", IDLE: "#c7ccd4"}


def steps(measurements: Sequence[Measurement]) -> list[Measurement]:
    """The records that are whole steps, in the order given."""
    return [m for m in measurements if m.step is not None]


def headline(m: Measurement) -> str:
    """One line for a step: its time, MFU, idle share and floor."""
    step: StepBreakdown = m.step  # type: ignore[assignment]
    return f"step {m.name} of {m.test}: {_figures(step, m.score.sol)}"


def _figures(step: StepBreakdown, sol: float) -> str:
    precision = f" ({step.precision})" if step.precision else ""
    return (f"{units.seconds(step.seconds)} per step, MFU {units.percent(step.mfu)}{precision}, "
            f"idle {units.percent(step.idle_share)}, T_SOL {units.seconds(step.t_sol)} (SOL {units.sol(sol)})")


def identity(step: StepBreakdown) -> str:
    """The sum the ranking rests on, said with its numbers."""
    overlap = f" - overlap {units.seconds(step.overlap)}" if step.overlap > 0 else ""
    carried = f" + carried in {units.seconds(step.carried_in)}" if step.carried_in > 0 else ""
    return (f"lost {units.seconds(step.lost)} + idle {units.seconds(step.idle)}{overlap}{carried} = step {units.seconds(step.seconds)}"
            f" - T_SOL {units.seconds(step.t_sol)} (means over the faster {step.kept} of {step.runs} runs; off by "
            f"{units.percent(abs(step.identity_gap))} of the step)")


def terminal_lines(measurements: Sequence[Measurement], top: int = TERMINAL_TOP) -> list[str]:
    """For each step: its headline, its ``top`` operators by time lost, and the sum."""
    lines: list[str] = []
    for m in steps(measurements):
        lines += ["", headline(m), *ranking(m.step, top)]  # type: ignore[arg-type]
    return lines


def ranking(step: StepBreakdown, top: int) -> list[str]:
    """The ``top`` operators by time lost, and the sum."""
    lines = ["  where it loses time (time - T_SOL), largest first:"]
    width = max((len(op.label) for op in step.operators[:top]), default=0)
    for rank, op in enumerate(step.operators[:top], 1):
        share = op.lost / step.seconds if step.seconds > 0 else 0.0
        lines.append(f"  {rank}. {op.label.ljust(width)}  lost {units.seconds(op.lost):>9} ({units.percent(share)})"
                     f"  time {units.seconds(op.seconds)}  SOL {units.sol(op.sol)}  {op.floor}  {op.calls} call(s)  {op.kind}")
    if not step.operators:
        lines.append("  (no operator ran in the step)")
    return lines + [f"  {identity(step)}"]


TRACE_TIMES = {"trace-kernels": "an operator's time is the device time of the kernels, copies and memsets it launched "
                                "(joined by correlation id); idle is the step's span no device activity covers, whoever launched it; "
                                "carried in is device time in the step that is not its own (an earlier step's, or "
                                "launched before the trace began)",
               "trace-cpu": "no device activity in the trace: an operator's time is its host range; idle is the step's "
                            "time no top operator covers"}


def trace_lines(trace: str, where: str, profile: str, step: StepBreakdown, top: int) -> list[str]:
    """A recorded trace's step (``solgate step``): its headline against ``profile``, how it was
    read, its ranking and the sum, and the reading's notes. ``where`` says whose trace it is
    (rank, device), or ''."""
    sol = step.t_sol / step.seconds if step.seconds > 0 else 0.0
    lines = [f"trace {trace}{f' ({where})' if where else ''} on {profile}: {_figures(step, sol)}",
             f"  {TRACE_TIMES.get(step.mode, step.mode)}", *ranking(step, top)]
    return lines + [f"  note: {note}" for note in step.notes]


def section(m: Measurement, top: int = HTML_TOP) -> dict[str, object]:
    """What the HTML report's section for one step shows."""
    step: StepBreakdown = m.step  # type: ignore[assignment]
    spent = step.by_class()
    total = sum(spent.values()) or 1.0
    bar, left = [], 0.0
    for kind in (*CLASSES, IDLE):
        width = spent[kind] / total * 100
        bar.append({"kind": kind, "seconds": spent[kind], "share": spent[kind] / step.seconds if step.seconds else 0.0,
                    "left": round(left, 2), "width": round(width, 2), "colour": CLASS_COLOURS[kind]})
        left += width
    rest = step.operators[top:]
    return {
        "m": m,
        "step": step,
        "headline": headline(m),
        "identity": identity(step),
        "bar": bar,
        "rows": [{"rank": rank, "op": op, "share": op.lost / step.seconds if step.seconds else 0.0,
                  "colour": CLASS_COLOURS.get(op.kind, CLASS_COLOURS["elementwise"])}
                 for rank, op in enumerate(step.operators[:top], 1)],
        "rest": {"count": len(rest), "seconds": sum(op.seconds for op in rest), "lost": sum(op.lost for op in rest)},
    }


def sections(measurements: Sequence[Measurement]) -> list[dict[str, object]]:
    return [section(m) for m in steps(measurements)]
