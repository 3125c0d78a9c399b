"""The catalogue of ways a kernel fools a benchmark (issue 42; KernelArena's field guide, Makora's
taxonomy, pygpubench's exploits), each written as a user would write its test, each caught with
its cause named in one line; and the honest kernels beside them, which raise nothing.

The CPU cases run in one pytester session on the fake clock (each kernel also spends a fixed
``busy`` time, so every timing is exact and quick); the GPU ones on tests/fake_gpu.py.
"""

import re
import types

import pytest
from fake_gpu import FakeEvent, FakeGpu, cuda_backend, quick

from pytest_solgate.judge import integrity as words
from pytest_solgate.measure import sampling
from pytest_solgate.measure.extras import Taken
from pytest_solgate.measure.integrity import guard, outputs

HEADER = '''
import concurrent.futures
import dataclasses
import subprocess
import sys
import threading
import time

import numpy
import torch

from pytest_solgate.measure import phases

N = 1 << 12


def tensors(dtype=torch.float32):
    x = torch.randn(N, dtype=dtype)
    y = torch.randn(N, dtype=dtype)
    return x, y, torch.empty_like(x)


@dataclasses.dataclass(frozen=True)
class Operands:  # inputs handed inside an object of the test's own
    x: torch.Tensor
    y: torch.Tensor


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(N))
        self.register_buffer("x", torch.randn(N))


def second_half(x, y, out):
    """The half of an add that a cheat leaves to another thread or a pool."""
    time.sleep(0.005)  # the half's real work (busy() only moves the fake clock): it outlives the call
    torch.add(x, y, out=out)


def measure(sol, kernel, reference=torch.add, **kw):
    x, y, out = tensors(kw.pop("dtype", torch.float32))
    return sol.measure(kernel, args=(x, y, out), outputs=2, reference=reference, bytes=sol.nbytes(x, y, out), **kw)
'''

