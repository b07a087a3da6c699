"""``TORCH_NEURONX_ENABLE_NKI_SDPA``: the reference meaning of the fused-attention switch.

On Neuron the switch routes ``scaled_dot_product_attention`` to the NKI flash-attention kernel when
the call is eligible (today: the query sequence length is a multiple of 2048). The reference has no
NKI, so it keeps the part of that contract a compiler can see: when the switch is on (the default)
and a call is eligible, SDPA is decomposed into *blocked attention with an online softmax* (the
flash-attention algorithm: keys and values are visited in blocks of :data:`KV_BLOCK`, keeping a
running maximum and normalizer per query row) instead of the plain math decomposition
(``softmax(q kᵀ · scale) v`` over the whole key length at once).

Eligible means: 4-D query, query length a multiple of :data:`SEQ_MULTIPLE`, no attention mask, no
dropout, no grouped-query expansion, floating-point inputs. Everything else takes the math
decomposition, as does every call when the switch is off. Both give eager's result within the
usual tolerance; the compiled graph, and so its cache key, differs.
"""

from __future__ import annotations

import math

import torch

from reference.lowering.decompositions import library_lowerings
from reference.lowering.lowering_probe import learned_decompositions
from reference.lowering.stablehlo import decomposition_table

SEQ_MULTIPLE = 2048
KV_BLOCK = 512


def eligible(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> bool:
    return (
        query.dim() == 4
        and key.dim() == 4
        and query.shape[-2] % SEQ_MULTIPLE == 0
        and attn_mask is None
        and dropout_p == 0.0
        and not enable_gqa
        and query.shape[1] == key.shape[1]
        and query.dtype.is_floating_point
    )


def blocked_attention(query, key, value, *, is_causal: bool = False, scale: float | None = None, with_lse: bool = False):
    """Flash-style attention: ``[B, H, L, E] x [B, H, S, E] x [B, H, S, Ev] -> [B, H, L, Ev]``
    (and the row log-sum-exp ``[B, H, L]`` with ``with_lse``)."""
    L, S = query.shape[-2], key.shape[-2]
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    q = query * scale
    row_max = torch.full((*query.shape[:-1], 1), float("-inf"), dtype=query.dtype)
    row_sum = torch.zeros((*query.shape[:-1], 1), dtype=query.dtype)
    acc = torch.zeros((*query.shape[:-1], value.shape[-1]), dtype=query.dtype)
    rows = torch.arange(L).unsqueeze(-1) + (S - L)  # causal alignment of the last query with the last key
    for start in range(0, S, KV_BLOCK):
        stop = min(start + KV_BLOCK, S)
        scores = q @ key[..., start:stop, :].transpose(-2, -1)
        if is_causal:
            cols = torch.arange(start, stop).unsqueeze(0)
            scores = scores.masked_fill(cols > rows, float("-inf"))
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        # Rows that have seen no key yet keep a -inf maximum; guard the rescale against -inf - -inf.
        safe_max = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        p = torch.exp(scores - safe_max)
        correction = torch.exp(row_max - safe_max)
        row_sum = row_sum * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ value[..., start:stop, :]
        row_max = new_max
    out = acc / row_sum
    if with_lse:
        return out, (row_max + torch.log(row_sum)).squeeze(-1)
    return out


def _nki_sdpa_decomposition(fallback):
    # On the CPU, scaled_dot_product_attention reaches AOT Autograd as this fused op.
    def sdpa(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
        if eligible(query, key, value, attn_mask, dropout_p, is_causal, scale):
            out, lse = blocked_attention(query, key, value, is_causal=is_causal, scale=scale, with_lse=True)
            # the fused op's output layout: [B, L, H, E] memory seen as [B, H, L, E]
            return out.transpose(1, 2).contiguous().transpose(1, 2), lse
        return fallback(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)

    return sdpa


def decompositions(nki_sdpa: bool = True) -> dict:
    """The decomposition table a compile uses, with the switch applied (``nki_sdpa``: the compile
    request's ``TORCH_NEURONX_ENABLE_NKI_SDPA``), and the backend's lowerings of other libraries'
    ops registered in this process."""
    table = {**decomposition_table(), **library_lowerings()}
    for op, fn in learned_decompositions().items():  # calls that failed to lower, decomposed by torch's
        table[op] = _learned_first(fn, table.get(op))
    if not nki_sdpa:
        return table
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    table[op] = _nki_sdpa_decomposition(table[op])
    return table


def _learned_first(fn, prior):
    """``fn`` (a learned decomposition, declining with ``NotImplemented`` on calls it was not
    learned for), then ``prior`` (the table's entry, if any) for the others."""
    if prior is None:
        return fn

    def decomposition(*args, **kwargs):
        out = fn(*args, **kwargs)
        return prior(*args, **kwargs) if out is NotImplemented else out

    return decomposition
