"""Judge (words only): the message of one measurement's verdict (``verdict.judge``, ``confirm``,
``against_reference``), from its record and the figures the verdict decided on. The comparison
against a baseline window is worded in wording.py, whose first-line helpers these share.
"""

from __future__ import annotations

from pytest_solgate.judge.wording import headline, label
from pytest_solgate.results import Measurement
from pytest_solgate.score.step_breakdown import StepBreakdown
from pytest_solgate.support import units


def describe(m: Measurement) -> str:
    """'2.38 TB/s of 3.35 TB/s (memory-bound)' from a scored measurement and its ceilings; the
    declared FLOPs' rate follows a memory-bound one, by class: '; 14.2 TFLOP/s fp16_tensor'."""
    scored = m.score
    if m.step is not None:
        return _describe_step(m.step, m.score.gbps)
    if scored.bound == "memory":
        ceiling = m.work.bytes / scored.t_sol / 1e9 if scored.t_sol > 0 else 0
        flops = f"; {units.flop_rate(scored.tflops)} {'+'.join(m.work.flops)}" if m.work.total_flops else ""
        return f"{units.bandwidth(scored.gbps)} of {units.bandwidth(ceiling)} (memory-bound{flops})"
    ceiling = m.work.total_flops / scored.t_sol / 1e12 if scored.t_sol > 0 else 0
    classes = f" {'+'.join(m.work.flops)}" if m.work.flops else ""
    return f"{units.flop_rate(scored.tflops)} of {units.flop_rate(ceiling)}{classes} (compute-bound)"


def _describe_step(step: StepBreakdown, gbps: float) -> str:
    """A whole step's rate against its main precision's peak, as its MFU is: a step's T_SOL is the sum
    of its operators' floors, some compute-bound, some memory-bound, so the FLOP rate that T_SOL
    implies is a blend of roofs that is no peak of the device (it read '285 MFLOP/s of 885 MFLOP/s'
    on a 1 GFLOP/s profile beside an MFU of 28.5 %)."""
    floors = "T_SOL the sum of its operators' floors"
    if step.precision and step.mfu > 0 and step.seconds > 0:
        rate = step.flops[step.precision] / step.seconds / 1e12
        return (f"{units.flop_rate(rate)} of the {units.flop_rate(rate / step.mfu)} {step.precision} peak "
                f"(MFU {units.percent(step.mfu)}); {floors}")
    return f"{units.bandwidth(gbps)} over its operators' kernels, no FLOPs counted; {floors}"


def dram_phrase(m: Measurement, ratio: float | None) -> str:
    """'Nsight Compute measured 1.07 GB of DRAM traffic, 1.60x the 671 MB declared', or '' without
    a ratio (``verdict.dram_ratio``)."""
    if ratio is None or m.measured_bytes is None:
        return ""
    return (f"Nsight Compute measured {units.count(m.measured_bytes)}B of DRAM traffic for one call, "
            f"{ratio:.2f}x the {units.count(m.work.bytes)}B declared")


NOISY = "noisy"  # the time budget ran out before the noise target: said once per session (report/terminal.py)


def timing_phrase(m: Measurement) -> str:
    timing = m.timing
    phrase = f"median {units.seconds(timing.seconds)} {units.noise(timing.noise)} over {units.plural(len(timing.samples), 'sample')}"
    if timing.noisy:
        phrase += f" ({NOISY})"
    if timing.throttled:
        phrase += " (throttled: clocks fell or a power/thermal limit was hit)"
    return phrase


NOT_JUDGED = "gate=False: recorded for reference, not judged"
INTERPRETED = "TRITON_INTERPRET=1: the Triton interpreter's timings mean nothing"
GATE_OFF = "--sol-gate=off"
CHECK_DECLARED = "check the declared bytes/flops and the profile's ceilings, or whether the cache served the data"


def _facts(m: Measurement) -> str:
    return f"  on {m.profile}: {describe(m)}, {timing_phrase(m)}"


def impossible_reference(m: Measurement, limit: float) -> str:
    return (f"{NOT_JUDGED}\n  note: SOL {units.sol(m.score.sol)} > {limit} on {m.profile} is impossible: {describe(m)}; "
            f"{CHECK_DECLARED}")


