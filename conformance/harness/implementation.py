"""The adapter protocol: what an implementation provides to the conformance suite.

An implementation is plugged in as ``--conformance-impl package.module:factory`` (or the
``CONFORMANCE_IMPL`` variable). The factory takes no arguments and returns an
:class:`Implementation`. The core is small: :attr:`Implementation.name`, :meth:`~Implementation.versions`,
:meth:`~Implementation.compile` and :meth:`~Implementation.lower`. Everything else belongs to an
optional capability group (:data:`CAPABILITIES`), declared by ONE accessor returning a typed object
(``impl.cache() -> CacheCapability``; the types and their contracts are in
:mod:`conformance.harness.capabilities`). The default accessor raises :class:`NotSupported`: the group is
absent, and exactly the tests of that group's contract are skipped with the reason. A member of a
provided group that cannot serve one case raises :class:`NotSupported` too, which the suite reports
as a skip carrying the reason, never as a pass. ``docs/adapter.md`` has the table and a template.

Tests talk to an implementation only through this interface. The adapter module must be importable
in a fresh interpreter: the suite's child processes load it by the same ``module:factory`` spec.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import platform
from typing import Any, Callable, ContextManager, Mapping, Sequence

from conformance.harness.capabilities import (
    AtomCapability,
    BackendCapability,
    CacheCapability,
    CaptureCapability,
    CompilerArgsCapability,
    FxPassesCapability,
    SpmdCapability,
    HelperApi,
    members,
)
from conformance.harness.evidence import Evidence, observe_dynamo
# Re-exported: adapters and older suites import both names from this module.
from conformance.harness.not_supported import NOT_SUPPORTED_EXIT, NotSupported, asked_by_the_suite
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


@dataclasses.dataclass(frozen=True)
class Capability:
    """One optional group of the protocol: the accessor ``Implementation.<name>()`` that returns it,
    the type it returns (:mod:`conformance.harness.capabilities`), the contract it serves and the test
    modules (``conformance/test_<module>.py``) that need it."""

    name: str
    contract: str
    kind: type
    modules: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        """The members an object of the group must have (abstract methods; dataclass fields
        without a default)."""
        if dataclasses.is_dataclass(self.kind):
            return tuple(f.name for f in dataclasses.fields(self.kind) if f.default is dataclasses.MISSING)
        return tuple(n for n in members(self.kind) if n in getattr(self.kind, "__abstractmethods__", ()))

    @property
    def optional(self) -> tuple[str, ...]:
        """The members that may answer ``NotSupported`` (or ``None``, for a dataclass field)."""
        return tuple(n for n in members(self.kind) if n not in self.required and n not in ("missing", "from_namespace"))

    def get(self, impl: "Implementation") -> Any:
        """``impl.<name>()``: the group's object, or :class:`NotSupported` when ``impl`` does not
        provide the group; a ``TypeError`` naming the adapter when it returns something else."""
        found = getattr(impl, self.name)()
        if not isinstance(found, self.kind):
            raise TypeError(
                f"{type(impl).__name__}.{self.name}() returned {type(found).__name__}, not a "
                f"conformance.harness.capabilities.{self.kind.__name__} (docs/adapter.md, 'Capability groups')"
            )
        return found

    def unavailable(self, impl: "Implementation") -> str | None:
        """Why ``impl`` does not provide the group (its ``NotSupported`` message), or ``None``."""
        try:
            self.get(impl)
        except NotSupported as exc:
            return str(exc) or "not provided"
        return None


#: The optional capability groups, by name (= the accessor's name). To add a group: a type in
#: :mod:`conformance.harness.capabilities`, an accessor on :class:`Implementation` raising
#: :class:`NotSupported`, and an entry here naming the contract and the test modules.
CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "backend",
            "the torch.compile backend contract: parameters, graph counting, the support matrix",
            BackendCapability,
            modules=("backend_contract", "backend_support", "custom_ops"),
        ),
        Capability(
            "fx_passes",
            "the FX pass pipeline: default order, identity, the pass stage of a compile",
            FxPassesCapability,
            modules=("fx_passes",),
        ),
        Capability(
            "cache",
            "the compile cache: key, atomic publication, locks, warm start, the HLO cache",
            CacheCapability,
            modules=("cache_key", "cache_reliability", "cache_warm_start", "cache_precompile"),
        ),
        Capability(
            "compiler_args",
            "per-graph compiler arguments: the scope, the level helper, the runner's policy",
            CompilerArgsCapability,
            modules=("compiler_args_scope", "compiler_args_flows"),
        ),
        Capability(
            "capture",
            "the deferred flow: parallel trace, staged metadata, parallel compile",
            CaptureCapability,
        ),
        Capability(
            "spmd",
            "SPMD: the runtime rank, the mesh registry, programs with collectives, the guard rails",
            SpmdCapability,
            modules=("spmd", "spmd_guards", "spmd_torchrun"),
        ),
        Capability(
            "atom",
            "ATOM: compilation levels, piecewise compilation, the compiler manager, graph capture",
            AtomCapability,
            modules=("atom_compilation", "atom_graphs", "atom_matrix"),
        ),
    )
}


def missing_capabilities(impl: "Implementation", names: Sequence[str]) -> dict[str, str]:
    """Of the named groups, those ``impl`` does not provide, each with the reason it gives."""
    out = {}
    for name in names:
        if name not in CAPABILITIES:
            raise ValueError(f"unknown capability group {name!r}; known: {sorted(CAPABILITIES)}")
        reason = CAPABILITIES[name].unavailable(impl)
        if reason is not None:
            out[name] = reason
    return out


class Implementation:
    """Subclass, provide the core and override the accessor of each group your implementation has
    (see the module doc and :mod:`conformance.harness.capabilities`)."""

    #: Short name used in reports and snapshot directories (letters, digits, ``_`` and ``-``).
    name: str = "unnamed"

    #: Whose snapshot tree the run compares with (default: this implementation's own, ``name``); a
    #: deliberately broken variant of an implementation names the original to be checked against
    #: its goldens.
    snapshots_of: str | None = None

    # --- the core -------------------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        """Versions of what shapes results: at least torch, the lowering, the compiler. Nothing
        that depends on the machine the run happened on (that is :meth:`machine`): the checked-in
        support matrices compare these, and they must read the same on every machine."""
        return {}

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

    # --- defaults worth overriding --------------------------------------------------------------
    def machine(self) -> dict[str, str]:
        """Facts about the machine the run happened on (CPU, cores), reported beside the versions
        and never compared. The default is what the harness sees; an implementation whose
        artifacts are keyed on its own notion of the host reports that instead."""
        return machine_facts()

    def reset(self) -> None:
        """Forget compiled graphs (called before each conformance test); the default resets Dynamo."""
        import torch  # on use: this module is imported by the plugin in every pytest run

        torch._dynamo.reset()

    def precision(self) -> Precision:
        """The precision the implementation computes in (:class:`~conformance.harness.precision.Precision`):
        which float dtypes it computes in a narrower one (float64 as float32, float32 matmuls in
        TF32, float32 under bfloat16 autocast). The suite derives its tolerances from it and
        reports it; a result that only meets a narrower dtype's bounds than declared fails as an
        undeclared loss of precision. The default: every dtype computed as itself."""
        return Precision()

    def evidence(self) -> ContextManager[Evidence]:
        """A context manager observing a block of work; it yields an :class:`~conformance.harness.evidence.Evidence`
        that is complete when the block exits (``refresh()`` brings it up to date inside).

        The suite puts its own observer on whatever this yields (``conformance.harness.evidence.observe``):
        the graphs Dynamo hands the backend, the calls of the callables it returned, and the ATen
        kernels each call ran, compared with the graph's compute ops. The default yields that
        observation alone. An implementation that knows more reports it: graphs it compiled,
        graphs it served from its cache, runs of its compiled path, and every graph that ran
        outside it (eagerly or through another backend) with the reason; that adds detail and never
        replaces the observation. The suite passes a parity, dtype, model, op, cache or API test
        only when the evidence shows the compiled path carried the work; the outcome is otherwise
        ``fell back: <reason>`` (``fell back: ran eagerly: graph 0/0 (add, mm)``). See
        ``docs/adapter.md``."""
        try:
            with asked_by_the_suite():
                names = [self.backend().names()["compile"]]
        except (NotSupported, KeyError):
            names = None
        return observe_dynamo(backends=names)

    # --- the capability groups: one accessor each (conformance.harness.capabilities) ----------------------
    # Override the accessor of each group you provide; return the same object on every call
    # (it may keep state, e.g. a graph counter). The default raises NotSupported: every test of
    # the group's contract is skipped with the reason.

    def backend(self) -> BackendCapability:
        """The ``torch.compile`` backend contract (:class:`~conformance.harness.capabilities.BackendCapability`)."""
        raise NotSupported("the backend contract (backend() not provided)")

    def fx_passes(self) -> FxPassesCapability:
        """The FX pass pipeline (:class:`~conformance.harness.capabilities.FxPassesCapability`)."""
        raise NotSupported("an FX pass pipeline (fx_passes() not provided)")

    def cache(self) -> CacheCapability:
        """The compile cache (:class:`~conformance.harness.capabilities.CacheCapability`)."""
        raise NotSupported("a compile cache (cache() not provided)")

    def compiler_args(self) -> CompilerArgsCapability:
        """Per-graph compiler arguments (:class:`~conformance.harness.capabilities.CompilerArgsCapability`)."""
        raise NotSupported("per-graph compiler arguments (compiler_args() not provided)")

    def capture(self) -> CaptureCapability:
        """The deferred flow (:class:`~conformance.harness.capabilities.CaptureCapability`)."""
        raise NotSupported("the deferred capture/compile flow (capture() not provided)")

    def spmd(self) -> SpmdCapability:
        """SPMD programs and guard rails (:class:`~conformance.harness.capabilities.SpmdCapability`)."""
        raise NotSupported("SPMD (spmd() not provided)")

    def atom(self) -> AtomCapability:
        """ATOM compilation and graph capture (:class:`~conformance.harness.capabilities.AtomCapability`)."""
        raise NotSupported("ATOM compilation and graph capture (atom() not provided)")

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

    def child_preload(self) -> Sequence[str]:
        """Modules of the libraries below the implementation (not the implementation's own) that
        the suite's fork servers may import before they fork a child, so that each child skips
        that import: only modules that read no environment variable and start no thread at
        import, since a forked child keeps what its server did then. Default: none (each child
        imports everything past torch and Dynamo itself)."""
        return ()


# --- honest answers ----------------------------------------------------------------------------------
# An optional method may answer "I have none" by raising NotSupported or by an empty answer ({} or
# an object without the name asked for). Tests read such answers through these helpers, so both
# forms are the same skip with the reason, never a KeyError or an AttributeError.


def helper_api(impl: Implementation, *names: str) -> HelperApi:
    """``impl.backend().helper_api()`` when it has every one of ``names``; else
    :class:`NotSupported` naming the missing ones."""
    api = impl.backend().helper_api()
    missing = api.missing(*names)
    if missing:
        raise NotSupported(f"{impl.name}'s helper API has no {', '.join(missing)}")
    return api


def declared_variable(impl: Implementation, name: str) -> Any:
    """The default of environment variable ``name`` as ``impl`` declares it; :class:`NotSupported`
    when ``environment_variables()`` does not list it (``{}`` lists none)."""
    variables = dict(impl.backend().environment_variables())
    if name not in variables:
        raise NotSupported(f"{impl.name} does not read {name} (not in environment_variables())")
    return variables[name]


def forced_graph_break(impl: Implementation, key: str) -> Any:
    """One entry of ``impl.forced_graph_breaks()`` (``gb_type``, ``sort``, ``topk``,
    ``no_lowering``); :class:`NotSupported` when the answer lacks it (``{}``: forces none) or gives
    it empty (``"no_lowering": {}``: no op without a lowering). A threshold of 0 is a value."""
    value = dict(impl.backend().forced_graph_breaks()).get(key)
    if value is None or (isinstance(value, (str, Mapping, Sequence)) and not value):
        raise NotSupported(f"{impl.name} forces no such graph break (forced_graph_breaks() has no {key!r})")
    return value


def debug_artifacts(impl: Implementation) -> dict[str, str]:
    """``impl.backend().debug_artifact_globs()`` (kind -> glob); :class:`NotSupported` when it names
    none (``{}``: writes none)."""
    globs = dict(impl.backend().debug_artifact_globs())
    if not globs:
        raise NotSupported(f"{impl.name} names no debug artifacts (debug_artifact_globs() is empty)")
    return globs


def declared_unsupported_api(impl: Implementation, api: str) -> str | None:
    """Why ``impl`` declares the ``torch.compiler`` API ``api`` unsupported, or ``None`` when it
    declares nothing about it. Unlike the other readers this one never skips: an implementation
    that declares nothing (``{}`` or :class:`NotSupported`) has every API probed."""
    try:
        declared = dict(impl.backend().unsupported_compiler_apis())
    except NotSupported:
        return None
    return declared.get(api)


def fx_pass_names(impl: Implementation) -> list[str]:
    """``impl.fx_passes().pass_names()``; :class:`NotSupported` when it is ``[]`` (no pass stage to
    test)."""
    names = list(impl.fx_passes().pass_names())
    if not names:
        raise NotSupported(f"{impl.name} declares no FX passes (pass_names() is empty)")
    return names


def fx_graphs_after_passes(impl: Implementation, model: Callable, args: Sequence[Any]) -> list[str]:
    """``impl.fx_passes().graph_after_passes(model, args)``; :class:`NotSupported` when it is ``[]``."""
    graphs = list(impl.fx_passes().graph_after_passes(model, args))
    if not graphs:
        raise NotSupported(f"{impl.name} shows no graph after its passes (graph_after_passes() is empty)")
    return graphs


#: The roles of ``cache().entry_files()``, by position (docs/adapter.md, "How a cache entry is described").
ENTRY_ROLES = ("artifact", "metadata")


def cache_entry_file(impl: Implementation, root: str, key: str, role: int) -> str:
    """The file of ``key``'s entry with ``role`` (an index of :data:`ENTRY_ROLES`), as
    ``impl.cache().entry_files()`` describes the entry; :class:`NotSupported` when it describes the
    entry by fewer files (``[]``: not described)."""
    files = cache_entry_files(impl, root, key)
    if len(files) <= role:
        raise NotSupported(f"{impl.name} describes its cache entries by {len(files)} file(s), so the entry's "
                           f"{ENTRY_ROLES[role]} file cannot be named (entry_files)")
    return files[role]


def cache_entry_files(impl: Implementation, root: str, key: str) -> list[str]:
    """Every file ``impl.cache().entry_files()`` names for ``key``'s entry, for a test that looks
    for leftovers: ``[]`` (not described) names none, so there is nothing to find."""
    return [str(p) for p in impl.cache().entry_files(str(root), key)]


#: Each optional member whose empty answer means "I have none", and the reader a test calls instead
#: of the member, so that the empty answer and NotSupported are one skip. tests/suite/test_conformance_plugin.py
#: parses the conformance test modules and fails on a direct read of any of these members.
HONEST_READERS: dict[str, str] = {
    "forced_graph_breaks": "forced_graph_break",
    "environment_variables": "declared_variable",
    "helper_api": "helper_api",
    "debug_artifact_globs": "debug_artifacts",
    "unsupported_compiler_apis": "declared_unsupported_api",
    "expected_support": "conformance.reporting.support.declared",
    "pass_names": "fx_pass_names",
    "graph_after_passes": "fx_graphs_after_passes",
    "entry_files": "cache_entry_file",
}


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
