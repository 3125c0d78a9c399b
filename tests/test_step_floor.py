"""A step's cache-aware floor, the noise its records carry, and the words they are said in (issue 43,
docs/steps.md "Which floor each row uses").

The arithmetic runs on made-up readings against a synthetic profile; the models of a new user (a
2-layer MLP, a small decoder block, a GELU written op by op) run for real, against this CPU's own
calibration, as a user's first run does.
"""

import dataclasses
import json
import math
import shutil

import pytest

from pytest_solgate.declare.profiles import CacheLevel, load_profile, parse_profile, profile_to_toml
from pytest_solgate.judge import verdict_wording
from pytest_solgate.measure import step_profile
from pytest_solgate.measure.step_profile import OperatorWork, RunReading, StepProfile
from pytest_solgate.score import step_breakdown
from pytest_solgate.support import units
from pytest_solgate.support.errors import ProfileError
from solgate_testing import FAST_TIMING, SYNTHETIC_PROFILE

# 1 GB/s DRAM, a 1 kB L1 at 100 GB/s, a 1 MB L2 at 10 GB/s.
CACHED_PROFILE = SYNTHETIC_PROFILE + """
[cache.L1]
size_mb = 0.001
bandwidth_gbps = 100

[cache.L2]
size_mb = 1
bandwidth_gbps = 10
source = "tests"
"""


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "cached.toml"
    path.write_text(CACHED_PROFILE)
    return load_profile(path)


def profiled(runs, work):
    return StepProfile(runs=tuple(runs), work=work, device="cpu", mode="profiler-cpu", warmup_calls=1,
                       started_at=0.0, finished_at=1.0)


def test_a_profile_holds_its_cache_levels_smallest_first_and_writes_them_back(profile, tmp_path):
    assert [(c.name, c.size_bytes, c.bandwidth) for c in profile.caches] == [("L1", 1e3, 100e9), ("L2", 1e6, 10e9)]
    again = tmp_path / "again.toml"
    again.write_text(profile_to_toml(profile))
    assert load_profile(again).caches == profile.caches
    assert load_profile(again).ceilings_id == profile.ceilings_id  # a kernel's floor is DRAM's: its id is unchanged
    with pytest.raises(ProfileError, match=r"missing field 'cache.L3.bandwidth_gbps'"):
        parse_profile({"id": "x", "name": "x", "kind": "cpu", "memory_bandwidth_gbps": 1, "peak_tflops": {"fp32": 1},
                       "cache": {"L3": {"size_mb": 32}}}, "x.toml")


def test_each_operator_is_held_against_the_level_its_working_set_fits_in_and_the_row_names_it(profile):
    mul, big, mm = ("aten::mul", "MLP"), ("aten::add", "MLP"), ("aten::mm", "MLP")
    work = {mul: OperatorWork(bytes=2e5),  # 100 kB a call over 2 calls: fits L2
            big: OperatorWork(bytes=4e6),  # 4 MB in one call: DRAM
            mm: OperatorWork(flops={"fp32": 1e3}, bytes=500)}  # 500 B: fits L1, but its FLOPs take longer
    run = RunReading(seconds=10e-3, operators={mul: 1e-4, big: 5e-3, mm: 2e-6}, calls={mul: 2, big: 1, mm: 1}, idle=0.0)
    ops = {op.operator: op for op in step_breakdown.score_step(profiled([run], work), profile).operators}
    assert (ops["aten::mul"].level, ops["aten::mul"].floor, ops["aten::mul"].t_sol) == ("L2", "L2-bound", pytest.approx(2e5 / 10e9))
    assert (ops["aten::add"].floor, ops["aten::add"].t_sol) == ("DRAM-bound", pytest.approx(4e6 / 1e9))
    assert ops["aten::mm"].floor == "compute-bound"
    # A small level that measured slower than the next one (a few-kB torch call is mostly dispatch)
    # takes the larger level's roof: a level's floor is never above a larger level's.
    slow_l1 = profile.__class__(**{**profile.__dict__, "caches": (CacheLevel("L1", 0.001, 0.5), *profile.caches[1:])})
    assert step_breakdown.memory_level(500, slow_l1) == ("L1", 10e9)
    assert step_breakdown.memory_level(500, profile.__class__(**{**profile.__dict__, "caches": ()})) == ("DRAM", 1e9)


def test_allocations_move_no_bytes_and_an_overwritten_argument_is_written_once():
    import torch

    x = torch.ones(1024)
    assert step_profile.moved_bytes(torch.ops.aten.empty_like.default, (x,), {}, torch.empty_like(x)) == 0
    assert step_profile.moved_bytes(torch.ops.aten.copy_.default, (x, x.clone()), {}, x) == 2 * 4096
    assert step_profile.moved_bytes(torch.ops.aten.add.Tensor, (x, x), {}, x + x) == 3 * 4096


