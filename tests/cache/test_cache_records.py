"""Every cache record survives any damage: a damaged record is absent, with one warning naming the
file, never an exception and never a hang; file names read from records stay in their folder.

These are unit tests of the cache stores: the NEFF cache's "artifact" here is opaque bytes (the
store never looks inside an artifact; loading one is the runtime's job, tested with real compiles
in test_cache_neff.py and the conformance suite), so no compiler runs and the module stays fast.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from reference.cache import neff_cache as store
from reference.cache.errors import CacheFallbackWarning, RecordedCompileFailure, RecordPathError
from reference.cache.failures import FailureRecords
from reference.cache.hlo_cache import HloCache
from reference.cache.plan_cache import InferencePlan, PlanCache
from reference.cache.records import confined, read_record, read_regular, RecordRejected, STR
from reference.cache.staging import read_staged, write_staged
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.core.specs import LoweredGraph, TensorSpec

KEY = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"
ARTIFACT = b"opaque artifact bytes \x00\x01\x02"  # a stand-in: the store never interprets an artifact


def _meta(key: str = KEY) -> ArtifactMetadata:
    return ArtifactMetadata(
        cache_key=key, graph_name="g", compiler_args=["-O1"], key_components={},
        input_specs=[{"dtype": "float32", "shape": [4], "stride": [1]}],
        output_specs=[{"dtype": "float32", "shape": [4], "stride": [1]}], versions={},
    )


def _lowered() -> LoweredGraph:
    spec = TensorSpec("float32", (4,), (1,))
    return LoweredGraph("module {}\n", (spec,), (spec,), 3)


def _fifo(path) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path)


def _in_time(fn, seconds: float = 10.0):
    """Run ``fn`` in a thread; fail (instead of hanging the run) when it blocks."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# --- the reader ---------------------------------------------------------------------------------


def test_read_regular_rejects_links_fifos_and_folders_and_reads_files(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    assert read_regular(str(tmp_path / "f")) == b"x"
    assert read_regular(str(tmp_path / "absent")) is None
    os.symlink(tmp_path / "f", tmp_path / "link")
    with pytest.raises(RecordRejected, match="symbolic link"):
        read_regular(str(tmp_path / "link"))
    _fifo(tmp_path / "fifo")
    with pytest.raises(RecordRejected, match="not a regular file"):
        _in_time(lambda: read_regular(str(tmp_path / "fifo")))
    with pytest.raises(RecordRejected, match="not a regular file"):
        read_regular(str(tmp_path))


@pytest.mark.parametrize(
    "content, why",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON list, not an object"),
        (b'{"name": 3}', "'name' is not a str"),
        (b"{}", "'name' is missing"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_a_malformed_record_is_absent_with_one_warning_naming_the_file(tmp_path, content, why):
    path = tmp_path / f"rec-{abs(hash(content))}.json"
    path.write_bytes(content)
    with pytest.warns(CacheFallbackWarning, match=why) as caught:
        assert read_record(str(path), "test record", {"name": STR}) is None
    assert str(path) in str(caught[0].message)
    # the second read of the same damage logs, but does not warn again
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_record(str(path), "test record", {"name": STR}) is None


# --- failure records ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        {"attempts": "many", "last_failure": 0},
        [1, 2, 3],
        {"attempts": 5},
        {"attempts": True, "last_failure": 0},
        {"attempts": 5, "last_failure": "yesterday"},
        "just a string",
    ],
    ids=["attempts-str", "list", "no-date", "attempts-bool", "date-str", "string"],
)
def test_a_malformed_failure_record_does_not_block_or_raise(tmp_path, record):
    records = FailureRecords(str(tmp_path))
    with open(records.path(KEY), "w") as fh:
        json.dump(record, fh)
    with pytest.warns(CacheFallbackWarning, match="failure record"):
        records.check(KEY, graph_name="g")  # no RecordedCompileFailure, no TypeError/ValueError
    rec = records.record(KEY, graph_name="g", error=RuntimeError("boom"))
    assert rec["attempts"] == 1, "a damaged record starts a fresh count"


def test_a_failure_record_dated_in_the_future_does_not_block_the_key(tmp_path):
    records = FailureRecords(str(tmp_path))
    far = time.time() + 10 * 365 * 86400
    (tmp_path / f"{KEY}.json").write_text(json.dumps({"attempts": 99, "last_failure": far}))
    with pytest.warns(CacheFallbackWarning, match="in the future"):
        records.check(KEY, graph_name="g")


def test_a_failure_record_a_little_ahead_counts_as_now_and_blocks_one_cooldown(tmp_path):
    records = FailureRecords(str(tmp_path))
    now = time.time()
    (tmp_path / f"{KEY}.json").write_text(json.dumps({"attempts": 3, "last_failure": now + 30}))
    with pytest.raises(RecordedCompileFailure) as info:
        records.check(KEY, graph_name="g", now=now)
    assert "not retrying for another 600 s" in str(info.value)
    records.check(KEY, graph_name="g", now=now + 30 + records.cooldown_s + 1)  # the cool-down ends


def test_a_failure_record_that_is_a_fifo_neither_hangs_nor_blocks(tmp_path):
    records = FailureRecords(str(tmp_path))
    _fifo(records.path(KEY))
    with pytest.warns(CacheFallbackWarning, match="not a regular file"):
        _in_time(lambda: records.check(KEY, graph_name="g"))


# --- lock holder notes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "note", ['{"pid": "me", "since": 0}', "[]", "{", '{"pid": 1}', '{"pid": 99999999999999, "since": 0}'],
    ids=["pid-str", "list", "truncated", "no-since", "huge-pid"],
)
def test_a_malformed_holder_note_is_described_without_raising(tmp_path, note):
    cache = store.NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"), hmac_key=None)
    os.makedirs(os.path.dirname(cache.holder_path(KEY)), exist_ok=True)
    with open(cache.holder_path(KEY), "w") as fh:
        fh.write(note)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheFallbackWarning)
        text = cache.describe_holder(KEY)
        assert isinstance(cache.holders(), list)
    assert "pid" in text or "no holder note" in text


