"""SPMD passes: placeholders in the default order until the SPMD work fills them in.

``CollectiveReplicaGroupsPass`` will give each collective its replica groups from the mesh, and
``RankConstantCheckPass`` will reject graphs that bake a rank into a constant. Today both return
the graph unchanged (see tests/test_fx_passes_spmd_placeholders.py).
"""

from __future__ import annotations

import torch

from reference.fx_passes.base import FXPass


class CollectiveReplicaGroupsPass(FXPass):
    """Placeholder: returns the graph unchanged."""

    version = 1

    @property
    def name(self) -> str:
        return "CollectiveReplicaGroupsPass"

    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        return gm


class RankConstantCheckPass(FXPass):
    """Placeholder: returns the graph unchanged."""

    version = 1

    @property
    def name(self) -> str:
        return "RankConstantCheckPass"

    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        return gm
