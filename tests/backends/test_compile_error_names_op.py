"""A compile failure inside a model names the ATen op the compiler rejected, with what to do; the
backend learns from it and runs that op outside the compiled graph.

To get a real rejection, the backend's topk decomposition is taken out of the decomposition table
for the test: torch-mlir then lowers topk to a sort and slices, which IREE rewrites into
``chlo.top_k`` and rejects (the very failure the decomposition exists for). Everything else is the
real pipeline. The seam's error is what the backend function raises before the graph-break rules
act on it (``neuron_backend.__wrapped__``); ``backend="neuron"`` learns from that error and breaks
the graph at the op (:mod:`reference.backends.lowering_fallback`)."""

from __future__ import annotations

import pytest
import torch

import reference
from reference.backends.neuron import neuron_backend
from reference.lowering.lowering_probe import DECISIONS as LEARNED
from reference.lowering.stablehlo import decomposition_table

aten = torch.ops.aten


class Router(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(8, 4)

    def forward(self, x):
        probs = torch.softmax(self.gate(x), dim=-1)
        weights, experts = torch.topk(probs, 2, dim=-1)
        return weights * 2, experts


@pytest.fixture
def without_topk_decomposition(monkeypatch, tmp_path):
    # what is learned under the broken table stays in this test: its own HLO cache, decisions cleared
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(tmp_path / "hlo"))
    monkeypatch.delitem(decomposition_table(), aten.topk.default)
    LEARNED.clear()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    LEARNED.clear()


def test_the_rejected_op_is_named_with_its_source_line_and_the_fallback_hint(without_topk_decomposition):
    model, x = Router().eval(), torch.randn(5, 8)
    with pytest.raises(reference.NEFFCompilationError) as info:
        torch.compile(model, backend=neuron_backend.__wrapped__)(x)
    err = info.value
    first = str(err).splitlines()[0]
    assert err.op == "aten.topk.default"
    assert "the compiler rejected aten.topk.default (node topk" in first
    assert "test_compile_error_names_op.py:" in first and "in forward" in first  # the user's line
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0" in first and "graph_break" in first
    assert "compiler exited" not in first
    assert "chlo.top_k" in err.compiler_log  # the compiler's own words stay in the error


def test_the_hint_works_the_graph_falls_back_to_eager(without_topk_decomposition, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    model, x = Router().eval(), torch.randn(5, 8)
    with pytest.warns(Warning):
        got = torch.compile(model, backend="neuron")(x)
    want = model(x)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


def test_text_served_from_the_hlo_cache_still_names_the_op(without_topk_decomposition, tmp_path, monkeypatch):
    """The second compile of the same graph reads its StableHLO from the HLO cache instead of
    lowering it; the compile failure must name the ATen op all the same (the record keeps which
    op each line came from)."""
    from reference.core.metrics import METRICS

    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(tmp_path / "hlo"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    model, x = Router().eval(), torch.randn(5, 8)
    ops = []
    for attempt in range(2):
        torch._dynamo.reset()
        hits = METRICS.counters().get("hlo_cache_hits", 0)
        with pytest.raises(reference.NEFFCompilationError) as info:
            torch.compile(model, backend=neuron_backend.__wrapped__)(x)
        ops.append(info.value.op)
        assert (METRICS.counters().get("hlo_cache_hits", 0) - hits) == attempt, "the second compile lowered again"
    assert ops == ["aten.topk.default", "aten.topk.default"]


@pytest.mark.slow
def test_the_backend_breaks_the_graph_at_the_rejected_op_and_matches_eager(without_topk_decomposition, tmp_path):
    from torch._dynamo.utils import counters

    model, x = Router().eval(), torch.randn(5, 8)
    counters["graph_break"].clear()
    got = torch.compile(model, backend="neuron")(x)
    want = model(x)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])
    reasons = [r for r in counters["graph_break"] if "op=aten.topk.default" in r]
    assert reasons and "the compiler rejected it" in reasons[0], list(counters["graph_break"])
    # the decision is kept beside the HLO cache: another process finds it without failing first
    kept = list((tmp_path / "hlo" / "lowering-probe").glob("*.json"))
    assert len(kept) == 1 and '"kind": "break"' in kept[0].read_text()