def test_a_holder_note_dated_in_the_future_reads_as_now(tmp_path):
    cache = store.NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"), hmac_key=None)
    os.makedirs(os.path.dirname(cache.holder_path(KEY)), exist_ok=True)
    with open(cache.holder_path(KEY), "w") as fh:
        json.dump({"pid": os.getpid(), "since": time.time() + 1e9, "host": "h"}, fh)
    assert cache.holder(KEY)["since"] <= time.time()


# --- NEFF cache entries ---------------------------------------------------------------------------


def _entry(tmp_path, **kw) -> store.NeffCache:
    cache = store.NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"), **kw)
    cache.put(KEY, ARTIFACT, _meta())
    assert cache.get(KEY) is not None
    return cache


@pytest.mark.parametrize(
    "damage", ["metadata-fifo", "metadata-symlink", "artifact-fifo", "artifact-symlink", "entry-symlink",
               "artifact-file-field", "size-str", "extra-list", "metadata-list"],
)
def test_a_damaged_entry_is_evicted_never_hangs_or_raises(tmp_path, damage):
    cache = _entry(tmp_path, hmac_key=None)
    folder = cache.entry_dir(KEY)
    meta = os.path.join(folder, store.METADATA_FILE)
    art = os.path.join(folder, store.ARTIFACT_FILE)
    outside = tmp_path / "outside"
    outside.write_bytes(ARTIFACT)
    doc = json.loads(open(meta).read())
    if damage == "metadata-fifo":
        _fifo(meta)
    elif damage == "metadata-symlink":
        (tmp_path / "m.json").write_text(open(meta).read())
        os.unlink(meta)
        os.symlink(tmp_path / "m.json", meta)
    elif damage == "artifact-fifo":
        _fifo(art)
    elif damage == "artifact-symlink":
        os.unlink(art)
        os.symlink(outside, art)
    elif damage == "entry-symlink":
        os.rename(folder, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", folder)
    else:
        if damage == "artifact-file-field":
            doc["artifact_file"] = str(outside)
        elif damage == "size-str":
            doc["artifact_size"] = "big"
        elif damage == "extra-list":
            doc["extra"] = ["x"]
        else:
            doc = [doc]
        with open(meta, "w") as fh:
            json.dump(doc, fh)
    assert _in_time(lambda: cache.get(KEY, evict=False)) is None
    with pytest.warns(CacheFallbackWarning, match=KEY):
        assert _in_time(lambda: cache.get(KEY)) is None
    assert not os.path.lexists(folder) and cache.scratch_dirs() == []
    assert outside.read_bytes() == ARTIFACT, "eviction never touches what a link pointed at"
    if damage == "entry-symlink":
        assert sorted(os.listdir(tmp_path / "elsewhere")) == [store.METADATA_FILE, store.ARTIFACT_FILE]


# --- authenticated entries --------------------------------------------------------------------------


def _plant(cache: store.NeffCache, payload: bytes) -> None:
    """Swap the artifact and rewrite its size and sha256 (and the metadata's own checksum), as
    anyone who can write the folder can."""
    import hashlib

    folder = cache.entry_dir(KEY)
    meta = ArtifactMetadata.from_json(open(os.path.join(folder, store.METADATA_FILE)).read())
    with open(os.path.join(folder, store.ARTIFACT_FILE), "wb") as fh:
        fh.write(payload)
    meta.artifact_size = len(payload)
    meta.artifact_sha256 = hashlib.sha256(payload).hexdigest()
    meta.extra.pop("metadata_sha256", None)
    meta.extra["metadata_sha256"] = store._metadata_checksum(meta)
    with open(os.path.join(folder, store.METADATA_FILE), "w") as fh:
        fh.write(meta.to_json())


def test_without_a_key_a_planted_entry_is_served(tmp_path):
    cache = _entry(tmp_path, hmac_key=None)
    _plant(cache, b"planted")
    assert cache.get(KEY).artifact == b"planted"  # the documented limit of checksums


def test_with_a_key_a_planted_entry_is_evicted_and_an_own_entry_served(tmp_path):
    cache = _entry(tmp_path, hmac_key=b"secret")
    assert os.path.isfile(os.path.join(cache.entry_dir(KEY), store.HMAC_FILE))
    _plant(cache, b"planted")
    assert cache.get(KEY, evict=False) is None
    with pytest.warns(CacheFallbackWarning, match="HMAC"):
        assert cache.get(KEY) is None
    assert not os.path.exists(cache.entry_dir(KEY))


@pytest.mark.parametrize("writer_key", [None, b"another key"])
def test_with_a_key_an_entry_written_without_it_or_with_another_is_refused(tmp_path, writer_key):
    _entry(tmp_path, hmac_key=writer_key)
    reader = store.NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"), hmac_key=b"secret")
    with pytest.warns(CacheFallbackWarning, match="HMAC"):
        assert reader.get(KEY) is None


def test_the_key_comes_from_the_environment_through_the_request(tmp_path, monkeypatch):
    from reference import pipeline
    from reference.core.build_settings import CacheRoots

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("TORCH_NEURONX_CACHE_HMAC_KEY", "from-env")
    roots = CacheRoots.from_env()
    assert roots.hmac_key == b"from-env" and "from-env" not in repr(roots)  # a logged request never shows it
    assert pipeline.neff_cache(roots).hmac_key == b"from-env"
    monkeypatch.delenv("TORCH_NEURONX_CACHE_HMAC_KEY")
    assert pipeline.neff_cache(roots).hmac_key == b"from-env"  # the request's roots, not the environment now
    assert pipeline.neff_cache(CacheRoots.from_env()).hmac_key is None
    assert store.NeffCache(str(tmp_path)).hmac_key is None  # a cache made by hand is told its key


# --- HLO and plan records -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage", ["fifo", "symlink", "list", "node_count-str", "specs-garbage", "edited-hlo"],
)
def test_a_damaged_hlo_record_is_absent_with_a_warning(tmp_path, damage):
    cache = HloCache(str(tmp_path))
    assert cache.put(KEY, _lowered())
    path = cache.path(KEY)
    rec = json.loads(open(path).read())
    if damage == "fifo":
        _fifo(path)
    elif damage == "symlink":
        (tmp_path / "x").write_text(json.dumps(rec))
        os.unlink(path)
        os.symlink(tmp_path / "x", path)
    else:
        if damage == "list":
            rec = [rec]
        elif damage == "node_count-str":
            rec["node_count"] = "3"
        elif damage == "specs-garbage":
            rec["input_specs"] = [{"dtype": "float32", "shape": "abc"}]
        else:
            rec["hlo"] = "module { planted }\n"
        with open(path, "w") as fh:
            json.dump(rec, fh)
    with pytest.warns(CacheFallbackWarning, match="HLO cache record"):
        assert _in_time(lambda: cache.get(KEY)) is None


