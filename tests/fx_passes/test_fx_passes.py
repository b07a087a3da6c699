"""Unit tests of the FX pass stage: the manager, each default pass, the order.

Small graphs are built by hand (``torch.fx.symbolic_trace`` or Dynamo with a capturing backend);
the graph after a pass is a reviewed snapshot (``tests/fx_passes/__snapshots__/test_fx_passes.ambr``). Graphs
that run through the whole pipeline use the real backend (Dynamo, AOT Autograd, torch-mlir,
IREE): nothing is faked here.
"""

from __future__ import annotations

import logging


import pytest
import torch
from torch import fx

import neuron_fixtures
from neuron_fixtures.aliasing import outputs_alias_each_other, returns_mutated_input, returns_view_taken_before_mutation
from conformance.harness.tolerances import assert_close
from reference.backends.neuron import NEURON_SEAM, compile_fx_graph
from reference.fx_passes import (
    AliasingOutputRewritePass,
    CollectiveReplicaGroupsPass,
    DeviceRewriterPass,
    FXPass,
    FXPassError,
    FXPassManager,
    InPlaceToOutOfPlacePass,
    NkiKernelWriteBackendConfigPass,
    PassContext,
    RankConstantCheckPass,
    get_default_pass_manager,
)

DEFAULT_ORDER = [
    "DeviceRewriterPass",
    "AliasingOutputRewritePass",
    "InPlaceToOutOfPlacePass",
    "NkiKernelWriteBackendConfigPass",
    "CollectiveReplicaGroupsPass",
    "RankConstantCheckPass",
]


def code(gm: fx.GraphModule) -> str:
    return gm.code.strip() + "\n"


def dynamo_graph(fn, *args) -> tuple[fx.GraphModule, list]:
    """Dynamo's FX graph of ``fn(*args)`` and its example inputs (no passes, no compile)."""
    captured = []

    def capture(gm, example_inputs, **_):
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=capture, fullgraph=True, dynamic=False)(*args)
    finally:
        torch._dynamo.reset()
    assert len(captured) == 1
    return captured[0]


def compile_with(manager: FXPassManager | None, fn):
    """``torch.compile`` with the real pipeline, running ``manager`` as the pass stage."""

    def backend(gm, example_inputs, **_):
        if manager is not None:
            gm = manager.run_passes(gm, graph_name="test_graph", target_device="cpu")
        return compile_fx_graph(gm, example_inputs, {"enable_fx_passes": False}, seam=NEURON_SEAM)

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)


def manager_of(*passes: FXPass) -> FXPassManager:
    m = FXPassManager()
    for p in passes:
        m.add_pass(p)
    return m


# --- the manager ------------------------------------------------------------------------------


def test_default_order():
    assert get_default_pass_manager().pass_names() == DEFAULT_ORDER


@pytest.mark.spec("003.interface.fxpass")
def test_each_default_pass_is_an_fxpass_with_a_version():
    for p in get_default_pass_manager().passes:
        assert isinstance(p, FXPass)
        assert isinstance(p.version, int) and p.version >= 1
    identity = get_default_pass_manager().identity()
    assert [i.split("#")[0] for i in identity] == [f"{n}@1" for n in DEFAULT_ORDER]
    assert all(len(i.split("#")[1]) == 12 for i in identity), "each pass's identity ends in its source's digest"


def test_a_pass_is_named_after_its_class_and_gets_a_typed_context(monkeypatch):
    seen = []

    class Recorder(FXPass):
        def transform(self, gm, ctx):
            seen.append(ctx)
            return gm

    class SeedStyle(FXPass):  # the seeds' interface: run(gm, **kwargs)
        def run(self, gm, **kwargs):
            seen.append(kwargs)
            return gm

    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "1")  # the keyword entry reads the flag when not given
    manager_of(Recorder(), SeedStyle()).run_passes(fx.symbolic_trace(lambda x: x + 1), graph_name="g", mine=3)
    assert Recorder().name == "Recorder" and SeedStyle().name == "SeedStyle"
    assert seen[0] == PassContext(graph_name="g", target_device="cpu", spmd_strict=True, extra={"mine": 3})
    assert seen[1] == {"graph_name": "g", "target_device": "cpu", "spmd_strict": True, "mine": 3}
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "0")
    assert PassContext.of(graph_name="g").spmd_strict is False
    assert PassContext.of(graph_name="g", spmd_strict=True).spmd_strict is True, "a given flag wins over the environment"


