"""Machine-readable outputs: solgate/1 JSON and github-action-benchmark's customBiggerIsBetter."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from pytest_solgate import units
from pytest_solgate.records import SCHEMA, Measurement, RunInfo


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: write null instead, so any parser can read the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def solgate_json(run: RunInfo, measurements: Sequence[Measurement]) -> str:
    document = {
        "schema": SCHEMA,
        "run": run.to_dict(),
        "measurements": [m.to_dict() for m in measurements],
    }
    return json.dumps(_finite(document), indent=2, sort_keys=False) + "\n"


def benchmark_action(measurements: Sequence[Measurement]) -> str:
    entries = [
        {
            "name": f"{m.test} [{m.name}]",
            "unit": "SOL",
            "value": round(m.sol, 6),
            "range": f"±{m.noise * m.sol:.4f}" if math.isfinite(m.noise) else "",
            "extra": f"median {units.seconds(m.seconds)} {units.noise(m.noise)}; profile {m.profile}; "
            f"{m.bound}-bound; verdict {m.verdict}",
        }
        for m in measurements
    ]
    return json.dumps(entries, indent=2) + "\n"
