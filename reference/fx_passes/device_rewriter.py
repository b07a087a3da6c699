"""DeviceRewriterPass: every device the graph names becomes the target device.

A graph traced on one device and compiled for another still names the first one: factory calls
(``torch.arange(n, device="cuda")``), moves (``x.to("cuda")``, ``x.cuda()``) and tensor constants
held by the graph module. Lowering compiles for one device, so this pass rewrites

- a ``device=`` keyword argument holding a device (``str`` or ``torch.device``),
- the device positional argument of ``Tensor.to`` and of ATen overloads whose schema types an
  argument as ``Device``,
- ``Tensor.cuda()`` / ``Tensor.cpu()`` (and friends) to ``Tensor.to(target)``,
- tensor attributes read by ``get_attr`` nodes,

to the target device. Device arguments computed inside the graph (``x.device``) follow their
tensor and are left alone; graph inputs are the caller's and are not moved.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from reference.core.torch_compat import OpOverload
from reference.fx_passes._graph import finish
from reference.fx_passes.base import FXPass, FXPassError, PassContext

# Tensor methods that move to a fixed device type.
_MOVE_METHODS = {"cuda": "cuda", "cpu": "cpu", "xpu": "xpu", "mps": "mps"}


def _as_device(value) -> torch.device | None:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        return torch.device(value)  # ValueError/RuntimeError for a string that is not a device
    return None


def _foreign(dev: torch.device, target: torch.device) -> bool:
    return dev.type != target.type or (target.index is not None and dev.index != target.index)


class DeviceRewriterPass(FXPass):
    """Moves device arguments and graph constants on a foreign device to ``target_device``."""

    version = 1

    def transform(self, gm: GraphModule, ctx: PassContext) -> GraphModule:
        graph_name = ctx.graph_name
        target_arg = ctx.target_device
        try:
            target = torch.device(target_arg)
        except (RuntimeError, ValueError) as exc:
            raise FXPassError(
                self.name, graph_name, f"target_device {target_arg!r} is not a device ({exc}); pass e.g. 'cpu'"
            ) from None

        changed = False
        for node in list(gm.graph.nodes):
            if node.op == "get_attr":
                changed |= self._move_attribute(gm, node, target, graph_name)
            elif node.op in ("call_function", "call_method"):
                changed |= self._rewrite_call(node, target, graph_name)
        return finish(gm) if changed else gm

    def _check(self, node: Node, value, graph_name: str) -> torch.device | None:
        try:
            return _as_device(value)
        except (RuntimeError, ValueError):
            raise FXPassError(
                self.name,
                graph_name,
                f"its device argument {value!r} is not a device; name one like 'cpu' or 'cuda:0'",
                node=node.name,
            ) from None

    def _rewrite_call(self, node: Node, target: torch.device, graph_name: str) -> bool:
        changed = False
        dev = node.kwargs.get("device")
        if dev is not None and not isinstance(dev, Node):
            parsed = self._check(node, dev, graph_name)
            if parsed is not None and _foreign(parsed, target):
                node.update_kwarg("device", target)
                changed = True

        if node.op == "call_method" and node.target in _MOVE_METHODS and len(node.args) == 1:
            if _foreign(torch.device(_MOVE_METHODS[node.target]), target):
                node.target = "to"
                node.kwargs = {k: v for k, v in node.kwargs.items() if k not in ("device",)}
                node.args = (node.args[0], target)
                changed = True
        elif node.op == "call_method" and node.target == "to":
            for i, arg in enumerate(node.args[1:], start=1):
                if isinstance(arg, (str, torch.device)):
                    parsed = self._check(node, arg, graph_name)
                    if _foreign(parsed, target):
                        node.update_arg(i, target)
                        changed = True
        elif node.op == "call_function" and isinstance(node.target, OpOverload):
            for i, (arg, formal) in enumerate(zip(node.args, node.target._schema.arguments)):
                if "Device" in str(formal.type) and isinstance(arg, (str, torch.device)):
                    parsed = self._check(node, arg, graph_name)
                    if _foreign(parsed, target):
                        node.update_arg(i, target)
                        changed = True
        return changed

    def _move_attribute(self, gm: GraphModule, node: Node, target: torch.device, graph_name: str) -> bool:
        owner, _, attr = str(node.target).rpartition(".")
        module = gm.get_submodule(owner) if owner else gm
        value = getattr(module, attr, None)
        if not isinstance(value, torch.Tensor) or not _foreign(value.device, target):
            return False
        if value.device.type == "meta":
            raise FXPassError(
                self.name,
                graph_name,
                f"constant {node.target!r} is a meta tensor (a shape without data), so it cannot be moved "
                f"to {target}; materialize it on a real device before compiling",
                node=node.name,
            )
        moved = value.to(target)
        if isinstance(value, torch.nn.Parameter):
            moved = torch.nn.Parameter(moved, requires_grad=value.requires_grad)
        setattr(module, attr, moved)
        return True
