"""The ops that have no lowering on this backend, computed from the installed tools.

Every ATen op that has a public function or method form is traced alone on a small float tensor with
the backend's decomposition table and lowered with torch-mlir; the ops whose lowering fails are the
list. The result depends only on the torch and torch-mlir versions and the decomposition table, so
it is memoized on disk under a fingerprint of those (:func:`memo_dir`); an upgrade changes the
fingerprint and recomputes it. Nothing is computed at import: :func:`no_lowering_ops` runs on
first use.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import warnings
from typing import Any, Iterable

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from reference.cache.key import tool_versions
from reference.core.errors import LoweringError
from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo

log = logging.getLogger(__name__)

_PROBE_VERSION = "1"  # bump when the probe below changes what it decides


def _candidate_names() -> list[str]:
    """ATen op names that a user reaches as ``torch.<name>`` or ``Tensor.<name>``, functional only."""
    names = []
    for name in dir(torch.ops.aten):
        if name.startswith("_") or name.endswith("_"):
            continue  # private ops; in-place variants (AOT Autograd functionalizes them)
        if callable(getattr(torch, name, None)) or callable(getattr(torch.Tensor, name, None)):
            names.append(name)
    return sorted(names)


def _fingerprint(decomps: dict) -> str:
    v = tool_versions()
    h = hashlib.sha256()
    h.update(json.dumps([_PROBE_VERSION, v.get("torch"), v.get("torch_mlir")]).encode())
    h.update("\n".join(sorted(str(k) for k in decomps)).encode())
    return h.hexdigest()[:24]


def _probe(names: Iterable[str], decomps: dict) -> dict[str, str]:
    """Trace each op alone and lower it; returns ``{name: reason}`` for the ops that fail to lower."""
    x = torch.randn(4, 4)
    failing: dict[str, str] = {}
    for name in names:
        fn = getattr(torch, name, None)
        if not callable(fn):
            method = getattr(torch.Tensor, name)
            fn = lambda t, *a, _m=method: _m(t, *a)  # noqa: E731
        gm = None
        for extra in ((), (x,)):  # unary, then binary
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if not _returns_tensors(fn(x, *extra)):
                        break  # a metadata query (is_pinned, result_type, ...): Dynamo answers it
                    gm = make_fx(lambda t, *a: fn(t, *a), decomposition_table=decomps)(x, *extra)
                break
            except Exception:
                continue
        if gm is None:
            continue  # no simple form to probe: assume it lowers, the lowering will say otherwise
        try:
            lower_to_stablehlo(gm, graph_name=f"probe_{name}")
        except LoweringError as exc:
            # Only an ATen op that fails to legalize condemns the op; a failure on a constant says
            # the probe's call form was odd (e.g. the one-argument form of where), not the op.
            aten = [op for op in exc.ops if op.startswith("torch.aten.")]
            if aten:
                failing[name] = "torch-mlir has no StableHLO lowering for " + ", ".join(aten)
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run says nothing about the op
            log.debug("probe of %s did not run: %s", name, exc)
    return failing


def _returns_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)) and value:
        return all(isinstance(v, torch.Tensor) for v in value)
    return False


def memo_dir() -> str:
    """Where the computed list is memoized: shared by every process of this machine and user, since
    the file name is a fingerprint of everything the list depends on."""
    return os.path.join(tempfile.gettempdir(), f"neuron_reference_op_support-{os.getuid()}")


@functools.lru_cache(maxsize=1)
def no_lowering_ops() -> dict[str, str]:
    """``{op name: reason}`` for every op with no lowering, from the installed tools (memoized)."""
    decomps = decomposition_table()
    fp = _fingerprint(decomps)
    path = os.path.join(memo_dir(), f"no_lowering-{fp}.json")
    try:
        with open(path, encoding="utf-8") as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        pass
    result = _probe(_candidate_names(), decomps)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:  # the memo is an optimization; the list itself is still right
        log.warning("could not memoize the no-lowering op list at %s: %s", path, exc)
    return result
