"""A fresh process for the cache benchmark: compile one fixture with one backend, run it once.

``python -m benchmarks._cache_ttfo_child BACKEND FIXTURE OUT`` writes ``{"first_output": <epoch s>,
"imported": <epoch s>, "compiler_invocations": n}``; the parent measures from the moment it started
the process. The caches come from the environment.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    backend, name, out = sys.argv[1:4]
    import torch

    import fixtures

    imported = time.time()
    model, args = fixtures.build(name)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        compiled(*args)
    first = time.time()
    invocations = None
    if backend == "neuron":
        from reference.compile.metrics import METRICS

        invocations = METRICS.counters().get("compiler_invocations", 0)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"first_output": first, "imported": imported, "compiler_invocations": invocations}, fh)


if __name__ == "__main__":
    main()
