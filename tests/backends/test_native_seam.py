"""The native seam (``neuron_native_lite``) end to end: real lowering, compiler and runtime.

The "other process" of the last test is this process with the native key registry cleared: the
cache entry on disk is what a second process would find.
"""

from __future__ import annotations

import pytest
import torch

from conformance.harness.tolerances import assert_close
from neuron_fixtures import build
from reference.cache.neff_cache import NeffCache
from reference.core import env
from reference.core.metrics import get_dynamo_metrics, reset_dynamo_metrics
from reference.backends.native import CompilerArgsConflictError, reset_native_key_registry


@pytest.fixture
def caches(tmp_path):
    with env.override(
        TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "neff"),
        TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(tmp_path / "local"),
        TORCH_NEURONX_HLO_CACHE_DIR=str(tmp_path / "hlo"),
    ):
        reset_native_key_registry()
        reset_dynamo_metrics()
        torch._dynamo.reset()
        yield NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"))
        reset_native_key_registry()
        torch._dynamo.reset()


def _run(model, args, compiler_args):
    compiled = torch.compile(model, backend="neuron_native_lite", options={"compiler_args": compiler_args})
    with torch.no_grad():
        return compiled(*args)


def test_native_seam_compiles_publishes_and_matches_eager(caches):
    model, args = build("mlp")
    out = _run(model, args, ["-O2"])
    with torch.no_grad():
        assert_close(out, model(*args))
    (record,) = get_dynamo_metrics()
    (key,) = caches.keys()
    assert record.graph_id == key
    entry = caches.get(key)
    assert entry.metadata.extra["seam"] == "neuron_native_lite"
    assert "-O2" in entry.metadata.compiler_args


@pytest.mark.spec("000.stability.native-assert-cache-key-args")
def test_an_entry_built_with_other_arguments_is_refused_by_the_next_process(caches):
    model, args = build("mlp")
    _run(model, args, ["-O2"])
    reset_native_key_registry()  # a new process: only the cache entry remembers the arguments
    torch._dynamo.reset()
    with env.override(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=True), pytest.raises(CompilerArgsConflictError) as info:
        _run(model, args, ["-O3"])
    assert "recorded in the cache entry" in str(info.value)
    assert "-O3" in str(info.value) and "-O2" in str(info.value)
