"""Score (a whole step): pure arithmetic from a profiled step and a HardwareProfile to where its time
went, and what each operator loses against its speed of light.

Every time is a mean over the same runs: the faster half of the profiled runs, ranked by step time,
a run in which an operator stalled ranked after every run in which none did (step_profile.run_ranks).
A run the machine stalled is left out (on a shared CPU a preempted thread adds a scheduler quantum,
milliseconds, to whichever operator was running), even where the stall is smaller than the spread of
the step's larger operators; what is kept is what the step does when the machine lets it. For each (operator, module) group, from its time and its counted work:

    T_SOL = max(bytes / memory_bandwidth, max_p flops[p] / peak_flops[p])   (as for one kernel)
    SOL   = T_SOL / time
    lost  = time - T_SOL                                                     (what fixing it can win)

For the step: its time is that mean; its T_SOL is the sum of its operators' (they
run one after another on one stream: the step's floor is theirs in sequence); its MFU is its FLOPs in
its main precision class (the one whose FLOPs take longest at their peak) over time x that peak;
idle is the part of the step no operator covers. They add up:

    sum(lost) + idle - overlap + carried in = time - T_SOL

for each run, as the profiler's readings give it (idle is read from the gaps, not taken as the
remainder), and so for the means over the same runs; ``identity_gap`` says how far it is off, as a
share of the step: a reading that counted an operator twice or missed one shows there. ``overlap``
is time counted twice on purpose (device activities at once, on two streams or on one: a kernel may
start before the one ahead of it on its stream ends). ``carried in`` is device time inside the step
that is not its own (a recorded trace's kernels of an earlier step, or launched before the trace
began): it covers the step, so it is not idle, and no operator of the step owns it. No torch, no pytest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_solgate.declare.profiles import HardwareProfile
from pytest_solgate.declare.work import Work
from pytest_solgate.measure.step_profile import Rank, RunReading, StepProfile, faster_half_noise, run_ranks
from pytest_solgate.support import stats

IDLE = "idle"
DRAM = "DRAM"  # the level past the last cache
# The classes the report's bar shows, in its order (idle last).
CLASSES = ("matmul", "attention", "normalization", "elementwise", "copies")
_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "einsum",
           "tensordot", "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose2d",
           "_scaled_mm", "_int_mm", "cudnn_convolution", "mkldnn_convolution"}
_NORMALIZATION = {"softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "native_layer_norm",
                  "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm", "batch_norm",
                  "native_batch_norm", "_native_batch_norm_legit", "instance_norm"}
_COPIES = {"copy_", "to", "_to_copy", "clone", "contiguous", "cat", "stack", "constant_pad_nd", "pad",
           "repeat", "index_select", "narrow_copy", "memcpy", "view", "reshape", "_unsafe_view", "transpose",
           "permute", "t", "chunk", "split", "slice", "select", "expand", "unsqueeze", "squeeze", "flatten",
           "unbind", "as_strided", "detach", "alias", "lift_fresh", "empty", "zeros", "ones", "empty_like",
           "zeros_like", "fill_", "zero_"}


def operator_class(operator: str) -> str:
    """The class of an operator, for the report's bar: ``aten::addmm`` -> matmul, ``aten::_softmax``
    -> normalization (a softmax is a row normalization, memory-bound like a norm),
    ``AddmmBackward0`` (a backward node) -> matmul; every other op is elementwise."""
    base = operator.split("::")[-1].split(".")[0]
    backward = re.fullmatch(r"(\w+?)Backward\d*", base)
    if backward:
        base = re.sub(r"(?<!^)(?=[A-Z])", "_", backward.group(1)).lower()  # NativeLayerNorm -> native_layer_norm
    base = re.sub(r"_backward(_data|_input|_weight)?$", "", base.lower())  # cudnn_convolution_backward: a convolution's
    if "attention" in base or base.startswith(("_flash", "_efficient", "_cudnn_attention")):
        return "attention"
    if base in _MATMUL or base.startswith("conv"):
        return "matmul"
    if base in _NORMALIZATION or base.endswith("_norm"):
        return "normalization"
    if base in _COPIES or "copy" in base:
        return "copies"
    return "elementwise"


@dataclass(frozen=True)
class OperatorScore:
    """One (operator, module) group of a step: its median time per step, counted work, floor, loss."""

    operator: str  # e.g. "aten::softmax", or a backward node "SoftmaxBackward0"
    module: str  # e.g. "Block.attn"; "" outside any nn.Module
    kind: str  # its class (CLASSES)
    calls: int  # per step
    seconds: float  # mean over the faster runs (faster_runs)
    samples: tuple[float, ...]  # its time in each run, all of them
    flops: Mapping[str, float]
    bytes: float
    t_sol: float
    sol: float
    lost: float  # seconds - t_sol
    bound: str  # "memory" or "compute"
    level: str = DRAM  # the memory level its bytes are held against ("L1", "L2", "L3", "DRAM")
    noise: float = math.inf  # relative 95 % half-width of ``seconds`` (measure/step_profile.py: faster_half_noise)

    @property
    def label(self) -> str:
        return f"{self.operator} in {self.module}" if self.module else self.operator

    @property
    def floor(self) -> str:
        """The roof its T_SOL is taken against, as the row names it: "compute-bound", "L2-bound", "DRAM-bound"."""
        return "compute-bound" if self.bound == "compute" else f"{self.level}-bound"

    def to_dict(self) -> dict[str, object]:
        return {"operator": self.operator, "module": self.module, "kind": self.kind, "calls": self.calls,
                "seconds": self.seconds, "samples": list(self.samples), "flops": dict(self.flops),
                "bytes": self.bytes, "t_sol": self.t_sol, "sol": self.sol, "lost": self.lost, "bound": self.bound,
                "level": self.level, "floor": self.floor, "noise": self.noise if math.isfinite(self.noise) else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OperatorScore":
        """``class`` is read where an earlier record wrote it for ``kind``. (Any: the record's JSON, read as
        written; a field of the wrong kind raises, and results_json reads that as "not a step's breakdown".)"""
        noise = data.get("noise")
        return cls(operator=data["operator"], module=data.get("module") or "",
                   kind=data.get("kind") or data.get("class") or "elementwise",
                   calls=data.get("calls") or 0, seconds=data["seconds"], samples=tuple(data.get("samples") or ()),
                   flops=dict(data.get("flops") or {}), bytes=data.get("bytes") or 0.0, t_sol=data.get("t_sol") or 0.0,
                   sol=data.get("sol") or 0.0, lost=data.get("lost") or 0.0, bound=data.get("bound") or "memory",
                   level=data.get("level") or DRAM, noise=math.inf if noise is None else float(noise))


@dataclass(frozen=True)
class StepBreakdown:
    """Where a step's time went: its totals, and its operators ranked by time lost (largest first)."""

    seconds: float  # mean step time over the faster runs (faster_runs)
    t_sol: float  # sum of the operators' T_SOL
    flops: Mapping[str, float]  # the step's FLOPs by precision (declared, else counted)
    bytes: float  # the bytes its operators' kernels read and write (declared, else counted)
    mfu: float
    precision: str | None  # the main precision class, whose peak MFU is taken against
    idle: float  # mean seconds no operator covers
    overlap: float  # mean seconds counted twice (device activities at once)
    operators: tuple[OperatorScore, ...]
    runs: int  # profiled
    mode: str  # "profiler-cpu" or "profiler-kernels"
    kept: int = 0  # the faster runs the figures are means over
    declared: bool = False  # the FLOPs or bytes were declared, not counted
    notes: tuple[str, ...] = field(default_factory=tuple)
    noise: float = math.inf  # relative 95 % half-width of ``seconds`` (measure/step_profile.py: faster_half_noise)
    carried_in: float = 0.0  # mean seconds of device time in the step that is not its own

    @property
    def idle_share(self) -> float:
        return self.idle / self.seconds if self.seconds > 0 else 0.0

    @property
    def lost(self) -> float:
        """The operators' lost time, all together."""
        return sum(op.lost for op in self.operators)

    @property
    def identity_gap(self) -> float:
        """(sum(lost) + idle - overlap) - (time - T_SOL), as a share of the step: 0 to rounding when
        the profiler's readings account for every operator once."""
        if self.seconds <= 0:
            return 0.0
        return (self.lost + self.idle - self.overlap + self.carried_in - (self.seconds - self.t_sol)) / self.seconds

    def by_class(self) -> dict[str, float]:
        """Seconds per operator class, then idle: the report's bar (every class, even at 0)."""
        spent = {kind: 0.0 for kind in CLASSES}
        for op in self.operators:
            spent[op.kind] = spent.get(op.kind, 0.0) + op.seconds
        spent[IDLE] = self.idle
        return spent

    def to_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "t_sol": self.t_sol, "flops": dict(self.flops), "bytes": self.bytes,
                "mfu": self.mfu, "precision": self.precision, "idle": self.idle, "idle_share": self.idle_share,
                "overlap": self.overlap, "carried_in": self.carried_in, "lost": self.lost, "identity_gap": self.identity_gap, "runs": self.runs,
                "kept": self.kept,
                "mode": self.mode, "declared": self.declared, "by_class": self.by_class(), "notes": list(self.notes),
                "noise": self.noise if math.isfinite(self.noise) else None,
                "operators": [op.to_dict() for op in self.operators]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StepBreakdown":
        """The derived fields (idle_share, lost, identity_gap, by_class) are computed again, not read.
        (Any: as OperatorScore.from_dict.)"""
        return cls(seconds=data["seconds"], t_sol=data.get("t_sol") or 0.0, flops=dict(data.get("flops") or {}),
                   bytes=data.get("bytes") or 0.0, mfu=data.get("mfu") or 0.0, precision=data.get("precision"),
                   idle=data.get("idle") or 0.0, overlap=data.get("overlap") or 0.0,
                   carried_in=data.get("carried_in") or 0.0,
                   operators=tuple(OperatorScore.from_dict(op) for op in data.get("operators") or ()),
                   runs=data.get("runs") or 0, kept=data.get("kept") or 0, mode=data.get("mode") or "", declared=bool(data.get("declared")),
                   notes=tuple(data.get("notes") or ()),
                   noise=math.inf if data.get("noise") is None else float(data["noise"]))


