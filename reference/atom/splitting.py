"""Splitting a traced graph at its splitting ops.

Every node gets a piece number: nodes between two splitting ops share one, and each splitting op
gets a piece of its own, so L splitting ops surrounded by other work give 2L+1 pieces. The result
is a stitching module whose submodules ``submod_<n>`` are the pieces, called in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
import torch.fx as fx
from torch.fx.passes.split_module import split_module

from reference.core.torch_compat import OpOverload, OpOverloadPacket

__all__ = ["SplitItem", "split_graph", "op_name"]


@dataclass
class SplitItem:
    """One piece: its submodule name in the stitching module, its number, whether it is a
    splitting op (left uncompiled), and its graph."""

    submod_name: str
    graph_id: int
    is_splitting_graph: bool
    graph: fx.GraphModule


def op_name(target: object) -> str | None:
    """``"namespace.op"`` for an op target (packet or overload), else ``None``."""
    if isinstance(target, OpOverload):
        target = target.overloadpacket
    if isinstance(target, OpOverloadPacket):
        return target._qualified_op_name.replace("::", ".")
    return None


def split_graph(graph: fx.GraphModule, splitting_ops: Iterable[str]) -> tuple[fx.GraphModule, list[SplitItem]]:
    """Split ``graph`` at calls to ``splitting_ops`` (``"namespace.op"`` names).

    Returns the stitching module and its pieces ordered by number. Pieces that would be empty
    (a splitting op first or last, or two in a row) do not exist.
    """
    wanted = {name.replace("::", ".") for name in splitting_ops}
    piece = 0
    assignment: dict[fx.Node, int] = {}
    splitting_pieces: set[int] = set()
    for node in graph.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "call_function" and op_name(node.target) in wanted:
            piece += 1
            assignment[node] = piece
            splitting_pieces.add(piece)
            piece += 1
        else:
            assignment[node] = piece
    split_gm = split_module(graph, None, lambda node: assignment[node], keep_original_order=True)
    items = []
    for name, module in split_gm.named_children():
        graph_id = int(name.removeprefix("submod_"))
        items.append(SplitItem(name, graph_id, graph_id in splitting_pieces, module))
    items.sort(key=lambda item: item.graph_id)
    return split_gm, items
