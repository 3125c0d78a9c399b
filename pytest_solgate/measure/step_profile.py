"""Measure (a whole step): a callable run under torch.profiler, its time split by the operator and
module that spent it, and the work of each operator counted.

Two passes over the same callable, after a warm-up:

- counting (once, untimed): a TorchDispatchMode sees every aten kernel call (after autograd and the
  composite ops' decomposition) and counts its FLOPs (torch's own FlopCounterMode formulas, by the
  precision class of its dtype) and its bytes (what it reads and writes: its tensor inputs and
  outputs; a view moves nothing). Each call is wrapped in a profiler range, so that the profiler's
  own tree says which top-level operator (``aten::linear``, ``aten::softmax``; in a backward pass the
  autograd node) and which ``nn.Module`` issued it.
- timing (``runs`` times, each in its own ``solgate:step`` range): on a CPU, the wall time of every
  top-level operator's range on the profiler's clock; on a GPU, the device time of the kernels each
  top-level operator launched (the device's own timestamps, through the profiler's correlation of
  launches to kernels). Idle is the part of the step that no operator (CPU) or kernel (GPU) covers:
  Python between operators, launches the host is late for, synchronization, copies waited for.

Modules are named by where they sit: the first module called is its class name, a child is its
parent's name, a dot, and its attribute name (``Block.attn.proj``); a second module that would take
a name already given is numbered (``Linear#2``: two top-level layers are two rows). No torch at
import time.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence, TypeVar

from pytest_solgate.support import stats

if TYPE_CHECKING:  # torch is imported lazily, when a step is measured
    from torch import nn
    from torch._ops import OpOverloadPacket
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.hooks import RemovableHandle

STEP_RANGE = "solgate:step"
MODULE_RANGE = "solgate:module:"
COUNT_RANGE = "solgate:count#"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
MAX_RUNS = 200  # a bound on the profiler's memory; --sol-max-time bounds the time
MIN_RUNS = 6  # the fewest for a confidence interval of the median (support/stats.py)


@dataclass(frozen=True)
class OperatorWork:
    """What one (operator, module) group does in one step, as counted: FLOPs by precision, bytes."""

    flops: Mapping[str, float] = field(default_factory=dict)
    bytes: float = 0.0


@dataclass(frozen=True)
class RunReading:
    """One profiled run of the step: its time, the time each (operator, module) group spent, how
    many calls each made, and the idle time (seconds)."""

    seconds: float
    operators: Mapping[tuple[str, str], float]
    calls: Mapping[tuple[str, str], int]
    idle: float
    overlap: float = 0.0  # device or operator time counted twice (kernels at once; threads on a CPU)
    carried_in: float = 0.0  # device time in the step that is not its own (an earlier step's, launched before the trace)


class AtenCall(Protocol):
    """What is read of an aten kernel call's function: its overload packet (``aten.mm``)."""

    @property
    def overloadpacket(self) -> OpOverloadPacket: ...


class TimeRange(Protocol):
    @property
    def start(self) -> float: ...

    @property
    def end(self) -> float: ...


class ProfilerEvent(Protocol):
    """What is read of a profiler event (times in us): torch's FunctionEvent, or a test's made-up one."""

    @property
    def name(self) -> str: ...

    @property
    def time_range(self) -> TimeRange: ...

    @property
    def cpu_parent(self) -> ProfilerEvent | None: ...

    @property
    def device_time_total(self) -> float: ...


Rank = TypeVar("Rank", tuple[bool, float], float)  # a run's place in the faster-half order (run_ranks), or its time


# What reads a block of runs from its profiler session (on a GPU, kineto.profiler_runs).
BlockReader = Callable[["profile"], "list[RunReading]"]


@dataclass(frozen=True)
class StepProfile:
    """What measuring a step returns: its runs and each group's counted work."""

    runs: tuple[RunReading, ...]
    work: Mapping[tuple[str, str], OperatorWork]
    device: str  # "cpu" or "cuda"
    mode: str  # "profiler-cpu" (operator ranges on the host) or "profiler-kernels" (device timestamps)
    warmup_calls: int
    started_at: float
    finished_at: float
    notes: tuple[str, ...] = ()


