"""The backend's forced graph breaks: the rule, the thresholds, and the Dynamo hook (exercised with
a small opted-in backend that runs graphs eagerly, so no compiler runs; the neuron backend itself is
covered by the conformance probes; the op table by tests/lowering/test_lowering_optable.py)."""

from __future__ import annotations

import pytest
import torch

from reference.backends import graph_breaks
from reference.core.errors import BackendOptionError
from reference.backends.graph_breaks import decide


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    graph_breaks.install()
    yield
    graph_breaks.reset_graph_break_thresholds()
    torch._dynamo.reset()


def _fake(*shape):
    return torch.empty(shape, device="meta")


@pytest.mark.parametrize("op", ["sort", "argsort"])
def test_sort_breaks_only_above_the_threshold(op):
    assert decide(op, [_fake(2, 16384)], {}) is None
    d = decide(op, [_fake(2, 16385)], {})
    assert d is not None and d.op == op and "16385" in d.reason and "16384" in d.reason


def test_the_sorted_dimension_is_the_one_that_counts():
    x = _fake(16385, 2)
    assert decide("sort", [x], {}) is None  # default dim -1 has 2 elements
    assert decide("sort", [x], {"dim": 0}) is not None
    assert decide("sort", [x, 0], {}) is not None


def test_topk_breaks_from_k_16384():
    x = _fake(2, 20000)
    assert decide("topk", [x, 16383], {}) is None
    assert decide("topk", [x, 16384], {}) is not None
    assert decide("topk", [x], {"k": 20000}) is not None


@pytest.mark.parametrize("op", ["grouped_mm", "_grouped_mm"])
def test_grouped_mm_always_breaks(op):
    assert decide(op, [_fake(2, 2)], {}) is not None


def test_ordinary_ops_do_not_break():
    for op in ("add", "mul", "relu", "matmul", "where", "softmax"):
        assert decide(op, [_fake(4, 4)], {}) is None, op


def test_thresholds_can_be_changed_and_unknown_ones_are_refused():
    graph_breaks.set_graph_break_thresholds(sort=8)
    assert decide("sort", [_fake(9)], {}) is not None
    with pytest.raises(BackendOptionError, match=r"unknown graph-break threshold.*'sortt'.*known thresholds: \['sort', 'topk'\]"):
        graph_breaks.set_graph_break_thresholds(sortt=3)
    with pytest.raises(BackendOptionError, match="positive int"):
        graph_breaks.set_graph_break_thresholds(topk=0)
    graph_breaks.reset_graph_break_thresholds()
    assert decide("sort", [_fake(9)], {}) is None


def _counting_backend(opt_in: bool):
    graphs = []

    def backend(gm, example_inputs, **_):
        graphs.append(gm)
        return gm.forward

    return (graph_breaks.forces_graph_breaks(backend) if opt_in else backend), graphs


def _with_histc(x):
    y = x * 2
    return torch.histc(y, bins=4).sum() + y.sum()


def test_an_opted_in_backend_gets_the_break_and_other_backends_do_not():
    x = torch.randn(32)
    backend, graphs = _counting_backend(opt_in=True)
    assert torch.allclose(torch.compile(_with_histc, backend=backend)(x), _with_histc(x))
    assert len(graphs) == 2
    torch._dynamo.reset()
    other, other_graphs = _counting_backend(opt_in=False)
    torch.compile(_with_histc, backend=other)(x)
    assert len(other_graphs) == 1


@pytest.mark.spec("001.breaks.diagnostic-type")
def test_fullgraph_raises_unsupported_with_the_backends_diagnostic_type():
    backend, _ = _counting_backend(opt_in=True)
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        torch.compile(lambda x: x.histc(bins=4), backend=backend, fullgraph=True)(torch.randn(8))
    assert info.value.gb_type == "Op not supported by the Neuron backend"
    assert "histc" in str(info.value) and "torch.aten.histc" in str(info.value)


def test_shapes_stay_static_for_an_opted_in_backend():
    backend, graphs = _counting_backend(opt_in=True)
    compiled = torch.compile(lambda x: x * 2, backend=backend)
    for n in (3, 5, 7):
        compiled(torch.randn(n))
    assert len(graphs) == 3
    for gm in graphs:
        for node in gm.graph.find_nodes(op="placeholder"):
            val = node.meta.get("example_value")
            assert not isinstance(val, torch.SymInt)
            assert not any(isinstance(s, torch.SymInt) for s in getattr(val, "shape", ()))


# --- ops of any namespace -------------------------------------------------------------------------

