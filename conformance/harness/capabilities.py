"""The optional capability groups of the adapter protocol (adapter v2), one typed object each.

An :class:`~conformance.harness.implementation.Implementation` declares a group by overriding ONE accessor
method that returns the group's object; the default accessor raises
:class:`~conformance.harness.not_supported.NotSupported`. That is the only rule: the suite never infers a
group from which methods an adapter happens to override.

    impl.backend()        -> BackendCapability        the torch.compile backend contract
    impl.fx_passes()      -> FxPassesCapability       the FX pass pipeline
    impl.cache()          -> CacheCapability          the compile cache
    impl.compiler_args()  -> CompilerArgsCapability   per-graph compiler arguments (+ PolicyRunner)
    impl.capture()        -> CaptureCapability        the deferred (capture, then compile) flow
    impl.spmd()           -> SpmdCapability           SPMD programs and guard rails
    impl.atom()           -> AtomCapability           ATOM compilation and graph capture

The behavioural groups are abstract base classes: the ``@abstractmethod`` members are the group's
required core (a subclass that leaves one out cannot be instantiated), the others raise
``NotSupported`` by default and skip only the tests that need them. Two groups are bundles of
things an implementation hands over (types, decorators, exceptions), typed as frozen dataclasses:
:class:`HelperApi` (every field optional: ``None`` means "not provided") and
:class:`AtomCapability`. Every member's docstring is its contract.

Nothing here imports torch or any implementation: the module is read by the plugin at startup.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, ContextManager, Mapping, Protocol, Sequence

from conformance.harness.not_supported import NotSupported


# --- backend -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HelperApi:
    """The backend's helper API (``neuron_dynamo_backend``-style module-level helpers), member by
    member. ``None``: the implementation has no such member, and every test that needs it skips
    naming it (``conformance.harness.implementation.helper_api(impl, *names)``). ``HelperApi()`` is the
    honest answer of an implementation with none."""

    #: ``set_model_name(name)``: graphs compiled afterwards are named after ``name``, sanitised so
    #: it can never leave the debug and cache directories.
    set_model_name: Callable[[str], None] | None = None
    #: ``get_model_name() -> str | None``: the name last set.
    get_model_name: Callable[[], Any] | None = None
    #: ``get_rank() -> int``: this process's rank (0 outside a distributed run).
    get_rank: Callable[[], int] | None = None
    #: ``get_dynamo_metrics() -> list``: one record per graph compiled since the last reset.
    get_dynamo_metrics: Callable[[], Sequence[Any]] | None = None
    #: ``reset_dynamo_metrics()``: forget the records.
    reset_dynamo_metrics: Callable[[], None] | None = None
    #: ``compile_only()``: a context manager under which graphs are compiled and run eagerly.
    compile_only: Callable[[], ContextManager] | None = None
    #: The exception type a failed compile raises (with the eager fallback off).
    NEFFCompilationError: type | None = None
    #: The exception type a failed execution of a compiled graph raises.
    NEFFExecutionError: type | None = None
    #: ``to_device(tensor)``, where the implementation has a device of its own.
    to_device: Callable[[Any], Any] | None = None
    #: ``is_device_tensor(tensor) -> bool``, where the implementation has a device of its own.
    is_device_tensor: Callable[[Any], bool] | None = None

    def missing(self, *names: str) -> list[str]:
        """Of ``names``, those this API does not provide (unknown names count as missing)."""
        return [n for n in names if getattr(self, n, None) is None]


class BackendCapability(abc.ABC):
    """The ``torch.compile`` backend contract: parameters, graph counting, graph breaks, variables,
    the helper API, debug artifacts, the support matrix (``test_backend_contract.py``,
    ``test_backend_support.py``, ``test_custom_ops.py``)."""

    @abc.abstractmethod
    def names(self) -> Mapping[str, str]:
        """Registered ``torch.compile`` backend names by role: ``compile`` (required), and
        optionally ``capture`` and ``native``."""

    @abc.abstractmethod
    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        """``torch.compile(model, backend=<the compile backend>, **kwargs)``, any parameter passed as
        given (``fullgraph``, ``dynamic``, ``mode``, ``options``, ``name``, ``disable``,
        ``recompile_limit``, ``isolate_recompiles``, ``shapes_spec``)."""

    @abc.abstractmethod
    def reset_graph_count(self) -> None:
        """Start counting compiled graphs from zero (see :meth:`graph_count`)."""

    @abc.abstractmethod
    def graph_count(self) -> int:
        """How many graphs the backend compiled since :meth:`reset_graph_count` (one per forward
        graph the backend was handed; a graph break makes two)."""

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        """The graph-break contract the implementation forces: ``gb_type`` (the diagnostic type of
        the ``Unsupported`` raised under ``fullgraph=True``), ``sort`` and ``topk`` thresholds, and
        ``no_lowering`` (a mapping op name -> reason). ``{}`` (or a missing key): forces none."""
        raise NotSupported("forced graph breaks")

    def set_graph_break_thresholds(self, **thresholds: int | None) -> None:
        """Set the ``sort`` and ``topk`` thresholds of :meth:`forced_graph_breaks` for graphs traced
        after the call (``None`` restores the default), so the suite can test the boundary on small
        tensors."""
        raise NotSupported("setting the graph-break thresholds")

    def environment_variables(self) -> Mapping[str, Any]:
        """Name -> default of every environment variable the implementation reads (``{}``: none)."""
        raise NotSupported("environment variables")

    def helper_api(self) -> HelperApi:
        """The helper API (:class:`HelperApi`; ``HelperApi()``: none of its members)."""
        raise NotSupported("the backend helper API")

    def debug_artifact_globs(self) -> Mapping[str, str]:
        """Kind (``fx_graph``, ``stablehlo``, ``artifact``) -> glob, relative to the debug
        directory, of the files one compile leaves there (``{}``: writes none)."""
        raise NotSupported("debug artifacts")

    def fail_next_execution(self) -> None:
        """Make the next execution of a compiled graph in this process fail at run time, as a
        device fault would (the graph compiled and loaded; its call fails), so the suite can check
        what a caller sees on an execution failure (``NEFFExecutionError``, or the fallback)."""
        raise NotSupported("making an execution fail on request")

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        """``torch.compiler`` APIs the implementation declares unsupported, with the reason."""
        return {}

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        """The support matrix the implementation declares: table -> row -> status (``Supported``,
        ``Partial``, ``Unsupported``), tables and rows named as in ``reports/<impl>/<lane>/support.md``.
        Each probe asserts its row; without a declaration (``{}`` or ``NotSupported``) the probes
        still run and fill the report, but skip instead of passing."""
        raise NotSupported("no expected support matrix declared (expected_support)")


# --- FX passes -----------------------------------------------------------------------------------------


class FxPassesCapability(abc.ABC):
    """The FX pass pipeline: default order, identity, the pass stage of a compile (``test_fx_passes.py``)."""

    @abc.abstractmethod
    def pass_names(self) -> list[str]:
        """Names of the default FX passes, in the order the backend runs them (``[]``: no pass stage)."""

    def identity(self, names: Sequence[str]) -> str:
        """The identity (the string that enters cache keys) of a pass manager holding the named
        default passes in the given order; ``names`` is a subsequence or reordering of
        :meth:`pass_names`."""
        raise NotSupported("FX pass manager identity")

    def passes_applied(self, model: Callable, args: Sequence[Any], options: Mapping[str, Any] | None = None) -> list[str]:
        """Names of the FX passes that ran, in order, while compiling ``model(*args)`` with
        ``options`` (one graph); empty when the pass stage is skipped."""
        raise NotSupported("observing the FX pass stage")

    def graph_after_passes(self, model: Callable, args: Sequence[Any]) -> list[str]:
        """Readable text of each graph ``model(*args)`` produces, after the default FX passes."""
        raise NotSupported("FX graph after the passes")

    def run_pass(self, name: str, gm: Any) -> Any:
        """Run the default pass ``name`` alone on the ``torch.fx.GraphModule`` ``gm``, as a unit test
        of that pass would (``FXPass.run(gm)``), and return what it returns (a GraphModule)."""
        raise NotSupported("running one FX pass on its own")


# --- compile cache ---------------------------------------------------------------------------------


class CacheCapability(abc.ABC):
    """The compile cache: key, atomic publication, locks, warm start, the HLO cache
    (``test_cache_key.py``, ``test_cache_reliability.py``, ``test_cache_warm_start.py``).

    Cache tests run real child processes (``conformance/tests/_cache_child.py``) that load the same
    adapter; everything about a cache is addressed by a ``root``: a fresh, empty directory the
    suite gives the implementation to keep all its cache state in (artifacts, locks, HLO)."""

    @abc.abstractmethod
    def env(
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

    @abc.abstractmethod
    def compiler_invocations(self) -> int:
        """How many times this process has run the compiler (artifact builds, not cache hits)."""

    def hash(
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
        raise NotSupported("the cache key (cache().hash)")

    def plant_entry(self, root: str, key: str, artifact: bytes) -> None:
        """Replace the artifact of entry ``key`` under ``root`` with ``artifact`` and rewrite every
        checksum the entry records to match it, as anyone who can write the cache folder can (the
        suite checks what the implementation then serves)."""
        raise NotSupported("planting a cache entry (cache().plant_entry)")

    def keys(self, root: str) -> list[str]:
        """Keys of the entries published under ``root`` (whole entries only; ``[]``: none)."""
        raise NotSupported("listing cache keys (cache().keys)")

    def entry_files(self, root: str, key: str) -> list[str]:
        """The files that make up one published entry, by position: the compiled artifact, then
        the metadata document, then any others. A test needing role *n* needs *n + 1* files;
        ``[]``: the entry cannot be described (the damage tests skip)."""
        raise NotSupported("describing a cache entry (cache().entry_files)")

    def scratch(self, root: str) -> list[str]:
        """Paths under ``root`` that belong to no published entry and to no running process:
        leftovers of an interrupted write (they must never be loaded)."""
        raise NotSupported("listing cache scratch (cache().scratch)")

    def compiles_in_progress(self, root: str) -> list[dict[str, Any]]:
        """Compiles now holding a key's compile lock under ``root``: dicts with at least ``pid``
        (the holding process) and ``key``."""
        raise NotSupported("compile locks (cache().compiles_in_progress)")

    def lowerings(self) -> int:
        """How many graphs this process has lowered to HLO (an HLO-cache hit is not a lowering)."""
        raise NotSupported("counting lowerings (cache().lowerings)")


# --- per-graph compiler arguments, the runner's policy --------------------------------------------


class PolicyRunner(abc.ABC):
    """A loaded runner driving one of the suite's policy fixture models (``neuron_fixtures/policy.py``)
    with the implementation's model runner (``CompilerArgsCapability.policy_runner``)."""

    @property
    @abc.abstractmethod
    def base_compiler_args(self) -> list[str]:
        """The base list set at load (the caller's optimization level applied)."""

    @abc.abstractmethod
    def resolve(self, graph_type: str) -> list[str] | None:
        """The runner's resolution of the list a graph type compiles with (``None``: the base)."""

    @abc.abstractmethod
    def example(self, graph_type: str) -> dict:
        """Fresh inputs (keyword arguments) for the graph type's compile site."""

    @abc.abstractmethod
    def run(self, graph_type: str, kwargs: dict | None = None) -> dict[str, Any]:
        """Run the site (with :meth:`example` inputs by default): ``{"outputs": ..., "graphs":
        [{"graph_name", "cache_key", "compiler_args"}]}`` for the graphs compiled (or served from
        the cache) by the call."""

    @abc.abstractmethod
    def run_unscoped(self, graph_type: str, kwargs: dict | None = None) -> dict[str, Any]:
        """The same call outside any scope (a serve-time recompile that forgot the scope)."""

    @abc.abstractmethod
    def eager(self, graph_type: str, kwargs: dict | None = None) -> Any:
        """The model's eager outputs for the same inputs."""

    @abc.abstractmethod
    def trace_job(self, graph_type: str) -> tuple:
        """The worker's parallel-trace job for the graph type (for ``CaptureCapability.parallel_trace``)."""


