"""Contract: a compiled fixture gives torch eager's results, within the dtype's tolerance.

That includes the values a graph writes into its inputs (the decoder's static KV caches).
"""

from __future__ import annotations

import pytest
import torch

import fixtures
from conformance.tolerances import assert_close


@pytest.mark.parametrize("name", fixtures.names())
def test_compiled_matches_eager(impl, name):
    model, args = fixtures.build(name)
    ref_model, ref_args = fixtures.build(name)
    with torch.no_grad():
        expected = ref_model(*ref_args)
        compiled = impl.compile(model, fullgraph=True)
        actual = compiled(*args)
    assert_close(actual, expected, what=f"{name} output")
    if fixtures.FIXTURES[name].mutates_inputs:
        assert_close(list(args), list(ref_args), what=f"{name} inputs after the call")


def test_second_call_reuses_the_compiled_graph_and_stays_correct(impl):
    model, args = fixtures.build("mlp")
    with torch.no_grad():
        compiled = impl.compile(model, fullgraph=True)
        first = compiled(*args)
        other = torch.randn_like(args[0])
        second = compiled(other)
        expected = model(other)
    assert not torch.equal(first, second)
    assert_close(second, expected, what="second call")
