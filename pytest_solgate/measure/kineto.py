"""Measure (a recorded trace): a PyTorch profiler trace (the Chrome JSON that
``torch.profiler`` exports through kineto, ``prof.export_chrome_trace`` or
``tensorboard_trace_handler``, plain or gzipped) read into what ``sol.measure_step`` measures: a
``StepProfile`` of runs (one per ``ProfilerStep#N`` range) and the counted work of each operator.

The trace's events, as kineto writes them (``ph: X`` complete events, times in us):

- host ranges (``cat`` ``cpu_op``, ``user_annotation``, ``python_function``) on a thread
  (``pid``, ``tid``): nested by time, they make each thread's tree; the outermost operator of a
  tree is the top operator (``measure/step_profile.py: operator_name``, as ``measure_step`` picks it);
- runtime and driver calls (``cuda_runtime``, ``cuda_driver``; HIP calls under the same names on
  AMD) with ``args.correlation``, and the device activities (``kernel``, ``gpu_memcpy``,
  ``gpu_memset``) with the same correlation id, on ``args.stream``; where a launch's runtime event
  is missing, the ``ac2g`` flow start with that id says where the launch was. A CUDA graph's
  kernels all carry the graph launch's correlation id: the replay is the launching operator's.

Each device activity is the top operator's around its launch (its thread, its time); where no
operator is around it (a graph replayed from Python, a Triton kernel launched directly) it is the
launch's: ``cudaGraphLaunch in CompiledFunction`` (the range around it). With device activities,
an operator's time is the sum of its activities' durations, and idle is the step's span (host range,
stretched to its last activity) that no activity covers; without any (a CPU-only trace), the
top operators' own ranges and the gaps between them, as ``measure_step`` reads a CPU.

Work, where the trace has shapes (``record_shapes=True``: ``Input Dims``, ``Input type``):
FLOPs by torch's FlopCounterMode formulas, taken at the first operator down each tree that has
one (``aten::linear`` is counted at its ``aten::addmm``), in the precision class of its first
floating input (fp32 as recorded: whether TF32 was allowed is not in the trace); bytes at the
calls that reach the dispatcher whole, as measure_step's counting mode sees them (composite ops such
as ``aten::linear`` opened, views left out): their tensor inputs, and their output as the trace does
not record it: an in-place op writes its first input, a matmul its ``m x n``, a reduction little
(not counted), any other op as much as its largest input. Work is a mean per step.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from pytest_solgate.declare.profiles import DriverFacts
from pytest_solgate.measure import kernel_trace, step_profile
from pytest_solgate.measure.step_profile import OperatorWork, RunReading, StepProfile, add_work, operator_name
from pytest_solgate.support import stats
from pytest_solgate.support.errors import MeasureError

if TYPE_CHECKING:  # a recorded trace is read without torch
    import torch.profiler
    from torch._ops import OpOverload, OpOverloadPacket

STEP_PREFIX = "ProfilerStep#"
MODULE_PREFIX = "nn.Module: "  # torch.profiler's with_modules ranges
HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# The element sizes of the dtypes as ``Input type`` spells them (c10's names).
ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8, "int": 4,
                 "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                 "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
                 "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1}
_FLOATING = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "argmax", "argmin", "prod", "var", "std", "any",
               "all", "linalg_vector_norm", "logsumexp", "nansum", "count_nonzero"}
_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}

Event = Mapping[str, object]  # one JSON object of the trace, its fields unchecked until read
Thread = tuple[str | int | None, str | int | None]  # (pid, tid), as the trace names them


@dataclass(frozen=True)
class HostRange:
    """A host range: an operator, an annotation, a Python function (times in us)."""

    name: str
    thread: Thread
    start: float
    end: float
    duration: float  # as recorded: end - start loses digits at epoch-sized timestamps
    dims: tuple[object, ...] = ()  # ``Input Dims``, one entry per argument ([] for a non-tensor)
    types: tuple[str, ...] = ()  # ``Input type``
    strides: tuple[object, ...] = ()  # ``Input Strides``, where recorded
    sequence: int | None = None  # autograd's ``Sequence number``: a backward node carries its forward op's


@dataclass(frozen=True)
class Launch:
    """A runtime or driver call on the host that may have queued device work."""

    name: str
    thread: Thread
    start: float
    correlation: int
    duration: float = 0.0


@dataclass(frozen=True)
class Activity:
    """A kernel, memcpy or memset on the device (times in us)."""

    name: str
    kind: str  # its category: kernel, gpu_memcpy, gpu_memset
    device: int
    stream: int
    start: float
    end: float
    duration: float
    correlation: int


@dataclass(frozen=True)
class Trace:
    """A trace's events, read from its JSON."""

    path: str
    ranges: tuple[HostRange, ...]
    launches: tuple[Launch, ...]
    activities: tuple[Activity, ...]
    rank: int | None = None
    device_name: str = ""
    shapes: bool = False  # whether operators carry their inputs' shapes (record_shapes=True)
    device_facts: DriverFacts = field(default_factory=lambda: DriverFacts())  # sm_count, arch: what the profile match checks


