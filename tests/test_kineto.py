"""Issue 43 item 5: steps scored from PyTorch profiler traces recorded by others on real GPUs
(tests/data/traces/README.md: NVIDIA A100s and an AMD MI250, from HolisticTraceAnalysis's test data).

Each real trace's reading is checked against sums the test makes itself from the raw JSON: every
kernel, copy and memset given to the outermost operator on the thread that launched it, at the time
it launched (found through the ac2g flow arrow where the trace has one, else the runtime call with
its correlation id). The command is run by its entry function (`solgate step`'s main), once as a process.
"""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from fake_gpu import FakeGpu, cuda_backend, quick

from pytest_solgate.declare.profiles import find_profile
from pytest_solgate.measure import kernel_trace, kineto
from pytest_solgate.measure.sampling import KERNEL_TIMESTAMPS, take_timing
from pytest_solgate.score.step_breakdown import score_step
from solgate_command import solgate_main, solgate_process

TRACES = Path(__file__).parent / "data" / "traces"
GPU_TRACES = ["amd_mi250_train.json.gz", "a100_multi_stream.json.gz", "a100_graphs_rank0.json.gz",
              "ranks/rank-0.json.gz", "ranks/rank-1.json.gz"]
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
BACKWARD = "autograd::engine::evaluate_function: "


def raw(name):
    with gzip.open(TRACES / name, "rt") as f:
        return json.load(f)["traceEvents"]


def solgate(*args, cwd=None):
    """``solgate ARGS`` by its entry function in this process (tests/solgate_command.py): no
    interpreter, torch and ruptures import per command. test_the_command_has_help... starts one
    process, as a user does."""
    return solgate_main(*args, cwd=cwd)


def is_operator(name):
    return name.startswith(BACKWARD) or ("::" in name and not name.startswith(("autograd::", "cuda")))