def test_an_hlo_record_with_a_recomputed_checksum_needs_the_hmac(tmp_path):
    import hashlib

    signed = HloCache(str(tmp_path), hmac_key=b"secret")
    assert signed.put(KEY, _lowered())
    rec = json.loads(open(signed.path(KEY)).read())
    rec["hlo"] = "module { planted }\n"
    rec["hlo_sha256"] = hashlib.sha256(rec["hlo"].encode()).hexdigest()
    with open(signed.path(KEY), "w") as fh:
        json.dump(rec, fh)
    assert HloCache(str(tmp_path)).get(KEY).hlo == "module { planted }\n"  # no key: served
    with pytest.warns(CacheFallbackWarning, match="HMAC"):
        assert signed.get(KEY) is None
    assert signed.put(KEY, _lowered()) and signed.get(KEY).hlo == "module {}\n"


def _plan(hlo_key: str = KEY) -> InferencePlan:
    return InferencePlan(hlo_key=hlo_key, n_inputs=2, mutated_inputs=(), n_outputs=1, static_inputs=(0,), aten_code="")


@pytest.mark.parametrize("hlo_key", ["../../etc/passwd", "ABCDEF" * 6, "/abs", "0" * 31, 12])
def test_a_plan_whose_hlo_key_is_not_a_key_is_absent(tmp_path, hlo_key):
    cache = PlanCache(str(tmp_path / "plans"))
    assert cache.put(OTHER, _plan())
    rec = json.loads(open(cache.path(OTHER)).read())
    rec["plan"]["hlo_key"] = hlo_key
    with open(cache.path(OTHER), "w") as fh:
        json.dump(rec, fh)
    with pytest.warns(CacheFallbackWarning, match="hlo_key"):
        assert cache.get(OTHER) is None


