"""Property: the default passes never change what a graph computes, nor what it writes.

Hypothesis draws small programs mixing fresh values, views and in-place writes (into inputs,
intermediates and views). Each is traced twice, with ``torch.fx.symbolic_trace`` (no recorded
example values) and with Dynamo; the default passes run on the graph, which then runs eagerly.
Outputs and the inputs after the call must equal eager's exactly. The graphs are not compiled:
this checks the rewrites; the conformance suite checks the compiled pipeline.
"""

from __future__ import annotations

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import fx

from reference.fx_passes import get_default_pass_manager

INPLACE = ["add_", "mul_", "relu_", "neg_", "sigmoid_"]
_INPLACE_ARGS = {"add_": (1.5,), "mul_": (0.5,), "relu_": (), "neg_": (), "sigmoid_": ()}


@st.composite
def programs(draw):
    ndims = [2, 2]  # inputs x and y, both of shape (2, 3)
    steps = []
    for _ in range(draw(st.integers(1, 8), label="steps")):
        src = draw(st.integers(0, len(ndims) - 1), label="operand")
        kinds = ["fresh", "inplace", "reshape", "t", "unsqueeze"]
        if ndims[src] >= 1:
            kinds.append("select")
        if ndims[src] >= 2:
            kinds.append("slice")
        kind = draw(st.sampled_from(kinds), label="kind")
        if kind == "inplace":
            # The in-place result (the operand itself) becomes a value too.
            steps.append(("inplace", src, draw(st.sampled_from(INPLACE), label="op")))
            ndims.append(ndims[src])
            continue
        nd = ndims[src]
        if kind == "t" and nd > 2:
            kind = "transpose"
        if kind == "unsqueeze" and nd >= 4:
            kind = "fresh"
        steps.append((kind, src, None))
        ndims.append({"fresh": nd, "reshape": 1, "t": nd, "transpose": nd, "unsqueeze": nd + 1, "select": nd - 1, "slice": nd}[kind])
    n_values = len(ndims)
    outputs = draw(st.lists(st.integers(0, n_values - 1), min_size=1, max_size=3), label="outputs")
    return steps, outputs


@st.composite
def programs_and_inputs(draw):
    """A program and whether the caller passes ``y`` as a view of ``x`` (aliased inputs)."""
    return draw(programs()), draw(st.booleans(), label="y views x")


def _build(steps, outputs):
    def program(x, y):
        values = [x, y]
        for kind, src, op in steps:
            v = values[src]
            if kind == "inplace":
                values.append(getattr(v, op)(*_INPLACE_ARGS[op]))
            elif kind == "fresh":
                values.append(v * 2 + 1)
            elif kind == "reshape":
                values.append(v.reshape(-1))
            elif kind == "t":
                values.append(v.t())
            elif kind == "transpose":
                values.append(v.transpose(0, 1))
            elif kind == "unsqueeze":
                values.append(v.unsqueeze(0))
            elif kind == "select":
                values.append(v[0])
            elif kind == "slice":
                values.append(v[:, 1:])
        return tuple(values[i] * 1 for i in outputs) + tuple(values[i] for i in outputs)

    return program


def _run(fn, x, y, aliased=False):
    xa = x.clone()
    ya = xa[:, :] if aliased else y.clone()
    out = fn(xa, ya)
    return [o.clone() for o in out], xa, ya


@settings(max_examples=80)
@given(program=programs())
# Found by this property: a write into x while a view of x, written in place earlier, is read later
# (the view's in-place result was not counted as a live view, so the write was deferred past it).
@example(program=([("fresh", 0, None), ("reshape", 0, None), ("inplace", 3, "add_"), ("inplace", 0, "add_")], [4]))
def test_default_passes_preserve_values_and_writes(program):
    steps, outputs = program
    fn = _build(steps, outputs)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    try:
        expected = _run(fn, x, y)
    except RuntimeError:
        return  # the program is not valid eager code (e.g. a 0-d tensor transposed); nothing to compare
    gm = fx.symbolic_trace(fn)
    gm = get_default_pass_manager().run_passes(gm, graph_name="prop", target_device="cpu")
    actual = _run(gm, x, y)
    for a, e in zip(actual[0], expected[0]):
        assert a.shape == e.shape and torch.equal(a, e), f"output differs\n{gm.code}"
    assert torch.equal(actual[1], expected[1]) and torch.equal(actual[2], expected[2]), f"inputs differ\n{gm.code}"


def _passes_then_eager(gm, example_inputs, **_):
    return get_default_pass_manager().run_passes(gm, graph_name="prop", target_device="cpu").forward


@settings(max_examples=25, deadline=None)  # Dynamo traces every example: its time is not the property
@given(case=programs_and_inputs())
def test_default_passes_preserve_values_and_writes_on_dynamo_graphs(case):
    """The same property on Dynamo's graphs, whose recorded example values decide whether a
    ``reshape`` is a view, and whether two inputs share storage."""
    (steps, outputs), aliased = case
    fn = _build(steps, outputs)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    try:
        expected = _run(fn, x, y, aliased)
    except RuntimeError:
        return
    torch._dynamo.reset()
    try:
        actual = _run(torch.compile(fn, backend=_passes_then_eager, fullgraph=True, dynamic=False), x, y, aliased)
    finally:
        torch._dynamo.reset()
    for a, e in zip(actual[0], expected[0]):
        assert a.shape == e.shape and torch.equal(a, e), "output differs"
    assert torch.equal(actual[1], expected[1]) and torch.equal(actual[2], expected[2]), "inputs differ"


def _storages(tensors):
    return [t.untyped_storage().data_ptr() for t in tensors]


@settings(max_examples=25, deadline=None)  # Dynamo and AOT Autograd trace every example
@given(case=programs_and_inputs())
def test_caller_sees_eagers_aliasing_after_passes_and_aot_autograd(case):
    """Which outputs share storage with an input or with each other is what eager gives.

    The passes run, then AOT Autograd (which restores aliasing at runtime) with the ATen graph run
    eagerly in place of torch-mlir and IREE: lowering does not change aliasing, so this keeps
    the property cheap enough for many examples."""
    from torch._dynamo.backends.common import aot_autograd

    (steps, outputs), aliased = case
    fn = _build(steps, outputs)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    xe, ye = x.clone(), y.clone()
    if aliased:
        y, ye = x[:, :], xe[:, :]
    try:
        expected = fn(xe, ye)
    except RuntimeError:
        return
    aot = aot_autograd(fw_compiler=lambda gm, _: gm)

    def backend(gm, example_inputs, **_):
        gm = get_default_pass_manager().run_passes(gm, graph_name="prop", target_device="cpu")
        return aot(gm, example_inputs)

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            actual = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(x, y)
    finally:
        torch._dynamo.reset()
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)
    assert torch.equal(x, xe) and torch.equal(y, ye)
    ref = _storages([xe, ye])
    got = _storages([x, y])
    exp_rel = [[s == r for r in ref] + [s == o for o in _storages(expected)] for s in _storages(expected)]
    act_rel = [[s == r for r in got] + [s == o for o in _storages(actual)] for s in _storages(actual)]
    assert act_rel == exp_rel, "storage sharing differs from eager"
