"""Integrity: timed sampling rounds on new values, their outputs checked.

The output checks (outputs.py) call the kernel themselves, and a kernel can tell those calls from the
timed ones (a trace hook, the stack, the gap since its last call, the values it saw last) and be
honest only there. So a few sampling rounds, chosen at random, are themselves checked: between two
rounds (outside every timed region) new values are written into the timed inputs (their whole
storage, each float scaled by a random factor); the round is timed exactly like every other one
(the same sampling code, the same stack, no hook); after it, the outputs of its last timed call are
compared with the reference on those values. A result skipped, partial or served from a cache in
a timed call then differs from the reference: ``stale-timed``.

The same rounds tell a cache by time: a cache keyed on the inputs' values (or anything the new
values change) misses in the round's first call only, so the first sample of such a round takes the
honest time; a figure far faster than the fastest of those (``FACTOR``) was served from it.

These samples stay in the figure: they time the same call on inputs of the same shape. The inputs
get their values back after each such round (the other rounds time the test's own values), and the
output buffers theirs when sampling ends.
"""

from __future__ import annotations

import os
import random
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pytest_solgate.measure.integrity import outputs

CHANCE = 0.2  # of a round being one on new values
MIN_FRESH_SAMPLES = 3  # sampling goes on (rounds on new values) until there are this many
MAX_FRESH_ROUNDS = 6  # bounds what the checks add to a long measurement
FACTOR = 1.5  # a kernel that computes in every call takes as long on new values as on the last ones
SLACK_SECONDS = 20e-6
SCALES = (0.75, 0.8, 0.9, 1.1, 1.2, 1.25)


@dataclass(frozen=True)
class RoundsCheck:
    """The samples of the rounds on new values beside the other rounds' (seconds a call)."""

    timed_seconds: float  # the measurement's figure (the median of every sample, these included)
    fresh_seconds: float  # the fastest first sample of a round on new values
    fresh_samples: int

    @property
    def served(self) -> bool:
        return self.fresh_seconds > FACTOR * self.timed_seconds + SLACK_SECONDS


class FreshRounds:
    """The rounds on new values of one measurement; the stopping rule calls ``after_round`` and
    ``before_round`` between rounds, and ``restore`` once sampling ends."""

    def __init__(self, checked: outputs.Checked, judge: Callable[[list[Any], list[Any], int], Any],
                 rng: random.Random | None = None) -> None:
        self.checked = checked
        self.judge = judge  # (the timed outputs, the inputs the timed calls got, calls since the values) -> Finding
        self.rng = rng or random.Random(os.urandom(8))  # a kernel cannot predict which rounds
        self.storages: list[Any] = []
        self.saved: list[tuple[Any, Any]] | None = None  # (tensor, its values before the first round)
        self.scale = 1.0
        self.pending = False  # the round that just ran was on new values
        self.rounds = 0
        self.seen = 0  # samples already sorted
        self.calls_at_write = 0
        self.fresh: list[float] = []
        self.own: list[float] = []  # the samples of the rounds on the test's own values
        import torch
        found: dict[tuple[int, Any], Any] = {}
        for tensor in outputs.tensors_in(checked.inputs(list(checked.args))):
            if outputs.changes(tensor) and tensor.untyped_storage().nbytes():
                found.setdefault((tensor.untyped_storage().data_ptr(), tensor.dtype), outputs.whole_storage(tensor))
        self.storages = list(found.values())
        self.torch = torch

    @property
    def usable(self) -> bool:
        return bool(self.storages)

    def after_round(self, samples: Sequence[float]) -> Any:
        """Sort the round's samples; after a round on new values, its timed outputs judged (a Finding or None)."""
        new = list(samples[self.seen:])
        self.seen = len(samples)
        if not self.pending:
            self.own += new
            return None
        self.pending = False
        # The round's first sample only: a cache keyed on the values misses there, and serves the rest.
        self.fresh += new[:1]
        return self._judge()

    def wants_more(self) -> bool:
        return len(self.fresh) < MIN_FRESH_SAMPLES and self.rounds < MAX_FRESH_ROUNDS

    def before_round(self, forced: bool = False) -> None:
        """Maybe (at random, or ``forced``) write new values for the next round."""
        if self.rounds >= MAX_FRESH_ROUNDS or not (forced or self.rng.random() < CHANCE):
            return
        torch = self.torch
        with torch.no_grad():
            if self.saved is None:
                kept = [*self.storages, *(self.checked.args[i] for i in self.checked.outputs)]
                self.saved = [(t, t.detach().clone()) for t in kept]
            self.scale = self.rng.choice([s for s in SCALES if s != self.scale])
            self._write()
        self.rounds += 1
        self.pending = True
        self.calls_at_write = self.checked.last[1]

    def _write(self) -> None:
        assert self.saved is not None
        for flat, (_, kept) in zip(self.storages, self.saved):
            self.torch.mul(kept, self.scale, out=flat)

    def _judge(self) -> Any:
        calls = self.checked.last[1] - self.calls_at_write
        args = list(self.checked.args)
        got = outputs.clone(list(self.checked.last_outputs()))
        with self.torch.no_grad():
            self._write()  # the values the round's calls were given (an in-place kernel changed them since)
        try:
            return self.judge(got, self.checked.inputs(args), calls)
        finally:
            # The other rounds time the test's own values (a kernel whose time depends on them is timed on them).
            with self.torch.no_grad():
                for flat, (_, kept) in zip(self.storages, self.saved or []):
                    flat.copy_(kept)

    def restore(self) -> None:
        """The user's tensors get their values back (once sampling ends)."""
        if self.saved is None:
            return
        with self.torch.no_grad():
            for target, kept in self.saved:
                target.copy_(kept)
        self.saved = None

    def own_figure(self, figure: float) -> float:
        """The median of the rounds on the test's own values (``figure``, every sample's, when there
        are none): what a cache serves the timed values is compared on it, whatever share of the
        samples the rounds on new values took."""
        return statistics.median(self.own) if self.own else figure

    def timing(self, timed_seconds: float) -> RoundsCheck | None:
        """The fastest first sample on new values against the figure: a figure that those samples
        outweigh is no faster than they are, and only a flattering one is named."""
        return RoundsCheck(timed_seconds, min(self.fresh), len(self.fresh)) if self.fresh else None
