"""How the trimmed traces here were cut from their sources (README.md): one profiler step, pruned
to what its device work needs.

    python tests/data/traces/trim.py SOURCE.json.gz 'ProfilerStep#552' OUT.json.gz

Kept: the metadata events (process and thread names); the step's range; the runtime and driver
calls that start inside it and launched device work; those activities (kernels, memcpys, memsets:
same correlation id), wherever and whenever they ran; the host ranges (operators, annotations)
inside the step that hold one of those launches on its thread; the ac2g flow events of those
launches; and the device activities launched elsewhere (an earlier step, before the trace began)
that run inside the step's span (its range, stretched to its last own activity), with their
launches: what the step's device time carried in is read from. Traces in the torch 1.8-1.9 format
(categories ``Operator``, ``Runtime``, ``Kernel``, ``async`` flows) are cut the same way. Every
kept event is as it was; the header (device properties, distributed info, record_shapes) too.
"""

import bisect
import gzip
import json
import sys

HOST = ("cpu_op", "user_annotation", "python_function", "Operator")
LAUNCH = ("cuda_runtime", "cuda_driver", "Runtime")
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
FLOWS = ("ac2g", "async")


def trim(trace: dict, step: str) -> dict:
    events = trace["traceEvents"]
    (marked,) = [e for e in events if e.get("name") == step and e.get("cat") in ("user_annotation", "Operator")]
    start, end = marked["ts"], marked["ts"] + marked["dur"]
    inside = [e for e in events if e.get("ph") == "X" and start <= e["ts"] < end and e is not marked]
    activities = [e for e in events if e.get("cat") in DEVICE and "correlation" in e.get("args", {})]
    worked = {e["args"]["correlation"] for e in activities}
    launches = [e for e in inside if e.get("cat") in LAUNCH and e.get("args", {}).get("correlation") in worked]
    launched = {e["args"]["correlation"] for e in launches}
    at = {}  # thread -> sorted launch times
    for e in launches:
        at.setdefault((e["pid"], e["tid"]), []).append(e["ts"])
    for times in at.values():
        times.sort()

    def holds_a_launch(e: dict) -> bool:
        times = at.get((e["pid"], e["tid"]), [])
        first = bisect.bisect_left(times, e["ts"])
        return first < len(times) and times[first] < e["ts"] + e["dur"]

    ranges = [e for e in inside if e.get("cat") in HOST and holds_a_launch(e)]
    device = [e for e in activities if e["args"]["correlation"] in launched]
    span_end = max([end] + [e["ts"] + e["dur"] for e in device])
    carried = [e for e in activities if e["args"]["correlation"] not in launched and e["ts"] < span_end
               and e["ts"] + e["dur"] > start]
    ids = {e["args"]["correlation"] for e in carried}
    their_launches = [e for e in events if e.get("cat") in LAUNCH and e.get("args", {}).get("correlation") in ids]
    flows = [e for e in events if e.get("cat") in FLOWS and e.get("id") in launched | ids]
    metadata = [e for e in events if e.get("ph") == "M"]
    return {**trace, "traceEvents": metadata + [marked] + ranges + launches + device + carried + their_launches + flows}


def main(source: str, step: str, out: str) -> None:
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(trim(trace, step)).encode())


if __name__ == "__main__":
    main(*sys.argv[1:])
