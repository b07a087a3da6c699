"""Compile coordination over the c10d store: one compile per world with no shared filesystem.

With ``NEURON_LIBTORCH_STORE_COMPILE=1`` and a default process group up, a rank that misses its
own artifact cache for a key does not compile at once. It claims the key on the process group's
store (``compare_set``: the first rank to miss wins; in an SPMD world that is whichever rank gets
there first, usually every rank within moments). The claiming rank compiles, beating a heartbeat
on the store while it does, and publishes the artifact, its metadata and the artifact's SHA-256
on the store. Every other rank waits for the key, fetches the artifact through the store, checks
the digest and returns it for its own cache: the compiler runs once for the world, whether the
ranks share a filesystem or not.

Waits are bounded: a waiting rank raises :class:`StoreCompileError`, naming the key and the rank
that was to compile it, when that rank's compile failed, when its heartbeat stops for
``heartbeat_timeout_s`` (the rank died or hangs; measured on the waiter's own clock, so hosts need
no synchronised clocks), or when ``NEURON_LIBTORCH_STORE_WAIT_TIMEOUT`` passes.

The store carries, per key, under ``neuron/compile/<key>/``: ``claim`` (the compiling rank),
``beat`` (a counter), ``artifact/<i>`` (the bytes, in chunks of at most :data:`CHUNK_BYTES`),
``chunks`` (their number), ``metadata`` (JSON), ``done`` (the digest) or ``failed`` (the error,
cut to :data:`MAX_ERROR_CHARS`). The artifact is chunked because torch's default store server
(the libuv ``TCPStore`` backend) refuses any value over 8 MiB and drops the connection that sent
it. The values stay in the store's memory for the life of the job: an artifact costs its size
there.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Callable

from reference.core.errors import NeuronBackendError

PREFIX = "neuron/compile/"
#: The largest value put on the store: half the libuv TCPStore server's 8 MiB limit per value.
CHUNK_BYTES = 4 << 20
MAX_ERROR_CHARS = 64 << 10
HEARTBEAT_S = 1.0
HEARTBEAT_TIMEOUT_S = 30.0


class StoreCompileError(NeuronBackendError):
    """A rank waited on the c10d store for another rank's compile of a key, and it did not come."""

    def __init__(self, key: str, graph_name: str, compiler_rank: int, reason: str) -> None:
        super().__init__(
            f"graph {graph_name!r}: rank {compiler_rank} was to compile key {key} and publish it on the c10d "
            f"store, but {reason}. Check that rank's output; to compile on every rank instead, unset "
            "NEURON_LIBTORCH_STORE_COMPILE"
        )
        self.key = key
        self.graph_name = graph_name
        self.compiler_rank = compiler_rank
        self.reason = reason


class StoreCoordinator:
    """One compile per key for every rank that shares ``store`` (see the module doc)."""

    def __init__(
        self, store, rank: int, *, timeout_s: float, heartbeat_s: float = HEARTBEAT_S,
        heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S, poll_s: float = 0.05,
    ) -> None:
        self.store = store
        self.rank = int(rank)
        self.timeout_s = float(timeout_s)
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.poll_s = poll_s

    def _k(self, key: str, what: str) -> str:
        return f"{PREFIX}{key}/{what}"

    def build(self, key: str, graph_name: str, compile: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str, bool]:
        """``(artifact, metadata JSON, compiled_here)``: ``compile()`` runs here when this rank wins
        the key's claim; otherwise the winner's artifact, fetched and checked. Raises
        :class:`StoreCompileError` (waiting rank) or what ``compile`` raised (compiling rank)."""
        owner = int(self.store.compare_set(self._k(key, "claim"), "", str(self.rank)).decode())
        if owner == self.rank:
            return (*self._compile(key, compile), True)
        return (*self._wait(key, graph_name, owner), False)

    def _compile(self, key: str, compile: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                self.store.add(self._k(key, "beat"), 1)

        self.store.add(self._k(key, "beat"), 1)
        beater = threading.Thread(target=beat, name=f"neuron-store-heartbeat-{key[:8]}", daemon=True)
        beater.start()
        try:
            artifact, metadata = compile()
        except BaseException as exc:
            self.store.set(self._k(key, "failed"), f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])
            raise
        finally:
            stop.set()
            beater.join()
        chunks = range(0, max(1, len(artifact)), CHUNK_BYTES)
        for i, at in enumerate(chunks):
            self.store.set(self._k(key, f"artifact/{i}"), artifact[at:at + CHUNK_BYTES])
        self.store.set(self._k(key, "chunks"), str(len(chunks)))
        self.store.set(self._k(key, "metadata"), metadata)
        self.store.set(self._k(key, "done"), hashlib.sha256(artifact).hexdigest())  # last: readers wait for it
        return artifact, metadata

    def _wait(self, key: str, graph_name: str, owner: int) -> tuple[bytes, str]:
        start = time.monotonic()
        last_beat, beat_seen_at = None, start
        done, failed, beat = self._k(key, "done"), self._k(key, "failed"), self._k(key, "beat")
        while not self.store.check([done]):
            now = time.monotonic()
            if self.store.check([failed]):
                raise StoreCompileError(key, graph_name, owner, f"its compile failed: {self.store.get(failed).decode()}")
            current = self.store.add(beat, 0)  # reads the counter without blocking
            if current != last_beat:
                last_beat, beat_seen_at = current, now
            elif now - beat_seen_at > self.heartbeat_timeout_s:
                raise StoreCompileError(
                    key, graph_name, owner,
                    f"its heartbeat stopped {now - beat_seen_at:.0f} s ago (the rank died or hangs) after {now - start:.0f} s of waiting",
                )
            if now - start > self.timeout_s:
                raise StoreCompileError(
                    key, graph_name, owner, f"it did not finish within {self.timeout_s:g} s (NEURON_LIBTORCH_STORE_WAIT_TIMEOUT)"
                )
            time.sleep(self.poll_s)
        chunks = int(self.store.get(self._k(key, "chunks")).decode())
        artifact = b"".join(self.store.get(self._k(key, f"artifact/{i}")) for i in range(chunks))
        digest = self.store.get(done).decode()
        if hashlib.sha256(artifact).hexdigest() != digest:
            raise StoreCompileError(key, graph_name, owner, "the artifact fetched through the store does not match its digest")
        return artifact, self.store.get(self._k(key, "metadata")).decode()


def store_coordinator(enabled: bool, *, timeout_s: int) -> StoreCoordinator | None:
    """The coordinator of the default process group, or ``None`` when store coordination is off
    (``enabled``: a compile request's ``store_compile``, from ``NEURON_LIBTORCH_STORE_COMPILE``) or
    no process group is up. ``timeout_s``: how long a rank waits for another's compile
    (``NEURON_LIBTORCH_STORE_WAIT_TIMEOUT``)."""
    if not enabled:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    # The default group's store (what init_process_group rendezvoused on); torch names it privately.
    store = dist.distributed_c10d._get_default_store()
    return StoreCoordinator(store, dist.get_rank(), timeout_s=timeout_s)
