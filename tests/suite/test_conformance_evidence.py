"""The suite's execution observer (conformance/harness/evidence.py) against real backends.

The observer must tell, without an adapter's help, whether a compiled call did compiled work: a
backend that hands a graph back unchanged runs every compute op of it as an ATen kernel; one that
compiles runs none (the reference: IREE executes the artifact) or some (a library call inside
compiled code). It must also leave what the backend does unchanged: the same graphs, guards and
recompiles with the observer on as off. The backends here are small functions handed to
``torch.compile`` (Dynamo and AOT Autograd are real); the reference is the real pipeline.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from conformance.harness.evidence import Evidence, compute_name, observe_dynamo


def _f(x, w):
    return torch.relu(x @ w + 1).sum(-1)


def _two_graphs(x, w):
    y = torch.relu(x @ w + 1)
    torch._dynamo.graph_break()
    return y.sum(-1) * 2


def unchanged(gm, example_inputs):
    return gm.forward


def _numpy_backend(gm, example_inputs, *, total=True):
    """Compiles ``relu(x @ w + 1)`` (and its ``.sum(-1)`` with ``total``) elsewhere: the matmul
    through ATen (a library call), the rest in NumPy, so that the call runs ``mm`` and none of
    ``add``, ``relu``, ``sum`` as ATen kernels. Returns a tuple, as Dynamo's graphs do."""

    def run(x, w):
        y = np.maximum(torch.mm(x, w).numpy() + 1, 0)
        return (torch.from_numpy(y.sum(-1) if total else y),)

    return run


X, W = torch.randn(8, 16), torch.randn(16, 4)


def _observe(fn, backend, *calls):
    torch._dynamo.reset()
    with observe_dynamo() as ev:
        compiled = torch.compile(fn, backend=backend)
        outs = [compiled(*args) for args in calls]
    return ev, outs


def test_a_graph_handed_back_unchanged_ran_eagerly_with_its_ops_named():
    ev, (out,) = _observe(_f, unchanged, (X, W))
    torch.testing.assert_close(out, _f(X, W))
    assert ev.graphs == 1 and ev.calls == 1
    assert ev.eager == [{"graph": "graph 0/0", "ops": ["add", "mm", "relu", "sum"], "calls": 1}]
    assert ev.shortfall(require_compile=True) == "ran eagerly: graph 0/0 (add, mm, relu, sum)"


def test_aot_autograd_running_the_graph_eagerly_is_seen_the_same_way():
    ev, _ = _observe(_f, "aot_eager", (X, W))
    assert ev.ran_eagerly() == "ran eagerly: graph 0/0 (add, mm, relu, sum)"


def test_a_call_that_ran_some_ops_as_aten_kernels_did_compiled_work_and_lists_them():
    ev, (out,) = _observe(_f, _numpy_backend, (X, W))
    torch.testing.assert_close(out, _f(X, W))
    assert ev.eager == [] and ev.shortfall(require_compile=True) is None
    assert ev.aten == [{"graph": "graph 0/0", "ops": ["mm"], "calls": 1}]
    assert ev.kernels() == "ops run as ATen kernels: mm (graph 0/0)"


def test_every_call_and_graph_counts_not_only_the_first():
    handed = []

    def every_other(gm, example_inputs):
        handed.append(gm)
        return _numpy_backend(gm, example_inputs, total=False) if len(handed) % 2 else gm.forward

    ev, _ = _observe(_two_graphs, every_other, (X, W), (X, W))
    # graph 0/0 (the matmul side) did compiled work; graph 1/0 (sum, mul) ran eagerly, twice
    assert [e["graph"] for e in ev.eager] == ["graph 1/0"] and ev.eager[0]["calls"] == 2
    assert ev.eager[0]["ops"] == ["mul", "sum"]
    assert ev.shortfall(require_compile=True).startswith("ran eagerly: graph 1/0 (mul, sum)")


def test_a_graph_of_views_only_is_not_judged():
    # its outputs alias its inputs: any implementation returns them as views of the inputs
    ev, _ = _observe(lambda x: x.t().unsqueeze(0), unchanged, (X,))
    assert ev.calls == 1 and ev.eager == [] and ev.aten == []
    assert ev.shortfall(require_compile=True) is None