class CompilerArgsCapability(abc.ABC):
    """Per-graph compiler arguments: the scope, the level helper, the runner's policy
    (``test_compiler_args_scope.py``, ``test_compiler_args_flows.py``). It is also what the policy
    fixture models need (``neuron_fixtures.policy.CompilerArgsHelpers``)."""

    @abc.abstractmethod
    def scoped_compiler_args(self, compiler_args: Sequence[str] | None) -> ContextManager:
        """A context manager: graphs compiled inside use ``compiler_args`` (``None``: no override)."""

    @abc.abstractmethod
    def apply_scoped_compiler_args(self, options: Mapping[str, Any] | None) -> dict:
        """``options`` with the scoped list as ``compiler_args``, or unchanged with no scope."""

    def with_optimization_level(self, args: Sequence[str] | None, level: int) -> list[str]:
        """The pure level helper; raises (any exception) for a malformed level."""
        raise NotSupported("the optimization-level helper (compiler_args().with_optimization_level)")

    def policy_runner(
        self,
        *,
        policy: str = "default",
        mode: str = "compile",
        compiler_args: Sequence[str] | None = None,
        optimization_level: int | None = None,
    ) -> PolicyRunner:
        """A loaded :class:`PolicyRunner` for the policy fixture ``policy``; ``mode``: ``compile``
        (in-process), ``capture`` (stage for the deferred flow) or ``native``."""
        raise NotSupported("model runner with a per-graph compiler-argument policy")


