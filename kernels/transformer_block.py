"""A pre-norm transformer block (attention, MLP, two LayerNorms) in plain PyTorch: the whole step
that ``sol.measure_step`` scores (docs/steps.md).

``slow=True`` makes one operator deliberately slow, the kind of mistake whose cost the step's ranking
must show first: the second LayerNorm computed token by token in a Python loop (one small kernel per
token instead of one for the whole batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Shape:
    batch: int
    tokens: int
    width: int
    heads: int

    @property
    def head_width(self) -> int:
        return self.width // self.heads


# A GPT-2-medium-sized block on a GPU; one small enough for a busy 2-core CPU in CI.
GPU_SHAPE = Shape(batch=8, tokens=1024, width=1024, heads=16)
CPU_SHAPE = Shape(batch=2, tokens=128, width=64, heads=2)


class Attention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.proj = nn.Linear(shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        heads, head_width = self.shape.heads, self.shape.head_width
        q, k, v = self.qkv(x).view(batch, tokens, 3, heads, head_width).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))


class LoopNorm(nn.LayerNorm):
    """The deliberately slow LayerNorm: token by token, from Python."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = torch.empty_like(flat)
        for i in range(flat.shape[0]):
            out[i] = F.layer_norm(flat[i], self.normalized_shape, self.weight, self.bias, self.eps)
        return out.reshape(x.shape)


class Block(nn.Module):
    def __init__(self, shape: Shape, slow: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(shape.width)
        self.attn = Attention(shape)
        self.norm2 = (LoopNorm if slow else nn.LayerNorm)(shape.width)
        self.fc = nn.Linear(shape.width, 4 * shape.width)
        self.out = nn.Linear(4 * shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


def model_flops(shape: Shape) -> int:
    """The block's forward FLOPs as MFU is usually quoted: 2 per multiply-add of the four linear layers
    (24 t w^2 in all) and of the two attention matmuls (4 t^2 w, halved by the causal mask), per sequence."""
    t, w = shape.tokens, shape.width
    return shape.batch * (24 * t * w * w + 2 * t * t * w)


def make(shape: Shape, slow: bool = False, device: torch.device | str = "cpu",
         dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[Block, torch.Tensor]:
    """The block (eval mode, fixed weights) and one input batch."""
    torch.manual_seed(seed)
    block = Block(shape, slow).to(device=device, dtype=dtype).eval()
    x = torch.randn(shape.batch, shape.tokens, shape.width, device=device, dtype=dtype)
    return block, x
