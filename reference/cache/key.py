"""The compile-cache key: one function, used by every seam.

``create_cache_hash`` digests separate components (the StableHLO text, the compiler arguments, the
input tensor specs, the tool versions and, for collectives, the replica groups) and then digests
the named component digests together into 32 hex characters. Each component has one canonical
form:

- the HLO: source locations (``loc(...)`` annotations and ``#locN = loc(...)`` aliases) are
  removed, so debug metadata never splits the cache; everything else is hashed byte for byte.
  Locations are recognised as MLIR prints them: a text printed with debug info ends with the
  module's location or the alias table, so only the last 4 kB decide whether to strip;
- the compiler arguments: parsed into ``(flag, value)`` pairs in order (``--lnc 2``,
  ``--lnc=2`` and ``"--lnc   2"`` are one pair; ``-O3`` and ``--optlevel 3`` are one pair), so
  whitespace and token splitting do not matter while a value never detaches from its flag. Order
  is kept: the compiler lets the last occurrence of a flag win, so two orders can mean two things;
- the input specs: dtype, shape and stride of each input, in order;
- the tool versions: torch, torch-mlir, the compiler, the runtime that loads the artifact (an
  artifact is only known to load in the runtime it was built beside), the reference, and the host
  CPU the artifact is built for;
- the replica groups (optional): the mesh a graph's collectives run over, as lists of ranks.

Nothing about the process enters the key: not the working directory, the install path, the hash
seed, the time, the process id, the rank or the device index.

Hook for SPMD: a collective's group name is an opaque, rank-dependent string in the HLO. A caller
that knows the mesh passes ``hlo_normalizer`` (a pure function rewriting the text, e.g. group name
to mesh position) and ``replica_groups`` (the full mesh); both are ordinary key inputs, and the
breakdown shows them. The key function itself knows nothing about meshes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from reference.compiler.driver import CompilerConfig, compiler_version, host_identity, parse_compiler_args
from reference.core.versions import __version__

KEY_LENGTH = 32

#: Component names, in the order the breakdown lists them.
COMPONENTS = ("hlo_sha256", "compiler_args", "input_specs", "versions", "replica_groups")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


# ``#loc3 = loc("model.py":12:8)`` alias lines, and `` loc(...)`` trailing annotations with up to
# three levels of nested parentheses (``loc(callsite(... at fused[...]))``).
_LOC_ALIAS = re.compile(rb"^#loc[\w.$-]*\s*=\s*loc\(.*\)[ \t]*\r?\n?", re.MULTILINE)
_PAREN = rb"\((?:[^()\"]|\"(?:[^\"\\]|\\.)*\"|\((?:[^()\"]|\"(?:[^\"\\]|\\.)*\"|\((?:[^()\"]|\"(?:[^\"\\]|\\.)*\")*\))*\))*\)"
_LOC_USE = re.compile(rb" ?\bloc" + _PAREN)


def canonical_hlo(hlo: str | bytes) -> bytes:
    """The HLO bytes the key digests: the text without source locations."""
    data = hlo.encode() if isinstance(hlo, str) else bytes(hlo)
    if b"loc(" not in data:  # the lowering emits none; keep the common case a plain copy
        return data
    data = _LOC_ALIAS.sub(b"", data)
    return _LOC_USE.sub(b"", data)


_CHUNK = 1 << 18
_TAIL = 4096


def _printed_with_locations(tail: bytes) -> bool:
    """Whether MLIR printed this text with debug info.

    With debug info on, the printer gives every operation a location, the module included, and
    the module's own ``loc(...)`` (or the ``#loc`` alias table) closes the text. So the last few
    kilobytes tell, and the rest of a 10 MB text need not be searched.
    """
    return b"loc(" in tail


def hlo_digest(hlo: str | bytes) -> str:
    """sha256 of the HLO bytes the key digests (:func:`canonical_hlo` when the text carries
    locations), streamed in cache-sized chunks without a full-size copy of the text."""
    if isinstance(hlo, str):
        if _printed_with_locations(hlo[-_TAIL:].encode()):
            return _digest(canonical_hlo(hlo))
        h = hashlib.sha256()
        for i in range(0, len(hlo), _CHUNK):
            h.update(hlo[i : i + _CHUNK].encode())
        return h.hexdigest()
    data = bytes(hlo)
    if _printed_with_locations(data[-_TAIL:]):
        return _digest(canonical_hlo(data))
    return _digest(data)


def _spec_json(spec: Any) -> Any:
    if hasattr(spec, "as_json"):
        spec = spec.as_json()
    if isinstance(spec, Mapping):
        dtype, shape, stride = spec["dtype"], spec["shape"], spec.get("stride", ())
    else:
        dtype, shape, stride = spec
    return {"dtype": str(dtype).removeprefix("torch."), "shape": [int(d) for d in shape], "stride": [int(s) for s in stride]}


def _groups_json(groups: Any) -> Any:
    if groups is None:
        return None
    if isinstance(groups, Mapping):
        return {str(name): _groups_json(g) for name, g in sorted(groups.items(), key=lambda kv: str(kv[0]))}
    return [[int(r) for r in group] for group in groups]


def key_components(
    hlo: str | bytes,
    pairs: Iterable[tuple[str, str | None]],
    input_specs: Sequence[Any],
    versions: Mapping[str, str] | None = None,
    *,
    replica_groups: Any = None,
    hlo_normalizer: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """The canonical, human-readable components that the key digests (the HLO as its sha256);
    ``pairs``: the parsed compiler arguments (:attr:`CompilerConfig.pairs`)."""

    if hlo_normalizer is not None:
        text = hlo.decode() if isinstance(hlo, (bytes, bytearray)) else hlo
        hlo = hlo_normalizer(text)
    return {
        "hlo_sha256": hlo_digest(hlo),
        "compiler_args": [[flag, value] for flag, value in pairs],
        "input_specs": [_spec_json(s) for s in input_specs],
        "versions": {str(k): str(v) for k, v in sorted((versions if versions is not None else tool_versions()).items())},
        "replica_groups": _groups_json(replica_groups),
    }


def create_cache_hash(
    hlo: str | bytes,
    compiler_args: str | Iterable[str] | None,
    input_specs: Sequence[Any],
    versions: Mapping[str, str] | None = None,
    *,
    breakdown: bool = False,
    replica_groups: Any = None,
    hlo_normalizer: Callable[[str], str] | None = None,
) -> Any:
    """The cache key of one graph: 32 lowercase hex characters.

    ``hlo``: StableHLO text (or bytes). ``compiler_args``: the resolved argument list (string or
    list). ``input_specs``: :class:`~reference.lowering.stablehlo.TensorSpec` objects, mappings with
    ``dtype``/``shape``/``stride`` or ``(dtype, shape, stride)`` triples. ``versions``: the tool
    versions (default :func:`tool_versions`). ``replica_groups``: the collectives' mesh (a list of
    rank lists, or a mapping from group name to one), absent for graphs without collectives.
    ``hlo_normalizer``: a pure text rewrite applied before hashing (the SPMD hook).

    With ``breakdown=True`` returns ``(key, {"components": ..., "digests": ...})`` so a test or a
    user can see which component made two keys differ. Raises
    :class:`~reference.core.errors.CompilerArgumentError` for an argument list that does not parse.
    """
    return _key(hlo, parse_compiler_args(compiler_args), input_specs, versions, breakdown=breakdown,
                replica_groups=replica_groups, hlo_normalizer=hlo_normalizer)


def config_cache_hash(
    hlo: str | bytes,
    config: CompilerConfig | None,
    input_specs: Sequence[Any],
    *,
    breakdown: bool = False,
    replica_groups: Any = None,
    hlo_normalizer: Callable[[str], str] | None = None,
) -> Any:
    """:func:`create_cache_hash` of a compile's parsed configuration (the key the pipeline makes),
    equal to ``create_cache_hash(hlo, config.args, ...)``; ``None`` keys without arguments (the
    native seam's structure-and-shape key), like an empty list."""
    pairs = config.pairs if config is not None else ()
    return _key(hlo, pairs, input_specs, None, breakdown=breakdown, replica_groups=replica_groups,
                hlo_normalizer=hlo_normalizer)


def _key(hlo, pairs, input_specs, versions, *, breakdown: bool, replica_groups: Any, hlo_normalizer) -> Any:
    comps = key_components(
        hlo, pairs, input_specs, versions, replica_groups=replica_groups, hlo_normalizer=hlo_normalizer
    )
    per = {name: _digest(_canon(comps[name])) for name in COMPONENTS}
    key = _digest(_canon(per))[:KEY_LENGTH]
    return (key, {"components": comps, "digests": per}) if breakdown else key


def explain_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The component names whose digests differ between two breakdowns."""
    return [n for n in COMPONENTS if a["digests"].get(n) != b["digests"].get(n)]


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, str]:
    """Versions of everything that shapes an artifact."""
    import importlib.metadata as md

    import torch

    def _ver(dist: str) -> str:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return "unknown"

    return {
        "torch": torch.__version__,
        "torch_mlir": _ver("torch-mlir"),
        "compiler": compiler_version(),
        "runtime": _ver("iree-base-runtime"),
        "reference": __version__,
        "host": host_identity(),
    }
