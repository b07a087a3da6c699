"""``TORCH_CACHING_PRECOMPILE``: a fresh process that loads the saved cache artifacts skips Dynamo
tracing, lowering and compiling for the neuron backend. Real processes, real PyTorch precompile
cache (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_CHILD = r"""
import json, sys, torch
import neuron_fixtures
from reference.core.metrics import METRICS
mode, blob, out = sys.argv[1:4]
if mode == "load":
    torch.compiler.load_cache_artifacts(open(blob, "rb").read())
model, args = neuron_fixtures.build("mlp")
compiled = torch.compile(model, backend="neuron")
with torch.no_grad():
    y = compiled(*args)
result = {"output": y.tolist(), "counters": METRICS.counters(),
          "dynamo_graphs": torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)}
if mode == "save":
    saved = torch.compiler.save_cache_artifacts()
    open(blob, "wb").write(saved[0])
    result["saved"] = {k: len(v) for k, v in saved[1].artifacts.items()}
json.dump(result, open(out, "w"))
"""


def _run(mode: str, tmp_path, env: dict) -> dict:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(tmp_path / "blob"), str(out)],
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("fresh_caches", [False, True], ids=["same-caches", "fresh-hlo-and-neff-caches"])
def test_a_loaded_precompile_cache_skips_dynamo_lowering_and_compiling(tmp_path, fresh_caches):
    def env(tag):
        return {
            "TORCH_CACHING_PRECOMPILE": "1",
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{tag}"),
            "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / f"neff-{tag}"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(tmp_path / f"local-{tag}"),
            "TORCH_NEURONX_HLO_CACHE_DIR": str(tmp_path / f"hlo-{tag}"),
            "TORCH_NEURONX_NEFF_DISABLE_CACHE": "0",
        }

    saved = _run("save", tmp_path, env("a"))
    assert saved["saved"].get("precompile") == 1
    assert saved["dynamo_graphs"] == 1 and saved["counters"]["compiler_invocations"] == 1
    loaded = _run("load", tmp_path, env("b" if fresh_caches else "a"))
    assert loaded["output"] == saved["output"]
    assert loaded["dynamo_graphs"] == 0, "Dynamo traced the frame again"
    if fresh_caches:
        # Only the Dynamo graph travels in the artifact: the backend rebuilds from it.
        assert loaded["counters"].get("compiler_invocations") == 1
    else:
        assert loaded["counters"].get("compiler_invocations", 0) == 0
        assert loaded["counters"].get("lowerings", 0) == 0
        # the rebuilt graph found the inference plan the first process wrote: no AOT Autograd trace
        assert loaded["counters"].get("plan_cache_hits") == 1