def memory_level(working_set: float, profile: HardwareProfile) -> tuple[str, float]:
    """The level a working set of ``working_set`` bytes fits in when the step runs warm (the
    smallest cache at least that large; DRAM beyond the last), and the bandwidth held against it
    (bytes/s): that level's, or a larger level's where that is higher (a few-KiB torch call is mostly
    dispatch, so a small level can measure slower than the next), never under DRAM's."""
    fits = [cache for cache in profile.caches if working_set <= cache.size_bytes]  # smallest first
    if not fits:
        return DRAM, profile.memory_bandwidth
    return fits[0].name, max([profile.memory_bandwidth] + [cache.bandwidth for cache in fits])


def operator_floor(flops: Mapping[str, float], nbytes: float, profile: HardwareProfile, calls: int = 1
                   ) -> tuple[float, str, list[str], str]:
    """T_SOL and bound of one operator's counted work, the precisions left out (no roof on the
    profile), and the memory level its bytes are held against: the one each call's working set
    (its bytes over its calls) fits in (``memory_level``; DRAM when the profile has no caches)."""
    missing = [p for p in flops if p not in profile.peak_tflops]
    compute = max((count / profile.peak_flops(p) for p, count in flops.items() if p not in missing), default=0.0)
    level, bandwidth = memory_level(nbytes / max(calls, 1), profile)
    memory = nbytes / bandwidth
    return max(memory, compute), ("memory" if memory >= compute else "compute"), missing, level