_A_PASS = """
from reference.fx_passes import FXPass


class EditedPass(FXPass):
    def transform(self, gm, ctx):
        return gm  # 1
"""


def _cache_key_with_pass(tmp_path, monkeypatch, source: str, module: str) -> str:
    import importlib.util
    import sys

    path = tmp_path / f"{module}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module, mod)  # imported as any module is
    spec.loader.exec_module(mod)
    identity = manager_of(DeviceRewriterPass(), mod.EditedPass()).uuid()
    from reference.cache.hlo_cache import create_hlo_cache_key

    gm = fx.symbolic_trace(lambda x: x + 1)
    return create_hlo_cache_key(gm, [], identity)


def test_a_one_character_change_to_a_pass_changes_the_cache_key(tmp_path, monkeypatch):
    """No hand bump of ``version``: the pass's source is in its identity, and so in the HLO cache key."""
    first = _cache_key_with_pass(tmp_path, monkeypatch, _A_PASS, "edited_pass_a")
    again = _cache_key_with_pass(tmp_path, monkeypatch, _A_PASS, "edited_pass_b")
    edited = _cache_key_with_pass(tmp_path, monkeypatch, _A_PASS.replace("# 1", "# 2"), "edited_pass_c")
    assert first == again, "the same source, the same key"
    assert edited != first, "one character of the pass changed: the key must change"


@pytest.mark.parametrize("bad", [object(), "DeviceRewriterPass", DeviceRewriterPass, lambda gm, **kw: gm])
@pytest.mark.spec("003.interface.fxpass", "003.manager.add-pass")
def test_add_pass_rejects_a_non_pass_when_added(bad):
    m = FXPassManager()
    with pytest.raises(TypeError, match="FXPass instance"):
        m.add_pass(bad)
    assert m.passes == []


def test_add_pass_names_the_fix_for_a_class():
    with pytest.raises(TypeError, match="pass an instance"):
        FXPassManager().add_pass(DeviceRewriterPass)


def test_identity_follows_order_membership_and_versions():
    base = get_default_pass_manager()
    swapped = manager_of(*[base.passes[i] for i in (0, 2, 1, 3, 4, 5)])
    shorter = manager_of(*base.passes[:-1])

    class Bumped(InPlaceToOutOfPlacePass):
        version = 2

    bumped = manager_of(*[Bumped() if isinstance(p, InPlaceToOutOfPlacePass) else p for p in base.passes])
    uuids = {m.uuid() for m in (base, swapped, shorter, bumped)}
    assert len(uuids) == 4
    assert get_default_pass_manager().uuid() == base.uuid()
    assert len(base.uuid()) == 16


class _Boom(FXPass):
    @property
    def name(self):
        return "Boom"

    def run(self, gm, **kwargs):
        raise KeyError("no such thing")


class _ReturnsNone(FXPass):
    @property
    def name(self):
        return "ReturnsNone"

    def run(self, gm, **kwargs):
        return None


def test_a_failing_pass_is_reported_with_its_name_and_the_graph():
    gm = fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(FXPassError) as info:
        manager_of(DeviceRewriterPass(), _Boom()).run_passes(gm, graph_name="g_7")
    msg = str(info.value)
    assert "'Boom'" in msg and "'g_7'" in msg and "KeyError" in msg and "no such thing" in msg
    assert info.value.pass_name == "Boom" and info.value.graph_name == "g_7"
    assert isinstance(info.value.__cause__, KeyError)


