"""The FX pass interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class FXPass(ABC):
    """A graph-to-graph transformation run between Dynamo's FX graph and lowering.

    ``version`` enters the pass manager's identity (and through it the key of anything cached
    from the passes' output): bump it whenever the pass's output changes for the same input.
    """

    version: int = 1

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule: ...


class FXPassError(RuntimeError):
    """A pass could not handle a graph; names the pass, the graph and, where known, the node."""

    def __init__(self, pass_name: str, graph_name: str, message: str, *, node: str | None = None) -> None:
        where = f" at node {node!r}" if node else ""
        super().__init__(f"FX pass {pass_name!r} failed on graph {graph_name!r}{where}: {message}")
        self.pass_name = pass_name
        self.graph_name = graph_name
        self.node = node