def main_precision(flops: Mapping[str, float], profile: HardwareProfile) -> str | None:
    """The precision class whose FLOPs take longest at their peak: MFU is taken against its peak."""
    timed = {p: n / profile.peak_flops(p) for p, n in flops.items() if p in profile.peak_tflops and n > 0}
    return max(timed, key=timed.__getitem__) if timed else None


def faster_runs(runs: Sequence[RunReading], ranks: Sequence[Rank]) -> list[RunReading]:
    """The first half of the runs by ``ranks`` (at least one; ``run_ranks``: the faster half by step
    time, a run in which an operator stalled after every run in which none did): every figure of the
    step is a mean over these same runs, so that the figures add up as each run's do."""
    ordered = sorted(range(len(runs)), key=lambda index: ranks[index])
    return [runs[index] for index in ordered[:max(1, (len(ordered) + 1) // 2)]]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def score_step(measured: StepProfile, profile: HardwareProfile, declared: Work | None = None) -> StepBreakdown:
    """The breakdown of a profiled step on ``profile``. ``declared`` work (``flops=``/``bytes=``)
    replaces the counted totals of the step (its MFU); the operators keep their counted work."""
    runs = measured.runs
    if not runs:
        raise ValueError("a step needs at least one profiled run")
    ranks = run_ranks(runs)  # the order the kept runs are taken in, and each figure's noise
    kept = faster_runs(runs, ranks)
    keys = sorted({key for run in runs for key in run.operators})
    operators, notes, left_out = [], list(measured.notes), set()
    step_samples = [run.seconds for run in runs]
    for key in keys:
        samples = tuple(run.operators.get(key, 0.0) for run in runs)
        seconds = _mean([run.operators.get(key, 0.0) for run in kept])
        work = measured.work.get(key)
        flops, nbytes = (dict(work.flops), work.bytes) if work is not None else ({}, 0.0)
        calls = round(stats.median([run.calls.get(key, 0) for run in kept]))
        t_sol, bound, missing, level = operator_floor(flops, nbytes, profile, calls)
        left_out.update(missing)
        operators.append(OperatorScore(
            operator=key[0], module=key[1], kind=operator_class(key[0]),
            calls=calls, seconds=seconds, samples=samples,
            flops=flops, bytes=nbytes, t_sol=t_sol, sol=t_sol / seconds if seconds > 0 else 0.0,
            lost=seconds - t_sol, bound=bound, level=level, noise=faster_half_noise(ranks, samples),
        ))
    if left_out:
        notes.append(f"FLOPs in {', '.join(sorted(left_out))} left out of the operators' T_SOL: profile "
                     f"'{profile.id}' has no roof for them")
    operators.sort(key=lambda op: (-op.lost, op.operator, op.module))
    seconds = _mean([run.seconds for run in kept])
    counted_flops: dict[str, float] = {}
    for op in operators:
        for flop_class, count in op.flops.items():
            counted_flops[flop_class] = counted_flops.get(flop_class, 0.0) + count
    flops = dict(declared.flops) if declared is not None and declared.flops else counted_flops
    nbytes = declared.bytes if declared is not None and declared.bytes else sum(op.bytes for op in operators)
    precision = main_precision(flops, profile)
    mfu = flops[precision] / (seconds * profile.peak_flops(precision)) if precision and seconds > 0 else 0.0
    return StepBreakdown(
        seconds=seconds, t_sol=sum(op.t_sol for op in operators), flops=flops, bytes=nbytes, mfu=mfu,
        precision=precision, idle=_mean([run.idle for run in kept]), overlap=_mean([run.overlap for run in kept]),
        operators=tuple(operators), runs=len(runs), kept=len(kept),
        mode=measured.mode, declared=declared is not None, notes=tuple(notes),
        noise=faster_half_noise(ranks, step_samples), carried_in=_mean([run.carried_in for run in kept]),
    )
