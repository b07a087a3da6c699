"""The two SPMD passes, last in the default order; their bodies live in ``reference/spmd/``.

- ``CollectiveReplicaGroupsPass`` resolves every ``_c10d_functional`` collective's (per-rank)
  group name to the full mesh registered by ``NeuronGroupCoordinator`` and writes it to
  ``node.meta["replica_groups"]`` (and the mesh's channel id to ``node.meta["channel_id"]``).
  A collective over a group no coordinator registered is a ``MeshError``.
- ``RankConstantCheckPass`` finds small integer constant tensors built while a runtime ``rank``
  input is in the graph: it warns by default and raises ``RankConstantError`` (naming the node and
  its source line) under ``NEURON_LIBTORCH_SPMD_STRICT=1``. It does not change the graph.

See docs/spmd.md.
"""

from __future__ import annotations

import torch

from reference.fx_passes.base import FXPass
from reference.spmd.passes import collective_replica_groups, rank_constant_check


class CollectiveReplicaGroupsPass(FXPass):
    """Annotates each collective with the full replica groups of its mesh."""

    version = 1  # the graph returned is the placeholder's (only node.meta is added): keys unchanged

    @property
    def name(self) -> str:
        return "CollectiveReplicaGroupsPass"

    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        return collective_replica_groups(gm, **kwargs)


class RankConstantCheckPass(FXPass):
    """The graph-level SPMD guard rail (warns, or raises under the strict flag)."""

    version = 1  # the graph returned is the placeholder's (only node.meta is added): keys unchanged

    @property
    def name(self) -> str:
        return "RankConstantCheckPass"

    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        return rank_constant_check(gm, **kwargs)