def above_sol(m: Measurement, limit: float, ratio: float | None, fitting: tuple[str, float] | None = None) -> str:
    """``fitting``: the tensor-core class the declared FLOPs fit, and the SOL they read there
    (``verdict.fitting_class``)."""
    if ratio is not None and ratio < 1:
        why = f"{dram_phrase(m, ratio)}: the cache served the rest of the data (give each call cold inputs: rotating buffer sets)"
    elif ratio is not None:
        why = f"{dram_phrase(m, ratio)}, so the data did come from DRAM: check the profile's bandwidth and peak ceilings"
    else:
        why = CHECK_DECLARED
    if fitting is not None:
        declared = m.score.dominant_precision or "the declared class"
        why = (f"its {declared} FLOPs fit {fitting[0]} (SOL {units.sol(fitting[1])} there): if it runs on the tensor "
               f"cores, declare flops={{'{fitting[0]}': ...}}\n  else {why}")
    head = headline("", label(m), f" SOL {units.sol(m.score.sol)} > {limit} is impossible")
    return f"{head}\n  on {m.profile}: {describe(m)}\n  {why}"


def below_min(m: Measurement, min_sol: float, excess_ratio: float | None, plain_on_cpu: bool = False) -> str:
    """``excess_ratio``: the DRAM ratio when the kernel moves more than it declares, else None."""
    moved = (f"\n  min={min_sol:g} is a plain number, so it applies on every profile, this CPU's too: to gate GPUs "
             f"only, write min={{'h100*': {min_sol:g}}} (one glob per GPU profile)") if plain_on_cpu else ""
    if excess_ratio is not None:
        moved += (f"\n  it moves more than it declares: {dram_phrase(m, excess_ratio)}, so the traffic beyond the fused "
                  "minimum (re-reads, spills, an unfused intermediate) costs it time")
    head = headline("", label(m), f" SOL {units.sol(m.score.sol)} < budget {units.sol(min_sol)}")
    return f"{head}\n{_facts(m)}{moved}"


def mfu_without_flops(m: Measurement, min_mfu: float) -> str:
    head = headline("", label(m), f" has an MFU budget of {units.sol(min_mfu)} but declares no FLOPs")
    return (f"{head}\n  so its MFU on {m.profile} is 0 (count_flops counts pointwise ops, softmax and norms as 0): "
            "pass flops= or drop mfu= from the marker")


def below_mfu(m: Measurement, min_mfu: float) -> str:
    head = headline("", label(m), f" MFU {units.sol(m.score.mfu)} < budget {units.sol(min_mfu)}")
    return f"{head}\n{_facts(m)}"


def no_budget(m: Measurement, unmatched: tuple[str, ...], saved: bool = True, busy_on_wall: bool = False) -> str:
    kept = ("recorded, a baseline only for later runs as busy (timed on wall time while the machine was busy)"
            if saved and busy_on_wall else "recorded as a baseline for later runs" if saved
            else "not recorded (--sol-no-save), so no later run is compared with it")
    if unmatched:
        return (f"no budget on {m.profile} and no baseline: {kept}\n  the marker's "
                f"{' and '.join(f'{k}=' for k in unmatched)} globs match other profiles only")
    return f"no budget for {m.profile} and no baseline: {kept}"


def passed(m: Measurement, comparison: str | None) -> str:
    """A pass: the comparison's short first line leads when there was one; the measurement's facts follow."""
    if comparison is not None:
        return f"{comparison}\n{_facts(m)}"
    return f"{headline('', label(m), f' SOL {units.sol(m.score.sol)}')}\n{_facts(m)}"


def confirmed(reason: str, first: Measurement, second: Measurement) -> str:
    return f"{reason}; confirmed by a re-measurement (SOL {units.sol_fine(first.score.sol)}, then {units.sol_fine(second.score.sol)})"


def not_confirmed(first: Measurement, second: Measurement) -> str:
    return (f"a first block of samples read SOL {units.sol_fine(first.score.sol)} (a suspected regression); "
            f"the re-measurement read {units.sol_fine(second.score.sol)} and did not confirm it")


def speedup(m: Measurement, reference: Measurement, achieved: float, required: float) -> str:
    head = headline("", label(m), f" is {achieved:.3g}x as fast as '{reference.name}'")
    return (f"{head}\n  budget {required:g}x on {m.profile}, median {units.seconds(m.timing.seconds)} vs "
            f"{units.seconds(reference.timing.seconds)}")


def speedup_within_noise(text: str, noise: float) -> str:
    return f"{text}: short by less than the medians' noise (±{noise:.1%}); measure longer"
