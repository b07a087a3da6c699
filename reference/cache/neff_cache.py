"""The persistent, content-addressed artifact ("NEFF") cache.

Layout under the cache directory::

    <key>/model.neff       the compiled artifact (an IREE VM flatbuffer)
    <key>/metadata.json    ArtifactMetadata (schema.py), with the artifact's size and sha256

An entry is published atomically: it is written into a temporary directory beside its final
place and renamed into place, so a reader sees either no entry or a whole one. A reader checks the
artifact against the size and checksum in the metadata; an entry that fails the check is evicted
with a warning and treated as a miss.

Locks live in a separate local directory (one file per key, ``filelock``), because lock semantics
on network filesystems are unreliable while the artifacts themselves may live on one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from dataclasses import dataclass

from reference.compile.schema import ArtifactMetadata, MetadataError

log = logging.getLogger(__name__)

ARTIFACT_FILE = "model.neff"
METADATA_FILE = "metadata.json"


@dataclass
class CacheEntry:
    key: str
    path: str
    metadata: ArtifactMetadata
    artifact: bytes


class NeffCache:
    def __init__(self, root: str, local_root: str | None = None) -> None:
        self.root = os.path.abspath(root)
        self.local_root = os.path.abspath(local_root) if local_root else None

    def entry_dir(self, key: str) -> str:
        return os.path.join(self.root, key)

    def lock_path(self, key: str) -> str:
        base = self.local_root or os.path.join(self.root, ".locks")
        return os.path.join(base, "locks", f"{key}.lock")

    def keys(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        return sorted(
            d for d in os.listdir(self.root)
            if not d.startswith(".") and os.path.isfile(os.path.join(self.root, d, METADATA_FILE))
        )

    def get(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key``, or ``None`` (a corrupt entry is evicted)."""
        path = self.entry_dir(key)
        meta_path = os.path.join(path, METADATA_FILE)
        if not os.path.isfile(meta_path):
            return None
        try:
            with open(meta_path, encoding="utf-8") as fh:
                meta = ArtifactMetadata.from_json(fh.read(), source=meta_path)
            with open(os.path.join(path, meta.artifact_file), "rb") as fh:
                artifact = fh.read()
        except (OSError, MetadataError) as exc:
            self._evict(key, f"unreadable entry ({exc})")
            return None
        if meta.cache_key != key:
            self._evict(key, f"metadata names key {meta.cache_key!r}")
            return None
        if len(artifact) != meta.artifact_size or hashlib.sha256(artifact).hexdigest() != meta.artifact_sha256:
            self._evict(key, "artifact does not match its recorded size and checksum")
            return None
        return CacheEntry(key, path, meta, artifact)

    def put(self, key: str, artifact: bytes, metadata: ArtifactMetadata) -> CacheEntry:
        """Publish an entry atomically; if another process published first, keep theirs."""
        metadata.cache_key = key
        metadata.artifact_file = ARTIFACT_FILE
        metadata.artifact_size = len(artifact)
        metadata.artifact_sha256 = hashlib.sha256(artifact).hexdigest()
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".tmp-{key}-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        try:
            _write(os.path.join(tmp, ARTIFACT_FILE), artifact)
            _write(os.path.join(tmp, METADATA_FILE), metadata.to_json().encode())
            final = self.entry_dir(key)
            try:
                os.rename(tmp, final)
            except OSError:
                # Someone else published the same key first (or a stale entry sits there).
                if self.get(key) is None:
                    shutil.rmtree(final, ignore_errors=True)
                    os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return CacheEntry(key, self.entry_dir(key), metadata, artifact)

    def _evict(self, key: str, why: str) -> None:
        log.warning("NEFF cache entry %s evicted: %s; it will be recompiled", key, why)
        path = self.entry_dir(key)
        trash = os.path.join(self.root, f".evicted-{key}-{uuid.uuid4().hex}")
        try:
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
