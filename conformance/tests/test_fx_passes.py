"""Contract: the FX pass stage between Dynamo's graph and lowering.

- The default passes run in the documented order, and ``enable_fx_passes=False`` skips the stage.
- The pass manager's identity (what enters cache keys) changes when a pass is added, removed or
  reordered, and only then.
- With the passes on, the caller sees what eager gives: in-place writes into its tensors,
  outputs that are its own tensors or views of them, outputs that share storage with each other,
  and buffers written by custom kernels that declare ``mutates_args``.
- The graph after the passes, as reviewed text (one ``.txt`` file per case and implementation).
"""

from __future__ import annotations

import logging
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import neuron_fixtures
from neuron_fixtures.aliasing import outputs_alias_each_other, returns_mutated_input, returns_view_taken_before_mutation
from conformance.harness.implementation import fx_graphs_after_passes, fx_pass_names
from conformance.harness.properties import settings
from conformance.harness.snapshots import JsonSnapshotExtension, TextSnapshotExtension
from conformance.harness.tolerances import assert_close

DEFAULT_ORDER = [
    "DeviceRewriterPass",
    "AliasingOutputRewritePass",
    "InPlaceToOutOfPlacePass",
    "NkiKernelWriteBackendConfigPass",
    "CollectiveReplicaGroupsPass",
    "RankConstantCheckPass",
]


@pytest.fixture
def text_snapshot(snapshot):
    return snapshot.use_extension(TextSnapshotExtension)


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JsonSnapshotExtension)


# The default passes; an implementation that declares none (``[]``) has no pass stage to test, an
# honest answer: the test skips saying so.
_pass_names = fx_pass_names


# --- order, identity, the switch --------------------------------------------------------------


@pytest.mark.spec("002.guards.rank-constant-pass-last", "003.interface.name", "003.default.order", "003.passes.get-default-pass-manager",
                  "003.passes.collective-replica-groups")
def test_default_order(impl, json_snapshot):
    names = _pass_names(impl)
    assert names == DEFAULT_ORDER
    assert names.index("AliasingOutputRewritePass") < names.index("InPlaceToOutOfPlacePass"), (
        "the aliasing analysis needs the in-place ops still in the graph"
    )
    assert {"order": names} == json_snapshot


@pytest.mark.spec("003.manager.add-pass", "003.adding.new-pass")
def test_identity_changes_when_a_pass_is_added_removed_or_reordered(impl):
    names = _pass_names(impl)
    full = impl.fx_passes().identity(names)
    assert impl.fx_passes().identity(list(names)) == full, "the identity is deterministic"
    assert impl.fx_passes().identity(names[:-1]) != full, "adding the last pass changes it"
    assert impl.fx_passes().identity(names[1:]) != full, "removing the first pass changes it"
    swapped = list(names)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    assert impl.fx_passes().identity(swapped) != full, "reordering changes it"


@settings(max_examples=40)
@given(data=st.data())
@pytest.mark.spec("003.adding.new-pass")
def test_identity_is_a_function_of_the_ordered_pass_list(impl, data):
    names = _pass_names(impl)
    a = data.draw(st.permutations(names), label="order a")[: data.draw(st.integers(0, len(names)), label="len a")]
    b = data.draw(st.permutations(names), label="order b")[: data.draw(st.integers(0, len(names)), label="len b")]
    assert (impl.fx_passes().identity(a) == impl.fx_passes().identity(b)) == (list(a) == list(b))


def _small(x):
    return torch.relu(x) * 2


@pytest.mark.spec("003.manager.run-passes", "003.integration.before-lowering", "003.config.enable-fx-passes")
def test_every_default_pass_runs_when_enabled(impl):
    assert impl.fx_passes().passes_applied(_small, (torch.randn(3),)) == _pass_names(impl)
    assert impl.fx_passes().passes_applied(_small, (torch.randn(3),), {"enable_fx_passes": True}) == _pass_names(impl)


@pytest.mark.spec("003.config.enable-fx-passes")
def test_enable_fx_passes_false_skips_the_stage(impl):
    assert impl.fx_passes().passes_applied(_small, (torch.randn(3),), {"enable_fx_passes": False}) == []


@pytest.mark.spec("003.config.enable-fx-passes")
def test_a_bad_enable_fx_passes_value_is_rejected(impl):
    _pass_names(impl)  # both options belong to the FX pass stage; without one, this skips
    with pytest.raises(Exception, match="enable_fx_passes"):
        impl.compile(_small, options={"enable_fx_passes": "no"}, fullgraph=True)(torch.randn(3))


@pytest.mark.spec("003.config.target-device")
def test_a_bad_target_device_is_named(impl):
    _pass_names(impl)
    with pytest.raises(Exception, match="target_device"):
        impl.compile(_small, options={"target_device": "not-a-device"}, fullgraph=True)(torch.randn(3))


@pytest.mark.spec("003.manager.debug-timing")
def test_each_pass_logs_its_time_at_debug_in_the_seeds_words(impl, caplog, monkeypatch, tmp_path):
    """Every default pass that runs logs ``FX Pass '<name>' completed in <seconds, 4 decimals>s`` at
    DEBUG, in the order they run (a compile of its own, into fresh caches)."""
    names = _pass_names(impl)
    for var, value in impl.cache().env(str(tmp_path / "caches")).items():
        monkeypatch.setenv(var, value)
    impl.reset()
    with caplog.at_level(logging.DEBUG):
        impl.compile(_small, fullgraph=True)(torch.randn(3))
    timed = [m for m in (re.match(r"FX Pass '(\w+)' completed in \d+\.\d{4}s", r.getMessage())
                         for r in caplog.records if r.levelno == logging.DEBUG) if m]
    assert [m.group(1) for m in timed] == names, [r.getMessage() for r in caplog.records if "FX" in r.getMessage()][:10]


