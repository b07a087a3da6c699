"""Precompiled functions in one file: compile once, start a serving process from the file.

``reference.precompile(fn_or_module, example_inputs, path)`` compiles ``fn_or_module`` with
``torch.compile(..., backend="neuron", fullgraph=True).aot_compile`` for each set of example
inputs and writes the results into one file; ``reference.load_precompiled(path)`` gives back a
:class:`PrecompiledFunction` that runs them with no Dynamo trace, no AOT Autograd, no lowering and
no compiler (it imports neither torch-mlir nor the IREE compiler). Each compiled variant keeps
Dynamo's guards; a call goes to the first variant whose guards accept its inputs, and a call no
variant accepts raises :class:`~reference.core.errors.PrecompiledInputError`.

For a module, the file holds the compiled ``forward`` and not the weights: load it with the
module (``load_precompiled(path, module=model)``), whose parameters and buffers the compiled
graph reads at each call, as it would under ``torch.compile``.

The file is a fixed header, a JSON description (format, versions, host CPU, kind, one size and
sha256 per blob, and an HMAC under ``TORCH_NEURONX_CACHE_HMAC_KEY`` when it was set), then each
variant as torch's ``AOTCompiledFunction`` serializes it, then each variant's direct form where it
has one (:mod:`reference.backends.precompiled_direct`: Dynamo's generated code, the compiled graph's
bytes and the reference's own guards). A loaded file runs a call in a variant's direct form when
its guards accept it, so a serving process imports no Dynamo; any other call goes to torch's form
of the variants (Dynamo then imported once), whose guards decide as they always did. torch's part is a pickle, and unpickling
runs code, so :func:`load_precompiled` checks everything it can before any of it is unpickled:
the header, the versions (torch, reference, IREE runtime) and the host CPU, the checksums, and,
with the key set, the HMAC; a file written without the key is refused while the key is set. Each
failure is a :class:`~reference.core.errors.PrecompiledFileError` subclass naming the
file and the reason. Without a key the checksums catch damage, not intent: load only files you
would run as code (docs/caching.md, "Precompiled functions").
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from reference.backends import precompiled_direct
from reference.backends.graph_record import check_versions, graph_call, hmac_key, loading, unpack
from reference.cache.auth import sign, verify
from reference.cache.key import tool_versions
from reference.core.atomic import write_atomic
from reference.core.errors import (
    BackendOptionError, NeuronBackendError, PrecompiledFileError, PrecompiledInputError, PrecompiledIntegrityError,
    PrecompiledVersionError,
)

__all__ = [
    "PrecompiledFunction", "Variant", "CompiledVariant", "precompile", "load_precompiled", "compile_for_aot",
    "aot_compile_variant", "write_precompiled", "call_module", "FILE_MAGIC", "FILE_FORMAT",
]

FILE_MAGIC = b"NEURONPF"
FILE_FORMAT = 2
#: The formats this reference reads (1: torch's form of each variant only).
READS_FORMATS = (1, 2)
_HEAD = struct.Struct(">8sII")  # magic, format, length of the JSON description
#: The largest description read: a file whose header claims more is not one of ours.
_MAX_DESCRIPTION = 1 << 20


@dataclass(frozen=True)
class _Description:
    kind: str  # "function" or "module"
    versions: dict[str, str]
    sizes: tuple[int, ...]  # every blob: torch's form of each variant, then the direct forms' code and graphs
    sha256: tuple[str, ...]
    backend: str
    variants: int = -1  # how many of the blobs are torch's forms (format 1: all of them)
    direct: tuple = ()  # per variant: its direct form's description (with the blob indices) or None

    def __post_init__(self) -> None:
        if self.variants < 0:
            object.__setattr__(self, "variants", len(self.sizes))
        if not self.direct:
            object.__setattr__(self, "direct", (None,) * self.variants)

    def body(self) -> bytes:
        doc = {"kind": self.kind, "versions": self.versions, "sizes": list(self.sizes), "sha256": list(self.sha256),
               "backend": self.backend}
        if self.variants != len(self.sizes) or any(d is not None for d in self.direct):
            doc.update(variants=self.variants, direct=list(self.direct))
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class CompiledVariant:
    """One compiled variant on the compile side: torch's ``AOTCompiledFunction`` and the inputs it
    was compiled for (the module first, for a module), from which its direct form is made."""

    function: Any
    args: tuple
    kwargs: dict


def _variants(example_inputs: Any) -> list[tuple[tuple, dict]]:
    """``example_inputs`` as a list of ``(args, kwargs)``: a tuple of arguments is one variant, a
    list of such tuples (or of ``(args, kwargs)`` pairs given as :class:`Variant`) several."""
    if isinstance(example_inputs, tuple):
        return [(example_inputs, {})]
    if isinstance(example_inputs, list) and example_inputs and all(isinstance(v, (tuple, Variant)) for v in example_inputs):
        return [(v.args, dict(v.kwargs)) if isinstance(v, Variant) else (v, {}) for v in example_inputs]
    raise BackendOptionError(
        "example_inputs must be a tuple of arguments (one compiled variant) or a non-empty list of such tuples "
        f"(one variant each), got {type(example_inputs).__name__}"
    )


@dataclass(frozen=True)
class Variant:
    """One set of example inputs with keyword arguments: ``Variant((x,), {"mask": m})``."""

    args: tuple = ()
    kwargs: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", dict(self.kwargs or {}))


def precompile(
    fn_or_module: Callable | torch.nn.Module, example_inputs: Any, path: str | os.PathLike, *,
    options: dict[str, Any] | None = None, backend: str = "neuron",
) -> "PrecompiledFunction":
    """Compile ``fn_or_module`` for each set of ``example_inputs`` (a tuple of arguments, or a list
    of tuples or :class:`Variant`) and write the compiled variants to ``path`` (atomically).

    Compiles with ``torch.compile(fn, backend=backend, fullgraph=True, options=options)`` and
    ``aot_compile`` under the current compiler-argument scope and environment. Returns the
    compiled function, as :func:`load_precompiled` would give it back. Raises
    :class:`~reference.core.errors.PrecompileError` for a function that is not one
    inference graph, and what ``torch.compile`` raises for one that does not trace (a graph break).
    """
    module = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
    compiled = compile_for_aot(fn_or_module, options=options, backend=backend)
    functions = [aot_compile_variant(compiled, args, kwargs, module=module) for args, kwargs in _variants(example_inputs)]
    return write_precompiled(path, functions, module=module, backend=backend)


def compile_for_aot(fn_or_module: Callable | torch.nn.Module, *, options: dict[str, Any] | None = None,
                    backend: str = "neuron") -> Callable:
    """``torch.compile`` of what :func:`precompile` compiles: the function, or for a module
    :func:`call_module` (the module then an input), ``fullgraph=True``, static shapes."""
    target = call_module if isinstance(fn_or_module, torch.nn.Module) else fn_or_module
    return torch.compile(target, backend=backend, fullgraph=True, options=options, dynamic=False)


def aot_compile_variant(compiled: Callable, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
                        module: torch.nn.Module | None = None) -> CompiledVariant:
    """One compiled variant: ``compiled.aot_compile`` of ``args``/``kwargs`` (preceded by
    ``module`` for a module), under the scope and environment of the call."""
    full = (module, *args) if module is not None else tuple(args)
    kwargs = dict(kwargs or {})
    return CompiledVariant(compiled.aot_compile((full, kwargs)), full, kwargs)


def _direct_form(variant: CompiledVariant, key: bytes | None) -> tuple[dict, bytes, bytes] | None:
    """The direct form of ``variant`` (description, code, graph bytes), or ``None`` when it needs
    Dynamo to run (a warning says why: the file then loads through torch's form only)."""
    import warnings

    # The compile side's imports (Dynamo through torch_compat and serializable) stay in the functions
    # that write a file: this module is also what a serving process loads, which imports no Dynamo.
    from reference.backends.graph_record import pack
    from reference.backends.serializable import NeuronSerializableCallable
    from reference.core.torch_compat import aot_runtime_parts

    parts = aot_runtime_parts(variant.function)
    try:
        if not isinstance(parts.compiled_fn, NeuronSerializableCallable):
            raise precompiled_direct.NotDirect(f"its compiled graph is a {type(parts.compiled_fn).__name__}")
        doc, code = precompiled_direct.describe(parts, variant.args, variant.kwargs)
    except precompiled_direct.NotDirect as exc:
        warnings.warn(f"precompile: this variant will load through torch's loader, which imports Dynamo: {exc}",
                      stacklevel=3)
        return None
    return doc, code, pack(parts.compiled_fn.record, parts.compiled_fn._artifact, key)


def write_precompiled(path: str | os.PathLike, variants: Sequence[CompiledVariant], *, module: torch.nn.Module | None,
                      backend: str = "neuron") -> "PrecompiledFunction":
    """Write compiled variants (:func:`aot_compile_variant`) to ``path`` as one file, atomically,
    signed when ``TORCH_NEURONX_CACHE_HMAC_KEY`` is set; returns them as one callable."""
    from reference.core.torch_compat import aot_compiled_function_type

    path = os.fspath(path)
    aot_type = aot_compiled_function_type()
    key = hmac_key()
    functions = [v.function for v in variants]
    blobs = [aot_type.serialize(f).serialized_data for f in functions]
    direct = []
    for variant in variants:
        form = _direct_form(variant, key)
        if form is None:
            direct.append(None)
            continue
        doc, code, graph = form
        doc = {**doc, "code": len(blobs), "graph": len(blobs) + 1}
        blobs += [code, graph]
        direct.append(doc)
    desc = _Description(
        kind="module" if module is not None else "function", versions=dict(tool_versions()),
        sizes=tuple(len(b) for b in blobs), sha256=tuple(hashlib.sha256(b).hexdigest() for b in blobs), backend=backend,
        variants=len(functions), direct=tuple(direct),
    )
    body = desc.body()
    doc = json.loads(body)
    doc["hmac_sha256"] = sign(key, FILE_MAGIC, body, *blobs) if key is not None else None
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    write_atomic(path, _HEAD.pack(FILE_MAGIC, FILE_FORMAT, len(text)) + text + b"".join(blobs))
    return PrecompiledFunction(path, functions, module=module, kind=desc.kind)


def call_module(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """What is compiled for a module: the module is an input like the others, so the compiled
    graph reads its parameters and buffers at each call (from the module it is loaded with) and
    the file holds no weights; its guards check the module's structure, not its identity."""
    return module(*args, **kwargs)


def _read_description(path: str, data: bytes, key: bytes | None) -> tuple[_Description, list[bytes]]:
    if len(data) < _HEAD.size:
        raise PrecompiledIntegrityError(path, "too short to be a precompiled file (truncated?)")
    magic, fmt, n = _HEAD.unpack_from(data)
    if magic != FILE_MAGIC:
        raise PrecompiledIntegrityError(path, "not a precompiled neuron file (its header is not reference.precompile's)",
                                        "pass a file written by reference.precompile")
    if fmt not in READS_FORMATS:
        raise PrecompiledVersionError(path, f"written in format {fmt}, this reference reads formats "
                                      f"{', '.join(map(str, READS_FORMATS))}")
    if n > _MAX_DESCRIPTION or len(data) < _HEAD.size + n:
        raise PrecompiledIntegrityError(path, "its description is cut short (truncated?)")
    try:
        doc = json.loads(data[_HEAD.size:_HEAD.size + n])
        recorded_mac = doc.pop("hmac_sha256")
        sizes = tuple(int(s) for s in doc["sizes"])
        variants = int(doc.get("variants", len(sizes)))
        direct = tuple(doc.get("direct") or (None,) * variants)
        desc = _Description(
            kind=str(doc["kind"]), versions={str(k): str(v) for k, v in dict(doc["versions"]).items()},
            sizes=sizes, sha256=tuple(str(s) for s in doc["sha256"]), backend=str(doc["backend"]),
            variants=variants, direct=direct,
        )
        for d in desc.direct:
            if d is not None and not (variants <= int(d["code"]) < len(sizes) and variants <= int(d["graph"]) < len(sizes)):
                raise ValueError("a direct form's blob is out of range")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PrecompiledIntegrityError(path, f"its description is damaged ({type(exc).__name__})") from None
    if (desc.kind not in ("function", "module") or len(desc.sizes) != len(desc.sha256) or not desc.sizes
            or min(desc.sizes) < 0 or not 0 < desc.variants <= len(desc.sizes) or len(desc.direct) != desc.variants):
        raise PrecompiledIntegrityError(path, "its description is damaged (kind or variants)")
    rest = data[_HEAD.size + n:]
    if len(rest) != sum(desc.sizes):
        raise PrecompiledIntegrityError(path, f"it holds {len(rest)} bytes of compiled variants, its description says "
                                        f"{sum(desc.sizes)} (truncated or altered)")
    blobs, at = [], 0
    for size in desc.sizes:
        blobs.append(bytes(rest[at:at + size]))
        at += size
    # The HMAC first (with a key), then the checksums: nothing of the variants is unpickled before both.
    if key is not None and not verify(key, recorded_mac, FILE_MAGIC, desc.body(), *blobs):
        raise PrecompiledIntegrityError(
            path, "its HMAC does not verify under TORCH_NEURONX_CACHE_HMAC_KEY (written without the key, with another "
            "key, or altered); nothing in it was unpickled", "precompile it again with this key",
        )
    for i, (blob, digest) in enumerate(zip(blobs, desc.sha256)):
        if hashlib.sha256(blob).hexdigest() != digest:
            raise PrecompiledIntegrityError(path, f"compiled variant {i} does not match its checksum (altered)")
    check_versions(desc.versions, file=path, what="it")
    return desc, blobs


def load_precompiled(path: str | os.PathLike, *, module: torch.nn.Module | None = None) -> "PrecompiledFunction":
    """The function :func:`precompile` wrote to ``path``, ready to run (``module``: the module it
    was compiled from, for a file made from a module).

    Checks the file before unpickling any of it (see the module doc) and raises a
    :class:`~reference.core.errors.PrecompiledFileError` subclass naming ``path``:
    :class:`~reference.core.errors.PrecompiledVersionError` (another torch, reference or
    runtime, or file format), :class:`~reference.core.errors.PrecompiledTargetError`
    (another CPU), :class:`~reference.core.errors.PrecompiledIntegrityError` (truncated,
    altered, not such a file, or, with ``TORCH_NEURONX_CACHE_HMAC_KEY`` set, not authenticated)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PrecompiledFileError(path, f"cannot be read ({exc.strerror or exc})", "check the path") from None
    desc, blobs = _read_description(path, data, hmac_key())
    if desc.kind == "module" and module is None:
        raise BackendOptionError(f"precompiled file {path} holds a module's forward: pass the module, "
                                 "load_precompiled(path, module=model)")
    if desc.kind == "function" and module is not None:
        raise BackendOptionError(f"precompiled file {path} holds a function, not a module's forward: call "
                                 "load_precompiled(path) without module=")
    direct = [None if d is None else _load_direct(path, i, d, blobs) for i, d in enumerate(desc.direct)]
    # torch's forms: now when a variant has no direct form here (a call may need them at once),
    # else on the first call no direct form accepts
    functions = _deserialize(path, blobs[:desc.variants]) if None in direct else None
    return PrecompiledFunction(path, functions, module=module, kind=desc.kind, direct=direct, blobs=blobs[:desc.variants])


def _load_direct(path: str, i: int, doc: dict, blobs: list[bytes]) -> "precompiled_direct.DirectVariant | None":
    """Variant ``i``'s direct form, loaded (its graph into the runtime), or ``None`` when this
    interpreter cannot run its code (another Python: torch's form then decides)."""
    if doc.get("python") != precompiled_direct.python_tag():
        return None
    record, artifact = unpack(blobs[int(doc["graph"])], file=path, key=hmac_key())
    try:
        graph = graph_call(record, artifact)
    except NeuronBackendError as exc:  # the runtime refused the artifact
        raise PrecompiledIntegrityError(path, f"the runtime cannot load graph {record.graph_name!r} ({exc})") from None
    try:
        return precompiled_direct.load(doc, blobs[int(doc["code"])], graph)
    except (ValueError, KeyError, TypeError, EOFError, ImportError) as exc:
        raise PrecompiledIntegrityError(path, f"compiled variant {i}'s direct form cannot be loaded ({type(exc).__name__}: {exc})") from None


def _deserialize(path: str, blobs: Sequence[bytes]) -> list:
    """torch's form of every variant, loaded by torch (imports Dynamo)."""
    from reference.core.torch_compat import aot_compiled_function_type

    aot_type = aot_compiled_function_type()
    functions = []
    with loading(path):
        for i, blob in enumerate(blobs):
            try:
                functions.append(aot_type.deserialize(blob))
            except PrecompiledFileError:
                raise
            except Exception as exc:  # noqa: BLE001 - torch could not rebuild what it wrote
                raise PrecompiledIntegrityError(path, f"torch could not load compiled variant {i} ({type(exc).__name__}: {exc})") from exc
    return functions


class PrecompiledFunction:
    """Compiled variants of one function (or one module's ``forward``), loaded from ``path``.

    A call runs the first variant whose direct form's guards accept the inputs (no Dynamo); when
    none does, the first variant whose Dynamo guards accept them (torch's form, loaded on first
    need); when none does either, :class:`~reference.core.errors.PrecompiledInputError` names the
    file and what the first variant's guards said."""

    def __init__(self, path: str, functions: Sequence[Any] | None, *, module: torch.nn.Module | None, kind: str,
                 direct: Sequence[Any] = (), blobs: Sequence[bytes] = ()) -> None:
        self.path = path
        self._module = module
        self.kind = kind
        self._direct = [d for d in direct if d is not None]
        self._blobs = list(blobs)
        self._functions: list | None = None
        if functions is not None:
            self._adopt(list(functions))

    def _adopt(self, functions: list) -> None:
        for f in functions:
            f.disable_guard_check()  # checked here, once per call, with a typed error
        self._functions = functions

    @property
    def variants(self) -> int:
        return len(self._functions) if self._functions is not None else len(self._blobs)

    @property
    def direct_variants(self) -> int:
        """How many variants run without Dynamo in this process."""
        return len(self._direct)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        full = (self._module, *args) if self._module is not None else args
        for d in self._direct:
            if d.accepts(full, kwargs):
                return d(*full, **kwargs)
        return self._through_torch(full, kwargs)

    def _through_torch(self, full: tuple, kwargs: dict) -> Any:
        from reference.core.torch_compat import aot_guard_failure

        if self._functions is None:
            self._adopt(_deserialize(self.path, self._blobs))
        first_failure = None
        for f in self._functions:
            failure = aot_guard_failure(f, full, kwargs)
            if failure is None:
                return f(*full, **kwargs)
            first_failure = first_failure or failure
        raise PrecompiledInputError(
            self.path, f"no compiled variant accepts these inputs ({first_failure})",
            "call it with inputs like the example inputs it was precompiled with, or precompile it with these too",
        )