# test name -> (its kernel and test body, the cause its one line must name)
CHEATS = {
    "cached_by_address": ('''
CACHE = {}
def kernel(x, y, out):
    busy(1e-3)
    key = (x.data_ptr(), y.data_ptr())
    if key not in CACHE:
        CACHE[key] = x + y
    out.copy_(CACHE[key])
''', "stale result"),
    "computed_once": ('''
DONE = set()
def kernel(x, y, out):
    busy(1e-3)
    if id(out) not in DONE:
        torch.add(x, y, out=out)
        DONE.add(id(out))
''', "stale result"),
    "computes_only_into_poison": ('''
def kernel(x, y, out):
    busy(1e-3)
    if torch.isnan(out).any():  # a check's poisoned buffer: honest only then
        torch.add(x, y, out=out)
''', "stale result"),
    "half_the_grid": ('''
def kernel(x, y, out):
    busy(1e-3)
    half = x.numel() // 2
    torch.add(x[:half], y[:half], out=out[:half])
''', "unwritten output: 2048 of 4096 elements"),
    "warm_up_detection": ('''
CALLS = [0]
def kernel(x, y, out):
    busy(1e-3)
    CALLS[0] += 1
    if CALLS[0] <= 5:
        torch.add(x, y, out=out)
''', "unwritten output"),
    "precomputed_at_import": ('''
X, Y, _ = tensors()
ANSWER = X + Y
def kernel(x, y, out):
    busy(1e-3)
    out.copy_(ANSWER)
''', "stale result"),
    "thread_left_running": ('''
def kernel(x, y, out):
    busy(1e-3)
    def later():
        time.sleep(0.05)
        torch.add(x, y, out=out)
    threading.Thread(target=later, name="offload").start()
''', "work left running"),
    "pool_left_running": ('''
POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="offload")
def kernel(x, y, out):
    busy(1e-3)
    def later():
        time.sleep(0.05)
        torch.add(x, y, out=out)
    POOL.submit(later)
''', "work left running"),
    "child_process": ('''
CHILDREN = []
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
    CHILDREN.append(subprocess.Popen(["sleep", "0.3"]))
''', "child process"),
    "lazy_subclass": ('''
class Lazy(torch.Tensor):
    pass
def kernel(x, y):
    busy(1e-3)
    return torch.add(x, y).as_subclass(Lazy)
''', "lazy result"),
    "aliased_input": ('''
DONE = set()
def kernel(x, y):  # adds in place once for each input tensor, then hands the input back as it is
    busy(1e-3)
    if id(x) not in DONE:
        DONE.add(id(x))
        x.add_(y)
    return x
''', "aliased result: result shares storage with input 0"),
    "fp16_inside_fp32": ('''
def kernel(x, y, out):
    busy(1e-3)
    out.copy_((x.half() + y.half()).float())
''', "lower precision"),
    "bf16_step_inside_fp32": ('''
def kernel(x, y, out):
    busy(1e-3)
    torch.add((x.bfloat16() * 3).float() / 3, y, out=out)
''', "lower precision: declared fp32 but the call ran aten._to_copy.default (bfloat16)"),
    "loose_tolerance_garbage": ('''
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
    out.add_(torch.randn_like(out) * 1e-3)
''', "wrong result"),
    "patched_perf_counter": ('''
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
''', "tampered timing: time.perf_counter"),
    "patched_event_elapsed_time": ('''
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
''', "tampered timing: torch.cuda.Event.elapsed_time"),
    "patched_sampling_while_running": ('''
REAL = phases.timed_call
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
    phases.timed_call = lambda *a, **k: REAL(*a, **k)
''', "tampered timing: phases.timed_call replaced while it ran"),
}
CHEATS["faked_timer_seam"] = ('''
from pytest_solgate.measure import backends
def kernel(x, y, out):
    end = time.thread_time() + 3e-3  # real work, which the faked timer reads as a quarter
    while time.thread_time() < end:
        pass
    torch.add(x, y, out=out)
def quarter():
    return tuple(t // 4 for t in (time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()))
''', "tampered timing: backends.CpuBackend.now replaced before the measurement")
# Round 2 (issue 51): caches the output checks never meet, work left running, inputs users hand every day.
CHEATS["version_counter_cache"] = ('''
LAST = {}
def kernel(x, y, out):
    key = (id(x), x._version, id(y), y._version)
    if LAST.get(id(out)) == key:  # the same tensors, unchanged since the last call: skip the work
        busy(1e-5)
        return
    busy(1e-3)
    torch.add(x, y, out=out)
    LAST[id(out)] = key
''', "stale result")
CHEATS["precomputed_for_the_seed"] = ('''
torch.manual_seed(0)
SEEDED = tensors()
SEEDED_SUM = SEEDED[0] + SEEDED[1]
def kernel(x, y, out):
    if torch.equal(x, SEEDED[0]) and torch.equal(y, SEEDED[1]):  # the test's seeded inputs: answer known
        busy(1e-5)
        out.copy_(SEEDED_SUM)
        return
    busy(1e-3)
    torch.add(x, y, out=out)
''', "served from a cache")
CHEATS["cached_by_list_addresses"] = ('''
CACHE = {}
def kernel(xs, out):
    busy(1e-3)
    key = tuple(t.data_ptr() for t in xs)
    if key not in CACHE:
        CACHE[key] = xs[0] + xs[1]
    out.copy_(CACHE[key])
''', "stale result")
CHEATS["half_on_a_thread_every_time"] = ('''
def kernel(x, y, out):
    busy(1e-3)
    half = x.numel() // 2
    torch.add(x[:half], y[:half], out=out[:half])
    threading.Thread(target=second_half, args=(x[half:], y[half:], out[half:]), name="half").start()
''', "5 of 5 named a thread: ")
CHEATS["process_pool_left_running"] = ('''
PROCESSES = concurrent.futures.ProcessPoolExecutor(1)
def spin_in_child(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
    PROCESSES.submit(spin_in_child, 0.02)
''', "work left running")
CHEATS["warm_pool_half_left_running"] = ('''
POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warm")
POOL.submit(int).result()  # its worker started at import, before any measurement
def kernel(x, y, out):
    busy(1e-3)
    half = x.numel() // 2
    torch.add(x[:half], y[:half], out=out[:half])
    POOL.submit(second_half, x[half:], y[half:], out[half:])
''', "work left running")
CHEATS["worker_from_import_half"] = ('''
import queue
JOBS, PENDING = queue.Queue(), []
def worker():  # started at import, before any measurement: never a thread the call started
    while True:
        x, y, out, done = JOBS.get()
        end = time.thread_time() + 0.003  # the half's real work, on a CPU after the call returned (in
        while time.thread_time() < end:  # torch, without the GIL: a Python loop could hold it past the check's read)
            torch.ones(1 << 14).sum()
        torch.add(x, y, out=out)
        done.set()
threading.Thread(target=worker, name="prefetch", daemon=True).start()
def kernel(x, y, out):
    while PENDING:
        PENDING.pop().wait()
    busy(1e-3)
    half = x.numel() // 2
    torch.add(x[:half], y[:half], out=out[:half])
    PENDING.append(threading.Event())
    JOBS.put((x[half:], y[half:], out[half:], PENDING[-1]))
''', "work left running")
CHEATS["thread_hidden_from_the_trace_hook"] = ('''
def kernel(x, y, out):
    busy(1e-3)
    half = x.numel() // 2
    torch.add(x[:half], y[:half], out=out[:half])
    threading.settrace(None)  # its thread is not traced: nothing records when its work ends
    threading.Thread(target=second_half, args=(x[half:], y[half:], out[half:]), name="hidden").start()
''', "work left running")
CHEATS["in_place_cached"] = ('''
DONE = set()
def kernel(x):
    if id(x) in DONE:  # relu_ once, then hand back the same tensor
        busy(1e-5)
        return x
    busy(1e-3)
    DONE.add(id(x))
    return x.relu_()
''', "served from a cache")
CHEATS["integer_cached"] = ('''
CACHE = {}
def kernel(i, j, out):
    if i.data_ptr() in CACHE:
        busy(1e-5)
        out.copy_(CACHE[i.data_ptr()])
        return
    busy(1e-3)
    torch.add(i, j, out=out)
    CACHE[i.data_ptr()] = out.clone()
''', "served from a cache")
CHEATS["int8_values_cached"] = ('''
CACHE = {}
def kernel(a, b):
    key = (a.numpy().tobytes(), b.numpy().tobytes())  # the operands' values, not their addresses
    if key not in CACHE:
        busy(1e-3)
        CACHE[key] = a.int() @ b.int()
    busy(1e-5)  # a hit's fake time (none would make the sampler batch calls until its wall budget)
    return CACHE[key].clone()
''', "served from a cache")
CHEATS["int64_values_cached"] = ('''
CACHE = {}
def kernel(index):
    key = index.numpy().tobytes()  # int64 indices, by value: the same in every timed call
    if key not in CACHE:
        busy(1e-3)
        CACHE[key] = torch.bincount(index, minlength=N)
    busy(1e-5)
    return CACHE[key].clone()
''', "served from a cache")
CHEATS["dataclass_cached"] = ('''
CACHE = {}
def kernel(ops, out):
    if id(ops) not in CACHE:
        busy(1e-3)
        CACHE[id(ops)] = ops.x + ops.y
    busy(1e-5)
    out.copy_(CACHE[id(ops)])
''', "stale result")
CHEATS["module_cached"] = ('''
CACHE = {}
def kernel(block):
    if id(block) not in CACHE:
        busy(1e-3)
        CACHE[id(block)] = (block.x * block.w).detach()
    busy(1e-5)
    return CACHE[id(block)].clone()
''', "stale result")
CHEATS["numpy_inputs_cached"] = ('''
CACHE = {}
def kernel(a, b):
    if (id(a), id(b)) not in CACHE:
        busy(1e-3)
        CACHE[id(a), id(b)] = a + b
    busy(1e-5)
    return CACHE[id(a), id(b)].copy()
''', "stale result")
CHEATS["reference_code_swapped"] = ('''
SWAPPED_LAST = [None]
def answer_swapped(*args):
    return SWAPPED_LAST[0].clone()
def kernel(x, y):
    busy(1e-3)
    frame = sys._getframe(1)
    while frame is not None:  # the test's reference, found on the stack, made to answer with this result
        for value in list(frame.f_locals.values()):
            code = getattr(value, "__code__", None)
            if getattr(value, "__name__", "") == "<lambda>" and "test_cheats" in code.co_filename:
                value.__code__ = answer_swapped.__code__
        frame = frame.f_back
    result = torch.zeros_like(x)
    result[:4] = x[:4] + y[:4]  # a few elements of the work
    SWAPPED_LAST[0] = result
    return result
''', "tampered reference")
CHEATS["checked_reference_replaced"] = ('''
REPLACED_LAST = [None]
def kernel(x, y):
    busy(1e-3)
    frame = sys._getframe(1)
    while frame is not None:  # the checks' record of the test, found on the stack: its reference replaced
        for value in list(frame.f_locals.values()):
            if hasattr(value, "reference") and hasattr(value, "fn"):
                object.__setattr__(value, "reference", lambda *args: REPLACED_LAST[0].clone())
        frame = frame.f_back
    result = torch.zeros_like(x)
    result[:4] = x[:4] + y[:4]
    REPLACED_LAST[0] = result
    return result
''', "tampered reference")
CHEATS["parameter_cached"] = ('''
CACHE = {}
def kernel(x, w):
    busy(1e-3)
    if w.data_ptr() not in CACHE:
        CACHE[w.data_ptr()] = (x * w).detach()
    return CACHE[w.data_ptr()]
''', "stale result")
CHEATS["expanded_bias_cached"] = ('''
CACHE = {}
def kernel(x, b, out):
    busy(1e-3)
    if b.data_ptr() not in CACHE:
        CACHE[b.data_ptr()] = x + b
    out.copy_(CACHE[b.data_ptr()])
''', "stale result")
CHEATS["zero_dim_cached"] = ('''
CACHE = {}
def kernel(x, y):
    busy(1e-3)
    if x.data_ptr() not in CACHE:
        CACHE[x.data_ptr()] = x + y
    return CACHE[x.data_ptr()]
''', "stale result")
CHEATS["wrapped_take_timing"] = ('''
import dataclasses
import functools
from pytest_solgate.measure import sampling
REAL = sampling.take_timing
@functools.wraps(REAL)  # its name and module copied: only its identity tells it apart
def third(*args, **kwargs):
    timing = REAL(*args, **kwargs)
    return dataclasses.replace(timing, seconds=timing.seconds / 3)
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
''', "tampered timing: sampling.take_timing replaced before the measurement")
# Round 3: work deferred to code that runs on the measuring thread after the call returned (an
# outside catalogue's cheats): each call returns at once, and the plugin's next torch or Python call
# does its work, outside the timer; every output read is right.
CHEATS["mode_left_entered"] = ('''
from torch.overrides import TorchFunctionMode
LAST = {}
class LASTMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        while LAST:  # the work of the calls since, at the next torch call anywhere
            _, (x, y, out) = LAST.popitem()
            busy(1e-3)
            torch.add(x, y, out=out)
        return func(*args, **(kwargs or {}))
MODE = []
def kernel(x, y, out):
    if not MODE:
        MODE.append(LASTMode())
        MODE[0].__enter__()  # entered once, never left
    busy(1e-5)
    LAST[id(out)] = (x, y, out)
''', "work deferred past the timer")
CHEATS["mode_entered_before"] = ('''
from torch.overrides import TorchFunctionMode
LAST = {}
class LASTMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        while LAST:
            _, (x, y, out) = LAST.popitem()
            busy(1e-3)
            torch.add(x, y, out=out)
        return func(*args, **(kwargs or {}))
def kernel(x, y, out):
    busy(1e-5)
    LAST[id(out)] = (x, y, out)
''', "work deferred past the timer")
CHEATS["output_class_swapped"] = ('''
LAST = {}
class LASTLazy(torch.Tensor):  # computes when the plugin next touches the output
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        while LAST:
            _, (x, y, out) = LAST.popitem()
            out.__class__ = torch.Tensor
            busy(1e-3)
            torch.add(x, y, out=out)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))
def kernel(x, y, out):
    busy(1e-5)
    LAST[id(out)] = (x, y, out)
    out.__class__ = LASTLazy
''', "work deferred past the timer")
CHEATS["profile_hook_deferred"] = ('''
LAST = {}
def LASTtimed(frame):
    while frame is not None:
        if frame.f_code.co_name == "timed_call":
            return True
        frame = frame.f_back
    return False
def LASThook(frame, event, arg):
    # at the first Python call out of the timer's frame: the work, then the hook taken back
    if event == "call" and LAST and frame.f_code.co_filename != __file__ and not LASTtimed(frame):
        sys.setprofile(None)
        while LAST:
            _, (x, y, out) = LAST.popitem()
            busy(1e-3)
            torch.add(x, y, out=out)
def kernel(x, y, out):
    busy(1e-5)
    LAST[id(out)] = (x, y, out)
    sys.setprofile(LASThook)
''', "work deferred past the timer")
# how each cheat's test measures (default: ``measure(sol, kernel)``)
BODIES = {
    "lazy_subclass": "sol.measure(kernel, args=tensors()[:2], reference=lambda x, y: x + y, bytes=1e3)",
    "aliased_input": "sol.measure(kernel, args=tensors()[:2], reference=lambda x, y: x + y, bytes=1e3)",
    "fp16_inside_fp32": "measure(sol, kernel, flops={'fp32': N})",
    "bf16_step_inside_fp32": "measure(sol, kernel, flops={'fp32': N})",
    "patched_perf_counter": "monkeypatch.setattr(time, 'perf_counter', lambda: 0.0)\n    measure(sol, kernel)",
    "patched_event_elapsed_time": ("monkeypatch.setattr(torch.cuda.Event, 'elapsed_time', lambda self, end: 1.0)\n"
                                   "    measure(sol, kernel)"),
    "faked_timer_seam": "monkeypatch.setattr(backends.CpuBackend, 'now', staticmethod(quarter))\n    measure(sol, kernel)",
    "patched_sampling_while_running": "try:\n        measure(sol, kernel)\n    finally:\n        phases.timed_call = REAL",
    "wrapped_take_timing": "monkeypatch.setattr(sampling, 'take_timing', third)\n    measure(sol, kernel)",
    # the modes are left after the test: a later test's measurement would be named for them
    "mode_left_entered": "try:\n        measure(sol, kernel)\n    finally:\n        MODE and MODE[0].__exit__(None, None, None)",
    "mode_entered_before": ("mode = LASTMode()\n    mode.__enter__()\n    try:\n        measure(sol, kernel)\n"
                            "    finally:\n        mode.__exit__(None, None, None)"),
    "profile_hook_deferred": "try:\n        measure(sol, kernel)\n    finally:\n        sys.setprofile(None)",
    "pool_left_running": "try:\n        measure(sol, kernel)\n    finally:\n        POOL.shutdown(cancel_futures=True)",
    "precomputed_for_the_seed": "torch.manual_seed(0)\n    measure(sol, kernel)",
    "cached_by_list_addresses": ("x, y, out = tensors()\n"
                                 "    sol.measure(kernel, args=([x, y], out), outputs=1, reference=lambda xs: xs[0] + xs[1], bytes=1e3)"),
    "half_on_a_thread_every_time": ("said = []\n    for i in range(5):\n        try:\n            measure(sol, kernel, name=f'run{i}')\n"
                                    "        except Exception as exc:\n            said.append(str(exc))\n"
                                    "    named = [s for s in said if 'work left running' in s and \"thread 'half'\" in s]\n"
                                    "    raise AssertionError(f'{len(named)} of 5 named a thread: {[s for s in said if s not in named][:1] or said[:1]}')"),
    # the children a cheat leaves are waited for before the next test: a later test's measurement would name them
    "child_process": "try:\n        measure(sol, kernel)\n    finally:\n        [child.wait() for child in CHILDREN]",
    "warm_pool_half_left_running": "try:\n        measure(sol, kernel)\n    finally:\n        POOL.shutdown(cancel_futures=True)",
    "process_pool_left_running": "try:\n        measure(sol, kernel)\n    finally:\n        PROCESSES.shutdown(cancel_futures=True)",
    "in_place_cached": "sol.measure(kernel, args=(torch.randn(N),), reference=torch.relu_, bytes=1e3)",
    "integer_cached": ("i, j, out = (torch.randint(0, 100, (N,)) for _ in range(3))\n"
                       "    sol.measure(kernel, args=(i, j, out), outputs=2, reference=torch.add, bytes=1e3)"),
    "int8_values_cached": ("a, b = (torch.randint(-128, 128, (64, 64), dtype=torch.int8) for _ in range(2))\n"
                           "    sol.measure(kernel, args=(a, b), reference=lambda a, b: a.int() @ b.int(), bytes=1e3)"),
    "int64_values_cached": ("sol.measure(kernel, args=(torch.randint(0, N, (N,)),), "
                            "reference=lambda i: torch.bincount(i, minlength=N), bytes=1e3)"),
    "dataclass_cached": ("sol.measure(kernel, args=(Operands(*tensors()[:2]), torch.empty(N)), outputs=1, "
                         "reference=lambda o: o.x + o.y, bytes=1e3)"),
    "module_cached": "sol.measure(kernel, args=(Block(),), reference=lambda b: (b.x * b.w).detach(), bytes=1e3)",
    "numpy_inputs_cached": ("sol.measure(kernel, args=(numpy.random.rand(N), numpy.random.rand(N)), "
                            "reference=lambda a, b: a + b, bytes=1e3)"),
    "reference_code_swapped": "sol.measure(kernel, args=tensors()[:2], reference=lambda x, y: x + y, bytes=1e3)",
    "checked_reference_replaced": "sol.measure(kernel, args=tensors()[:2], reference=torch.add, bytes=1e3)",
    "parameter_cached": ("w = torch.nn.Parameter(torch.randn(N))\n"
                         "    sol.measure(kernel, args=(torch.randn(N), w), reference=lambda x, w: x * w, bytes=1e3)"),
    "expanded_bias_cached": ("b = torch.randn(64).expand(64, 64)\n"
                             "    sol.measure(kernel, args=(torch.randn(64, 64), b, torch.empty(64, 64)), outputs=2, "
                             "reference=torch.add, bytes=1e3)"),
    "zero_dim_cached": "sol.measure(kernel, args=(torch.tensor(1.5), torch.tensor(2.0)), reference=torch.add, bytes=1e3)",
}

