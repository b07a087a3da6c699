"""Contract: a warm cache is hit by a fresh process, and the cache switches do what they say.

- a second fresh process (another working directory and hash seed) on a warm cache runs the
  compiler zero times and, with the HLO cache, lowers nothing;
- ``TORCH_NEURONX_NEFF_DISABLE_CACHE``: every compile runs fresh and nothing is written;
- ``NEURON_LIBTORCH_ASSERT_CACHE_HIT``: a miss is an error naming the graph's key.
"""

from __future__ import annotations

import os
import shutil
import re

import pytest

from conformance.tests.test_cache_reliability import (  # noqa: F401  (fixtures)
    Child,
    _cache_capabilities,
    _check_outputs,
    _spec,
    expected,
    fork_server,
)

# The module fixture below is expensive: --dist=loadgroup keeps the module on one xdist worker.
pytestmark = pytest.mark.xdist_group("cache_warm_start")


@pytest.fixture(scope="module")
def cold(impl, pytestconfig, tmp_path_factory):
    """A cache warmed by one process, forked from the module's server (whose hash seed is drawn at
    random: conformance/harness/forkserver.py)."""
    tmp = tmp_path_factory.mktemp("warmstart")
    root = tmp / "cache"
    return root, Child(_spec(pytestconfig), impl.cache().env(str(root)), tmp / "cold.json").result()


@pytest.fixture(scope="module")
def cold_then_warm(impl, pytestconfig, cold, tmp_path_factory):
    """...and a fresh interpreter (hash seed 4242, another working directory) on that cache."""
    root, cold_run = cold
    cwd = tmp_path_factory.mktemp("elsewhere")
    warm = Child(_spec(pytestconfig), {**impl.cache().env(str(root)), "PYTHONHASHSEED": "4242"}, cwd / "warm.json",
                 cwd=str(cwd)).result()
    return root, cold_run, warm


@pytest.mark.spec("001.cache.reused-across-runs", "001.cache.neff-cache-dir", "001.cache.three-layers")
def test_a_fresh_process_on_a_warm_cache_does_not_compile(cold_then_warm, expected):
    _, cold, warm = cold_then_warm
    _check_outputs(cold, expected, "cold process")
    _check_outputs(warm, expected, "warm process")
    assert cold["compiler_invocations"] >= 1
    assert warm["compiler_invocations"] == 0, "the warm process compiled again: the cache was not hit"
    assert warm["outputs"] == cold["outputs"]


@pytest.mark.spec("001.cache.hlo-cache-dir", "001.cache.three-layers", "001.cache.hlo-shared-with-eager")
def test_a_fresh_process_on_a_warm_hlo_cache_does_not_lower(cold_then_warm):
    _, cold, warm = cold_then_warm
    if warm.get("lowerings") is None:
        pytest.skip("the implementation does not report lowerings")
    assert cold["lowerings"] >= 1
    assert warm["lowerings"] == 0, "the warm process lowered again: the HLO cache was not hit"


@pytest.mark.spec("001.cache.disable-cache")
def test_disabled_cache_compiles_every_time_and_writes_nothing(impl, pytestconfig, tmp_path, expected):
    root = tmp_path / "cache"
    env = impl.cache().env(str(root), disable=True)
    runs = [Child(_spec(pytestconfig), env, tmp_path / f"off{i}.json").result() for i in range(2)]
    for i, r in enumerate(runs):
        _check_outputs(r, expected, f"run {i} with the cache disabled")
        assert r["compiler_invocations"] >= 1, f"run {i} did not compile with the cache disabled"
    written = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files] if root.exists() else []
    assert written == [], f"files written with the cache disabled: {written[:5]}"


@pytest.mark.spec("000.stability.assert-cache-hit")
def test_assert_cache_hit_names_the_graph_key_on_a_miss(impl, pytestconfig, tmp_path):
    root = tmp_path / "cache"
    result = Child(_spec(pytestconfig), impl.cache().env(str(root), assert_hit=True), tmp_path / "miss.json").result()
    assert result["rc"] != 0 and "error" in result, "a miss under NEURON_LIBTORCH_ASSERT_CACHE_HIT did not fail"
    assert re.search(r"\b[0-9a-f]{32}\b", result["error"]["message"]), result["error"]["message"]
    assert result["compiler_invocations"] == 0
    assert impl.cache().keys(str(root)) == []


def test_a_changed_fx_pass_pipeline_lowers_again(impl, pytestconfig, cold, tmp_path, expected):
    """The HLO cache keys on the FX pass pipeline that ran: a fresh process on the warm cache with
    the pass stage switched off (``enable_fx_passes=False``) lowers again instead of reusing text
    lowered after the default passes."""
    src, cold = cold
    if cold.get("lowerings") is None:
        pytest.skip("the implementation does not report lowerings")
    root = tmp_path / "cache"
    shutil.copytree(src, root)
    changed = Child(_spec(pytestconfig), impl.cache().env(str(root)), tmp_path / "nopasses.json",
                    options={"enable_fx_passes": False}).result()
    _check_outputs(changed, expected, "a process with the FX pass stage off")
    assert changed["lowerings"] >= 1, "the HLO lowered after the default passes was reused with the pass stage off"
