"""Training through the neuron backend: backward graphs lower, compile and run through the one
pipeline; a graph whose backward cannot lower is refused with its forward; failures take the
fallback of every graph. (Parity of a whole training loop with eager is the conformance suite's
``test_training``.)"""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import reference
from reference.backends.aot_autograd import BackwardGraph
from reference.core.errors import NEFFCompilationError, TrainingUnsupportedError
from reference.lowering.decompositions import convolution_backward, flash_attention_backward
from reference.core.build_settings import BuildSettings
from reference.compiler.driver import CompilerConfig
from reference.pipeline import BuildContext, compile_aten_graph

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    reference.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


# --- the decompositions backward graphs need --------------------------------------------------------


@pytest.mark.parametrize(
    "heads, kv_heads, q_len, kv_len, causal, mask",
    [(2, 2, 4, 6, False, None), (2, 2, 5, 5, True, None), (4, 2, 5, 7, True, None), (2, 2, 4, 6, False, "bool"),
     (2, 2, 4, 6, False, "float")],
)
def test_flash_attention_backward_is_autograd_of_attention(heads, kv_heads, q_len, kv_len, causal, mask):
    g = torch.Generator().manual_seed(heads * 100 + q_len)
    q = torch.randn(2, heads, q_len, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, kv_heads, kv_len, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, kv_heads, kv_len, 8, dtype=torch.float64, generator=g, requires_grad=True)
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(q_len, kv_len, generator=g) > 0.3
        attn_mask[:, 0] = True  # no fully masked row: its softmax is undefined in eager too
    elif mask == "float":
        attn_mask = torch.randn(q_len, kv_len, dtype=torch.float64, generator=g)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=causal, enable_gqa=heads != kv_heads
    )
    grad_out = torch.randn(out.shape, dtype=torch.float64, generator=g)
    out.backward(grad_out)
    got = flash_attention_backward(grad_out, q.detach(), k.detach(), v.detach(), out.detach(), None, 0.0, causal,
                                   attn_mask=attn_mask)
    for name, a, e in zip("qkv", got, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"grad of {n}: {m}")


def test_flash_attention_backward_leaves_dropout_to_the_fused_op():
    t = torch.zeros(1, 1, 2, 2)
    assert flash_attention_backward(t, t, t, t, t, None, 0.1, False) is NotImplemented