def expected_device_time(events):
    """Seconds of device activity per top operator, from the raw events alone: each activity's
    launch (flow start, else runtime call by correlation id) inside a ProfilerStep range (or any),
    given to the outermost operator range on the launch's thread that holds it."""
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    flows = {e["id"]: (e["pid"], e["tid"], e["ts"]) for e in events if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    calls = {e["args"]["correlation"]: (e["pid"], e["tid"], e["ts"]) for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and is_operator(e["name"])]
    total = {}
    for activity in (e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE):
        where = flows.get(activity["args"]["correlation"]) or calls.get(activity["args"]["correlation"])
        if where is None:
            continue  # launched before the trace began: no operator's
        pid, tid, at = where
        if steps and not any(start <= at < end for start, end in steps):
            continue
        holding = [op for op in ops if (op["pid"], op["tid"]) == (pid, tid) and op["ts"] <= at < op["ts"] + op["dur"]]
        outermost = min(holding, key=lambda op: (op["ts"], -op["dur"]))["name"] if holding else None
        name = outermost[len(BACKWARD):] if outermost and outermost.startswith(BACKWARD) else outermost
        total[name] = total.get(name, 0.0) + activity["dur"] * 1e-6
    return total


def read(name, profile="a100-sxm4-80gb"):
    trace = kineto.load(TRACES / name)
    measured = kineto.profile_trace(trace)
    return trace, measured, score_step(measured, find_profile(profile))


@pytest.mark.parametrize("name", GPU_TRACES)
def test_each_operators_kernel_time_is_the_sum_of_the_kernels_it_launched(name):
    expected = expected_device_time(raw(name))
    trace, measured, breakdown = read(name)
    assert measured.mode == "trace-kernels"
    got = {}
    for run in measured.runs:
        for (operator, _), seconds in run.operators.items():
            operator = operator if is_operator(operator) or operator in {k for k in expected if k} else None
            got[operator] = got.get(operator, 0.0) + seconds
    unattributed = got.pop(None, 0.0)  # launches with no operator around them are named by their launch
    assert unattributed == pytest.approx(expected.pop(None, 0.0), abs=1e-12)
    assert {k for k, v in got.items() if v > 0} == {k for k, v in expected.items() if v > 0}
    for operator, seconds in expected.items():
        assert got[operator] == pytest.approx(seconds, rel=1e-9), operator


@pytest.mark.parametrize("name", GPU_TRACES)
def test_idle_is_the_span_no_activity_covers_and_the_sum_holds(name):
    trace, measured, breakdown = read(name)
    (run,) = measured.runs  # each real trace here holds one step that ran operators
    assert 0 <= breakdown.idle_share < 1
    covered = sum(run.operators.values()) - run.overlap
    # To a ns per activity: a float of us at epoch-sized timestamps holds about 1 ns
    assert run.idle == pytest.approx(run.seconds - covered, abs=1e-9 * len(trace.activities))
    assert abs(breakdown.identity_gap) * breakdown.seconds < 1e-9 * len(trace.activities)
    lost = [op.lost for op in breakdown.operators]
    assert lost == sorted(lost, reverse=True)


def test_kernels_of_several_streams_at_once_are_overlap():
    events = raw("ranks/rank-0.json.gz")
    streams = {e["args"]["stream"] for e in events if e.get("cat") == "kernel"}
    trace, measured, breakdown = read("ranks/rank-0.json.gz")
    assert len(streams) == 4 and trace.rank == 0
    assert breakdown.overlap > 0.001  # NCCL and compute streams ran together
    assert read("ranks/rank-1.json.gz")[0].rank == 1


def test_a_cuda_graph_replay_is_the_launching_ranges_whole():
    """A100, torch.compile with CUDA graphs: every activity of a cudaGraphLaunch carries its
    correlation id. The forward's 7 launches have no operator around them (CompiledFunction is an
    autograd Function's range): their replays are the launch's own, named with that range, one call
    per launch; the backward's 7 are inside the autograd node CompiledFunctionBackward, its time."""
    events = raw("a100_graphs_rank0.json.gz")
    launches = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    forward = {e["args"]["correlation"] for e in launches if e["tid"] == 4515}
    replayed = [e for e in events if e.get("cat") in DEVICE and e["args"]["correlation"] in forward]
    assert len(launches) == 14 and len(forward) == 7 and len(replayed) > len(forward)
    trace, measured, breakdown = read("a100_graphs_rank0.json.gz")
    (graph,) = [op for op in breakdown.operators if op.operator == "cudaGraphLaunch"]
    assert graph.label == "cudaGraphLaunch in CompiledFunction" and graph.calls == 7
    assert graph.seconds == pytest.approx(sum(e["dur"] for e in replayed) * 1e-6, rel=1e-9)
    backward = {e["args"]["correlation"] for e in launches} - forward
    replayed_backward = sum(e["dur"] for e in events if e.get("cat") in DEVICE and e["args"]["correlation"] in backward)
    (node,) = [op for op in breakdown.operators if op.operator == "CompiledFunctionBackward"]
    assert node.seconds >= replayed_backward * 1e-6 > 0
    assert trace.device_name == "NVIDIA A100-SXM4-80GB"


def test_flops_and_mfu_come_from_the_recorded_shapes_on_the_amd_trace():
    """The MI250 toy step: a Linear(128, 128) on a 5 x 128 batch, forward and backward."""
    trace, measured, breakdown = read("amd_mi250_train.json.gz", "mi250x")
    by_name = {op.operator: op for op in breakdown.operators}
    assert by_name["aten::linear"].flops == {"fp32": 2 * 5 * 128 * 128}  # counted at its aten::addmm
    assert by_name["AddmmBackward0"].flops == {"fp32": 2 * 128 * 5 * 128}  # the weight's gradient, an mm
    profile = find_profile("mi250x")
    assert breakdown.mfu == pytest.approx(2 * 2 * 5 * 128 * 128 / (breakdown.seconds * profile.peak_flops("fp32")))
    assert by_name["aten::relu"].bytes == 2 * 5 * 128 * 4  # reads its input, writes as much
    assert any("ran no operator" in note for note in breakdown.notes)  # ProfilerStep#2, where the profiler stopped


def test_the_cpu_side_reading_when_the_trace_has_no_kernels():
    """A step of operators only (a GPU job's trace with its device events taken out): each top
    operator's time is its ranges', idle the step no top operator covers, FLOPs from the shapes."""
    events = raw("cpu_ops_no_kernels.json.gz")
    (step,) = [e for e in events if e["name"].startswith("ProfilerStep#")]
    ops = sorted((e for e in events if e["cat"] == "cpu_op" and step["ts"] <= e["ts"] < step["ts"] + step["dur"]),
                 key=lambda e: (e["ts"], -e["dur"]))
    tops, end = [], -math.inf
    for op in ops:
        if is_operator(op["name"]) and op["ts"] >= end:
            tops.append(op)
            end = op["ts"] + op["dur"]
    linear = sum(e["dur"] for e in tops if e["name"] == "aten::linear") * 1e-6
    inside_linear = [e for e in ops if e["name"] in ("aten::addmm", "aten::mm") and any(
        t["name"] == "aten::linear" and t["ts"] <= e["ts"] < t["ts"] + t["dur"] for t in tops)]
    trace, measured, breakdown = read("cpu_ops_no_kernels.json.gz")
    (run,) = measured.runs
    assert measured.mode == "trace-cpu" and sum(run.calls.values()) == len(tops)
    assert run.operators[("aten::linear", "")] == pytest.approx(linear, rel=1e-9)
    assert run.idle == pytest.approx(step["dur"] * 1e-6 - sum(e["dur"] for e in tops) * 1e-6, rel=1e-9)
    flops = 0
    for call in inside_linear:  # 2 m k n of each (bias,) a, b
        a, b = [d for d in call["args"]["Input Dims"] if len(d) == 2][-2:]
        flops += 2 * a[0] * a[1] * b[1]
    assert flops > 0 and breakdown.operators[[op.operator for op in breakdown.operators].index("aten::linear")].flops == {
        "fp32": pytest.approx(flops)}


def test_a_step_with_no_operator_is_all_idle():
    trace, measured, breakdown = read("cpu_only_rank34.json.gz")
    assert trace.rank == 34 and breakdown.operators == () and breakdown.idle_share == 1.0


def test_a_trace_without_shapes_is_ranked_by_time_and_says_so():
    trace, measured, breakdown = read("a100_multi_stream.json.gz")
    (matmul,) = breakdown.operators
    assert matmul.operator == "aten::matmul" and matmul.calls == 3 and matmul.t_sol == 0
    assert any("record_shapes=True" in note for note in breakdown.notes)
    assert any("whole trace is read as one step" in note for note in breakdown.notes)


def test_a_trace_recorded_here_reads_as_measure_step_reads_the_profile(tmp_path):
    """The same runs seen twice: kineto's JSON export read by this reader, and the profiler's own
    events read by measure/step_profile.py (its ranges: solgate:step, solgate:module:): the same runs,
    top operators, modules, calls and times (to the export's ns), and the counted FLOPs."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.measure import step_profile

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with step_profile._ModuleRanges():
            for _ in range(2):
                with torch.profiler.record_function(step_profile.STEP_RANGE):
                    model(x)
    prof.export_chrome_trace(str(tmp_path / "here.json"))
    expected = step_profile.read_runs(prof.events(), on_gpu=False)
    measured = kineto.profile_trace(kineto.load(tmp_path / "here.json"), step_profile.STEP_RANGE, step_profile.MODULE_RANGE)
    assert len(measured.runs) == len(expected) == 2
    for run, seen in zip(measured.runs, expected):
        assert run.calls == seen.calls and ("aten::linear", "Sequential.0") in run.calls
        for key, seconds in seen.operators.items():
            assert run.operators[key] == pytest.approx(seconds, abs=2e-9)
        assert run.idle == pytest.approx(seen.idle, abs=1e-7)
    assert measured.work[("aten::linear", "Sequential.2")].flops == {"fp32": 2 * 16 * 64 * 8}


def test_the_cuda_backends_sample_reader_takes_the_amd_launches():
    """On ROCm the profiler names the launches hipLaunchKernel, hipExtModuleLaunchKernel and
    hipMemcpyWithStream: the CUDA backend's kernel timestamps must know them, or an AMD GPU's every
    sample reads no kernels (it did: kernel_trace.LAUNCHES named CUDA's calls only)."""
    trace = kineto.load(TRACES / "amd_mi250_train.json.gz")
    events = kineto.trace_events(trace)
    (step,) = [r for r in trace.ranges if r.name == "ProfilerStep#1"]
    sample = kernel_trace.TraceEvent(f"{kernel_trace.SAMPLE}0", False, round(step.start * 1000), round(step.end * 1000),
                                     0, 0)
    found = kernel_trace.sample_kernels(events + [sample])
    assert found[0].kernels == len(trace.activities) == 16
    assert found[0].busy_seconds == pytest.approx(sum(a.duration for a in trace.activities) * 1e-6, abs=16e-9)


def test_a_gpu_whose_runtime_is_hip_is_timed_from_its_kernel_timestamps(monkeypatch):
    """The fake GPU names its launches as ROCm's torch does (runtime="hip"): the sampling phase
    still reads each sample's kernels from the device's timestamps."""
    gpu = FakeGpu(runtime="hip")
    gpu.event_seconds = 3e-6
    backend = cuda_backend(gpu, kernel_timestamps=True)
    timing = take_timing(lambda: gpu.kernel(2e-6), backend, **quick(gpu))
    assert timing.mode == KERNEL_TIMESTAMPS and timing.seconds == pytest.approx(2e-6, rel=0.03)


# --- the command ------------------------------------------------------------------------------------


def test_the_command_ranks_a_trace_and_each_rank_of_a_folder():
    done = solgate("step", str(TRACES / "amd_mi250_train.json.gz"), "--profile", "mi250x", "--top", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"trace {TRACES / 'amd_mi250_train.json.gz'} (AMD Radeon Graphics) on mi250x: ")
    assert "MFU" in lines[0] and "idle 98" in lines[0]
    assert "device time of the kernels" in lines[1] and lines[3].lstrip().startswith("1. aten::to")
    ranks = solgate("step", str(TRACES / "ranks"), "--profile", "a100-sxm4-80gb", "--top", "2")
    assert ranks.returncode == 0, ranks.stderr
    assert [line.split(" on ")[0] for line in ranks.stdout.splitlines() if line.startswith("trace ")] == [
        f"trace {TRACES / 'ranks' / 'rank-0.json.gz'} (rank 0)", f"trace {TRACES / 'ranks' / 'rank-1.json.gz'} (rank 1)"]
    as_json = solgate("step", str(TRACES / "ranks"), "--profile", "a100-sxm4-80gb", "--json")
    assert [entry["rank"] for entry in json.loads(as_json.stdout)] == [0, 1]


def test_the_command_on_a_step_with_no_operator_and_on_a_trace_without_shapes():
    empty = solgate("step", str(TRACES / "cpu_only_rank34.json.gz"), "--profile", "h100")
    assert empty.returncode == 0 and "(no operator ran in the step)" in empty.stdout and "idle 100" in empty.stdout
    assert "host range" in empty.stdout
    bare = solgate("step", str(TRACES / "a100_multi_stream.json.gz"), "--profile", "a100-sxm4-80gb")
    assert "note: " in bare.stdout and "record_shapes=True" in bare.stdout


@pytest.mark.parametrize("content, says", [
    (b"not json at all", "not JSON"),
    (gzip.compress(b"{\"traceEvents\": [trunc", mtime=0), "not JSON"),
    (b"{\"schemaVersion\": 1}", "no traceEvents list"),
    (b"{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"process_name\"}]}", "none of its 1 events"),
    (b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\"}]}",
     "event 0 ('aten::mm', cat 'cpu_op'): its 'ts' is null"),
], ids=["text", "truncated-gzip", "no-events-list", "no-usable-event", "op-without-times"])  # gzip bytes differ by run: named ids keep xdist's workers agreeing
def test_bad_input_is_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    done = solgate("step", str(path), "--profile", "h100")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and str(path) in done.stderr and says in done.stderr


def test_a_missing_file_an_empty_folder_and_an_unknown_profile_are_one_line_each(tmp_path):
    missing = solgate("step", str(tmp_path / "nowhere.json.gz"), "--profile", "h100")
    assert missing.returncode == 2 and "nowhere.json.gz: no such trace file" in missing.stderr
    empty = solgate("step", str(tmp_path), "--profile", "h100")
    assert empty.returncode == 2 and f"{tmp_path}: a folder with no trace in it" in empty.stderr
    trace = str(TRACES / "amd_mi250_train.json.gz")
    unknown = solgate("step", trace, "--profile", "mi251")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert trace in unknown.stderr and "no profile with id 'mi251'" in unknown.stderr


def test_the_command_has_help_and_takes_the_profile_from_the_trace():
    assert "usage: solgate step" in solgate_process("step", "--help").stdout
    done = solgate("step", str(TRACES / "a100_graphs_rank0.json.gz"))  # deviceProperties: NVIDIA A100-SXM4-80GB
    assert done.returncode == 0 and "on a100-sxm4-80gb:" in done.stdout and "note: the trace ran on" not in done.stdout


class ExportingProfiler:
    """A finished torch.profiler session as ``measure_step`` holds one on a GPU, standing in with a
    real GPU's trace: its ``export_chrome_trace`` writes the trace with the steps named as
    measure_step names its runs (``solgate:step``)."""

    def __init__(self, name):
        self.events = [dict(e, name="solgate:step") if e.get("name", "").startswith("ProfilerStep#") else e
                       for e in raw(name)]

    def export_chrome_trace(self, path):
        Path(path).write_text(json.dumps({"traceEvents": self.events}))


@pytest.mark.parametrize("name", GPU_TRACES)
def test_measure_step_on_a_gpu_reads_each_block_through_the_trace_reader(name):
    """Issue 43 item 5: the reader tested on real GPUs' traces is the one measure_step reads its
    blocks with on a GPU: each operator's kernel time the sum of the kernels it launched."""
    from pytest_solgate.measure.platform import Platform

    assert Platform().step_reader("cuda") is kineto.profiler_runs and Platform().step_reader("cpu") is None
    expected = expected_device_time(raw(name))
    got = {}
    for run in kineto.profiler_runs(ExportingProfiler(name)):
        for (operator, _), seconds in run.operators.items():
            operator = operator if is_operator(operator) or operator in {k for k in expected if k} else None
            got[operator] = got.get(operator, 0.0) + seconds
    got.pop(None, None), expected.pop(None, None)
    assert {k for k, v in got.items() if v > 0} == {k for k, v in expected.items() if v > 0}
    for operator, seconds in expected.items():
        assert got[operator] == pytest.approx(seconds, rel=1e-9), operator


def test_a_step_profiled_here_reads_the_same_through_either_reader():
    """profile_step with the trace reader (as on a GPU) on this CPU: the runs hold the operators,
    modules and calls the profiler's own events give."""
    torch = pytest.importorskip("torch")
    from pytest_solgate.measure import step_profile

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 64)
    by_events = step_profile.profile_step(lambda: model(x), "cpu", 5.0, runs=3)
    by_trace = step_profile.profile_step(lambda: model(x), "cpu", 5.0, runs=3, read=kineto.profiler_runs)
    assert len(by_trace.runs) == len(by_events.runs) == 3
    for run, seen in zip(by_trace.runs, by_events.runs):
        assert run.calls == seen.calls and ("aten::linear", "Sequential.2") in run.calls
        assert all(seconds > 0 for seconds in run.operators.values()) and run.idle >= 0
    assert by_trace.work == by_events.work  # counted once, before the blocks, either way


# --- issue 53: traces nobody here recorded ---------------------------------------------------------


def write_trace(tmp_path, events, **header):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({**header, "traceEvents": events}))
    return path


