"""A user's own custom ops inside a model: each one compiles or breaks the graph, never fails.

The seeds' rule is general: an operation the backend cannot compile forces a graph break and runs
eagerly, and under ``fullgraph=True`` raises the ``Op not supported by the Neuron backend``
diagnostic naming it. These tests hold ops of a namespace the backend cannot know to it: ops a user
registers with ``torch.library`` (``custom_op`` with and without a fake kernel, a ``Library``
definition with a CPU kernel, ``CompositeImplicitAutograd`` decompositions), called inside a small
model. Per op they check, through the adapter: how many graphs compile and how many graph breaks
Dynamo reports naming the op, that the compiled model matches eager, and the ``fullgraph``
diagnostic.

An op with a decomposition to ops that compile stays in the graph (one graph, no break); an op with
no decomposition, or one whose decomposition calls an op with no lowering (``histc``), breaks.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from conformance.harness.implementation import forced_graph_break
from conformance.harness.tolerances import assert_close

pytestmark = [pytest.mark.contract("backend"), pytest.mark.capability("backend")]

NS = "conformance_custom_ops"


# --- the user's ops ------------------------------------------------------------------------------

@torch.library.custom_op(f"{NS}::scale_with_fake", mutates_args=())
def _scale_with_fake(x: torch.Tensor) -> torch.Tensor:
    return x * 1.5 + 0.25


@_scale_with_fake.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::scale_without_fake", mutates_args=())
def _scale_without_fake(x: torch.Tensor) -> torch.Tensor:
    return x * 1.5 + 0.25


_LIB = torch.library.Library(NS, "FRAGMENT")
# A CPU kernel registered directly on a Library (as direct_register_custom_op does), with a fake one.
_LIB.define("cpu_kernel(Tensor x) -> Tensor")
_LIB.impl("cpu_kernel", lambda x: x * 1.5 + 0.25, "CPU")
torch.library.register_fake(f"{NS}::cpu_kernel", lambda x: torch.empty_like(x), lib=_LIB)
# Decompositions the dispatcher applies itself.
_LIB.define("composite_gelu_scale(Tensor x, float s) -> Tensor")
_LIB.impl("composite_gelu_scale", lambda x, s: torch.nn.functional.gelu(x) * s, "CompositeImplicitAutograd")
_LIB.define("composite_calls_opaque(Tensor x) -> Tensor")
_LIB.impl("composite_calls_opaque", lambda x: torch.ops.conformance_custom_ops.scale_with_fake(x) - 1.0,
          "CompositeImplicitAutograd")
_LIB.define("composite_histogram(Tensor x) -> Tensor")
_LIB.impl("composite_histogram", lambda x: x + torch.histc(x, bins=8).sum(), "CompositeImplicitAutograd")

ops = torch.ops.conformance_custom_ops

#: Ops that cannot compile: (id, the call, the op's qualified name).
BREAKING = [
    ("custom_op_with_fake", lambda h: ops.scale_with_fake(h), f"{NS}::scale_with_fake"),
    ("custom_op_without_fake", lambda h: ops.scale_without_fake(h), f"{NS}::scale_without_fake"),
    ("library_cpu_kernel", lambda h: ops.cpu_kernel.default(h), f"{NS}::cpu_kernel"),
    ("composite_calls_opaque", lambda h: ops.composite_calls_opaque(h), f"{NS}::composite_calls_opaque"),
    ("composite_calls_histc", lambda h: ops.composite_histogram(h), f"{NS}::composite_histogram"),
]

#: Ops whose decomposition compiles.
LOWERING = [
    ("composite_gelu", lambda h: ops.composite_gelu_scale(h, 0.5)),
    ("composite_gelu_overload", lambda h: ops.composite_gelu_scale.default(h, 2.0)),
]


class _Model(torch.nn.Module):
    """Linear, ReLU, the op, then a linear layer and a residual: compiled code on both sides."""

    def __init__(self, op) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.first = torch.nn.Linear(8, 8)
        self.last = torch.nn.Linear(8, 8)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) * 0.3
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x))
        h = self.op(h)
        return self.last(h) + h


def _x() -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(6))


@pytest.fixture
def gb_type(impl):
    """The diagnostic type of the breaks the implementation forces. One that forces none (``{}``, or
    NotSupported) has no rule that could break at a user's op: each test needing it skips."""
    return forced_graph_break(impl, "gb_type")


