"""Run in a fresh process by the cache tests: compile and run one fixture through the adapter.

``python -m conformance._cache_child --impl SPEC --out FILE [--barrier PATH] fixture``

The cache environment comes from the parent (``impl.cache_env(root)``). With ``--barrier``, the
child builds the model and imports everything, writes ``PATH.ready.<pid>``, and waits for ``PATH``
to exist before the first call, so that racing processes reach the compile together.

Writes JSON: ``outputs`` (the flattened outputs as nested lists), ``compiler_invocations``,
``warnings`` (messages), and on failure ``error`` (``type``, ``types`` of its class hierarchy,
``message``); exits 0 on success, 3 on a compile or run error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings


def _flatten(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj.detach().to(torch.float64).tolist()]
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _flatten(item)]
    if isinstance(obj, dict):
        return [x for k in sorted(obj) for x in _flatten(obj[k])]
    return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--barrier", default=None)
    parser.add_argument("fixture")
    ns = parser.parse_args()

    import torch

    import neuron_fixtures
    from conformance.implementation import NotSupported, load_implementation

    impl = load_implementation(ns.impl)
    model, args = neuron_fixtures.build(ns.fixture)
    compiled = impl.compile(model)
    if ns.barrier:
        open(f"{ns.barrier}.ready.{os.getpid()}", "w").close()
        while not os.path.exists(ns.barrier):
            time.sleep(0.005)
    result: dict = {"pid": os.getpid()}
    code = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                result["outputs"] = _flatten(compiled(*args))
        except Exception as exc:  # reported to the parent, which asserts on it
            result["error"] = {
                "type": type(exc).__name__,
                "types": [c.__name__ for c in type(exc).__mro__],
                "message": str(exc),
                "traceback": traceback.format_exc()[-4000:],
            }
            code = 3
    result["warnings"] = [str(w.message) for w in caught]
    result["compiler_invocations"] = impl.compiler_invocations()
    try:
        result["lowerings"] = impl.lowerings()
    except NotSupported:
        result["lowerings"] = None
    tmp = f"{ns.out}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    os.replace(tmp, ns.out)
    return code


if __name__ == "__main__":
    sys.exit(main())
