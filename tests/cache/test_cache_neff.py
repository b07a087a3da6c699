"""Unit tests of the NEFF cache store, its locks and failure records, and ``build_artifact``.

Compiles are real (IREE); the graph is the ``mlp`` fixture lowered once per module. Lock holders
are real processes. Two tests fake one neighbour, and say so: a disk that fills up mid-write is
simulated by replacing the store's file writer (this machine runs the tests as root, where a
read-only directory is still writable and a real full disk is not something a test can make).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import neuron_fixtures
from reference.cache import neff_cache as store
from reference.cache.errors import CacheFallbackWarning, CacheLockTimeoutError, RecordedCompileFailure
from reference.cache.failures import MAX_ATTEMPTS
from reference.cache.neff_cache import METADATA_FILE, NeffCache
from reference.core.build_settings import BuildSettings, CacheRoots
from reference import pipeline
from reference.compiler.driver import CompilerConfig, CompilerDriver
from reference.core.errors import NEFFCompilationError
from reference.lowering.stablehlo import LoweredGraph
from reference.core.metrics import METRICS
from reference.runtime import LoadedArtifact

ARGS = ["--target", "trn2"]


def _ctx(graph_name: str, *, model_name: str = "model_default") -> pipeline.BuildContext:
    """A build of ``graph_name`` under ARGS and the settings the environment gives now."""
    return pipeline.BuildContext(graph_name, CompilerConfig.from_args(ARGS), BuildSettings.from_env(), model_name=model_name)


@pytest.fixture(scope="module")
def lowered() -> LoweredGraph:
    from reference.flows.tools import lower_graphs

    model, args = neuron_fixtures.build("mlp")
    (graph,) = lower_graphs(model, args)
    return graph


@pytest.fixture(scope="module")
def artifact(lowered) -> bytes:
    return CompilerDriver().compile(lowered.hlo, CompilerConfig.from_args(ARGS), graph_name="mlp").artifact


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("NEURON_LIBTORCH_ASSERT_CACHE_HIT", raising=False)
    METRICS.reset()
    return tmp_path


def _meta(lowered):
    from reference.cache.key import create_cache_hash

    k, breakdown = create_cache_hash(lowered.hlo, ARGS, lowered.input_specs, breakdown=True)
    return pipeline.build_metadata(lowered, k, breakdown, CompilerConfig.from_args(ARGS), "mlp_graph")


def _key(lowered):
    from reference.cache.key import create_cache_hash

    return create_cache_hash(lowered.hlo, ARGS, lowered.input_specs)


def test_put_then_get_round_trips_and_leaves_no_scratch(dirs, lowered, artifact):
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"))
    key = _key(lowered)
    cache.put(key, artifact, _meta(lowered))
    entry = cache.get(key)
    assert entry is not None and entry.artifact == artifact
    assert entry.metadata.artifact_size == len(artifact)
    assert entry.metadata.compiler_args == ARGS
    assert cache.keys() == [key]
    assert cache.scratch_dirs() == []
    assert sorted(os.listdir(cache.entry_dir(key))) == [METADATA_FILE, store.ARTIFACT_FILE]


@pytest.mark.parametrize(
    "damage",
    ["truncate_artifact", "flip_artifact_byte", "empty_artifact", "truncate_metadata", "edit_metadata_value", "delete_artifact"],
)
def test_a_damaged_entry_is_a_miss_and_is_evicted_with_a_warning(dirs, lowered, artifact, damage):
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"))
    key = _key(lowered)
    cache.put(key, artifact, _meta(lowered))
    art = os.path.join(cache.entry_dir(key), store.ARTIFACT_FILE)
    meta = os.path.join(cache.entry_dir(key), METADATA_FILE)
    if damage == "truncate_artifact":
        os.truncate(art, len(artifact) // 2)
    elif damage == "flip_artifact_byte":
        data = bytearray(open(art, "rb").read())
        data[len(data) // 3] ^= 0xFF
        open(art, "wb").write(bytes(data))
    elif damage == "empty_artifact":
        os.truncate(art, 0)
    elif damage == "truncate_metadata":
        os.truncate(meta, os.path.getsize(meta) // 2)
    elif damage == "edit_metadata_value":  # still valid JSON, but not what was written
        text = open(meta).read().replace('"trn2"', '"trn3"')
        open(meta, "w").write(text)
    else:
        os.unlink(art)
    assert cache.get(key, evict=False) is None
    assert cache.keys() == [key], "a reader without the lock must not evict"
    with pytest.warns(CacheFallbackWarning, match=key):
        assert cache.get(key) is None
    assert cache.keys() == [] and not os.path.exists(cache.entry_dir(key))


def test_build_artifact_compiles_once_then_hits(dirs, lowered):
    first = pipeline.build_artifact(lowered, _ctx("g"))
    second = pipeline.build_artifact(lowered, _ctx("g"))
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.artifact == second.artifact and first.key == second.key
    assert METRICS.counters()["compiler_invocations"] == 1
    assert second.metadata.compile_time_us > 0 and second.metadata.versions


def test_a_corrupt_entry_is_recompiled_and_the_result_runs(dirs, lowered):
    import torch

    built = pipeline.build_artifact(lowered, _ctx("g"))
    art = os.path.join(pipeline.neff_cache(CacheRoots.from_env()).entry_dir(built.key), store.ARTIFACT_FILE)
    os.truncate(art, 100)
    with pytest.warns(CacheFallbackWarning, match="evicted"):
        again = pipeline.build_artifact(lowered, _ctx("g"))
    assert not again.cache_hit and again.artifact == built.artifact
    assert METRICS.counters()["compiler_invocations"] == 2
    loaded = LoadedArtifact(again.artifact, graph_name="g", input_specs=lowered.input_specs, output_specs=lowered.output_specs)
    inputs = [torch.randn(*s.shape) for s in lowered.input_specs]
    assert loaded(*inputs)[0].shape == tuple(lowered.output_specs[0].shape)


def test_disabled_cache_compiles_every_time_and_writes_nothing(dirs, lowered, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    a = pipeline.build_artifact(lowered, _ctx("g"))
    b = pipeline.build_artifact(lowered, _ctx("g"))
    assert not a.cache_hit and not b.cache_hit
    assert METRICS.counters()["compiler_invocations"] == 2
    assert not (dirs / "neff").exists() and not (dirs / "local").exists()


def test_a_full_disk_mid_write_leaves_nothing_and_falls_back_with_a_warning(dirs, lowered, monkeypatch):
    """Fakes the disk: the store's writer writes half the bytes, then fails with ENOSPC."""

    def half_then_enospc(path, data):
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(store, "_write", half_then_enospc)
    with pytest.warns(CacheFallbackWarning, match="No space left"):
        built = pipeline.build_artifact(lowered, _ctx("g"))
    assert built.artifact and not built.cache_hit
    cache = pipeline.neff_cache(CacheRoots.from_env())
    assert cache.keys() == [] and cache.scratch_dirs() == []
    assert not os.path.exists(cache.entry_dir(built.key))