# --- reading the file -------------------------------------------------------------------------------


def load(path: str | Path) -> Trace:
    """The trace in ``path`` (``.json`` or ``.json.gz``); every fault is one line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise MeasureError(f"{path}: no such trace file" if not path.exists() else f"{path}: is not a file")
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except (OSError, EOFError, ValueError) as exc:  # gzip's and json's faults, unreadable files
        raise MeasureError(f"{path}: not a PyTorch profiler trace: not JSON ({str(exc).splitlines()[0]})") from None
    return read(data, str(path))


# The categories of the kineto format torch 1.8.1 to 1.9 wrote (``schemaVersion`` 1), as today's.
OLDER_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                    "Memset": "gpu_memset", "async": "ac2g"}
SCHEDULE_HINT = ("a torch.profiler.profile(schedule=...) session hands each active window to on_trace_ready and "
                 "keeps nothing for an export after it: pass on_trace_ready=torch.profiler.tensorboard_trace_handler(DIR) "
                 "(or on_trace_ready=lambda p: p.export_chrome_trace(PATH))")


class _Fault(Exception):
    """A field of one event that cannot be read: which, what it holds, what it should hold."""

    def __init__(self, field: str, value: object, wanted: str) -> None:
        super().__init__(field)
        self.field, self.value, self.wanted = field, value, wanted


def _number(holder: Event, key: str, wanted: str = "a finite number", default: object = None, at_least: float | None = None,
            where: str = "") -> float:
    """``holder[key]`` as a finite float (a number, or a string of one), else a _Fault naming it."""
    value = holder.get(key, default)
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if (isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number)
            or (at_least is not None and number < at_least)):
        raise _Fault(where + key, value, wanted)
    return float(number)


def _whole(holder: Event, key: str, default: object = None, where: str = "args.") -> int:
    number = _number(holder, key, "a whole number", default, where=where)
    if number != int(number):
        raise _Fault(where + key, holder.get(key), "a whole number")
    return int(number)


def _list(args: Event, key: str) -> tuple[object, ...]:
    value = args.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Fault("args." + key, value, "a list")
    return tuple(value)


def _thread(event: Event) -> Thread:
    return _thread_id(event, "pid"), _thread_id(event, "tid")


def _thread_id(event: Event, key: str) -> str | int | None:
    value = event.get(key)
    if isinstance(value, bool) or not (value is None or isinstance(value, (str, int))):
        raise _Fault(key, value, "a number or a string")
    return value


def _category(event: Event) -> object:
    category = event.get("cat")
    if category == "async" and event.get("name") != "launch":
        return category  # torch 1.9's launch arrows are "async" "launch"; other async events are no launch's
    return OLDER_CATEGORIES.get(category, category) if isinstance(category, str) else category


def _legacy(events: list[Event]) -> bool:
    """Whether the events are the autograd profiler's own export (torch 1.7 and earlier:
    ``torch.autograd.profiler.profile().export_chrome_trace``): no categories, no correlation ids."""
    timed = [e for e in events if e.get("ph") == "X"]
    return bool(timed) and all("cat" not in e for e in timed) and any(
        e.get("pid") in ("CPU functions", "CUDA functions") for e in timed)


def read(data: object, path: str = "trace") -> Trace:
    """A Trace from a trace's parsed JSON: an object with ``traceEvents`` (or a bare event list).
    Each event that cannot be read is one line naming its index, its name and the field."""
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise MeasureError(f"{path}: not a PyTorch profiler trace: no traceEvents list of events (export one with "
                           "prof.export_chrome_trace(PATH) or torch.profiler.tensorboard_trace_handler)")
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise MeasureError(f"{path}: event {index} is {type(event).__name__} {str(event)[:60]}, not an event "
                               "(a JSON object with ph, name, ts)")
    if _legacy(events):
        raise MeasureError(f"{path}: the autograd profiler's legacy trace format (torch 1.7 and earlier: no "
                           "categories, no correlation of kernels to their launches) is not read; record with "
                           "torch.profiler.profile (torch 1.8.1 or later) and export_chrome_trace")
    ranges: list[HostRange] = []
    launches: list[Launch] = []
    activities: list[Activity] = []
    flows: dict[int, tuple[Thread, float]] = {}
    for index, event in enumerate(events):
        try:
            _read_event(event, ranges, launches, activities, flows)
        except _Fault as fault:
            name = event.get("name")
            named = f"{name[:80]!r}" if isinstance(name, str) else "with no name"
            raise MeasureError(f"{path}: event {index} ({named}, cat {event.get('cat')!r}): its '{fault.field}' is "
                               f"{json.dumps(fault.value, default=str)[:60]}; it must be {fault.wanted}") from None
    if not any(operator_name(r.name) for r in ranges) and not activities:
        marks = any(r.name.startswith(STEP_PREFIX) for r in ranges) or any(
            e.get("name") == "Record Window End" for e in events)
        hint = f": {SCHEDULE_HINT}" if marks else ""
        raise MeasureError(f"{path}: not a PyTorch profiler trace with work in it: none of its {len(events)} events is "
                           f"an operator or a device activity{hint}")
    known = {launch.correlation for launch in launches}
    launches += [Launch("ac2g", thread, ts, correlation) for correlation, (thread, ts) in flows.items()
                 if correlation not in known]  # a launch seen only through its flow arrow
    info = data.get("distributedInfo") if isinstance(data, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    return Trace(path=path, ranges=tuple(ranges), launches=tuple(launches), activities=tuple(activities),
                 rank=int(rank) if isinstance(rank, int) else None, device_name=_device_name(data, activities),
                 shapes=any(r.dims for r in ranges), device_facts=_device_facts(data, activities))


def _read_event(event: Event, ranges: list[HostRange], launches: list[Launch], activities: list[Activity],
                flows: dict[int, tuple[Thread, float]]) -> None:
    """One event into the list it belongs to (the rest are left alone); a _Fault where a field it
    needs cannot be read."""
    category = _category(event)
    if category == "ac2g" and event.get("ph") == "s":
        flows[_whole(event, "id", where="")] = (_thread(event), _number(event, "ts"))
    if event.get("ph") != "X" or category not in (*HOST_CATEGORIES, *LAUNCH_CATEGORIES, *DEVICE_CATEGORIES):
        return
    name = event.get("name")
    if not isinstance(name, str):
        raise _Fault("name", name, "a string")
    args = event.get("args")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise _Fault("args", args, "an object (JSON {...})")
    thread = _thread(event)
    start = _number(event, "ts")
    duration = _number(event, "dur", "a finite number >= 0", default=0.0, at_least=0.0)
    end = start + duration
    if category in HOST_CATEGORIES:
        sequence = _whole(args, "Sequence number") if args.get("Sequence number") is not None else None
        ranges.append(HostRange(name, thread, start, end, duration, _list(args, "Input Dims"),
                                tuple(str(t) for t in _list(args, "Input type")), _list(args, "Input Strides"),
                                sequence))
    elif category in LAUNCH_CATEGORIES and "correlation" in args:
        launches.append(Launch(name, thread, start, _whole(args, "correlation"), duration))
    elif category in DEVICE_CATEGORIES and "correlation" in args:
        device = _whole(args, "device", event.get("pid") if isinstance(event.get("pid"), int) else 0)
        stream = _whole(args, "stream", event.get("tid") if isinstance(event.get("tid"), int) else 0)
        activities.append(Activity(name, category, device, stream, start, end, duration,
                                   _whole(args, "correlation")))


def _device_entry(data: object, activities: Sequence[Activity]) -> Event:
    """The ``deviceProperties`` entry of the device the activities ran on (the first one), or {}."""
    properties = data.get("deviceProperties") if isinstance(data, dict) else None
    if not isinstance(properties, list):
        return {}
    device = activities[0].device if activities else None
    return next((entry for entry in properties if isinstance(entry, dict) and (device is None or entry.get("id") == device)),
                {})


def _device_name(data: object, activities: Sequence[Activity]) -> str:
    return str(_device_entry(data, activities).get("name") or "")


def _device_facts(data: object, activities: Sequence[Activity]) -> DriverFacts:
    """What the trace says of its device beyond the name: its SM count, its architecture (AMD)."""
    entry = _device_entry(data, activities)
    sms = entry.get("numSms")
    arch = entry.get("gcnArchName")
    return {"sm_count": sms if isinstance(sms, int) and not isinstance(sms, bool) else None,
            "arch": arch if isinstance(arch, str) else None}


def rank_files(folder: str | Path) -> list[Path]:
    """The trace files of a multi-rank run's folder (one per rank), in name order."""
    folder = Path(folder)
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not found:
        raise MeasureError(f"{folder}: a folder with no trace in it (*.json or *.json.gz, one per rank)")
    return found


