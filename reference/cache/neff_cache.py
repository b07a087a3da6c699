"""The persistent, content-addressed artifact ("NEFF") cache, its compile locks and failure records.

Layout under the cache directory (``TORCH_NEURONX_NEFF_CACHE_DIR``, possibly a shared mount)::

    <key>/model.neff          the compiled artifact (an IREE VM flatbuffer)
    <key>/metadata.json       ArtifactMetadata (schema.py): key components, compiler arguments,
                              versions, artifact size and sha256, compile time, and a checksum of
                              the metadata itself (``extra.metadata_sha256``)
    .failures/<key>.json      the record of a failed compile (failures.py)
    .tmp-<key>-<host>-<pid>-<n>/   an entry being written (never read)

Publication is atomic: an entry is written into a temporary directory beside its final place and
renamed into place, so a reader sees no entry or a whole one. Every read checks the metadata's own
checksum and the artifact's size and sha256; an entry that fails is treated as a miss and, by the
process holding the key's lock, evicted with a warning and recompiled.

Locks live under ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` (a local POSIX filesystem; flock on NFS or
Lustre is unreliable), one per key, taken with ``filelock`` (``flock(2)``): the kernel drops a lock
when its holder dies, so a crashed compile never blocks anyone. Beside each held lock a small
``<key>.holder`` file names the holder (pid, host, graph, since when) so a timeout can say who.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass
from typing import Any

from reference.core.diagnostics import warn_user
from reference.cache.auth import sign, verify
from reference.cache.errors import CacheFallbackWarning, CacheLockTimeoutError, CacheWriteError
from reference.cache.failures import FailureRecords
from reference.cache.records import INT, NUM, STR, RecordRejected, clamp_time, read_record, read_regular
from reference.core.atomic import write_atomic
from reference.core.diagnostics import Heartbeat
from reference.core.schema import ArtifactMetadata, MetadataError

log = logging.getLogger(__name__)

ARTIFACT_FILE = "model.neff"
METADATA_FILE = "metadata.json"
#: The entry's HMAC (hex), present when the publishing process had ``TORCH_NEURONX_CACHE_HMAC_KEY``.
HMAC_FILE = "entry.hmac"
_HOLDER_SCHEMA = {"pid": INT, "since": NUM}
_HOLDER_OPTIONAL = {"host": STR, "graph_name": STR, "key": STR}
TMP_PREFIX = ".tmp-"
DEFAULT_LOCK_TIMEOUT_S = 1200
_counter = itertools.count()


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class CacheEntry:
    key: str
    path: str
    metadata: ArtifactMetadata
    artifact: bytes


def _metadata_checksum(meta: ArtifactMetadata) -> str:
    saved = meta.extra.pop("metadata_sha256", None)
    try:
        return hashlib.sha256(meta.to_json().encode()).hexdigest()
    finally:
        if saved is not None:
            meta.extra["metadata_sha256"] = saved


class CompileLock:
    """The held lock of one key; release it with :meth:`release` (or use it as a context)."""

    def __init__(self, lock, holder_path: str) -> None:
        self._lock = lock
        self.holder_path = holder_path

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.holder_path)
        self._lock.release()

    def __enter__(self) -> "CompileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class NeffCache:
    """One artifact cache directory plus its local lock directory."""

    def __init__(
        self, root: str, local_root: str | None = None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S,
        hmac_key: bytes | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.local_root = os.path.abspath(local_root) if local_root else None
        self.lock_timeout = lock_timeout
        #: entries are signed and checked under this key (``None``: not authenticated); a compile
        #: request's :class:`~reference.core.folders.CacheRoots` carry ``TORCH_NEURONX_CACHE_HMAC_KEY``
        self.hmac_key = hmac_key
        self.failures = FailureRecords(os.path.join(self.root, ".failures"))

    # --- paths ---------------------------------------------------------------------------------
    def entry_dir(self, key: str) -> str:
        return os.path.join(self.root, key)

    def lock_path(self, key: str) -> str:
        base = self.local_root or os.path.join(self.root, ".locks")
        return os.path.join(base, "locks", f"{key}.lock")

    def holder_path(self, key: str) -> str:
        return self.lock_path(key)[: -len(".lock")] + ".holder"

    def keys(self) -> list[str]:
        """Keys with a published entry (not verified; :meth:`get` verifies)."""
        if not os.path.isdir(self.root):
            return []
        return sorted(
            d for d in os.listdir(self.root)
            if not d.startswith(".") and os.path.isfile(os.path.join(self.root, d, METADATA_FILE))
        )

    def scratch_dirs(self) -> list[str]:
        """Temporary directories of entries being written (or left by a writer that died)."""
        if not os.path.isdir(self.root):
            return []
        return sorted(os.path.join(self.root, d) for d in os.listdir(self.root) if d.startswith(TMP_PREFIX))

    # --- reading -------------------------------------------------------------------------------
    def get(self, key: str, *, evict: bool = True) -> CacheEntry | None:
        """The verified entry for ``key``, or ``None``.

        An entry that fails verification is a miss; with ``evict`` (the default) it is also moved
        out of the way with a warning. Callers that do not hold the key's lock pass
        ``evict=False``, so they never remove an entry another process is re-publishing.
        """
        path = self.entry_dir(key)
        meta_path = os.path.join(path, METADATA_FILE)
        if os.path.islink(path):
            return self._reject(key, "the entry folder is a symbolic link", evict)
        try:
            raw = read_regular(meta_path)
        except RecordRejected as why:
            return self._reject(key, f"{METADATA_FILE} is not usable: {why}", evict)
        if raw is None:
            return None
        try:
            meta = ArtifactMetadata.from_json(raw.decode("utf-8"), source=meta_path)
        except (MetadataError, TypeError, UnicodeDecodeError) as exc:
            return self._reject(key, f"corrupt metadata ({exc})", evict)
        wrong = _wrong_types(meta)
        if wrong:
            return self._reject(key, f"corrupt metadata (field {wrong!r} has the wrong type or value)", evict)
        recorded = meta.extra.get("metadata_sha256")
        if recorded is not None and recorded != _metadata_checksum(meta):
            return self._reject(key, "metadata does not match its own checksum", evict)
        if meta.cache_key != key:
            return self._reject(key, f"metadata names key {meta.cache_key!r}", evict)
        try:
            artifact = read_regular(os.path.join(path, ARTIFACT_FILE))
        except RecordRejected as why:
            return self._reject(key, f"the artifact is not usable: {why}", evict)
        if artifact is None:
            return self._reject(key, "the artifact is missing", evict)
        if len(artifact) != meta.artifact_size or hashlib.sha256(artifact).hexdigest() != meta.artifact_sha256:
            return self._reject(key, "artifact does not match its recorded size and checksum", evict)
        if self.hmac_key is not None and not self._authentic(key, path, raw, artifact):
            return self._reject(
                key, "the entry does not carry a valid HMAC under TORCH_NEURONX_CACHE_HMAC_KEY "
                "(written without the key, with another key, or altered)", evict,
            )
        return CacheEntry(key, path, meta, artifact)

    def _authentic(self, key: str, path: str, metadata: bytes, artifact: bytes) -> bool:
        try:
            recorded = read_regular(os.path.join(path, HMAC_FILE), limit=1024)
        except RecordRejected:
            return False
        if recorded is None:
            return False
        return verify(self.hmac_key, recorded.decode("ascii", "replace").strip(), b"neff-entry", key.encode(), metadata, artifact)

    def _reject(self, key: str, why: str, evict: bool) -> None:
        if evict:
            self.evict(key, why)
        else:
            log.info("NEFF cache entry %s is not usable yet: %s", key, why)
        return None

    def evict(self, key: str, why: str) -> bool:
        """Move an entry out of the way (then delete it); warns. False if there was none."""
        warn_user(f"NEFF cache entry {key} evicted: {why}; it will be recompiled", CacheFallbackWarning)
        trash = os.path.join(self.root, f"{TMP_PREFIX}evicted-{key}-{_host_tag()}-{os.getpid()}-{next(_counter)}")
        try:
            os.rename(self.entry_dir(key), trash)
        except OSError:
            return False
        if os.path.islink(trash):  # a planted link: remove the link, never what it points at
            os.unlink(trash)
        else:
            shutil.rmtree(trash, ignore_errors=True)
        return True

    # --- writing -------------------------------------------------------------------------------
    def put(self, key: str, artifact: bytes, metadata: ArtifactMetadata) -> CacheEntry:
        """Publish an entry atomically and return it; if a valid entry is already there, keep it.

        Raises :class:`CacheWriteError` when the directory cannot be written (read-only, full);
        nothing partial is left under the key's name.
        """
        metadata.cache_key = key
        metadata.artifact_file = ARTIFACT_FILE
        metadata.artifact_size = len(artifact)
        metadata.artifact_sha256 = hashlib.sha256(artifact).hexdigest()
        metadata.extra.pop("metadata_sha256", None)
        metadata.extra["metadata_sha256"] = _metadata_checksum(metadata)
        tmp = os.path.join(self.root, f"{TMP_PREFIX}{key}-{_host_tag()}-{os.getpid()}-{next(_counter)}")
        final = self.entry_dir(key)
        try:
            os.makedirs(self.root, exist_ok=True)
            self._sweep(key)
            os.mkdir(tmp)
            meta_bytes = metadata.to_json().encode()
            _write(os.path.join(tmp, ARTIFACT_FILE), artifact)
            _write(os.path.join(tmp, METADATA_FILE), meta_bytes)
            if self.hmac_key is not None:
                _write(os.path.join(tmp, HMAC_FILE), sign(self.hmac_key, b"neff-entry", key.encode(), meta_bytes, artifact).encode())
            _fsync_dir(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                existing = self.get(key)  # evicts a corrupt one
                if existing is not None:
                    return existing  # someone else published the same key first
                os.rename(tmp, final)
            _fsync_dir(self.root)
        except OSError as exc:
            raise CacheWriteError("NEFF cache entry", final, exc) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(key, final, metadata, artifact)

    def _sweep(self, key: str) -> None:
        """Delete temporary directories of ``key`` left by writers on this host that have died."""
        prefix = f"{TMP_PREFIX}{key}-{_host_tag()}-"
        for name in os.listdir(self.root):
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    # --- locking -------------------------------------------------------------------------------
    def acquire(self, key: str, *, graph_name: str | None = None, timeout: float | None = None) -> CompileLock:
        """Take the compile lock of ``key``, waiting up to ``timeout`` seconds (default: the
        cache's ``lock_timeout``).

        Raises :class:`CacheLockTimeoutError` naming the key and the holder when the wait runs out,
        and :class:`CacheWriteError` when the lock directory cannot be used at all.
        """
        import filelock

        timeout = self.lock_timeout if timeout is None else timeout
        path = self.lock_path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            lock = filelock.FileLock(path, timeout=timeout)
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:  # another process compiles this key: say so while waiting
                with Heartbeat(lambda s: f"waiting for the lock on key {key} held by {self.describe_holder(key)} ({s:.0f} s)"):
                    lock.acquire()
        except filelock.Timeout:
            raise CacheLockTimeoutError(key, path, timeout, self.describe_holder(key)) from None
        except OSError as exc:
            raise CacheWriteError("compile lock", path, exc) from exc
        return self._held(lock, key, graph_name)

    def _held(self, lock: Any, key: str, graph_name: str | None) -> CompileLock:
        """``lock`` (acquired) as a :class:`CompileLock`, with a note of who holds it."""
        holder = self.holder_path(key)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "key": key, "graph_name": graph_name, "since": time.time()}
        try:
            write_atomic(holder, json.dumps(record))
        except OSError:
            pass  # the holder note is for error messages only
        return CompileLock(lock, holder)

    def try_acquire(self, key: str, *, graph_name: str | None = None) -> CompileLock | None:
        """Take the compile lock of ``key`` if nobody holds it, else ``None`` at once (a caller
        that claims keys before sending them elsewhere to compile, and polls the ones another
        process holds). The kernel drops the lock when its holder dies, so a claim abandoned by a
        killed process is free again. Raises :class:`CacheWriteError` when the lock directory
        cannot be used at all."""
        import filelock

        path = self.lock_path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            lock = filelock.FileLock(path)
            lock.acquire(timeout=0)
        except filelock.Timeout:
            return None
        except OSError as exc:
            raise CacheWriteError("compile lock", path, exc) from exc
        return self._held(lock, key, graph_name)

    def lock(self, key: str, *, graph_name: str | None = None, timeout: float | None = None) -> CompileLock:
        """Alias of :meth:`acquire`, for ``with cache.lock(key): ...``."""
        return self.acquire(key, graph_name=graph_name, timeout=timeout)

    def holder(self, key: str) -> dict | None:
        """The holder note of ``key``'s lock, if one is there (it may be stale: check ``pid``).
        A damaged note is absent (one warning naming it); a ``since`` in the future reads as now."""
        note = read_record(self.holder_path(key), "lock holder note", _HOLDER_SCHEMA, _HOLDER_OPTIONAL)
        if note is not None:
            note["since"] = clamp_time(note["since"]) or time.time()
        return note

    def holders(self) -> list[dict]:
        """Holder notes of every lock that has one (compiles in progress, or stale notes)."""
        base = os.path.dirname(self.lock_path("x"))
        out = []
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(base)):
                if name.endswith(".holder"):
                    note = self.holder(name[: -len(".holder")])
                    if note:
                        out.append(note)
        return out

    def describe_holder(self, key: str) -> str:
        note = self.holder(key)
        if not note:
            return "a process that left no holder note"
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(note["since"]))
        text = f"pid {note.get('pid')} on {note.get('host')} (graph {note.get('graph_name')!r}, since {since})"
        if note.get("host") == socket.gethostname() and 0 < note["pid"] < 1 << 31 and not _pid_alive(note["pid"]):
            text += " [that process has exited; its note is stale]"
        return text


def _wrong_types(meta: ArtifactMetadata) -> str | None:
    """The first metadata field a reader relies on that has the wrong type, or ``None``."""
    if meta.artifact_file != ARTIFACT_FILE:
        return "artifact_file"  # always this name: an entry names no other file
    if not isinstance(meta.artifact_size, int) or isinstance(meta.artifact_size, bool):
        return "artifact_size"
    if not isinstance(meta.artifact_sha256, str):
        return "artifact_sha256"
    if not isinstance(meta.extra, dict):
        return "extra"
    if not isinstance(meta.cache_key, str) or not isinstance(meta.graph_name, str):
        return "cache_key" if not isinstance(meta.cache_key, str) else "graph_name"
    if not isinstance(meta.input_specs, list) or not isinstance(meta.output_specs, list):
        return "input_specs"
    return None


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
