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
:mod:`reference.backends.aot_seam`; this module holds only what loading needs (the runtime, the
record, the checks), so that a process that loads a precompiled function imports neither the
compile side nor AOT Autograd's entry point, torch-mlir or the IREE compiler.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from reference.backends import device as _device
from reference.cache.auth import sign, verify
from reference.cache.key import tool_versions
from reference.core import env
from reference.core.errors import NeuronBackendError
from reference.core.metrics import METRICS
from reference.core.specs import TensorSpec
from reference.core.torch_compat import SerializableCallable
from reference.lowering.stablehlo import with_none_outputs
from reference.runtime import LoadedArtifact

#: The first bytes of a serialized compiled graph, then the format's version.
MAGIC = b"NEURONPG"
FORMAT = 1
#: The versions a loaded graph must share with the process that built it: the program it runs was
#: made for this torch (the bytecode and guards around it), this reference (the plan's meaning),
#: this runtime (the artifact's format) and this CPU (the artifact's code).
MUST_MATCH = ("torch", "reference", "runtime", "host")
_HEAD = struct.Struct(">8sII")  # magic, format, length of the JSON document


class PrecompileError(NeuronBackendError):
    """``aot_compile`` asked for a graph the backend cannot hand over as bytes (says which and why).
    Raised by the compile side (:mod:`reference.backends.aot_seam`), kept here with the other errors."""

    def __init__(self, graph: str, why: str) -> None:
        super().__init__(
            f"{graph} cannot be precompiled with the neuron backend: {why}. Compile it with torch.compile "
            "(no aot_compile) instead, or change the function so that it is one inference graph"
        )
        self.graph = graph
        self.why = why


class PrecompiledFileError(NeuronBackendError):
    """A precompiled file (or the bytes of one compiled graph in it) cannot be used: names the file
    and the reason. Its artifact was not run (and, through :func:`reference.load_precompiled`,
    nothing of it was unpickled)."""

    def __init__(self, file: str, reason: str, what_to_do: str = "precompile the function again in this environment") -> None:
        super().__init__(f"precompiled file {file}: {reason}; {what_to_do}")
        self.file = file
        self.reason = reason


class PrecompiledVersionError(PrecompiledFileError):
    """The file was written by another torch, reference or runtime version, or in another format."""


class PrecompiledTargetError(PrecompiledFileError):
    """The file's artifact was built for another CPU than this process runs on."""


class PrecompiledIntegrityError(PrecompiledFileError):
    """The file is truncated, altered, not a precompiled file, or fails authentication."""


class PrecompiledInputError(PrecompiledFileError):
    """A loaded function was called with inputs its guards do not accept (another shape, dtype, ...)."""


# The file being loaded, for the errors of the deserializer (torch hands it bytes, not a path).
_LOADING: contextvars.ContextVar[str] = contextvars.ContextVar(
    "neuron_precompiled_file", default="(the file given to torch.compiler.load_compiled_function)"
)


@contextlib.contextmanager
def loading(file: str) -> Iterator[None]:
    """Name ``file`` in the errors of graphs deserialized in this block."""
    token = _LOADING.set(file)
    try:
        yield
    finally:
        _LOADING.reset(token)


__all__ = [
    "NeuronSerializableCallable", "PrecompileError", "PrecompiledFileError", "PrecompiledVersionError",
    "PrecompiledTargetError", "PrecompiledIntegrityError", "PrecompiledInputError", "GraphRecord", "loading",
]


def hmac_key() -> bytes | None:
    """``TORCH_NEURONX_CACHE_HMAC_KEY`` as bytes, or ``None``."""
    key = env.get(env.CACHE_HMAC_KEY)
    return key.encode("utf-8") if key else None


