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
  atomically and signed when the caller has ``TORCH_NEURONX_CACHE_HMAC_KEY``
  (:meth:`reference.cache.neff_cache.NeffCache.put`). A worker runs what it is sent; the caller
  authenticates what it publishes, and a key the worker computed differently (another host, other
  tool versions) is refused by ``parallel_compile`` as a mismatch, never published.

One compile per key across callers: before a key is sent to the cluster the caller claims it with
the key's compile lock in its cache (the lock a local build takes), and holds the claim until the
entry is published or the graph has failed. A caller that finds a key claimed by another process
(another ``parallel_compile``, on Ray or local, or an in-process compile) does not send it: it
polls the claim, and when the claim is free reads the published entry (the graph is *served*,
``waited``); a claim whose holder died without publishing (the kernel drops the lock of a killed
process) is taken over and compiled here.

Every Ray failure a task can meet ends in one of the executor's outcomes (:func:`classify_failure`):

- the task's own worker process died (``WorkerCrashedError``), the node's memory monitor killed it
  (``OutOfMemoryError``), its result was lost (``ObjectLostError`` and its kinds:
  ``OwnerDiedError``, ``ObjectReconstructionFailedError``, ``ObjectFetchTimedOutError``), its worker
  failed to start (``RaySystemError``), or its node died while others live (``NodeDiedError``): the
  task is sent again, up to ``max_retries`` times. The retries are the executor's own (Ray's own
  ``max_retries`` of the task is 0), so each is observed and counted: the graph's failure record
  after the last says how many times it was sent and what each attempt met (an OOM names the graph
  and Ray's memory figure);
- the task could not be scheduled (``TaskUnschedulableError``), its runtime environment failed
  (``RuntimeEnvSetupError``), or the worker could not import the task (a module missing there):
  the graph's failure record, not retried (it would fail the same way);
- the graph's compile raised: its failure record, recorded under its key in the caller's cache as
  the pipeline records one, never retried;
- the task ran longer than ``timeout`` counted from when it started on its worker (not from when
  it was queued): cancelled, and a timed-out record;
- the cluster is gone: the head node does not answer for ``lost_after_s`` (checked with a plain
  TCP connect to its GCS port, so a lost head cannot block the check), no live node has offered a
  CPU for ``lost_after_s``, this process's own raylet died (``LocalRayletDiedError``), or tasks
  sent ``lost_after_s`` ago have not reported their start while a CPU stays idle (their messages
  do not reach this process): :class:`ClusterLostError` naming the graphs not compiled.

Whenever a run ends early (the cluster lost, an error in a progress callback, an interrupt), the
tasks still running are cancelled and the claims released. Everything published before is a whole
entry; nothing is half-published, since only the caller writes to its cache.

Bad input fails fast: an address where nothing accepts a connection is an
:class:`ExecutorUnavailableError` naming it within seconds (``ray.init`` alone retries for minutes),
and beside the first graphs one probe task imports the project's package on a worker: a cluster
whose workers lack it (or a module it needs) is a :class:`WorkerEnvironmentError` naming the module
and the node as soon as the probe answers (the tasks sent with it cannot even load their function
there, so nothing is compiled or published).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from reference.cache.errors import CacheLockTimeoutError
from reference.cache.staging import StagedGraph
from reference.compiler.driver import CompilerConfig
from reference.core.build_settings import BuildSettings
from reference.core.errors import NEFFCompilationError, NeuronBackendError
from reference.core.schema import ArtifactMetadata, MetadataError
from reference.flows.forked import ChildOutcome, _picklable
from reference.pipeline import build, neff_cache, staged_context, staged_lowering

#: How long a run waits with no live node offering a CPU, or with the head node not answering,
#: before it calls the cluster lost (seconds): long enough for a node restarting, short enough
#: that a stopped cluster is not a hang, and shorter than the minute after which Ray's own client
#: gives up on a lost head by ending the calling process.
LOST_GRACE_S = 30.0
#: How long the address check waits for a TCP connection to the cluster (seconds).
CONNECT_CHECK_S = 5.0
#: How long the worker probe may go unanswered before the run drops it (seconds).
PROBE_WAIT_S = 60.0
_POLL_S = 0.5
#: How often the run checks the cluster's health (the head's port, the live CPUs, tasks that never
#: reported their start; seconds). Each check is a few calls to the head, so checking on every
#: message would cost the caller and the head CPU the compiles need, for a verdict that waits
#: ``lost_after_s`` (30 s) anyway.
_CHECK_S = 1.0


class ExecutorUnavailableError(NeuronBackendError):
    """The Ray executor was asked for where it cannot run: ``ray`` is not installed, or the
    cluster cannot be reached."""


class WorkerEnvironmentError(ExecutorUnavailableError):
    """The cluster's workers cannot import what a compile task needs (the project's package, or a
    module it imports): ``module`` names it, ``node`` the node the probe ran on."""

    def __init__(self, module: str, node: str, detail: str) -> None:
        super().__init__(
            f"parallel_compile: a Ray worker on node {node} cannot import the module {module!r} that a compile "
            f"task needs ({detail}). Every node needs the project installed like the caller "
            "(pip install -e '.[cluster]' in the Python the cluster runs, or the package on the workers' "
            "PYTHONPATH), or use NEURON_PARALLEL_COMPILE_EXECUTOR=local"
        )
        self.module = module
        self.node = node


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
        self.why = why
        self.not_compiled = list(not_compiled)
        self.published = published


@dataclass(frozen=True)
class RayExecutor:
    """Where and how the Ray executor runs.

    ``address``: the cluster (``None`` or ``"local"``: a local Ray started for this run with
    ``num_cpus`` CPUs, ``parallel_compile``'s ``workers`` when ``None``, and stopped after it; a Ray
    already initialized in this process is used as it is). ``max_retries``: how many times a task
    is sent again after a system failure (its worker died, was killed for memory, its node died,
    its result was lost). ``prologue``: called in the worker with the graph's name before each
    build (a worker's own set-up; the fault tests use it to slow or kill a worker).
    ``lost_after_s``: how long a run waits with no live node offering a CPU, or the head not
    answering, before it raises :class:`ClusterLostError`.
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
        a task; one with a failure record in its cool-down fails as the local build would; one
        another process has claimed is waited for and served from its entry."""
        ray = _import_ray()
        started = self._connect(ray, workers, [item[0] for item in work])
        run = _Run(self, ray, work, settings, timeout, on_done)
        try:
            return run.run()
        finally:
            if started:
                # a lost head can make shutdown wait on it: bounded, the process goes on either way
                _bounded(ray.shutdown, 15.0)

    def _connect(self, ray, workers: int, identities: Sequence[str]) -> bool:
        if ray.is_initialized():
            return False
        local = self.address in (None, "local")
        where = "a local Ray" if local else f"the cluster at {self.address!r} (RAY_ADDRESS or RayExecutor.address)"
        try:
            if local:  # a fresh Ray of our own, whatever RAY_ADDRESS says (it was read already)
                ray.init(
                    address="local", num_cpus=self.num_cpus or workers, include_dashboard=False,
                    log_to_driver=False, logging_level="WARNING",
                )
            else:
                check_address(self.address)
                ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
        except ExecutorUnavailableError as exc:
            raise ExecutorUnavailableError(f"{exc}; {len(identities)} staged graph(s) were not compiled") from None
        except Exception as exc:
            raise ExecutorUnavailableError(
                f"parallel_compile: the ray executor could not start or reach {where}: {type(exc).__name__}: {exc}; "
                f"{len(identities)} staged graph(s) were not compiled. Check the cluster (`ray status`), or set "
                "NEURON_PARALLEL_COMPILE_EXECUTOR=local to compile on this machine"
            ) from exc
        return True


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


def _host_port(address: str) -> tuple[str, int] | None:
    """The host and port a Ray address connects to (``host:port`` or ``ray://host:port``);
    ``None`` for the addresses Ray resolves itself (``auto``)."""
    text = address.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_address(address: str, timeout: float = CONNECT_CHECK_S) -> None:
    """Raise :class:`ExecutorUnavailableError` naming ``address`` when nothing accepts a TCP
    connection there within ``timeout`` seconds (``ray.init`` alone would retry for minutes)."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            return
    except OSError as exc:
        raise ExecutorUnavailableError(
            f"parallel_compile: no Ray cluster answers at {address!r} (RAY_ADDRESS or RayExecutor.address): "
            f"a connection to {target[0]}:{target[1]} failed within {timeout:g} s ({exc}). Start the cluster "
            "(`ray start --head`), correct the address, or unset RAY_ADDRESS for a local Ray"
        ) from None


def _reachable(target: tuple[str, int] | None, timeout: float = 1.0) -> bool:
    if target is None:
        return True
    try:
        with socket.create_connection(target, timeout=timeout):
            return True
    except OSError:
        return False


def _bounded(fn: Callable[[], Any], seconds: float) -> None:
    """Call ``fn`` in a daemon thread and wait at most ``seconds`` for it (a Ray call that could
    wait on a lost head never holds the caller longer)."""
    thread = threading.Thread(target=lambda: _quietly(fn), daemon=True)
    thread.start()
    thread.join(seconds)


def _quietly(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:
        pass


def _live_cpus(ray) -> float:
    try:
        return sum(n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive"))
    except Exception:  # the control plane itself is gone
        return 0


def _gcs_target(ray) -> tuple[str, int] | None:
    try:
        return _host_port(ray.get_runtime_context().gcs_address)
    except Exception:
        return None


# --- the probe -------------------------------------------------------------------------------------


def send_probe(ray):
    """Send one small task that imports what a compile task imports, on a worker holding a CPU as a
    compile task does; its reference, for :func:`read_probe`. The probe's function travels by value
    (it is defined inside this function), so it runs even where the project's package is missing.
    It is sent beside the first graphs, not before them: on a Ray started for the run its worker's
    import (torch and the compiler stack, seconds) overlaps the other workers' own, and that
    worker takes the next graph already warm."""

    def probe() -> tuple:
        import importlib
        import socket as _socket

        try:
            importlib.import_module("reference.flows.ray_executor")
        except ImportError as exc:
            return ("missing", getattr(exc, "name", None) or "reference", f"{type(exc).__name__}: {exc}", _socket.gethostname())
        return ("ok", None, None, _socket.gethostname())

    return ray.remote(num_cpus=1, max_retries=1)(probe).remote()


def read_probe(ray, ref) -> None:
    """Raise :class:`WorkerEnvironmentError` naming the module when the finished probe ``ref``
    found a worker without it. A system failure of the probe itself says nothing about the
    package: the run meets and names such a failure per graph."""
    try:
        status, module, detail, host = ray.get(ref)
    except Exception:
        return
    if status == "missing":
        raise WorkerEnvironmentError(module, host, detail)


# --- what each Ray failure means -------------------------------------------------------------------

#: What :func:`classify_failure` answers.
RETRY, FAIL, LOST = "retry", "fail", "lost"
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")
_NODE_MEMORY = re.compile(r"was running was ([0-9.]+\s*[KMGT]?i?B\s*/\s*[0-9.]+\s*[KMGT]?i?B(?:\s*\([0-9.]+\))?)")
_TASK_MEMORY = re.compile(r"memory used=([0-9.]+\s*[KMGT]?i?B)")


def classify_failure(exc: BaseException, rx) -> tuple[str, str, str]:
    """What one Ray exception met by a compile task means: ``(verdict, error_type, why)``.

    ``verdict`` is :data:`RETRY` (a system failure of this attempt: send the task again while
    retries are left), :data:`FAIL` (this graph's failure record, no retry) or :data:`LOST` (the
    cluster is gone for this caller). ``rx`` is ``ray.exceptions`` (passed in, so importing this
    module never imports Ray). ``why`` says what happened in the caller's words."""
    name = type(exc).__name__
    if isinstance(exc, rx.OutOfMemoryError):
        text = str(exc)
        node, task = _NODE_MEMORY.search(text), _TASK_MEMORY.search(text)
        figure = ", ".join(
            part for part in (f"node memory {node.group(1)}" if node else "", f"the task used {task.group(1)}" if task else "") if part
        )
        return RETRY, name, f"its node ran out of memory and Ray's memory monitor killed the task ({figure or text.strip()})"
    if isinstance(exc, rx.WorkerCrashedError):
        return RETRY, name, "its Ray worker process died"
    if isinstance(exc, rx.NodeDiedError):
        return RETRY, name, f"its node died ({exc}); sent again to a live node"
    if isinstance(exc, rx.ObjectLostError):  # OwnerDiedError, ObjectReconstructionFailedError, ObjectFetchTimedOutError
        return RETRY, name, "its result was lost before it reached the caller"
    if isinstance(exc, rx.LocalRayletDiedError):
        return LOST, name, "this process's own Ray node (its raylet) died"
    if isinstance(exc, rx.TaskUnschedulableError):
        return FAIL, name, f"Ray could not schedule the task: {exc}"
    if isinstance(exc, rx.RuntimeEnvSetupError):
        return FAIL, name, f"the task's runtime environment could not be set up: {exc}"
    if isinstance(exc, rx.TaskCancelledError):
        return FAIL, name, "the task was cancelled by another party (not this run)"
    if isinstance(exc, rx.RayTaskError):  # the task body catches everything: this is its import or arguments
        text = str(exc.cause if getattr(exc, "cause", None) is not None else exc)
        missing = _MISSING_MODULE.search(text)
        if missing:
            return FAIL, "WorkerEnvironmentError", (
                f"the Ray worker cannot import the module {missing.group(1)!r} the task needs; install the project "
                "on every node like the caller"
            )
        return FAIL, name, f"the task failed on its worker before the build started: {text.strip().splitlines()[-1] if text.strip() else name}"
    if isinstance(exc, rx.RaySystemError):  # the worker failed to start, or a connection broke
        return RETRY, name, f"a Ray system error ({exc})"
    if isinstance(exc, (rx.RpcError, ConnectionError)):
        return LOST, name, f"the connection to the cluster failed ({exc})"
    return FAIL, name, f"an unexpected Ray error: {exc}"


# --- one run ---------------------------------------------------------------------------------------


@dataclass
class _Task:
    index: int
    submitted: float
    started: float | None = None
    node: str | None = None
    pid: int | None = None
    worker_view: dict = field(default_factory=dict)


class _Run:
    """One :meth:`RayExecutor.run`: the claims, the tasks in flight, their retries and outcomes."""

    def __init__(self, executor: RayExecutor, ray, work, settings: BuildSettings, timeout, on_done) -> None:
        self.executor, self.ray, self.work, self.timeout, self.on_done = executor, ray, work, timeout, on_done
        self.cache = neff_cache(settings.cache)
        self.task_settings = worker_settings(settings)
        self.outcomes: list[ChildOutcome | None] = [None] * len(work)
        self.claims: dict[int, Any] = {}  # index -> the held compile lock of its key
        self.waiting: dict[int, float] = {}  # index -> since when another process holds its key
        self.attempts: dict[int, list[str]] = {}  # index -> what each failed attempt met
        self.running: dict[Any, _Task] = {}  # generator -> task
        self.published = 0
        self.lost_since: float | None = None
        self.head_down_since: float | None = None
        self.unheard_since: float | None = None
        self.probe = None  # the probe's reference while it has not answered
        self.probe_sent = 0.0
        self.head_up = True
        self.next_check = 0.0
        self.cpus = 1

    # --- bookkeeping
    def finish(self, i: int, outcome: ChildOutcome) -> None:
        claim = self.claims.pop(i, None)
        if claim is not None:
            claim.release()
        self.waiting.pop(i, None)
        self.outcomes[i] = outcome
        self.on_done(i, outcome)

    def not_compiled(self) -> list[str]:
        return [self.work[i][0] for i in range(len(self.work)) if self.outcomes[i] is None]

    def fail(self, i: int, error_type: str, error: str, wall_s: float = 0.0, exception=None) -> None:
        self.finish(i, ChildOutcome(self.work[i][0], False, error_type=error_type, error=error, wall_s=wall_s, exception=exception))

    # --- the run
    def run(self) -> list[ChildOutcome]:
        import ray.exceptions as rx

        self.rx = rx
        self.remote = self.ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False, num_returns="streaming")(_build_in_task)
        self.gcs = _gcs_target(self.ray)
        pending = [i for i in range(len(self.work)) if not self.answered_by_cache(i)]
        try:
            if pending:  # beside the first graphs: a worker that lacks the package ends the run as soon as it answers
                self.probe, self.probe_sent = send_probe(self.ray), time.monotonic()
            while pending or self.running:
                now = time.monotonic()
                if now >= self.next_check:
                    # while the head does not answer, no call that needs it (and could wait on it):
                    # the CPU count is read right after the head answered, never between checks
                    self.head_up, self.next_check = self.check_cluster(now), now + _CHECK_S
                    if self.head_up and pending:
                        self.cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
                room = self.room() if self.head_up and pending else 0
                for i in list(pending):
                    if self.outcomes[i] is not None:
                        pending.remove(i)
                        continue
                    if i not in self.claims and (room > 0 or i in self.waiting) and not self.claim(i, now):
                        if self.outcomes[i] is not None:
                            pending.remove(i)
                        continue
                    if room > 0 and i in self.claims:
                        self.submit(i)
                        pending.remove(i)
                        room -= 1
                waited = list(self.running) + ([self.probe] if self.probe is not None else [])
                if not waited:
                    time.sleep(_POLL_S)
                    continue
                ready, _ = self.ray.wait(waited, num_returns=1, timeout=_POLL_S)
                for gen in ready:
                    if gen is self.probe:
                        self.settle_probe()
                        continue
                    again = self.receive(gen)
                    if again is not None:
                        pending.insert(0, again)
                self.check_timeouts(time.monotonic())
                self.check_probe(time.monotonic())
        except BaseException:
            self.give_up()
            raise
        return [o for o in self.outcomes if o is not None]

    def room(self) -> int:
        """How many more tasks to send now: the cluster's CPUs (as the last check read them) less the
        tasks in flight (the probe among them), so that a task starts about when it is sent."""
        return self.cpus - len(self.running) - (self.probe is not None)

    def settle_probe(self, wait_s: float = 0.0) -> None:
        """Read the probe once it has answered (waiting up to ``wait_s`` for it): a worker without
        the project's package raises :class:`WorkerEnvironmentError`, which ends the run (its
        tasks cancelled, its claims released)."""
        ref = self.probe
        if ref is None:
            return
        if wait_s > 0:
            ready, _ = self.ray.wait([ref], timeout=wait_s)
            if not ready:
                return
        self.probe = None
        read_probe(self.ray, ref)

    def check_probe(self, now: float) -> None:
        """A probe that got no CPU within :data:`PROBE_WAIT_S` is dropped: the run's own checks
        meet whatever keeps it waiting."""
        if self.probe is not None and now - self.probe_sent >= PROBE_WAIT_S:
            ref, self.probe = self.probe, None
            _bounded(lambda: self.ray.cancel(ref, force=True), 5.0)

    def answered_by_cache(self, i: int) -> bool:
        """A key already published is a hit without a task; one in its failure cool-down fails."""
        identity, key, entry, _ = self.work[i]
        if self.cache is None:
            return False
        if self.cache.get(key, evict=False) is not None:
            self.finish(i, ChildOutcome(identity, True, value={"key": key, "cache_hit": True, "compile_us": 0}))
            return True
        try:
            self.cache.failures.check(key, graph_name=entry.graph_name)
        except NeuronBackendError as exc:
            self.fail(i, type(exc).__name__, str(exc), exception=exc)
            return True
        return False

    def claim(self, i: int, now: float) -> bool:
        """Claim item ``i``'s key (True: held, to be sent). A key another process holds is polled;
        when its claim is free, a published entry serves this item (finished here) and a missing
        one (the holder died or failed) is taken over."""
        identity, key, entry, _ = self.work[i]
        if self.cache is None:
            self.claims[i] = None
            return True
        lock = self.cache.try_acquire(key, graph_name=entry.graph_name)
        if lock is None:
            since = self.waiting.setdefault(i, now)
            if now - since >= self.cache.lock_timeout:
                exc = CacheLockTimeoutError(key, self.cache.lock_path(key), self.cache.lock_timeout, self.cache.describe_holder(key))
                self.fail(i, type(exc).__name__, str(exc), wall_s=now - since, exception=exc)
            return False
        waited = self.waiting.pop(i, None)
        self.claims[i] = lock
        found = self.cache.get(key)  # under the claim: a corrupt entry may be evicted and rebuilt
        if found is not None:
            self.finish(i, ChildOutcome(identity, True, value={"key": key, "cache_hit": True, "compile_us": 0, "waited": waited is not None},
                                        wall_s=0.0 if waited is None else now - waited))
            return False
        try:
            self.cache.failures.check(key, graph_name=entry.graph_name)
        except NeuronBackendError as exc:
            self.fail(i, type(exc).__name__, str(exc), exception=exc)
            return False
        return True

    def submit(self, i: int) -> None:
        _, _, entry, config = self.work[i]
        gen = self.remote.remote(entry, config, self.task_settings, self.executor.prologue)
        self.running[gen] = _Task(i, time.monotonic())

    def receive(self, gen) -> int | None:
        """Take what a task sent (its start, or its result, or a Ray failure); the index to send
        again when it is retried."""
        task = self.running[gen]
        i = task.index
        now = time.monotonic()
        try:
            msg = self.ray.get(next(gen))
        except StopIteration:  # a finished generator seen once more: nothing left to read
            del self.running[gen]
            return None
        except Exception as exc:  # a Ray failure of this attempt
            del self.running[gen]
            return self.failed_attempt(i, exc, now - (task.started or task.submitted))
        if msg[0] == "started":
            _, task.node, task.pid, task.worker_view = msg
            task.started = now
            return None
        del self.running[gen]
        worker = dict(task.worker_view, node=task.node, pid=task.pid, attempts=len(self.attempts.get(i, [])) + 1)
        self.finish(i, self.outcome(i, msg, worker))
        return None

    def failed_attempt(self, i: int, exc: BaseException, wall_s: float) -> int | None:
        verdict, error_type, why = classify_failure(exc, self.rx)
        if error_type == "WorkerEnvironmentError" and self.probe is not None:
            # a task met a missing module before the probe answered: the probe's verdict (the
            # module and the node) ends the run when the whole cluster lacks the package
            self.settle_probe(max(0.0, PROBE_WAIT_S - (time.monotonic() - self.probe_sent)))
        if verdict == LOST:
            raise ClusterLostError(f"{error_type}: {why}", self.not_compiled(), self.published) from exc
        seen = self.attempts.setdefault(i, [])
        if verdict == RETRY:
            seen.append(f"{error_type}: {why}")
            if len(seen) <= self.executor.max_retries:
                return i
            history = "; ".join(f"attempt {n}: {what}" for n, what in enumerate(seen, 1))
            self.fail(i, error_type, (
                f"the task was sent {len(seen)} time(s) and failed each time (observed; max_retries="
                f"{self.executor.max_retries}): {history}"
            ), wall_s)
            return None
        self.fail(i, error_type, why, wall_s)
        return None

    def outcome(self, i: int, msg: tuple, worker: dict) -> ChildOutcome:
        """What a task sent back, as the fork server's outcome: an artifact published under this
        caller's claim, a compile error recorded under its key (as the pipeline records one)."""
        identity, key, entry, _ = self.work[i]
        cache = self.cache
        if msg[0] == "err":
            _, error_type, error, tb, exc, task_s = msg
            if cache is not None and isinstance(exc, NEFFCompilationError):
                try:
                    cache.failures.record(key, graph_name=entry.graph_name, error=exc)
                except OSError:
                    pass  # the report still carries the failure
            return ChildOutcome(identity, False, error_type=error_type, error=error, traceback=tb, exception=exc, wall_s=task_s)
        _, built_key, artifact, metadata, compile_us, task_s = msg
        value = {"key": built_key, "cache_hit": False, "compile_us": compile_us, "worker": worker}
        if cache is None or built_key != key:  # a mismatched key is reported by parallel_compile, never published
            return ChildOutcome(identity, True, value=value, wall_s=task_s)
        try:
            meta = ArtifactMetadata.from_json(metadata, source=f"the Ray task's metadata of {key}")
            cache.failures.clear(key)
            cache.put(key, artifact, meta)  # under this caller's claim: nobody else publishes the key
        except (NeuronBackendError, MetadataError, OSError) as exc:
            return ChildOutcome(
                identity, False, error_type=type(exc).__name__,
                error=f"compiled on the cluster, but not published into this cache: {exc}", exception=exc, wall_s=task_s,
            )
        self.published += 1
        return ChildOutcome(identity, True, value=value, wall_s=task_s)

    def check_timeouts(self, now: float) -> None:
        """A task that has run ``timeout`` seconds since it started on its worker is cancelled."""
        if self.timeout is None:
            return
        for gen, task in list(self.running.items()):
            if task.started is not None and now - task.started >= self.timeout:
                del self.running[gen]
                _bounded(lambda g=gen: self.ray.cancel(g, force=True), 5.0)
                self.finish(task.index, ChildOutcome(self.work[task.index][0], False, timed_out=True, wall_s=now - task.started))

    def check_cluster(self, now: float) -> bool:
        """Raise :class:`ClusterLostError` when the head has not answered, or no live node has
        offered a CPU, for ``lost_after_s``; else whether the head answers now. The head is checked
        first, with a TCP connect that cannot block on it; Ray's own calls are made only while it
        answers."""
        grace = self.executor.lost_after_s
        if not _reachable(self.gcs):
            self.head_down_since = self.head_down_since or now
            if now - self.head_down_since >= grace:
                given = self.executor.address if self.executor.address not in (None, "local") else None
                gcs = f"{self.gcs[0]}:{self.gcs[1]}" if self.gcs else None
                where = " ".join(filter(None, (given, f"(GCS {gcs})" if given and gcs else gcs))) or "its address"
                raise ClusterLostError(
                    f"the head node at {where} has not answered for {grace:g} s", self.not_compiled(), self.published
                )
            return False
        self.head_down_since = None
        if not self.running and not self.claims:
            self.lost_since = None
            return True
        if _live_cpus(self.ray) == 0:
            self.lost_since = self.lost_since or now
            if now - self.lost_since >= grace:
                raise ClusterLostError(f"no live node has offered a CPU for {grace:g} s", self.not_compiled(), self.published)
        else:
            self.lost_since = None
        self.check_unheard(now, grace)
        return True

    def check_unheard(self, now: float, grace: float) -> None:
        """Tasks sent ``grace`` seconds ago that have not reported their start while the cluster
        keeps a CPU idle for another ``grace``: Ray would have started them, so their messages do
        not reach this process (its workers cannot call back: a ``RAY_AUTH_MODE`` that differs from
        the cluster's, or a firewall between the nodes and the caller). Without this the run would
        wait for tasks that have finished."""
        unheard = [t for t in self.running.values() if t.started is None]
        if not unheard or any(now - t.submitted < grace for t in unheard):
            self.unheard_since = None
            return
        try:
            idle = self.ray.available_resources().get("CPU", 0) >= 1
        except Exception:
            idle = False
        if not idle:
            self.unheard_since = None
            return
        self.unheard_since = self.unheard_since or now
        if now - self.unheard_since >= grace:
            raise ClusterLostError(
                f"{len(unheard)} task(s) sent {now - min(t.submitted for t in unheard):.0f} s ago have not reported their "
                f"start although the cluster has kept a CPU idle for {grace:g} s: its workers cannot reach this process "
                "(a RAY_AUTH_MODE different from the cluster's, or a firewall between the nodes and the caller)",
                self.not_compiled(), self.published,
            )

    def give_up(self) -> None:
        """The run ends early: cancel what still runs (bounded: the cluster may be gone) and
        release every claim, so another caller can take the keys over at once."""
        running, self.running = list(self.running), {}
        if running:
            _bounded(lambda: [_quietly(lambda g=g: self.ray.cancel(g, force=True)) for g in running], 10.0)
        for i, claim in list(self.claims.items()):
            if claim is not None:
                _quietly(claim.release)
        self.claims.clear()