HONEST = '''
def honest_add(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)

def test_honest_out_buffer(sol):
    x, y, out = tensors()
    sol.measure(honest_add, args=(x, y, out), outputs=2, reference=torch.add, bytes=sol.nbytes(x, y, out))
    torch.testing.assert_close(out, x + y)  # the user's buffers are theirs again after the checks

def test_honest_returns(sol):
    def kernel(x, y):
        busy(1e-3)
        return x + y
    sol.measure(kernel, args=tensors()[:2], reference=torch.add, bytes=1e3, flops={"fp32": N})

def test_honest_without_reference(sol):
    x, y, out = tensors()
    sol.measure(honest_add, args=(x, y, out), outputs=2, bytes=1e3)

def test_honest_bf16(sol):
    measure(sol, honest_add, dtype=torch.bfloat16)

def test_honest_factory(sol):
    sol.measure(honest_add, args=tensors, outputs=2, reference=torch.add, bytes=1e3)

POOL = concurrent.futures.ThreadPoolExecutor(2)
def test_honest_pool_waited_for(sol):
    def kernel(x, y, out):
        busy(1e-3)
        half = x.numel() // 2
        done = [POOL.submit(torch.add, x[s], y[s], out=out[s]) for s in (slice(0, half), slice(half, None))]
        [d.result() for d in done]
    measure(sol, kernel)

def test_honest_thread_joined(sol):
    def kernel(x, y, out):
        busy(1e-3)
        t = threading.Thread(target=torch.add, args=(x, y), kwargs={"out": out})
        t.start()
        t.join()
    measure(sol, kernel)

WORKERS = []
def test_honest_idle_worker_process(sol):
    """A compiler's worker pool (torch.compile's), started by the first call and idle after it."""
    def kernel(x, y, out):
        busy(1e-3)
        if not WORKERS:
            WORKERS.append(subprocess.Popen(["sleep", "30"]))
        torch.add(x, y, out=out)
    try:
        measure(sol, kernel)
    finally:
        WORKERS[0].kill()
        WORKERS[0].wait()

def test_honest_in_place(sol):
    def kernel(x):
        busy(1e-3)
        return x.relu_()
    sol.measure(kernel, args=(torch.randn(N),), reference=torch.relu_, bytes=1e3)

def test_honest_in_place_against_out_of_place_references(sol):
    def relu_(x):
        busy(1e-3)
        return x.relu_()
    def add_(x, y):  # not idempotent: every call adds y again
        busy(1e-3)
        return x.add_(y)
    sol.measure(relu_, args=(torch.randn(N),), reference=torch.relu, bytes=1e3, name="relu")
    sol.measure(add_, args=tensors()[:2], reference=lambda x, y: x + y, bytes=1e3, name="add")

def int_add(i, j, out):
    busy(1e-3)
    torch.add(i, j, out=out)

def test_honest_integer_without_reference(sol):
    sol.measure(int_add, args=tuple(torch.randint(0, 100, (N,)) for _ in range(3)), outputs=2, bytes=1e3)

def test_honest_integer_with_reference(sol):
    sol.measure(int_add, args=tuple(torch.randint(0, 100, (N,)) for _ in range(3)), outputs=2, reference=torch.add,
                bytes=1e3)

def int8_matmul(a, b):
    busy(1e-3)
    return a.int() @ b.int()

def test_honest_int8_with_and_without_reference(sol):
    a, b = (torch.randint(-128, 128, (64, 64), dtype=torch.int8) for _ in range(2))
    mask = torch.randint(0, 2, (64, 64), dtype=torch.uint8)
    kept = mask.clone()
    sol.measure(int8_matmul, args=(a, b), reference=lambda a, b: a.int() @ b.int(), bytes=1e3, name="matmul")
    def row_max(a, mask):  # its result rarely changes with new values drawn within the range
        busy(1e-3)
        return (a * mask).amax(dim=1)
    sol.measure(row_max, args=(a, mask), bytes=1e3, name="row-max")
    assert torch.equal(mask, kept)

def test_honest_gather_by_offsets_and_a_mask(sol):
    def segment_sums(table, index, offsets, mask):  # out of bounds if the indices, offsets or mask changed shape
        busy(1e-3)
        picked = table[index] * mask
        return torch.stack([picked[offsets[k]:offsets[k + 1]].sum() for k in range(len(offsets) - 1)])
    index, offsets = torch.randint(0, N, (N,)), torch.tensor([0, 3, 3, N // 2, N])  # offsets sorted: kept
    mask, kept = torch.rand(N) > 0.5, index.clone()
    sol.measure(segment_sums, args=(torch.randn(N), index, offsets, mask), bytes=1e3,
                reference=lambda t, i, o, m: torch.stack([(t[i] * m)[o[k]:o[k + 1]].sum() for k in range(len(o) - 1)]))
    assert torch.equal(index, kept)

def test_honest_speed_depends_on_the_data(sol):
    def sort(x):  # fewer distinct values sort faster (2.6x for 4 values among 2^18 on a CPU)
        busy(1e-3 * (1 + 2 * len(torch.unique(x)) / x.numel()))
        return torch.sort(x).values
    sol.measure(sort, args=(torch.randint(1, 5, (N,)).float(),), reference=lambda x: torch.sort(x).values, bytes=1e3)

def test_honest_sorted_boundaries_kept(sol):
    def bucketize(x, bounds):  # right only where bounds are sorted
        busy(1e-3)
        return (x[:, None] >= bounds).sum(dim=1)
    bounds = torch.linspace(-2, 2, 16)
    sol.measure(bucketize, args=(torch.randn(N), bounds), keep=1, bytes=1e3,
                reference=lambda x, bounds: torch.searchsorted(bounds, x, right=True))

def test_honest_dataclass_module_and_numpy(sol):
    def add(ops, out):
        busy(1e-3)
        torch.add(ops.x, ops.y, out=out)
    sol.measure(add, args=(Operands(*tensors()[:2]), torch.empty(N)), outputs=1, reference=lambda o: o.x + o.y,
                bytes=1e3, name="dataclass")
    def scale(block):
        busy(1e-3)
        return (block.x * block.w).detach()
    sol.measure(scale, args=(Block(),), reference=lambda b: (b.x * b.w).detach(), bytes=1e3, name="module")
    def numpy_add(a, b):  # a NumPy array returned is a result like a tensor
        busy(1e-3)
        return a + b
    sol.measure(numpy_add, args=(numpy.random.rand(N), numpy.random.rand(N)), reference=lambda a, b: a + b,
                bytes=1e3, name="numpy")

def test_honest_list_and_nested_tuple(sol):
    def kernel(xs, pair, out):
        busy(1e-3)
        torch.add(xs[0] + xs[1], pair[0][0] * pair[1], out=out)
    x, y, out = tensors()
    sol.measure(kernel, args=([x, y], ((y,), x), out), outputs=2,
                reference=lambda xs, pair: xs[0] + xs[1] + pair[0][0] * pair[1], bytes=1e3)

def test_honest_parameter(sol):
    def kernel(x, w):
        busy(1e-3)
        return x * w
    w = torch.nn.Parameter(torch.randn(N))
    sol.measure(kernel, args=(torch.randn(N), w), reference=lambda x, w: x * w, bytes=1e3)
    assert w.requires_grad and isinstance(w, torch.nn.Parameter)

def test_honest_expanded_and_overlapping_views(sol):
    x, b, out, base = torch.randn(64, 64), torch.randn(64), torch.empty(64, 64), torch.randn(65)
    def kernel(x, b, lo, hi, out):
        busy(1e-3)
        torch.add(x + b, lo - hi, out=out)
    kept = b.clone()
    sol.measure(kernel, args=(x, b.expand(64, 64), base[:64], base[1:], out), outputs=4,
                reference=lambda x, b, lo, hi: x + b + lo - hi, bytes=1e3)
    assert torch.equal(b, kept)  # the user's tensors hold their values afterwards

def test_honest_empty_and_zero_dim(sol):
    def kernel(x, y):
        busy(1e-3)
        return x + y
    sol.measure(kernel, args=(torch.tensor(1.5), torch.tensor(2.0)), reference=torch.add, bytes=1e3, name="zero-dim")
    sol.measure(kernel, args=(torch.empty(0), torch.empty(0)), reference=torch.add, bytes=1e3, name="empty")

def test_honest_bare_callable(sol):
    x, y, out = tensors()
    sol.measure(lambda: honest_add(x, y, out), bytes=1e3)
'''


