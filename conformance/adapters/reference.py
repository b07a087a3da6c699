"""The adapter for this project's reference implementation (the default implementation)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from conformance.harness.capabilities import (
    AtomCapability,
    BackendCapability,
    CacheCapability,
    CaptureCapability,
    CompilerArgsCapability,
    FxPassesCapability,
    HelperApi,
    SpmdCapability,
)
from conformance.harness.evidence import Evidence, observe_dynamo
from conformance.harness.implementation import Implementation
from conformance.harness.precision import Precision

#: The reference's compiling backends (a graph handed to any of them must be compiled by it).
_BACKENDS = ("neuron", "neuron_libtorch", "neuron_native_lite")

#: The precision the reference computes in, declared to the suite (the one place to change when
#: the reference's runtime changes): its runtime narrows float64 to float32 at the boundary, as a
#: device without f64 units does, and widens the results back.
PRECISION = Precision(computes={"float64": "float32"},
                      note="the runtime narrows float64 to float32, as on a device without f64 units")

_PACKAGE = Path(__file__).resolve().parent.parent

_S, _P, _U = "Supported", "Partial", "Unsupported"

#: The seeds' support tables for ``backend="neuron"``: parameters and ``torch.compiler`` APIs as
#: the backend reference lists them; graph breaks, variables and helper symbols are behaviours it
#: specifies (Supported), except rows whose probe can only see part of the behaviour in-process
#: (the cache variables' effect is the cache contract's; an execution error needs a device).
SEED_SUPPORT: dict[str, dict[str, str]] = {
    "parameters": {
        "model": _S, "fullgraph": _S, "dynamic": _U, "backend": _S, "mode": _U, "options": _P, "name": _U,
        "disable": _S, "recompile_limit": _S, "isolate_recompiles": _S, "shapes_spec": _U,
    },
    "apis": {
        **dict.fromkeys(
            ["compile", "reset", "allow_in_graph", "substitute_in_graph", "assume_constant_result", "list_backends",
             "disable", "set_default_backend", "get_default_backend", "set_stance", "set_enable_guard_collectives",
             "is_compiling", "is_dynamo_compiling", "is_exporting", "keep_portable_guards_unsafe",
             "skip_guard_on_inbuilt_nn_modules_unsafe", "skip_guard_on_all_nn_modules_unsafe",
             "keep_tensor_guards_unsafe", "skip_guard_on_globals_unsafe", "skip_all_guards_unsafe",
             "load_cache_artifacts", "load_compiled_function", "save_cache_artifacts", "wrap_numpy"],
            _S,
        ),
        "cudagraph_mark_step_begin": _U,
        "nested_compile_region": _U,
    },
    "graph_breaks": dict.fromkeys(
        ["torch.sort, torch.argsort", "torch.topk", "torch.nn.functional.grouped_mm, torch._grouped_mm",
         "Operations with no lowering"],
        _S,
    ),
    "variables": {
        **dict.fromkeys(
            ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "TORCH_NEURONX_DEBUG_DIR",
             "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "TORCH_NEURONX_COMPILE_ONLY",
             "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "TORCH_NEURONX_RETAIN_DEVICE_MODE",
             "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS", "TORCH_NEURONX_ENABLE_NKI_SDPA",
             "TORCH_NEURONX_ENABLED_METRIC_TABLES", "TORCH_NEURONX_METRICS_DIR"],
            _S,
        ),
        **dict.fromkeys(
            ["TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
             "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "TORCH_CACHING_PRECOMPILE"],
            _P,
        ),
    },
    "helper_api": {
        **dict.fromkeys(
            ["set_model_name()", "get_model_name()", "get_rank()", "get_dynamo_metrics()", "reset_dynamo_metrics()",
             "NEFFCompilationError", "NEFFExecutionError"],
            _S,
        ),
    },
}


class _Backend(BackendCapability):
    """The ``neuron`` backend's contract: parameters, graph counting, breaks, variables, helpers."""

    def names(self) -> dict[str, str]:
        return {"compile": "neuron", "capture": "neuron_libtorch_graph_capture", "native": "neuron_native_lite"}

    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        return torch.compile(model, backend="neuron", **kwargs)

    def reset_graph_count(self) -> None:
        from reference import reset_dynamo_metrics

        reset_dynamo_metrics()

    def graph_count(self) -> int:
        from reference import get_dynamo_metrics

        return len(get_dynamo_metrics())

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        from reference.backends import graph_breaks

        return {
            "gb_type": graph_breaks.GB_TYPE,
            "sort": graph_breaks.THRESHOLDS.get("sort"),
            "topk": graph_breaks.THRESHOLDS.get("topk"),
            "no_lowering": dict(graph_breaks.break_ops()),
        }

    def set_graph_break_thresholds(self, **thresholds):
        from reference import set_graph_break_thresholds
        from reference.backends.graph_breaks import DEFAULT_THRESHOLDS

        set_graph_break_thresholds(**{k: DEFAULT_THRESHOLDS.get(k, v) if v is None else v for k, v in thresholds.items()})

    def environment_variables(self) -> Mapping[str, Any]:
        from reference.core import env

        return {name: env.documented_default(name) for name in env.declared()}

    def debug_artifact_globs(self) -> Mapping[str, str]:
        return {"fx_graph": "*/fx_graph.py", "stablehlo": "*/stablehlo.mlir", "artifact": "*/artifact.vmfb"}

    def fail_next_execution(self) -> None:
        from reference.runtime import fail_next_execution

        fail_next_execution()

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        return {
            "cudagraph_mark_step_begin": "the reference runs no CUDA graphs, so there is no step to mark; "
            "the call does nothing for this backend",
        }

    def helper_api(self) -> HelperApi:
        import reference

        return HelperApi(**{f.name: getattr(reference, f.name, None) for f in dataclasses.fields(HelperApi)})

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        return SEED_SUPPORT


