"""Static shapes: the backend compiles one artifact per concrete shape. An explicit request for
dynamic shapes is refused; a graph Dynamo made dynamic on its own is specialized per call."""

from __future__ import annotations

from typing import Any

import torch

from reference.core.errors import DynamicShapeError
from reference.core.torch_compat import dynamo_config


def is_symbolic(x: Any) -> bool:
    """A symbolic size, or a tensor with one."""
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in x.shape)
    return False


def any_symbolic(example_inputs: list) -> bool:
    return any(is_symbolic(x) for x in example_inputs)


def reject_explicit_dynamic() -> None:
    """``dynamic=True`` and dynamic ``shapes_spec`` ask for one artifact over many shapes, which the
    backend cannot build; automatic dynamism (a shape changed between calls) is handled per shape."""
    cfg = dynamo_config()
    if cfg.assume_static_by_default is False:
        raise DynamicShapeError(
            "torch.compile(dynamic=True) is not supported by the neuron backend: it compiles static "
            "shapes only. Use dynamic=False (or leave it unset): each new input shape then compiles "
            "its own graph."
        )
    if getattr(cfg, "_shapes_spec", None) is not None:
        raise DynamicShapeError(
            "a dynamic shapes_spec is not supported by the neuron backend, for the same reason as "
            "dynamic=True: it compiles static shapes only. Use a static spec or none."
        )


def specialize(gm: torch.fx.GraphModule, args: tuple) -> tuple[torch.fx.GraphModule, list[int]]:
    """A copy of ``gm`` with its integer (size) inputs replaced by the values in ``args``."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    keep: list[int] = []
    for i, node in enumerate(list(graph.find_nodes(op="placeholder"))):
        value = args[i]
        if isinstance(value, torch.Tensor):
            keep.append(i)
            continue
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n, _p=node, _v=value: _v if n is _p else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n, _p=node, _v=value: _v if n is _p else n)
        graph.erase_node(node)
    graph.lint()
    return torch.fx.GraphModule(gm, graph), keep
