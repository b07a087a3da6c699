"""``TORCH_CACHING_PRECOMPILE``: a fresh process that loads the saved cache artifacts skips Dynamo
tracing, lowering and compiling for the neuron backend. Real processes, real PyTorch precompile
cache (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

_CHILD = r"""
import json, sys, torch
import neuron_fixtures
from reference.core.metrics import METRICS
mode, blob, out = sys.argv[1:4]
fixture = sys.argv[4] if len(sys.argv) > 4 else "mlp"
if "no-plans" in sys.argv[5:]:  # a stand-in for a graph that gets no plan: the rebuilt graph's own key is used
    from reference.backends import inference_plan
    inference_plan.plan_key = lambda *a, **k: None
if mode == "load":
    torch.compiler.load_cache_artifacts(open(blob, "rb").read())
if fixture == "arange_mask":  # a graph that makes a tensor with no graph input (a mask, as decoders do)
    class ArangeMask(torch.nn.Module):
        def forward(self, x):
            return torch.where(torch.arange(x.shape[-1]) < 3, x, -x) * 2
    model, args = ArangeMask(), (torch.linspace(-1, 1, 12).reshape(2, 6),)
else:
    model, args = neuron_fixtures.build(fixture)
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


def _run(mode: str, tmp_path, env: dict, *extra: str) -> dict:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(tmp_path / "blob"), str(out), *extra],
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("fresh_caches", [False, True], ids=["same-caches", "fresh-hlo-and-neff-caches"])
@pytest.mark.spec("001.cache.caching-precompile", "001.cache.precompile-dir")
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


def test_a_rebuilt_graph_is_the_graph_dynamo_made_so_it_is_not_compiled_again(tmp_path):
    """A graph that computes a mask with ``torch.arange`` inside it (as the decoder fixture does). Its artifact
    keeps the nodes themselves: the graph rebuilt in a fresh process lowers to the same StableHLO
    and finds its binary, with the inference plans out of the way (a graph with no plan, such as a
    training graph, takes this path). Pickling the GraphModule would trace its code again and turn
    the arange into a constant input: another key, both graphs compiled again."""
    env = {
        "TORCH_CACHING_PRECOMPILE": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(tmp_path / "local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": str(tmp_path / "hlo"),
    }
    saved = _run("save", tmp_path, env, "arange_mask", "no-plans")
    assert saved["counters"]["compiler_invocations"] == 1
    loaded = _run("load", tmp_path, env, "arange_mask", "no-plans")
    assert loaded["output"] == saved["output"] and loaded["dynamo_graphs"] == 0
    assert loaded["counters"].get("compiler_invocations", 0) == 0, "the rebuilt graph got another key"
    assert loaded["counters"].get("neff_cache_hits") == 1 and not loaded["counters"].get("plan_cache_hits")


def test_a_graph_travels_as_its_nodes_not_as_code_traced_again():
    from reference.backends.precompile import graph_to_bytes, graph_from_bytes

    graphs = []

    def keep(gm, example_inputs, **_):
        graphs.append(gm)
        return gm.forward

    def f(x):
        return x * torch.arange(x.shape[-1], dtype=x.dtype) + 1  # a call with no graph input

    torch._dynamo.reset()
    x = torch.randn(3, 5)
    torch.compile(f, backend=keep)(x)
    torch._dynamo.reset()
    (gm,) = graphs
    again = graph_from_bytes(graph_to_bytes(gm))
    assert again.code == gm.code and not list(again.named_buffers())
    assert torch.equal(again(x)[0], gm(x)[0])
    import pickle

    traced_again = pickle.loads(pickle.dumps(gm))  # what the artifact held before: the arange is now a constant
    assert list(traced_again.named_buffers()) and traced_again.code != gm.code
