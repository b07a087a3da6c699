"""The two SPMD passes, last in the default order; the graph analysis they run lives in
``reference/spmd/`` (:func:`~reference.spmd.collectives.annotate_replica_groups`,
:func:`~reference.spmd.guards.check_rank_constants`).

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

from reference.fx_passes.base import FXPass, PassContext
from reference.spmd.collectives import annotate_replica_groups
from reference.spmd.guards import check_rank_constants


class CollectiveReplicaGroupsPass(FXPass):
    """Annotates each collective with the full replica groups of its mesh."""

    version = 1

    def transform(self, gm: torch.fx.GraphModule, ctx: PassContext) -> torch.fx.GraphModule:
        annotate_replica_groups(gm)
        return gm


class RankConstantCheckPass(FXPass):
    """The graph-level SPMD guard rail (warns, or raises under the strict flag)."""

    version = 1

    def transform(self, gm: torch.fx.GraphModule, ctx: PassContext) -> torch.fx.GraphModule:
        # spmd_strict: the compile request's flag (the seam passes it), or the environment's as the
        # seeds' keyword entry read it
        check_rank_constants(gm, graph_name=ctx.graph_name, strict=ctx.spmd_strict)
        return gm