@dataclass(frozen=True)
class GraphRecord:
    """What a fresh process needs to run one compiled graph (the JSON document of its bytes)."""

    graph_name: str
    key: str
    artifact_sha256: str
    artifact_size: int
    input_specs: tuple[TensorSpec, ...]
    output_specs: tuple[TensorSpec, ...]
    mutated_inputs: tuple[int, ...]
    n_outputs: int
    static_inputs: tuple[int, ...]
    nones: tuple[int, ...]
    user_indices: tuple[int, ...]
    driver: str
    versions: Mapping[str, str]
    compiler_args: tuple[str, ...] = ()  # what the artifact was compiled with (for the record; not checked)

    def as_json(self) -> dict[str, Any]:
        return {
            "graph_name": self.graph_name, "key": self.key, "artifact_sha256": self.artifact_sha256,
            "artifact_size": self.artifact_size,
            "input_specs": [s.as_json() for s in self.input_specs],
            "output_specs": [s.as_json() for s in self.output_specs],
            "mutated_inputs": list(self.mutated_inputs), "n_outputs": self.n_outputs,
            "static_inputs": list(self.static_inputs), "nones": list(self.nones),
            "user_indices": list(self.user_indices), "driver": self.driver, "versions": dict(self.versions),
            "compiler_args": list(self.compiler_args),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "GraphRecord":
        """Raises ``KeyError``/``TypeError``/``ValueError`` on a document of another shape."""
        inputs = tuple(TensorSpec.from_json(s) for s in doc["input_specs"])
        record = cls(
            graph_name=str(doc["graph_name"]), key=str(doc["key"]), artifact_sha256=str(doc["artifact_sha256"]),
            artifact_size=int(doc["artifact_size"]), input_specs=inputs,
            output_specs=tuple(TensorSpec.from_json(s) for s in doc["output_specs"]),
            mutated_inputs=tuple(int(i) for i in doc["mutated_inputs"]), n_outputs=int(doc["n_outputs"]),
            static_inputs=tuple(int(i) for i in doc["static_inputs"]), nones=tuple(int(i) for i in doc["nones"]),
            user_indices=tuple(int(i) for i in doc["user_indices"]), driver=str(doc["driver"]),
            versions={str(k): str(v) for k, v in dict(doc["versions"]).items()},
            compiler_args=tuple(str(a) for a in doc["compiler_args"]),
        )
        n = len(inputs)
        if any(not 0 <= i < n for i in record.mutated_inputs + record.static_inputs + record.user_indices):
            raise ValueError("an input position out of range")
        if record.n_outputs < 0 or len(record.output_specs) != len(record.mutated_inputs) + record.n_outputs:
            raise ValueError("the outputs do not add up")
        return record


def pack(record: GraphRecord, artifact: bytes, key: bytes | None) -> bytes:
    """The bytes of one compiled graph: header, JSON document (with its HMAC under ``key`` when
    one is given) and the artifact."""
    doc = record.as_json()
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    doc["hmac_sha256"] = sign(key, MAGIC, body, artifact) if key is not None else None
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return _HEAD.pack(MAGIC, FORMAT, len(text)) + text + artifact


def unpack(data: bytes, *, file: str, key: bytes | None) -> tuple[GraphRecord, bytes]:
    """The record and artifact of :func:`pack`'s bytes, checked: format, size, checksum, HMAC
    (when ``key`` is given), then the versions and the host. Raises a :class:`PrecompiledFileError`
    subclass naming ``file``; runs nothing."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < _HEAD.size:
        raise PrecompiledIntegrityError(file, "too short to hold a compiled neuron graph (truncated?)")
    magic, fmt, n = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise PrecompiledIntegrityError(file, "not a compiled neuron graph (its header is not the backend's)")
    if fmt != FORMAT:
        raise PrecompiledVersionError(file, f"written in format {fmt}, this reference reads format {FORMAT}")
    if len(data) < _HEAD.size + n:
        raise PrecompiledIntegrityError(file, "the graph's description is cut short (truncated?)")
    text, artifact = bytes(data[_HEAD.size:_HEAD.size + n]), bytes(data[_HEAD.size + n:])
    try:
        doc = json.loads(text)
        recorded_mac = doc.pop("hmac_sha256")
        body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        record = GraphRecord.from_json(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PrecompiledIntegrityError(file, f"the graph's description is damaged ({type(exc).__name__})") from None
    if key is not None and not verify(key, recorded_mac, MAGIC, body, artifact):
        raise PrecompiledIntegrityError(
            file, "its HMAC does not verify under TORCH_NEURONX_CACHE_HMAC_KEY (written without the key, with another "
            "key, or altered)", "precompile it again with this key, or load it with the key it was written with",
        )
    if len(artifact) != record.artifact_size or hashlib.sha256(artifact).hexdigest() != record.artifact_sha256:
        raise PrecompiledIntegrityError(file, f"the artifact of graph {record.graph_name!r} does not match its checksum (truncated or altered)")
    check_versions(record.versions, file=file, what=f"graph {record.graph_name!r}")
    return record, artifact


def check_versions(recorded: Mapping[str, str], *, file: str, what: str) -> None:
    """Raise :class:`PrecompiledTargetError` (another CPU) or :class:`PrecompiledVersionError`
    (another torch, reference or runtime) when ``recorded`` differs from this process."""
    here = tool_versions()
    if recorded.get("host") != here["host"]:
        raise PrecompiledTargetError(
            file, f"{what} was built for CPU {recorded.get('host')!r}, this process runs on {here['host']!r}",
            "precompile it on this kind of machine (or set NEURON_REFERENCE_HOST_IDENTITY where the CPUs run each other's code)",
        )
    differ = [f"{name} {recorded.get(name)!r} (here {here[name]!r})" for name in MUST_MATCH if recorded.get(name) != here[name]]
    if differ:
        raise PrecompiledVersionError(file, f"{what} was built with " + ", ".join(differ))


class _Run:
    """The call path of a loaded graph: the runtime call, ``None`` outputs put back, the written
    inputs' new values copied into the caller's tensors; returns the user outputs."""

    __slots__ = ("_loaded", "_nones", "_mutated", "graph_name")

    def __init__(self, loaded: Callable, record: GraphRecord) -> None:
        self._loaded = loaded
        self._nones = record.nones
        self._mutated = record.mutated_inputs
        self.graph_name = record.graph_name

    def __call__(self, *args: torch.Tensor) -> list:
        METRICS.bump("compiled_runs")  # execution evidence: the compiled path ran
        outs = self._loaded(*args)
        if self._nones:
            outs = with_none_outputs(outs, self._nones)
        if self._mutated:
            with torch.no_grad():
                for i, new in zip(self._mutated, outs):
                    args[i].detach().copy_(new)
            return outs[len(self._mutated):]
        return outs


class NeuronSerializableCallable(SerializableCallable):
    """One compiled neuron graph that ``save_compiled_function`` can write and
    ``load_compiled_function`` can read back (see the module doc)."""

    def __init__(self, record: GraphRecord, artifact: bytes, loaded: Callable | None = None) -> None:
        self.record = record
        self._artifact = artifact
        if loaded is None:
            loaded = LoadedArtifact(
                artifact, graph_name=record.graph_name, input_specs=record.input_specs,
                output_specs=record.output_specs, resident=record.static_inputs, driver=record.driver,
            )
        self._call = _device.place(_Run(loaded, record), record.user_indices, graph_name=record.graph_name)

    @property
    def graph_name(self) -> str:
        return self.record.graph_name

    @classmethod
    def serialize_compile_artifacts(cls, fn: "NeuronSerializableCallable") -> bytes:
        return pack(fn.record, fn._artifact, hmac_key())

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "NeuronSerializableCallable":
        file = _LOADING.get()
        record, artifact = unpack(data, file=file, key=hmac_key())
        try:
            return cls(record, artifact)
        except NeuronBackendError as exc:  # the runtime refused the artifact
            raise PrecompiledIntegrityError(file, f"the runtime cannot load graph {record.graph_name!r} ({exc})") from None

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)
