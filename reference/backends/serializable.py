"""The neuron backend's answer to ``aot_compile``: a compiled graph that travels as bytes.

``torch.compile(fn, backend="neuron", fullgraph=True).aot_compile(((x,), {}))`` asks the backend
for a :class:`~reference.core.torch_compat.SerializableCallable`. The backend compiles the graph
as it always does (FX passes, AOT Autograd, lowering, the NEFF cache) and hands back a
:class:`NeuronSerializableCallable`: the compiled graph with what a fresh process needs to run it
without tracing, lowering or compiling anything:

- the artifact's bytes (and its cache key, for provenance),
- the inference plan: which inputs the program writes (their new values are copied back into the
  caller's tensors), how many user outputs follow, which inputs stay resident (parameters and
  buffers), where the graph returns ``None``,
- the input and output specs, the runtime driver it was loaded with,
- the versions it was built with (torch, the reference, the IREE runtime, the host CPU) and the
  compiler arguments of its artifact.

The bytes (:meth:`NeuronSerializableCallable.serialize_compile_artifacts`) are a fixed header, a
JSON document and the artifact; nothing of them is unpickled, so reading them runs no code but the
artifact, and that only once its checksum (and, with ``TORCH_NEURONX_CACHE_HMAC_KEY`` set, its
HMAC) matched. The deserializer checks the versions and the host before it loads the artifact into
the runtime, and raises a :class:`PrecompiledFileError` subclass naming the file and the reason.
Loading imports neither torch-mlir nor the IREE compiler and runs neither Dynamo's trace nor AOT
Autograd; torch's own ``load_compiled_function`` wraps the bytes in a pickle of its own, which is
code (docs/caching.md, "Precompiled functions").

The compile side (what the backend does when ``aot_compile`` calls it) is
:mod:`reference.backends.aot_seam`; the record, its checks and the call are
:mod:`reference.backends.graph_record`'s, which a process that only runs precompiled graphs
imports without this module (which needs Dynamo's ``SerializableCallable``).
"""

from __future__ import annotations

from typing import Any, Callable

from reference.backends.graph_record import (  # noqa: F401 - names kept importable from here
    FORMAT, MAGIC, MUST_MATCH, GraphRecord, check_versions, current_file, graph_call, hmac_key, loading, pack, unpack,
)
from reference.core.errors import (  # noqa: F401 - likewise
    NeuronBackendError, PrecompiledFileError, PrecompiledInputError, PrecompiledIntegrityError, PrecompiledTargetError,
    PrecompiledVersionError, PrecompileError,
)
from reference.core.torch_compat import SerializableCallable

__all__ = [
    "NeuronSerializableCallable", "PrecompileError", "PrecompiledFileError", "PrecompiledVersionError",
    "PrecompiledTargetError", "PrecompiledIntegrityError", "PrecompiledInputError", "GraphRecord", "loading",
]


class NeuronSerializableCallable(SerializableCallable):
    """One compiled neuron graph that ``save_compiled_function`` can write and
    ``load_compiled_function`` can read back (see the module doc)."""

    def __init__(self, record: GraphRecord, artifact: bytes, loaded: Callable | None = None) -> None:
        self.record = record
        self._artifact = artifact
        self._call = graph_call(record, artifact, loaded)

    @property
    def graph_name(self) -> str:
        return self.record.graph_name

    @classmethod
    def serialize_compile_artifacts(cls, fn: "NeuronSerializableCallable") -> bytes:
        return pack(fn.record, fn._artifact, hmac_key())

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "NeuronSerializableCallable":
        file = current_file()
        record, artifact = unpack(data, file=file, key=hmac_key())
        try:
            return cls(record, artifact)
        except NeuronBackendError as exc:  # the runtime refused the artifact
            raise PrecompiledIntegrityError(file, f"the runtime cannot load graph {record.graph_name!r} ({exc})") from None

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)