# --- the work ---------------------------------------------------------------------------------------


def tensor_bytes(values: object) -> int:
    """Bytes of the tensors among ``values`` (nested lists and tuples too); an expanded tensor
    counts its storage, not its broadcast size."""
    import torch

    total = 0
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            logical = value.numel() * value.element_size()
            try:
                stored = value.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, functional)
                stored = logical
            total += min(logical, stored) if stored else logical
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, Mapping):
            stack.extend(value.values())
    return total


def call_work(func: AtenCall, args: Sequence[object], kwargs: Mapping[str, object], out: object, tf32: bool) -> OperatorWork:
    """FLOPs and bytes of one aten kernel call. FLOPs by torch's own FlopCounterMode formulas (matmuls,
    convolutions, attention; pointwise ops and reductions count none), in the precision class of the
    first floating input; bytes as the kernel reads and writes them: inputs plus outputs, none for a
    view (it aliases its input)."""
    from pytest_solgate.declare.work import _precision_of_dtype, first_dtype

    flops: dict[str, float] = {}
    formula = flop_formula(func)
    if formula is not None:
        count = formula(*args, **kwargs, out_val=out)
        precision = _precision_of_dtype(first_dtype(args), tf32)
        if count and precision is not None:
            flops[precision] = float(count)
    return OperatorWork(flops=flops, bytes=float(moved_bytes(func, args, kwargs, out)))


def flop_formula(func: AtenCall) -> Callable[..., int] | None:
    """torch's FLOP formula for an aten op, or None (pointwise ops, reductions, norms). The CPU's
    fused attention kernel, which FlopCounterMode does not list, counts as its GPU siblings do."""
    import torch
    from torch.utils.flop_counter import flop_registry, sdpa_flop_count

    packet = func.overloadpacket
    if packet in flop_registry:
        return flop_registry[packet]
    if packet is getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None):
        return lambda query, key, value, *rest, out_val=None, **options: sdpa_flop_count(query.shape, key.shape, value.shape)
    return None


# Ops that allocate and write nothing (their output is uninitialized memory) and ops that overwrite
# their first argument without reading it: counting every tensor they touch read an ``empty_like``
# at SOL 1.95 (issue 43).
ALLOCATES_ONLY = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_"}
WRITES_FIRST = {"copy_", "fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_", "exponential_", "index_fill_"}


def moved_bytes(func: object, args: Sequence[object], kwargs: Mapping[str, object], out: object) -> int:
    """Bytes an aten kernel call reads and writes: its tensor inputs plus outputs; none for a view
    or an allocation, and the first argument once (written, not read) for an op that overwrites it."""
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    if getattr(func, "is_view", False) or name in ALLOCATES_ONLY:
        return 0
    if name in WRITES_FIRST and args:
        return tensor_bytes(args[1:]) + tensor_bytes(kwargs) + tensor_bytes(out)
    return tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(out)


def add_work(a: OperatorWork, b: OperatorWork) -> OperatorWork:
    flops = dict(a.flops)
    for precision, count in b.flops.items():
        flops[precision] = flops.get(precision, 0.0) + count
    return OperatorWork(flops=flops, bytes=a.bytes + b.bytes)


# --- the runs every figure is a mean over, and the noise of that mean ---------------------------------

RESAMPLES = 200
STALL_SPREADS = 5.0  # how far above its median, in robust spreads, an operator's time is a stall
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation over its median absolute deviation


def stalled(runs: Sequence[RunReading]) -> list[bool]:
    """Whether some operator stalled in each run: took, at its usual number of calls, more than twice
    its median time over the runs and more than STALL_SPREADS robust spreads (MAD_TO_SIGMA x the
    median absolute deviation) above it. A pause (garbage collection, a preempted thread) that lands
    on a small operator lengthens its run less than a larger operator's spread does, so a ranking by
    step time alone keeps that run, and the pause is then most of that operator's figure and all of
    its noise. No run under MIN_RUNS: too few to tell a stall from the spread."""
    flags = [False] * len(runs)
    if len(runs) < MIN_RUNS:
        return flags
    for key in {key for run in runs for key in run.operators}:
        usual_calls = stats.median([run.calls.get(key, 0) for run in runs])
        values = [run.operators.get(key, 0.0) for run in runs]
        middle = stats.median(values)
        spread = MAD_TO_SIGMA * stats.median([abs(value - middle) for value in values])
        limit = middle + max(STALL_SPREADS * spread, middle)
        for index, run in enumerate(runs):
            if values[index] > limit and run.calls.get(key, 0) == usual_calls:  # more calls is more work, not a stall
                flags[index] = True
    return flags


