"""``parallel_compile(cache_dir, workers=N)``: build the staged graphs, many at once.

The deferred half of the parallel-trace flow. For every graph the capture seam staged under
``cache_dir`` it

1. reads the graph's compiler arguments back from its metadata; an entry written before arguments
   were recorded (schema v0, ``compiler_args`` null) gets the base arguments instead
   (``base_compiler_args`` plus the platform arguments, exactly as an unscoped in-process compile
   would resolve them);
2. groups the entries by graph name and hands the groups to the staged-graph checks
   (:func:`check_staged_graphs`; the place where whole-set checks such as SPMD's "one artifact per
   graph" belong) before anything compiles;
3. computes each entry's cache key with ``create_cache_hash`` and compiles every distinct key once,
   ``workers`` at a time, each in a forked child, showing progress as each ends (:class:`Progress`:
   graphs done of total and the time left, one line rewritten on a terminal, plain lines
   elsewhere); when as many
   children run as there are cores, each compiles on one thread
   (:meth:`~reference.compiler.driver.CompilerConfig.on_one_thread`) instead of all of them threading
   over the same cores;
4. builds each entry through the pipeline (:func:`reference.pipeline.build`: a plain module, or
   an SPMD program staged with its pieces and meshes) and publishes it into the NEFF cache, so an
   in-process compile of the same graph with the same arguments is a cache hit afterwards, on
   every rank of a sharded model.

Where the compiles run is the executor's choice (:func:`resolve_executor`): the forked children
above by default, or one Ray task per distinct key (:class:`~reference.flows.ray_executor.RayExecutor`,
``NEURON_PARALLEL_COMPILE_EXECUTOR=ray``), each built through the same pipeline with the entry's own
configuration and published into this process's cache as it comes back. The records, the progress
and the failures are the same either way.

A graph that fails to compile is reported with its name, key and error after all others finished.
A guard-rail violation (:class:`~reference.spmd.errors.SPMDViolationError`: the single-artifact
check under ``NEURON_LIBTORCH_SPMD_STRICT=1``, or one raised in a compiling child) is never a
failure record: it raises as itself, whatever ``raise_on_error`` says.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from reference.cache.staging import StagedGraph, read_staged
from reference.compiler.driver import CompilerConfig
from reference.compiler.scope import platform_compiler_config
from reference.core import env
from reference.core.build_settings import BuildSettings
from reference.core.diagnostics import ensure_default_handler
from reference.core.errors import FlowDirectoryError, NeuronBackendError
from reference.flows.forked import ChildOutcome, reraise, run_forked
from reference.flows.ray_executor import RayExecutor
from reference.pipeline import build, cache_key, staged_context, staged_key_policy, staged_lowering
from reference.spmd.errors import SPMDViolationError
from reference.spmd.guards import check_staged_groups

DEFAULT_TIMEOUT_S = 3600.0


class ExecutorChoiceError(NeuronBackendError, ValueError):
    """``parallel_compile``'s ``executor`` argument is not one it knows."""


#: The executors by name, as ``NEURON_PARALLEL_COMPILE_EXECUTOR`` and ``executor=`` spell them.
EXECUTORS = ("local", "ray")


def resolve_executor(executor: "str | RayExecutor | None") -> RayExecutor | None:
    """The executor a run uses: ``None`` for the local fork server, else a :class:`RayExecutor`.

    ``executor=None`` takes ``NEURON_PARALLEL_COMPILE_EXECUTOR`` (a bad value raises
    :class:`~reference.core.errors.EnvVarError` naming it); a Ray executor without an address takes
    ``RAY_ADDRESS``. Both are read here, once per run, at the public entry."""
    source = "executor argument"
    if executor is None:
        executor, source = env.get(env.PARALLEL_COMPILE_EXECUTOR), env.PARALLEL_COMPILE_EXECUTOR
    if isinstance(executor, str) and executor.strip().lower() in EXECUTORS:
        executor = None if executor.strip().lower() == "local" else RayExecutor()
    elif not (executor is None or isinstance(executor, RayExecutor)):
        raise ExecutorChoiceError(
            f"parallel_compile: executor={executor!r} ({source}) is not an executor; accepted: "
            f"{', '.join(repr(e) for e in EXECUTORS)} or a RayExecutor (the same choice as "
            f"{env.PARALLEL_COMPILE_EXECUTOR}, which applies when executor is not given)"
        )
    if isinstance(executor, RayExecutor) and executor.address is None and env.get(env.RAY_ADDRESS):
        executor = replace(executor, address=env.get(env.RAY_ADDRESS))
    return executor


