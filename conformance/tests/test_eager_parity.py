"""Contract: a compiled fixture gives torch eager's results, within the dtype's tolerance.

That includes the values a graph writes into its inputs (the decoder's static KV caches).
"""

from __future__ import annotations

import pytest
import torch

import neuron_fixtures
from conformance.harness.tolerances import assert_close

# A comparison with eager proves something only when the implementation's compiled path ran.
pytestmark = pytest.mark.evidence


@pytest.mark.parametrize("name", neuron_fixtures.names())
@pytest.mark.spec("003.semantics.matches-eager")
def test_compiled_matches_eager(impl, name):
    model, args = neuron_fixtures.build(name)
    ref_model, ref_args = neuron_fixtures.build(name)
    with torch.no_grad():
        expected = ref_model(*ref_args)
        compiled = impl.compile(model, fullgraph=True)
        actual = compiled(*args)
    assert_close(actual, expected, what=f"{name} output")
    if neuron_fixtures.FIXTURES[name].mutates_inputs:
        assert_close(list(args), list(ref_args), what=f"{name} inputs after the call")


def test_second_call_reuses_the_compiled_graph_and_stays_correct(impl):
    model, args = neuron_fixtures.build("mlp")
    with torch.no_grad():
        compiled = impl.compile(model, fullgraph=True)
        first = compiled(*args)
        other = torch.randn_like(args[0])
        second = compiled(other)
        expected = model(other)
    assert not torch.equal(first, second)
    assert_close(second, expected, what="second call")


def _dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _mixed_fn(x, y):
    z = torch.tanh(x @ y.transpose(0, 1)) * 0.5 + x.sum(dim=-1, keepdim=True)
    return z, z.amax(dim=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=_dtype_id)
def test_float_dtypes_match_eager(impl, dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 8, generator=g).to(dtype)
    y = torch.randn(6, 8, generator=g).to(dtype)
    with torch.no_grad():
        actual = impl.compile(_mixed_fn, fullgraph=True)(x, y)
    assert_close(list(actual), list(_mixed_fn(x, y)), what=f"{dtype} function")


def _int_fn(a, b):
    return (a * b + 3) // 2, (a > b) & (b >= 0), torch.where(a > b, a, b)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=_dtype_id)
def test_integer_and_bool_results_are_exact(impl, dtype):
    g = torch.Generator().manual_seed(6)
    a = torch.randint(-50, 50, (5, 7), generator=g, dtype=dtype)
    b = torch.randint(-50, 50, (5, 7), generator=g, dtype=dtype)
    with torch.no_grad():
        actual = impl.compile(_int_fn, fullgraph=True)(a, b)
    assert_close(list(actual), list(_int_fn(a, b)), what=f"{dtype} function")
