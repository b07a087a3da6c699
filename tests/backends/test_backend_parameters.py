"""torch.compile parameters the backend itself handles: static shapes, mode, options (real
pipeline: torch-mlir and the compiler run; the graphs are tiny)."""

from __future__ import annotations

import warnings

import pytest
import torch

import reference
from reference.core.errors import BackendOptionError, DynamicShapeError


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    reference.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def _f(x):
    return torch.relu(x) * 2 + 1


def test_dynamic_true_is_rejected_with_a_clear_error():
    with pytest.raises(DynamicShapeError, match=r"dynamic=True\) is not supported.*static shapes"):
        torch.compile(_f, backend="neuron", dynamic=True)(torch.randn(4, 3))
    assert reference.get_dynamo_metrics() == []


def test_each_new_shape_compiles_a_static_graph():
    compiled = torch.compile(_f, backend="neuron")
    for n in (2, 3, 4, 3):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), _f(x))
    names = [m.graph_name for m in reference.get_dynamo_metrics()]
    assert len(names) == 3 and len(set(names)) == 3


def test_an_input_marked_dynamic_compiles_per_concrete_shape():
    compiled = torch.compile(_f, backend="neuron")
    for n in (5, 6, 5):
        x = torch.randn(n, 3)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), _f(x))
    assert len(reference.get_dynamo_metrics()) == 2


def test_a_mode_other_than_default_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(_f, backend="neuron", mode="reduce-overhead")(torch.randn(2, 3))
    assert any("reduce-overhead" in str(w.message) and "default" in str(w.message) for w in caught)


@pytest.mark.parametrize("options, match", [
    ({"enable_fx_passes": "yes"}, r"options\['enable_fx_passes'\] must be"),
    ({"target": 2}, r"options\['target'\] must be"),
])
def test_options_of_the_wrong_type_name_the_key(options, match):
    with pytest.raises(BackendOptionError, match=match):
        torch.compile(_f, backend="neuron", options=options)(torch.randn(2, 3))


def test_unknown_options_are_reported_and_ignored():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(_f, backend="neuron", options={"max_autotune": True})(torch.randn(2, 3))
    assert any("max_autotune" in str(w.message) and "ignored" in str(w.message) for w in caught)
