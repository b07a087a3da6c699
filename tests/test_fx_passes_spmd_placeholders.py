"""What the SPMD passes do not do yet: they sit in the default order and return the graph unchanged.

``CollectiveReplicaGroupsPass`` and ``RankConstantCheckPass`` get their real work with the SPMD
issue; these tests pin down the placeholder behaviour so that work replaces this file, not edits it.
"""

from __future__ import annotations

import torch
from torch import fx

from reference.fx_passes import CollectiveReplicaGroupsPass, RankConstantCheckPass, get_default_pass_manager
from reference.fx_passes import spmd_passes


def _rank_baked_in(x):
    # A graph that bakes a rank into a constant: the future RankConstantCheckPass rejects this.
    return x + 3


def test_both_are_the_last_two_default_passes():
    assert get_default_pass_manager().pass_names()[-2:] == ["CollectiveReplicaGroupsPass", "RankConstantCheckPass"]


def test_spmd_module_holds_exactly_the_two_passes():
    from reference.fx_passes.base import FXPass

    defined = {n for n, v in vars(spmd_passes).items() if isinstance(v, type) and issubclass(v, FXPass) and v is not FXPass}
    assert defined == {"CollectiveReplicaGroupsPass", "RankConstantCheckPass"}


def test_they_return_the_graph_unchanged_not_yet_checking_or_annotating_anything():
    for p in (CollectiveReplicaGroupsPass(), RankConstantCheckPass()):
        gm = fx.symbolic_trace(_rank_baked_in)
        before = gm.code
        out = p.run(gm, graph_name="g", target_device="cpu")
        assert out is gm and out.code == before
        assert all("replica_groups" not in n.meta for n in out.graph.nodes)
        assert torch.equal(out(torch.ones(2)), torch.full((2,), 4.0))
