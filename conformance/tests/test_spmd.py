"""Contract: SPMD compilation on real ranks (torch.distributed, gloo on loopback).

Each world size is launched once per module (``conformance.harness.launcher``) and runs several scenarios
(``conformance/models/spmd_scenarios.py``); the tests below read their results.

- A sharded model's N-rank output equals the unsharded model's.
- Rank invariance: every rank traces byte-identical text and gets the same key, also when the
  ranks' process-group names differ (a 2-D mesh); the text is reviewed once, as one snapshot.
- One artifact for the world: the compiler runs once per distinct graph, not once per rank; the
  MPMD twin fans out to one compile per rank, and the guard rails say so (warning by default,
  an error naming the node and its source line under ``NEURON_LIBTORCH_SPMD_STRICT=1``).
"""

from __future__ import annotations

import re

import pytest

from conformance.harness.implementation import NotSupported
from conformance.harness.launcher import launch, rank_server, scenario
from conformance.plugin import SUITE
from conformance.harness.snapshots import assert_mlir
from conformance.harness.tolerances import assert_close

# One launch per world size per module: under xdist keep the module on one worker (--dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spmd_ranks")]

SCENARIOS_2 = [
    "decoder_spmd", "decoder_mpmd_default", "decoder_mpmd_strict", "collectives", "layers", "deferred_decoder", "deferred_guard",
]
SCENARIOS_4 = ["decoder_spmd", "collectives", "deferred_decoder"]
SCENARIOS_8 = ["collectives"]
LAUNCH_TIMEOUT = 900.0


def _spec(config) -> str:
    return config.stash[SUITE].spec


def _fresh_cache_env(request, world: int) -> dict[str, str]:
    """Caches of this launch only: the compile counts below must not see artifacts that other
    tests on the same xdist worker published. Without the adapter capability the ranks share the
    worker's caches (the counts can then only be lower than the truth, and the tests say so)."""
    impl = request.getfixturevalue("impl")
    root = request.getfixturevalue("tmp_path_factory").mktemp(f"spmd-world{world}-caches")
    try:
        return dict(impl.cache().env(str(root)))
    except NotSupported:
        return {}


@pytest.fixture(scope="module")
def ranks_server():
    """The module's launches fork their ranks from one server that imported torch once."""
    with rank_server() as server:
        yield server


def _launch(request, world: int, names: list[str]) -> list[dict]:
    return launch(
        "conformance.models.spmd_scenarios:run",
        world,
        kwargs={"impl_spec": _spec(request.config), "names": names},
        timeout=LAUNCH_TIMEOUT,
        env=_fresh_cache_env(request, world),
        server=request.getfixturevalue("ranks_server"),
    )


@pytest.fixture(scope="module")
def world2(request):
    return _launch(request, 2, SCENARIOS_2)


@pytest.fixture(scope="module")
def world4(request):
    return _launch(request, 4, SCENARIOS_4)


@pytest.fixture(scope="module")
def world8(request):
    return _launch(request, 8, SCENARIOS_8)


@pytest.fixture
def worlds(request):
    return lambda n: request.getfixturevalue(f"world{n}")


# --- the sharded model equals the unsharded one ------------------------------------------------

@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.spec("002.rank.vocab-start", "002.writing.weight-loading-not-traced")
def test_sharded_decoder_output_equals_unsharded(worlds, world):
    for rank, res in enumerate(scenario(worlds(world), "decoder_spmd")):
        assert_close(res["out"], res["expected"], what=f"rank {rank} of {world}: prefill logits")
        assert_close(res["decode_out"], res["decode_expected"], what=f"rank {rank} of {world}: decode-step logits")
        assert_close(res["k_caches"], res["expected_k_caches"], what=f"rank {rank} of {world}: its KV-cache shard")


