"""Judge (words only): the one line that names what the integrity checks found (measure/integrity/).

Each line says the measurement, the cause in a few words first (what a reviewer searches for),
what was seen, and what an honest kernel does instead.
"""

from __future__ import annotations

from pytest_solgate.measure.integrity import cache, deferred, outputs, rounds, tampering
from pytest_solgate.measure.integrity.guard import Breach, LeftRunning, NoInputs, Tampered


def _share(count: int, total: int) -> str:
    return f"{count} of {total} elements" if total else f"{count} elements"


# cause -> its words, formatted with the finding's fields, ``where`` and ``share``
WORDS = {
    outputs.LAZY: ("lazy result: {output} is a {type_name}, not a torch.Tensor ({when}); return the computed tensor "
                   "itself, not a subclass or proxy that computes when read"),
    outputs.ALIASED: ("aliased result: {output} shares storage with input {count} ({when}) and does not hold the "
                      "reference's result on that input's values before the call (an input handed back, or a kept "
                      "result); compute the result in every call (in place is fine)"),
    outputs.UNWRITTEN: ("unwritten output: {share} of {where} still hold the poison written before the call; the "
                        "kernel must write every element (a grid too small, a missed tail?)"),
    outputs.STALE: ("stale result: {where} did not change when its inputs changed: a cached, stale or precomputed "
                    "result, not one computed from the inputs of the call"),
    outputs.STALE_TIMED: ("stale result in a timed call: {share} of {output} differ from the reference by up to "
                          "{error:.3g} (relative) after new values were written between timed calls ({when}): the timed "
                          "calls skipped work, did part of it or served a kept result; compute it in every call"),
    outputs.UNWAITED_COPY: ("unwaited copy: {share} of {where} were written only after the device was waited for: a "
                            "copy to the host still in flight when the call returned; wait for it in the call"),
    outputs.LOWER_PRECISION: ("lower precision: {where} holds only half-precision values, off by {error:.3g} "
                              "(relative), over the {allowed:.3g} the declared precision allows ({share}); declare the "
                              "precision it computes in, or compute in the declared one"),
    outputs.NO_RESULT: ("no result to check: the kernel returned None and outputs= names no buffer it writes; "
                        "name them (e.g. sol.measure(add, args=(x, y, out), outputs=2, ...))"),
    outputs.SHAPE: ("wrong shape: {where} has shape {shapes[0]}, the reference's result shape {shapes[1]}; return the "
                    "result in the reference's shape (or fix the reference)"),
    outputs.WRITTEN_LATER: ("work left running: {share} of {where} were written after the call returned, by a thread or "
                            "process it left running; join threads and wait for processes before returning"),
    outputs.REFERENCE_CHANGED: ("tampered reference: sol.measure's reference= was changed after it was handed (the "
                                "function, its code, defaults or closure, or the checks' record of it), seen {when}; "
                                "leave the test's reference alone"),
    outputs.WRONG: ("wrong result: {where} differs from the reference by {error:.3g} (relative), over the "
                    "{allowed:.3g} allowed ({share}); a kernel right only for inputs that new values break (sorted "
                    "boundaries) names them in keep="),
}
# The mantissa bits of a finding's tolerance (measure/integrity/precision.py), named as a test declares them.
PRECISION_NAMES = {53: "fp64", 24: "fp32", 11: "fp16 or tf32", 8: "bf16"}
OPERATORS = ("lower precision: declared {precision} but the call ran {operators}; declare the precision it "
             "computes in (precision= or flops={{...}}), or compute in the declared one")


def _finding(found: outputs.Finding) -> str:
    fields = dict(vars(found), where=f"{found.output} on {found.storage} ({found.when})",
                  share=_share(found.count, found.total), operators=", ".join(found.operators[:3]),
                  precision=PRECISION_NAMES.get(found.bits, f"{found.bits}-bit mantissas"))
    template = OPERATORS if found.operators else WORDS.get(found.cause, WORDS[outputs.WRONG])
    return template.format(**fields)


def line(test: str, name: str, breach: Breach) -> str:
    """The one line of a breach (the measurement fails with it)."""
    label = f"{test} '{name}'"
    if isinstance(breach, outputs.Finding):
        return f"{label}: {_finding(breach)}"
    if isinstance(breach, Tampered):
        return (f"{label}: tampered timing: {', '.join(breach.names)} replaced {breach.when}; the code under test "
                "must not patch the clocks, torch.cuda's events or synchronize, or the plugin's functions")
    if isinstance(breach, tampering.ReplacedTorch):
        named = [f"{name} (by {by})" for name, by in zip(breach.names, breach.by)]
        return (f"{label}: tampered reference: {', '.join(named[:3])} replaced before the measurement; the reference= "
                "must be computed by the real torch: the code under test must not patch torch")
    if isinstance(breach, LeftRunning):
        running = [f"thread '{t.name}'" + (f" at {t.where}" if t.where else "") for t in breach.threads]
        running += [f"child process {p.pid}" + (f" ({p.command})" if p.command else "") for p in breach.processes]
        return (f"{label}: work left running {breach.when}: {'; '.join(running[:3])} still ran after the call "
                "returned, outside the timed region; join threads and wait for processes before returning")
    if isinstance(breach, deferred.LeftHooks):
        return (f"{label}: work deferred past the timer: {'; '.join(breach.hooks[:3])} ({breach.when}); code they run "
                "after a call returned is not timed: the kernel must undo what it set before it returns")
    if isinstance(breach, tampering.ClockCheck):
        return (f"{label}: timer disagrees with a second clock: the timer read {breach.timer_seconds * 1e6:.3g} us a call, "
                f"the {breach.clock} saved at start-up {breach.real_seconds * 1e6:.3g} us; the timer was faked")
    if isinstance(breach, cache.CacheCheck):
        return (f"{label}: served from a cache: the timed calls read {breach.timed_seconds * 1e6:.3g} us a call, the same "
                f"call {breach.same_seconds * 1e6:.3g} us on the timed inputs and {breach.fresh_seconds * 1e6:.3g} us on fresh "
                f"ones (the fastest and the median of {breach.calls} each): the timed calls got a result kept from before (by address, "
                "version, values, or computed for these inputs); compute it in every call")
    if isinstance(breach, rounds.RoundsCheck):
        return (f"{label}: served from a cache: timed rounds on new input values read {breach.fresh_seconds * 1e6:.3g} us "
                f"a call at the fastest (of {breach.fresh_samples}), the other rounds {breach.timed_seconds * 1e6:.3g} us "
                f"(their {breach.level}; {breach.clock}): the timed calls got a result kept from before (by values, address or version, or "
                "computed for these inputs) or skipped work; compute it in every call")
    if isinstance(breach, NoInputs):
        return (f"{label}: no inputs to check under --sol-integrity=strict: hand them with "
                "sol.measure(kernel, args=(x, y, out), outputs=(2,), reference=torch.add) (docs/integrity.md)")
    return f"{label}: integrity check failed: {breach!r}"
