"""A fresh process for the cache benchmark: compile one fixture with one backend, run it once.

``python -m benchmarks._cache_ttfo_child BACKEND FIXTURE OUT [BLOB]`` writes ``{"first_output": <epoch s>,
"imported": <epoch s>, "compiler_invocations": n}``; the parent measures from the moment it started
the process. The caches come from the environment. With ``BLOB`` (and ``TORCH_CACHING_PRECOMPILE=1``)
the child loads PyTorch's saved cache artifacts from it, or saves them there when it is absent.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    backend, name, out = sys.argv[1:4]
    blob = sys.argv[4] if len(sys.argv) > 4 else None  # precompile artifacts: load if present, else save
    import os

    import torch

    import neuron_fixtures

    imported = time.time()  # loading saved artifacts counts as part of the warm start
    if blob and os.path.exists(blob):
        with open(blob, "rb") as fh:
            torch.compiler.load_cache_artifacts(fh.read())

    model, args = neuron_fixtures.build(name)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        compiled(*args)
    first = time.time()
    invocations = None
    if blob and not os.path.exists(blob):
        saved = torch.compiler.save_cache_artifacts()
        with open(blob, "wb") as fh:
            fh.write(saved[0])
    if backend == "neuron":
        from reference.core.metrics import METRICS

        invocations = METRICS.counters().get("compiler_invocations", 0)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"first_output": first, "imported": imported, "compiler_invocations": invocations}, fh)


if __name__ == "__main__":
    main()
