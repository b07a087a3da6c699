"""The adapter protocol: what an implementation provides to the conformance suite.

An implementation is plugged in as ``--conformance-impl package.module:factory`` (or the
``CONFORMANCE_IMPL`` variable). The factory takes no arguments and returns an
:class:`Implementation`. The core is small: :attr:`Implementation.name`, :meth:`~Implementation.versions`,
:meth:`~Implementation.compile` and :meth:`~Implementation.lower`. Everything else belongs to an
optional capability group (:data:`CAPABILITIES`): a group the adapter does not override is absent,
and exactly the tests of that group's contract are skipped with the reason. A method that is
overridden but cannot serve one case raises :class:`NotSupported`, which the suite reports as a
skip carrying the reason, never as a pass. ``docs/adapter.md`` has the table and a template.

Tests talk to an implementation only through this interface. The adapter module must be importable
in a fresh interpreter: the suite's child processes load it by the same ``module:factory`` spec.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import platform
from typing import Any, Callable, ContextManager, Mapping, Sequence

from conformance.harness.evidence import Evidence, observe_dynamo
from conformance.harness import env
from conformance.harness.precision import Precision

DEFAULT_IMPL = "conformance.adapters.reference:make"


def machine_facts() -> dict[str, str]:
    """The machine as the harness sees it: architecture and CPU model, and the cores this process
    may run on (its affinity, not the machine's count)."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith(("model name", "CPU part"))), "")
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return {"host": f"{platform.machine()}:{model}", "cores": str(cores)}


class NotSupported(BaseException):
    """The implementation does not provide this capability; the test is skipped with the reason.

    It derives from :class:`BaseException`, like pytest's own outcomes, so that ``except Exception``
    in a test or probe and ``pytest.raises(Exception)`` never mistake a missing capability for the
    error a test expects.
    """


#: Exit status of a child process whose adapter raised :class:`NotSupported` (see
#: :mod:`conformance.harness.child`); the parent test turns it into a skip.
NOT_SUPPORTED_EXIT = 77


@dataclasses.dataclass(frozen=True)
class Capability:
    """One optional group of the protocol: the methods that make it up, the contract they serve and
    the test modules (``conformance/tests/test_<module>.py``) that need it.

    The group is provided when the adapter overrides every method in ``required``; the others are
    optional within the group (their tests skip on :class:`NotSupported`).
    """

    name: str
    contract: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()

    def missing(self, impl: "Implementation") -> list[str]:
        """The required methods ``impl`` leaves at the protocol's default."""
        return [m for m in self.required if getattr(type(impl), m, None) is getattr(Implementation, m, None)]


#: The optional capability groups, by name. To add a group: add its method(s) to
#: :class:`Implementation` raising :class:`NotSupported`, and an entry here naming the contract and
#: the test modules; a new group is best a single method returning an object with the group's API.
CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "backend",
            "the torch.compile backend contract: parameters, graph counting, the support matrix",
            required=("torch_compile", "backend_names", "reset_graph_count", "graph_count"),
            optional=(
                "forced_graph_breaks", "environment_variables", "helper_api", "debug_artifact_globs",
                "unsupported_compiler_apis", "expected_support",
            ),
            modules=("backend_contract", "backend_support"),
        ),
        Capability(
            "fx_passes",
            "the FX pass pipeline: default order, identity, the pass stage of a compile",
            required=("fx_pass_names",),
            optional=("fx_pass_identity", "fx_passes_applied", "fx_graph_after_passes"),
            modules=("fx_passes",),
        ),
        Capability(
            "cache",
            "the compile cache: key, atomic publication, locks, warm start, the HLO cache",
            required=("cache_env", "compiler_invocations"),
            optional=(
                "cache_hash", "cache_keys", "cache_entry_files", "cache_scratch", "compiles_in_progress",
                "lowerings", "plant_cache_entry",
            ),
            modules=("cache_key", "cache_reliability", "cache_warm_start"),
        ),
        Capability(
            "compiler_args",
            "per-graph compiler arguments: the scope, the level helper, the runner's policy",
            required=("scoped_compiler_args", "apply_scoped_compiler_args"),
            optional=("with_optimization_level", "policy_runner"),
            modules=("compiler_args_scope", "compiler_args_flows"),
        ),
        Capability(
            "capture",
            "the deferred flow: parallel trace, staged metadata, parallel compile",
            required=("parallel_trace", "parallel_compile", "staged_metadata"),
            optional=("legacy_capture_dir",),
        ),
        Capability(
            "spmd",
            "SPMD: the runtime rank, the mesh registry, programs with collectives, the guard rails",
            required=("spmd_rank_tensor", "spmd_process_group"),
            optional=("spmd_lower", "spmd_compile_stats", "check_single_artifact", "spmd_violation_errors"),
            modules=("spmd", "spmd_guards"),
        ),
        Capability(
            "atom",
            "ATOM: compilation levels, piecewise compilation, the compiler manager, graph capture",
            required=("atom",),
            modules=("atom_compilation", "atom_graphs", "atom_matrix"),
        ),
    )
}