# --- the trees --------------------------------------------------------------------------------------


@dataclass
class _Node:
    """A host range in its thread's tree, with the top operator it belongs to (``top``)."""

    event: HostRange
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    top: _Node | None = None  # the outermost operator at or above it
    module: str = ""  # the nearest nn.Module range around it

    @property
    def operator(self) -> str | None:
        return operator_name(self.event.name)


@dataclass(frozen=True)
class _Trees:
    """Every thread's tree, and per thread its ranges by start for finding what holds a time."""

    nodes: list[_Node]
    by_thread: dict[Thread, tuple[list[float], list[_Node]]]

    def innermost(self, thread: Thread, at: float) -> _Node | None:
        """The innermost range on ``thread`` that holds time ``at``."""
        starts, nodes = self.by_thread.get(thread, ([], []))
        index = bisect.bisect_right(starts, at) - 1
        node = nodes[index] if index >= 0 else None
        while node is not None and not node.event.start <= at < max(node.event.end, node.event.start + 1e-9):
            node = node.parent
        return node


def _trees(ranges: Sequence[HostRange], module_prefix: str) -> _Trees:
    nodes, by_thread = [], {}
    threads: dict[Thread, list[HostRange]] = {}
    for r in ranges:
        threads.setdefault(r.thread, []).append(r)
    for thread, events in threads.items():
        events.sort(key=lambda r: (r.start, -r.end))
        stack: list[_Node] = []
        ordered = []
        for event in events:
            while stack and stack[-1].event.end <= event.start:
                stack.pop()
            parent = stack[-1] if stack else None
            node = _Node(event, parent, module=parent.module if parent else "")
            if event.name.startswith(module_prefix):
                node.module = event.name[len(module_prefix):]
            if parent is not None:
                parent.children.append(node)
            node.top = parent.top if parent is not None and parent.top is not None else (node if node.operator else None)
            stack.append(node)
            ordered.append(node)
        nodes += ordered
        by_thread[thread] = ([n.event.start for n in ordered], ordered)
    _backward_modules(nodes)
    return _Trees(nodes, by_thread)


