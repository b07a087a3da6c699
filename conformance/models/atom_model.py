"""A tiny decoder for the ATOM compilation contract, built from an implementation's ATOM module.

``build_decoder(atom, config, layers=L)`` registers the attention op (``unified_attention_with_output``
under the module's default custom-op namespace, the op level 3 splits at by default), decorates a
fresh decoder class with ``atom.support_torch_compile`` and returns an instance with fixed weights.
Each layer is: RMS-style norm, QKV projection, attention through the custom op (writes its output
in place), output projection, residual, a ReLU MLP, residual. L layers give L splitting-op calls.

Used by the conformance tests, their child process and the benchmark; no import of ``reference``.
"""

from __future__ import annotations

import torch

HIDDEN = 16
OP_NAME = "unified_attention_with_output"


def attention_with_output(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, output: torch.Tensor) -> None:
    """Causal attention over the rows (tokens) of one sequence, written into ``output``."""
    scores = (q @ k.transpose(0, 1)) / q.shape[-1] ** 0.5
    rows = torch.arange(q.shape[0])
    scores = scores.masked_fill(rows[None, :] > rows[:, None], float("-inf"))
    output.copy_(torch.softmax(scores, dim=-1) @ v)


def register_attention(atom) -> str:
    """Register the attention op once per process; returns ``"namespace.op"``."""
    return atom.direct_register_custom_op(OP_NAME, attention_with_output, mutates_args=["output"])


def decoder_class(atom, op: str, layers: int):
    namespace, name = op.split(".")
    attn = getattr(getattr(torch.ops, namespace), name)

    class TinyDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            gen = torch.Generator().manual_seed(1234)
            self.qkv = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, 3 * HIDDEN) for _ in range(layers))
            self.out = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(layers))
            self.mlp = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(layers))
            for p in self.parameters():
                p.data = torch.randn(p.shape, generator=gen) * 0.3
            self.eps = 1e-6

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x
            for qkv, out, mlp in zip(self.qkv, self.out, self.mlp):
                normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
                q, k, v = qkv(normed).chunk(3, dim=-1)
                o = torch.zeros_like(q)  # the reference lowering has no rule for empty_like
                attn(q, k, v, o)
                h = h + out(o)
                h = h + torch.relu(mlp(h))
            return h

    return atom.support_torch_compile(TinyDecoder)


def build_decoder(atom, config, layers: int = 2):
    """A decorated decoder instance under ``config`` (an ``atom.Config``)."""
    op = register_attention(atom)
    return decoder_class(atom, op, layers)(atom_config=config)


def inputs(batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, HIDDEN, generator=torch.Generator().manual_seed(seed + batch))


def eager_reference(model, x: torch.Tensor) -> torch.Tensor:
    """The model's forward run as plain Python, bypassing compilation."""
    with torch.no_grad():
        return type(model).forward(model, x)
