"""What "the device" means for the reference, and how inputs and outputs are placed on it.

The reference runs compiled graphs with the IREE runtime on the CPU, so the device and the host
share one address space. The distinction the backend reference draws (host tensors are copied to
the device; outputs live on the device) is kept as a property of a tensor rather than of memory:

- a **device tensor** is a tensor the runtime produced (an output of a compiled graph) or one
  :func:`to_device` made; :func:`is_device_tensor` tells them apart;
- a **host tensor** is any other CPU tensor.

Inputs: a host tensor passed to a compiled graph is copied into the runtime's buffers (the
*auto-copy*). With ``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` a host tensor passed as a graph
argument raises :class:`UnsupportedInputError` instead; module parameters and buffers are not
graph arguments and are always copied.

Outputs: by default every output is a device tensor. With ``TORCH_NEURONX_RETAIN_DEVICE_MODE=1``
outputs keep the placement of the arguments: when no argument was a device tensor they come back
as plain host tensors (copied out of the runtime's buffers).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.utils.weak import WeakIdKeyDictionary

from reference.core import env
from reference.core.errors import UnsupportedInputError

DEVICE_DESCRIPTION = "the reference runtime (IREE local-sync or local-task on the host CPU)"


class _DeviceMarks:
    """The tensors that are on the device, held weakly by identity (a tensor's ``==`` compares
    values, so not a ``WeakKeyDictionary``): a mark goes when its tensor does, and nothing is
    written on the caller's tensor objects."""

    def __init__(self) -> None:
        self._marked: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def mark(self, t: torch.Tensor) -> torch.Tensor:
        self._marked[t] = True
        return t

    def __contains__(self, t: torch.Tensor) -> bool:
        return t in self._marked


_DEVICE = _DeviceMarks()
_mark = _DEVICE.mark


def to_device(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` placed on the reference's device (a device tensor)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"to_device takes a tensor, got {type(t).__name__}")
    return _mark(t.detach().to("cpu", copy=True))


def is_device_tensor(t: Any) -> bool:
    """True for tensors the runtime produced or :func:`to_device` made."""
    return isinstance(t, torch.Tensor) and t in _DEVICE


def user_argument_indices(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the Dynamo graph's inputs that are the caller's own arguments.

    Parameters, buffers and globals are lifted into graph inputs too; they are not "passed as
    inputs" by the caller, so the auto-copy rule does not apply to them.
    """
    from reference.core.torch_compat import LocalSource  # the compile side's (Dynamo): not at import

    out = []
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        grapharg = node.meta.get("grapharg")
        source = getattr(grapharg, "source", None)
        if isinstance(source, LocalSource):
            out.append(i)
    return out


def place(compiled: Callable, user_indices: Sequence[int], graph_name: str) -> Callable:
    """Wrap a Dynamo-graph callable with the input check and the output placement."""

    def run(*args):
        user_args = [args[i] for i in user_indices if i < len(args) and isinstance(args[i], torch.Tensor)]
        if env.get(env.DISABLE_CPU_AUTOCOPY):
            for i in user_indices:
                a = args[i] if i < len(args) else None
                if isinstance(a, torch.Tensor) and not is_device_tensor(a):
                    raise UnsupportedInputError(
                        f"argument {i} is a host tensor and TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY is set; "
                        "move it to the device first (reference.to_device(t)) or unset the variable",
                        graph_name=graph_name,
                    )
        out = compiled(*args)
        on_device = not env.get(env.RETAIN_DEVICE_MODE) or any(is_device_tensor(a) for a in user_args)
        return _map_outputs(out, on_device)

    run.__wrapped__ = compiled  # type: ignore[attr-defined]
    return run


def _map_outputs(out: Any, on_device: bool) -> Any:
    if isinstance(out, torch.Tensor):
        if on_device:
            return _mark(out)
        return out.clone() if is_device_tensor(out) else out
    if isinstance(out, tuple):
        return tuple(_map_outputs(o, on_device) for o in out)
    if isinstance(out, list):
        return [_map_outputs(o, on_device) for o in out]
    return out
