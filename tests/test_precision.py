"""The precision policies. float64: computed in float32 with one warning per graph naming the float64
inputs and outputs (the default), or refused with a typed error (``NEURON_REFERENCE_FLOAT64=error``).
float16 and bfloat16: computed in float32 and rounded to the declared type where they leave the
artifact, as torch's CPU kernels compute them (no warning: nothing is lost against eager)."""

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


# --- float16 and bfloat16: computed in float32 ------------------------------------------------------


@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 1024), (torch.float16, 4096)])
def test_a_half_precision_sum_accumulates_in_float32_like_eager(dtype, n):
    # Accumulated in the declared type, a running sum of ones stalls where the type's spacing
    # passes 1 (bfloat16 at 256, float16 at 2048); eager accumulates in float32 and so must we.
    ones = torch.ones(n, dtype=dtype)
    out = torch.compile(lambda x: torch.cumsum(x, 0), backend="neuron")(ones)
    eager = torch.cumsum(ones, 0)
    assert out.dtype == dtype
    assert out[-1].item() == eager[-1].item() == n
    assert torch.equal(out, eager)


def test_a_float16_intermediate_past_its_range_stays_finite_like_eager():
    # |x|**6 of 9 is 531441, past float16's 65504: computed in float16 the norm would be inf
    x = torch.tensor([9.0, -2.0], dtype=torch.float16)
    out = torch.compile(lambda t: torch.linalg.vector_norm(t, ord=6), backend="neuron")(x)
    eager = torch.linalg.vector_norm(x, ord=6)
    assert out.dtype == torch.float16 and torch.isfinite(out) and torch.isfinite(eager)
    torch.testing.assert_close(out, eager)


def test_a_bfloat16_weight_changed_in_place_is_seen_on_the_next_call():
    # a half-precision parameter crosses as a float32 copy: the copy is remade when it changes
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4).to(torch.bfloat16).eval()
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    compiled = torch.compile(lin, backend="neuron")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), lin(x))
        lin.weight.add_(1.0)
        out = compiled(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, lin(x))


def test_the_precision_flags_reach_the_compiler_and_the_recipe_enters_the_key():
    from reference.cache.key import create_cache_hash, tool_versions
    from reference.compiler.driver import PRECISION_FLAGS, RECIPE, CompilerConfig, CompilerDriver

    command = CompilerDriver("iree-compile").command_line(CompilerConfig.from_args(["-O2"]))
    assert all(flag in command for flag in PRECISION_FLAGS)
    assert tool_versions()["recipe"] == RECIPE
    versions = dict(tool_versions())
    key = create_cache_hash("module {}", ["-O2"], [], versions=versions)
    assert create_cache_hash("module {}", ["-O2"], [], versions={**versions, "recipe": RECIPE + "+"}) != key, (
        "a change to the compile recipe must move every key (an artifact built before it is not served)"
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_signbit_of_a_half_tensor_reads_negative_zero(dtype):
    # lowered as a bitcast of the half type it would not compile once halves compute in float32.
    # (A negative NaN is left out: torch's own half-to-float conversion, which the runtime uses at
    # the boundary, drops a NaN's sign.)
    x = torch.tensor([-0.0, 0.0, -1.5, 2.0, float("-inf"), float("inf"), float("nan")], dtype=dtype)
    out = torch.compile(torch.signbit, backend="neuron")(x)
    assert torch.equal(out, torch.signbit(x))
    assert out.tolist() == [True, False, True, False, True, False, False]
