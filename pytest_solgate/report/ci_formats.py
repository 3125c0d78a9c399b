"""Report: machine-readable outputs: github-action-benchmark's customBiggerIsBetter and the JUnit
XML properties (solgate/1 JSON is schema.dump)."""

from __future__ import annotations

import json
import math
from typing import Sequence

from pytest_solgate.results import Measurement
from pytest_solgate.support import units


def benchmark_action(measurements: Sequence[Measurement]) -> str:
    entries = [
        {
            "name": f"{m.test} [{m.name}]",
            "unit": "SOL",
            "value": round(m.score.sol, 6),
            "range": f"±{m.timing.noise * m.score.sol:.4f}" if math.isfinite(m.timing.noise) else "",
            "extra": f"median {units.seconds(m.timing.seconds)} {units.noise(m.timing.noise)}; profile {m.profile}; "
            f"{m.score.bound}-bound; verdict {m.verdict}" + _speedup(m),
        }
        for m in measurements
    ]
    return json.dumps(entries, indent=2) + "\n"


def _speedup(m: Measurement) -> str:
    budget = m.judgement.budget if m.judgement else None
    if budget is None or budget.achieved_speedup is None:
        return ""
    return f"; {budget.achieved_speedup:.3g}x {budget.reference} (budget {budget.speedup:g}x)"


def junit_properties(m: Measurement) -> list[tuple[str, str]]:
    """A judged measurement as ``<property>`` entries of its test case in pytest's JUnit XML."""
    properties = [
        (f"sol[{m.name}]", f"{m.score.sol:.4g}"),
        (f"sol_seconds[{m.name}]", f"{m.timing.seconds:.6g}"),
        (f"sol_bound[{m.name}]", m.score.bound),
        (f"sol_verdict[{m.name}]", str(m.verdict or "")),
    ]
    budget = m.judgement.budget if m.judgement else None
    if budget is not None and budget.achieved_speedup is not None:
        properties.append((f"sol_speedup[{m.name}]", f"{budget.achieved_speedup:.4g}"))
    return properties