class _Scaled(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        y.mul_(2)
        return y + 1


@pytest.mark.spec("003.interface.fxpass", "003.benefits.unit-testable")
def test_each_default_pass_runs_alone_on_a_graph_module_and_keeps_its_values(impl):
    """Each pass is an object with ``run(gm) -> GraphModule``: run alone on a traced module, as its
    unit test would, it returns a GraphModule that computes what the module does."""
    x = torch.randn(5)
    for name in _pass_names(impl):
        gm = torch.fx.symbolic_trace(_Scaled())
        out = impl.fx_passes().run_pass(name, gm)
        assert isinstance(out, torch.fx.GraphModule), f"{name}.run returned {type(out).__name__}, not a GraphModule"
        assert_close(out(x), _Scaled()(x), what=f"{name} alone")


def _to_foreign_device(x):
    return x.to("cuda") * 2


@pytest.mark.spec("003.config.target-device-xla", "003.passes.device-rewriter")
def test_without_a_target_device_the_device_rewriter_moves_the_graph_where_it_runs(impl):
    """With no ``target_device`` the device rewriter moves a graph's foreign devices to the
    default target: ``xla`` in the seeds, the CPU in the reference, which has no XLA device
    (docs/fx_passes.md, "Backend options"). The rewritten graph runs where the input lives."""
    names = _pass_names(impl)
    if "DeviceRewriterPass" not in names:
        pytest.skip(f"no DeviceRewriterPass among the default passes: {names}")
    gm = impl.fx_passes().run_pass("DeviceRewriterPass", torch.fx.symbolic_trace(_to_foreign_device))
    assert "cuda" not in gm.code, gm.code
    x = torch.randn(4)
    out = gm(x)
    assert out.device == x.device, f"the rewritten graph ran on {out.device}"
    assert_close(out, x * 2, what="the rewritten graph")


# --- what the caller sees with the passes on --------------------------------------------------


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.spec("003.default.aliasing-before-inplace", "003.passes.aliasing-output")
def test_an_output_that_is_a_mutated_input_is_the_callers_tensor(impl):
    x = torch.randn(6)
    expected = x.clone() + 1
    out = impl.compile(returns_mutated_input, fullgraph=True)(x)
    assert_close(x, expected, what="input after the call")
    assert _same_storage(out, x), "eager returns the input itself; the compiled call must too"
    out.zero_()
    assert torch.equal(x, torch.zeros(6)), "writing the output writes the caller's tensor, as in eager"


@pytest.mark.spec("003.passes.aliasing-output")
def test_a_view_of_a_mutated_input_sees_the_write(impl):
    x = torch.randn(6)
    xe = x.clone()
    expected = returns_view_taken_before_mutation(xe)
    out = impl.compile(returns_view_taken_before_mutation, fullgraph=True)(x)
    assert_close(list(out), list(expected), what="outputs")
    assert_close(x, xe, what="input after the call")
    assert _same_storage(out[0], x) and out[0].shape == (2, 3)


@pytest.mark.spec("003.passes.aliasing-output")
def test_outputs_that_alias_each_other_share_storage(impl):
    x = torch.randn(6)
    expected = outputs_alias_each_other(x.clone())
    out = impl.compile(outputs_alias_each_other, fullgraph=True)(x)
    assert_close(list(out), list(expected), what="outputs")
    assert _same_storage(*expected)
    assert _same_storage(*out), "eager's second output is a view of the first; the compiled call's must be too"


@torch.library.custom_op("conformance_fx::scale_into", mutates_args=("out",))
def scale_into(x: torch.Tensor, out: torch.Tensor, factor: float) -> None:
    out.copy_(x * factor)


def _calls_kernel(x, out):
    scale_into(x, out, 3.0)
    return out.sum(dim=-1)


@pytest.mark.spec("003.passes.nki-backend-config")
def test_a_kernel_writing_into_a_callers_buffer(impl):
    x = torch.randn(2, 4)
    out, out_e = torch.zeros(2, 4), torch.zeros(2, 4)
    expected = _calls_kernel(x, out_e)
    actual = impl.compile(_calls_kernel, fullgraph=True)(x, out)
    assert_close(actual, expected, what="result")
    assert_close(out, out_e, what="buffer the kernel wrote")


# --- the graph after the passes ---------------------------------------------------------------

CASES = {
    "returns_mutated_input": (returns_mutated_input, lambda: (torch.randn(6),)),
    "view_before_mutation": (returns_view_taken_before_mutation, lambda: (torch.randn(6),)),
    "outputs_alias_each_other": (outputs_alias_each_other, lambda: (torch.randn(6),)),
    "kernel_write_back": (_calls_kernel, lambda: (torch.randn(2, 4), torch.zeros(2, 4))),
    "decoder_decode": (None, None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.spec("003.passes.device-rewriter", "003.passes.inplace-to-outofplace", "003.integration.before-lowering")
def test_graph_after_passes(impl, text_snapshot, case):
    fn, make_args = CASES[case]
    if fn is None:
        fn, args = neuron_fixtures.build(case)
    else:
        args = make_args()
    with torch.no_grad():
        graphs = fx_graphs_after_passes(impl, fn, args)
    text = "".join(f"# graph {i} of {len(graphs)}\n{g}" for i, g in enumerate(graphs))
    assert text == text_snapshot