def test_a_pass_returning_no_graph_is_reported():
    with pytest.raises(FXPassError, match="ReturnsNone.*not a torch.fx.GraphModule"):
        manager_of(_ReturnsNone()).run_passes(fx.symbolic_trace(lambda x: x + 1), graph_name="g")


@pytest.mark.spec("003.manager.debug-timing")
def test_each_pass_wall_time_is_logged_at_debug(caplog):
    with caplog.at_level(logging.DEBUG, logger="reference.fx_passes"):
        get_default_pass_manager().run_passes(fx.symbolic_trace(lambda x: x * 2), graph_name="timed_graph")
    lines = [r.getMessage() for r in caplog.records if "completed in" in r.getMessage()]
    assert [next(n for n in DEFAULT_ORDER if f"'{n}'" in line) for line in lines] == DEFAULT_ORDER
    assert all("timed_graph" in line for line in lines)


# --- DeviceRewriterPass -----------------------------------------------------------------------


def _device_fn(x):
    slots = torch.arange(x.shape[0], device="cuda")
    y = x.to("cuda") * slots
    z = torch.zeros(x.shape, device=torch.device("xla")) + y.cuda()
    return z.to(x.device)


@pytest.mark.spec("003.passes.device-rewriter")
def test_device_rewriter_moves_foreign_device_arguments(snapshot):
    gm = fx.symbolic_trace(_device_fn)
    gm = DeviceRewriterPass().run(gm, target_device="cpu", graph_name="g")
    text = code(gm)
    assert "'cuda'" not in text and "'xla'" not in text and ".cuda(" not in text
    assert text == snapshot
    x = torch.randn(5)
    expected = (x * torch.arange(5)) + torch.zeros(5)
    assert_close(gm(x), expected, what="device-rewritten graph")


def test_device_rewriter_leaves_a_graph_on_the_target_device_untouched():
    gm = fx.symbolic_trace(lambda x: torch.arange(x.shape[0], device="cpu") + x.to("cpu"))
    before = code(gm)
    assert code(DeviceRewriterPass().run(gm, target_device="cpu")) == before


def test_device_rewriter_moves_graph_constants_to_the_target():
    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((3,), 2.0))

        def forward(self, x):
            return torch.ones(3) + torch.ones(x.shape[0], device="cpu") + x * self.scale

    gm = fx.symbolic_trace(WithConstant())
    gm = DeviceRewriterPass().run(gm, target_device="meta")
    assert gm.scale.device.type == "meta"  # a buffer
    assert gm._tensor_constant0.device.type == "meta"  # a constant the tracer lifted
    assert "device(type='meta')" in gm.code and "device(type='cpu')" not in gm.code


def test_device_rewriter_names_a_constant_it_cannot_move():
    class MetaConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.empty(3, device="meta"))

        def forward(self, x):
            return x + self.table

    with pytest.raises(FXPassError, match=r"DeviceRewriterPass.*'g'.*node 'table'.*meta tensor"):
        DeviceRewriterPass().run(fx.symbolic_trace(MetaConstant()), target_device="cpu", graph_name="g")


def test_device_rewriter_names_a_device_argument_that_is_not_a_device():
    gm = fx.symbolic_trace(lambda x: torch.zeros(x.shape, device="gpu0") + x)
    with pytest.raises(FXPassError, match=r"node 'zeros'.*'gpu0' is not a device"):
        DeviceRewriterPass().run(gm, target_device="cpu", graph_name="g")


@pytest.mark.spec("003.config.target-device")
def test_device_rewriter_rejects_a_bad_target_device():
    with pytest.raises(FXPassError, match="target_device 'nowhere' is not a device"):
        DeviceRewriterPass().run(fx.symbolic_trace(lambda x: x + 1), target_device="nowhere", graph_name="g")


# --- AliasingOutputRewritePass ----------------------------------------------------------------


ALIASING_CASES = {
    "mutated_input": returns_mutated_input,
    "view_before_mutation": returns_view_taken_before_mutation,
    "outputs_alias": outputs_alias_each_other,
}