@pytest.mark.spec("002.rank.vocab-start", "002.rank.ep-rank-idiom", "002.rank.index-select", "002.rank.runtime-tensor")
def test_each_parallel_layer_equals_its_dense_layer(world2):
    """Each layer takes the rank as a runtime tensor and derives its shard from it: the vocabulary
    start, ``index_select`` over ``arange + rank * shard`` (row-parallel), the expert-parallel rank
    ``(rank % (ep * tp)) // tp`` (the MoE); each equals its dense layer on every rank."""
    for rank, res in enumerate(scenario(world2, "layers")):
        for layer, r in res["layers"].items():
            assert_close(r["out"], r["expected"], what=f"rank {rank}: {layer}")


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.spec("002.collectives.functional-ops")
def test_all_four_collectives_equal_eager(worlds, world):
    for rank, res in enumerate(scenario(worlds(world), "collectives")):
        assert_close(list(res["out"]), list(res["expected"]), what=f"rank {rank} of {world}: collectives")


def _helper(res: dict) -> dict:
    if "skip" in res["helper"]:
        raise NotSupported(res["helper"]["skip"])
    return res["helper"]


@pytest.mark.spec("001.helper.get-rank-distributed")
def test_get_rank_is_the_distributed_rank_in_every_rank_of_a_world(world2):
    assert [_helper(res)["get_rank"] for res in scenario(world2, "collectives")] == [0, 1]


@pytest.mark.spec("001.metrics.has-collectives")
def test_a_collective_graphs_metrics_record_says_it_has_collectives(world2):
    for rank, res in enumerate(scenario(world2, "collectives")):
        records = _helper(res)["records"]
        assert records, f"rank {rank}: no metrics record for the collective graph"
        assert all(r["has_collectives"] is True for r in records), f"rank {rank}: {records}"


# --- rank invariance -----------------------------------------------------------------------------

@pytest.mark.parametrize("world, name", [(2, "decoder_spmd"), (4, "decoder_spmd"), (2, "collectives"), (4, "collectives"), (8, "collectives")])
@pytest.mark.spec("002.spmd.identical-graph", "002.cache.same-32-char-hash", "002.rank.runtime-tensor")
def test_every_rank_traces_identical_text_and_key(worlds, world, name):
    per_rank = scenario(worlds(world), name)
    texts = [r["texts"] for r in per_rank]
    assert texts[0], "no graph was lowered"
    for rank in range(1, world):
        assert texts[rank] == texts[0], f"rank {rank}'s text differs from rank 0's"
    keys = [r["graphs"] for r in per_rank]
    assert all(k == keys[0] for k in keys), f"keys differ across ranks: {keys}"


@pytest.mark.spec("002.collectives.group-name-normalized", "002.collectives.full-mesh-registered",
                  "002.collectives.replica-groups-meta", "003.passes.collective-replica-groups")
def test_two_d_mesh_hashes_identically_although_group_names_differ(world4):
    per_rank = scenario(world4, "collectives")
    names = [r["group_name"] for r in per_rank]
    if None in names:
        pytest.skip("the implementation's process group exposes no group_name")
    assert names[0] != names[2], "ranks 0 and 2 are in different tensor-parallel groups"
    assert per_rank[0]["graphs"] == per_rank[2]["graphs"]
    text = per_rank[0]["texts"][0]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert f"stablehlo.{op}" in text
    # every collective carries the full mesh, not the rank's own group
    groups = re.findall(r"replica_groups = dense<(\[\[.*?\]\])>", text)
    assert groups and set(groups) == {"[[0, 1], [2, 3]]"}, groups


def test_sharded_decoder_program_snapshot(world2, snapshot):
    """Reviewed once for all ranks (the invariance test above makes rank 0's text everyone's)."""
    texts = scenario(world2, "decoder_spmd")[0]["texts"]
    assert_mlir(snapshot, "".join(f"// graph {i} of {len(texts)}\n{t}" for i, t in enumerate(texts)))


