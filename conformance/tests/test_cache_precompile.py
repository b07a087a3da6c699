"""Contract: ``TORCH_CACHING_PRECOMPILE`` (seed 001, "Caching"). With it set, PyTorch's Dynamo
precompile cache saves what ``torch.compile`` made under ``TORCHINDUCTOR_CACHE_DIR``, and a fresh
process that loads those artifacts runs the model without tracing it again; with the backend's
caches still warm, it neither lowers nor compiles.

Real processes (each a fresh interpreter: the variable is read by PyTorch at import), so the module
is in the slow lane (about 20 s of a core)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conformance.harness.forkserver import run_module
from conformance.plugin import SUITE

pytestmark = pytest.mark.slow

FIXTURE = "mlp"


def _run(pytestconfig, impl, tmp_path, mode: str, root, *, value: str = "1") -> dict:
    env = {**os.environ, **impl.cache().env(str(root)), "TORCH_CACHING_PRECOMPILE": value,
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    out = tmp_path / f"{mode}-{value}.json"
    proc = run_module("conformance.tests._precompile_child",
                      ["--impl", pytestconfig.stash[SUITE].spec, "--mode", mode, "--blob", str(tmp_path / "blob"),
                       "--out", str(out), FIXTURE], env=env, timeout=600)
    if not out.exists():
        pytest.fail(f"the {mode} process exited with {proc.returncode} and wrote no result:\n{proc.stdout[-3000:]}")
    return json.loads(out.read_text())


@pytest.mark.spec("001.cache.caching-precompile", "001.cache.precompile-dir", "001.cache.precompile-stablehlo")
def test_a_process_loading_the_precompile_cache_does_not_trace_lower_or_compile(impl, pytestconfig, tmp_path):
    root = tmp_path / "caches"
    saved = _run(pytestconfig, impl, tmp_path, "save", root)
    assert "error" not in saved, saved["error"]["message"]
    assert saved["dynamo_graphs"] >= 1 and saved["compiler_invocations"] >= 1, saved
    assert saved["saved"].get("precompile"), f"nothing was saved for the precompile cache: {saved['saved']}"
    assert any((tmp_path / "inductor").rglob("*")), "nothing was written under TORCHINDUCTOR_CACHE_DIR"
    loaded = _run(pytestconfig, impl, tmp_path, "load", root)
    assert "error" not in loaded, loaded["error"]["message"]
    assert loaded["outputs"] == saved["outputs"]
    assert loaded["dynamo_graphs"] == 0, "Dynamo traced the model again in the process that loaded the artifacts"
    assert loaded["compiler_invocations"] == 0, "the loading process compiled again"
    if loaded["lowerings"] is not None:
        # the StableHLO is not made again: what the backend needs of it is cached
        assert loaded["lowerings"] == 0, "the loading process lowered the graph to StableHLO again"


@pytest.mark.spec("001.cache.caching-precompile-booleans", "001.env.boolean-spellings")
def test_true_for_the_precompile_switch_is_taken_or_refused_naming_it(impl, pytestconfig, tmp_path):
    """The seed's booleans accept ``1``/``true``/``yes``; PyTorch itself takes only ``1`` for this
    one, so an implementation either turns the cache on for ``true`` or refuses the spelling naming
    the variable (the reference: docs/caching.md, "The precompile cache"). Never a switch that
    silently stays off."""
    saved = _run(pytestconfig, impl, tmp_path, "save", tmp_path / "caches", value="true")
    if "error" in saved:
        assert "TORCH_CACHING_PRECOMPILE" in saved["error"]["message"], saved["error"]["message"]
    else:
        assert saved["saved"].get("precompile"), f"'true' neither refused nor turned the cache on: {saved['saved']}"
