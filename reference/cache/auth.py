"""Authenticated cache entries: an HMAC-SHA256 over what an entry holds, under a secret key.

The checksums in an entry's metadata catch damage, not intent: whoever can write the cache folder
can swap an artifact and write its new sha256 beside it. With ``TORCH_NEURONX_CACHE_HMAC_KEY``
set, every entry a process publishes carries an HMAC over its content under that key, and an
entry whose HMAC is missing or wrong is never used: an artifact entry is evicted and rebuilt, an
HLO or plan record is lowered or traced again, each with a warning. Without the key nothing is
authenticated (see docs/caching.md, "Trust").
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Mapping

#: The record field that carries a JSON record's HMAC.
HMAC_FIELD = "hmac_sha256"


def sign(key: bytes, *parts: bytes) -> str:
    """HMAC-SHA256 of ``parts``, each length-prefixed so no two part lists sign alike."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def verify(key: bytes, recorded: Any, *parts: bytes) -> bool:
    return isinstance(recorded, str) and hmac.compare_digest(recorded, sign(key, *parts))


def _canonical(record: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in record.items() if k != HMAC_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign_record(key: bytes | None, kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its HMAC field set (without a key: unchanged, and without the field)."""
    record.pop(HMAC_FIELD, None)
    if key is not None:
        record[HMAC_FIELD] = sign(key, kind.encode(), _canonical(record))
    return record


def record_verifies(key: bytes, kind: str, record: Mapping[str, Any]) -> bool:
    return verify(key, record.get(HMAC_FIELD), kind.encode(), _canonical(record))
