"""Run in a fresh process by the cache tests: compile and run one fixture through the adapter.

``python -m conformance.tests._cache_child --impl SPEC --out FILE [--barrier PATH] [--options JSON]
[--attempts N --pause PATH] fixture``

The cache environment comes from the parent (``impl.cache().env(root)``). With ``--barrier``, the
child builds the model and imports everything, writes ``PATH.ready.<pid>``, and waits for ``PATH``
to exist before the first call, so that racing processes reach the compile together. ``--options``
are the compile options (JSON). With ``--attempts N`` the child compiles and runs the fixture N
times in one process (resetting the implementation in between); after each attempt but the last
it writes ``FILE.attempt<i>`` and waits for ``--pause PATH.<i>`` to exist, so the parent can act
while the process is alive. A file-size limit the parent set (``RLIMIT_FSIZE``) is lifted before
the result is written, so the limit bears on the implementation's writes only.

Writes JSON: ``outputs`` (the flattened outputs as nested lists), ``compiler_invocations``,
``warnings`` (messages given through ``warnings`` or ``logging``), ``evidence`` (what the call did with the compiled path, ``impl.evidence()``), and on failure ``error`` (``type``, ``types`` of its class hierarchy,
``message``), all of the last attempt, and ``attempts`` (one such record per attempt, with the
invocations counted so far); exits 0 on success, 3 on a compile or run error.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
import warnings

from conformance.harness import child
from conformance.harness.evidence import observe
from conformance.harness.warnings_given import warnings_given


def _flatten(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj.detach().to(torch.float64).tolist()]
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _flatten(item)]
    if isinstance(obj, dict):
        return [x for k in sorted(obj) for x in _flatten(obj[k])]
    return []


def _attempt(impl, compiled, args) -> dict:
    import torch

    result: dict = {}
    with warnings_given() as given, observe(impl) as evidence:
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
    result["warnings"] = list(given)  # warnings.warn and logging alike
    result["evidence"] = evidence.as_dict()
    result["compiler_invocations"] = impl.cache().compiler_invocations()
    return result


def _write(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _lift_file_size_limit() -> None:
    try:
        import resource
    except ImportError:  # not POSIX: there is no limit to lift
        return
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--barrier", default=None)
    parser.add_argument("--options", default=None)
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--pause", default=None)
    parser.add_argument("fixture")
    ns = parser.parse_args()

    import neuron_fixtures
    from conformance.harness.implementation import NotSupported, load_implementation

    impl = load_implementation(ns.impl)
    options = json.loads(ns.options) if ns.options else None
    model, args = neuron_fixtures.build(ns.fixture)
    compiled = impl.compile(model, options=options)
    if ns.barrier:
        open(f"{ns.barrier}.ready.{os.getpid()}", "w").close()
        while not os.path.exists(ns.barrier):
            time.sleep(0.005)
    attempts = []
    for i in range(ns.attempts):
        if i:
            impl.reset()
            compiled = impl.compile(model, options=options)
        attempts.append(_attempt(impl, compiled, args))
        if i + 1 < ns.attempts and ns.pause:
            _write(f"{ns.out}.attempt{i}", attempts[-1])
            while not os.path.exists(f"{ns.pause}.{i}"):
                time.sleep(0.01)
    _lift_file_size_limit()
    result: dict = {"pid": os.getpid(), **attempts[-1], "attempts": attempts}
    try:
        result["lowerings"] = impl.cache().lowerings()
    except NotSupported:
        result["lowerings"] = None
    _write(ns.out, result)
    return 3 if "error" in result else 0


if __name__ == "__main__":
    child.run(main)