@pytest.mark.spec("002.collectives.channel-id-invariant")
def test_two_d_mesh_collectives_snapshot(world4, snapshot):
    texts = scenario(world4, "collectives")[0]["texts"]
    assert_mlir(snapshot, "".join(f"// graph {i} of {len(texts)}\n{t}" for i, t in enumerate(texts)))


# --- one artifact for the world, and the fan-out of the MPMD twin --------------------------------

@pytest.mark.parametrize("world, name", [(2, "decoder_spmd"), (4, "decoder_spmd"), (4, "collectives"), (8, "collectives")])
@pytest.mark.spec("002.spmd.compiler-runs-once", "002.cache.rank0-compiles-others-wait")
def test_compiler_runs_once_per_distinct_graph_for_the_world(worlds, world, name):
    per_rank = scenario(worlds(world), name)
    distinct = {k for r in per_rank for k in r["graphs"].values()}
    assert len(distinct) == len(per_rank[0]["graphs"]) >= (2 if name == "decoder_spmd" else 1)
    invocations = [r["invocations"] for r in per_rank]
    assert sum(invocations) == len(distinct), f"compiler invocations per rank {invocations} for {len(distinct)} graph(s)"


@pytest.mark.spec("002.mpmd.once-per-rank", "002.spmd.additive-fallback")
def test_mpmd_twin_compiles_once_per_rank(world2):
    per_rank = scenario(world2, "decoder_mpmd_default")
    graphs = len(per_rank[0]["graphs"])
    assert graphs == 2, per_rank[0]["graphs"]  # prefill and one decode step
    keys = [set(r["graphs"].values()) for r in per_rank]
    assert len(set().union(*keys)) == len(per_rank) * graphs, f"each rank should get its own keys: {keys}"
    assert sum(r["invocations"] for r in per_rank) == len(per_rank) * graphs
    for rank, res in enumerate(per_rank):
        assert_close(res["out"], res["expected"], what=f"rank {rank}: the twin still computes the right values")
        assert_close(res["decode_out"], res["decode_expected"], what=f"rank {rank}: the twin's decode step")


@pytest.mark.spec("002.guards.warn-by-default")
def test_mpmd_twin_warns_by_default_naming_the_constant(world2):
    for rank, res in enumerate(scenario(world2, "decoder_mpmd_default")):
        text = "\n".join(res["warnings"])
        assert "rank_id" in text and "neuron_fixtures/spmd.py" in text, f"rank {rank} warnings: {res['warnings']}"


@pytest.mark.spec("002.guards.rank-constant-strict-raises")
def test_mpmd_twin_fails_under_strict_naming_node_and_source_line(world2):
    for rank, res in enumerate(scenario(world2, "decoder_mpmd_strict")):
        assert res["raised"], f"rank {rank}: the twin compiled under NEURON_LIBTORCH_SPMD_STRICT=1"
        assert res["is_violation"], f"rank {rank}: raised {res['error']}, not a guard-rail error: {res['message']}"
        assert "rank_id" in res["message"]
        assert re.search(r"neuron_fixtures/spmd\.py:\d+", res["message"]), res["message"]


def _staged(per_rank: list[dict]) -> dict:
    staged: dict = {}
    for rank, res in enumerate(per_rank):
        for graph, key in res["graphs"].items():
            staged.setdefault(graph, {}).setdefault(key, []).append(rank)
    return staged


@pytest.mark.spec("002.guards.single-neff-check")
def test_single_artifact_check_passes_the_spmd_world_in_both_modes(impl, world2):
    staged = _staged(scenario(world2, "decoder_spmd"))
    assert impl.spmd().check_single_artifact(staged, strict=True) == []
    assert impl.spmd().check_single_artifact(staged, strict=False) == []


@pytest.mark.spec("002.guards.single-neff-check")
def test_single_artifact_check_catches_the_mpmd_twin(impl, world2):
    staged = _staged(scenario(world2, "decoder_mpmd_default"))
    with pytest.warns(UserWarning):
        splinters = impl.spmd().check_single_artifact(staged, strict=False)
    assert len(splinters) == sum(len(hashes) for hashes in staged.values()) == 4
    with pytest.raises(impl.spmd().violation_errors()) as info:
        impl.spmd().check_single_artifact(staged, strict=True)
    for key in {k for hashes in staged.values() for k in hashes}:
        assert key in str(info.value)


