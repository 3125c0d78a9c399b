"""Report: machine-readable outputs: github-action-benchmark's customBiggerIsBetter (solgate/1 JSON is schema.dump)."""

from __future__ import annotations

import json
import math
from typing import Sequence

from pytest_solgate import units
from pytest_solgate.results import Measurement


def benchmark_action(measurements: Sequence[Measurement]) -> str:
    entries = [
        {
            "name": f"{m.test} [{m.name}]",
            "unit": "SOL",
            "value": round(m.sol, 6),
            "range": f"±{m.noise * m.sol:.4f}" if math.isfinite(m.noise) else "",
            "extra": f"median {units.seconds(m.seconds)} {units.noise(m.noise)}; profile {m.profile}; "
            f"{m.bound}-bound; verdict {m.verdict}" + _speedup(m),
        }
        for m in measurements
    ]
    return json.dumps(entries, indent=2) + "\n"


def _speedup(m: Measurement) -> str:
    achieved = (m.budget or {}).get("achieved_speedup")
    if achieved is None:
        return ""
    return f"; {achieved:.3g}x {m.budget.get('reference')} (budget {m.budget['speedup']:g}x)"