class _FxPasses(FxPassesCapability):
    """The reference's default FX pass pipeline."""

    def pass_names(self) -> list[str]:
        from reference.fx_passes import get_default_pass_manager

        return get_default_pass_manager().pass_names()

    def identity(self, names: Sequence[str]) -> str:
        from reference.fx_passes import FXPassManager, get_default_pass_manager

        by_name = {p.name: p for p in get_default_pass_manager().passes}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"unknown FX passes {unknown}; known: {sorted(by_name)}")
        manager = FXPassManager()
        for n in names:
            manager.add_pass(by_name[n])
        return manager.uuid()

    def run_pass(self, name: str, gm):
        from reference.fx_passes import get_default_pass_manager

        by_name = {p.name: p for p in get_default_pass_manager().passes}
        if name not in by_name:
            raise ValueError(f"unknown FX pass {name!r}; known: {sorted(by_name)}")
        return by_name[name].run(gm)

    def passes_applied(self, model: Callable, args: Sequence[Any], options: Mapping[str, Any] | None = None) -> list[str]:
        import logging

        from reference.flows.tools import lower_graphs

        ran: list[str] = []

        class _Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if isinstance(record.msg, str) and record.msg.startswith("FX Pass '%s' completed") and record.args:
                    ran.append(str(record.args[0]))

        logger = logging.getLogger("reference.fx_passes")
        handler, level = _Collect(logging.DEBUG), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            lower_graphs(model, tuple(args), options=options)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        return ran

    def graph_after_passes(self, model: Callable, args: Sequence[Any]) -> list[str]:
        from reference.fx_passes import get_default_pass_manager

        texts: list[str] = []

        def backend(gm, example_inputs, **_):
            gm = get_default_pass_manager().run_passes(gm, graph_name=f"graph_{len(texts)}", target_device="cpu")
            texts.append(gm.code.strip() + "\n")
            return gm.forward

        torch._dynamo.reset()
        try:
            torch.compile(model, backend=backend, dynamic=False)(*args)
        finally:
            torch._dynamo.reset()
        return texts


