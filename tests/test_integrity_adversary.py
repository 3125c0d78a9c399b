"""Cheats written by someone who did not read the integrity checks (issue 51, round 2), each beside
its honest twin: kernels honest only while the checks' calls can be told from the timed ones (a
trace hook, the checks' frames on the stack, the values or the gap since the last call), and kernel
modules that patch the plugin or torch at import.

The kernels run in a pytest subprocess on a fake clock that models a loaded CPU (``LOADED_CPU``):
every call waits 0.8 ms for a core on top of its work, in wall time only, so the plugin times by
wall time and a cache that saves half a call shows as a fifth of its wall time (what a real run beside
other processes read). Every reading is exact and the integrity checks' random source is seeded
(``SEEDED_PLATFORM``), so what is caught depends on the checks, never on the machine's load or on
chance. The tests read the causes named, never a timing.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The fake clock of tests/solgate_testing.py, on a loaded machine: ``busy`` adds its seconds to the
# thread's CPU time and, with a wait for a core, to the wall time; the memory probe reads 1 ms of both.
LOADED_CPU = '''
FAKE_WALL_NS = [0]
WAIT_NS = 800_000  # another process's turn on the core, in every call


def busy(seconds):
    FAKE_NS[0] += round(seconds * 1e9)
    FAKE_WALL_NS[0] += round(seconds * 1e9) + WAIT_NS


def wall_now():
    return FAKE_WALL_NS[0] / 1e9


def probe():
    FAKE_NS[0] += FAKE_PROBE_NS[0]
    FAKE_WALL_NS[0] += FAKE_PROBE_NS[0]


@pytest.fixture
def sol_clock():
    return CpuClock(now=lambda: (FAKE_WALL_NS[0], FAKE_NS[0], FAKE_NS[0]), probe=probe)
'''

# The session's platform: the integrity checks' random source seeded (which rounds run on new values).
SEEDED_PLATFORM = '''
import os
import random

import pytest
from idle_machine import readers_from

from pytest_solgate.measure.platform import Platform


@pytest.hookimpl(tryfirst=True)
def pytest_solgate_platform(config):
    return Platform(contention=readers_from(os.environ), integrity_random=lambda: random.Random(51))
'''

HEADER = '''
import sys
import threading

import torch

N = 1 << 12


def traced():
    return threading.gettrace() is not None or sys.gettrace() is not None


def in_check_stack():
    # the adversary's list: the checks' frames, by name
    frame, names = sys._getframe(2), []
    while frame is not None and len(names) < 40:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    said = " ".join(names)
    return any(word in said for word in ("check", "fresh", "watch", "verify", "time_pairs", "_served_from_cache",
                                         "_outputs", "_after"))


def sampled(*tensors):
    return tuple((t.data_ptr(), float(t.view(-1)[0]), float(t.view(-1)[-1]), float(t.view(-1)[t.numel() // 2]))
                 for t in tensors)


def measure_add(sol, kernel):
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    sol.measure(kernel, args=(x, y, out), outputs=2, reference=torch.add, bytes=sol.nbytes(x, y, out))
    assert torch.equal(out, x + y)  # the user's tensors hold their values afterwards


def add(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)


def test_honest_add(sol):
    measure_add(sol, add)


def test_honest_matmul(sol):
    def matmul(a, b):
        busy(5e-3)  # far over what the real matmul takes, for the second clock (thread CPU time) on a busy machine
        return a @ b
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    sol.measure(matmul, args=(a, b), reference=torch.matmul, bytes=1e3)


def test_honest_relu_in_place(sol):
    def relu_(x):
        busy(1e-3)
        return torch.relu_(x)
    sol.measure(relu_, args=(torch.randn(N),), reference=torch.relu_, bytes=1e3)


def test_honest_axpy_in_place(sol):
    def axpy_(x, y):  # not idempotent: every timed call adds y again
        busy(1e-3)
        return x.add_(y)
    sol.measure(axpy_, args=(torch.randn(N), torch.randn(N)), reference=lambda x, y: x.add_(y), bytes=1e3)


def test_honest_dict_of_inputs(sol):
    x, y = torch.randn(N), torch.randn(N)
    sol.measure(lambda d: add_new(d["x"], d["y"]), args=({"x": x, "y": y},), reference=lambda d: d["x"] + d["y"],
                bytes=1e3)


def add_new(x, y):
    busy(1e-3)
    return x + y


def test_honest_sum_list(sol):
    def sum_list(xs, out):
        busy(1e-3)
        out.copy_(xs[0])
        for t in xs[1:]:
            out.add_(t)
    xs, out = [torch.randn(N) for _ in range(4)], torch.empty(N)
    sol.measure(sum_list, args=(xs, out), outputs=1, reference=lambda xs: sum(xs), bytes=1e3)
'''

# test name -> (its kernel and test body, the cause its one line must name)
CHEATS = {
    "add_trace_partial": ('''
def kernel(x, y, out):  # a third of the work unless a trace hook is on (the checked calls')
    if traced():
        return add(x, y, out)
    busy(3e-4)
    n = x.numel() // 3
    torch.add(x[:n], y[:n], out=out[:n])
''', "measure_add(sol, kernel)", "stale result in a timed call"),
    "matmul_trace_third_of_rows": ('''
KEPT = {}
def kernel(a, b):
    if traced():
        busy(5e-3)
        return a @ b
    busy(1.5e-3)
    r = KEPT.get(a.shape)
    if r is None:
        r = KEPT[a.shape] = a @ b
    torch.matmul(a[:a.shape[0] // 3], b, out=r[:a.shape[0] // 3])
    return r
''', "sol.measure(kernel, args=(torch.randn(64, 64), torch.randn(64, 64)), reference=torch.matmul, bytes=1e3)",
        "stale result in a timed call"),
    "relu_partial": ('''
def kernel(x):
    if traced():
        busy(1e-3)
        return torch.relu_(x)
    busy(3e-4)
    torch.relu_(x[: x.numel() // 3])
    return x
''', "sol.measure(kernel, args=(torch.randn(N),), reference=torch.relu_, bytes=1e3)", "stale result in a timed call"),
    "sum_list_partial": ('''
def kernel(xs, out):
    busy(1e-3 if traced() else 5e-4)
    out.copy_(xs[0])
    for t in xs[1:] if traced() else xs[1:2]:  # half the list, untraced
        out.add_(t)
''', "xs, out = [torch.randn(N) for _ in range(4)], torch.empty(N)\n"
        "    sol.measure(kernel, args=(xs, out), outputs=1, reference=lambda xs: sum(xs), bytes=1e3)",
        "stale result in a timed call"),
    "add_stack_cache_third": ('''
def kernel(x, y, out):  # honest where a check's frame is on the stack or a hook is on, a third elsewhere
    if traced() or in_check_stack():
        return add(x, y, out)
    busy(3e-4)
    n = x.numel() // 3
    torch.add(x[:n], y[:n], out=out[:n])
''', "measure_add(sol, kernel)", "stale result in a timed call"),
    "scale_stack_cache": ('''
def kernel(x, out):
    if traced() or in_check_stack():
        busy(1e-3)
        return torch.mul(x, 2.0, out=out)
    busy(3e-4)
    n = x.numel() // 3
    torch.mul(x[:n], 2.0, out=out[:n])
''', "x, out = torch.randn(N), torch.empty(N)\n"
        "    sol.measure(kernel, args=(x, out), outputs=1, reference=lambda x: x * 2.0, bytes=1e3)",
        "stale result in a timed call"),
    "add_stack_detect": ('''
KEPT = {}
def kernel(x, y, out):  # a cache keyed on sampled values, skipped where a check's frame is on the stack
    if in_check_stack():
        return add(x, y, out)
    key = sampled(x, y)
    if KEPT.get("key") == key:
        busy(1e-5)
        return
    add(x, y, out)
    KEPT["key"] = key
''', "measure_add(sol, kernel)", "served from a cache: timed rounds on new input values"),
    "add_gap_detect": ('''
KEPT = {"last": 0.0, "key": None}
def kernel(x, y, out):  # skip the work within 20 ms of the last call while the sampled values stay
    now = wall_now()
    gap, KEPT["last"] = now - KEPT["last"], now
    key = sampled(x, y)
    if gap < 0.02 and KEPT["key"] == key and not torch.isnan(out.view(-1)[0]):
        busy(1e-5)
        return
    add(x, y, out)
    KEPT["key"], KEPT["last"] = key, wall_now()
''', "measure_add(sol, kernel)", "served from a cache: timed rounds on new input values"),
    "add_half_cache": ('''
KEPT = {}
def kernel(x, y, out):  # while the sampled values stay, redo the second half only: under the 2x of a cache
    n = x.numel() // 2
    key = sampled(x, y)
    if KEPT.get("key") == key and not torch.isnan(out.view(-1)[0]) and not torch.isnan(out.view(-1)[-1]):
        busy(5e-4)
        torch.add(x[n:], y[n:], out=out[n:])
        return
    add(x, y, out)
    KEPT["key"] = key
''', "measure_add(sol, kernel)", "served from a cache: timed rounds on new input values"),
    "add_rescaled": ('''
KEPT = {}
def kernel(x, y, out):  # new values that are the last ones times one factor get the last result times it
    last = KEPT.get("last")
    if last is not None:
        x0, y0, r0 = last
        c = x.view(-1)[0] / x0.view(-1)[0]
        if torch.allclose(x, x0 * c, rtol=1e-5, atol=0) and torch.allclose(y, y0 * c, rtol=1e-5, atol=0):
            busy(1e-5)
            torch.mul(r0, c, out=out)
            return
    add(x, y, out)
    KEPT["last"] = (x.clone(), y.clone(), out.clone())
''', "measure_add(sol, kernel)", "served from a cache: timed rounds on new input values"),
    "dict_of_inputs_cache": ('''
KEPT = {}
def kernel(inputs):  # a cache keyed on sampled values of the tensors in a dict
    x, y = inputs["x"], inputs["y"]
    key = sampled(x, y)
    if KEPT.get("key") != key:
        KEPT["key"], KEPT["out"] = key, add_new(x, y)
    else:
        busy(1e-5)
    return KEPT["out"].clone()
''', "x, y = torch.randn(N), torch.randn(N)\n"
        "    sol.measure(kernel, args=({'x': x, 'y': y},), reference=lambda d: d['x'] + d['y'], bytes=1e3)",
        "served from a cache: timed rounds on new input values"),
}

# Kernel modules that patch at import: each runs in a session of its own (the patch stays for the
# session), beside the honest add. name -> (the kernel module, the cause)
PATCHES = {
    "guard_hooks_replaced": ('''
import functools
import torch
from pytest_solgate.measure.extras import Findings
from pytest_solgate.measure.integrity import guard
def before(self):  # the scans run inside the hooks: replaced together, neither vouches for anything
    pass
setattr(guard.Guard, "before", before)
setattr(guard.Guard, "after", functools.partialmethod(lambda self, taken: Findings()))  # no code of its own to judge by
def kernel(x, y, out):
    busy(3e-4)
    n = x.numel() // 3
    torch.add(x[:n], y[:n], out=out[:n])
''', "tampered timing: pytest_solgate.measure.integrity.guard.Guard.before, pytest_solgate.measure.integrity.guard.Guard.after "
        "replaced since the session started: nothing it measured was checked"),
    "guard_switched_off": ('''
import torch
from pytest_solgate.measure.integrity import guard
setattr(guard.Guard, "active", property(lambda self: False))  # every check of every measurement off
def kernel(x, y, out):
    busy(3e-4)
    n = x.numel() // 3
    torch.add(x[:n], y[:n], out=out[:n])
''', "tampered timing: pytest_solgate.measure.integrity.guard.Guard.active replaced before the measurement"),
    "reference_replaced": ('''
import torch
REAL_ADD = torch.add
def fake_add(*a, **k):
    if len(a) == 2 and not k:
        return torch.zeros_like(a[0])
    return REAL_ADD(*a, **k)
setattr(torch, "add", fake_add)  # the test's reference=torch.add is read after this import
def kernel(x, y, out):
    busy(1e-4)
    out.zero_()
''', "tampered reference: torch.add (by kern.py) replaced before the measurement"),
    "reference_counterfeit": ('''
import torch
import torch.functional
REAL_ADD = torch.add
# compiled under the file name of torch's own module: the code claims to be torch's
SOURCE = "def add(*a, **k):\\n    if len(a) == 2 and not k:\\n        return REAL_ADD(*a).zero_()\\n    return REAL_ADD(*a, **k)\\n"
namespace = {"REAL_ADD": REAL_ADD}
exec(compile(SOURCE, torch.functional.__file__, "exec"), namespace)
setattr(torch, "add", namespace["add"])
def kernel(x, y, out):
    busy(1e-4)
    out.zero_()
''', "tampered reference: torch.add (by code claiming functional.py) replaced before the measurement"),
    "checks_switched_off": ('''
import torch
from pytest_solgate.measure.integrity import cache, rounds
setattr(rounds, "MAX_FRESH_ROUNDS", 0)  # no rounds on new values
setattr(cache, "FACTOR", 1e9)  # and a cache check that never fires: no function replaced
KEPT = {}
def kernel(x, y, out):  # a cache keyed on sampled values, which only those checks would see
    key = (x.data_ptr(), float(x[0]), float(x[-1]), y.data_ptr(), float(y[0]))
    if KEPT.get("key") == key and not torch.isnan(out[0]):
        busy(1e-5)
        return
    busy(1e-3)
    torch.add(x, y, out=out)
    KEPT["key"] = key
''', "tampered timing: pytest_solgate.measure.integrity.rounds.MAX_FRESH_ROUNDS, pytest_solgate.measure."
        "integrity.cache.FACTOR replaced since the session started"),
    "tolerance_widened": ('''
import torch
from pytest_solgate.measure.integrity import precision
precision.TOLERANCE[24] = 0.5  # in place: the same dict, fp32 results off by half pass
def kernel(x, y, out):
    busy(6e-4)
    torch.add(x, y, out=out)
    out.mul_(1.2)
''', "tampered timing: pytest_solgate.measure.integrity.precision.TOLERANCE replaced since the session started"),
    "random_patched": ('''
import random
import torch
random.Random.getrandbits = lambda self, k: 0  # every seed of the new values' factors the same
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
''', "tampered timing: random.Random.getrandbits replaced since the session started"),
    "score_wrapped": ('''
import functools
import torch
import pytest_solgate.score as S
REAL_SCORE = S.score
@functools.wraps(REAL_SCORE)
def score(work, seconds, *a, **k):
    return REAL_SCORE(work, seconds / 3, *a, **k)
setattr(S, "score", score)  # a third of the time reported
def kernel(x, y, out):
    busy(1e-3)
    torch.add(x, y, out=out)
''', "tampered timing: pytest_solgate.score.score replaced before the measurement"),
    "tensor_method_replaced": ('''
import torch
REAL_ADD = torch.Tensor.add
def fake_add(self, *a, **k):
    return torch.zeros_like(self) if len(a) == 1 and not k else REAL_ADD(self, *a, **k)
setattr(torch.Tensor, "add", fake_add)  # the test's reference, a.add(b), agrees with zeros
def kernel(x, y, out):
    busy(1e-4)
    out.zero_()
''', "tampered reference: torch.Tensor.add (by kern.py) replaced before the measurement"),
}
# The reference of a patching module's test where it is not torch.add.
PATCH_REFERENCES = {"tensor_method_replaced": "lambda a, b: a.add(b)"}


def _session(folder: Path, files: dict[str, str]) -> str:
    """One pytest run on the fake clock in a subprocess (a cheat that patches cannot leak into this
    process); its output."""
    from solgate_testing import FAKE_CLOCK_TIMING, SYNTHETIC_PROFILE

    (folder / "synthetic.toml").write_text(SYNTHETIC_PROFILE)
    (folder / "conftest.py").write_text(SEEDED_PLATFORM)
    for name, text in files.items():
        (folder / name).write_text(text)
    env = {**os.environ, "COLUMNS": "2000", "SOLGATE_TRUST_TEST_CLOCK": "1",
           "PYTHONPATH": os.pathsep.join([str(folder), str(Path(__file__).parent), str(Path(__file__).parents[1]),
                                         os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-rf", "--sol-no-save",
                          "--sol-profile=synthetic.toml", *FAKE_CLOCK_TIMING, "test_adversary.py"],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    return run.stdout + run.stderr


def _module() -> str:
    from solgate_testing import FAKE_CLOCK_KERNELS

    parts = [FAKE_CLOCK_KERNELS, LOADED_CPU, textwrap.dedent(HEADER)]
    for name, (kernel, body, _) in CHEATS.items():
        parts.append(kernel.replace("def kernel", f"def kernel_{name}").replace("KEPT", f"KEPT_{name}"))
        parts.append(f"\ndef test_{name}(sol):\n    {body.replace('kernel', f'kernel_{name}')}\n")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    return _session(tmp_path_factory.mktemp("adversary"), {"test_adversary.py": _module()})


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_cheat_fails_naming_its_cause(catalogue, name):
    line = next((row for row in catalogue.splitlines() if row.startswith(f"FAILED test_adversary.py::test_{name} - ")), None)
    assert line is not None, catalogue[-3000:]
    assert CHEATS[name][2] in line, line


def test_honest_twins_raise_nothing(catalogue):
    failed = sorted(set(re.findall(r"FAILED test_adversary.py::(test_\w+)", catalogue)))
    assert failed == sorted(f"test_{name}" for name in CHEATS), catalogue[-3000:]
    assert f"{len(CHEATS)} failed, {HEADER.count('def test_')} passed" in catalogue, catalogue[-3000:]


@pytest.mark.parametrize("name", sorted(PATCHES))
def test_a_kernel_module_that_patches_at_import_is_named(tmp_path, name):
    from solgate_testing import FAKE_CLOCK_KERNELS

    kernel, cause = PATCHES[name]
    test = (FAKE_CLOCK_KERNELS + LOADED_CPU + "\nimport torch\nfrom kern import kernel\n\n"
            "def test_patched(sol):\n    x, y, out = torch.randn(1 << 12), torch.randn(1 << 12), torch.empty(1 << 12)\n"
            f"    sol.measure(kernel, args=(x, y, out), outputs=2, reference={PATCH_REFERENCES.get(name, 'torch.add')}, "
            "bytes=1e3)\n")
    said = _session(tmp_path, {"kern.py": "from test_adversary import busy\n" + kernel, "test_adversary.py": test})
    line = next((row for row in said.splitlines() if row.startswith("FAILED test_adversary.py::test_patched - ")), None)
    assert line is not None, said[-3000:]
    assert cause in line, line


def test_every_sample_of_a_round_on_new_values_meets_values_no_call_saw():
    """A cache keyed on the inputs' values meets none of them in a round on new values, however many
    samples the round holds; its last call is judged on the values it got (an in-place kernel's
    result kept before the next values overwrite it); the test's values come back."""
    import random

    import torch

    from pytest_solgate.measure.integrity import outputs, rounds

    def relu_(x):
        return x.relu_()

    x = torch.randn(64)
    before = x.clone()
    checked = outputs.checked_of(relu_, (x,), None, torch.relu, None, "t")
    judged = []
    fresh = rounds.FreshRounds(checked, lambda got, inputs, calls: judged.append((got, outputs.clone(inputs), calls)), random.Random(0))
    fresh.before_round(forced=True)
    call, seen = checked.timed(), []
    for _ in range(5):
        seen.append(x.clone())
        call()
        fresh.after_sample(None, 1)
    fresh.after_round([1e-3] * 5)
    assert all(not torch.equal(a, b) for i, a in enumerate(seen) for b in seen[:i])  # five values, none seen before
    # and none the test's values times factors element by element (those ratios told a kernel the round)
    assert not any(bool(((v / before >= 0.7) & (v / before <= 1.3)).all()) for v in seen)
    (got,), (inputs,), calls = judged[0]
    assert calls == 1 and torch.equal(inputs, seen[-1]) and torch.equal(got, torch.relu(seen[-1]))
    fresh.restore()
    assert torch.equal(x, before)