# --- the deferred flow -------------------------------------------------------------------------------


class CaptureCapability(abc.ABC):
    """The deferred flow: parallel trace, staged metadata, parallel compile (tests marked
    ``capability("capture")`` in ``test_compiler_args_flows.py``)."""

    @abc.abstractmethod
    def parallel_trace(self, jobs: Sequence[tuple], *, cache_dir: str, workers: int = 2, timeout: float | None = None) -> list[dict]:
        """Run trace jobs in forked children; one dict per job, in order, without raising for a failed
        job: ``{"ok", "identity", "error", "captured": [{"cache_key", "graph_name", "compiler_args"}]}``.
        A malformed job raises before anything runs; a guard-rail violation in a job (under
        ``NEURON_LIBTORCH_SPMD_STRICT=1``) raises as itself (``SpmdCapability.violation_errors``)."""

    @abc.abstractmethod
    def parallel_compile(self, cache_dir: str, *, workers: int = 2, base_compiler_args: Sequence[str] | None = None) -> list[dict]:
        """Compile the staged graphs into the artifact cache; one dict per staged entry:
        ``{"graph_name", "cache_key", "compiler_args", "args_source" ("recorded"|"base"), "ok", "error"}``.
        A guard-rail violation (the single-artifact check under ``NEURON_LIBTORCH_SPMD_STRICT=1``)
        raises as itself, never as a failed entry."""

    @abc.abstractmethod
    def staged_metadata(self, cache_dir: str) -> list[dict]:
        """The metadata documents of the staged entries under ``cache_dir`` (parsed JSON)."""

    def capture_in_process(self, model: Callable, *, cache_dir: str) -> Callable:
        """``model`` compiled with the capture seam: calling the result runs the model (eagerly) and
        stages its graphs under ``cache_dir`` for :meth:`parallel_compile`, in this process (so a
        sharded model's collectives run on this rank's process group)."""
        raise NotSupported("capture seam in-process")

    def legacy_capture_dir(self, dest: str) -> str:
        """Write a capture directory as an old release left it (entries with no recorded compiler
        arguments) into ``dest``; returns it."""
        raise NotSupported("a capture directory from an older release")