def op(name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts, correlation, dur=2):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": correlation}}


def kernel(ts, dur, correlation, stream=7):
    return {"ph": "X", "cat": "kernel", "name": f"k{correlation}", "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": correlation, "device": 0, "stream": stream}}


def step_mark(n, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_idle_is_the_span_no_device_activity_covers_whoever_launched_it(tmp_path):
    """A device running behind its host: step 2's span holds 50 us of step 1's kernel and 20 us of a
    kernel launched before the trace began (no launch in it); both cover the device, neither is
    step 2's own: carried in, not idle, and the sum still holds."""
    events = [step_mark(1, 0, 100), op("aten::mm", 5, 20), launch(10, 1),
              step_mark(2, 100, 100), op("aten::add", 105, 20), launch(110, 2),
              kernel(50, 100, 1), kernel(150, 40, 2), kernel(0, 120, 99)]  # correlation 99: launched before the trace
    trace = kineto.load(write_trace(tmp_path, events))
    first, second = kineto.profile_trace(trace).runs
    assert second.operators == {("aten::add", ""): pytest.approx(40e-6)}
    assert second.carried_in == pytest.approx((50 + 20) * 1e-6)  # [100, 150) of k1, [100, 120) of k99
    assert second.seconds == pytest.approx(100e-6)  # [100, 200): its own kernel ends at 190
    assert second.idle == pytest.approx(10e-6)  # only [190, 200) has nothing running
    assert second.overlap == pytest.approx(20e-6)  # k1 and k99 at once in [100, 120)
    assert first.seconds == pytest.approx(150e-6) and first.carried_in == pytest.approx(120e-6)  # k99 whole, in [0, 150)
    breakdown = score_step(kineto.profile_trace(trace), find_profile("h100"))
    assert abs(breakdown.identity_gap) < 1e-9 and breakdown.carried_in > 0
    assert "carried in" in step_table_identity(breakdown)


def step_table_identity(breakdown):
    from pytest_solgate.report.step_table import identity

    return identity(breakdown)


def test_a_trace_without_step_ranges_is_one_step_from_its_first_event_to_its_last(tmp_path):
    """Kernels only, launched by runtime calls a few us before they run (no operator ranges, as a
    kernels-only trace has): none is left outside the step."""
    events = [launch(0, 1), kernel(5, 10, 1), launch(3, 2), kernel(15, 10, 2), launch(20, 3), kernel(30, 5, 3)]
    measured = kineto.profile_trace(kineto.load(write_trace(tmp_path, events)))
    (run,) = measured.runs
    assert sum(run.operators.values()) == pytest.approx(25e-6) and run.seconds == pytest.approx(35e-6)
    assert run.idle == pytest.approx(10e-6)  # [0, 5) and [25, 30): before the first kernel and between
    assert any("from its first event to its last" in note for note in measured.notes)


@pytest.mark.parametrize("event, field, value", [
    (dict(op("aten::mm", 0, 5), args=[1, 2]), "args", "[1, 2]"),
    (op("aten::mm", 0, -10.2), "dur", "-10.2"),
    (op("aten::mm", None, 5), "ts", "null"),
    (op("aten::mm", 0, 1e400), "dur", "Infinity"),
    (op("aten::mm", 0, 5, **{"Input Dims": "3x3"}), "args.Input Dims", '"3x3"'),
    (dict(kernel(0, 5, 1), args={"correlation": "first"}), "args.correlation", '"first"'),
    (dict(op("aten::mm", 0, 5), tid=[1]), "tid", "[1]"),
], ids=["args-list", "negative-dur", "ts-null", "dur-1e400", "dims-text", "correlation-text", "tid-list"])
def test_every_malformed_event_is_one_line_naming_its_index_its_name_and_the_field(tmp_path, event, field, value):
    path = tmp_path / "bad.json"
    good = op("aten::add", 0, 3)
    path.write_text(json.dumps({"traceEvents": [good, good, event]}).replace("1e+400", "1e400"))
    done = solgate("step", str(path), "--profile", "h100")
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert f"event 2 ('{event['name']}'" in done.stderr and f"its '{field}' is {value}" in done.stderr


def test_the_json_is_json_and_top_is_at_least_one():
    done = solgate("step", str(TRACES / "amd_mi250_train.json.gz"), "--profile", "mi250x", "--json")
    json.loads(done.stdout, parse_constant=lambda name: pytest.fail(f"{name} in --json"))
    for top in ("0", "-1", "x"):
        refused = solgate("step", str(TRACES / "amd_mi250_train.json.gz"), "--profile", "mi250x", "--top", top)
        assert refused.returncode == 2 and "is not a whole number >= 1" in refused.stderr
    one = solgate("step", str(TRACES / "amd_mi250_train.json.gz"), "--profile", "mi250x", "--top", "1")
    assert "  1. " in one.stdout and "  2. " not in one.stdout


def test_a_schedule_without_on_trace_ready_is_named_with_its_fix(tmp_path):
    from torch.profiler import profile, schedule

    x = torch.randn(32, 32)
    with profile(schedule=schedule(wait=1, warmup=1, active=2)) as session:
        for _ in range(6):
            x @ x
            session.step()
    session.export_chrome_trace(str(tmp_path / "late.json"))
    done = solgate("step", str(tmp_path / "late.json"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "on_trace_ready=torch.profiler.tensorboard_trace_handler(DIR)" in done.stderr


def test_the_profile_comes_from_the_trace_and_a_mismatch_is_one_line_naming_both(tmp_path):
    trace = str(TRACES / "a100_graphs_rank0.json.gz")  # NVIDIA A100-SXM4-80GB
    other = solgate("step", trace, "--profile", "h100")
    assert other.returncode == 0 and "on h100:" in other.stdout
    (line,) = [line for line in other.stdout.splitlines() if "note: the trace ran on" in line]
    assert "'NVIDIA A100-SXM4-80GB' (profile a100-sxm4-80gb)" in line and "--profile h100" in line
    assert "the trace ran on" in json.loads(solgate("step", trace, "--profile", "h100", "--json").stdout)[0]["notes"][0]
    cpu = solgate("step", str(TRACES / "cpu_ops_no_kernels.json.gz"))
    assert cpu.returncode == 0 and "on no-roof:" in cpu.stdout and "a CPU-only trace and no --profile" in cpu.stdout
    nameless = solgate("step", str(TRACES / "ranks" / "rank-0.json.gz"))
    assert nameless.returncode == 2 and "it names no device (no deviceProperties); pass --profile" in nameless.stderr


# The categories of torch 1.8-1.9's traces, as this reader names them (its own map, not the project's).
OLD_NAMES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
             "Memset": "gpu_memset"}


def raw_steps(name):
    """Each step of a raw trace, read apart from the project: its span (its ProfilerStep range, or the
    whole trace from its first event to its last, stretched to the last activity it launched), the
    device time of what it launched, the device time of everyone else's activities inside the span
    (carried in), and the span no activity covers (idle), all in us."""
    events = [dict(e, cat=OLD_NAMES.get(e.get("cat"), e.get("cat"))) for e in raw(name)]
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime",
                                                                           "cuda_driver", *DEVICE)]
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in timed if e["name"].startswith("ProfilerStep#")
                   and e["cat"] in ("cpu_op", "user_annotation"))
    whole = not marks
    if whole:
        marks = [(min(e["ts"] for e in timed), max(e["ts"] + e["dur"] for e in timed))]
    launched_at = {e["args"]["correlation"]: e["ts"] for e in timed if e["cat"] in ("cuda_runtime", "cuda_driver")
                   and "correlation" in e.get("args", {})}
    device = [e for e in timed if e["cat"] in DEVICE]
    found = []
    for start, end in marks:
        own = [e for e in device if e["args"]["correlation"] in launched_at
               and (whole or start <= launched_at[e["args"]["correlation"]] < end)]
        end = max([end] + [e["ts"] + e["dur"] for e in own])
        others = [(max(e["ts"], start), min(e["ts"] + e["dur"], end)) for e in device if e not in own
                  and e["ts"] < end and e["ts"] + e["dur"] > start]
        union, reach = 0.0, None
        for begin, stop in sorted([(e["ts"], e["ts"] + e["dur"]) for e in own] + others):
            union += max(0.0, stop - max(begin, reach if reach is not None else begin))
            reach = stop if reach is None else max(reach, stop)
        found.append({"seconds": end - start, "own": sum(e["dur"] for e in own),
                      "carried_in": sum(stop - begin for begin, stop in others), "idle": end - start - union})
    return found