_HOLDER = """
import sys
from reference.cache.neff_cache import NeffCache
held = NeffCache(sys.argv[1], sys.argv[2]).acquire(sys.argv[3], graph_name="holder_graph")
print("held", flush=True)
sys.stdin.read()
"""


def _hold_in_child(dirs, key):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(dirs / "neff"), str(dirs / "local"), key],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_wait_times_out_naming_the_key_and_the_holder(dirs):
    key = "a" * 32
    proc = _hold_in_child(dirs, key)
    try:
        cache = NeffCache(str(dirs / "neff"), str(dirs / "local"), lock_timeout=0.5)
        with pytest.raises(CacheLockTimeoutError) as info:
            cache.acquire(key)
        text = str(info.value)
        assert key in text and f"pid {proc.pid}" in text and "holder_graph" in text
        assert "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT" in text
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_left_by_a_killed_process_does_not_block(dirs):
    key = "b" * 32
    proc = _hold_in_child(dirs, key)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"), lock_timeout=5)
    start = time.monotonic()
    with cache.acquire(key):
        assert cache.holder(key)["pid"] == os.getpid()
    assert time.monotonic() - start < 5  # it did not wait out the timeout
    assert cache.holder(key) is None, "the holder note goes with the lock"


def test_a_claim_is_refused_at_once_while_another_process_holds_it_and_free_once_it_is_killed(dirs):
    """try_acquire (the Ray executor's claim): None at once, without waiting, while another process
    holds the key's lock; the lock with this process's holder note once that process is killed."""
    key = "c" * 32
    proc = _hold_in_child(dirs, key)
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"), lock_timeout=60)
    try:
        start = time.monotonic()
        assert cache.try_acquire(key, graph_name="claimer") is None
        assert time.monotonic() - start < 1
        assert cache.holder(key)["pid"] == proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    claim = cache.try_acquire(key, graph_name="claimer")
    assert claim is not None
    with claim:
        assert cache.holder(key)["pid"] == os.getpid() and cache.holder(key)["graph_name"] == "claimer"
    assert cache.holder(key) is None