def test_an_operators_noise_is_that_of_the_faster_half_mean_the_gate_compares():
    # Step times rank the runs; the operator is bimodal (page faults on fresh buffers in a quarter
    # of the runs), and its slow mode sits in the slower runs: the mean over the faster half is steady.
    step = [1.0 + 0.001 * i for i in range(20)]
    op = [0.10 + 0.0001 * (i % 3) if i < 15 else 0.30 for i in range(20)]
    faster = step_profile.faster_half_noise(step, op)
    assert faster < 0.01 and faster == step_profile.faster_half_noise(step, op)  # steady, and the same every time
    from pytest_solgate.support import stats
    assert stats.relative_half_width(op) > 0.5  # what the record carried before: the whole bimodal spread
    assert math.isinf(step_profile.faster_half_noise(step[:5], op[:5]))


def test_steps_run_until_their_noise_meets_the_target_after_the_min_time_within_the_max_time():
    ticks = iter(range(10**6))
    clock = lambda: next(ticks) * 0.01  # noqa: E731  every reading of the clock 10 ms on

    def runs(**options):
        return len(step_profile.profile_step(lambda: None, "cpu", clock=clock, **options).runs)

    assert runs(max_time=100.0, noise=math.inf) == step_profile.MIN_RUNS  # steady at once: one block
    assert runs(max_time=100.0, noise=math.inf, min_time=0.5) > step_profile.MIN_RUNS  # --sol-min-time is read
    assert runs(max_time=0.0, noise=0.0) == step_profile.MIN_RUNS  # out of time after the first block
    steady = [RunReading(1.0, {("aten::mul", ""): 0.5}, {}, 0.0)] * 6
    assert step_profile.steady(steady, 0.001, step_profile.stalled(steady))
    unsteady = [*steady[:5], RunReading(1.0, {("aten::mul", ""): 0.9}, {}, 0.0)]
    assert not step_profile.steady(unsteady, 0.001, step_profile.stalled(unsteady))


def test_a_step_whose_faster_half_would_hold_stalled_runs_samples_on_within_a_stretched_budget():
    # A busy machine preempts the step's thread mid-operator: in the first block four runs of six
    # stalled, each in another operator, so the faster half would hold stalled runs.
    ticks = iter(range(10**6))
    clock = lambda: next(ticks) * 0.01  # noqa: E731  every reading of the clock 10 ms on
    clean = RunReading(1.0, {(op, ""): 0.1 for op in "abcd"}, {}, 0.0)
    first = [RunReading(1.0, {**clean.operators, (op, ""): 1.0}, {}, 0.0) for op in "abcd"] + [clean, clean]
    assert not step_profile.clean_half(step_profile.stalled(first))
    assert step_profile.clean_half(step_profile.stalled(first + [clean] * 3))

    def taken(blocks):
        read = lambda timing: next(blocks)  # noqa: E731  a block's runs, as a profiler session would give them
        return step_profile.profile_step(lambda: None, "cpu", 0.005, clock=clock, noise=math.inf, read=read).runs

    # 10 ms for the first block: over the 5 ms budget, within three of them: one more block, then clean.
    assert len(taken(iter([first, [clean] * 3]))) == 9
    # stalled in every block: it stops at three budgets, not at MAX_RUNS
    assert len(taken(iter([first] * 10))) == 12


def test_a_steps_reason_names_the_peak_its_mfu_is_taken_against():
    from test_steps import step_records

    load = tmp_profile()
    step = step_records(load)[0]
    # mm: 400 kFLOP fp32 in a 3.5 ms step on a 1 GFLOP/s profile: MFU 11.4 %.
    assert verdict_wording.describe(step).startswith("114 MFLOP/s of the 1 GFLOP/s fp32 peak (MFU 11.4%)")


def tmp_profile():
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "synthetic.toml"
    path.write_text(SYNTHETIC_PROFILE)
    return load_profile(path)


def test_the_json_writes_kind_as_the_docs_say_and_reads_the_old_class():
    op = step_breakdown.OperatorScore("aten::mul", "", "elementwise", 1, 1e-6, (1e-6,), {}, 8.0, 8e-9, 0.008, 1e-6, "memory",
                               level="L1", noise=0.01)
    data = op.to_dict()
    assert data["kind"] == "elementwise" and "class" not in data and data["floor"] == "L1-bound"
    assert step_breakdown.OperatorScore.from_dict(data) == op
    legacy = {k: v for k, v in data.items() if k not in ("kind", "level", "noise")} | {"class": "copies"}
    assert step_breakdown.OperatorScore.from_dict(legacy).kind == "copies"


def test_negative_times_print_in_human_units():
    assert units.seconds(-5.32e-6) == "-5.32 us" and units.seconds(-1.75e-3) == "-1.75 ms"


# --- a new user's models, out of the box ---------------------------------------------------------