class ParallelCompileError(NeuronBackendError):
    """One or more staged graphs failed to compile; ``report`` holds every graph's outcome."""

    def __init__(self, report: "CompileReport") -> None:
        failed = report.failures
        lines = [f"{len(failed)} of {len(report.graphs)} staged graphs failed to compile:"]
        lines += [f"  graph {g.graph_name!r} (key {g.cache_key}, compiler_args {g.compiler_args}): {g.error}" for g in failed]
        super().__init__("\n".join(lines))
        self.report = report


@dataclass
class CompiledGraphRecord:
    graph_name: str
    staged_key: str
    cache_key: str
    compiler_args: list[str]
    args_source: str  # "recorded" (from the metadata) or "base" (an entry that recorded none)
    ok: bool = True
    cache_hit: bool = False
    #: the key was claimed by another process when this run reached it (the Ray executor): this run
    #: waited for that claim and was served the entry it published (``cache_hit`` too)
    waited: bool = False
    compile_us: int = 0
    error: str | None = None
    #: where the Ray executor built it: the worker's node and pid, how many attempts it took, and
    #: what the worker was given to build under (its cache off, no HMAC key); ``None`` elsewhere
    worker: dict | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CompileReport:
    graphs: list[CompiledGraphRecord] = field(default_factory=list)
    workers: int = 1
    wall_s: float = 0.0

    @property
    def failures(self) -> list[CompiledGraphRecord]:
        return [g for g in self.graphs if not g.ok]


StagedCheck = Callable[[Mapping[str, Sequence[StagedGraph]]], None]


def check_staged_graphs(groups: Mapping[str, Sequence[StagedGraph]]) -> None:
    """Checks over the whole staged set, run before anything compiles.

    ``groups`` maps each graph name to every staged entry of that name (several when, for example,
    ranks or argument sets staged the same graph differently). A check raises a
    :class:`~reference.core.errors.NeuronBackendError` naming the graph.

    Caution: graph names come from Dynamo's per-process counters, which every forked trace child
    inherits, so two different graphs traced by two children can share a name. A check that
    expects one artifact per name should compare the entries' input specs (or HLO) too.

    Registered: the SPMD single-artifact check (:func:`reference.spmd.guards.check_staged_groups`),
    over the entries whose hash directories record the ranks that staged them (multi-rank
    captures); it warns about per-rank splinters, and raises under ``NEURON_LIBTORCH_SPMD_STRICT=1``
    (read now: ``parallel_compile`` is an entry point).
    """
    check_staged_groups(groups, strict=BuildSettings.from_env().spmd_strict)


def resolve_staged_args(entry: StagedGraph, base_compiler_args: Sequence[str] | None) -> tuple[list[str], str]:
    """The argument list a staged graph compiles with, and where it came from."""
    config, source = staged_config(entry, base_compiler_args)
    return list(config.args), source


def staged_config(entry: StagedGraph, base_compiler_args: Sequence[str] | None) -> tuple[CompilerConfig, str]:
    """The compiler configuration a staged graph compiles with (parsed once), and where its list
    came from: ``"recorded"`` in the metadata, or ``"base"`` (the base arguments with the platform
    arguments, exactly as an unscoped in-process compile resolves them)."""
    if entry.metadata.compiler_args is not None:
        return CompilerConfig.from_args(list(entry.metadata.compiler_args)), "recorded"
    return platform_compiler_config({"compiler_args": list(base_compiler_args or [])}), "base"


