"""Report: the summary table every report shares: one row per measurement, failures first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from pytest_solgate import results
from pytest_solgate.judge.verdict import dram_ratio, energy_per_work
from pytest_solgate.record.outcome import TestOutcomes
from pytest_solgate.results import Measurement, Verdict
from pytest_solgate.support import units

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
    outcome: str = ""  # 'test failed' or 'test error' where the test itself failed (its own assert, say)

    def cells(self) -> tuple[str, ...]:
        return (self.test, self.name, self.bound, self.time, self.achieved, self.sol, self.budget, self.reference,
                self.change, self.verdict_text)

    @property
    def verdict_text(self) -> str:
        """The verdict, and the test's own failure beside it: 'not-gated, test failed' never reads as fine."""
        return f"{self.verdict}, {self.outcome}" if self.outcome else self.verdict


def verdict(m: Measurement) -> Verdict:
    """The verdict a report shows: a measurement recorded without one (an imported file, a test
    that stopped before judging) was not judged, which is what ``not-gated`` says."""
    return m.verdict if m.verdict is not None else results.NOT_GATED


def ordered(measurements: Iterable[Measurement], outcomes: TestOutcomes | None = None) -> list[Measurement]:
    """Failures first (a failed verdict, or a test that failed itself), then warnings, then the rest;
    stable within each verdict."""
    def failing(m: Measurement) -> bool:
        return m.failed or bool(outcomes is not None and outcomes.of(m.test))

    return sorted(measurements, key=lambda m: (not failing(m), ORDER[verdict(m)]))


def achieved(m: Measurement) -> str:
    """The bound's rate first; the declared FLOPs' rate, by class, beside a memory-bound one."""
    scored = m.score
    flops = unscored_flops(m) or f"{units.flop_rate(scored.tflops)} {'+'.join(m.work.flops)}"
    if scored.bound != "memory":
        rate = flops
    else:
        rate = units.bandwidth(scored.gbps) + (f", {flops}" if m.work.total_flops else "")
    measured = measured_text(m)
    return f"{rate}; {measured}" if measured else rate


def unscored_flops(m: Measurement) -> str:
    """'fp16_tensor FLOPs unscored (no roof on cpu-...)' where the declared FLOPs were left out of
    the score (a reference or an interpreted kernel on a profile without their class), else ''."""
    if not m.work.total_flops or m.score.tflops > 0:
        return ""
    return f"{'+'.join(m.work.flops)} FLOPs unscored (no roof on {m.profile})"


def measured_text(m: Measurement) -> str:
    """What the GPU measured beside the timing, where it did: 'DRAM 1.60x declared; 0.41 J/GB'
    (Nsight Compute's bytes over the declared ones, --sol-ncu; energy per GB or TFLOP, NVML)."""
    parts = []
    ratio = dram_ratio(m)
    if ratio is not None:
        parts.append(f"DRAM {ratio:.2f}x declared")
    energy = energy_per_work(m)
    if energy is not None:
        parts.append(f"{energy[0]:.3g} {energy[1]}")
    return "; ".join(parts)


def budget_text(m: Measurement) -> str:
    if m.judgement is None or not m.gate:  # a gate=False reference is judged against nothing
        return "-"
    budget = m.judgement.budget
    parts = []
    if budget.min is not None:
        parts.append(f">= {units.sol(budget.min)}")
    if budget.mfu is not None:
        parts.append(f"MFU >= {units.sol(budget.mfu)}")
    if budget.speedup is not None:
        parts.append(f"{budget.speedup:g}x {budget.reference or 'reference'}")
    if not parts and budget.unmatched:
        return f"none on {m.profile}"
    return ", ".join(parts) or "-"


def change_text(m: Measurement) -> str:
    """The change against the baseline window and the window's noise floor (the smallest drop
    its run-to-run noise cannot explain; '?' while one run cannot show a spread)."""
    baseline = m.judgement.baseline if m.judgement else None
    if baseline is None:
        return "-"
    floor_text = units.percent(baseline.noise_floor) if baseline.noise_floor is not None else "?"
    return f"{units.percent(baseline.change, signed=True)}, floor {floor_text}"


def reference_text(m: Measurement, peers: Sequence[Measurement]) -> str:
    """Against the test's own gate=False measurements (the torch reference): their SOL and how
    many times faster this one is, e.g. 'torch 0.55, 1.8x'. The reference's SOL is written as the
    SOL column writes the kernel's (units.sol): 'torch 0.0021' beside a row's 0.0043, never 0.00."""
    if not m.gate:
        return "-"
    references = [p for p in peers if p.test == m.test and not p.gate and p.name != m.name]
    return "; ".join(
        f"{p.name} {units.sol(p.score.sol)}, {p.timing.seconds / m.timing.seconds:.2g}x" for p in references
    ) or "-"


def row(m: Measurement, peers: Sequence[Measurement] = (), outcomes: TestOutcomes | None = None) -> Row:
    return Row(
        test=m.test,
        name=m.name,
        bound=m.score.bound,
        time=f"{units.seconds(m.timing.seconds)} {units.noise(m.timing.noise)}",
        achieved=achieved(m),
        sol=units.sol(m.score.sol),
        budget=budget_text(m),
        reference=reference_text(m, peers),
        change=change_text(m),
        verdict=str(verdict(m)),
        reason=m.judgement.reason if m.judgement else "",
        # Where the verdict failed the test, it says why already.
        outcome=outcomes.of(m.test) if outcomes is not None and not m.failed else "",
    )


def counts(measurements: Sequence[Measurement]) -> dict[str, int]:
    found = {v: 0 for v in results.VERDICTS}
    for m in measurements:
        found[verdict(m)] += 1
    return {str(k): v for k, v in found.items() if v}
