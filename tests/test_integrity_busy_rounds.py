"""The timing check of the rounds on new values (measure/integrity/rounds.py) on a busy machine.

Beside a neighbour keeping both cores busy, a multi-threaded torch call reads either about 0.3 ms
(its threads all got a core) or 4-8 ms (one waited), so an honest kernel's few samples on new values
can all land in the slow mode while most of the other rounds' land in the fast one. The samples
below are the shapes read there (an honest torch layernorm, 64 x 1024), handed to the check on the
timer (no thread CPU time: the call's other threads helped)."""

import random

import pytest
import torch

from pytest_solgate.measure.integrity import outputs, rounds


def fresh_rounds():
    x = torch.randn(64)
    checked = outputs.checked_of(torch.relu, (x,), None, torch.relu, None, "t")
    return rounds.FreshRounds(checked, lambda got, inputs, calls: None, random.Random(0))


def timed(own_rounds, fresh_rounds_samples):
    """The check after ``own_rounds`` (on the test's values) then the rounds on new values, in microseconds."""
    check, samples = fresh_rounds(), []
    for own in own_rounds:
        samples += [s * 1e-6 for s in own]
        check.after_round(samples)
    for fresh in fresh_rounds_samples:
        check.before_round(forced=True)
        samples += [s * 1e-6 for s in fresh]
        check.after_round(samples)
    check.restore()
    return check.timing(figure=0.0)


def test_an_honest_call_whose_samples_on_new_values_all_met_a_busy_core_is_not_served():
    # most of the other rounds in the fast mode, the three samples on new values all in the slow one
    own = [[300], [290], [310], [5200], [305], [295], [4100], [300], [6000], [298], [302], [4400]]
    check = timed(own, [[6470], [7100, 6900]])
    assert check is not None and check.level == rounds.SPREAD_LEVEL
    assert not check.served, check  # the median (303 us) would have read 21x


@pytest.mark.parametrize("load", [0, 1])
def test_a_cache_still_reads_served_on_the_timer(load):
    # a cache serves every other round (0.3 ms) but for ``load`` slow samples; new values take 6 ms.
    # (Where over a tenth of the other samples met a busy core, the time cannot tell: the check of the
    # timed calls' outputs on new values still reads a cache keyed on addresses or versions.)
    own = [[300], [290], [310], [305], [295], [300], [298], [302], [301], [299], [300], [303]]
    for i in range(load):
        own[i * 5] = [5000]
    check = timed(own, [[6470], [7100, 6900]])
    assert check is not None and check.served, check
