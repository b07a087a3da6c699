"""The reference meaning of TORCH_NEURONX_ENABLE_NKI_SDPA: blocked (flash-style) attention for
eligible calls, the math decomposition otherwise."""

from __future__ import annotations

import pytest
import torch

from reference.core import env
from reference.lowering import nki_sdpa
from reference.flows.tools import lower_graphs


def _qkv(L=2048, S=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    S = S or L
    return (torch.randn(1, 2, L, 16, generator=g), torch.randn(1, 2, S, 16, generator=g), torch.randn(1, 2, S, 16, generator=g))


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_attention_matches_torch(causal):
    q, k, v = _qkv()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # The blocked form sums 2048 keys in a different order (online softmax, block by block), so
    # the absolute bound is float32's accumulated rounding over that length, not the per-op 1e-5.
    torch.testing.assert_close(nki_sdpa.blocked_attention(q, k, v, is_causal=causal), expected, rtol=1e-4, atol=2e-4)


@pytest.mark.spec("001.env.nki-sdpa-2048")
def test_eligibility():
    q, k, v = _qkv()
    assert nki_sdpa.eligible(q, k, v)
    q_short, k_short, v_short = _qkv(L=1024)
    assert not nki_sdpa.eligible(q_short, k_short, v_short)
    assert not nki_sdpa.eligible(q, k, v, attn_mask=torch.ones(2048, 2048, dtype=torch.bool))
    assert not nki_sdpa.eligible(q, k, v, dropout_p=0.1)


def _attn(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_the_switch_changes_the_lowered_graph_only_for_eligible_calls(monkeypatch):
    """Real lowering (torch-mlir); no compiler."""
    q, k, v = _qkv()
    hlo = {}
    for value in ("1", "0"):
        monkeypatch.setenv(env.ENABLE_NKI_SDPA, value)
        (g,) = lower_graphs(_attn, (q, k, v))
        hlo[value] = g.hlo
    assert hlo["1"] != hlo["0"]
    assert hlo["1"].count("stablehlo.dot_general") > hlo["0"].count("stablehlo.dot_general")
    q, k, v = _qkv(L=64)
    short = {}
    for value in ("1", "0"):
        monkeypatch.setenv(env.ENABLE_NKI_SDPA, value)
        (g,) = lower_graphs(_attn, (q, k, v))
        short[value] = g.hlo
    assert short["1"] == short["0"]