def _backward_modules(nodes: Sequence[_Node]) -> None:
    """A backward top operator outside every module range (autograd's engine runs it after the
    forward hooks closed) takes the module of the forward op with its sequence number, as
    measure_step groups it (step_profile.forward_modules)."""
    forward = {node.event.sequence: node.module for node in nodes if node.event.sequence is not None and node.module
               and node.operator and not step_profile.is_backward(node.event.name)}
    for node in nodes:
        if node.top is node and not node.module and node.event.sequence is not None and step_profile.is_backward(node.event.name):
            node.module = forward.get(node.event.sequence, "")


# --- the work ---------------------------------------------------------------------------------------


def _base(name: str) -> str:
    return name.split("::")[-1].split(".")[0]


def _aten(name: str) -> OpOverloadPacket | None:
    """torch's overload packet for an ``aten::`` name, or None (another namespace, no torch)."""
    if not name.startswith("aten::"):
        return None
    try:
        import torch
    except ImportError:
        return None
    return getattr(torch.ops.aten, _base(name), None)


def _element_bytes(types: Sequence[str]) -> int:
    return next((ELEMENT_BYTES[t] for t in types if t in ELEMENT_BYTES), 4)


def _elements(dims: list[int], strides: object) -> int:
    """A tensor's stored elements: its storage extent where strides say it is expanded."""
    if any(d == 0 for d in dims):
        return 0
    if isinstance(strides, list) and len(strides) == len(dims) and all(isinstance(s, int) for s in strides):
        return 1 + sum((d - 1) * abs(s) for d, s in zip(dims, strides))
    return math.prod(dims)