@pytest.mark.parametrize("case", sorted(ALIASING_CASES))
def test_aliasing_pass_graph(snapshot, case):
    gm, _ = dynamo_graph(ALIASING_CASES[case], torch.randn(6))
    gm = AliasingOutputRewritePass().run(gm, graph_name="g")
    assert {"code": code(gm), "found": gm.meta["fx_aliased_outputs"]} == snapshot


def test_aliasing_pass_leaves_fresh_outputs_alone():
    gm, _ = dynamo_graph(lambda x: (x * 2, x.sum()), torch.randn(3))
    before = code(gm)
    gm = AliasingOutputRewritePass().run(gm)
    assert code(gm) == before and gm.meta["fx_aliased_outputs"] == []


# --- InPlaceToOutOfPlacePass ------------------------------------------------------------------


def _mixed_inplace(x, buf):
    h = x * 2
    h.relu_()
    h += 1
    buf.index_copy_(0, torch.tensor([0]), h[:1])
    torch.sigmoid_(h)
    return h + buf.sum()


def test_inplace_pass_graph(snapshot):
    gm, _ = dynamo_graph(_mixed_inplace, torch.randn(3, 4), torch.zeros(2, 4))
    gm = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    assert {"code": code(gm), "rewrites": gm.meta["fx_inplace_rewrites"], "kept": gm.meta["fx_inplace_kept"]} == snapshot
    in_place = [n for n in gm.graph.nodes if n.op == "call_method" and n.target.endswith("_")]
    assert [n.target for n in in_place] == ["copy_"]  # only the copy back into the caller's buffer


@pytest.mark.spec("003.passes.inplace-to-outofplace")
def test_inplace_pass_graph_runs_like_the_original():
    x, buf = torch.randn(3, 4), torch.zeros(2, 4)
    gm, _ = dynamo_graph(_mixed_inplace, x.clone(), buf.clone())
    rewritten = InPlaceToOutOfPlacePass().run(gm)
    b1, b2 = buf.clone(), buf.clone()
    expected = _mixed_inplace(x.clone(), b1)
    actual = rewritten(x.clone(), b2)
    assert_close(actual[0], expected, what="output")
    assert_close(b2, b1, what="buffer written in place")


def _zeroes_its_input(x):
    torch.zero_(x)
    return x + 1


def test_inplace_pass_rewrites_a_function_whose_out_of_place_form_is_an_aten_op():
    # torch.zero_ has no torch.zero: its functional form is aten.zero (the op lane's zero_ rows)
    x = torch.randn(3)
    gm, _ = dynamo_graph(_zeroes_its_input, x.clone())
    rewritten = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    assert any(n.target is torch.ops.aten.zero for n in rewritten.graph.nodes)
    y = x.clone()
    assert_close(rewritten(y)[0], torch.ones(3), what="output")
    assert_close(y, torch.zeros(3), what="the input, zeroed by the copy back")


def _writes_into_a_view(x):
    x[0].zero_()
    return x * 2


def _view_read_after_write(x):
    h = x + 1
    v = h.view(-1)
    h.mul_(3)
    return v.sum()


def _setitem(x):
    x[0] = 5.0
    return x + 1


@pytest.mark.parametrize(
    "fn, reason",
    [
        (_writes_into_a_view, "writes into a view of 'l_x_'"),
        (_view_read_after_write, "'h' has a view 'v' read after the write"),
        (_setitem, "setitem has no single out-of-place op"),
    ],
)
def test_inplace_pass_keeps_what_it_cannot_rewrite_safely(fn, reason):
    x = torch.randn(4, 3)
    gm, _ = dynamo_graph(fn, x.clone())
    gm = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    assert [k["reason"] for k in gm.meta["fx_inplace_kept"]] == [reason]
    xa, xe = x.clone(), x.clone()
    assert_close(gm(xa)[0], fn(xe), what="output")
    assert_close(xa, xe, what="input after the call")


def _half_times_float(x, y):
    x.mul_(y)  # stays float16 in eager; x.mul(y) alone would promote to float32
    return x + 1