def _module(names: list[str], honest: bool) -> str:
    parts = [HEADER, HONEST if honest else ""]
    for name in names:
        kernel = CHEATS[name][0]
        body = BODIES.get(name, "measure(sol, kernel)")
        parts.append(kernel.replace("def kernel", f"def kernel_{name}").replace("REAL", f"REAL_{name}")
                     .replace("CACHE", f"CACHE_{name}").replace("DONE", f"DONE_{name}").replace("CALLS", f"CALLS_{name}")
                     .replace("POOL", f"POOL_{name}").replace("quarter", f"quarter_{name}")
                     .replace("third", f"third_{name}").replace("LAST", f"LAST_{name}").replace("SEEDED", f"SEEDED_{name}")
                     .replace("PROCESSES", f"PROCESSES_{name}").replace("CHILDREN", f"CHILDREN_{name}"))
        body = (body.replace("kernel", f"kernel_{name}").replace("REAL", f"REAL_{name}").replace("quarter", f"quarter_{name}")
                .replace("third", f"third_{name}").replace("POOL", f"POOL_{name}").replace("PROCESSES", f"PROCESSES_{name}")
                .replace("CHILDREN", f"CHILDREN_{name}").replace("LAST", f"LAST_{name}"))
        parts.append(f"\ndef test_{name}(sol, monkeypatch):\n    {body}\n")
    return "\n".join(parts)


