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
from typing import Any, Mapping, Sequence

import torch

from reference.cache.auth import record_verifies, sign_record
from reference.cache.errors import CacheFallbackWarning
from reference.cache.key import KEY_LENGTH, tool_versions
from reference.cache.records import INT, LIST, STR, read_record, valid_key, warn_rejected
from reference.core.diagnostics import warn_user
from reference.core.build_settings import CacheRoots
from reference.core.atomic import write_atomic
from reference.core.specs import LoweredGraph, TensorSpec
from reference.core.torch_compat import unset_fake_temporarily

log = logging.getLogger(__name__)

#: Node metadata that a lowering reads, and so enters the key.
HLO_KEY_META = ("replica_groups",)
RECORD_VERSION = 1
_SCHEMA = {"record_version": INT, "key": STR, "hlo": STR, "hlo_sha256": STR, "input_specs": LIST, "output_specs": LIST,
           "node_count": INT}
_OPTIONAL = {"origins": LIST}
#: Where the seam records the identity of the pass pipeline that ran, on the ATen graph module.
PASS_IDENTITY_META = "fx_pass_identity"
#: The pipeline identity of a compile with the FX pass stage switched off.
NO_PASSES = "no-fx-passes"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor_digest(t: torch.Tensor) -> dict[str, Any]:
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
    """One JSON record per key under ``root``. Subclasses name their records (``WHAT``), say what a
    miss costs (``CONSEQUENCE``) and sign under their own ``KIND``."""

    WHAT = "HLO cache record"
    KIND = "hlo-record"
    CONSEQUENCE = "lowering the graph again"

    def __init__(self, root: str, *, hmac_key: bytes | None | object = None) -> None:
        self.root = os.path.abspath(root)
        #: records are signed and checked under this key (the factories pass the configured one)
        self.hmac_key = hmac_key

    def path(self, key: str) -> str:
        if not valid_key(key):  # a key becomes a file name: never let one leave the folder
            raise ValueError(f"{key!r} is not a cache key (32 lowercase hex characters)")
        return os.path.join(self.root, f"{key}.json")

    def keys(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        return sorted(n[: -len(".json")] for n in os.listdir(self.root) if n.endswith(".json") and not n.startswith("."))

    #: Whether the folder may be a symbolic link. The HLO cache's folder is the user's (checked by
    #: :func:`~reference.core.folders.trusted_folder`, links to a folder of one's own allowed); a
    #: folder the cache makes for itself inside it (the plans) is never followed.
    ROOT_MAY_BE_A_LINK = True

    def _usable_root(self) -> bool:
        """False (with one warning) when the folder is a symbolic link it may not be: a link
        planted where the cache creates its own folder would redirect every record."""
        if not self.ROOT_MAY_BE_A_LINK and os.path.islink(self.root):
            warn_rejected(f"{self.WHAT.rsplit(' ', 1)[0]} folder", self.root, "it is a symbolic link",
                          "the cache is not used")
            return False
        return True

    def _read(self, key: str, schema, optional) -> dict[str, Any] | None:
        """The validated, authenticated record of ``key``, or ``None`` (one warning if damaged)."""
        if not self._usable_root():
            return None
        path = self.path(key)
        consequence = f"it is treated as absent ({self.CONSEQUENCE})"
        rec = read_record(path, self.WHAT, schema, optional, consequence=consequence)
        if rec is None:
            return None
        why = None
        if rec["record_version"] != RECORD_VERSION or rec["key"] != key:
            why = "it is a record of another version or key"
        elif self.hmac_key is not None and not record_verifies(self.hmac_key, self.KIND, rec):
            why = "it does not carry a valid HMAC under TORCH_NEURONX_CACHE_HMAC_KEY"
        if why:
            warn_rejected(self.WHAT, path, why, consequence)
            return None
        return rec

    def _write(self, key: str, rec: dict[str, Any]) -> bool:
        if not self._usable_root():
            return False
        sign_record(self.hmac_key, self.KIND, rec)
        try:
            os.makedirs(self.root, exist_ok=True)
            write_atomic(self.path(key), json.dumps(rec), fsync=True)
            return True
        except OSError as exc:
            msg = f"the {self.WHAT.rsplit(' ', 1)[0]} at {self.root} could not be written ({exc}); continuing without it"
            warn_user(msg, CacheFallbackWarning)
            return False

    def get(self, key: str) -> LoweredGraph | None:
        rec = self._read(key, _SCHEMA, _OPTIONAL)
        if rec is None:
            return None
        path = self.path(key)
        if _digest(rec["hlo"].encode()) != rec["hlo_sha256"]:
            warn_rejected(self.WHAT, path, "the text does not match its checksum",
                          f"it is treated as absent ({self.CONSEQUENCE})")
            return None
        try:
            return LoweredGraph(
                hlo=rec["hlo"],
                input_specs=tuple(TensorSpec.from_json(s) for s in rec["input_specs"]),
                output_specs=tuple(TensorSpec.from_json(s) for s in rec["output_specs"]),
                node_count=rec["node_count"],
                origins=tuple((int(line), str(what)) for line, what in rec.get("origins") or ()),
            )
        except Exception as exc:  # noqa: BLE001 - any malformed spec means the record is absent
            warn_rejected(self.WHAT, path, f"a field does not hold what it should ({type(exc).__name__})",
                          f"it is treated as absent ({self.CONSEQUENCE})")
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
        return self._write(key, rec)


def hlo_cache(roots: CacheRoots) -> HloCache | None:
    """The HLO cache under ``roots`` (a compile request's; a tool or test outside a compile passes
    ``CacheRoots.from_env()``), or ``None`` when caching is disabled."""
    if roots.disabled:
        return None
    return HloCache(roots.folder("hlo"), hmac_key=roots.hmac_key)