def test_inplace_pass_keeps_the_written_dtype():
    x, y = torch.randn(4).half(), torch.randn(4)
    gm, _ = dynamo_graph(_half_times_float, x.clone(), y)
    gm = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    xa, xe = x.clone(), x.clone()
    actual, expected = gm(xa, y)[0], _half_times_float(xe, y)
    assert actual.dtype == torch.float16
    assert torch.equal(actual, expected) and torch.equal(xa, xe)


def _unsqueeze_in_place(x):
    h = x + 1
    h.unsqueeze_(0)
    return h * 2


def test_inplace_pass_keeps_ops_that_change_shape():
    gm, _ = dynamo_graph(_unsqueeze_in_place, torch.randn(3))
    gm = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    assert [k["node"] for k in gm.meta["fx_inplace_kept"]] == ["unsqueeze_"]
    x = torch.randn(3)
    assert torch.equal(gm(x)[0], _unsqueeze_in_place(x))


def _writes_one_input_reads_another(a, b):
    a.add_(1)
    return b * 1


def test_inplace_pass_keeps_a_write_into_an_input_another_input_aliases():
    x = torch.zeros(2, 3)
    gm, _ = dynamo_graph(_writes_one_input_reads_another, x, x[0])
    gm = InPlaceToOutOfPlacePass().run(gm, graph_name="g")
    assert [k["reason"] for k in gm.meta["fx_inplace_kept"]] == ["input 'l_a_' shares storage with input 'l_b_'"]
    x = torch.zeros(2, 3)
    assert torch.equal(gm(x, x[0])[0], torch.ones(3)), "b is a view of a: it sees the write, as in eager"


def test_inplace_pass_names_an_op_with_no_out_of_place_form():
    graph = fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_method("frobnicate_", (x,))
    graph.output(y)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(FXPassError, match=r"InPlaceToOutOfPlacePass.*'g'.*node 'frobnicate_'.*Tensor.frobnicate_.*no out-of-place form"):
        InPlaceToOutOfPlacePass().run(gm, graph_name="g")


