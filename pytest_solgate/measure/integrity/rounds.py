"""Integrity: timed sampling rounds on new values, their outputs checked.

The output checks (outputs.py) call the kernel themselves, and a kernel can tell those calls from the
timed ones (a trace hook, the stack, the gap since its last call, the values it saw last) and be
honest only there. So a few sampling rounds, chosen at random, are themselves checked: before each
sample of such a round (outside every timed region) new values are written into the timed inputs
(their whole storage, rolled by a random offset, each float times its value's factor, 8-bit integers
drawn anew, made in buffers kept for the measurement); the round is timed exactly like
every other one (the same sampling code, the same stack, no hook); after it, the outputs of its
last timed call are compared with the reference on the values that call got. A result skipped,
partial or served from a cache in a timed call then differs from the reference: ``stale-timed``.

The same rounds tell a cache by time, whatever it is keyed on: a cache keyed on anything the new
values change misses in every sample of such a round, which then takes the honest time, and serves
the other rounds. The fastest of those samples against the others' (their median on the thread's
CPU time, their 9th decile on the timer: ``FACTOR``) names it. Both are read on the backend's timer and, on the CPU, on the calling thread's CPU time of
the same samples: a loaded machine adds its waits to every wall-time sample alike, which hides a
cache saving a fraction of a call, and leaves the thread's CPU time as it was.

These samples stay in the figure: they time the same call on inputs of the same shape. The inputs
get their values back after each such round (the other rounds time the test's own values), and the
output buffers theirs when sampling ends.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from pytest_solgate.measure.backends import OTHER_THREADS_SHARE  # the CPU timer's own rule for a helped thread
from pytest_solgate.measure.integrity import outputs

if TYPE_CHECKING:
    import torch

CHANCE = 0.2  # of a round being one on new values
MIN_FRESH_SAMPLES = 3  # sampling goes on (rounds on new values) until there are this many
MAX_FRESH_ROUNDS = 6  # bounds what the checks add to a long measurement
FACTOR = 1.5  # a kernel that computes in every call takes as long on new values as on the last ones
# On the thread's CPU time, which a loaded machine leaves as it was (the same work reads within a few
# percent across rounds here, beside 15 runnable processes on 2 cores), and over at least two rounds
# (a neighbour's burst of memory traffic slows one round's samples together).
CPU_FACTOR = 1.25
MIN_FRESH_ROUNDS = 2
SLACK_SECONDS = 20e-6
# On the timer the other rounds are read at their 9th decile, not their median: beside a busy
# neighbour a multi-threaded torch call reads 0.3 ms or 8 ms by whether its threads all got a core
# (seen here, one layernorm), and the few samples on new values can all land in the slow mode. A
# cache serves every other round, so its 9th decile stays fast; an honest kernel's is the slow mode.
SPREAD_DECILE = 9
SPREAD_LEVEL = "9th decile"
THREAD_CPU = "thread CPU time"


@dataclass(frozen=True)
class RoundsCheck:
    """The samples of the rounds on new values beside the other rounds' (seconds a call)."""

    timed_seconds: float  # the other rounds' samples at ``level``
    fresh_seconds: float  # the fastest sample of a round on new values
    fresh_samples: int
    clock: str = "timer"  # which reading: the backend's timer, or the thread's CPU time (THREAD_CPU)
    level: str = "median"  # which of the other rounds' samples: their median, or SPREAD_LEVEL on the timer

    @property
    def served(self) -> bool:
        factor = CPU_FACTOR if self.clock == THREAD_CPU else FACTOR
        return self.fresh_seconds > factor * self.timed_seconds + SLACK_SECONDS


def thread_seconds(handle: object, calls: int) -> float | None:
    """The calling thread's CPU seconds a call over a CPU sample (its handle's stamps), where the
    process's other threads did not help; None for another backend's sample."""
    nanoseconds = getattr(handle, "nanoseconds", None)
    if not isinstance(nanoseconds, tuple) or len(nanoseconds) != 3:
        return None
    _, thread, process = nanoseconds
    if not isinstance(thread, (int, float)) or not isinstance(process, (int, float)):
        return None
    if thread <= 0 or process - thread > OTHER_THREADS_SHARE * thread:
        return None
    return thread / 1e9 / max(calls, 1)


