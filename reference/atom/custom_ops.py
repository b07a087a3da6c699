"""Registering custom ops that Dynamo traces as single nodes (and that can split a graph).

An op registered here is a ``torch.library`` op: Dynamo records a call to it as one node, its fake
implementation gives output shapes while tracing, and its real implementation runs under the given
dispatch key. By default that is both ``CUDA`` (the design's default: serving models run there) and
``CPU`` (where this reference runs and where the CPU recorder stands in for graphs), so a model
written as the design writes one runs on either device; an explicit key keeps its meaning, and a
device no key covers gets PyTorch's "could not run ... with arguments from the <device> backend". The namespace is a parameter; ATOM's own is ``aiter``,
this reference uses :data:`DEFAULT_NAMESPACE` so it cannot collide with a real aiter install.

Nothing is registered at import: a model module registers its ops when it is imported.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Optional

import torch

from reference import NeuronBackendError
from reference.core.torch_compat import OpOverloadPacket

__all__ = [
    "DEFAULT_DISPATCH_KEYS",
    "DEFAULT_NAMESPACE",
    "CustomOpError",
    "direct_register_custom_op",
    "is_registered_op",
    "resolve_op",
]

DEFAULT_NAMESPACE = "atom"
#: Where an op's implementation is registered when no ``dispatch_key`` is given: the design's
#: ``CUDA`` and the CPU. Two backend keys rather than ``CompositeExplicitAutograd``, which would
#: also answer for every other device (and for meta tensors) with a kernel written for these two.
DEFAULT_DISPATCH_KEYS = ("CUDA", "CPU")


class CustomOpError(NeuronBackendError, ValueError):
    """A custom op that cannot be registered or found; names the op."""


class _Libraries:
    """One ``torch.library.Library`` fragment per namespace, made on first use, and what each
    registered name was registered with (so a repeated registration is recognised)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._libs: dict[str, torch.library.Library] = {}
        self._funcs: dict[str, Callable] = {}

    def register(self, namespace, op_name, op_func, mutates_args, fake_impl, dispatch_keys, tags) -> str:
        qualname = f"{namespace}.{op_name}"
        with self._lock:
            known = self._funcs.get(qualname)
            if known is not None:
                if known is op_func:
                    return qualname
                raise CustomOpError(
                    f"custom op {qualname!r} is already registered with {known.__qualname__}; "
                    "pick another op_name or namespace"
                )
            lib = self._libs.get(namespace)
            if lib is None:
                lib = self._libs[namespace] = torch.library.Library(namespace, "FRAGMENT")
            schema = torch.library.infer_schema(op_func, mutates_args=list(mutates_args))
            try:
                lib.define(op_name + schema, tags=tuple(tags))
            except RuntimeError as exc:
                raise CustomOpError(f"custom op {qualname!r} could not be defined: {exc}") from None
            for key in dispatch_keys:
                lib.impl(op_name, op_func, key)
            if fake_impl is not None:
                lib._register_fake(op_name, fake_impl)
            self._funcs[qualname] = op_func
        return qualname


_LIBRARIES = _Libraries()


def direct_register_custom_op(
    op_name: str,
    op_func: Callable,
    mutates_args: Iterable[str] = (),
    fake_impl: Optional[Callable] = None,
    dispatch_key: Optional[str] = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    tags: Iterable[torch.Tag] = (),
) -> str:
    """Register ``op_func`` as ``torch.ops.<namespace>.<op_name>`` and return ``"namespace.op_name"``.

    The schema is inferred from ``op_func``'s annotations; ``mutates_args`` names the arguments it
    writes in place (they must be returned by no one: the op returns ``None`` or new tensors).
    ``fake_impl`` computes output metadata while tracing (needed for ops that return tensors).
    ``dispatch_key`` (``None``: :data:`DEFAULT_DISPATCH_KEYS`, CUDA and CPU) is where ``op_func``
    is registered.
    Registering the same function under the same name again is a no-op; another function under a
    taken name raises :class:`CustomOpError`.
    """
    if not op_name.isidentifier():
        raise CustomOpError(f"custom op name {op_name!r} must be a Python identifier")
    if not namespace.isidentifier():
        raise CustomOpError(f"custom op namespace {namespace!r} must be a Python identifier")
    keys = DEFAULT_DISPATCH_KEYS if dispatch_key is None else (dispatch_key,)
    return _LIBRARIES.register(namespace, op_name, op_func, mutates_args, fake_impl, keys, tags)


def resolve_op(qualname: str) -> OpOverloadPacket:
    """The op packet for ``"namespace.op"`` (``"namespace::op"`` also accepted)."""
    namespace, sep, name = qualname.replace("::", ".").partition(".")
    if not sep or not name or "." in name:
        raise CustomOpError(f"op {qualname!r} is not of the form 'namespace.op'")
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        raise CustomOpError(f"op {qualname!r} is not registered") from None


def is_registered_op(qualname: str) -> bool:
    """Whether ``"namespace.op"`` names an op known to the dispatcher."""
    try:
        resolve_op(qualname)
    except CustomOpError:
        return False
    return True
