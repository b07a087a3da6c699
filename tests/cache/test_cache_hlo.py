"""Unit tests of the HLO cache: what its key reads, damaged records, unwritable directories."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from reference.cache.errors import CacheFallbackWarning
from reference.cache.hlo_cache import HloCache, create_hlo_cache_key
from reference.core.build_settings import BuildSettings
from reference.pipeline import lower_cached
from reference.core.specs import TensorSpec
from reference.lowering.stablehlo import lower_to_stablehlo
from reference.core.metrics import METRICS

SPECS = [TensorSpec("float32", (4,), (1,))]


def _graph(scale: float):
    const = torch.full((4,), scale)

    def f(x):
        return x * const + 1

    return make_fx(f)(torch.randn(4))


@pytest.fixture
def hlo_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(tmp_path / "hlo"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    METRICS.reset()
    return tmp_path / "hlo"


def test_the_key_reads_constants_specs_and_pass_identity():
    g1, g2 = _graph(2.0), _graph(3.0)
    k = create_hlo_cache_key(g1, SPECS, "passes-a")
    assert k == create_hlo_cache_key(_graph(2.0), SPECS, "passes-a"), "same graph, same key"
    assert k != create_hlo_cache_key(g2, SPECS, "passes-a"), "a constant's value must enter the key"
    assert k != create_hlo_cache_key(g1, SPECS, "passes-b"), "the pass manager's identity must enter the key"
    assert k != create_hlo_cache_key(g1, [TensorSpec("float32", (4,), (2,))], "passes-a")
    assert k != create_hlo_cache_key(g1, SPECS, "passes-a", versions={"torch": "0"})


def test_the_key_reads_replica_group_metadata():
    g = _graph(2.0)
    k = create_hlo_cache_key(g, SPECS, "p")
    next(n for n in g.graph.nodes if n.op == "call_function").meta["replica_groups"] = [[0, 1]]
    assert create_hlo_cache_key(g, SPECS, "p") != k


def test_a_second_lowering_is_served_from_the_cache(hlo_dir):
    g = _graph(2.0)
    first = lower_cached(g, graph_name="g", settings=BuildSettings.from_env())
    second = lower_cached(_graph(2.0), graph_name="g", settings=BuildSettings.from_env())
    assert first == second == lower_to_stablehlo(g, graph_name="g")
    assert METRICS.counters() == {"lowerings": 1, "hlo_cache_hits": 1}


def test_a_damaged_record_is_lowered_again_and_replaced(hlo_dir):
    g = _graph(2.0)
    good = lower_cached(g, graph_name="g", settings=BuildSettings.from_env())
    (key,) = HloCache(str(hlo_dir)).keys()
    path = hlo_dir / f"{key}.json"
    rec = json.loads(path.read_text())
    rec["hlo"] = rec["hlo"].replace("stablehlo.add", "stablehlo.subtract")
    path.write_text(json.dumps(rec))
    assert lower_cached(g, graph_name="g", settings=BuildSettings.from_env()) == good
    assert METRICS.counters()["lowerings"] == 2
    path.write_text(path.read_text()[:50])
    assert lower_cached(g, graph_name="g", settings=BuildSettings.from_env()) == good
    assert HloCache(str(hlo_dir)).get(key) == good


def test_an_unwritable_directory_warns_and_still_lowers(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(blocker / "hlo"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    with pytest.warns(CacheFallbackWarning, match="HLO cache"):
        lowered = lower_cached(_graph(2.0), graph_name="g", settings=BuildSettings.from_env())
    assert "stablehlo" in lowered.hlo


def test_disabled_caching_writes_no_hlo(hlo_dir, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    lower_cached(_graph(2.0), graph_name="g", settings=BuildSettings.from_env())
    lower_cached(_graph(2.0), graph_name="g", settings=BuildSettings.from_env())
    assert METRICS.counters()["lowerings"] == 2
    assert not os.path.exists(hlo_dir)
