"""The cache check's decision (measure/integrity/cache.py) on scripted call times: a cache is named
where the fresh calls are slow beside the timed inputs' calls, and a machine that slows down while
the check runs is not read as one."""

from pytest_solgate.measure.integrity import cache

MS = 1e-3


def scripted(times_ms):
    """``time_one`` reading the given times (ms) in turn: the timed inputs' call, then the fresh one."""
    readings = iter(times_ms)
    return lambda call: next(readings) * MS


def check(figure_ms, times_ms):
    return cache.check(figure_ms * MS, timed=lambda: None, fresh=lambda: (lambda: None), time_one=scripted(times_ms))


def test_fresh_calls_far_slower_than_the_timed_inputs_calls_are_a_cache():
    found = check(1.0, [1.0, 12.0, 1.1, 12.5, 1.0, 12.1, 0.9, 11.8, 1.0, 12.2])
    assert found.served and found.calls == 5 and found.slower_pairs == 5


def test_one_fresh_call_that_meets_an_address_cache_does_not_hide_the_others():
    # the second fresh set landed where a freed one lay: its call is as fast as the cached ones
    found = check(1.0, [1.0, 12.0, 1.1, 1.0, 1.0, 12.1, 0.9, 11.8, 1.0, 12.2])
    assert found.served and found.slower_pairs == 4


def test_a_machine_that_slows_down_during_the_check_is_not_a_cache():
    # An honest torch.add returning 32 MiB, as measured on the 2-core VM: 12 ms a call in the first
    # pair, 55 to 65 ms on either inputs from the second fresh call on. The fastest call on the timed
    # inputs (the first) against the fresh calls' median read 4.8x: an accusation before the pairs.
    found = check(13.1, [11.6, 11.3, 12.6, 55.4, 64.8, 60.9, 53.0, 62.6, 54.7, 53.7])
    assert found.fresh_seconds > cache.FACTOR * max(found.timed_seconds, found.same_seconds)
    assert found.slower_pairs == 1 and not found.served


def test_an_honest_kernel_is_not_checked_twice():
    found = check(1.0, [1.0, 1.1, 1.2, 1.0])
    assert not found.served and found.calls == 2
