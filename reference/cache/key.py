"""The compile-cache key: one function, used by every seam.

``create_cache_hash`` digests four components separately (the StableHLO bytes, the compiler
arguments, the input tensor specs, the tool versions) and then digests the named component digests
together. Each component is serialized canonically (JSON with sorted keys, flags parsed into
``(flag, value)`` pairs), so whitespace and token splitting in an argument list do not matter, while
a flag never loses its value to a neighbour. Nothing about the process enters the key: not the
working directory, the install path, the hash seed, the time, the rank or the device index.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Iterable, Mapping, Sequence

KEY_LENGTH = 32


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _spec_json(spec: Any) -> Any:
    if hasattr(spec, "as_json"):
        return spec.as_json()
    if isinstance(spec, Mapping):
        return {"dtype": str(spec["dtype"]), "shape": list(spec["shape"]), "stride": list(spec.get("stride", ()))}
    dtype, shape, stride = spec
    return {"dtype": str(dtype), "shape": list(shape), "stride": list(stride)}


def key_components(
    hlo: str | bytes,
    compiler_args: str | Iterable[str] | None,
    input_specs: Sequence[Any],
    versions: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The canonical, human-readable components that the key digests."""
    from reference.compile.compiler_driver import parse_compiler_args

    hlo_bytes = hlo.encode() if isinstance(hlo, str) else bytes(hlo)
    pairs = parse_compiler_args(compiler_args)
    return {
        "hlo_sha256": _digest(hlo_bytes),
        "compiler_args": [[flag, value] for flag, value in pairs],
        "input_specs": [_spec_json(s) for s in input_specs],
        "versions": dict(sorted((versions if versions is not None else tool_versions()).items())),
    }


def create_cache_hash(
    hlo: str | bytes,
    compiler_args: str | Iterable[str] | None,
    input_specs: Sequence[Any],
    versions: Mapping[str, str] | None = None,
    *,
    breakdown: bool = False,
) -> Any:
    """Return the 32-hex-character key, or ``(key, per_component_digests)`` with ``breakdown``."""
    comps = key_components(hlo, compiler_args, input_specs, versions)
    per = {name: _digest(_canon(value)) for name, value in comps.items()}
    key = _digest(_canon(per))[:KEY_LENGTH]
    return (key, {"components": comps, "digests": per}) if breakdown else key


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, str]:
    """Versions of everything that shapes an artifact."""
    import importlib.metadata as md

    import torch

    from reference.compile.compiler_driver import compiler_version, host_identity

    def _ver(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return "unknown"

    import reference

    return {
        "torch": torch.__version__,
        "torch_mlir": _ver("torch-mlir"),
        "compiler": compiler_version(),
        "reference": reference.__version__,
        "host": host_identity(),
    }