def _tensors(r: HostRange) -> list[tuple[int, int]]:
    """(elements, element bytes) of each tensor input of a range, TensorLists opened."""
    fallback = _element_bytes(r.types)
    found = []
    for i, dims in enumerate(r.dims):
        kind = r.types[i] if i < len(r.types) else ""
        strides = r.strides[i] if i < len(r.strides) else None
        if kind == "TensorList" and isinstance(dims, list):
            lists = strides if isinstance(strides, list) and len(strides) == len(dims) else [None] * len(dims)
            found += [(_elements(d, s), fallback) for d, s in zip(dims, lists) if isinstance(d, list) and d]
        elif kind in ELEMENT_BYTES and isinstance(dims, list) and all(isinstance(d, int) for d in dims):
            found.append((_elements(dims, strides), ELEMENT_BYTES[kind]))
    return found


def range_bytes(r: HostRange) -> float:
    """The bytes one operator call reads and writes, from its inputs (see the module docstring)."""
    tensors = _tensors(r)
    if not tensors:
        return 0.0
    read = sum(n * size for n, size in tensors)
    base = _base(r.name)
    if base in step_profile.WRITES_FIRST:
        return float(read)  # its first input is overwritten, not read: moved once, as measure_step counts it
    if base.endswith("_") and not base.startswith("__"):
        return float(read + tensors[0][0] * tensors[0][1])  # in place: the first input is written too
    if base in _REDUCTIONS:
        return float(read)
    if base in _MATMULS:
        shapes = [d for d, kind in zip(r.dims, r.types) if kind in ELEMENT_BYTES and isinstance(d, list) and len(d) >= 2]
        if len(shapes) >= 2:
            a, b = shapes[-2], shapes[-1]
            out = math.prod(a[:-1]) * (b[0] if base == "linear" else b[-1])
            return float(read + out * tensors[0][1])
    return float(read + max(n * size for n, size in tensors))


def range_flops(r: HostRange) -> tuple[str, float] | None:
    """(precision, FLOPs) of one call by torch's formula from its recorded shapes, or None (no
    formula, no shapes, or a formula that needs what the trace does not hold: a convolution's output)."""
    packet = _aten(r.name)
    if packet is None or not r.dims:
        return None

    found: OpOverloadPacket = packet

    class Call:  # what flop_formula reads of an aten call
        overloadpacket = found

    formula = step_profile.flop_formula(Call)
    if formula is None:
        return None
    shapes = [tuple(d) if kind in ELEMENT_BYTES and isinstance(d, list) else None
              for d, kind in zip(r.dims, r.types + ("",) * (len(r.dims) - len(r.types)))]
    while shapes and shapes[-1] is None:  # the scalars after the tensors (beta, alpha) are no formula's
        shapes.pop()
    try:
        count = formula(*shapes, out_val=None)
    except Exception:  # noqa: BLE001 - a formula that needs the output's shape, or arguments the trace lacks
        return None
    floating = next((_FLOATING[t] for t in r.types if t in _FLOATING), None)
    if floating is None or not count:
        return None
    import torch

    from pytest_solgate.declare.work import _precision_of_dtype

    precision = _precision_of_dtype(getattr(torch, floating), False)
    return (precision, float(count)) if precision else None