def _bad_graph(lowered) -> LoweredGraph:
    return LoweredGraph(
        hlo=lowered.hlo.replace("func.func", "func.fnuc", 1),
        input_specs=lowered.input_specs,
        output_specs=lowered.output_specs,
        node_count=lowered.node_count,
    )


def test_failed_compiles_are_recorded_and_retried_under_the_policy(dirs, lowered):
    bad = _bad_graph(lowered)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        with pytest.raises(NEFFCompilationError) as info:
            pipeline.build_artifact(bad, _ctx("bad_graph"))
        assert not isinstance(info.value, RecordedCompileFailure)
        rec = pipeline.neff_cache(CacheRoots.from_env()).failures.get(_bad_key(bad))
        assert rec["attempts"] == attempt and rec["log"], "the record keeps the compiler's log"
    assert METRICS.counters()["compiler_invocations"] == MAX_ATTEMPTS
    with pytest.raises(RecordedCompileFailure) as info:
        pipeline.build_artifact(bad, _ctx("bad_graph"))
    assert _bad_key(bad) in str(info.value) and "fnuc" in info.value.compiler_log
    assert METRICS.counters()["compiler_invocations"] == MAX_ATTEMPTS, "held back: no compiler run"
    # After the cool-down, the next attempt compiles again.
    records = pipeline.neff_cache(CacheRoots.from_env()).failures
    path = records.path(_bad_key(bad))
    rec = json.load(open(path))
    rec["last_failure"] -= records.cooldown_s + 1
    json.dump(rec, open(path, "w"))
    with pytest.raises(NEFFCompilationError) as info:
        pipeline.build_artifact(bad, _ctx("bad_graph"))
    assert not isinstance(info.value, RecordedCompileFailure)
    assert METRICS.counters()["compiler_invocations"] == MAX_ATTEMPTS + 1


def _bad_key(bad):
    from reference.cache.key import create_cache_hash

    return create_cache_hash(bad.hlo, ARGS, bad.input_specs)


def test_a_success_clears_the_failure_record(dirs, lowered):
    cache = pipeline.neff_cache(CacheRoots.from_env())
    key = _key(lowered)
    cache.failures.record(key, graph_name="g", error=NEFFCompilationError("transient", compiler_log="killed"))
    assert cache.failures.get(key)["attempts"] == 1
    built = pipeline.build_artifact(lowered, _ctx("g"))
    assert built.key == key and cache.failures.get(key) is None


def test_a_publish_race_keeps_one_valid_entry(dirs, lowered, artifact):
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"))
    key = _key(lowered)
    first = cache.put(key, artifact, _meta(lowered))
    second = cache.put(key, artifact, _meta(lowered))
    assert first.metadata.artifact_sha256 == second.metadata.artifact_sha256
    assert cache.keys() == [key] and cache.scratch_dirs() == []