class _Cache(CacheCapability):
    """The NEFF cache (``root/neff``, ``root/local``) and the HLO cache (``root/hlo``)."""

    def hash(self, hlo, compiler_args, input_specs, *, versions=None, replica_groups=None, breakdown=False):
        from reference.cache.key import create_cache_hash
        from reference.compiler.driver import host_identity

        if versions is not None and "host" not in versions:
            # the caller's versions are versions() (tool versions); the key also holds the host the
            # artifact is built for, a machine fact that versions() leaves to machine()
            versions = {**versions, "host": host_identity()}
        return create_cache_hash(
            hlo, compiler_args, input_specs, versions, replica_groups=replica_groups, breakdown=breakdown
        )

    def env(self, root, *, lock_timeout_s=None, disable=False, assert_hit=False, neff_dir=None, secret=None):
        import os

        out = {
            "TORCH_NEURONX_NEFF_CACHE_DIR": neff_dir or os.path.join(root, "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(root, "local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(root, "hlo"),
            "TORCH_NEURONX_NEFF_DISABLE_CACHE": "1" if disable else "0",
            "NEURON_LIBTORCH_ASSERT_CACHE_HIT": "1" if assert_hit else "0",
        }
        if lock_timeout_s is not None:
            out["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] = str(int(lock_timeout_s))
        if secret is not None:
            out["TORCH_NEURONX_CACHE_HMAC_KEY"] = secret
        return out

    def plant_entry(self, root, key, artifact):
        import hashlib
        import os

        from reference.cache.neff_cache import ARTIFACT_FILE, METADATA_FILE, _metadata_checksum
        from reference.core.schema import ArtifactMetadata

        folder = self._neff_cache(root).entry_dir(key)
        with open(os.path.join(folder, METADATA_FILE), encoding="utf-8") as fh:
            meta = ArtifactMetadata.from_json(fh.read())
        meta.artifact_size = len(artifact)
        meta.artifact_sha256 = hashlib.sha256(artifact).hexdigest()
        meta.extra.pop("metadata_sha256", None)
        meta.extra["metadata_sha256"] = _metadata_checksum(meta)
        with open(os.path.join(folder, ARTIFACT_FILE), "wb") as fh:
            fh.write(artifact)
        with open(os.path.join(folder, METADATA_FILE), "w", encoding="utf-8") as fh:
            fh.write(meta.to_json())

    def compiler_invocations(self) -> int:
        from reference.core.metrics import METRICS

        return METRICS.counters().get("compiler_invocations", 0)

    def _neff_cache(self, root):
        import os

        from reference.cache.neff_cache import NeffCache

        return NeffCache(os.path.join(root, "neff"), os.path.join(root, "local"), hmac_key=None)

    def keys(self, root):
        return self._neff_cache(root).keys()

    def entry_files(self, root, key):
        import os

        from reference.cache.neff_cache import ARTIFACT_FILE, METADATA_FILE

        d = self._neff_cache(root).entry_dir(key)
        return [os.path.join(d, ARTIFACT_FILE), os.path.join(d, METADATA_FILE)]

    def scratch(self, root):
        from reference.cache.neff_cache import _pid_alive

        out = []
        for path in self._neff_cache(root).scratch_dirs():
            parts = path.rsplit("-", 2)
            pid = parts[-2] if len(parts) == 3 else ""
            if not (pid.isdigit() and _pid_alive(int(pid))):
                out.append(path)
        return out

    def compiles_in_progress(self, root):
        from reference.cache.neff_cache import _pid_alive

        notes = self._neff_cache(root).holders()
        return [n for n in notes if isinstance(n.get("pid"), int) and _pid_alive(n["pid"])]

    def lowerings(self) -> int:
        from reference.core.metrics import METRICS

        return METRICS.counters().get("lowerings", 0)


class _CompilerArgs(CompilerArgsCapability):
    """The scope (``reference.compiler.scope``), the level helper and the model runner's policy."""

    def scoped_compiler_args(self, compiler_args):
        from reference.compiler.scope import scoped_compiler_args

        return scoped_compiler_args(compiler_args)

    def apply_scoped_compiler_args(self, options):
        from reference.compiler.scope import apply_scoped_compiler_args

        return apply_scoped_compiler_args(options)

    def with_optimization_level(self, args, level):
        from reference.runner import with_optimization_level

        return with_optimization_level(args, level)

    def policy_runner(self, *, policy="default", mode="compile", compiler_args=None, optimization_level=None):
        from conformance.adapters._reference_runner import ReferencePolicyRunner

        return ReferencePolicyRunner(self, policy, mode, compiler_args, optimization_level)


class _Capture(CaptureCapability):
    """The capture seam (``neuron_libtorch_graph_capture``), ``parallel_trace`` and ``parallel_compile``."""

    def parallel_trace(self, jobs, *, cache_dir, workers=2, timeout=None):
        from reference.flows import parallel_trace

        results = parallel_trace(jobs, cache_dir=cache_dir, workers=workers, timeout=timeout or 1800, raise_on_error=False)
        return [
            {
                "ok": r.ok,
                "identity": r.identity,
                "error": None if r.ok else f"{r.error_type}: {r.error}",
                "captured": [
                    {"cache_key": c["key"], "graph_name": c["graph_name"], "compiler_args": c["compiler_args"]}
                    for c in r.captured
                ],
            }
            for r in results
        ]

    def capture_in_process(self, model, *, cache_dir):
        from reference.backends.capture import capture_to

        compiled = torch.compile(model, backend="neuron_libtorch_graph_capture", dynamic=False)

        def run(*args, **kwargs):
            with capture_to(cache_dir):
                return compiled(*args, **kwargs)

        return run

    def parallel_compile(self, cache_dir, *, workers=2, base_compiler_args=None):
        from reference.flows import parallel_compile

        report = parallel_compile(cache_dir, workers=workers, base_compiler_args=base_compiler_args, raise_on_error=False)
        return [g.as_dict() for g in report.graphs]

    def staged_metadata(self, cache_dir):
        import dataclasses

        from reference.backends.capture import read_staged

        return [dataclasses.asdict(e.metadata) for e in read_staged(cache_dir)]

    def legacy_capture_dir(self, dest):
        import shutil
        from pathlib import Path

        import neuron_fixtures

        src = Path(neuron_fixtures.__file__).parent / "legacy_capture"
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return str(dest)


class _Spmd(SpmdCapability):
    """The runtime rank, the mesh registry (``NeuronGroupCoordinator``) and the guard rails."""

    def rank_tensor(self, rank: int):
        from reference.spmd import rank_tensor

        return rank_tensor(rank)

    def process_group(self, replica_groups):
        from reference.spmd import NeuronGroupCoordinator

        return NeuronGroupCoordinator(replica_groups).group

    def lower(self, model, args, kwargs=None):
        from reference.flows.tools import lower_texts

        return lower_texts(model, tuple(args), dict(kwargs or {}))

    def compile_stats(self):
        from reference.core.metrics import METRICS

        return {
            "graphs": {m.graph_name: m.graph_id for m in METRICS.records()},
            "compiler_invocations": METRICS.counters().get("compiler_invocations", 0),
        }

    def check_single_artifact(self, staged, *, strict=None):
        from reference.core.build_settings import BuildSettings
        from reference.spmd.guards import check_single_artifact

        # None: the flag as the environment says now (the suite's strict lane sets it)
        return check_single_artifact(staged, strict=BuildSettings.from_env().spmd_strict if strict is None else strict)

    def violation_errors(self):
        from reference.spmd.errors import SPMDViolationError

        return (SPMDViolationError,)



class ReferenceImplementation(Implementation):
    name = "reference"

    def __init__(self) -> None:
        from reference.core.metrics import METRICS

        self._compile_times: list[tuple[str, float]] = []
        METRICS.add_listener(self._on_graph)
        self._backend, self._fx_passes, self._cache = _Backend(), _FxPasses(), _Cache()
        self._compiler_args, self._capture, self._spmd = _CompilerArgs(), _Capture(), _Spmd()
        self._atom: AtomCapability | None = None

    def _on_graph(self, m) -> None:
        self._compile_times.append((m.graph_name, m.torch_neuronx_compile_us / 1e6))

    # --- reporting --------------------------------------------------------------------------------
    def precision(self) -> Precision:
        return PRECISION

    def expectations_file(self) -> str | None:
        return str(_PACKAGE / "expected" / "reference.txt")

    def snapshot_root(self) -> str | None:
        return str(_PACKAGE / "goldens")

    def graph_compile_times(self) -> list[tuple[str, float]]:
        out, self._compile_times = self._compile_times, []
        return out

    @contextlib.contextmanager
    def evidence(self) -> Iterator[Evidence]:
        """Dynamo's graphs (observed generically) and, from the reference's own process-long
        counters: artifacts compiled, served from the NEFF cache, runs of a compiled graph, and
        every eager fallback with its reason (compile or execution failure, compile-only mode)."""
        from reference.core.metrics import METRICS

        start, first = METRICS.totals(), METRICS.fallback_count()

        def refresh(ev: Evidence) -> None:
            now = METRICS.totals()
            ev.compiled = now.get("compiler_invocations", 0) - start.get("compiler_invocations", 0)
            ev.cached = now.get("neff_cache_hits", 0) - start.get("neff_cache_hits", 0)
            ev.ran = now.get("compiled_runs", 0) - start.get("compiled_runs", 0)
            ev.fallbacks = [{"graph": f.graph, "reason": f.reason} for f in METRICS.fallbacks_since(first)]

        ev = Evidence(_refresh=refresh)
        with observe_dynamo(ev, backends=_BACKENDS):
            try:
                yield ev
            finally:
                ev.refresh()

    def versions(self) -> dict[str, str]:
        from reference.cache.key import tool_versions

        # the host identity keys the reference's artifacts, but it is a fact about the machine,
        # reported by machine(), not a version the checked-in matrices compare
        return {k: v for k, v in tool_versions().items() if k != "host"}

    def child_preload(self) -> tuple[str, ...]:
        # torch-mlir's FX importer, IREE's native runtime and its tool finder: imported by every
        # child that compiles (about 1.5 s of it), and none reads the environment at import
        return ("torch_mlir.fx", "iree._runtime.libs._runtime", "iree.compiler.tools.binaries")

    def machine(self) -> dict[str, str]:
        from reference.compiler.driver import host_identity

        return {**super().machine(), "host": host_identity()}

    def compile(
        self,
        model: Callable,
        *,
        options: Mapping[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = False,
        mode: str | None = None,
    ) -> Callable:
        return torch.compile(
            model, backend="neuron", options=dict(options) if options else None, fullgraph=fullgraph, dynamic=dynamic, mode=mode
        )

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        from reference.flows.tools import lower_graphs

        return [g.hlo for g in lower_graphs(model, tuple(args))]

    # --- the capability groups: the reference provides every one -------------------------------
    def backend(self) -> BackendCapability:
        return self._backend

    def fx_passes(self) -> FxPassesCapability:
        return self._fx_passes

    def cache(self) -> CacheCapability:
        return self._cache

    def compiler_args(self) -> CompilerArgsCapability:
        return self._compiler_args

    def capture(self) -> CaptureCapability:
        return self._capture

    def spmd(self) -> SpmdCapability:
        return self._spmd

    def atom(self) -> AtomCapability:
        if self._atom is None:
            import reference.atom

            self._atom = AtomCapability.from_namespace(reference.atom)
        return self._atom


def make() -> ReferenceImplementation:
    return ReferenceImplementation()