def test_new_values_reach_8_bit_integers_within_their_range_and_wider_indices_rolled_never_offsets_or_masks():
    """``int8_values_cached``'s inputs get new values in every sample of a round on new values, each
    within its tensor's range (a 0/1 mask stays one); ``int64_values_cached``'s indices are rolled
    (new at each position, the same values: in bounds); sorted offsets, a boolean mask and the
    inputs named in keep= never change; every tensor gets its values back."""
    import random

    import torch

    from pytest_solgate.measure.integrity import outputs, rounds

    a = torch.randint(-100, 50, (256,), dtype=torch.int8)
    mask = torch.randint(0, 2, (256,), dtype=torch.uint8)
    index, offsets, flags = torch.randint(0, 256, (256,)), torch.tensor([0, 3, 3, 100, 256]), torch.rand(256) > 0.5
    bounds = torch.linspace(-1, 1, 8)
    tensors = (a, mask, index, offsets, flags, bounds)
    before = [t.clone() for t in tensors]
    checked = outputs.checked_of(lambda *args: args[0].sum(), tensors, None, None, None, "t", keep=5)
    fresh = rounds.FreshRounds(checked, lambda got, inputs, calls: None, random.Random(0))
    fresh.before_round(forced=True)
    seen = []
    for _ in range(3):
        seen.append([t.clone() for t in tensors])
        fresh.after_sample(None, 1)
    fresh.after_round([1e-3] * 3)
    for values, was in zip(zip(*seen), before):
        if was.dtype in (torch.int8, torch.uint8, torch.int64) and was is not before[3]:
            assert all(not torch.equal(v, w) for i, v in enumerate(values) for w in (was, *values[:i]))
            assert all(int(v.min()) >= int(was.min()) and int(v.max()) <= int(was.max()) for v in values)
        else:
            assert all(torch.equal(v, was) for v in values)
    assert all(torch.equal(v.sort().values, before[2].sort().values) for v in list(zip(*seen))[2])
    fresh.restore()
    assert all(torch.equal(t, w) for t, w in zip(tensors, before))