@pytest.mark.spec("002.rank.index-select-value-identical")
def test_static_slice_twin_is_caught_by_the_single_artifact_check(impl, world2):
    """A rank-offset slice bakes no constant tensor (the graph check stays quiet) but still
    gives each rank its own graph: the two guard rails are complementary."""
    twins = [r["row_twin"] for r in scenario(world2, "layers")]
    for rank, t in enumerate(twins):
        assert_close(t["out"], t["expected"], what=f"rank {rank}: row-parallel twin")
    staged = _staged(twins)
    with pytest.raises(impl.spmd().violation_errors()):
        impl.spmd().check_single_artifact(staged, strict=True)


# --- the deferred flow on a sharded model --------------------------------------------------------

@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.spec("002.deferred.serves-every-rank")
def test_deferred_flow_serves_every_rank_of_the_sharded_decoder_from_the_cache(worlds, world):
    """Capture the TP + EP decoder on every rank, build the staged graphs once, then serve every
    rank with a cache miss being an error: the outputs equal the unsharded model's, and nothing
    compiles while serving. The build saw one artifact per graph for the whole world, so the
    single-artifact check passed it under the strict flag."""
    per_rank = scenario(worlds(world), "deferred_decoder")
    built = per_rank[0]["built"]
    assert built["raised"] is None, built["raised"]
    graphs = built["graphs"]
    assert graphs and all(g["ok"] for g in graphs), graphs
    distinct = {g["cache_key"] for g in graphs}
    assert len(graphs) == len(distinct), "every rank staged the same key for a graph: one entry each"
    for rank, res in enumerate(per_rank):
        assert_close(res["out"], res["expected"], what=f"rank {rank} of {world}: prefill logits served from the cache")
        assert res["invocations"] == 0, f"rank {rank} compiled while serving"
        assert set(res["served_graphs"].values()) <= distinct, f"rank {rank} served a key the build did not make"


@pytest.mark.spec("002.guards.strict-every-seam")
def test_deferred_flow_refuses_the_mpmd_twin_under_strict(world2):
    """The same flow on the MPMD twin stages one entry per rank for each graph; the build's
    single-artifact check names them and raises under NEURON_LIBTORCH_SPMD_STRICT=1."""
    twin = scenario(world2, "deferred_decoder")[0]["twin"]
    assert twin["raised"] is not None, "the per-rank entries of the MPMD twin were built without complaint"


@pytest.mark.parametrize("fallback", ["on", "off"])
@pytest.mark.parametrize("strict", ["strict", "warn"])
@pytest.mark.spec("002.guards.strict-every-seam")
def test_deferred_build_holds_strict_whatever_the_fallback(world2, strict, fallback):
    """``parallel_compile`` over per-rank entries: under the strict flag the caller gets the
    violation itself (not a failure record, not another error type) naming the hash directories,
    with the eager fallback on or off; without the flag it warns and builds every entry."""
    per_rank = scenario(world2, "deferred_guard")
    outcome = per_rank[0][f"{strict}-fallback_{fallback}"]
    if strict == "strict":
        assert outcome["raised"] is not None, f"the per-rank entries were built without complaint: {outcome['graphs']}"
        assert outcome["is_violation"], f"raised {outcome['raised']}, not a guard-rail violation: {outcome['message']}"
        assert len(re.findall(r"\b[0-9a-f]{32}\b", outcome["message"])) >= 2, outcome["message"]
    else:
        assert outcome["raised"] is None, outcome["message"]
        graphs = outcome["graphs"]
        assert len(graphs) == 2 and all(g["ok"] for g in graphs), graphs
        assert any("splinter" in w for w in outcome["warnings"]), outcome["warnings"]