def _flops_below(node: _Node) -> list[tuple[str, float]]:
    """The FLOPs of a tree: each branch counted at its first operator that has a formula."""
    counted = range_flops(node.event)
    if counted is not None:
        return [counted]
    return [found for child in node.children for found in _flops_below(child)]


@functools.lru_cache(maxsize=None)
def _overload(name: str) -> OpOverload | None:
    """The first overload torch resolves of an aten op (``default`` where there is one), or None."""
    packet = _aten(name)
    if packet is None:
        return None
    for overload in sorted(packet.overloads(), key=lambda o: o != "default"):
        try:
            found = getattr(packet, overload)
            found.name()
            return found
        except (AttributeError, RuntimeError):  # an overload listed but not registered here
            continue
    return None


@functools.lru_cache(maxsize=None)
def _opened(name: str) -> bool:
    """Whether the bytes of a call are counted in the calls inside it: a range that is no aten
    kernel (a backward node, an annotation) or a composite op (``aten::linear``, ``aten::to``),
    as measure_step's counting mode sees them decomposed. A custom op (``fbgemm::...``) is counted whole."""
    if operator_name(name) is None or name.startswith((step_profile.BACKWARD_PREFIX, "torch::autograd::")):
        return True
    overload = _overload(name)
    if overload is None:
        return False
    import torch

    try:
        return bool(overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except RuntimeError:
        return False


def _counted_calls(node: _Node) -> Iterable[_Node]:
    """The calls of a tree whose bytes are counted: the first that is a kernel down each branch
    (its own calls inside are its business, as in measure_step), views left out."""
    if _opened(node.event.name):
        for child in node.children:
            yield from _counted_calls(child)
        return
    overload = _overload(node.event.name)
    if not getattr(overload, "is_view", False):
        yield node


# --- the runs ---------------------------------------------------------------------------------------


def _key(node: _Node) -> tuple[str, str]:
    top = node.top
    assert top is not None
    return top.operator or top.event.name, top.module


def _steps(trace: Trace, step_prefix: str) -> tuple[list[tuple[float, float]], str]:
    """The step ranges (start, end in us), and a note when there are none: the trace is then one
    step, from its first event (a host range, a launch, a device activity) to its last."""
    steps = sorted((r.start, r.end) for r in trace.ranges if r.name.startswith(step_prefix))
    if steps:
        return steps, ""
    times = ([t for r in trace.ranges for t in (r.start, r.end)] + [t for a in trace.activities for t in (a.start, a.end)]
             + [t for launch in trace.launches for t in (launch.start, launch.start + launch.duration)])
    return [(min(times), max(times))], (f"{trace.path}: no {step_prefix}N range (a torch.profiler schedule's step "
                                        "marks): the whole trace is read as one step, from its first event to its last")


def _step_of(launch: Launch, steps: list[tuple[float, float]], starts: list[float], whole: bool) -> int | None:
    """The index of the step a launch was made in, or None (outside every step)."""
    if whole:
        return 0  # the one step is the whole trace: every launch is in it, the last one's end included
    index = bisect.bisect_right(starts, launch.start) - 1
    return None if index < 0 or launch.start >= steps[index][1] else index


@dataclass(frozen=True)
class _ByStart:
    """Device activities sorted by start, for finding those that run in a span without a pass over all."""

    activities: tuple[Activity, ...]
    starts: tuple[float, ...]
    longest: float

    @classmethod
    def of(cls, activities: Sequence[Activity]) -> "_ByStart":
        ordered = tuple(sorted(activities, key=lambda a: a.start))
        return cls(ordered, tuple(a.start for a in ordered), max((a.duration for a in ordered), default=0.0))

    def carried_in(self, own: set[int], start: float, end: float) -> list[tuple[float, float]]:
        """The parts of [start, end) that device activities not the step's own (``own``: their ids)
        cover: kernels of an earlier step still running, kernels launched before the trace began."""
        first = bisect.bisect_left(self.starts, start - self.longest)
        last = bisect.bisect_left(self.starts, end)
        return [(max(a.start, start), min(a.end, end)) for a in self.activities[first:last]
                if id(a) not in own and a.end > start]


OperatorKey = tuple[str, str]  # (operator, module): a row of the step table
_Placed = list[tuple[OperatorKey, Activity]]  # a step's device activities, each with its operator


def profile_trace(trace: Trace, step_prefix: str = STEP_PREFIX, module_prefix: str = MODULE_PREFIX) -> StepProfile:
    """The trace as ``measure_step`` would have profiled it: one run per step range (named
    ``step_prefix...``; measure_step's own are ``solgate:step``), modules from the ranges named
    ``module_prefix<name>`` (measure_step's: ``solgate:module:``)."""
    trees = _trees(trace.ranges, module_prefix)
    steps, note = _steps(trace, step_prefix)
    notes = [note] if note else []
    per_step, orphans = _activities_by_step(trace, trees, steps, bool(note), step_prefix)
    if orphans:
        notes.append(f"{orphans} device activities have no launch in the trace (no runtime event or ac2g flow with "
                     "their correlation id; launched before the trace began): no operator's, carried in where they run "
                     "inside a step")
    on_device = bool(trace.activities)
    tops = [n for n in trees.nodes if n.top is n]
    by_start = _ByStart.of(trace.activities) if on_device else None
    runs = []
    work: dict[OperatorKey, OperatorWork] = {}
    for index, (start, end) in enumerate(steps):
        inside = [n for n in tops if start <= n.event.start < end]
        runs.append(_step_reading(start, end, inside, per_step[index], by_start))
        _add_step_work(work, inside)
    empty = [i for i, run in enumerate(runs) if not run.calls]
    if empty and len(empty) < len(runs):  # a step the profiler stopped in, or one that ran nothing
        notes.append(f"{len(empty)} of the {len(runs)} steps ran no operator (the last one the profiler stopped in, "
                     "often): left out")
        runs = [run for run in runs if run.calls]
    if not trace.shapes:
        notes.append(f"{trace.path}: no input shapes (record with torch.profiler.profile(record_shapes=True)): no "
                     "FLOPs or bytes counted, operators ranked by time, T_SOL 0")
    per_run = {key: OperatorWork(flops={p: n / len(runs) for p, n in w.flops.items()}, bytes=w.bytes / len(runs))
               for key, w in work.items()}
    return StepProfile(runs=tuple(runs), work=per_run, device="cuda" if on_device else "cpu",
                       mode="trace-kernels" if on_device else "trace-cpu", warmup_calls=0,
                       started_at=0.0, finished_at=0.0, notes=tuple(notes))


def _activities_by_step(trace: Trace, trees: _Trees, steps: list[tuple[float, float]], whole: bool,
                        step_prefix: str) -> tuple[list[_Placed], int]:
    """Each step's device activities with the operator whose launch made them (found by correlation
    id), and how many activities have no launch in the trace. A launch outside every operator is
    its own row, under the range around it; one outside every step is carried into where it runs."""
    launches = {launch.correlation: launch for launch in trace.launches}
    placed = {launch.correlation: trees.innermost(launch.thread, launch.start) for launch in launches.values()}
    orphans = 0
    per_step: list[_Placed] = [[] for _ in steps]
    starts = [start for start, _ in steps]
    for activity in trace.activities:
        launch = launches.get(activity.correlation)
        if launch is None:
            orphans += 1
            continue
        index = _step_of(launch, steps, starts, whole)
        if index is None:
            continue  # launched outside every step: carried into the steps it runs in
        node = placed[activity.correlation]
        if node is not None and node.top is not None:
            key = _key(node)
        else:  # no operator around the launch: it is the launch's own, in the range around it
            key = (launch.name, node.event.name if node is not None and not node.event.name.startswith(step_prefix) else "")
        per_step[index].append((key, activity))
    return per_step, orphans


def _step_reading(start: float, end: float, inside: list[_Node], activities: _Placed,
                  by_start: _ByStart | None) -> RunReading:
    """One step's run: each operator's calls and seconds, and the step's idle, overlapped and
    carried-in time. On a device (``by_start``) an operator's time is its kernels', the step spans
    its kernels too, and a launch with no operator is a call per launch; on a CPU, its ranges'."""
    calls: dict[OperatorKey, int] = {}
    times: dict[OperatorKey, float] = {}
    for node in inside:
        key = _key(node)
        calls[key] = calls.get(key, 0) + 1
        times.setdefault(key, 0.0)
    carried: list[tuple[float, float]] = []
    if by_start is not None:
        own: dict[OperatorKey, int] = {}
        intervals = [(a.start, a.end) for _, a in activities]
        for key, activity in activities:
            times[key] = times.get(key, 0.0) + activity.duration * 1e-6
        for key, _ in {(key, a.correlation) for key, a in activities if key not in calls}:
            own[key] = own.get(key, 0) + 1  # a launch of its own (no operator): a call per launch
        calls.update(own)
        end = max([end] + [stop for _, stop in intervals])
        start = min([start] + [begin for begin, _ in intervals])
        carried = by_start.carried_in({id(a) for _, a in activities}, start, end)
    else:
        intervals = [(n.event.start, n.event.end) for n in inside]
        for node in inside:
            times[_key(node)] += node.event.duration * 1e-6
    covered = stats.covered_length(intervals + carried) * 1e-6
    seconds = (end - start) * 1e-6
    carried_in = sum(stop - begin for begin, stop in carried) * 1e-6
    overlap = sum(times.values()) + carried_in - covered
    return RunReading(seconds=seconds, operators=times, calls=calls, idle=max(seconds - covered, 0.0),
                      overlap=overlap if overlap >= 1e-9 else 0.0, carried_in=carried_in)


def _add_step_work(work: dict[OperatorKey, OperatorWork], inside: list[_Node]) -> None:
    """A step's FLOPs (of every range below its operators) and bytes (of the calls that count)."""
    for node in inside:
        for precision, count in _flops_below(node):
            key = _key(node)
            work[key] = add_work(work.get(key, OperatorWork()), OperatorWork(flops={precision: count}))
    for top in inside:
        nbytes = sum(range_bytes(node.event) for node in _counted_calls(top))
        if nbytes:
            key = _key(top)
            work[key] = add_work(work.get(key, OperatorWork()), OperatorWork(bytes=nbytes))


def profiler_runs(profiler: torch.profiler.profile, step_prefix: str = step_profile.STEP_RANGE,
                  module_prefix: str = step_profile.MODULE_RANGE) -> list[RunReading]:
    """The runs of a live ``torch.profiler`` session (``measure_step``'s blocks on a GPU), read as a
    recorded trace is: exported through kineto and read by ``profile_trace``, so that each
    operator's kernels are found by their correlation ids and timed by the device's own timestamps,
    the reading tested on traces from real GPUs (tests/test_kineto.py)."""
    with tempfile.TemporaryDirectory(prefix="solgate-step-") as folder:
        path = Path(folder) / "block.json"
        profiler.export_chrome_trace(str(path))
        return list(profile_trace(load(path), step_prefix, module_prefix).runs)


def block_reader(device: str) -> step_profile.BlockReader | None:
    """What reads a block of ``measure_step``'s runs from its profiler session: on a GPU this
    trace reader (``profiler_runs``: kernels by correlation id, the device's timestamps; tested on
    real GPUs' traces); on a CPU the profiler's events as they are (None: step_profile.read_runs),
    which needs no export of a trace per block."""
    return profiler_runs if device == "cuda" else None


def trace_events(trace: Trace) -> list[kernel_trace.TraceEvent]:
    """The trace's events in the fields the CUDA backend's sample reader takes (``kernel_trace``):
    a recorded trace checks that reader as the profiler's own events feed it. Host events are on
    their thread (a hash where kineto names it), device activities on their stream."""

    def ns(us: float) -> int:
        return round(us * 1000)

    def thread(key: Thread) -> int:
        return key[1] if isinstance(key[1], int) else hash(key[1])

    return ([kernel_trace.TraceEvent(r.name, False, ns(r.start), ns(r.end), 0, thread(r.thread)) for r in trace.ranges]
            + [kernel_trace.TraceEvent(launch.name, False, ns(launch.start), ns(launch.start), launch.correlation,
                                       thread(launch.thread)) for launch in trace.launches]
            + [kernel_trace.TraceEvent(a.name, True, ns(a.start), ns(a.end), a.correlation, a.stream)
               for a in trace.activities])
