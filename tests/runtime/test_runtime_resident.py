"""The runtime's boundary: resident parameter buffers are never stale, inputs cross without a copy
where they can, and no output shares memory with an input.

The artifacts are real (StableHLO compiled by the compiler driver, loaded by the IREE runtime);
the end-to-end cases go through ``torch.compile(backend="neuron")``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference.compiler.driver import CompilerConfig, CompilerDriver
from reference.core.specs import TensorSpec
from reference.runtime import LoadedArtifact, _importable, _same

# out = x @ w + b; w and b are the graph's "parameters" (inputs 1 and 2)
_LINEAR = """
func.func @main(%x: tensor<2x3x{t}>, %w: tensor<3x4x{t}>, %b: tensor<4x{t}>) -> tensor<2x4x{t}> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x3x{t}>, tensor<3x4x{t}>) -> tensor<2x4x{t}>
  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<4x{t}>) -> tensor<2x4x{t}>
  %2 = stablehlo.add %0, %1 : tensor<2x4x{t}>
  return %2 : tensor<2x4x{t}>
}}
"""
_IDENTITY = """
func.func @main(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = stablehlo.add %a, %a : tensor<8xf32>
  return %a, %0 : tensor<8xf32>, tensor<8xf32>
}
"""


def _specs(dtype: str, *shapes):
    return [TensorSpec(dtype, s, tuple(torch.empty(s).stride())) for s in shapes]


@pytest.fixture(scope="module")
def linear_f32() -> bytes:
    return CompilerDriver().compile(_LINEAR.format(t="f32"), CompilerConfig.from_args([])).artifact


@pytest.fixture(scope="module")
def identity() -> bytes:
    return CompilerDriver().compile(_IDENTITY, CompilerConfig.from_args([])).artifact


def _load(artifact: bytes, dtype: str = "float32") -> LoadedArtifact:
    return LoadedArtifact(
        artifact, graph_name="g_linear", input_specs=_specs(dtype, (2, 3), (3, 4), (4,)),
        output_specs=_specs(dtype, (2, 4)), resident=(1, 2),
    )


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, generator=g, dtype=dtype), torch.randn(3, 4, generator=g, dtype=dtype),
            torch.randn(4, generator=g, dtype=dtype))


def test_resident_buffers_are_made_once_while_the_parameters_are_unchanged(linear_f32):
    loaded = _load(linear_f32)
    x, w, b = _inputs()
    assert loaded(x, w, b) and loaded.written_inputs() == frozenset()  # the first call copies and observes
    first = loaded(x, w, b)[0]
    views = {i: loaded._held[i].view for i in (1, 2)}
    for _ in range(3):
        out = loaded(torch.randn(2, 3), w, b)[0]
    assert {i: loaded._held[i].view for i in (1, 2)} == views  # the same device buffers, not remade
    assert loaded.resident_uploads() == 2 and 0 not in loaded._held  # the activation is not held
    torch.testing.assert_close(first, x @ w + b)
    assert out.shape == (2, 4)


@pytest.mark.parametrize("how", ["in-place op", "copy_ through .data", "NumPy view", "optimizer step"])
def test_a_weight_mutated_in_place_between_calls_gives_the_new_result(linear_f32, how):
    loaded = _load(linear_f32)
    x, w, b = _inputs()
    w = torch.nn.Parameter(w)
    loaded(x, w, b)
    loaded(x, w, b)
    with torch.no_grad():
        if how == "in-place op":
            w.mul_(3.0)
        elif how == "copy_ through .data":  # .data has its own version counter: a version check misses it
            w.data.copy_(torch.full_like(w, 0.5))
        elif how == "NumPy view":  # bypasses torch entirely
            w.detach().numpy()[0, 0] = 42.0
        else:
            w.grad = torch.ones_like(w)
            torch.optim.SGD([w], lr=0.25).step()
    torch.testing.assert_close(loaded(x, w, b)[0], x @ w.detach() + b)


def test_a_replaced_parameter_or_replaced_data_gives_the_new_result(linear_f32):
    loaded = _load(linear_f32)
    x, w, b = _inputs()
    loaded(x, w, b)
    loaded(x, w, b)
    w2 = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x, w2, b)[0], x @ w2 + b)
    p = torch.nn.Parameter(w.clone())
    loaded(x, p, b)
    p.data = torch.randn(3, 4)  # same Parameter object, new memory
    torch.testing.assert_close(loaded(x, p, b)[0], x @ p.detach() + b)


def test_a_copied_resident_buffer_float64_is_remade_when_the_tensor_changes(linear_f32):
    # float64 crosses as a float32 copy (the device has no f64): staleness is caught by the version
    loaded = _load(linear_f32, "float64")
    x, w, b = _inputs(torch.float64)
    loaded(x, w, b)
    loaded(x, w, b)
    assert loaded._held[1].copied
    w.add_(1.0)
    out = loaded(x, w, b)[0]
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, x @ w + b, rtol=1e-5, atol=1e-5)


def test_a_copied_resident_inference_tensor_is_remade_every_call(linear_f32):
    loaded = _load(linear_f32, "float64")
    with torch.inference_mode():
        x, w, b = _inputs(torch.float64)
    loaded(x, w, b)
    loaded(x, w, b)
    with torch.inference_mode():
        w.mul_(-1.0)  # inference tensors carry no version counter
    torch.testing.assert_close(loaded(x, w, b)[0], x @ w + b, rtol=1e-5, atol=1e-5)


_UPDATE = """
func.func @main(%cache: tensor<4x8xf32>, %row: tensor<1x8xf32>, %i: tensor<i64>) -> tensor<4x8xf32> {
  %z = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.dynamic_update_slice %cache, %row, %i, %z : (tensor<4x8xf32>, tensor<1x8xf32>, tensor<i64>, tensor<i64>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
"""


@pytest.mark.parametrize("resident", [(), (0,)])
def test_an_input_the_program_updates_in_place_is_never_the_callers_memory(resident):
    # IREE performs a returned dynamic update in the input's buffer; the caller's tensor must not change
    artifact = CompilerDriver().compile(_UPDATE, CompilerConfig.from_args([])).artifact
    specs = [*_specs("float32", (4, 8), (1, 8)), TensorSpec("int64", (), ())]
    loaded = LoadedArtifact(artifact, graph_name="g_update", input_specs=specs, output_specs=_specs("float32", (4, 8)),
                            resident=resident)
    cache = torch.zeros(4, 8)
    for step in range(3):
        row = torch.full((1, 8), float(step + 1))
        out = loaded(cache, row, torch.tensor(step))[0]
        assert torch.equal(cache, torch.zeros(4, 8)), f"call {step} wrote the caller's input"
        expected = torch.zeros(4, 8)
        expected[step] = step + 1
        torch.testing.assert_close(out, expected)
    assert loaded.written_inputs() == frozenset({0})


def test_an_output_that_is_an_input_buffer_is_a_copy(identity):
    loaded = LoadedArtifact(identity, graph_name="g_identity", input_specs=_specs("float32", (8,)),
                            output_specs=_specs("float32", (8,), (8,)))
    a = torch.arange(8, dtype=torch.float32)
    loaded(a.clone())  # the first call runs on copies; the second on the caller's memory
    same, doubled = loaded(a)
    a.fill_(-1.0)  # writing the input afterwards must not show through the output
    torch.testing.assert_close(same, torch.arange(8, dtype=torch.float32))
    torch.testing.assert_close(doubled, 2 * torch.arange(8, dtype=torch.float32))
    same.fill_(7.0)  # nor writing the output the input
    assert torch.equal(a, torch.full((8,), -1.0))


def test_inputs_cross_in_place_when_dense_and_aligned_and_are_copied_otherwise():
    dense = torch.randn(4, 8)
    assert _importable(dense) is dense  # IREE reads the tensor's own memory
    for t in (torch.randn(8, 4).t(), torch.randn(9)[1:], torch.randn(4, dtype=torch.float64)):
        moved = _importable(t)
        assert moved.data_ptr() != t.data_ptr() and moved.is_contiguous() and moved.data_ptr() % 64 == 0
        torch.testing.assert_close(moved.double(), t.double().contiguous())
    assert _importable(torch.randn(4, dtype=torch.float64)).dtype == torch.float32


def test_strided_and_offset_inputs_give_eager_results(linear_f32):
    loaded = _load(linear_f32)
    loaded(*_inputs())
    x = torch.randn(3, 2).t()  # strided
    w = torch.randn(13)[1:].view(3, 4)  # offset by one element: not 64-byte aligned
    b = torch.randn(4)
    torch.testing.assert_close(loaded(x, w, b)[0], x @ w + b)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 5)
        self.register_buffer("shift", torch.ones(5))

    def forward(self, x):
        return torch.relu(self.lin(x)) + self.shift


def test_backend_sees_weights_mutated_in_place_and_replaced_between_calls():
    torch.manual_seed(0)
    net = _Net().eval()
    compiled = torch.compile(net, backend="neuron")
    x = torch.randn(3, 6)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        net.lin.weight.mul_(-2.0)
        net.shift.fill_(5.0)
        torch.testing.assert_close(compiled(x), net(x))
        net.lin.weight = torch.nn.Parameter(torch.randn(5, 6))
        torch.testing.assert_close(compiled(x), net(x))
        assert np.isfinite(compiled(x).numpy()).all()


def test_the_first_calls_comparison_is_bit_for_bit():
    # what the first call uses to find the inputs a program wrote: a NaN left alone is no change,
    # any changed bit is one (-0.0 and 0.0 differ), whatever the dtype
    x = torch.tensor([1.0, float("nan"), 0.0])
    assert _same(x, x.clone())
    y = x.clone()
    y[2] = -0.0
    assert not _same(x, y)
    assert _same(torch.tensor(3.5), torch.tensor(3.5)) and not _same(torch.tensor(3.5), torch.tensor(3.25))
    for dtype in (torch.int64, torch.int8, torch.bool, torch.bfloat16, torch.complex64):
        a = torch.ones(2, 3, dtype=dtype)
        b = a.clone()
        assert _same(a, b)
        b[1, 2] = 0
        assert not _same(a, b), dtype
    assert _same(torch.empty(0, 4), torch.empty(0, 4))
    assert not _same(torch.zeros(2, 2), torch.zeros(4))
    w = torch.randn(4, requires_grad=True)
    assert _same(w, w.detach().clone())