def test_the_reference_runs_no_aten_compute_kernel():
    pytest.importorskip("torch_mlir")
    import reference  # noqa: F401 - registers the neuron backend

    ev, outs = _observe(_two_graphs, "neuron", (X, W), (X, W))
    torch.testing.assert_close(outs[-1], _two_graphs(X, W))
    assert ev.graphs == 2 and ev.calls == 4
    assert ev.eager == [] and ev.aten == [], ev.as_dict()
    assert ev.kernels() == "no ATen compute kernel ran (4 calls)"


def _dynamo_counts(observed: bool) -> tuple:
    """What Dynamo did for one function over three shapes (a recompile) and a graph break, and
    what the backend was handed."""
    handed = []

    def backend(gm, example_inputs):
        handed.append(len(gm.graph.nodes))
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_two_graphs, backend=backend)
    calls = [(X, W), (X, W), (torch.randn(4, 16), W), (torch.randn(4, 16), W)]
    if observed:
        with observe_dynamo():
            outs = [compiled(*c) for c in calls]
    else:
        outs = [compiled(*c) for c in calls]
    stats = {k: v for k, v in counters["stats"].items()}
    return handed, stats, dict(counters["graph_break"]), [o.shape for o in outs]


def test_the_observer_changes_nothing_dynamo_or_the_backend_does():
    plain, observed = _dynamo_counts(False), _dynamo_counts(True)
    assert observed == plain
    assert plain[1]["unique_graphs"] >= 3, plain  # the shapes recompiled: the comparison means something


def test_compute_names_fold_in_place_and_out_forms_and_leave_views_out():
    assert compute_name(torch.ops.aten.add_.Tensor) == "add"
    assert compute_name(torch.ops.aten.mm.out) == "mm"
    assert compute_name(torch.ops.aten.view.default) is None
    assert compute_name(torch.ops.aten.empty_strided.default) is None
    assert compute_name(torch.ops.aten.__and__.Tensor) == "__and__"


def test_an_exception_of_the_compiled_call_keeps_its_type_and_says_where_it_came_from():
    class DeviceFault(RuntimeError):
        pass

    def failing(gm, example_inputs):
        def run(*args):
            raise DeviceFault("execution failed")

        return run

    torch._dynamo.reset()
    with observe_dynamo() as ev, pytest.raises(DeviceFault) as info:
        torch.compile(_f, backend=failing)(X, W)
    assert any("'failing' backend" in note and "graph 0/0" in note for note in info.value.__notes__)
    assert ev.calls == 0


def test_evidence_round_trips_through_its_dict():
    ev, _ = _observe(_f, unchanged, (X, W))
    again = Evidence.from_dict(ev.as_dict())
    assert again.ran_eagerly() == ev.ran_eagerly() and again.kernels() == ev.kernels()


def test_a_higher_order_operator_in_the_compiled_call_runs_as_without_the_observer():
    # AOT Autograd wraps an op with side effects (linalg's error checks) in the with_effects
    # higher-order operator; a dispatch mode that does not take higher-order operators makes it raise
    a = torch.randn(4, 4)
    a = a @ a.T + 4 * torch.eye(4)
    ev, (out,) = _observe(torch.linalg.inv, "aot_eager", (a,))
    torch.testing.assert_close(out, torch.linalg.inv(a))
    assert ev.calls == 1


def test_a_break_is_declared_dynamos_own_or_undeclared():
    from conformance.harness.opinfo import undeclared_breaks

    declared = "Op not supported by the Neuron backend"
    reasons = [
        f"{declared} Explanation: the backend cannot compile op=histc",
        "Dynamic shape operator Explanation: Operator `aten.nonzero.default` has a data-dependent shape",
        "Operator kept out of the graph Explanation: no rule says so",
    ]
    assert undeclared_breaks(reasons, declared) == reasons[2:]
    assert undeclared_breaks(reasons, None) == [reasons[0], reasons[2]]  # nothing declared: only Dynamo's own pass