MODELS = '''
import pytest
import torch

torch.manual_seed(0)
torch.set_num_threads(1)


class MLP(torch.nn.Module):
    def __init__(self, width=256, hidden=1024):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) + 1)


class Block(torch.nn.Module):
    """A pre-norm decoder block: causal attention, an MLP, two LayerNorms, residuals."""

    def __init__(self, width=128, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = MLP(width, 4 * width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class GeluByHand(torch.nn.Module):
    """An MLP whose GELU is six element-wise ops (the tanh approximation, written out)."""

    def __init__(self, width=256, hidden=1024):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(width, hidden), torch.nn.Linear(hidden, width)

    def forward(self, x):
        h = self.fc1(x)
        inner = (h + 0.044715 * torch.pow(h, 3)) * 0.7978845608
        return self.fc2(0.5 * h * (1 + torch.tanh(inner)))


def highest_sol(m):
    return max(m.step.operators, key=lambda op: op.sol)


def test_mlp(sol):
    net = MLP().eval()
    with torch.inference_mode():
        m = sol.measure_step(lambda: net(X), name="mlp")
    assert highest_sol(m).sol <= 1 and min(op.lost for op in m.step.operators) >= 0, highest_sol(m)


def test_decoder_block(sol):
    block, x = Block().eval(), torch.randn(4, 64, 128)
    with torch.inference_mode():
        m = sol.measure_step(lambda: block(x), name="block")
    assert highest_sol(m).sol <= 1 and min(op.lost for op in m.step.operators) >= 0, highest_sol(m)


def test_gelu_by_hand(sol):
    net = GeluByHand().eval()
    with torch.inference_mode():
        m = sol.measure_step(lambda: net(X), name="gelu")
    gelu_ops = {"aten::pow", "aten::mul", "aten::add", "aten::tanh"}
    top = [op.operator for op in m.step.operators[:3]]
    assert gelu_ops & set(top), [(op.label, op.lost, op.floor) for op in m.step.operators]


X = torch.randn(256, 256)  # a hidden activation of 1 MiB: past L2, in L3
'''


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """This CPU's calibration with its cache levels, measured once for the module (each test's user
    cache is its own: conftest.py), as a user's first run measures it."""
    import os

    import torch

    from pytest_solgate.measure import calibrate

    folder = tmp_path_factory.mktemp("user-cache")
    saved = os.environ.get("SOLGATE_CACHE_DIR")
    os.environ["SOLGATE_CACHE_DIR"] = str(folder)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as MODELS runs (the thread count is in the CPU's fingerprint: else the run calibrates its own)
    try:
        measured = calibrate.cpu_caches(calibrate.cpu_profile(folder, lambda text: None), lambda text: None)
        # The compute roofs are not this test's subject (its subject is the memory levels), and on a
        # loaded 2-core VM a matmul peak measured in a slow phase let a linear layer read SOL 1.98:
        # they are set far above this CPU's, the bandwidths kept as measured.
        calibrate.write_profile(calibrate.cpu_profile_path(folder, measured.id.removeprefix("cpu-")),
                                dataclasses.replace(measured, peak_tflops={k: 10.0 for k in measured.peak_tflops}))
    finally:
        torch.set_num_threads(threads)
        if saved is None:
            os.environ.pop("SOLGATE_CACHE_DIR", None)
        else:
            os.environ["SOLGATE_CACHE_DIR"] = saved
    return folder


def test_a_plain_mlp_a_decoder_block_and_a_gelu_by_hand_pass_out_of_the_box(pytester, calibrated, monkeypatch):
    cache = pytester.path / "user-cache"
    shutil.copytree(calibrated, cache)
    monkeypatch.setenv("SOLGATE_CACHE_DIR", str(cache))
    pytester.makepyfile(test_models=MODELS)
    result = pytester.runpytest(*FAST_TIMING, "--sol-json=out.json", "--sol-no-save", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    data = json.loads((pytester.path / "out.json").read_text())
    steps = [m for m in data["measurements"] if m.get("step")]
    assert len(steps) == 3
    for step in steps:
        for op in step["step"]["operators"]:
            assert op["sol"] <= 1 and op["lost"] >= 0, op
            assert op["floor"].endswith("-bound"), op
    assert any(op["floor"] in ("L1-bound", "L2-bound") for step in steps for op in step["step"]["operators"])


def test_this_cpus_cache_levels_are_measured_once_a_process_and_scoring_writes_no_cache(tmp_path, profile):
    import torch

    from pytest_solgate.measure import calibrate

    key = calibrate.fingerprint_key(calibrate.cpu_fingerprint(torch))
    levels = (CacheLevel("L1", 0.032768, 50.0, "fake"), CacheLevel("L2", 1.04858, 40.0, "fake"))
    mine = dataclasses.replace(profile, id=f"cpu-{key}", caches=())
    seen: dict = {}
    measured = calibrate.cpu_caches(mine, lambda text: None, measure=lambda torch: levels, measured=seen)
    assert measured.caches == levels
    # Scoring a step writes nothing to the user's cache (a calibration caches the levels).
    assert not calibrate.cpu_profile_path(calibrate.user_cache_dir(), key).exists()
    # Measured once: a profile with its levels, or one that is not this CPU's calibration, is kept as it is.
    refuse = lambda torch: pytest.fail("measured again")  # noqa: E731
    assert calibrate.cpu_caches(mine, lambda text: None, measure=refuse, measured=seen).caches == levels
    assert calibrate.cpu_caches(measured, lambda text: None, measure=refuse) is measured
    synthetic = dataclasses.replace(profile, caches=())
    assert calibrate.cpu_caches(synthetic, lambda text: None, measure=refuse) is synthetic
