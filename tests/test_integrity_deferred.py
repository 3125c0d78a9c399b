"""What a call may leave set that runs code on the measuring thread after the timer stopped
(measure/integrity/deferred.py), read as it changes: the catalogue (tests/test_cheats.py) has the
torch modes, a swapped output class and a profile function; these are the rest."""

import signal
import threading

import torch

from pytest_solgate.measure.integrity import deferred


def test_a_timer_signal_handler_or_an_armed_interval_timer_is_named_and_taken_back_is_not():
    before = deferred.read([])
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        said = deferred.left(before, deferred.read([]))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert said == ("a handler of SIGALRM", "an interval timer (real)"), said
    assert deferred.left(before, deferred.read([])) == ()


def test_a_trace_function_for_new_threads_and_a_tensors_class_are_named():
    x = torch.zeros(4)
    before = deferred.read([x])

    class Lazy(torch.Tensor):
        pass

    threading.settrace(lambda *_: None)
    x.__class__ = Lazy
    try:
        said = deferred.left(before, deferred.read([x]))
    finally:
        threading.settrace(None)
    assert said == ("a trace function for new threads (threading.settrace)",
                    "args' tensor 0 made a Lazy (it was a Tensor)"), said