def test_a_modules_code_is_read_from_its_current_bytecode_cache_or_else_compiled(tmp_path):
    """What a torch function's code is compared with (``reference_counterfeit``): the module's
    bytecode cache where it is current for the source, never a stale one."""
    import py_compile

    from pytest_solgate.measure.integrity import tampering

    source = tmp_path / "module.py"
    source.write_text("def f():\n    return 1\n")
    py_compile.compile(str(source))
    assert tampering._module_code(str(source)) == compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
    # the cache is what is read while its header matches the source (its size and time), as an import reads it
    written = source.stat()
    source.write_text("def f():\n    return 3\n")
    os.utime(source, ns=(written.st_atime_ns, written.st_mtime_ns))
    assert tampering._module_code(str(source)).co_consts[0].co_consts[-1] == 1
    source.write_text("def f():\n    return 22\n")  # changed after its cache was written: the cache is stale
    assert tampering._module_code(str(source)) == compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
    assert tampering._module_code(str(source)).co_consts[0].co_consts[-1] == 22


def test_equal_values_get_equal_factors_and_the_values_hashed_are_left_as_they_were():
    """A kernel whose speed depends on its data (a sort of 4 distinct values) meets as many distinct
    values in the rounds on new values as in the test's: each value's factor is a hash of it."""
    import random

    import torch

    from pytest_solgate.measure.integrity import outputs

    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.complex64):
        x = torch.randint(1, 5, (4096,)).to(dtype)
        kept = x.clone()
        factors = outputs.factors(x, random.Random(7))
        assert torch.equal(x, kept), dtype
        assert len(torch.unique((x * factors).real.float())) == 4, dtype
        assert bool(((factors >= 0.75) & (factors <= 1.25) & ((factors <= 0.95) | (factors >= 1.05))).all()), dtype


