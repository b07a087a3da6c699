"""The SPMD passes in the default pass manager: last in the order, annotate collectives, and
check for baked rank constants (warn by default, raise under the strict flag)."""

from __future__ import annotations

import warnings

import pytest
import torch

from neuron_fixtures.spmd import EmbedMoE
from reference.fx_passes import CollectiveReplicaGroupsPass, FXPassError, RankConstantCheckPass, get_default_pass_manager
from reference.fx_passes import spmd_passes
from reference.spmd import rank_tensor
from reference.spmd.errors import RankConstantError
from reference.spmd.guards import SPMDWarning


@pytest.mark.spec("002.guards.rank-constant-pass-last")
def test_both_are_the_last_two_default_passes():
    assert get_default_pass_manager().pass_names()[-2:] == ["CollectiveReplicaGroupsPass", "RankConstantCheckPass"]


def test_spmd_module_holds_exactly_the_two_passes():
    from reference.fx_passes.base import FXPass

    defined = {n for n, v in vars(spmd_passes).items() if isinstance(v, type) and issubclass(v, FXPass) and v is not FXPass}
    assert defined == {"CollectiveReplicaGroupsPass", "RankConstantCheckPass"}


def _dynamo_graph(mpmd: bool):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    ids = torch.randint(0, 128, (2, 3), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.compile(EmbedMoE(1, 2, None, mpmd=mpmd).eval(), backend=backend)(ids, rank=rank_tensor(1))
    torch._dynamo.reset()
    return graphs[0]


def test_rank_constant_check_passes_an_spmd_graph_unchanged(monkeypatch):
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "1")
    gm = _dynamo_graph(mpmd=False)
    before = gm.code
    out = get_default_pass_manager().run_passes(gm, graph_name="g", target_device="cpu")
    assert out.code == before


def test_rank_constant_check_warns_then_raises_through_the_manager(monkeypatch):
    gm = _dynamo_graph(mpmd=True)
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "0")
    with pytest.warns(SPMDWarning, match="rank_id"):
        assert RankConstantCheckPass().run(gm, graph_name="g") is gm
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "1")
    # a guard-rail violation is not a failing pass: the manager lets it through as itself (not an
    # FXPassError), so a caller catches it by its type; a note names the pass
    with pytest.raises(RankConstantError) as info:
        get_default_pass_manager().run_passes(gm, graph_name="g", target_device="cpu")
    assert not isinstance(info.value, FXPassError)
    assert "rank_id" in str(info.value) and "neuron_fixtures/spmd.py:" in str(info.value)
    assert info.value.__notes__ == ["raised by FX pass 'RankConstantCheckPass' on graph 'g'"]


@pytest.mark.spec("003.passes.collective-replica-groups")
def test_replica_groups_pass_leaves_graphs_without_collectives_alone():
    gm = _dynamo_graph(mpmd=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = CollectiveReplicaGroupsPass().run(gm, graph_name="g")
    assert out is gm and all("replica_groups" not in n.meta for n in gm.graph.nodes)