def test_inplace_pass_handles_aten_overloads():
    graph = fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(torch.ops.aten.add_.Tensor, (x, x))
    graph.output(graph.call_function(torch.ops.aten.mul.Tensor, (y, y)))
    gm = InPlaceToOutOfPlacePass().run(fx.GraphModule(torch.nn.Module(), graph))
    targets = [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert targets == [torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, "copy_"]
    a, b = torch.randn(3), None
    b = a.clone()
    assert_close(gm(a), (b + b) * (b + b))
    assert_close(a, b + b, what="input written back")


# --- ordering ---------------------------------------------------------------------------------


@pytest.mark.spec("003.default.aliasing-before-inplace")
def test_swapping_aliasing_and_inplace_loses_the_aliasing():
    """The seed's reason: the aliasing analysis needs the in-place ops still in the graph."""
    dev, alias, inplace = DeviceRewriterPass(), AliasingOutputRewritePass(), InPlaceToOutOfPlacePass()

    gm, _ = dynamo_graph(returns_mutated_input, torch.randn(4))
    swapped = manager_of(dev, inplace, alias).run_passes(gm, graph_name="g")
    assert swapped.meta["fx_aliased_outputs"] == []  # nothing left to find

    x = torch.randn(4)
    eager_x = x.clone()
    assert returns_mutated_input(eager_x) is eager_x

    out = compile_with(manager_of(dev, alias, inplace), returns_mutated_input)(x)
    assert out.data_ptr() == x.data_ptr(), "in the default order the caller gets its own tensor back, as in eager"
    assert_close(x, eager_x, what="input after the call")

    x2 = torch.randn(4)
    out2 = compile_with(manager_of(dev, inplace, alias), returns_mutated_input)(x2)
    assert out2.data_ptr() != x2.data_ptr(), "swapped, the output is a fresh buffer: eager's aliasing is lost"
    out2.zero_()
    assert not torch.equal(x2, out2)  # eager's caller would see x2 zeroed too


# --- whole pipeline with the passes on --------------------------------------------------------


@pytest.mark.parametrize("case", sorted(ALIASING_CASES))
@pytest.mark.spec("003.semantics.matches-eager")
def test_pipeline_with_default_passes_matches_eager_including_aliasing(case):
    fn = ALIASING_CASES[case]
    x = torch.randn(6)
    xe = x.clone()
    expected = fn(xe)
    actual = compile_with(get_default_pass_manager(), fn)(x)
    expected_t = expected if isinstance(expected, tuple) else (expected,)
    actual_t = actual if isinstance(actual, tuple) else (actual,)
    assert_close(list(actual_t), list(expected_t), what=case)
    assert_close(x, xe, what=f"{case} input after the call")
    # The same storage relations as eager: with the input and between outputs.
    for a, e in zip(actual_t, expected_t):
        assert (a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == (
            e.untyped_storage().data_ptr() == xe.untyped_storage().data_ptr()
        )
    if len(actual_t) == 2:
        assert (actual_t[0].untyped_storage().data_ptr() == actual_t[1].untyped_storage().data_ptr()) == (
            expected_t[0].untyped_storage().data_ptr() == expected_t[1].untyped_storage().data_ptr()
        )


# --- the fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_graphs():
    graphs = {}
    for name in neuron_fixtures.names():
        model, args = neuron_fixtures.build(name)
        with torch.no_grad():
            graphs[name] = dynamo_graph(model, *args)
    return graphs


def _clone_inputs(inputs):
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


@pytest.mark.parametrize("name", neuron_fixtures.names())
def test_default_passes_on_fixtures(snapshot, fixture_graphs, name):
    """What each pass does to each fixture's graph (reviewed), and that the graph still computes
    what Dynamo's graph computed, including the inputs it writes."""
    import copy

    original, example_inputs = fixture_graphs[name]
    gm = copy.deepcopy(original)
    gm = get_default_pass_manager().run_passes(gm, graph_name=name, target_device="cpu")
    summary = {
        "aliased_outputs": gm.meta.get("fx_aliased_outputs", []),
        "inplace_rewrites": gm.meta.get("fx_inplace_rewrites", []),
        "inplace_kept": gm.meta.get("fx_inplace_kept", []),
        "kernel_write_back": gm.meta.get("kernel_write_back", []),
    }
    assert summary == snapshot
    in_a, in_e = _clone_inputs(example_inputs), _clone_inputs(example_inputs)
    with torch.no_grad():
        actual, expected = gm(*in_a), original(*in_e)
    assert_close(list(actual), list(expected), what=f"{name} outputs")
    assert_close(in_a, in_e, what=f"{name} inputs after the call")


def test_spmd_placeholders_are_last_in_the_default_order():
    names = get_default_pass_manager().pass_names()
    assert names[-2:] == [CollectiveReplicaGroupsPass().name, RankConstantCheckPass().name]


def test_kernel_pass_is_after_inplace_pass():
    names = get_default_pass_manager().pass_names()
    assert names.index(NkiKernelWriteBackendConfigPass().name) == names.index(InPlaceToOutOfPlacePass().name) + 1


# --- NkiKernelWriteBackendConfigPass ----------------------------------------------------------


@torch.library.custom_op("fx_pass_tests::scale_into", mutates_args=("out",))
def scale_into(x: torch.Tensor, out: torch.Tensor, factor: float) -> None:
    out.copy_(x * factor)


@torch.library.custom_op("fx_pass_tests::count_positive_into", mutates_args=("out",))
def count_positive_into(x: torch.Tensor, out: torch.Tensor) -> None:
    # Data-dependent Python control flow: cannot be traced to a graph.
    out.fill_(float(sum(1 for v in x.tolist() if v > 0)))


@count_positive_into.register_fake
def _(x, out):
    return None


def _calls_kernel(x, out):
    scale_into(x, out, 2.0)
    return out + 1


def test_kernel_pass_configures_and_inlines_a_buffer_writing_kernel(snapshot):
    gm, _ = dynamo_graph(_calls_kernel, torch.randn(3), torch.zeros(3))
    gm = NkiKernelWriteBackendConfigPass().run(gm, graph_name="g")
    assert {"code": code(gm), "config": gm.meta["kernel_write_back"]} == snapshot
    written = [n for n in gm.graph.nodes if n.meta.get("backend_config")]
    assert written and all(n.meta["backend_config"]["write_back"][0]["buffer"] == "l_out_" for n in written)


def test_kernel_pass_keeps_an_untraceable_kernel_with_its_config():
    def fn(x, out):
        count_positive_into(x, out)
        return out * 2

    gm, _ = dynamo_graph(fn, torch.randn(4), torch.zeros(1))
    gm = NkiKernelWriteBackendConfigPass().run(gm, graph_name="g")
    (config,) = gm.meta["kernel_write_back"]
    assert config["inlined"] is False and "could not be traced" in config["reason"]
    call = next(n for n in gm.graph.nodes if n.target is torch.ops.fx_pass_tests.count_positive_into.default)
    assert call.meta["backend_config"]["write_back"] == [{"arg": "out", "position": 1, "buffer": "l_out_"}]


def test_kernel_pass_names_a_written_argument_that_is_not_a_tensor():
    graph = fx.Graph()
    x = graph.placeholder("x")
    call = graph.call_function(torch.ops.fx_pass_tests.scale_into.default, (x, 0.0, 2.0))
    graph.output(x)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(FXPassError, match=rf"'g'.*node '{call.name}'.*writes into its argument 'out', which is 0.0"):
        NkiKernelWriteBackendConfigPass().run(gm, graph_name="g")


def test_pipeline_with_a_buffer_writing_kernel_matches_eager():
    x, out = torch.randn(5), torch.zeros(5)
    out_e = torch.zeros(5)
    expected = _calls_kernel(x, out_e)
    actual = compile_with(get_default_pass_manager(), _calls_kernel)(x, out)
    assert_close(actual, expected, what="result")
    assert_close(out, out_e, what="buffer the kernel wrote")


@pytest.mark.parametrize("name", ["mlp", "decoder_decode"])
@pytest.mark.parametrize("pass_name", DEFAULT_ORDER)
@pytest.mark.spec("003.benefits.unit-testable")
def test_each_pass_alone_keeps_the_compiled_fixture_equal_to_eager(name, pass_name):
    (only,) = [p for p in get_default_pass_manager().passes if p.name == pass_name]
    model, args = neuron_fixtures.build(name)
    ref_model, ref_args = neuron_fixtures.build(name)
    with torch.no_grad():
        expected = ref_model(*ref_args)
        actual = compile_with(manager_of(only), model)(*args)
    assert_close(actual, expected, what=f"{name} with {pass_name}")
    assert_close(list(args), list(ref_args), what=f"{name} inputs after the call")


@torch.library.custom_op("fx_pass_tests::shift_into_and_total", mutates_args=("out",))
def shift_into_and_total(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    out.copy_(x + 1)
    return (x * 2).sum(dim=0)


@shift_into_and_total.register_fake
def _(x, out):
    return x.new_empty(x.shape[1:])


def _calls_returning_kernel(x, out):
    total = shift_into_and_total(x, out)
    return total * out.mean()


def test_a_kernel_that_also_returns_a_value_is_inlined_and_matches_eager():
    x = torch.randn(3, 4)
    gm, _ = dynamo_graph(_calls_returning_kernel, x, torch.zeros(3, 4))
    gm = NkiKernelWriteBackendConfigPass().run(gm, graph_name="g")
    assert [c["inlined"] for c in gm.meta["kernel_write_back"]] == [True]
    out, out_e = torch.zeros(3, 4), torch.zeros(3, 4)
    expected = _calls_returning_kernel(x, out_e)
    actual = compile_with(get_default_pass_manager(), _calls_returning_kernel)(x, out)
    assert_close(actual, expected, what="result")
    assert_close(out, out_e, what="buffer the kernel wrote")