def missing_capabilities(impl: "Implementation", names: Sequence[str]) -> dict[str, list[str]]:
    """Of the named groups, those ``impl`` does not provide, with the methods it leaves out."""
    out = {}
    for name in names:
        if name not in CAPABILITIES:
            raise ValueError(f"unknown capability group {name!r}; known: {sorted(CAPABILITIES)}")
        missing = CAPABILITIES[name].missing(impl)
        if missing:
            out[name] = missing
    return out


class Implementation:
    """Subclass and override the core and the groups your implementation has (see the module doc)."""

    #: Short name used in reports and snapshot directories (letters, digits, ``_`` and ``-``).
    name: str = "unnamed"

    #: Whose snapshot tree the run compares with (default: this implementation's own, ``name``); a
    #: deliberately broken variant of an implementation names the original to be checked against
    #: its goldens.
    snapshots_of: str | None = None

    # --- identity -----------------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        """Versions of what shapes results: at least torch, the lowering, the compiler. Nothing
        that depends on the machine the run happened on (that is :meth:`machine`): the checked-in
        support matrices compare these, and they must read the same on every machine."""
        return {}

    def machine(self) -> dict[str, str]:
        """Facts about the machine the run happened on (CPU, cores), reported beside the versions
        and never compared. The default is what the harness sees; an implementation whose
        artifacts are keyed on its own notion of the host reports that instead."""
        return machine_facts()

    def backend_names(self) -> dict[str, str]:
        """Registered ``torch.compile`` backend names by role: ``compile`` (required), and
        optionally ``capture`` and ``native``."""
        raise NotSupported("backend_names")

    # --- compiling and running ----------------------------------------------------------------
    def compile(
        self,
        model: Callable,
        *,
        options: Mapping[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = False,
        mode: str | None = None,
    ) -> Callable:
        """``torch.compile`` the model (or function) with the implementation's compile backend."""
        raise NotSupported("compile")

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        """The StableHLO text of each graph ``model(*args)`` produces, in order, without compiling."""
        raise NotSupported("lower to StableHLO")

    def reset(self) -> None:
        """Forget compiled graphs (called before each conformance test); the default resets Dynamo."""
        import torch  # on use: this module is imported by the plugin in every pytest run

        torch._dynamo.reset()

    def precision(self) -> Precision:
        """The precision the implementation computes in (:class:`~conformance.harness.tolerances.Precision`):
        which float dtypes it computes in a narrower one (float64 as float32, float32 matmuls in
        TF32, float32 under bfloat16 autocast). The suite derives its tolerances from it and
        reports it; a result that only meets a narrower dtype's bounds than declared fails as an
        undeclared loss of precision. The default: every dtype computed as itself."""
        return Precision()

    def evidence(self) -> ContextManager[Evidence]:
        """A context manager observing a block of work; it yields an :class:`~conformance.harness.evidence.Evidence`
        that is complete when the block exits (``refresh()`` brings it up to date inside).

        The default observes what every ``torch.compile`` backend allows (the graphs Dynamo hands
        the backend named ``backend_names()["compile"]``, and the calls of the callables it
        returned). An implementation that knows more reports it: graphs it compiled, graphs it
        served from its cache, runs of its compiled path, and every graph that ran outside it
        (eagerly or through another backend) with the reason. The suite passes a parity, dtype,
        cache or API test only when that evidence shows the compiled path carried the work; the
        outcome is otherwise ``fell back: <reason>``. See ``docs/adapter.md``."""
        try:
            names = [self.backend_names()["compile"]]
        except (NotSupported, KeyError):
            names = None
        return observe_dynamo(backends=names)

    # --- capability 'fx_passes' ------------------------------------------------------------------
    def fx_pass_names(self) -> list[str]:
        """Names of the default FX passes, in the order the backend runs them."""
        raise NotSupported("FX pass names")

    def fx_pass_identity(self, names: Sequence[str]) -> str:
        """The identity (the string that enters cache keys) of a pass manager holding the named
        default passes in the given order; ``names`` is a subsequence or reordering of
        :meth:`fx_pass_names`."""
        raise NotSupported("FX pass manager identity")

    def fx_passes_applied(self, model: Callable, args: Sequence[Any], options: Mapping[str, Any] | None = None) -> list[str]:
        """Names of the FX passes that ran, in order, while compiling ``model(*args)`` with
        ``options`` (one graph); empty when the pass stage is skipped."""
        raise NotSupported("observing the FX pass stage")

    def fx_graph_after_passes(self, model: Callable, args: Sequence[Any]) -> list[str]:
        """Readable text of each graph ``model(*args)`` produces, after the default FX passes."""
        raise NotSupported("FX graph after the passes")

    # --- capability 'backend': parameters, graph breaks, variables, metrics, support matrix -------
    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        """``torch.compile(model, backend=<the compile backend>, **kwargs)``, any parameter passed as
        given (``fullgraph``, ``dynamic``, ``mode``, ``options``, ``name``, ``disable``,
        ``recompile_limit``, ``isolate_recompiles``, ``shapes_spec``)."""
        raise NotSupported("torch_compile")

    def reset_graph_count(self) -> None:
        """Start counting compiled graphs from zero (see :meth:`graph_count`)."""
        raise NotSupported("counting compiled graphs")

    def graph_count(self) -> int:
        """How many graphs the backend compiled since :meth:`reset_graph_count` (one per forward
        graph the backend was handed; a graph break makes two)."""
        raise NotSupported("counting compiled graphs")

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        """The graph-break contract the implementation forces: ``gb_type`` (the diagnostic type of
        the ``Unsupported`` raised under ``fullgraph=True``), ``sort`` and ``topk`` thresholds, and
        ``no_lowering`` (a mapping op name -> reason, computed by the implementation)."""
        raise NotSupported("forced graph breaks")

    def set_graph_break_thresholds(self, **thresholds: int | None) -> None:
        """Set the ``sort`` and ``topk`` thresholds of :meth:`forced_graph_breaks` for graphs traced
        after the call (``None`` restores the default), so the suite can test the boundary on small
        tensors."""
        raise NotSupported("setting the graph-break thresholds")

    def environment_variables(self) -> Mapping[str, Any]:
        """Name -> default of every environment variable the implementation reads."""
        raise NotSupported("environment variables")

    def helper_api(self) -> Any:
        """An object with the helper API: ``set_model_name``, ``get_model_name``, ``get_rank``,
        ``get_dynamo_metrics``, ``reset_dynamo_metrics``, ``compile_only``,
        ``NEFFCompilationError``, ``NEFFExecutionError`` (and, where the implementation has them,
        ``to_device`` / ``is_device_tensor``)."""
        raise NotSupported("the backend helper API")

    def debug_artifact_globs(self) -> Mapping[str, str]:
        """Kind (``fx_graph``, ``stablehlo``, ``artifact``) -> glob, relative to the debug
        directory, of the files one compile leaves there."""
        raise NotSupported("debug artifacts")

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        """``torch.compiler`` APIs the implementation declares unsupported, with the reason."""
        return {}

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        """The support matrix the implementation declares: table -> row -> status (``Supported``,
        ``Partial``, ``Unsupported``), tables and rows named as in ``reports/<impl>/<lane>/support.md``.
        Each probe asserts its row's declared status; an undeclared row fails naming it. Without a
        declaration the probes still run and fill the report, but skip instead of passing."""
        raise NotSupported("no expected support matrix declared (expected_support)")

    # --- capability 'cache' ----------------------------------------------------------------------
    # Cache tests run real child processes (``conformance/tests/_cache_child.py``) that load this same
    # adapter; everything about a cache is addressed by a ``root``: a fresh, empty directory the
    # suite gives the implementation to keep all its cache state in (artifacts, locks, HLO).

    def cache_hash(
        self,
        hlo: str,
        compiler_args: Sequence[str] | str | None,
        input_specs: Sequence[tuple[str, Sequence[int], Sequence[int]]],
        *,
        versions: Mapping[str, str] | None = None,
        replica_groups: Sequence[Sequence[int]] | None = None,
        breakdown: bool = False,
    ) -> Any:
        """The compile-cache key (32 lowercase hex characters) of one graph: its StableHLO text,
        the compiler arguments, the input specs as ``(dtype, shape, stride)``, the tool versions
        (default: the installed ones) and the collectives' replica groups. With ``breakdown``,
        ``(key, details)`` where ``details`` is any JSON-able per-component explanation."""
        raise NotSupported("cache_hash")

    def cache_env(
        self,
        root: str,
        *,
        lock_timeout_s: int | None = None,
        disable: bool = False,
        assert_hit: bool = False,
        neff_dir: str | None = None,
        secret: str | None = None,
    ) -> dict[str, str]:
        """Environment variables that make a fresh process keep every cache under ``root``:
        ``lock_timeout_s`` bounds a wait for another process's compile of the same key,
        ``disable`` turns the persistent cache off, ``assert_hit`` makes a miss an error,
        ``neff_dir`` places the artifact cache itself elsewhere (a read-only or full directory),
        and ``secret`` authenticates entries under that key (an implementation without entry
        authentication raises ``NotSupported`` when it is given)."""
        raise NotSupported("cache_env")

    def plant_cache_entry(self, root: str, key: str, artifact: bytes) -> None:
        """Replace the artifact of entry ``key`` under ``root`` with ``artifact`` and rewrite every
        checksum the entry records to match it, as anyone who can write the cache folder can (the
        suite checks what the implementation then serves)."""
        raise NotSupported("plant_cache_entry")

    def compiler_invocations(self) -> int:
        """How many times this process has run the compiler (artifact builds, not cache hits)."""
        raise NotSupported("compiler_invocations")

    def cache_keys(self, root: str) -> list[str]:
        """Keys of the entries published under ``root`` (whole entries only)."""
        raise NotSupported("cache_keys")

    def cache_entry_files(self, root: str, key: str) -> list[str]:
        """The files that make up one published entry (the suite damages them on purpose)."""
        raise NotSupported("cache_entry_files")

    def cache_scratch(self, root: str) -> list[str]:
        """Paths under ``root`` that belong to no published entry and to no running process:
        leftovers of an interrupted write (they must never be loaded)."""
        raise NotSupported("cache_scratch")

    def compiles_in_progress(self, root: str) -> list[dict[str, Any]]:
        """Compiles now holding a key's compile lock under ``root``: dicts with at least ``pid``
        (the holding process) and ``key``."""
        raise NotSupported("compiles_in_progress")

    def lowerings(self) -> int:
        """How many graphs this process has lowered to HLO (an HLO-cache hit is not a lowering)."""
        raise NotSupported("lowerings")

    # --- capabilities 'compiler_args' and 'capture' ------------------------------------------------
    # The backend side (mechanism): the scope, the access point every seam calls, the two flows.
    # The runner side (policy): ``policy_runner`` returns an object driving one of the suite's
    # policy fixture models (``neuron_fixtures/policy.py``) with the implementation's runner; it provides
    #   base_compiler_args                    the base list set at load (caller level applied)
    #   resolve(graph_type) -> list | None    the runner's resolve_graph_compiler_args
    #   example(graph_type) -> dict           fresh inputs for the graph type's compile site
    #   run(graph_type, kwargs=None) -> dict  run the site: {"outputs": ..., "graphs": [
    #                                         {"graph_name", "cache_key", "compiler_args"}]} for the
    #                                         graphs compiled (or served from the cache) by the call
    #   run_unscoped(graph_type, kwargs=None) the same call outside any scope (a serve-time
    #                                         recompile that forgot the scope)
    #   eager(graph_type, kwargs=None)        the model's eager outputs for the same inputs
    #   trace_job(graph_type) -> tuple        the worker's parallel-trace job for the graph type
    def scoped_compiler_args(self, compiler_args: Sequence[str] | None) -> Any:
        """A context manager: graphs compiled inside use ``compiler_args`` (``None``: no override)."""
        raise NotSupported("scoped_compiler_args")

    def apply_scoped_compiler_args(self, options: Mapping[str, Any] | None) -> dict:
        """``options`` with the scoped list as ``compiler_args``, or unchanged with no scope."""
        raise NotSupported("apply_scoped_compiler_args")

    def with_optimization_level(self, args: Sequence[str] | None, level: int) -> list[str]:
        """The pure level helper; raises (any exception) for a malformed level."""
        raise NotSupported("with_optimization_level")

    def policy_runner(
        self,
        *,
        policy: str = "default",
        mode: str = "compile",
        compiler_args: Sequence[str] | None = None,
        optimization_level: int | None = None,
    ) -> Any:
        """A loaded runner for the policy fixture ``policy``; ``mode``: ``compile`` (in-process),
        ``capture`` (stage for the deferred flow) or ``native``."""
        raise NotSupported("model runner with a per-graph compiler-argument policy")

    def parallel_trace(self, jobs: Sequence[tuple], *, cache_dir: str, workers: int = 2, timeout: float | None = None) -> list[dict]:
        """Run trace jobs in forked children; one dict per job, in order, without raising for a failed
        job: ``{"ok", "identity", "error", "captured": [{"cache_key", "graph_name", "compiler_args"}]}``.
        A malformed job raises before anything runs; a guard-rail violation in a job (under
        ``NEURON_LIBTORCH_SPMD_STRICT=1``) raises as itself (:meth:`spmd_violation_errors`)."""
        raise NotSupported("parallel_trace")

    def capture(self, model: Callable, *, cache_dir: str) -> Callable:
        """``model`` compiled with the capture seam: calling the result runs the model (eagerly) and
        stages its graphs under ``cache_dir`` for :meth:`parallel_compile`, in this process (so a
        sharded model's collectives run on this rank's process group)."""
        raise NotSupported("capture seam in-process")

    def parallel_compile(
        self, cache_dir: str, *, workers: int = 2, base_compiler_args: Sequence[str] | None = None
    ) -> list[dict]:
        """Compile the staged graphs into the artifact cache; one dict per staged entry:
        ``{"graph_name", "cache_key", "compiler_args", "args_source" ("recorded"|"base"), "ok", "error"}``.
        A guard-rail violation (the single-artifact check under ``NEURON_LIBTORCH_SPMD_STRICT=1``)
        raises as itself (:meth:`spmd_violation_errors`), never as a failed entry."""
        raise NotSupported("parallel_compile")

    def staged_metadata(self, cache_dir: str) -> list[dict]:
        """The metadata documents of the staged entries under ``cache_dir`` (parsed JSON)."""
        raise NotSupported("staged metadata")

    def legacy_capture_dir(self, dest: str) -> str:
        """Write a capture directory as an old release left it (entries with no recorded compiler
        arguments) into ``dest``; returns it."""
        raise NotSupported("a capture directory from an older release")

    # --- capability 'spmd' -----------------------------------------------------------------------
    # These run inside the ranks that conformance.harness.launcher starts (torch.distributed is initialized).

    def spmd_rank_tensor(self, rank: int):
        """The runtime ``rank`` input the runner threads into every forward (a tensor)."""
        raise NotSupported("SPMD: runtime rank tensor")

    def spmd_process_group(self, replica_groups: Sequence[Sequence[int]]):
        """Create the process groups of a full mesh (a partition of the world; every rank calls
        this with the same argument), register the mesh, and return this rank's group."""
        raise NotSupported("SPMD: mesh registry")

    def spmd_lower(self, model: Callable, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> list[str]:
        """The text each graph of ``model(*args, **kwargs)`` is keyed by (for a graph with
        collectives, the whole program with its replica groups), in order, without compiling."""
        raise NotSupported("SPMD: lowering graphs with collectives")

    def spmd_compile_stats(self) -> dict[str, Any]:
        """In this process so far: ``{"graphs": {graph name: cache key}, "compiler_invocations": n}``."""
        raise NotSupported("SPMD: compile statistics")

    def check_single_artifact(self, staged: Mapping[str, Mapping[str, Sequence[int]]], *, strict: bool | None = None) -> list:
        """The single-artifact check of ``parallel_compile``: ``staged[graph][hash] = ranks``;
        returns the splinters (warns), or raises under the strict flag (``strict=None``: from
        ``NEURON_LIBTORCH_SPMD_STRICT``)."""
        raise NotSupported("SPMD: single-artifact check")

    def spmd_violation_errors(self) -> tuple[type, ...]:
        """The exception types the guard rails raise under ``NEURON_LIBTORCH_SPMD_STRICT=1``."""
        raise NotSupported("SPMD: guard rails")

    # --- ATOM compilation and graph capture -----------------------------------------------------
    def atom(self) -> Any:
        """The implementation's ATOM module: an object with the public names of the ATOM design
        (``Config``, ``CompilationConfig``, ``CompilationLevel``, ``CUDAGraphMode``,
        ``support_torch_compile``, ``direct_register_custom_op``, ``compile_model``,
        ``COUNTERS``, ``BufferUpdateError``, ``ConfigError``, and the graph-capture names)."""
        raise NotSupported("ATOM compilation and graph capture")

    # --- reporting (optional, outside any group) ---------------------------------------------------
    def expectations_file(self) -> str | None:
        """Path of the implementation's expectation file (known failures, each with a reason; see
        ``docs/adapter.md``), or ``None``. ``--conformance-expectations`` overrides it."""
        return None

    def snapshot_root(self) -> str | None:
        """Default root of the snapshot trees (``<root>/<name>/...``) when neither
        ``--conformance-snapshot-dir`` nor ``CONFORMANCE_SNAPSHOT_DIR`` is given; ``None``:
        ``conformance-snapshots/`` in the directory pytest runs from."""
        return None

    def graph_compile_times(self) -> list[tuple[str, float]]:
        """``(graph name, seconds)`` for each graph this process compiled since the previous call
        (the call drains them); feeds the compile-time chart of ``summary.md``."""
        raise NotSupported("per-graph compile times")

    def compile_env(self) -> Mapping[str, str]:
        """Environment variables a fresh process needs to use this implementation (e.g. a cache
        directory); the suite adds them to the child processes it starts."""
        return {}


# --- honest answers ----------------------------------------------------------------------------------
# An optional method may answer "I have none" by raising NotSupported or by an empty answer ({} or
# an object without the name asked for). Tests read such answers through these helpers, so both
# forms are the same skip with the reason, never a KeyError or an AttributeError.


def helper_api(impl: Implementation, *names: str) -> Any:
    """``impl.helper_api()`` when it has every one of ``names``; else :class:`NotSupported` naming
    the missing ones."""
    api = impl.helper_api()
    missing = [n for n in names if not hasattr(api, n)]
    if missing:
        raise NotSupported(f"{impl.name}'s helper API has no {', '.join(missing)}")
    return api


def declared_variable(impl: Implementation, name: str) -> Any:
    """The default of environment variable ``name`` as ``impl`` declares it; :class:`NotSupported`
    when ``environment_variables()`` does not list it (``{}`` lists none)."""
    variables = dict(impl.environment_variables())
    if name not in variables:
        raise NotSupported(f"{impl.name} does not read {name} (not in environment_variables())")
    return variables[name]


def forced_graph_break(impl: Implementation, key: str) -> Any:
    """One entry of ``impl.forced_graph_breaks()`` (``gb_type``, ``sort``, ``topk``,
    ``no_lowering``); :class:`NotSupported` when the answer lacks it (``{}``: forces none)."""
    value = dict(impl.forced_graph_breaks()).get(key)
    if value is None:
        raise NotSupported(f"{impl.name} forces no such graph break (forced_graph_breaks() has no {key!r})")
    return value


def load_implementation(spec: str | None = None) -> Implementation:
    """Import ``module:factory`` and call the factory; raises ``ValueError`` with guidance."""
    spec = spec or env.impl_spec() or DEFAULT_IMPL
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--impl / CONFORMANCE_IMPL must look like 'package.module:factory', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the module raises, the spec is what the user must fix
        raise ValueError(
            f"cannot import implementation module {module_name!r} (from {spec!r}): {type(exc).__name__}: {exc}"
        ) from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise ValueError(f"{module_name!r} has no callable {attr!r} (from {spec!r})")
    try:
        impl = factory()
    except NotSupported as exc:
        raise ValueError(f"{spec!r}: the factory reports the implementation unavailable: {exc}") from exc
    if not isinstance(impl, Implementation):
        raise ValueError(f"{spec!r} returned {type(impl).__name__}, not a conformance.Implementation")
    return impl