class FreshRounds:
    """The rounds on new values of one measurement; the stopping rule calls ``after_round`` and
    ``before_round`` between rounds, ``after_sample`` between samples, and ``restore`` once sampling
    ends. ``rng`` picks the rounds and the factors (the platform's: a kernel cannot predict them)."""

    def __init__(self, checked: outputs.Checked, judge: Callable[[list[object], list[object], int], object | None],
                 rng: random.Random, running: Callable[[], object | None] = lambda: None) -> None:
        self.checked = checked
        self.judge = judge  # (the timed outputs, the inputs the timed calls got, calls since the values) -> Finding
        # what may still write the outputs, read as they are copied (the guard's: work left running)
        self.running = running
        self.running_at_copy: object | None = None
        self.rng = rng
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # (tensor, its values before the first round)
        self.seed, self.written_at = 0, 0  # the seed of the factors written last, and the timed calls before
        self.given = (0, 0)  # the same of the values the last sample of a round on new values got
        self.got: list[object] | None = None  # that sample's outputs, where they live in the inputs (in place)
        self.copies: list[object] | None = None  # the buffers ``got`` is copied into (_copied)
        self.pending = False  # the round running (or just run) is on new values
        self.rounds = 0
        self.seen = 0  # samples already sorted
        self.fresh: list[float] = []  # the samples of the rounds on new values (the backend's timer)
        self.own: list[float] = []  # the samples of the rounds on the test's own values
        self.fresh_cpu: list[float] = []  # the same samples, on the thread's CPU time (the CPU's)
        self.own_cpu: list[float] = []
        import torch
        self.storages: list[torch.Tensor] = outputs.storages_of(checked.changing(checked.args))
        self.scratch = outputs.Scratch()  # new values made in buffers of their own, kept for the measurement
        self.torch = torch

    @property
    def usable(self) -> bool:
        return bool(self.storages)

    def after_sample(self, handle: object, calls: int) -> None:
        """Between two samples (outside the timed regions): the sample's CPU time kept; in a round on
        new values, new ones written for the next sample."""
        seconds = thread_seconds(handle, calls)
        if seconds is not None:
            (self.fresh_cpu if self.pending else self.own_cpu).append(seconds)
        if self.pending:
            self.given = (self.seed, self.written_at)
            # An in-place kernel's result lives in its inputs, which the new values overwrite: kept first.
            last = self.checked.last_outputs()
            written = [outputs.is_tensor(o) and any(outputs.shares_storage(o, flat) for flat in self.storages) for o in last]
            self.running_at_copy = self.running()
            self.got = self._copied(last) if any(written) else None
            self._write_new()

    def _copied(self, last: Sequence[object]) -> list[object]:
        """``last`` copied into buffers kept for the measurement, made at the first sample that needs
        them: made and freed between two timed samples, copies change what the allocator hands the
        next call, as the new values' temporaries did (outputs.Scratch)."""
        kept = self.copies
        if kept is None or len(kept) != len(last) or not all(
                outputs.is_tensor(k) and outputs.is_tensor(v) and (k.shape, k.dtype, k.device) == (v.shape, v.dtype, v.device)
                for k, v in zip(kept, last)):
            self.copies = outputs.clone(list(last))
            return self.copies
        with self.torch.no_grad(), outputs.one_thread():
            for copy, value in zip(kept, last):
                if outputs.is_tensor(copy) and outputs.is_tensor(value):  # (each is, as checked above)
                    copy.copy_(value)
        return kept

    def after_round(self, samples: Sequence[float]) -> object | None:
        """Sort the round's samples; after a round on new values, its timed outputs judged (a Finding or None)."""
        new = list(samples[self.seen:])
        self.seen = len(samples)
        if not self.pending:
            self.own += new
            return None
        self.pending = False
        self.fresh += new  # every sample of the round met values no call had seen
        return self._judge()

    def wants_more(self) -> bool:
        return (len(self.fresh) < MIN_FRESH_SAMPLES or self.rounds < MIN_FRESH_ROUNDS) and self.rounds < MAX_FRESH_ROUNDS

    def before_round(self, forced: bool = False) -> None:
        """Maybe (at random, or ``forced``) make the next round one on new values."""
        if self.rounds >= MAX_FRESH_ROUNDS or not (forced or self.rng.random() < CHANCE):
            return
        if self.saved is None:
            kept = [*self.storages, *self.checked.written()]
            with outputs.one_thread():
                self.saved = [(t, t.detach().clone()) for t in kept]
        self._write_new()
        self.rounds += 1
        self.pending = True

    def _write_new(self) -> None:
        """New values (new factors) into the inputs; the timed calls made so far noted."""
        self.seed, self.written_at = self.rng.getrandbits(63), self.checked.last.calls
        self._write(self.seed)

    def _write(self, seed: int) -> None:
        """The test's values rolled and varied (outputs.write_rolled, from ``seed``): each float element
        times its value's factor (one factor for all would let a homogeneous kernel scale its last result), after
        a roll by a random offset (unrolled, the ratios to the test's values would tell a kernel these
        rounds: it served a kept result in a round's first call)."""
        assert self.saved is not None
        draw = random.Random(seed)
        with self.torch.no_grad():
            for flat, (_, kept) in zip(self.storages, self.saved):
                outputs.write_rolled(flat, kept, draw, self.scratch)
        self.checked.last.renewed = True

    def _judge(self) -> object | None:
        # The values written after the round's last sample were never timed: its last call got the ones before.
        seed, calls = self.given[0], self.checked.last.calls - self.given[1]
        args = list(self.checked.args)
        running = self.running_at_copy if self.got is not None else self.running()
        got = self.got if self.got is not None else outputs.clone(list(self.checked.last_outputs()))
        self.got = None
        self._write(seed)  # the values the round's last call was given (an in-place kernel changed them since)
        try:
            finding = self.judge(got, self.checked.inputs(args), calls)
            # Work still running as the outputs were copied explains what they lack: said first.
            return running if finding is not None and running is not None else finding
        finally:
            # The other rounds time the test's own values (a kernel whose time depends on them is timed on them).
            with self.torch.no_grad(), outputs.one_thread():
                for flat, (_, kept) in zip(self.storages, self.saved or []):
                    flat.copy_(kept)
            self.checked.last.renewed = False

    def restore(self) -> None:
        """The user's tensors get their values back (once sampling ends)."""
        if self.saved is None:
            return
        with self.torch.no_grad(), outputs.one_thread():
            for target, kept in self.saved:
                target.copy_(kept)
        self.saved = None
        self.checked.last.renewed = False

    def timing(self, figure: float) -> RoundsCheck | None:
        """The fastest sample on new values against the others (``figure``, every sample's, when
        there are none): their median on the thread's CPU time where the samples have it, else their
        9th decile on the timer (beyond the noise a busy machine adds): only a figure flattered
        beyond what the new values' samples take is named. The
        thread's CPU time decides alone where it is read: on a busy machine the waits for a core
        land on a few samples, and a round on new values that met them read 1.5x on wall time for
        an honest kernel."""
        if not self.fresh:
            return None
        # Only where every sample on new values has it, and enough others: a multi-threaded kernel's
        # few single-threaded samples are no reading (one read 8x the others beside a neighbour).
        if len(self.fresh_cpu) == len(self.fresh) and len(self.own_cpu) >= MIN_FRESH_SAMPLES:
            return RoundsCheck(statistics.median(self.own_cpu), min(self.fresh_cpu), len(self.fresh_cpu), THREAD_CPU)
        if len(self.own) < 2:
            return RoundsCheck(statistics.median(self.own) if self.own else figure, min(self.fresh), len(self.fresh))
        spread = statistics.quantiles(self.own, n=10, method="inclusive")[SPREAD_DECILE - 1]
        return RoundsCheck(spread, min(self.fresh), len(self.fresh), level=SPREAD_LEVEL)

    def own_figure(self, figure: float) -> float:
        """The median of the rounds on the test's own values (``figure``, every sample's, when there
        are none): what a cache serves the timed values is compared on it."""
        return statistics.median(self.own) if self.own else figure