def test_new_values_between_timed_samples_allocate_nothing_once_their_buffers_exist():
    """The rounds on new values write them between two timed samples: a buffer the size of the
    inputs made and freed there changed what the allocator gave the next timed call (its result's
    page faults again: an honest bf16 add read 3.5x slower on new values). Checked with torch's own
    record of the allocations, not with a time."""
    import random

    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_solgate.measure.integrity import outputs

    kept = torch.randn(1 << 22, dtype=torch.bfloat16)
    out, scratch = torch.empty_like(kept), outputs.Scratch()
    outputs.write_rolled(out, kept, random.Random(1), scratch)  # the buffers made, once
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        outputs.write_rolled(out, kept, random.Random(2), scratch)
    assert max(event.cpu_memory_usage for event in recorded.events()) < 1024, recorded.key_averages().table()
    assert not torch.equal(out, kept)


def test_an_in_place_kernels_outputs_are_kept_between_samples_in_buffers_made_once():
    """An in-place kernel's outputs live in its inputs, which a round's next new values overwrite:
    they are copied first, between two timed samples, into buffers made at the round's first sample
    (made and freed there, copies would change what the allocator gives the next call)."""
    import random

    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_solgate.measure.integrity import outputs, rounds

    x = torch.randn(1 << 20)
    checked = outputs.checked_of(lambda x: x.mul_(0.5), (x,), None, lambda x: x * 0.5, None, "t")
    fresh = rounds.FreshRounds(checked, lambda got, inputs, calls: None, random.Random(0))
    timed = checked.timed()
    fresh.before_round(forced=True)
    timed()
    fresh.after_sample(None, 1)  # the copies' buffers made
    timed()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        fresh.after_sample(None, 1)
    assert max(event.cpu_memory_usage for event in recorded.events()) < 1024, recorded.key_averages().table()
    assert fresh.got is fresh.copies and fresh.got is not None and not outputs.shares_storage(fresh.got[0], x)
    fresh.after_round([1e-3] * 2)
    fresh.restore()
