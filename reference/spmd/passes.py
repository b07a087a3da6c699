"""The bodies of the two SPMD FX passes (``reference/fx_passes/spmd_passes.py`` holds the classes).

Both run on the Dynamo graph, last in the default order: ``CollectiveReplicaGroupsPass`` then
``RankConstantCheckPass``.
"""

from __future__ import annotations

import torch

from reference.spmd.collectives import annotate_replica_groups
from reference.spmd.guards import check_rank_constants


def collective_replica_groups(gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
    """Write every collective's full mesh into ``node.meta["replica_groups"]`` (and its channel id)."""
    annotate_replica_groups(gm)
    return gm


def rank_constant_check(gm: torch.fx.GraphModule, *, graph_name: str = "<graph>", **kwargs) -> torch.fx.GraphModule:
    """Warn about baked rank constants; raise under ``NEURON_LIBTORCH_SPMD_STRICT=1``. The graph is unchanged."""
    check_rank_constants(gm, graph_name=graph_name)
    return gm
