"""Contract: a function compiled ahead of time loads in a fresh process and runs without compiling.

``torch.compile(fn, backend=..., fullgraph=True).aot_compile(((x,), {}))`` then
``save_compiled_function(path)``; a fresh interpreter reads the file with
``torch.compiler.load_compiled_function`` and calls it:

- its outputs match eager, and a graph that writes into its input writes into the caller's tensor;
- it runs with no Dynamo trace in that process (no frame compiled, no backend called);
- an input its guards do not accept (another shape) is refused, not run.

For any implementation whose backend supports the API (one that declares it unsupported, with
``unsupported_compiler_apis()``, is skipped with its reason). The support matrix's probe
(``test_backend_support.py``) checks the same API in-process; this one checks the fresh process a
serving job starts from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conformance.harness.implementation import declared_unsupported_api
from conformance.harness.tolerances import assert_close

pytestmark = pytest.mark.spec("001.api.load-compiled-function")


def _fn(x, cache):
    cache.mul_(0.5).add_(x)  # a graph that writes into its input (a KV cache, a running statistic)
    return torch.tanh(x @ x.transpose(0, 1)) + cache.sum()


# The fresh process: loads the file, runs it on the saved inputs, and reports what it saw. It
# imports nothing of the suite or the implementation: torch finds the backend's loader by the name
# the file records.
_CHILD = r"""
import json, sys, torch
import torch._dynamo.utils as du
path, inputs_path = sys.argv[1], sys.argv[2]
x, cache = torch.load(inputs_path)
with open(path, "rb") as fh:
    fn = torch.compiler.load_compiled_function(fh)
with torch.no_grad():
    out = fn(x, cache)
report = {"out": out.tolist(), "cache": cache.tolist(), "frames": dict(du.counters["frames"]),
          "backend_calls": sum(len(v) for k, v in du.compilation_time_metrics.items() if "call_user_compiler" in k)}
try:
    with torch.no_grad():
        fn(torch.ones(5, 3), torch.zeros(5, 3))
    report["other_shape"] = "ran"
except Exception as exc:
    report["other_shape"] = type(exc).__name__ + ": " + str(exc)[:300]
print(json.dumps(report))
"""


@pytest.fixture
def saved(impl, tmp_path):
    why = declared_unsupported_api(impl, "load_compiled_function")
    if why is not None:
        pytest.skip(f"the implementation declares load_compiled_function unsupported: {why}")
    torch.manual_seed(0)
    x, cache = torch.randn(4, 3), torch.randn(4, 3)
    compiled = impl.backend().torch_compile(_fn, fullgraph=True)
    with torch.no_grad():
        aot = compiled.aot_compile(((x, cache.clone()), {}))
    path = tmp_path / "fn.bin"
    aot.save_compiled_function(str(path))
    torch.save((x, cache), tmp_path / "inputs.pt")
    return path, tmp_path / "inputs.pt", x, cache


def test_a_fresh_process_loads_and_runs_the_compiled_function_without_tracing(saved):
    path, inputs, x, cache = saved
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the implementation's package, as here
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(inputs)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f"the fresh process failed to load or run the file:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    expected_cache = cache.clone()
    with torch.no_grad():
        expected = _fn(x, expected_cache)
    assert_close(torch.tensor(report["out"]), expected)
    assert_close(torch.tensor(report["cache"]), expected_cache)  # the write reached the caller's tensor
    assert not report["frames"].get("total"), f"the fresh process traced frames with Dynamo: {report['frames']}"
    assert report["backend_calls"] == 0, "the fresh process called the backend (it compiled again)"
    assert report["other_shape"] != "ran", "an input of another shape ran through the compiled function unguarded"
