"""``parallel_compile``'s Ray executor: each distinct staged graph built as one Ray task.

The local fork server (:func:`reference.flows.forked.run_forked`) stays the default; this module is
the strategy ``parallel_compile`` uses when ``NEURON_PARALLEL_COMPILE_EXECUTOR=ray`` or
``executor="ray"`` (or a :class:`RayExecutor`) asks for it. ``ray`` is imported only when a run
starts, so the reference imports without the ``cluster`` extra.

What crosses to a worker, and what comes back:

- a task receives the staged entry whole (its StableHLO text, metadata and strategy document, so a
  worker needs no access to the staging folder), the parsed compiler configuration, and the
  caller's build settings with the artifact cache switched off and no HMAC key: a worker builds
  through the one pipeline (:func:`reference.pipeline.build`) and never sees the secret;
- it returns the artifact as bytes with its metadata; the caller publishes it into its own cache,
  under the key's lock, atomically and signed when the caller has ``TORCH_NEURONX_CACHE_HMAC_KEY``
  (:meth:`reference.cache.neff_cache.NeffCache.put`). A worker runs what it is sent; the caller
  authenticates what it publishes, and a key the worker computed differently (another host, other
  tool versions) is refused by ``parallel_compile`` as a mismatch, never published.

Faults: a worker process that dies is retried by Ray (``max_retries``, bounded); a graph whose
compile raises is returned as an error (recorded under its key in the caller's failure records,
never retried: the compiler would fail the same way); a cluster that is lost mid-run raises
:class:`ClusterLostError` naming the graphs not compiled. Everything published before that is a
whole entry; nothing is half-published, since only the caller writes to its cache.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from reference.cache.staging import StagedGraph
from reference.compiler.driver import CompilerConfig
from reference.core.build_settings import BuildSettings
from reference.core.errors import NEFFCompilationError, NeuronBackendError
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.flows.forked import ChildOutcome, _picklable
from reference.pipeline import build, neff_cache, staged_context, staged_lowering

#: How long a run waits with no live node offering a CPU before it calls the cluster lost (seconds):
#: long enough for a node restarting, short enough that a stopped cluster is not a hang.
LOST_GRACE_S = 30.0
_POLL_S = 1.0


class ExecutorUnavailableError(NeuronBackendError):
    """The Ray executor was asked for where it cannot run: ``ray`` is not installed, or the
    cluster cannot be reached."""


class ClusterLostError(NeuronBackendError):
    """The Ray cluster went away during a run. ``not_compiled`` names the graphs (name and key)
    that were not built; the entries published before it are whole and stay."""

    def __init__(self, why: str, not_compiled: Sequence[str], published: int) -> None:
        listed = "\n".join(f"  {g}" for g in not_compiled)
        super().__init__(
            f"parallel_compile: the Ray cluster was lost ({why}); {len(not_compiled)} staged graph(s) were not "
            f"compiled ({published} published before it, each a whole entry):\n{listed}\n"
            "Restart the cluster (or unset RAY_ADDRESS for a local one) and run parallel_compile again: "
            "the graphs already published are cache hits."
        )
        self.not_compiled = list(not_compiled)
        self.published = published


@dataclass(frozen=True)
class RayExecutor:
    """Where and how the Ray executor runs.

    ``address``: the cluster (``None``: a local Ray started for this run with ``num_cpus`` CPUs,
    ``parallel_compile``'s ``workers`` when ``None``, and stopped after it; a Ray already
    initialized in this process is used as it is). ``max_retries``: how many times Ray runs a task
    again after its worker process died. ``prologue``: called in the worker with the graph's name
    before each build (a worker's own set-up; the fault tests use it to kill a worker).
    ``lost_after_s``: how long a run waits with no live node offering a CPU before it raises
    :class:`ClusterLostError`.
    """

    address: str | None = None
    num_cpus: int | None = None
    max_retries: int = 3
    prologue: Callable[[str], None] | None = None
    lost_after_s: float = LOST_GRACE_S

    def run(
        self,
        work: Sequence[tuple[str, str, StagedGraph, CompilerConfig]],
        *,
        settings: BuildSettings,
        workers: int,
        timeout: float | None,
        on_done: Callable[[int, ChildOutcome], None],
    ) -> list[ChildOutcome]:
        """Build ``(identity, key, entry, config)`` items (``key``: the one the caller computed) as
        Ray tasks, publish each artifact into the cache ``settings`` name as it arrives and call
        ``on_done(index, outcome)``; outcomes in order. A key already in the cache is a hit without
        a task; one with a failure record in its cool-down fails as the local build would."""
        ray = _import_ray()
        started = self._connect(ray, workers, [item[0] for item in work])
        try:
            return self._run(ray, work, settings, timeout, on_done)
        finally:
            if started:
                ray.shutdown()

    def _connect(self, ray, workers: int, identities: Sequence[str]) -> bool:
        if ray.is_initialized():
            return False
        try:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:  # "local": a fresh Ray of our own, whatever RAY_ADDRESS says (it was read already)
                ray.init(
                    address="local", num_cpus=self.num_cpus or workers, include_dashboard=False,
                    log_to_driver=False, logging_level="WARNING",
                )
        except Exception as exc:
            where = f"the cluster at {self.address!r} (RAY_ADDRESS)" if self.address else "a local Ray"
            raise ExecutorUnavailableError(
                f"parallel_compile: the ray executor could not start or reach {where}: {type(exc).__name__}: {exc}; "
                f"{len(identities)} staged graph(s) were not compiled. Check the cluster (`ray status`), or set "
                "NEURON_PARALLEL_COMPILE_EXECUTOR=local to compile on this machine"
            ) from exc
        return True

    def _run(self, ray, work, settings: BuildSettings, timeout, on_done) -> list[ChildOutcome]:
        import ray.exceptions as rx

        remote = ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)(_build_in_task)
        cache = neff_cache(settings.cache)
        task_settings = worker_settings(settings)
        outcomes: list[ChildOutcome | None] = [None] * len(work)
        queue = list(range(len(work)))
        running: dict[Any, tuple[int, float]] = {}
        published = [0]
        lost_since: float | None = None

        def finish(i: int, outcome: ChildOutcome) -> None:
            outcomes[i] = outcome
            on_done(i, outcome)

        def not_compiled() -> list[str]:
            return [work[i][0] for i in range(len(work)) if outcomes[i] is None]

        for i, (identity, key, entry, _) in enumerate(work):  # what the cache already answers
            if cache is None:
                continue
            if cache.get(key, evict=False) is not None:
                finish(i, ChildOutcome(identity, True, value={"key": key, "cache_hit": True, "compile_us": 0}))
                continue
            try:
                cache.failures.check(key, graph_name=entry.graph_name)
            except NeuronBackendError as exc:
                finish(i, ChildOutcome(identity, False, error_type=type(exc).__name__, error=str(exc), exception=exc))
        queue = [i for i in queue if outcomes[i] is None]

        try:
            while queue or running:
                # as many in flight as the cluster has CPUs, so a task's timeout counts from about
                # when it starts, not from when it was queued behind the others
                room = max(1, int(ray.cluster_resources().get("CPU", 1)))
                while queue and len(running) < room:
                    i = queue.pop(0)
                    identity, key, entry, config = work[i]
                    ref = remote.remote(entry, config, task_settings, self.prologue)
                    running[ref] = (i, time.monotonic())
                ready, _ = ray.wait(list(running), num_returns=1, timeout=_POLL_S)
                now = time.monotonic()
                for ref in ready:
                    i, start = running.pop(ref)
                    identity, key, entry, _ = work[i]
                    try:
                        msg = ray.get(ref)
                    except rx.WorkerCrashedError as exc:
                        finish(i, ChildOutcome(
                            identity, False, error_type="WorkerCrashedError",
                            error=f"its Ray worker died {self.max_retries + 1} time(s) (max_retries={self.max_retries}): {exc}",
                            wall_s=now - start,
                        ))
                        continue
                    except rx.RayTaskError as exc:  # raised outside the build (unpickling its arguments)
                        finish(i, ChildOutcome(identity, False, error_type=type(exc.cause).__name__ if exc.cause else "RayTaskError",
                                               error=str(exc.cause or exc), wall_s=now - start))
                        continue
                    finish(i, _outcome(identity, key, entry, msg, cache, published))
                for ref, (i, start) in list(running.items()):
                    if timeout is not None and now - start >= timeout:
                        ray.cancel(ref, force=True)
                        del running[ref]
                        finish(i, ChildOutcome(work[i][0], False, timed_out=True, wall_s=now - start))
                if ready:
                    lost_since = None
                elif _live_cpus(ray) == 0:
                    lost_since = lost_since or now
                    if now - lost_since >= self.lost_after_s:
                        raise ClusterLostError(
                            f"no live node has offered a CPU for {self.lost_after_s:.0f} s", not_compiled(), published[0]
                        )
                else:
                    lost_since = None
        except ClusterLostError:
            raise
        except (rx.RaySystemError, rx.RpcError, rx.NodeDiedError, rx.LocalRayletDiedError, ConnectionError) as exc:
            raise ClusterLostError(f"{type(exc).__name__}: {exc}", not_compiled(), published[0]) from exc
        return [o for o in outcomes if o is not None]


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise ExecutorUnavailableError(
            "parallel_compile: the ray executor (NEURON_PARALLEL_COMPILE_EXECUTOR=ray or executor='ray') needs the "
            f"ray package, which is not importable here ({exc}); install the project's cluster extra "
            "(pip install -e '.[cluster]'), or use the local executor"
        ) from exc
    return ray


def _live_cpus(ray) -> float:
    try:
        return sum(n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive"))
    except Exception:  # the control plane itself is gone
        return 0


def worker_settings(settings: BuildSettings) -> BuildSettings:
    """The settings a worker builds under: the caller's, with no artifact cache (the caller's cache
    is the one that gets the entry; a worker's folders may not even be on the same host), no HMAC
    key (a worker never holds the secret) and no c10d store coordination (a task is no rank)."""
    cache = dataclasses.replace(settings.cache, disabled=True, hmac_key=None)
    return dataclasses.replace(settings, cache=cache, store_compile=False)


def _build_in_task(entry: StagedGraph, config: CompilerConfig, settings: BuildSettings, prologue) -> tuple:
    """One Ray task: the staged entry through the one pipeline. Each task holds one CPU, so the
    compiler runs on one thread beside the others on the node."""
    if prologue is not None:
        prologue(entry.graph_name)
    start = time.monotonic()
    try:
        built = build(staged_lowering(entry), staged_context(entry, config.on_one_thread(), settings))
    except BaseException as exc:  # everything goes back to the caller, which decides
        return ("err", type(exc).__name__, str(exc), traceback.format_exc(), _picklable(exc), time.monotonic() - start)
    return ("ok", built.key, built.artifact, built.metadata.to_json(), built.metadata.compile_time_us, time.monotonic() - start)


def _outcome(identity: str, key: str, entry: StagedGraph, msg: tuple, cache, published: list[int]) -> ChildOutcome:
    """What a task sent back, as the fork server's outcome: an artifact published first, a compile
    error recorded under its key (as the pipeline records one)."""
    if msg[0] == "err":
        _, error_type, error, tb, exc, task_s = msg
        if cache is not None and isinstance(exc, NEFFCompilationError):
            try:
                cache.failures.record(key, graph_name=entry.graph_name, error=exc)
            except OSError:
                pass  # the report still carries the failure
        return ChildOutcome(identity, False, error_type=error_type, error=error, traceback=tb, exception=exc, wall_s=task_s)
    _, built_key, artifact, metadata, compile_us, task_s = msg
    value = {"key": built_key, "cache_hit": False, "compile_us": compile_us}
    if cache is None or built_key != key:  # a mismatched key is reported by parallel_compile, never published
        return ChildOutcome(identity, True, value=value, wall_s=task_s)
    try:
        meta = ArtifactMetadata.from_json(metadata, source=f"the Ray task's metadata of {key}")
        with cache.acquire(key, graph_name=entry.graph_name):
            if cache.get(key) is None:  # another process may have published it meanwhile
                cache.failures.clear(key)
                cache.put(key, artifact, meta)
    except (NeuronBackendError, MetadataError, OSError) as exc:
        return ChildOutcome(
            identity, False, error_type=type(exc).__name__,
            error=f"compiled on the cluster, but not published into this cache: {exc}", exception=exc, wall_s=task_s,
        )
    published[0] += 1
    return ChildOutcome(identity, True, value=value, wall_s=task_s)
