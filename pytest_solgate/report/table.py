"""Report: the summary table every report shares: one row per measurement, failures first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from pytest_solgate import results, units
from pytest_solgate.results import Measurement

ORDER = {verdict: rank for rank, verdict in enumerate(results.VERDICTS)}
HEADERS = ("test", "name", "bound", "time", "achieved", "SOL", "budget", "vs reference", "vs baseline", "verdict")


@dataclass(frozen=True)
class Row:
    test: str
    name: str
    bound: str
    time: str
    achieved: str
    sol: str
    budget: str
    reference: str
    change: str
    verdict: str
    reason: str

    def cells(self) -> tuple[str, ...]:
        return (self.test, self.name, self.bound, self.time, self.achieved, self.sol, self.budget, self.reference,
                self.change, self.verdict)


def ordered(measurements: Iterable[Measurement]) -> list[Measurement]:
    """Failures first, then warnings, then the rest; stable within each verdict."""
    return sorted(measurements, key=lambda m: ORDER.get(m.verdict or results.PASS, len(ORDER)))


def achieved(m: Measurement) -> str:
    return units.bandwidth(m.gbps) if m.bound == "memory" else units.flop_rate(m.tflops)


def budget_text(m: Measurement) -> str:
    parts = []
    if m.budget.get("min") is not None:
        parts.append(f">= {m.budget['min']:.2f}")
    if m.budget.get("mfu") is not None:
        parts.append(f"MFU >= {m.budget['mfu']:.2f}")
    if m.budget.get("speedup") is not None:
        parts.append(f"{m.budget['speedup']:g}x {m.budget.get('reference') or 'reference'}")
    return ", ".join(parts) or "-"


def change_text(m: Measurement) -> str:
    """The change against the baseline window and the window's noise floor (the smallest drop
    its run-to-run noise cannot explain; '?' while one run cannot show a spread)."""
    if not m.baseline:
        return "-"
    floor = m.baseline.get("noise_floor")
    floor_text = units.percent(floor) if isinstance(floor, (int, float)) else "?"
    return f"{units.percent(m.baseline.get('change'), signed=True)}, floor {floor_text}"


def reference_text(m: Measurement, peers: Sequence[Measurement]) -> str:
    """Against the test's own gate=False measurements (the torch reference): their SOL and how
    many times faster this one is, e.g. 'torch 0.55, 1.8x'."""
    if not m.gate:
        return "-"
    references = [p for p in peers if p.test == m.test and not p.gate and p.name != m.name]
    return "; ".join(f"{p.name} {p.sol:.2f}, {p.seconds / m.seconds:.2g}x" for p in references) or "-"


def row(m: Measurement, peers: Sequence[Measurement] = ()) -> Row:
    return Row(
        test=m.test,
        name=m.name,
        bound=m.bound,
        time=f"{units.seconds(m.seconds)} {units.noise(m.noise)}",
        achieved=achieved(m),
        sol=units.sol(m.sol),
        budget=budget_text(m),
        reference=reference_text(m, peers),
        change=change_text(m),
        verdict=m.verdict or "-",
        reason=m.reason,
    )


def counts(measurements: Sequence[Measurement]) -> dict[str, int]:
    found = {v: 0 for v in results.VERDICTS}
    for m in measurements:
        found[m.verdict or results.PASS] = found.get(m.verdict or results.PASS, 0) + 1
    return {k: v for k, v in found.items() if v}
