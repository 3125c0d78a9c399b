"""Results (the records every stage passes on): ``Measurement``, ``RunInfo`` and the verdicts.

Plain frozen dataclasses with a JSON form (``to_dict``/``from_dict``). The JSON form is the
``solgate/1`` contract: it is what ``--sol-json`` writes, what ``solgate import`` reads, and what
travels from xdist workers to the controller.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

SCHEMA = "solgate/1"

# Verdicts, from DESIGN.md. FAILING ones fail the test unless --sol-gate=warn/off says otherwise.
PASS = "pass"
BELOW_BUDGET = "below-budget"
REGRESSED = "regressed"
AMBIGUOUS = "ambiguous"
IMPROVED = "improved"
ABOVE_SOL = "above-sol"
NOT_GATED = "not-gated"
VERDICTS = (BELOW_BUDGET, REGRESSED, ABOVE_SOL, AMBIGUOUS, IMPROVED, PASS, NOT_GATED)
FAILING = (BELOW_BUDGET, REGRESSED, ABOVE_SOL)


@dataclass(frozen=True)
class Measurement:
    test: str
    name: str
    profile: str
    backend: str
    flops: Mapping[str, float]
    bytes: float
    seconds: float
    samples: tuple[float, ...]
    noise: float
    t_sol: float
    sol: float
    mfu: float
    bound: str
    tflops: float
    gbps: float
    intensity: float | None = None
    ridge: float | None = None
    gate: bool = True
    ceilings: str = "datasheet"
    device: str = ""
    batch: int = 1
    noisy: bool = False
    throttled: bool = False
    dropped_samples: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    worker: str = ""
    notes: tuple[str, ...] = ()
    telemetry: Mapping[str, Any] | None = None
    telemetry_note: str = ""
    # Like with like: the facts that make two runs comparable (host, device and its UUID, driver,
    # CUDA, torch, triton, Python) and the identity of the ceilings (profile numbers) scored against.
    environment: Mapping[str, str] = field(default_factory=dict)
    ceilings_id: str = ""
    # Clock-aware SOL: the mean SM clock while samples were taken, and SOL against ceilings scaled
    # to it (reported beside SOL; the gate uses the configured ceilings).
    sm_clock_mhz: float | None = None
    sol_at_clock: float | None = None
    timing_mode: str = "events"  # or "cuda-graph": how the samples were taken
    # Set once judged:
    verdict: str | None = None
    reason: str = ""
    budget: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] | None = None
    # Set by the reports from the history, oldest first: [{"commit", "sol", "started_at"}].
    trend: tuple[Mapping[str, Any], ...] = ()

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def replace(self, **changes: Any) -> "Measurement":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["flops"] = dict(self.flops)
        data["samples"] = list(self.samples)
        data["notes"] = list(self.notes)
        data["trend"] = [dict(t) for t in self.trend]
        data["environment"] = dict(self.environment)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["flops"] = dict(values.get("flops") or {})
        values["samples"] = tuple(values.get("samples") or ())
        values["notes"] = tuple(values.get("notes") or ())
        values["trend"] = tuple(values.get("trend") or ())
        values["budget"] = dict(values.get("budget") or {})
        values["environment"] = dict(values.get("environment") or {})
        return cls(**values)


@dataclass(frozen=True)
class RunInfo:
    """Facts about one pytest run: where, on what, at which commit."""

    id: str
    started_at: str
    commit: str | None = None
    commit_time: str | None = None
    branch: str | None = None
    dirty: bool = False
    host: str = ""
    device: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    python: str = ""
    plugin: str = ""
    profile: str = ""
    ceilings: str = ""
    command: str = ""
    baseline_ref: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunInfo":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