def _compile_in_child(
    entry: StagedGraph, config: CompilerConfig, settings: BuildSettings, one_thread: bool = False
) -> dict[str, Any]:
    if one_thread:  # this forked child is one of as many compiling side by side as there are cores
        config = config.on_one_thread()
    built = build(staged_lowering(entry), staged_context(entry, config, settings))
    return {"key": built.key, "cache_hit": built.cache_hit, "compile_us": 0 if built.cache_hit else built.metadata.compile_time_us}


class Progress:
    """``parallel_compile``'s default progress display, on standard error: graphs done of total,
    the last graph's outcome and an estimate of the time left (from the mean time per graph so far).

    On a terminal it is one line rewritten in place (a failure keeps a line of its own, and the
    last state stays); elsewhere (CI logs, files) it is one plain line per graph."""

    def __init__(self, stream=None, *, terminal: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = _isatty(self._stream) if terminal is None else terminal
        self._start = time.monotonic()

    def __call__(self, done: int, total: int, record: CompiledGraphRecord, wall_s: float) -> None:
        elapsed = time.monotonic() - self._start
        left = total - done
        eta = f", about {elapsed / done * left:.0f} s left" if left and done else ""
        if record.ok:
            status = "served (waited for another caller)" if record.waited else "cache hit" if record.cache_hit else "compiled"
        else:
            status = f"FAILED: {record.error}"
        line = (
            f"parallel_compile [{done}/{total}] {record.graph_name} ({record.cache_key}) {status} in {wall_s:.1f} s"
            f" ({elapsed:.0f} s elapsed{eta})"
        )
        if not self._terminal:
            print(line, file=self._stream, flush=True)
            return
        if not record.ok:  # a failure stays on screen
            self._stream.write("\r\x1b[K" + line + "\n")
        else:
            self._stream.write("\r\x1b[K" + line.splitlines()[0])
        if not left:
            self._stream.write("\n")
        self._stream.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def parallel_compile(
    cache_dir: str | os.PathLike,
    *,
    workers: int | None = None,
    base_compiler_args: Sequence[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    progress: bool | Callable[[int, int, CompiledGraphRecord, float], None] = True,
    checks: Iterable[StagedCheck] = (check_staged_graphs,),
    raise_on_error: bool = True,
    executor: "str | RayExecutor | None" = None,
) -> CompileReport:
    """Compile every graph staged under ``cache_dir`` into the NEFF cache; see the module doc.

    Returns a :class:`CompileReport` with one record per staged entry (entries that resolve to the
    same key share one compile). Raises :class:`ParallelCompileError` if any graph failed (with
    ``raise_on_error``), after the others finished.

    ``executor``: ``"local"`` (forked children on this machine), ``"ray"`` or a
    :class:`~reference.flows.ray_executor.RayExecutor` (one Ray task per distinct key); ``None``
    takes ``NEURON_PARALLEL_COMPILE_EXECUTOR`` (default ``local``). A Ray cluster lost mid-run
    raises :class:`~reference.flows.ray_executor.ClusterLostError` naming the graphs not compiled.
    """
    start = time.monotonic()
    settings = BuildSettings.from_env()  # this build's request: read once, every child builds under it
    chosen = resolve_executor(executor)  # before anything is read or compiled: a bad name fails first
    ensure_default_handler()  # the children's "still compiling" lines
    staged = _read_checked(cache_dir, checks)
    workers = workers or max(1, os.cpu_count() or 1)
    records, by_key = _keyed(staged, base_compiler_args)
    running = min(workers, max(1, len(by_key)))
    printer = Progress() if progress is True else (progress or None)
    results = _build_each(by_key, records, settings, chosen, running, timeout, printer)
    for rec in records:
        _apply(rec, results[rec.cache_key])
    report = CompileReport(records, workers=workers, wall_s=time.monotonic() - start)
    if raise_on_error and report.failures:
        raise ParallelCompileError(report)
    return report


def _read_checked(cache_dir: str | os.PathLike, checks: Iterable[StagedCheck]) -> list[StagedGraph]:
    """The entries staged under ``cache_dir``, after each check has seen them grouped by graph name."""
    if not os.path.isdir(cache_dir):
        # a typo in a staging path would otherwise build nothing and show up only as cache misses
        raise FlowDirectoryError(
            "parallel_compile: the staging directory", os.fspath(cache_dir),
            "does not exist" if not os.path.exists(cache_dir) else "is not a directory",
            "give the directory parallel_trace or the capture seam staged the graphs into",
        )
    staged = read_staged(cache_dir)
    groups: dict[str, list[StagedGraph]] = {}
    for entry in staged:
        groups.setdefault(entry.graph_name, []).append(entry)
    for check in checks:
        check(groups)
    return staged


def _keyed(staged: list[StagedGraph], base_compiler_args: Sequence[str] | None):
    """One record per staged entry, and each distinct cache key's first entry with its parsed
    configuration (the key here, the build in the child or the task)."""
    records: list[CompiledGraphRecord] = []
    by_key: dict[str, tuple[StagedGraph, CompilerConfig]] = {}
    for entry in staged:
        config, source = staged_config(entry, base_compiler_args)  # parsed once: the key here, the build in the child
        lowering = staged_lowering(entry)
        key, _ = cache_key(
            lowering.graph, config, replica_groups=lowering.replica_groups, key_policy=staged_key_policy(entry)
        )
        records.append(CompiledGraphRecord(entry.graph_name, entry.key, key, list(config.args), source))
        by_key.setdefault(key, (entry, config))
    return records, by_key


def _build_each(by_key, records, settings, chosen, running, timeout, printer) -> dict[str, ChildOutcome]:
    """Each distinct key built once, in forked children or by ``chosen`` (a Ray executor); the
    outcome per key. Progress is printed as each one ends."""
    keys = list(by_key)
    one_thread = running > 1 and running >= (os.cpu_count() or 1)
    tasks = [
        (f"graph {by_key[k][0].graph_name!r} (key {k})",
         (lambda e=by_key[k][0], a=by_key[k][1]: _compile_in_child(e, a, settings, one_thread)))
        for k in keys
    ]
    results: dict[str, ChildOutcome] = {}

    def done(i: int, outcome: ChildOutcome) -> None:
        key = keys[i]
        results[key] = outcome
        if printer:
            rec = next(r for r in records if r.cache_key == key)
            _apply(rec, outcome)
            printer(len(results), len(keys), rec, outcome.wall_s)

    if chosen is None:
        outcomes = run_forked(tasks, workers=running, timeout=timeout, on_done=done)
    else:  # the same keys, entries and configurations; each task builds through the pipeline
        work = [(identity, k, by_key[k][0], by_key[k][1]) for (identity, _), k in zip(tasks, keys)]
        outcomes = chosen.run(work, settings=settings, workers=running, timeout=timeout, on_done=done)
    for outcome in outcomes:
        if isinstance(outcome.exception, SPMDViolationError):
            reraise(outcome)
    return results


def _apply(rec: CompiledGraphRecord, outcome: ChildOutcome) -> None:
    if outcome.ok:
        rec.ok = True
        rec.cache_hit = bool(outcome.value["cache_hit"])
        rec.waited = bool(outcome.value.get("waited", False))
        rec.worker = outcome.value.get("worker")
        rec.compile_us = int(outcome.value["compile_us"])
        if outcome.value["key"] != rec.cache_key:  # the key is one function; a mismatch is a bug
            rec.ok = False
            rec.error = f"published under key {outcome.value['key']}, expected {rec.cache_key}"
    else:
        rec.ok = False
        if outcome.error_type:
            rec.error = f"{outcome.error_type}: {outcome.error}"
        elif outcome.timed_out:
            rec.error = "the compile did not finish within its timeout and was killed"
        else:
            rec.error = f"the compiling child died (exit status {outcome.exitcode})"
