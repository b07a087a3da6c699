"""Collective nodes of an FX graph and their full replica groups.

``_c10d_functional`` collectives name their process group by an opaque, per-rank ``group_name``.
:func:`annotate_replica_groups` resolves each one against the mesh registry and records the full
mesh on the node (``node.meta["replica_groups"]``, ``node.meta["channel_id"]``); this is the body
of ``CollectiveReplicaGroupsPass`` and the first step of lowering a graph with collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from reference.spmd.mesh import MESH_REGISTRY, Mesh, MeshRegistry

# op name (the overload packet's name) -> the collective's kind in the program
COLLECTIVE_KINDS = {
    "all_reduce": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}
_NAMESPACE = "_c10d_functional"


def _op_name(node: torch.fx.Node) -> str | None:
    if node.op != "call_function":
        return None
    target = node.target
    name = getattr(target, "_schema", None)
    if name is not None:
        qual = name.name  # "_c10d_functional::all_reduce"
    else:
        qual = getattr(target, "_qualified_op_name", None) or str(target)
    qual = str(qual).replace("torch.ops.", "").replace(".", "::", 1)
    ns, _, op = qual.partition("::")
    if ns != _NAMESPACE:
        return None
    return op.split(".")[0]


def collective_kind(node: torch.fx.Node) -> str | None:
    """``all_reduce`` / ``all_gather`` / ``reduce_scatter`` / ``all_to_all`` or ``None``."""
    return COLLECTIVE_KINDS.get(_op_name(node) or "")


def is_wait(node: torch.fx.Node) -> bool:
    return _op_name(node) == "wait_tensor"


def is_collective(node: torch.fx.Node) -> bool:
    return collective_kind(node) is not None


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls any ``_c10d_functional`` op: such a graph is lowered as an SPMD
    program (split at its collectives), never as one plain StableHLO module."""
    return any(_op_name(node) is not None for node in gm.graph.nodes)


def group_name_of(node: torch.fx.Node) -> str:
    if "group_name" in node.kwargs:
        return str(node.kwargs["group_name"])
    return str(node.args[-1])


@dataclass(frozen=True)
class CollectiveInfo:
    kind: str
    mesh: Mesh
    reduce_op: str | None = None
    group_size: int | None = None
    output_splits: Any = None
    input_splits: Any = None


def collective_info(node: torch.fx.Node, registry: MeshRegistry | None = None) -> CollectiveInfo:
    """What the program needs of a collective node: its kind, mesh and arguments."""
    kind = collective_kind(node)
    if kind is None:
        raise ValueError(f"node {node.name!r} is not a _c10d_functional collective")
    mesh = (registry or MESH_REGISTRY).resolve(group_name_of(node))
    a = list(node.args)
    if kind == "all_reduce":
        return CollectiveInfo(kind, mesh, reduce_op=str(a[1]))
    if kind == "all_gather":
        return CollectiveInfo(kind, mesh, group_size=int(a[1]))
    if kind == "reduce_scatter":
        return CollectiveInfo(kind, mesh, reduce_op=str(a[1]), group_size=int(a[2]))
    return CollectiveInfo(kind, mesh, output_splits=a[1], input_splits=a[2])


def annotate_replica_groups(gm: torch.fx.GraphModule, registry: MeshRegistry | None = None) -> int:
    """Write each collective's full mesh into ``node.meta``; returns how many were annotated.

    Raises :class:`~reference.spmd.errors.MeshError` for a group no coordinator registered.
    """
    count = 0
    for node in gm.graph.nodes:
        if is_collective(node):
            mesh = (registry or MESH_REGISTRY).resolve(group_name_of(node))
            node.meta["replica_groups"] = [list(g) for g in mesh.replica_groups]
            node.meta["channel_id"] = mesh.channel_id
            count += 1
    return count
