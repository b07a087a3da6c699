"""The persistent HLO cache: a warm start skips lowering (AOT graph to StableHLO).

Keyed (:func:`create_hlo_cache_key`) on what the lowering reads and nothing else:

- the ATen FX graph after the passes: the generated code of the graph and of every nested graph
  module (comments dropped), the value of every constant it reads through ``get_attr``, and the
  node metadata a lowering consumes (``HLO_KEY_META``: the collectives' ``replica_groups``);
- the input specs (dtype, shape, stride);
- the identity of the FX pass pipeline that ran (``FXPassManager.uuid()``, or :data:`NO_PASSES`
  when the stage was switched off), so changing, reordering or dropping a pass invalidates its
  output. The seam records it on the ATen graph (``gm.meta[PASS_IDENTITY_META]``);
- the tool versions plus a fingerprint of the lowering code itself (passed in by the pipeline).

One JSON file per key under ``TORCH_NEURONX_HLO_CACHE_DIR`` (``<key>.json``: the StableHLO text,
its sha256, the input and output specs and the node count), published atomically
(:func:`reference.core.atomic.write_atomic`). A record whose text does not match its checksum is
ignored and replaced. A cache directory that cannot be written costs a warning, never the compile. The cache is off when
``TORCH_NEURONX_NEFF_DISABLE_CACHE`` is set (every compile then runs fresh, writing nothing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from typing import Any, Mapping, Sequence

import torch

from reference.cache.errors import CacheFallbackWarning
from reference.cache.key import KEY_LENGTH, tool_versions
from reference.core import env
from reference.core.atomic import write_atomic
from reference.core.specs import LoweredGraph, TensorSpec

log = logging.getLogger(__name__)

#: Node metadata that a lowering reads, and so enters the key.
HLO_KEY_META = ("replica_groups",)
RECORD_VERSION = 1
#: Where the seam records the identity of the pass pipeline that ran, on the ATen graph module.
PASS_IDENTITY_META = "fx_pass_identity"
#: The pipeline identity of a compile with the FX pass stage switched off.
NO_PASSES = "no-fx-passes"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor_digest(t: torch.Tensor) -> dict[str, Any]:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # AOT Autograd calls the backend inside its fake mode; a graph constant is a real tensor.
    with unset_fake_temporarily():
        t = t.detach().cpu()
        raw = t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
    return {"dtype": str(t.dtype), "shape": list(t.shape), "sha256": _digest(raw)}


def _get_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def graph_fingerprint(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """The parts of an ATen graph module that decide its lowering, in a canonical form."""
    code = {}
    for name, mod in gm.named_modules():
        if isinstance(mod, torch.fx.GraphModule):
            lines = [ln.rstrip() for ln in mod.code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            code[name or "<root>"] = "\n".join(lines)
    constants: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _get_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                constants[node.target] = _tensor_digest(value)
        for field in HLO_KEY_META:
            if field in node.meta:
                meta[f"{node.name}.{field}"] = repr(node.meta[field])
    return {"code": code, "constants": constants, "meta": meta}


def create_hlo_cache_key(
    gm: torch.fx.GraphModule,
    input_specs: Sequence[TensorSpec],
    pass_identity: str,
    versions: Mapping[str, str] | None = None,
    *,
    lowering: str = "",
) -> str:
    """The HLO-cache key of an ATen graph: 32 hex characters. ``lowering`` identifies the lowering
    code (the pipeline passes :func:`reference.lowering.stablehlo.lowering_fingerprint`)."""
    doc = {
        "graph": graph_fingerprint(gm),
        "input_specs": [s.as_json() if hasattr(s, "as_json") else s for s in input_specs],
        "passes": pass_identity,
        "versions": dict(sorted((versions if versions is not None else tool_versions()).items())),
        "lowering": lowering,
    }
    return _digest(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())[:KEY_LENGTH]


class HloCache:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def path(self, key: str) -> str:
        return os.path.join(self.root, f"{key}.json")

    def keys(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        return sorted(n[: -len(".json")] for n in os.listdir(self.root) if n.endswith(".json") and not n.startswith("."))

    def get(self, key: str) -> LoweredGraph | None:
        try:
            with open(self.path(key), encoding="utf-8") as fh:
                rec = json.load(fh)
            if rec.get("record_version") != RECORD_VERSION or rec.get("key") != key:
                raise ValueError("a record of another version or key")
            if _digest(rec["hlo"].encode()) != rec["hlo_sha256"]:
                raise ValueError("the text does not match its checksum")
            return LoweredGraph(
                hlo=rec["hlo"],
                input_specs=tuple(TensorSpec.from_json(s) for s in rec["input_specs"]),
                output_specs=tuple(TensorSpec.from_json(s) for s in rec["output_specs"]),
                node_count=int(rec["node_count"]),
                origins=tuple((int(line), str(what)) for line, what in rec.get("origins", ())),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("HLO cache record %s is not usable (%s); lowering again", key, exc)
            return None

    def put(self, key: str, lowered: LoweredGraph) -> bool:
        """Publish a record; on a directory that cannot be written, warn and return False."""
        rec = {
            "record_version": RECORD_VERSION,
            "key": key,
            "hlo": lowered.hlo,
            "hlo_sha256": _digest(lowered.hlo.encode()),
            "input_specs": [s.as_json() for s in lowered.input_specs],
            "output_specs": [s.as_json() for s in lowered.output_specs],
            "node_count": lowered.node_count,
            # which ATen op (node, source line) each line came from, so that a compile failure of
            # text served from here names the op as one of freshly lowered text does; written by
            # the process that lowered it (another process's paths when the cache is shared)
            "origins": [list(o) for o in lowered.origins],
        }
        try:
            os.makedirs(self.root, exist_ok=True)
            write_atomic(self.path(key), json.dumps(rec), fsync=True)
            return True
        except OSError as exc:
            msg = f"the HLO cache at {self.root} could not be written ({exc}); continuing without it"
            warnings.warn(msg, CacheFallbackWarning, stacklevel=2)
            log.warning(msg)
            return False


def hlo_cache() -> HloCache | None:
    """The configured HLO cache, or ``None`` when caching is disabled."""
    if env.get(env.NEFF_DISABLE_CACHE):
        return None
    return HloCache(env.get(env.HLO_CACHE_DIR))
