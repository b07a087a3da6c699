"""Contract: a compiled model trains like eager.

A small MLP and a small pre-norm attention block are trained for five steps of plain SGD, once
eagerly and once through the implementation's ``compile``, from the same weights on the same
batches. Every step's loss, every weight after the last step, and (for the first step) every
gradient must match eager within float32's tolerance (:mod:`conformance.harness.tolerances`: rtol 1e-4,
atol 1e-5).

Why those bounds hold for training: a compiled forward and backward differ from eager only in
the order of float32 sums (matmuls and reductions reassociated, fused multiply-adds), a few ulps
per op (about 1e-7 relative). Five steps at learning rate 0.05 on weights of order 0.1-1 move each
weight by a few hundredths, so a per-step difference of 1e-7 in a gradient changes a weight by
about 5e-9 per step; the losses are means of well-conditioned values. The bounds leave two orders
of magnitude for compilers that reassociate more than the reference does (which measures 3e-8).
An implementation that gets a gradient wrong (a missing term, a transposed weight, a dropped
output) misses them by far more: the first step's gradients are compared directly.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conformance.harness.tolerances import assert_close
from neuron_fixtures.models import init_deterministic, seeded

STEPS = 5
LR = 0.05


class AttentionBlock(nn.Module):
    """Pre-norm causal self-attention and a GELU feed-forward, both residual."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


def _mlp() -> tuple[nn.Module, tuple[int, ...], tuple[int, ...]]:
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    return model, (6, 8), (6, 4)


def _attention() -> tuple[nn.Module, tuple[int, ...], tuple[int, ...]]:
    return AttentionBlock(), (2, 8, 16), (2, 8, 16)


MODELS = {"mlp": _mlp, "attention_block": _attention}


def _batches(x_shape, y_shape) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = seeded(11)
    return [(torch.randn(x_shape, generator=g), torch.randn(y_shape, generator=g)) for _ in range(STEPS)]


def _train(forward, model: nn.Module, batches) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Five SGD steps; each step's loss and the first step's gradients."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, first_grads = [], []
    for step, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        if step == 0:
            first_grads = [p.grad.detach().clone() for p in model.parameters()]
        opt.step()
        losses.append(loss.detach())
    return losses, first_grads


@pytest.mark.evidence  # equal losses prove nothing if the steps ran eagerly
@pytest.mark.parametrize("name", sorted(MODELS))
def test_sgd_training_matches_eager(impl, name):
    build = MODELS[name]
    model, x_shape, y_shape = build()
    init_deterministic(model, seed=3).train()
    eager = copy.deepcopy(model)
    initial = [p.detach().clone() for p in model.parameters()]
    batches = _batches(x_shape, y_shape)

    expected_losses, expected_grads = _train(eager, eager, batches)
    compiled = impl.compile(model, fullgraph=True)
    losses, grads = _train(compiled, model, batches)

    names = [n for n, _ in model.named_parameters()]
    assert_close(grads, expected_grads, what=f"{name} gradients of step 1 ({', '.join(names)})")
    assert_close(losses, expected_losses, what=f"{name} losses of {STEPS} steps")
    for (pname, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_close(p.detach(), q.detach(), what=f"{name} weight {pname} after {STEPS} steps")
    moved = max((p.detach() - q).abs().max().item() for p, q in zip(model.parameters(), initial))
    assert moved > 1e-3, f"{name}: training moved no weight by more than {moved}; the test would prove nothing"