def test_scratch_of_a_dead_writer_is_swept_on_the_next_put(dirs, lowered, artifact):
    cache = NeffCache(str(dirs / "neff"), str(dirs / "local"))
    key = _key(lowered)
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    stale = os.path.join(cache.root, f"{store.TMP_PREFIX}{key}-{store._host_tag()}-{dead}-0")
    os.makedirs(stale)
    open(os.path.join(stale, store.ARTIFACT_FILE), "wb").write(b"partial")
    cache.put(key, artifact, _meta(lowered))
    assert cache.scratch_dirs() == []


def test_a_held_back_attempt_repeats_what_the_failed_ones_said(dirs):
    """The record keeps the failure's message and op, so the error raised in the cool-down names the
    rejected op first, as the failed attempts did, and then why nothing was compiled."""
    records = NeffCache(str(dirs / "neff"), str(dirs / "local")).failures
    key = "c" * 32
    failure = NEFFCompilationError("the compiler rejected aten.topk.default (node topk)", graph_name="g",
                                   compiler_log="error: chlo.top_k", op="aten.topk.default")
    for _ in range(MAX_ATTEMPTS):
        records.record(key, graph_name="g", error=failure)
    with pytest.raises(RecordedCompileFailure) as info:
        records.check(key, graph_name="g")
    first = str(info.value).splitlines()[0]
    assert first.startswith("graph 'g': the compiler rejected aten.topk.default (node topk) [cache key " + key)
    assert f"failed to compile {MAX_ATTEMPTS} times in a row" in first and records.path(key) in first
    assert info.value.op == "aten.topk.default" and "chlo.top_k" in info.value.compiler_log


# --- an artifact whose checksums match but that the runtime cannot load -------------------------------


def _plant_unloadable(cache: NeffCache, lowered, key: str) -> None:
    """An entry whose artifact is not a module the runtime can load, with matching checksums (what
    a runtime upgrade or a planted file looks like to the store)."""
    cache.evict(key, "making room for the test's entry")
    cache.put(key, b"\x08\x00\x00\x00not a flatbuffer", _meta(lowered))


def test_an_unloadable_cached_artifact_is_evicted_and_rebuilt_once(dirs, lowered):
    first = pipeline.build_artifact(lowered, _ctx("g"))
    cache = pipeline.neff_cache(CacheRoots.from_env())
    with pytest.warns(CacheFallbackWarning):
        _plant_unloadable(cache, lowered, first.key)
    before = METRICS.counters().get("compiler_invocations", 0)
    with pytest.warns(CacheFallbackWarning, match=f"{first.key} evicted: the runtime could not load"):
        served = pipeline.serve(pipeline.Lowering(lowered), _ctx("g", model_name="m"))
    assert METRICS.counters().get("compiler_invocations", 0) == before + 1
    assert served.built.artifact == first.artifact and not served.built.cache_hit
    assert cache.get(first.key).artifact == first.artifact, "the rebuilt artifact was published"
    assert served.loaded is not None


def test_an_artifact_that_stays_unloadable_after_the_rebuild_names_the_entry(dirs, lowered, monkeypatch):
    from reference.cache.errors import UnloadableArtifactError
    from reference.compiler.driver import CompileResult

    key = pipeline.build_artifact(lowered, _ctx("g")).key
    cache = pipeline.neff_cache(CacheRoots.from_env())
    with pytest.warns(CacheFallbackWarning):
        _plant_unloadable(cache, lowered, key)
    # fakes the compiler (a neighbour): the rebuild also produces what the runtime cannot load
    monkeypatch.setattr(CompilerDriver, "compile", lambda self, hlo, args, graph_name=None: CompileResult(
        b"\x08\x00\x00\x00still not a flatbuffer", [], "", 1))
    with pytest.warns(CacheFallbackWarning), pytest.raises(UnloadableArtifactError) as info:
        pipeline.serve(pipeline.Lowering(lowered), _ctx("g", model_name="m"))
    assert cache.entry_dir(key) in str(info.value) and "'g'" in str(info.value)
