"""One compiled graph as bytes, and the call that runs it: what a process needs that runs
precompiled graphs and compiles nothing.

A serialized graph (:func:`pack`) is a fixed header, a JSON document (:class:`GraphRecord`: the
graph's inference plan, its input and output specs, the runtime driver, the versions it was built
with, an HMAC under ``TORCH_NEURONX_CACHE_HMAC_KEY`` when one was set) and the artifact;
:func:`unpack` checks all of it (format, checksum, HMAC, versions, host CPU) and runs nothing.
:func:`graph_call` turns a record and its artifact into the callable that runs it.

Used by both ways a precompiled graph travels: inside torch's own format
(:class:`~reference.backends.serializable.NeuronSerializableCallable`, under ``aot_compile`` and
``load_compiled_function``) and in :mod:`reference.backends.precompiled_file`'s own loader. This
module imports neither Dynamo nor the compile side, torch-mlir or the IREE compiler.
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
from reference.core.errors import (
    NeuronBackendError, PrecompiledFileError, PrecompiledInputError, PrecompiledIntegrityError, PrecompiledTargetError,
    PrecompiledVersionError, PrecompileError,
)
from reference.core.metrics import METRICS
from reference.core.specs import TensorSpec, with_none_outputs
from reference.runtime import LoadedArtifact

#: The first bytes of a serialized compiled graph, then the format's version.
MAGIC = b"NEURONPG"
FORMAT = 1
#: The versions a loaded graph must share with the process that built it: the program it runs was
#: made for this torch (the bytecode and guards around it), this reference (the plan's meaning),
#: this runtime (the artifact's format) and this CPU (the artifact's code).
MUST_MATCH = ("torch", "reference", "runtime", "host")
_HEAD = struct.Struct(">8sII")  # magic, format, length of the JSON document


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


__all__ = ["GraphRecord", "MAGIC", "FORMAT", "MUST_MATCH", "loading", "current_file", "hmac_key", "pack", "unpack",
           "check_versions", "graph_call"]


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


def current_file() -> str:
    """The file :func:`loading` names now (for the errors of a deserializer handed bytes)."""
    return _LOADING.get()


def graph_call(record: GraphRecord, artifact: bytes, loaded: Callable | None = None) -> Callable:
    """The callable that runs one compiled graph: ``loaded`` (the artifact already in the runtime,
    as the compile side has it) or the artifact loaded now; raises what the runtime raises."""
    if loaded is None:
        loaded = LoadedArtifact(
            artifact, graph_name=record.graph_name, input_specs=record.input_specs,
            output_specs=record.output_specs, resident=record.static_inputs, driver=record.driver,
        )
    return _device.place(_Run(loaded, record), record.user_indices, graph_name=record.graph_name)

