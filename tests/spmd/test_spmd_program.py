"""Lowering graphs with collectives into an SPMD program, in a one-rank gloo world in this process.

The one-rank world is real torch.distributed (gloo, a file store); the multi-rank behaviour is in
conformance/tests/test_spmd.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from reference.core.errors import LoweringError
from reference.spmd import MESH_REGISTRY, NeuronGroupCoordinator, rank_tensor
from reference.spmd.errors import MeshError
from reference.flows.tools import lower_texts
from reference.core.errors import NEFFExecutionError
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.pipeline import SPMD_PROGRAM, lower
from reference.runtime import pack_bundle, unpack_bundle
from reference.spmd.split import split_at_collectives


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield NeuronGroupCoordinator([[0]], name="tp").group
    finally:
        dist.destroy_process_group()
        MESH_REGISTRY.clear()


def _all_four(group):
    def fn(x, rank):
        y = funcol.all_reduce(x * 2 + rank, "sum", group)
        z = funcol.all_gather_single(y, 0, group)
        s = funcol.reduce_scatter_single(torch.tanh(z), "sum", 0, group)
        return funcol.all_to_all_single(s, None, None, group) + 1

    return fn


def _aten(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        from reference.lowering.stablehlo import decomposition_table

        def capture(aten_gm, _):
            graphs.append(aten_gm)
            return aten_gm

        return aot_autograd(fw_compiler=capture, decompositions=decomposition_table())(gm, example_inputs)

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    torch._dynamo.reset()
    return graphs[0]


def test_program_text_is_verified_stablehlo_with_every_collective(group):
    fn = _all_four(group)
    lowering = lower(_aten(fn, torch.ones(4, 2), rank_tensor(0)), graph_name="g", settings=BuildSettings.from_env())
    assert lowering.strategy is SPMD_PROGRAM
    prog = lowering.detail
    assert [s["op"] for s in prog.steps] == ["piece", "all_reduce", "all_gather", "piece", "reduce_scatter", "all_to_all", "piece"]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert f'"stablehlo.{op}"' in prog.text or f"stablehlo.{op}" in prog.text
    assert "replica_groups = dense<0> : tensor<1x1xi64>" in prog.text
    assert "#stablehlo.channel_handle<handle = 1, type = 1>" in prog.text
    assert "group" not in prog.text.replace("replica_groups", "")  # no process-group name leaks in
    from iree.compiler import ir

    assert ir.Module.parse(prog.text, ir.Context()).operation.verify()


def test_program_text_is_deterministic(group):
    fn = _all_four(group)
    args = (torch.ones(4, 2), rank_tensor(0))
    assert lower_texts(fn, args) == lower_texts(fn, args)


def test_compiled_program_equals_eager(group):
    fn = _all_four(group)
    x = torch.arange(8, dtype=torch.float32).view(4, 2)
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(x, rank_tensor(0))
    torch.testing.assert_close(out, fn(x, rank_tensor(0)))


def test_unsupported_reduction_names_the_collective(group):
    def fn(x):
        return funcol.all_reduce(x, "avg", group)

    with pytest.raises(LoweringError, match="reduction 'avg'"):
        split_at_collectives(_aten(fn, torch.ones(2)), graph_name="g")


def test_unregistered_group_is_a_mesh_error(group):
    other = dist.new_group([0])  # created without the coordinator

    def fn(x):
        return funcol.all_reduce(x, "sum", other)

    with pytest.raises(MeshError, match="NeuronGroupCoordinator"):
        split_at_collectives(_aten(fn, torch.ones(2)), graph_name="g")


def test_bundle_round_trips():
    manifest = {"steps": [{"op": "piece", "index": 0}], "inputs": ["in0"], "outputs": ["v1"]}
    blob = pack_bundle(manifest, [b"abc", b"", b"\x00\x01"])
    assert unpack_bundle(blob) == (manifest, [b"abc", b"", b"\x00\x01"])


@pytest.mark.parametrize("damage", ["not a bundle", "truncated", "trailing bytes"])
def test_a_damaged_bundle_is_an_execution_error(damage):
    blob = pack_bundle({"steps": [], "inputs": [], "outputs": []}, [b"abcdef"])
    bad = {"not a bundle": b"IREE" + blob, "truncated": blob[:-2], "trailing bytes": blob + b"x"}[damage]
    with pytest.raises(NEFFExecutionError, match="bundle"):
        unpack_bundle(bad)


@pytest.mark.spec("002.collectives.replica-groups-meta", "003.passes.collective-replica-groups")
def test_replica_groups_pass_annotates_dynamo_graph_collectives(group):
    from reference.fx_passes import CollectiveReplicaGroupsPass
    from reference.spmd.collectives import is_collective

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(_all_four(group), backend=backend)(torch.ones(4, 2), rank_tensor(0))
    torch._dynamo.reset()
    gm = CollectiveReplicaGroupsPass().run(graphs[0], graph_name="g")
    collectives = [n for n in gm.graph.nodes if is_collective(n)]
    assert len(collectives) == 4
    assert all(n.meta["replica_groups"] == [[0]] and n.meta["channel_id"] >= 1 for n in collectives)


# --- the program strategy uses the pipeline's own steps ---------------------------------------------


@pytest.fixture
def caches(tmp_path, monkeypatch):
    for name, sub in (("TORCH_NEURONX_HLO_CACHE_DIR", "hlo"), ("TORCH_NEURONX_NEFF_CACHE_DIR", "neff"),
                      ("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "local")):
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    return tmp_path


def test_program_pieces_are_lowered_through_the_hlo_cache(group, caches):
    from reference.core.metrics import METRICS

    fn = _all_four(group)
    args = (torch.ones(4, 2), rank_tensor(0))
    METRICS.reset()
    first = lower(_aten(fn, *args), graph_name="g", settings=BuildSettings.from_env())
    cold = METRICS.counters()
    second = lower(_aten(fn, *args), graph_name="g", settings=BuildSettings.from_env())
    warm = METRICS.counters()
    pieces = len(first.detail.pieces)
    assert pieces == 3 and cold.get("lowerings") == pieces and not cold.get("hlo_cache_hits")
    assert warm.get("lowerings") == pieces, "the second lowering lowered a piece again"
    assert warm.get("hlo_cache_hits") == pieces
    assert second.graph.hlo == first.graph.hlo and second.replica_groups == first.replica_groups


def test_a_staged_program_keys_builds_and_runs_as_the_lowered_one(group, caches):
    from reference.cache.staging import read_staged
    from reference.core.metrics import METRICS
    from reference.compiler.driver import CompilerConfig
    from reference.pipeline import BuildContext, build, load, lowering_key, stage, staged_lowering

    fn = _all_four(group)
    x = torch.arange(8, dtype=torch.float32).view(4, 2)
    lowering = lower(_aten(fn, x, rank_tensor(0)), graph_name="g", settings=BuildSettings.from_env())
    o1 = CompilerConfig.from_args(["-O1"])
    ctx = BuildContext("g", o1, BuildSettings.from_env())
    staged = stage(lowering, ctx, str(caches / "staged"))
    (entry,) = read_staged(caches / "staged")
    again = staged_lowering(entry)
    assert again.strategy is SPMD_PROGRAM and entry.metadata.has_collectives
    assert lowering_key(again, o1)[0] == lowering_key(lowering, o1)[0] == staged.key
    METRICS.reset()
    built = build(again, ctx)  # one compile, one cache entry
    assert METRICS.counters().get("compiler_invocations") == 1 and METRICS.counters().get("spmd_piece_compiles") == 3
    assert build(lowering, ctx).cache_hit
    out = load(built, again)(x, rank_tensor(0))
    torch.testing.assert_close(out[0], fn(x, rank_tensor(0)))


def test_a_program_whose_piece_fails_to_compile_is_recorded_under_its_key(group, caches):
    from reference.compiler.driver import CompilerConfig, CompilerDriver
    from reference.core.errors import NEFFCompilationError
    from reference.pipeline import BuildContext, build, lowering_key, neff_cache

    class Refusing(CompilerDriver):  # a stand-in driver: this test is about the failure record
        def compile(self, hlo, compiler_args, *, graph_name):
            raise NEFFCompilationError("refused", graph_name=graph_name)

    lowering = lower(_aten(_all_four(group), torch.ones(4, 2), rank_tensor(0)), graph_name="g", settings=BuildSettings.from_env())
    o2 = CompilerConfig.from_args(["-O2"])
    with pytest.raises(NEFFCompilationError, match="g_piece0"):
        build(lowering, BuildContext("g", o2, BuildSettings.from_env()), driver=Refusing())
    record = neff_cache(CacheRoots.from_env()).failures.get(lowering_key(lowering, o2)[0])
    assert record is not None and record["graph_name"] == "g"
