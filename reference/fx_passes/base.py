"""The FX pass interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from reference.core.errors import NeuronBackendError


class FXPass(ABC):
    """A graph-to-graph transformation run between Dynamo's FX graph and lowering.

    ``run(gm, **kwargs)`` returns the transformed graph module (it may edit ``gm`` in place and
    return it). The pass manager passes ``graph_name`` and ``target_device``; a pass ignores the
    keyword arguments it does not use.

    ``version`` enters the pass manager's identity (and through it the key of anything cached
    from the passes' output): bump it whenever the pass's output changes for the same input.
    """

    version: int = 1

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}@{self.version}>"


class FXPassError(NeuronBackendError):
    """A pass could not handle a graph; names the pass, the graph and, where known, the node.

    A :class:`~reference.core.errors.NeuronBackendError`, so the backend treats it like any
    other compile failure (eager fallback unless ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION``).
    """

    def __init__(self, pass_name: str, graph_name: str, message: str, *, node: str | None = None) -> None:
        where = f" at node {node!r}" if node else ""
        super().__init__(f"FX pass {pass_name!r} failed on graph {graph_name!r}{where}: {message}")
        self.pass_name = pass_name
        self.graph_name = graph_name
        self.node = node
