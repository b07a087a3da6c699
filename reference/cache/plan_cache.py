"""The plan cache: a warm start skips AOT Autograd's trace as well as lowering and compiling.

The HLO cache is keyed on the ATen graph, and only AOT Autograd's trace (functionalization and
decomposition of the Dynamo graph, about half of a warm first call) makes that graph. A *plan* is
what a cold start learned from that trace for one Dynamo graph, enough to serve the graph again
without it:

- ``hlo_key``: the HLO cache record that holds the graph's lowering;
- ``mutated_inputs``: the inputs the graph writes (the compiled program returns their new values
  first; they are copied back into the caller's tensors after each call, as AOT Autograd's epilogue
  would);
- ``n_outputs``: the user outputs that follow them; ``static_inputs``: the positions of parameters
  and buffers (kept resident by the runtime); ``aten_code``: the ATen graph's code, for the debug
  directory.

Plans are made only for graphs whose AOT Autograd wrapper would do nothing else at run time (an
inference graph, no output that aliases an input or an intermediate, data-only input mutations, no
tensor subclasses or effect tokens); see :mod:`reference.backends.inference_plan`.

Keyed (:func:`create_plan_key`) on the Dynamo graph as Dynamo made it (:func:`graph_digest`: its
code and constants, as the HLO cache fingerprints a graph), the example inputs (dtype, shape, stride, storage offset,
``requires_grad``, and which inputs share storage), a ``context`` the seam passes (grad mode,
autocast, the FX pass pipeline that runs on the graph, decompositions), and the tool versions. One JSON file per key under
``<TORCH_NEURONX_HLO_CACHE_DIR>/plans/``, published atomically; an unreadable or foreign record is
ignored (the graph is traced again and the record replaced). Off with
``TORCH_NEURONX_NEFF_DISABLE_CACHE``, like the other caches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch

from reference.cache.hlo_cache import HloCache, graph_fingerprint
from reference.cache.key import KEY_LENGTH, tool_versions
from reference.cache.records import DICT, INT, STR, valid_key, warn_rejected
from reference.core.build_settings import CacheRoots

log = logging.getLogger(__name__)

RECORD_VERSION = 1


@dataclass(frozen=True)
class InferencePlan:
    hlo_key: str
    n_inputs: int
    mutated_inputs: tuple[int, ...]
    n_outputs: int
    static_inputs: tuple[int, ...]
    aten_code: str

    def as_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["mutated_inputs"] = list(self.mutated_inputs)
        doc["static_inputs"] = list(self.static_inputs)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "InferencePlan":
        if not valid_key(doc["hlo_key"]):
            raise ValueError("hlo_key is not a cache key")
        plan = cls(
            hlo_key=str(doc["hlo_key"]),
            n_inputs=int(doc["n_inputs"]),
            mutated_inputs=tuple(int(i) for i in doc["mutated_inputs"]),
            n_outputs=int(doc["n_outputs"]),
            static_inputs=tuple(int(i) for i in doc["static_inputs"]),
            aten_code=str(doc["aten_code"]),
        )
        if any(not 0 <= i < plan.n_inputs for i in plan.mutated_inputs + plan.static_inputs) or plan.n_outputs < 0:
            raise ValueError("an input position out of range")
        return plan


def input_signature(example_inputs: Sequence[Any]) -> list[Any] | None:
    """What the key reads of the example inputs, or ``None`` when one is not a plain tensor."""
    out: list[Any] = []
    storages: dict[int, int] = {}
    for i, t in enumerate(example_inputs):
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            return None
        try:
            storage = t.untyped_storage().data_ptr()
        except RuntimeError:  # a tensor without storage (a subclass dressed as a tensor)
            return None
        shares = storages.setdefault(storage, i) if t.numel() else i
        out.append([str(t.dtype), list(t.shape), list(t.stride()), int(t.storage_offset()), bool(t.requires_grad),
                    t.device.type, shares])
    return out


def graph_digest(gm: torch.fx.GraphModule) -> str:
    """A digest of a Dynamo graph as Dynamo made it (code and constants, as the HLO cache
    fingerprints a graph). Taken before the FX passes: the key adds the pass pipeline's identity.
    A graph that travelled through pickle (the precompile cache) is re-traced on load and its code
    comes back with other node names, so the precompile artifact carries the digest of the original."""
    return hashlib.sha256(json.dumps(graph_fingerprint(gm), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def create_plan_key(digest: str, signature: Sequence[Any], context: Mapping[str, Any],
                    versions: Mapping[str, str] | None = None) -> str:
    """The plan-cache key of a Dynamo graph (its :func:`graph_digest`): 32 hex characters."""
    doc = {
        "graph": digest,
        "inputs": list(signature),
        "context": dict(context),
        "versions": dict(sorted((versions if versions is not None else tool_versions()).items())),
        "record_version": RECORD_VERSION,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()[:KEY_LENGTH]


class PlanCache(HloCache):
    """One ``<key>.json`` per plan, laid out as the HLO cache's records (its ``path`` and ``keys``,
    and its reader: a damaged, foreign or unauthenticated record is absent, with one warning)."""

    WHAT = "plan cache record"
    KIND = "plan-record"
    CONSEQUENCE = "tracing the graph again"
    ROOT_MAY_BE_A_LINK = False  # ``plans`` is made by the cache inside the HLO cache's folder

    def get(self, key: str) -> InferencePlan | None:
        rec = self._read(key, {"record_version": INT, "key": STR, "plan": DICT}, {})
        if rec is None:
            return None
        why = None
        if not valid_key(rec["plan"].get("hlo_key")):
            why = "field 'plan.hlo_key' is not a cache key (32 lowercase hex characters)"
        else:
            try:
                return InferencePlan.from_json(rec["plan"])
            except Exception as exc:  # noqa: BLE001 - any malformed field means the record is absent
                why = f"its plan is malformed ({type(exc).__name__})"
        if why:
            warn_rejected(self.WHAT, self.path(key), why, f"it is treated as absent ({self.CONSEQUENCE})")
            return None

    def put(self, key: str, plan: InferencePlan) -> bool:
        """Publish a record; on a directory that cannot be written, warn and return False."""
        return self._write(key, {"record_version": RECORD_VERSION, "key": key, "plan": plan.as_json()})


def plan_cache(roots: CacheRoots) -> PlanCache | None:
    """The plan cache (beside the HLO cache records) under ``roots`` (as :func:`hlo_cache`), or
    ``None`` when caching is off."""
    if roots.disabled:
        return None
    return PlanCache(os.path.join(roots.folder("hlo"), "plans"), hmac_key=roots.hmac_key)