# The catalogue's session times on the fake clock, so the cache flush before each sample buys
# nothing there; at twice the last-level cache (64 MB here) it was 40% of the run's CPU time. Its
# backend flushes a small buffer instead, handed in the way a plugin hands solgate its machine (a
# Platform), with the same idle /proc as every test session (tests/idle_machine.py).
SMALL_FLUSH_PLATFORM = '''
import os
import random

import pytest
from idle_machine import readers_from

from pytest_solgate.measure.backends import CpuBackend
from pytest_solgate.measure.platform import Platform


def small_flush_backend(choice, l2_bytes, clock_mhz):
    assert choice.kind == "cpu", choice
    return CpuBackend("cpu", flush_bytes=64 * 1024)


@pytest.hookimpl(tryfirst=True)
def pytest_solgate_platform(config):
    # the integrity checks' random source seeded: the same rounds run on new values in every run
    return Platform(contention=readers_from(os.environ), make_backend=small_flush_backend,
                    integrity_random=lambda: random.Random(51))
'''


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, idle_proc_root, request):
    """The catalogue's output (run_catalogue), made once a session: under xdist the first worker to
    need it runs it while the others wait for it (each had run its own, minutes of both cores)."""
    import fcntl

    worker = getattr(request.config, "workerinput", None)
    if worker is None:
        return run_catalogue(tmp_path_factory, idle_proc_root)
    shared = tmp_path_factory.getbasetemp().parent / f"cheats-catalogue-{worker['testrunuid']}.txt"
    with open(shared.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.exists():
            shared.write_text(run_catalogue(tmp_path_factory, idle_proc_root))
        return shared.read_text()


def run_catalogue(tmp_path_factory, idle_proc_root):
    """One pytest run of every cheat and every honest kernel, in a subprocess (a cheat that
    patches, starts threads, processes or a process pool cannot leak into this process); its
    output, read by the tests below.

    It is set up before the autouse fixtures of conftest.py that give every test's sessions their
    machine, so it names them itself: the idle machine's /proc (the real one's load changed what
    its sessions said), and a device lock of its own: every timing there is on the fake clock,
    exact whatever else runs, and on the machine-wide lock it waited at each of its measurements
    for every other session's real-time ones, and they for its 45 tests."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    from idle_machine import PROC_ROOT_VARIABLE

    from solgate_testing import FAKE_CLOCK_KERNELS, FAKE_CLOCK_TIMING, SYNTHETIC_PROFILE

    # Two sessions at once, a third of the cheats beside the honest kernels, the rest in the other:
    # the catalogue is the longest item of the suite, and a session holds one core.
    names = list(CHEATS)
    shards = [(names[0::3], True), (names[1::3] + names[2::3], False)]
    here = Path(__file__).resolve().parent  # the conftest imports idle_machine from here
    runs = []
    for cheats, honest in shards:
        folder = tmp_path_factory.mktemp("cheats")
        (folder / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
        (folder / "conftest.py").write_text(SMALL_FLUSH_PLATFORM)
        (folder / "test_cheats.py").write_text(FAKE_CLOCK_KERNELS + textwrap.dedent(_module(cheats, honest)))
        env = {**os.environ, "COLUMNS": "2000", "SOLGATE_TRUST_TEST_CLOCK": "1", "SOLGATE_LOCK_DIR": str(folder / "locks"),
               PROC_ROOT_VARIABLE: str(idle_proc_root),
               "PYTHONPATH": os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])}
        # hypothesis's pytest plugin imports all of hypothesis at the session's end (seconds of CPU here)
        runs.append(subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:hypothesispytest", "-q", "-rf", "--sol-no-save",
             "--sol-profile=synthetic.toml", *FAKE_CLOCK_TIMING, "test_cheats.py"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return "\n".join(run.communicate(timeout=600)[0] for run in runs)


# A cache is named by whichever check meets it first: the timed calls against calls on fresh inputs
# ("served from a cache"), or the outputs on new values ("stale result", also in a timed call).
CACHE_CAUSES = ("served from a cache", "stale result")


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_cheat_fails_naming_its_cause(catalogue, name):
    line = next((row for row in catalogue.splitlines() if row.startswith(f"FAILED test_cheats.py::test_{name} - ")), None)
    assert line is not None, [row for row in catalogue.splitlines() if f"test_{name}" in row] or catalogue[-3000:]
    causes = CACHE_CAUSES if CHEATS[name][1] in CACHE_CAUSES else (CHEATS[name][1],)
    assert any(cause in line for cause in causes), line


def test_honest_kernels_raise_nothing(catalogue):
    # every honest twin passes (each cheat's own failure is the test above)
    honest = set(re.findall(r"^def (test_\w+)", HONEST, flags=re.M))
    failed = set(re.findall(r"(?:FAILED|ERROR) test_cheats.py::(test_\w+)", catalogue))
    said = [row for row in catalogue.splitlines() if re.match(rf"(?:FAILED|ERROR) test_cheats.py::(?:{'|'.join(honest)}) ", row)]
    assert honest and not honest & failed, "\n".join(said) or catalogue[-3000:]
    summaries = [row for row in catalogue.splitlines() if re.match(r"^\d+ (?:passed|failed)\b.* in [\d.]+s", row)]
    ran = sum(int(n) for row in summaries for n in re.findall(r"(\d+) (?:passed|failed)", row))
    assert ran == len(honest) + len(CHEATS), catalogue[-3000:]


def test_strict_fails_a_gated_measurement_that_hands_no_inputs(suite):
    result = suite("""
        import torch

        def test_bare(sol):
            x = torch.randn(64)
            sol.measure(lambda: busy(1e-3) or x + 1, bytes=1e3)

        def test_handed(sol):
            def kernel(x):
                busy(1e-3)
                return x + 1
            sol.measure(kernel, args=(torch.randn(64),), reference=lambda x: x + 1, bytes=1e3)

        def test_not_gated(sol):
            sol.measure(lambda: busy(1e-3), bytes=1e3, gate=False)
        """, "--sol-integrity=strict", "--sol-no-save", fake_clock=True)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.re_match_lines([r".*test_bare 'default': no inputs to check under --sol-integrity=strict: hand them.*"])


def test_off_checks_nothing(suite):
    result = suite("""
        import torch

        def test_cached(sol):
            x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
            answer = x + y
            def kernel(x, y, out):
                busy(1e-3)
                out.copy_(answer)
            sol.measure(kernel, args=(x, y, out), outputs=2, reference=torch.add, bytes=1e3)
        """, "--sol-integrity=off", "--sol-no-save", fake_clock=True)
    result.assert_outcomes(passed=1)


def test_bad_arguments_get_one_line_naming_them(suite):
    result = suite("""
        import torch

        def test_outputs_out_of_range(sol):
            sol.measure(lambda x: x, args=(torch.randn(4),), outputs=3, bytes=1e3)

        def test_reference_without_args(sol):
            sol.measure(lambda: busy(1e-3), reference=torch.add, bytes=1e3)

        def test_outputs_not_named(sol):
            def kernel(x, out):
                busy(1e-3)
                out.copy_(x)
            sol.measure(kernel, args=(torch.randn(4), torch.empty(4)), bytes=1e3)
        """, "--sol-no-save", fake_clock=True)
    result.assert_outcomes(failed=3)
    for said in (r"outputs= names positions in args= \(0 to 0\) of the buffers the kernel writes, not 3 \(e.g. outputs=2",
                 r"outputs=, reference=, tolerance= and keep= need args=",
                 r"no result to check: the kernel returned None and outputs= names no buffer"):
        assert re.search(said, result.stdout.str()), said


# --- on the fake GPU -------------------------------------------------------------------------------


def _on_fake_gpu(gpu, backend, kernel, checked=None):
    """One timing of ``kernel`` on the fake GPU inside the guard, as the pipeline runs it: the breach, or None."""
    context = types.SimpleNamespace(backend=backend, device=types.SimpleNamespace(kind="cuda"))
    watch = guard.Guard(guard.ON, checked, ["fp32"], True, True, torch=backend.torch)
    watch.before()
    timing = sampling.take_timing(kernel, backend, **quick(gpu))
    found = watch.after(Taken("test_k", "default", kernel, context, timing, ""))
    return found.fields.get(guard.KEY)


def test_patched_events_on_the_gpu_are_named(monkeypatch):
    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    real = FakeEvent.elapsed_time

    def kernel():
        gpu.launch("k", lambda: 1e-4)
        FakeEvent.elapsed_time = lambda self, end: real(self, end) / 2  # halves every reading from now on

    try:
        breach = _on_fake_gpu(gpu, backend, kernel)
    finally:
        FakeEvent.elapsed_time = real
    assert "tampered timing: torch.cuda.Event.elapsed_time replaced while it ran" in words.line("test_k", "default", breach)


def test_a_graph_replaying_its_captured_buffers_is_caught_on_new_storage(monkeypatch):
    """A kernel that captured a CUDA graph on its first call and replays it: every replay reads
    and writes the buffers of that first call, whatever it is handed. The check on new storage
    finds the poison it wrote into the fresh output untouched."""
    import torch

    gpu = FakeGpu()
    backend = cuda_backend(gpu)
    captured = []

    def kernel(x, y, out):
        if not captured:
            captured.extend((x, y, out))
        gpu.launch("replay", lambda: 1e-4)
        torch.add(captured[0], captured[1], out=captured[2])

    args = (torch.randn(256), torch.randn(256), torch.empty(256))
    checked = outputs.checked_of(kernel, args, 2, torch.add, None, "test_k")
    breach = _on_fake_gpu(gpu, backend, checked.timed(), checked)
    assert "unwritten output: 256 of 256 elements of args[2] on new storage" in words.line("test_k", "default", breach)


def test_an_honest_kernel_on_the_fake_gpu_raises_nothing(monkeypatch):
    import torch

    gpu = FakeGpu()
    backend = cuda_backend(gpu)

    def kernel(x, y, out):
        gpu.launch("add", lambda: 1e-4)
        torch.add(x, y, out=out)

    args = (torch.randn(256), torch.randn(256), torch.empty(256))
    checked = outputs.checked_of(kernel, args, 2, torch.add, None, "test_k")
    assert _on_fake_gpu(gpu, backend, checked.timed(), checked) is None


def test_a_call_the_busy_machine_slowed_is_not_a_faked_timer_but_a_faked_timer_still_is():
    """Seen in the full suite beside another worker (tests/test_action.py's torch.mul of 64K
    elements): the figure read 587 us a call, one warm call 1.73 ms of thread CPU time (an OpenMP
    barrier waiting for a preempted thread). The timer read around that same call says which it was."""
    from pytest_solgate.measure.integrity import tampering

    def check(timer_on_same_calls):
        return tampering.ClockCheck(587e-6, 1.73e-3, "thread CPU time", (timer_on_same_calls, 3 * 1.8e-3))

    assert not check(3 * 1.85e-3).disagrees  # the timer read the slow calls as slow: the machine
    assert check(3 * 1.85e-3 / 4).disagrees  # it read a quarter of them: faked
    assert tampering.ClockCheck(587e-6, 1.73e-3, "thread CPU time").disagrees  # no reading beside: as before
    assert not tampering.ClockCheck(587e-6, 1.0e-3, "thread CPU time", (0.0, 3e-3)).disagrees  # within 2x + slack


def test_the_second_clock_reads_the_backends_timer_around_the_same_calls():
    import time

    from pytest_solgate.measure import backends
    from pytest_solgate.measure.integrity import tampering

    def spin():
        end = time.thread_time() + 2e-3
        while time.thread_time() < end:
            pass

    honest = tampering.second_clock(spin, 1e-3, 2, backends.CpuBackend())
    timer, real = honest.same_calls
    assert real >= 4e-3 and timer >= real * 0.99  # wall time around a spin is at least its CPU time
    # a quarter of the thread's CPU time on every field: what the timer reads does not depend on the load
    quarter = backends.CpuBackend(clock=lambda: (time.thread_time_ns() // 4,) * 3)
    faked = tampering.second_clock(spin, 0.4e-3, 2, quarter)
    assert faked.same_calls[0] < faked.same_calls[1] / 2 and faked.disagrees


def test_packages_read_through_another_venvs_site_packages_are_libraries_not_code_under_test(tmp_path):
    # CI's checkout venv reads its dependencies (torch among them) from a cached venv through a .pth
    # file: torch's functions come from a site-packages that is not this interpreter's, and were
    # named 'tampered reference' in every test that handed a reference.
    from pytest_solgate.measure.integrity import tampering

    own, other, tests = tmp_path / "venv/site-packages", tmp_path / "deps/lib/site-packages", tmp_path / "project/tests"
    dirs = tampering.library_dirs({"stdlib": str(tmp_path / "lib"), "purelib": str(own)}, [str(tests), str(other)])
    assert str(other.resolve()) in dirs and str(own.resolve()) in dirs
    assert not any(str(tests.resolve()).startswith(d) for d in dirs)  # the code under test stays foreign
