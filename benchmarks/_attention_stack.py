"""The startup benchmarks' model: four pre-norm attention blocks (LayerNorm, QKV, causal SDPA,
projection, LayerNorm, GELU feed-forward, both residual), d=64, 4 heads, a final LayerNorm; input
(batch 2, seq 16, 64). Its block is a class at module level because a precompiled file's guards
name the module's classes by their import path (``reference.precompile`` refuses a class defined
inside a function, as ``aot_compile`` does)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


def build_model():
    """The model (weights from seed 0, in eval mode) and its input."""
    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(4)], nn.LayerNorm(64)).eval()
    return model, torch.randn(2, 16, 64)