def run_ranks(runs: Sequence[RunReading], flags: Sequence[bool] | None = None) -> list[tuple[bool, float]]:
    """Each run's place in the order the faster half is taken from: by step time, a run in which an
    operator stalled (``stalled``, or its ``flags`` where the caller has them) after every run in
    which none did. The same order for every figure of the step, so that its figures stay means
    over the same runs and add up as each run's do."""
    return list(zip(stalled(runs) if flags is None else flags, (run.seconds for run in runs)))


def faster_half_noise(ranks: Sequence[Rank], values: Sequence[float], resamples: int = RESAMPLES) -> float:
    """The relative 95 % half-width of the figure every record of a step carries: the mean of
    ``values`` (one per run) over the first half of the runs by ``ranks`` (``run_ranks``: the faster
    half by step time, stalled runs last; step times alone rank as well). Bootstrapped over the runs
    (a fixed seed: the same runs give the same noise), so a bimodal operator whose slow mode falls
    in the slower half (page faults on fresh buffers in some runs) carries the steadiness of what the
    gate compares, not its whole spread. inf under MIN_RUNS runs, as a median's interval."""
    import random

    runs = list(zip(ranks, values))
    if len(runs) < MIN_RUNS:
        return math.inf

    def figure(sample: Sequence[tuple[Rank, float]]) -> float:
        ordered = sorted(sample, key=lambda run: run[0])
        kept = ordered[:max(1, (len(ordered) + 1) // 2)]
        return sum(value for _, value in kept) / len(kept)

    centre = figure(runs)
    if centre <= 0:
        return math.inf
    draw = random.Random(0)
    figures = [figure([runs[draw.randrange(len(runs))] for _ in runs]) for _ in range(resamples)]
    return (stats.quantile(figures, 0.975) - stats.quantile(figures, 0.025)) / 2 / centre


# --- the profiler's tree ----------------------------------------------------------------------------


def operator_name(name: str) -> str | None:
    """The operator an event stands for, or None when it is not one (a range of ours, a Python
    function, a runtime call): ``aten::mm``, a custom ``lib::op``, or a backward node's name."""
    if name.startswith(BACKWARD_PREFIX):
        return name[len(BACKWARD_PREFIX):]
    if name.startswith("solgate:") or "::" not in name or name.startswith(("cuda", "autograd::")):
        return None
    return name


def top_operator(event: ProfilerEvent) -> tuple[ProfilerEvent | None, str, str]:
    """The outermost operator event above (or at) ``event``, its name, and the module it ran in ('')."""
    top: ProfilerEvent | None = None
    name, module = "", ""
    node: ProfilerEvent | None = event
    while node is not None:
        found = operator_name(node.name)
        if found is not None:
            top, name = node, found
        elif node.name.startswith(MODULE_RANGE) and not module:
            module = node.name[len(MODULE_RANGE):]
        node = node.cpu_parent
    if top is not None and module == "":
        node = top.cpu_parent  # the module is the nearest one around the top operator
        while node is not None and not module:
            if node.name.startswith(MODULE_RANGE):
                module = node.name[len(MODULE_RANGE):]
            node = node.cpu_parent
    return top, name, module


def is_backward(name: str) -> bool:
    """Whether an event is autograd's backward work (its engine's range or a node: ``AddmmBackward0``)."""
    return name.startswith(BACKWARD_PREFIX) or re.search(r"Backward\d*$", name) is not None


def forward_modules(events: Sequence[ProfilerEvent]) -> dict[int, str]:
    """The module each autograd sequence number's forward op ran in: a backward node carries its
    forward op's sequence number, and runs outside every module's range (the forward hooks'),
    so it is given to the module of the forward op that made it (``Net.fc1``'s ``AddmmBackward0``)."""
    found: dict[int, str] = {}
    for event in events:
        sequence = getattr(event, "sequence_nr", -1)
        if sequence is not None and sequence >= 0 and not is_backward(event.name) and operator_name(event.name):
            module = top_operator(event)[2]
            if module:
                found[sequence] = module
    return found


def group_of(event: ProfilerEvent, modules: Mapping[int, str]) -> tuple[ProfilerEvent | None, tuple[str, str]]:
    """The top operator above ``event`` and its (operator, module) group; a backward one takes its
    forward op's module (``forward_modules``)."""
    top, name, module = top_operator(event)
    if top is not None and not module and is_backward(top.name):
        module = modules.get(getattr(top, "sequence_nr", -1), "")
    return top, (name, module)


def read_runs(events: Sequence[ProfilerEvent], on_gpu: bool) -> list[RunReading]:
    """The runs in a profiler's event list (``prof.events()``: FunctionEvents, times in us), one per
    ``solgate:step`` range, in order. Pure over the events, so that it is tested on made-up ones."""
    steps = sorted((e for e in events if e.name == STEP_RANGE), key=lambda e: e.time_range.start)
    modules = forward_modules(events)
    readings = []
    for step in steps:
        start, end = step.time_range.start, step.time_range.end
        inside = [e for e in events if start <= e.time_range.start < end]
        times: dict[tuple[str, str], float] = {}
        calls: dict[tuple[str, str], int] = {}
        intervals: list[tuple[float, float]] = []
        for event in inside:
            if _is_device(event):
                if on_gpu:
                    intervals.append((event.time_range.start, event.time_range.end))
                continue
            name = operator_name(event.name)
            if name is None:
                continue
            top, key = group_of(event, modules)
            if top is not event:
                continue  # inside another operator: its time is its parent's
            calls[key] = calls.get(key, 0) + 1
            seconds = event.device_time_total if on_gpu else event.time_range.end - event.time_range.start
            times[key] = times.get(key, 0.0) + seconds * 1e-6
            if not on_gpu:
                intervals.append((event.time_range.start, event.time_range.end))
        if on_gpu:  # the last kernel may end after the host's range (no synchronize inside it)
            end = max([end] + [stop for _, stop in intervals])
        covered = stats.covered_length(intervals) * 1e-6
        step_seconds = (end - start) * 1e-6
        readings.append(RunReading(
            seconds=step_seconds,
            operators=times,
            calls=calls,
            idle=max(step_seconds - covered, 0.0),
            overlap=_at_least_a_nanosecond(sum(times.values()) - covered),
        ))
    return readings


def _at_least_a_nanosecond(seconds: float) -> float:
    """``seconds``, or 0 under a nanosecond (the profiler's resolution: what is left there is rounding)."""
    return seconds if seconds >= 1e-9 else 0.0


def _is_device(event: ProfilerEvent) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and getattr(kind, "name", str(kind)).upper() not in ("CPU", "DEVICETYPE.CPU")


def read_work(events: Sequence[ProfilerEvent], counted: Sequence[OperatorWork]) -> dict[tuple[str, str], OperatorWork]:
    """Each counted kernel call (``solgate:count#i`` range i) added to the (operator, module) group
    the profiler's tree puts it under."""
    work: dict[tuple[str, str], OperatorWork] = {}
    modules = forward_modules(events)
    for event in events:
        if not event.name.startswith(COUNT_RANGE):
            continue
        index = int(event.name[len(COUNT_RANGE):])
        top, (name, module) = group_of(event, modules)
        key = (name or "unattributed", module)
        work[key] = add_work(work.get(key, OperatorWork()), counted[index])
    return work


# --- running it -------------------------------------------------------------------------------------


class _ModuleRanges:
    """A profiler range around every nn.Module call, named by the module's place (see the module
    docstring); installed for the passes only."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.open: list[tuple[str, nn.Module, object]] = []  # name, module, the profiler's handle of its range
        self.handles: list[RemovableHandle] = []

    def name(self, module: nn.Module) -> str:
        known = self.names.get(id(module))
        if known is not None:
            return known
        parent_name = self.open[-1][0] if self.open else None
        name = type(module).__name__
        if parent_name is not None:
            parent = self.open[-1][1]
            for attribute, child in getattr(parent, "_modules", {}).items():
                if child is module:
                    name = f"{parent_name}.{attribute}"
                    break
            else:
                name = f"{parent_name}.{name}"
        if name in self.names.values():  # another module by that name (two top-level nn.Linear): its own row
            name = next(f"{name}#{n}" for n in range(2, len(self.names) + 3) if f"{name}#{n}" not in self.names.values())
        self.names[id(module)] = name
        return name

    def __enter__(self) -> "_ModuleRanges":
        import torch
        from torch.nn.modules import module as modules

        def before(module: nn.Module, args: object) -> None:
            name = self.name(module)
            handle = torch.ops.profiler._record_function_enter_new(MODULE_RANGE + name, None)
            self.open.append((name, module, handle))

        def after(module: nn.Module, args: object, output: object) -> None:
            while self.open:
                name, opened, handle = self.open.pop()
                torch.ops.profiler._record_function_exit._RecordFunction(handle)
                if opened is module:
                    break

        self.handles = [modules.register_module_forward_pre_hook(before), modules.register_module_forward_hook(after)]
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        for handle in self.handles:
            handle.remove()
        while self.open:  # a forward that raised left its ranges open
            torch.ops.profiler._record_function_exit._RecordFunction(self.open.pop()[2])


def _counting_mode(counted: list[OperatorWork], tf32: bool) -> TorchDispatchMode:
    from torch.profiler import record_function
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            kwargs = kwargs or {}
            if flop_formula(func) is None:
                # A composite op reaches this mode whole under inference_mode (no autograd key
                # decomposed it): its parts are counted, as FlopCounterMode counts them.
                with self:
                    parts = func.decompose(*args, **kwargs)
                if parts is not NotImplemented:
                    return parts
            index = len(counted)
            counted.append(OperatorWork())
            with record_function(f"{COUNT_RANGE}{index}"):
                out = func(*args, **kwargs)
            counted[index] = call_work(func, args, kwargs, out, tf32)
            return out

    return Counting()


def profile_step(fn: Callable[[], object], device: str, max_time: float, runs: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, min_time: float = 0.0, noise: float = 0.0,
                 read: BlockReader | None = None) -> StepProfile:
    """Warm ``fn`` up, count its work once, then profile ``runs`` runs of it; by default blocks of
    runs until the figures the gate compares are steady (``steady``: within ``noise``) after at
    least ``min_time`` seconds, or ``max_time`` seconds have passed (at least MIN_RUNS runs, at most
    MAX_RUNS). ``read`` reads a block's profiler session into its runs (default: its events, as
    ``read_runs`` does; on a GPU the engine passes the trace reader, kineto.profiler_runs)."""
    __tracebackhide__ = True  # a step that raises shows its own traceback, not ours
    import torch
    from torch.profiler import ProfilerActivity

    on_gpu = device == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    started_at = time.time()
    warmup = _warm_up(fn, sync, clock, max_time)
    work = _counted_work(fn, sync, activities, tf32)
    blocks = _Blocks(fn, sync, activities, clock, read, on_gpu)
    readings = blocks.fixed(runs) if runs is not None else blocks.until_steady(max_time, min_time, noise)
    return StepProfile(
        runs=tuple(readings),
        work=work,
        device=device,
        mode="profiler-kernels" if on_gpu else "profiler-cpu",
        warmup_calls=warmup,
        started_at=started_at,
        finished_at=time.time(),
    )


def _warm_up(fn: Callable[[], object], sync: Callable[[], None], clock: Callable[[], float], max_time: float) -> int:
    """Call ``fn`` once, and a second time where it is cheap (caches, allocator, autotuning);
    returns how many calls warmed it up."""
    __tracebackhide__ = True
    began = clock()
    fn()
    sync()
    once = max(clock() - began, 1e-9)
    if once < max_time / 20:
        fn()
        sync()
        return 2
    return 1


def _counted_work(fn: Callable[[], object], sync: Callable[[], None], activities: list[ProfilerActivity],
                  tf32: bool) -> dict[tuple[str, str], OperatorWork]:
    """Each operator's FLOPs and bytes, counted over one call of ``fn`` under the counting mode."""
    __tracebackhide__ = True
    from torch.profiler import profile

    counted: list[OperatorWork] = []
    with profile(activities=activities) as counting:
        with _ModuleRanges(), _counting_mode(counted, tf32):
            fn()
        sync()
    return read_work(counting.events(), counted)


@dataclass(frozen=True)
class _Blocks:
    """Profiled runs of ``fn``, a block of runs in one profiler session, read as it goes (by
    ``read``, else its events)."""

    fn: Callable[[], object]
    sync: Callable[[], None]
    activities: list[ProfilerActivity]
    clock: Callable[[], float]
    read: BlockReader | None
    on_gpu: bool

    def block(self, count: int) -> list[RunReading]:
        __tracebackhide__ = True
        from torch.profiler import profile, record_function

        with profile(activities=self.activities) as timing:
            with _ModuleRanges():
                for _ in range(count):
                    with record_function(STEP_RANGE):
                        self.fn()
                        self.sync()
        return self.read(timing) if self.read is not None else read_runs(timing.events(), self.on_gpu)

    def fixed(self, runs: int) -> list[RunReading]:
        """Exactly ``runs`` runs, in one block."""
        __tracebackhide__ = True
        return self.block(runs) if runs > 0 else []

    def until_steady(self, max_time: float, min_time: float, noise: float) -> list[RunReading]:
        """Blocks of runs, each half the runs so far, until the figures are steady after
        ``min_time`` seconds, or ``max_time`` seconds or MAX_RUNS runs are spent. While stalled runs
        would be among the faster half every figure is a mean over (a busy machine preempts the
        step's thread mid-operator), the budget stretches to STALLED_STRETCH times ``max_time``."""
        __tracebackhide__ = True
        readings: list[RunReading] = []
        timed_from = self.clock()
        block = MIN_RUNS
        while block > 0:
            readings += self.block(block)
            elapsed = self.clock() - timed_from
            flags = stalled(readings)  # once per block: the stall test reads every operator of every run
            clean = clean_half(flags)
            budget = max_time if clean else STALLED_STRETCH * max_time
            if len(readings) >= MAX_RUNS or elapsed >= budget:
                break
            if clean and elapsed >= min_time and steady(readings, noise, flags):
                break
            per_run = elapsed / max(len(readings), 1)
            block = min(max(1, len(readings) // 2), MAX_RUNS - len(readings), int((budget - elapsed) / per_run))
        return readings


STALLED_STRETCH = 3.0  # how many time budgets a step may take while stalled runs would enter its figures


def clean_half(flags: Sequence[bool]) -> bool:
    """Whether the faster half every figure is a mean over (``run_ranks``) holds no stalled run,
    from each run's ``stalled`` flag."""
    return sum(not flag for flag in flags) >= max(1, (len(flags) + 1) // 2)


STEADY_SHARE = 0.05  # operators that take this share of the step or more must be steady to stop


def steady(readings: Sequence[RunReading], target: float, flags: Sequence[bool]) -> bool:
    """Whether the step's time and every operator's that takes STEADY_SHARE of it or more are
    known within ``target`` (faster_half_noise): the figures the step's records carry. ``flags``:
    each run's ``stalled`` flag (``until_steady`` has them for its stretched budget)."""
    step_seconds = [run.seconds for run in readings]
    ranks = run_ranks(readings, flags)
    if faster_half_noise(ranks, step_seconds) > target:
        return False
    total = sum(step_seconds) or 1.0
    for key in {key for run in readings for key in run.operators}:
        values = [run.operators.get(key, 0.0) for run in readings]
        if sum(values) / total >= STEADY_SHARE and faster_half_noise(ranks, values) > target:
            return False
    return True