@pytest.mark.parametrize("damage", ['{"record_version": 1, "key": "%s", "plan": []}', "[]", '{"plan": {}}'])
def test_a_malformed_plan_record_is_absent(tmp_path, damage):
    cache = PlanCache(str(tmp_path / "plans"))
    os.makedirs(cache.root)
    with open(cache.path(OTHER), "w") as fh:
        fh.write(damage.replace("%s", OTHER))
    with pytest.warns(CacheFallbackWarning, match="plan cache record"):
        assert cache.get(OTHER) is None


def test_a_symlinked_plans_folder_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hlo_root = tmp_path / "hlo"
    hlo_root.mkdir()
    os.symlink(elsewhere, hlo_root / "plans")
    cache = PlanCache(str(hlo_root / "plans"))
    with pytest.warns(CacheFallbackWarning, match="symbolic link"):
        assert cache.put(OTHER, _plan()) is False
    assert os.listdir(elsewhere) == [], "nothing is written through a planted link"
    (elsewhere / f"{OTHER}.json").write_text(json.dumps({"record_version": 1, "key": OTHER, "plan": _plan().as_json()}))
    assert cache.get(OTHER) is None, "nothing is read through it either"


def test_a_key_never_becomes_a_path_outside_the_folder(tmp_path):
    with pytest.raises(ValueError, match="not a cache key"):
        HloCache(str(tmp_path)).path("../x")


# --- staged entries: paths from records stay in their folder ------------------------------------------


def _stage(tmp_path, hlo_file: str | None = "graph.hlo"):
    meta = _meta()
    meta.stage, meta.artifact_file, meta.hlo_file = "captured", "", "graph.hlo"
    write_staged(str(tmp_path / "capture"), meta, "module {}\n")
    path = tmp_path / "capture" / KEY / "metadata.json"
    doc = json.loads(path.read_text())
    doc["hlo_file"] = hlo_file
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "hlo_file, problem",
    [("/etc/hostname", "absolute path"), ("../../secret.txt", "'..'"), ("sub/../../x", "'..'")],
)
def test_a_staged_hlo_file_outside_its_entry_is_refused_without_echoing_it(tmp_path, hlo_file, problem):
    (tmp_path / "secret.txt").write_text("TOP SECRET LINE\n")
    meta_path = _stage(tmp_path, hlo_file)
    with pytest.raises(RecordPathError) as info:
        read_staged(str(tmp_path / "capture"))
    text = str(info.value)
    assert str(meta_path) in text and "'hlo_file'" in text and problem in text
    assert hlo_file not in text and "TOP SECRET" not in text


def test_a_staged_hlo_file_that_links_outside_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("TOP SECRET LINE\n")
    _stage(tmp_path, "link.hlo")
    os.symlink(tmp_path / "secret.txt", tmp_path / "capture" / KEY / "link.hlo")
    with pytest.raises(RecordPathError, match="resolves outside its folder"):
        read_staged(str(tmp_path / "capture"))


def test_a_staged_hlo_file_that_is_a_fifo_is_an_error_not_a_hang(tmp_path):
    _stage(tmp_path)
    _fifo(tmp_path / "capture" / KEY / "graph.hlo")
    with pytest.raises(MetadataError, match="not a regular file"):
        _in_time(lambda: read_staged(str(tmp_path / "capture")))


def test_a_staged_entry_reads_back_when_its_file_name_is_plain(tmp_path):
    _stage(tmp_path)
    (entry,) = read_staged(str(tmp_path / "capture"))
    assert entry.hlo == "module {}\n"


def test_confined_accepts_a_plain_name_and_names_the_field(tmp_path):
    assert confined(str(tmp_path), "a.hlo", record="r", field="f") == os.path.join(str(tmp_path), "a.hlo")
    with pytest.raises(RecordPathError, match=r"r: field 'f' is not a file name"):
        confined(str(tmp_path), 3, record="r", field="f")


def test_an_hlo_cache_folder_that_is_a_link_to_ones_own_folder_is_used(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "hlo")
    cache = HloCache(str(tmp_path / "hlo"))
    assert cache.put(KEY, _lowered()) and cache.get(KEY).hlo == "module {}\n"