# --- SPMD ------------------------------------------------------------------------------------------------


class SpmdCapability(abc.ABC):
    """SPMD: the runtime rank, the mesh registry, programs with collectives, the guard rails
    (``test_spmd.py``, ``test_spmd_guards.py``, ``test_spmd_torchrun.py``). Its members run inside
    the ranks that ``conformance.harness.launcher`` starts (``torch.distributed`` is initialized)."""

    @abc.abstractmethod
    def rank_tensor(self, rank: int) -> Any:
        """The runtime ``rank`` input the runner threads into every forward (a tensor)."""

    @abc.abstractmethod
    def process_group(self, replica_groups: Sequence[Sequence[int]]) -> Any:
        """Create the process groups of a full mesh (a partition of the world; every rank calls
        this with the same argument), register the mesh, and return this rank's group."""

    def lower(self, model: Callable, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> list[str]:
        """The text each graph of ``model(*args, **kwargs)`` is keyed by (for a graph with
        collectives, the whole program with its replica groups), in order, without compiling."""
        raise NotSupported("SPMD: lowering graphs with collectives")

    def compile_stats(self) -> dict[str, Any]:
        """In this process so far: ``{"graphs": {graph name: cache key}, "compiler_invocations": n}``."""
        raise NotSupported("SPMD: compile statistics")

    def check_single_artifact(self, staged: Mapping[str, Mapping[str, Sequence[int]]], *, strict: bool | None = None) -> list:
        """The single-artifact check of ``parallel_compile``: ``staged[graph][hash] = ranks``;
        returns the splinters (warns), or raises under the strict flag (``strict=None``: from
        ``NEURON_LIBTORCH_SPMD_STRICT``)."""
        raise NotSupported("SPMD: single-artifact check")

    def violation_errors(self) -> tuple[type, ...]:
        """The exception types the guard rails raise under ``NEURON_LIBTORCH_SPMD_STRICT=1``."""
        raise NotSupported("SPMD: guard rails")


# --- ATOM ---------------------------------------------------------------------------------------------------


class AtomCounters(Protocol):
    """The compilation counters of ATOM (``COUNTERS``)."""

    def snapshot(self) -> Any:
        """The counters now (an opaque value for :meth:`delta`)."""

    def delta(self, since: Any) -> Any:
        """What changed since a :meth:`snapshot`: an object whose ``as_dict()`` maps counter name
        (``num_graphs_seen``, ``num_piecewise_graphs_seen``, ``num_piecewise_capturable_graphs_seen``,
        ``num_backend_compilations``, ``num_cache_hits``, ...) to the increase."""


@dataclasses.dataclass(frozen=True)
class AtomCapability:
    """What the ATOM tests need from an ATOM implementation (``test_atom_compilation.py``,
    ``test_atom_graphs.py``, ``test_atom_matrix.py``; ``docs/atom.md`` has the design). The names
    are the design's public names; the conformance ATOM tests and fixtures use these members and
    nothing else (``tests/suite/test_conformance_plugin.py`` checks it).

    The first block (configuration, the compile decorator, counters) is required. The forward
    context and graph-capture members are optional: ``None`` means "not provided", and the graph
    and runner-level tests skip naming what is missing (:meth:`missing`)."""

    # configuration and levels
    #: ``Config(max_num_seqs=, compilation_config=, enforce_eager=, ...)``: the engine configuration;
    #: invalid values raise :attr:`ConfigError` naming the field.
    Config: Callable[..., Any]
    #: ``CompilationConfig(level=, compiler=, cache_dir=, compile_sizes=, cudagraph_mode=,
    #: cudagraph_capture_sizes=, cuda_graph_sizes=, use_inductor=, use_cudagraph=, splitting_ops=, ...)``;
    #: level 3 generates the capture-size ladder of the seed (``capture_sizes``).
    CompilationConfig: Callable[..., Any]
    #: The graph modes (``NONE``, ``FULL``, ``TR_HYBRID``, ``FULL_AND_TR_HYBRID``, ...).
    CUDAGraphMode: Any
    #: The typed configuration error (names the offending field).
    ConfigError: type
    # the compile decorator and the compiler manager
    #: ``support_torch_compile(cls)``: the class decorator; instances take ``atom_config=``.
    support_torch_compile: Callable[[type], type]
    #: ``compile_model(model, config)``: the callable the runner runs at ``config``'s level.
    compile_model: Callable[[Any, Any], Callable]
    #: ``direct_register_custom_op(name, fn, mutates_args=, ...) -> str``: a custom op (a splitting op).
    direct_register_custom_op: Callable[..., str]
    #: Raised at first compile by a forward that reassigns a module buffer (names the class).
    BufferUpdateError: type
    #: The compilation counters.
    COUNTERS: AtomCounters
    # the forward context (what an eager region sees)
    #: The per-step context (``positions``, ``is_prefill``, ``batch_size``, ``running_bs``, ``running_tokens``).
    Context: Callable[..., Any] | None = None
    #: Attention metadata (``max_seqlen_q``, ``max_seqlen_k``, ``context_lens``).
    AttentionMetaData: Callable[..., Any] | None = None
    #: ``KVCacheTensor(layer, k, v)``: one layer's KV cache.
    KVCacheTensor: Callable[..., Any] | None = None
    #: ``in_forward_context(attn, lora, ctx, *, kv_cache_data=, tr_graph=)``: a context manager.
    in_forward_context: Callable[..., ContextManager] | None = None
    #: ``get_forward_context()``: the context of the step running now.
    get_forward_context: Callable[[], Any] | None = None
    #: Decorator: the function runs eagerly, outside every captured graph (the graph breaks there).
    eager_region: Callable[[Callable], Callable] | None = None
    # graph capture: the recorder and the runner
    #: ``ModelRunner(model, config, *, kv_cache_data=, max_model_len=, device=, rank=, dp_size=,
    #: enable_tbo=, progress=)``: captures at load and replays per step (``execute``).
    ModelRunner: Callable[..., Any] | None = None
    #: ``token_graph(per_phase=)``: class decorator marking a token-graph unit.
    token_graph: Callable[..., Callable] | None = None
    #: ``token_graph_of(unit)``: the recorded token graph of a unit.
    token_graph_of: Callable[[Any], Any] | None = None
    #: The token-graph recorder type (``.pool``).
    TokenGraph: Callable[..., Any] | None = None
    #: The request-graph recorder type (``.pool``, ``.replay(bucket)``).
    ReqGraph: Callable[..., Any] | None = None
    #: ``request_bucket(batch_size, is_prefill)``: the bucket key of a request graph.
    request_bucket: Callable[..., Any] | None = None
    #: A graph memory pool type.
    GraphPool: Callable[..., Any] | None = None
    #: ``graph_pool()``: the pool every graph shares.
    graph_pool: Callable[[], Any] | None = None
    #: Raised for a replay of a bucket that was never captured.
    GraphCaptureError: type | None = None
    #: ``recording_backend(backend)``: a ``torch.compile`` backend that records for capture.
    recording_backend: Callable[[str], Any] | None = None
    #: ``step_report(runner)``: which path served the runner's last ``execute`` step: an object with
    #: ``path`` (``"token_graph"``, ``"req_graph"`` or ``"eager"``), ``bucket`` (rows of the token
    #: bucket, requests of the request graph; ``None`` when eager), ``padded_rows``, ``reason`` (why
    #: eager), ``ubatch_split_bs`` (the TBO microbatches' request counts, or ``None``).
    step_report: Callable[[Any], Any] | None = None

    def missing(self, *names: str) -> list[str]:
        """Of ``names``, those not provided (unknown names count as missing)."""
        return [n for n in names if getattr(self, n, None) is None]

    @classmethod
    def from_namespace(cls, namespace: Any) -> "AtomCapability":
        """The capability from an object carrying the design's public names (a module): every
        required member must be there, an optional one absent is ``None``. Only these members are
        taken: the tests see nothing else of ``namespace``."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING and not hasattr(namespace, f.name):
                raise TypeError(f"{namespace!r} has no {f.name}: required by the ATOM capability")
            values[f.name] = getattr(namespace, f.name, None)
        return cls(**values)


def members(kind: type) -> list[str]:
    """The public members a capability type declares (methods and fields), in declaration order."""
    if dataclasses.is_dataclass(kind):
        return [f.name for f in dataclasses.fields(kind)]
    return [n for n in vars(kind) if not n.startswith("_")]
