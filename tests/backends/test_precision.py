"""The float64 precision policy: computed in float32 with one warning per graph naming the float64
inputs and outputs (the default), or refused with a typed error (``NEURON_REFERENCE_FLOAT64=error``)."""

from __future__ import annotations

import warnings

import pytest
import torch

from reference.core import env
from reference.core.errors import EnvVarError, PrecisionError, PrecisionWarning
from reference.core.metrics import METRICS


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _affine(x):
    return x * 2 + 1


def _mixed(x, y):
    return x + 1, y.to(torch.float32) * 3


def _precision_warnings(caught) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, PrecisionWarning)]


def test_float64_is_narrowed_with_one_warning_naming_inputs_and_outputs(monkeypatch):
    monkeypatch.delenv(env.FLOAT64, raising=False)
    x = torch.tensor([1e300, 1e-12, 3.0], dtype=torch.float64)
    compiled = torch.compile(_affine, backend="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
        again = compiled(x)  # the graph is served: no second warning
    found = _precision_warnings(caught)
    assert len(found) == 1, [str(w.message) for w in caught]
    msg = str(found[0].message)
    assert "inputs 0 and outputs 0" in msg and "computed in float32" in msg and "NEURON_REFERENCE_FLOAT64=error" in msg
    assert found[0].filename == __file__  # attributed to the line that called the compiled function
    # what the warning says is what the user gets: float32's range and precision, in a float64 tensor
    assert out.dtype == torch.float64
    assert torch.isinf(out[0]) and out[1] == 1.0 and out[2] == 7.0
    assert torch.equal(out, again)


def test_a_float64_input_is_named_when_the_outputs_are_float32(monkeypatch):
    monkeypatch.delenv(env.FLOAT64, raising=False)
    y = torch.tensor([0.5, 2.0], dtype=torch.float64)
    x = torch.tensor([1.0, 2.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a, b = torch.compile(_mixed, backend="neuron")(x, y)
    found = _precision_warnings(caught)
    assert len(found) == 1 and "inputs 1" in str(found[0].message)
    torch.testing.assert_close(b, torch.tensor([1.5, 6.0]))


def _inside(x):
    return (x.to(torch.float64) * 3).to(torch.float32) + 0.5


def test_float32_graphs_do_not_warn_even_with_float64_inside(monkeypatch):
    # float64 that no input or output shows (a cast inside, a Python scalar kept as an f64
    # constant) is narrowed without a word: the dtypes the user sees claim nothing false
    monkeypatch.delenv(env.FLOAT64, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(_affine, backend="neuron")(torch.ones(3))
        out = torch.compile(_inside, backend="neuron")(torch.ones(3))
    assert not _precision_warnings(caught)
    torch.testing.assert_close(out, torch.full((3,), 3.5))


def test_the_strict_setting_refuses_float64_graphs_before_building(monkeypatch):
    monkeypatch.setenv(env.FLOAT64, "error")
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    before = METRICS.counters().get("compiler_invocations", 0)
    with pytest.raises(PrecisionError) as caught:
        torch.compile(_affine, backend="neuron")(torch.tensor([1.0], dtype=torch.float64))
    msg = str(caught.value)
    assert "inputs 0 and outputs 0" in msg and "NEURON_REFERENCE_FLOAT64=error" in msg
    assert "cast the inputs to float32" in msg
    assert METRICS.counters().get("compiler_invocations", 0) == before  # refused before the compiler ran
    # float32 still compiles under the strict setting
    torch.testing.assert_close(torch.compile(_affine, backend="neuron")(torch.ones(2)), torch.full((2,), 3.0))


def test_an_unknown_float64_setting_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(env.FLOAT64, "exact")
    with pytest.raises(EnvVarError, match=r"NEURON_REFERENCE_FLOAT64='exact'.*narrow, error"):
        env.get(env.FLOAT64)