NEW_SOURCES = ["v100_train_torch19.json.gz", "h100_qwen_inference.json.gz", "mi210_kernels_only.json.gz"]


@pytest.mark.parametrize("name", NEW_SOURCES)
def test_traces_of_two_more_sources_agree_with_a_reader_of_their_raw_json(name):
    """A training step whose device runs behind its host (V100, torch 1.9's format: 12 ms of the step
    before's kernels run in it), an inference step with 502 kernels launched before the trace (H100),
    a trace of kernels only (MI210): every figure within 0.5 % of the raw events."""
    measured = kineto.profile_trace(kineto.load(TRACES / name))
    expected = raw_steps(name)
    assert len(measured.runs) == len(expected)
    for run, want in zip(measured.runs, expected):
        assert run.seconds == pytest.approx(want["seconds"] * 1e-6, rel=5e-3)
        assert sum(run.operators.values()) == pytest.approx(want["own"] * 1e-6, rel=5e-3)
        assert run.carried_in == pytest.approx(want["carried_in"] * 1e-6, rel=5e-3, abs=1e-9)
        assert run.idle == pytest.approx(want["idle"] * 1e-6, rel=5e-3, abs=1e-9)
    got = {}
    for run in measured.runs:
        for (operator, _), seconds in run.operators.items():
            got[operator if is_operator(operator) else None] = got.get(operator if is_operator(operator) else None, 0) + seconds
    for operator, seconds in expected_device_time([dict(e, cat=OLD_NAMES.get(e.get("cat"), e.get("cat")))
                                                   for e in raw(name)]).items():
        if operator is not None:
            assert got.get(operator, 0.0) == pytest.approx(seconds, rel=5e-3), operator
    breakdown = score_step(measured, find_profile("h100"))
    assert abs(breakdown.identity_gap) < 1e-6