def worker_settings(settings: BuildSettings) -> BuildSettings:
    """The settings a worker builds under: the caller's, with no artifact cache (the caller's cache
    is the one that gets the entry; a worker's folders may not even be on the same host), no HMAC
    key (a worker never holds the secret) and no c10d store coordination (a task is no rank)."""
    cache = dataclasses.replace(settings.cache, disabled=True, hmac_key=None)
    return dataclasses.replace(settings, cache=cache, store_compile=False)


def _build_in_task(entry: StagedGraph, config: CompilerConfig, settings: BuildSettings, prologue):
    """One Ray task (a generator): first where it started, then the staged entry through the one
    pipeline. Each task holds one CPU, so the compiler runs on one thread beside the others on the
    node. What the worker was given to build under is reported with its start, so the caller (and
    a test) sees the worker's own view."""
    import ray

    view = {"cache_enabled": not settings.cache.disabled, "hmac_key": settings.cache.hmac_key is not None,
            "store_compile": settings.store_compile}
    yield ("started", ray.get_runtime_context().get_node_id(), os.getpid(), view)
    if prologue is not None:
        prologue(entry.graph_name)
    start = time.monotonic()
    try:
        built = build(staged_lowering(entry), staged_context(entry, config.on_one_thread(), settings))
    except BaseException as exc:  # everything goes back to the caller, which decides
        yield ("err", type(exc).__name__, str(exc), traceback.format_exc(), _picklable(exc), time.monotonic() - start)
        return
    yield ("ok", built.key, built.artifact, built.metadata.to_json(), built.metadata.compile_time_us, time.monotonic() - start)
