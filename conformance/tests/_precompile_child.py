"""Run in a fresh process by ``test_cache_precompile.py``: compile and run one fixture through the
adapter with PyTorch's precompile cache, saving its artifacts or loading them first.

``python -m conformance.tests._precompile_child --impl SPEC --mode save|load --blob PATH --out FILE fixture``

The environment comes from the parent (``TORCH_CACHING_PRECOMPILE``, ``TORCHINDUCTOR_CACHE_DIR`` and
the cache folders). ``load`` calls ``torch.compiler.load_cache_artifacts`` on the blob before the
first call; ``save`` calls ``torch.compiler.save_cache_artifacts`` after it and writes the blob.

Writes JSON: ``outputs``, ``dynamo_graphs`` (frames Dynamo traced), ``compiler_invocations``,
``lowerings`` (``None`` when the implementation does not count them), ``saved`` (artifact kind ->
count, in ``save`` mode) and on failure ``error`` (``type``, ``message``); exits 0 on success, 3 on
an error.
"""

from __future__ import annotations

import argparse
import json
import traceback


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True)
    parser.add_argument("--mode", choices=("save", "load"), required=True)
    parser.add_argument("--blob", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("fixture")
    args = parser.parse_args()

    import torch
    import torch._dynamo.utils

    import neuron_fixtures
    from conformance.harness.implementation import load_implementation

    result: dict = {}
    try:
        impl = load_implementation(args.impl)
        model, inputs = neuron_fixtures.build(args.fixture)
        if args.mode == "load":
            with open(args.blob, "rb") as fh:
                torch.compiler.load_cache_artifacts(fh.read())
        compiled = impl.backend().torch_compile(model)
        with torch.no_grad():
            out = compiled(*inputs)
        result["outputs"] = out.detach().to(torch.float64).tolist()
        if args.mode == "save":
            saved = torch.compiler.save_cache_artifacts()
            if saved is None:
                raise RuntimeError("torch.compiler.save_cache_artifacts() returned nothing to save")
            with open(args.blob, "wb") as fh:
                fh.write(saved[0])
            result["saved"] = {kind: len(items) for kind, items in saved[1].artifacts.items()}
        rc = 0
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which asserts on it
        result["error"] = {"type": type(exc).__name__, "message": f"{exc}\n{traceback.format_exc()[-3000:]}"}
        rc = 3
    result["dynamo_graphs"] = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)
    try:
        result["compiler_invocations"] = impl.cache().compiler_invocations()
    except Exception:  # noqa: BLE001 - the implementation failed to load: the error above says why
        result["compiler_invocations"] = None
    try:
        result["lowerings"] = impl.cache().lowerings()
    except Exception:  # noqa: BLE001 - NotSupported: the implementation does not count lowerings
        result["lowerings"] = None
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