@torch.library.custom_op("graph_break_tests::opaque", mutates_args=())
def _opaque(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@_opaque.register_fake
def _(x):
    return torch.empty_like(x)


_LIB = torch.library.Library("graph_break_tests", "FRAGMENT")
_LIB.define("composite(Tensor x) -> Tensor")
_LIB.impl("composite", lambda x: torch.sigmoid(x) * 2, "CompositeImplicitAutograd")


def _with_custom(op):
    def f(x):
        y = x + 1
        return op(y) * y

    return f


def test_a_custom_op_with_no_lowering_breaks_and_is_named_by_its_qualified_name():
    from torch._dynamo.utils import counters

    x = torch.randn(6)
    backend, graphs = _counting_backend(opt_in=True)
    counters["graph_break"].clear()
    f = _with_custom(torch.ops.graph_break_tests.opaque)
    assert torch.allclose(torch.compile(f, backend=backend)(x), f(x))
    assert len(graphs) == 2
    assert any("op=graph_break_tests::opaque" in r for r in counters["graph_break"])
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        torch.compile(f, backend=backend, fullgraph=True)(x)
    assert info.value.gb_type == "Op not supported by the Neuron backend"
    assert "graph_break_tests::opaque" in str(info.value) and "no lowering" in str(info.value)
    torch._dynamo.reset()
    other, other_graphs = _counting_backend(opt_in=False)
    torch.compile(f, backend=other, fullgraph=True)(x)
    assert len(other_graphs) == 1, "another backend traces the op into its graph"


def test_a_custom_op_with_a_composite_kernel_that_lowers_stays_in_the_graph():
    x = torch.randn(6)
    backend, graphs = _counting_backend(opt_in=True)
    f = _with_custom(torch.ops.graph_break_tests.composite.default)
    assert torch.allclose(torch.compile(f, backend=backend, fullgraph=True)(x), f(x))
    assert len(graphs) == 1


def test_a_direct_aten_overload_call_follows_the_op_table():
    backend, graphs = _counting_backend(opt_in=True)
    with pytest.raises(torch._dynamo.exc.Unsupported, match="histc"):
        torch.compile(lambda x: torch.ops.aten.histc.default(x * 2, 4), backend=backend, fullgraph=True)(torch.randn(8))


# --- installed on first use -----------------------------------------------------------------------


def test_the_first_use_installs_the_hooks_and_retraces_a_graph_traced_without_them():
    graph_breaks.uninstall()
    backend, graphs = _counting_backend(opt_in=True)
    x = torch.randn(32)
    assert torch.allclose(torch.compile(_with_histc, backend=backend)(x), _with_histc(x))
    assert graph_breaks.installed()
    assert len(graphs) == 2 and not any("histc" in g.code for g in graphs), "the first graph was not traced again"


def test_a_first_graph_with_nothing_to_break_is_not_traced_again():
    graph_breaks.uninstall()
    traced = []

    def backend(gm, example_inputs, **_):
        traced.append(gm)
        return gm.forward

    opted = graph_breaks.forces_graph_breaks(backend)
    torch.compile(lambda v: v * 2 + 1, backend=opted)(torch.randn(4))
    assert graph_breaks.installed() and len(traced) == 1


def test_a_graph_traced_while_another_thread_installed_the_hooks_is_traced_again():
    """Dynamo holds its compile lock around a trace and the backend call that follows, so two
    threads' first compiles cannot interleave there; but ``install()`` called directly from another
    thread (outside Dynamo, without the lock) can land between a trace and its backend call. Thread
    B traces a graph holding histc without the hooks; the main thread installs them; B's backend
    then finds a call the rules break on and has the frame traced again (real threads; an event
    holds B between its trace and its backend so the interleaving is the racy one)."""
    import functools
    import threading

    graph_breaks.uninstall()
    opted, graphs = _counting_backend(opt_in=True)
    traced, go_on = threading.Event(), threading.Event()

    @functools.wraps(opted)  # the backend Dynamo holds for B's frame; the hooks see the opted-in one under it
    def held(gm, example_inputs, **kwargs):
        if not go_on.is_set():  # B's first trace: done without the hooks; wait for them to go in
            traced.set()
            assert go_on.wait(60), "the hooks were never installed"
        return opted(gm, example_inputs, **kwargs)

    x = torch.randn(32)
    out: list = []
    b = threading.Thread(target=lambda: out.append(torch.compile(_with_histc, backend=held)(x)))
    b.start()
    try:
        assert traced.wait(60), "thread B never reached its backend"
        assert not graph_breaks.installed()
        assert graph_breaks.install()  # from this thread, while B holds Dynamo's compile lock
    finally:
        go_on.set()
        b.join(120)
    assert out and torch.allclose(out[0], _with_histc(x))
    assert graphs and not any("histc" in g.code for g in graphs), "B's graph, traced without the hooks, was compiled whole"
    assert all(graph_breaks.breaking_call(g) is None for g in graphs)


def test_the_rules_read_a_traced_graph_as_the_hooks_read_the_calls():
    graph_breaks.uninstall()
    keep, seen = _counting_backend(opt_in=False)
    torch.compile(_with_histc, backend=keep)(torch.randn(32))  # not opted in: traced whole
    torch.compile(lambda v: torch.sort(v).values + 1, backend=keep)(torch.randn(64))  # below the threshold
    torch._dynamo.reset()
    whole, small_sort = seen
    assert graph_breaks.breaking_call(whole).op == "histc"
    assert graph_breaks.breaking_call(small_sort) is None


def test_importing_the_backend_installs_nothing():
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import reference, reference.backends.neuron\n"
        "from reference.core.torch_compat import DYNAMO_HOOKS\n"
        "from torch._dynamo.variables.torch import TorchInGraphFunctionVariable as V\n"
        "print(DYNAMO_HOOKS.installed(), V.call_function.__module__)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True, env=env, cwd=root)
    assert out.stdout.split() == ["False", "torch._dynamo.variables.torch"]