def _breaks_naming(name: str) -> int:
    """Distinct graph-break reasons in Dynamo's report that name ``name`` (Dynamo may count one
    break more than once while it restarts the trace at it)."""
    return sum(1 for reason in counters["graph_break"] if name in str(reason))


@pytest.mark.evidence  # the graphs around the break must run compiled, not fall back
@pytest.mark.parametrize("op_id,call,name", BREAKING, ids=[b[0] for b in BREAKING])
def test_a_custom_op_that_cannot_compile_breaks_the_graph_and_runs_eagerly(impl, gb_type, op_id, call, name):
    model, x = _Model(call), _x()
    with torch.no_grad():
        want = model(x)
        impl.backend().reset_graph_count()
        counters["graph_break"].clear()
        got = impl.backend().torch_compile(model)(x)
    assert_close(got, want, what=f"{op_id}: the compiled model")
    assert _breaks_naming(name) == 1, (
        f"{op_id}: expected one graph break naming {name}, Dynamo reported {dict(counters['graph_break'])}"
    )
    # The code before and after the op compiles. A kernel written in Python that runs at the break
    # is a frame Dynamo traces too (custom_op disables that for its kernels, a Library.impl or a
    # composite kernel does not), so its body may compile as one more graph.
    assert impl.backend().graph_count() >= 2, f"{op_id}: {impl.backend().graph_count()} graphs; the code on both sides compiles"
    if op_id.startswith("custom_op"):
        assert impl.backend().graph_count() == 2, f"{op_id}: {impl.backend().graph_count()} graphs, expected the two around the op"


@pytest.mark.parametrize("op_id,call,name", BREAKING, ids=[b[0] for b in BREAKING])
@pytest.mark.spec("001.breaks.no-lowering", "001.breaks.fullgraph-unsupported")
def test_under_fullgraph_a_custom_op_that_cannot_compile_raises_the_diagnostic_naming_it(impl, gb_type, op_id, call,
                                                                                            name):
    with pytest.raises(torch._dynamo.exc.Unsupported) as info, torch.no_grad():
        impl.backend().torch_compile(_Model(call), fullgraph=True)(_x())
    assert info.value.gb_type == gb_type, f"{op_id}: gb_type {info.value.gb_type!r}, not {gb_type!r}"
    assert name in str(info.value), f"{op_id}: the diagnostic does not name {name}: {info.value}"


@pytest.mark.evidence
@pytest.mark.parametrize("op_id,call", LOWERING, ids=[c[0] for c in LOWERING])
def test_a_custom_op_with_a_decomposition_that_compiles_stays_in_one_graph(impl, op_id, call):
    model, x = _Model(call), _x()
    with torch.no_grad():
        want = model(x)
        impl.backend().reset_graph_count()
        counters["graph_break"].clear()
        got = impl.backend().torch_compile(model, fullgraph=True)(x)
    assert_close(got, want, what=f"{op_id}: the compiled model")
    assert impl.backend().graph_count() == 1 and not counters["graph_break"], (
        f"{op_id}: {impl.backend().graph_count()} graphs, breaks {dict(counters['graph_break'])}"
    )


def test_the_same_op_in_two_models_breaks_in_both(impl, gb_type):
    """A decision is remembered, not lost: the second model breaks at the op too."""
    call, name = BREAKING[0][1], BREAKING[0][2]
    for _ in range(2):
        impl.reset()
        counters["graph_break"].clear()
        model, x = _Model(call), _x()
        with torch.no_grad():
            assert_close(impl.backend().torch_compile(model)(x), model(x), what="the compiled model")
        assert _breaks_naming(name) == 1