@pytest.mark.parametrize("dims, stride, padding, dilation, groups", list(itertools.product(
    (1, 2), (1, 2), (0, 2), (1, 2), (1, 2)
)))
def test_convolution_backward_is_autograd_of_convolution(dims, stride, padding, dilation, groups):
    g = torch.Generator().manual_seed(dims * 31 + stride * 7 + padding + dilation + groups)
    x = torch.randn(2, 4, *([9] * dims), dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(6, 4 // groups, *([3] * dims), dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    args = ([stride] * dims, [padding] * dims, [dilation] * dims, False, [0] * dims, groups)
    y = aten.convolution(x, w, b, *args)
    grad_out = torch.randn(y.shape, dtype=torch.float64, generator=g)
    y.backward(grad_out)
    got = convolution_backward(grad_out, x.detach(), w.detach(), [6], *args, [True, True, True])
    for name, a, e in zip(("input", "weight", "bias"), got, (x.grad, w.grad, b.grad)):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"grad of {n}: {m}")


def test_convolution_backward_computes_only_what_the_mask_asks_for():
    x, w = torch.randn(1, 2, 5), torch.randn(3, 2, 3)
    grad_out = torch.randn(1, 3, 3)
    got = convolution_backward(grad_out, x, w, None, [1], [0], [1], False, [0], 1, [False, True, False])
    assert got[0] is None and got[2] is None and got[1].shape == w.shape
    assert convolution_backward(grad_out, x, w, None, [1], [0], [1], True, [0], 1, [True, True, True]) is NotImplemented


# --- None outputs ---------------------------------------------------------------------------------------


def test_a_graph_with_none_outputs_compiles_and_returns_them_in_place():
    # A backward graph returns None for each input that takes no gradient; the artifact returns
    # the tensors and the caller gets None back in place.
    def fn(x, y):
        return x * 2, None, x + y, None

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    gm = make_fx(fn)(x, y)
    compiled = compile_aten_graph(gm, BuildContext("none_outputs", CompilerConfig.from_args([]), BuildSettings.from_env()))
    assert compiled.nones == (1, 3)
    out = compiled(x, y)
    assert out[1] is None and out[3] is None and len(out) == 4
    torch.testing.assert_close(out[0], x * 2)
    torch.testing.assert_close(out[2], x + y)


# --- the backend: lazy build, refusal at forward time, fallback --------------------------------------


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_the_backward_graph_is_built_at_the_first_backward_not_with_the_forward():
    model = _mlp()
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(3, 4)
    loss = compiled(x).sum()
    kinds = [m.graph_name.split("_")[-2] for m in reference.get_dynamo_metrics()]
    assert kinds == ["forward"], kinds  # the backward graph is lowered, not built: no record yet
    loss.backward()
    kinds = [m.graph_name.split("_")[-2] for m in reference.get_dynamo_metrics()]
    assert kinds == ["forward", "backward"], kinds
    expected = _mlp()
    expected(x).sum().backward()
    for p, q in zip(model.parameters(), expected.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def _transposed_conv() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.ConvTranspose1d(2, 3, 3), nn.Tanh())


def test_a_graph_that_cannot_be_trained_is_refused_when_its_forward_compiles(monkeypatch):
    # The gradient of a transposed convolution has no decomposition: its backward graph keeps
    # aten.convolution_backward, which torch-mlir cannot lower.
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    compiled = torch.compile(_transposed_conv(), backend="neuron")
    x = torch.randn(2, 2, 5)
    with pytest.raises(TrainingUnsupportedError) as caught:
        compiled(x)  # the forward: no backward() has been called
    msg = str(caught.value)
    assert re.search(r"graph 'model_default_\d+_backward_0'", msg) and "cannot be trained" in msg
    assert "torch.no_grad()" in msg and "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0" in msg
    assert "convolution_backward" in msg
    with torch.no_grad():  # the same model compiles for inference
        torch.testing.assert_close(compiled(x), _transposed_conv()(x), rtol=1e-4, atol=1e-5)


def test_a_refused_training_graph_runs_eagerly_with_the_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    model = _transposed_conv()
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(2, 2, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(x).sum().backward()
    fallbacks = [w for w in caught if "running the graph eagerly" in str(w.message)]
    assert len(fallbacks) == 1 and "cannot be trained" in str(fallbacks[0].message)
    expected = _transposed_conv()
    expected(x).sum().backward()
    for p, q in zip(model.parameters(), expected.parameters()):
        assert torch.equal(p.grad, q.grad)  # eager on both sides


def _backward_gm():
    def bw(a, b):
        return a * b, None

    return make_fx(bw)(torch.randn(2), torch.randn(2))


def _failing_build():
    raise NEFFCompilationError("the compiler failed", graph_name="m_0_backward_0")


# These two fake the pipeline (a build that fails) to reach the backward graph's own fallback:
# a real backward graph that lowers but does not compile is not at hand.


# The fallback is the compile request's (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION when it was made).


def test_a_backward_graph_that_fails_to_build_raises_by_default():
    graph = BackwardGraph(_failing_build, _backward_gm(), "m_0_backward_0", fallback=False)
    with pytest.raises(NEFFCompilationError, match="m_0_backward_0"):
        graph(torch.ones(2), torch.ones(2))


def test_a_backward_graph_that_fails_to_build_runs_eagerly_with_the_fallback():
    graph = BackwardGraph(_failing_build, _backward_gm(), "m_0_backward_0", fallback=True)
    with pytest.warns(UserWarning, match="running the graph eagerly.*m_0_backward_0"):
        out = graph(torch.full((2,), 2.0), torch.full((2,), 3.0))
    assert torch.equal(out[0], torch.full((2,), 6.0)) and out[1] is None


def _conv_net() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, stride=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 3))


def test_a_convolution_and_max_pool_network_trains_through_the_pipeline():
    # convolution_backward and max_pool2d_with_indices_backward go through their decompositions
    model = _conv_net()
    x = torch.randn(2, 2, 6, 6, generator=torch.Generator().manual_seed(4))
    target = torch.tensor([0, 2])
    loss = nn.functional.cross_entropy(torch.compile(model, backend="neuron")(x), target)
    loss.backward()
    expected = _conv_net()
    nn.functional.cross_entropy(expected(x), target).backward()
    kinds = [m.graph_name.split("_")[-2] for m in reference.get_dynamo_metrics()]
    assert kinds == ["forward", "backward"], kinds  # both compiled, nothing fell back
    for (name, p), q in zip(model.named_parameters(), expected.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"grad of {n}: {m}")
