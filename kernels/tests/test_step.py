"""A whole step: the transformer block's forward scored against the device (docs/steps.md).

On a GPU the block has GPT-2-medium shapes in bf16 and a budget on its MFU; on a CPU (CI) it is
small, and its MFU, idle share and ranking are recorded, reported and gated for regressions. With
its second LayerNorm computed token by token in a Python loop, that operator loses the most time:
the ranking names it first.
"""

import contextlib

import pytest
import torch

from kernels import transformer_block
from kernels.tests.helpers import GPU, on_device


def shape():  # noqa: ANN201
    return on_device(transformer_block.GPU_SHAPE, transformer_block.CPU_SHAPE)


@contextlib.contextmanager
def one_cpu_thread():
    """On the CPU, one torch thread: on a shared 2-core machine a second OpenMP thread is often
    preempted, and every operator then waits a scheduler quantum (15 ms on the CI VM) at its barrier."""
    if GPU:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.sol(mfu={"h100*": 0.3, "h200*": 0.3})
def test_block_forward(sol):
    dtype = torch.bfloat16 if GPU else torch.float32
    block, x = transformer_block.make(shape(), device=sol.device, dtype=dtype)
    with torch.inference_mode(), one_cpu_thread():
        m = sol.measure_step(lambda: block(x), name="block")
    step = m.step
    assert step.seconds > 0 and m.mfu == step.mfu
    # Where the time went adds up: lost times plus idle equal the step time minus its T_SOL.
    assert abs(step.identity_gap) < 0.05, step.identity_gap
    assert {op.kind for op in step.operators} >= {"matmul", "attention", "normalization", "elementwise"}
    assert [op.lost for op in step.operators] == sorted((op.lost for op in step.operators), reverse=True)


def test_a_norm_in_a_python_loop_ranks_first(sol):
    block, x = transformer_block.make(shape(), slow=True, device=sol.device)
    with torch.inference_mode(), one_cpu_thread():
        m = sol.measure_step(lambda: block(x), name="slow-norm")
    first = m.step.operators[0]
    assert (first.operator, first.module) == ("aten::layer_norm", "Block.norm2"), [op.label for op in m.step.operators[:3]]
    assert first.calls == shape().batch * shape().tokens  # one call per token: the loop, not one kernel