def test_the_device_running_behind_and_kernels_from_before_the_trace_are_carried_in_not_idle():
    behind = kineto.profile_trace(kineto.load(TRACES / "v100_train_torch19.json.gz")).runs[0]
    assert behind.carried_in > 0.01 and behind.idle < behind.seconds / 2
    before = kineto.profile_trace(kineto.load(TRACES / "h100_qwen_inference.json.gz"))
    assert before.runs[0].carried_in > 0.013 and before.runs[0].idle / before.runs[0].seconds < 0.1
    assert any("502 device activities have no launch" in note for note in before.notes)
    done = solgate("step", str(TRACES / "v100_train_torch19.json.gz"), "--profile", "v100-sxm2")
    assert done.returncode == 0 and "carried in" in done.stdout
    assert "'Tesla V100-DGXS-32GB', which --profile v100-sxm2" in done.stdout  # a DGX Station part: named


@pytest.mark.parametrize("op_name", ["copy_", "fill_", "zero_"])
def test_an_op_that_overwrites_its_first_input_moves_it_once_as_measure_step_counts_it(op_name):
    from pytest_solgate.measure import step_profile

    destination, source = torch.empty(256, 64), torch.ones(256, 64)
    args = {"copy_": (destination, source), "fill_": (destination, 2.0), "zero_": (destination,)}[op_name]
    func = getattr(torch.ops.aten, op_name).default if op_name != "fill_" else torch.ops.aten.fill_.Scalar
    counted = step_profile.moved_bytes(func, args, {}, destination)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    scalars = len(args) - len(tensors)
    recorded = kineto.HostRange(f"aten::{op_name}", (1, 1), 0.0, 1.0, 1.0,
                                tuple(list(t.shape) for t in tensors) + ((),) * scalars,
                                ("float",) * len(tensors) + ("Scalar",) * scalars)
    assert kineto.range_bytes(recorded) == counted == 256 * 64 * 4 * len(tensors)


def test_the_autograd_profilers_legacy_export_is_refused_naming_it(tmp_path):
    legacy = [{"name": "aten::mm", "ph": "X", "ts": 1.0, "dur": 3.0, "tid": 0, "pid": "CPU functions", "args": {}},
              {"name": "volta_sgemm", "ph": "X", "ts": 2.0, "dur": 2.0, "tid": 0, "pid": "CUDA functions", "args": {}}]
    done = solgate("step", str(write_trace(tmp_path, legacy)), "--profile", "v100-sxm2")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "legacy trace format (torch 1.7 and earlier" in done.stderr
