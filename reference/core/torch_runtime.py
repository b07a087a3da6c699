"""The private torch names a process needs that only runs compiled graphs (a serving process
loading precompiled files), in a module that imports no Dynamo.

The same rule as :mod:`reference.core.torch_compat` holds (``tests/core/test_torch_compat.py``):
these two modules are the only ones in ``reference/`` whose code names a private torch module or
attribute. :mod:`reference.core.torch_compat` re-exports every name here.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable

import torch

__all__ = ["tensor_from_dlpack_capsule", "DYNAMO_STAND_INS", "dict_version", "tensor_match"]

#: A tensor over the memory a DLPack capsule describes (no copy). ``torch.utils.dlpack.from_dlpack``
#: handed a capsule calls this after a few Python checks, which a runtime call per output pays for.
tensor_from_dlpack_capsule: Callable[[Any], torch.Tensor] = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)


#: A dict's version tag (CPython's, as Dynamo's DICT_VERSION guard reads it): changes whenever the
#: dict is written with another value. C code in torch._C; importing it imports no Dynamo.
dict_version: Callable[[dict], int] = torch._C._dynamo.guards.dict_version


def tensor_match(tensors: "list[torch.Tensor]") -> Callable[..., bool]:
    """A check that tensors are like ``tensors``, one for one: type and dispatch keys, dtype,
    device, ``requires_grad``, sizes and strides (Dynamo's TENSOR_MATCH, the C++ ``TensorGuards``
    in torch._C; about 0.1 µs a tensor where a Python comparison costs 0.5)."""
    return torch._C._dynamo.guards.TensorGuards(
        *tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors], dynamic_dims_strides=[list(t.stride()) for t in tensors],
    ).check


# --- what Dynamo's generated code calls in Dynamo ---------------------------------------------------
# The bytecode Dynamo generates around a compiled graph (what an AOT-compiled function runs) calls
# into torch._dynamo.utils for the profiler's "Pregraph bytecode" range. A precompiled variant run
# without Dynamo (reference.backends.precompiled_direct) gets these stand-ins under the same names:
# the same behaviour (torch 2.13's, tests/core/test_torch_compat.py compares them), no Dynamo import.


def _record_pregraph_bytecode_enter() -> contextlib.AbstractContextManager:
    cm = (torch._C._profiler._RecordFunctionFast("Pregraph bytecode") if torch.autograd.profiler._is_profiler_enabled
          else contextlib.nullcontext())
    cm.__enter__()
    return cm


def _record_pregraph_bytecode_exit(cm: contextlib.AbstractContextManager) -> None:
    cm.__exit__(None, None, None)


#: Dynamo module -> a stand-in holding the attributes generated code may use from it.
DYNAMO_STAND_INS: dict[str, Any] = {
    "torch._dynamo.utils": types.SimpleNamespace(
        record_pregraph_bytecode_enter=_record_pregraph_bytecode_enter,
        record_pregraph_bytecode_exit=_record_pregraph_bytecode_exit,
    ),
}
