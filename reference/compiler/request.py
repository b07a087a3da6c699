"""One resolved compile request: everything a compile depends on, read once, frozen.

A seam resolves a :class:`CompileRequest` when Dynamo hands it a graph (:func:`resolve_request`):
the compiler-args scope and the platform arguments give the typed :class:`CompilerConfig` (the
argument list is parsed there, once), and the environment (through :mod:`reference.core.env`, the
only module that reads it), the helper API's model name and the rank give the rest. Code below
the seam reads the request, never the environment, so a variable changed half-way through a
compile cannot give one graph two configurations.

The deferred flow (``parallel_trace`` -> ``parallel_compile``) crosses a fork and a file, so it
carries :class:`DeferredRequest`, the serialisable part (``to_json``/``from_json``): the per-job
argument list and the key policy the staged graphs are keyed under.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from reference.compiler.driver import CompilerConfig
from reference.compiler.options import OPTIONS, option
from reference.compiler.scope import current_scoped_compiler_args, platform_compiler_config
from reference.core import env
from reference.core.build_settings import BuildSettings, CacheRoots
from reference.core.errors import BackendOptionError
from reference.core.settings import get_model_name, get_rank

@dataclass(frozen=True)
class KeyPolicy:
    """How a seam keys its artifacts. ``compiler_args_in_key=False`` is the native seam's
    structure-and-shape key; ``check(key, config, graph_name, recorded)`` runs before a
    build (``recorded=None``) and on every cache entry found (``recorded``: the arguments the entry
    was built with) and may raise; ``metadata_extra`` goes into a new entry's ``extra``. A request
    carries the object (:func:`resolve_request` resolves a name once); only the deferred flow,
    which crosses a file, carries the name."""

    name: str = "default"
    compiler_args_in_key: bool = True
    check: Callable[[str, CompilerConfig, str, Sequence[str] | None], None] | None = None
    metadata_extra: Mapping[str, Any] = field(default_factory=dict)


DEFAULT_KEY = KeyPolicy()
NATIVE_KEY = KeyPolicy("native", compiler_args_in_key=False, metadata_extra={"seam": "neuron_native_lite"})
#: The key policies a request may name, by name.
KEY_POLICIES = {p.name: p for p in (DEFAULT_KEY, NATIVE_KEY)}


def key_policy_named(name: str) -> KeyPolicy:
    """The registered key policy ``name``; :class:`BackendOptionError` for a name that is not one."""
    try:
        return KEY_POLICIES[name]
    except (KeyError, TypeError):
        raise BackendOptionError(f"unknown key policy {name!r}; known: {', '.join(KEY_POLICIES)}") from None


@dataclass(frozen=True)
class CompileRequest:
    """What one compile of one Dynamo graph uses (see the module doc).

    ``config``: the resolved compiler configuration (scope, then platform arguments, parsed once);
    ``settings``: what the pipeline below the seam reads (cache folders, compile-only,
    assert-cache-hit, float64, the runtime driver, store coordination, the SPMD strict flag);
    ``key_policy``: how its artifacts are keyed (:class:`KeyPolicy`); ``fallback``: whether a failure runs the graph
    eagerly (``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``) instead of raising; ``threads``: 0 for
    the compiler's default, 1 for one thread; ``thresholds``: the graph-break thresholds Dynamo
    traced this graph under.
    """

    seam: str
    config: CompilerConfig
    settings: BuildSettings
    key_policy: KeyPolicy = DEFAULT_KEY
    fallback: bool = False
    thresholds: Mapping[str, int] = field(default_factory=dict)
    threads: int = 0
    model_name: str = "model_default"
    rank: int = 0
    enable_fx_passes: bool = OPTIONS["enable_fx_passes"].default
    target_device: str = OPTIONS["target_device"].default

    @property
    def cache(self) -> CacheRoots:
        return self.settings.cache

    @property
    def compile_only(self) -> bool:
        return self.settings.compile_only

    @property
    def assert_cache_hit(self) -> bool:
        return self.settings.assert_cache_hit

    @property
    def target(self) -> str:
        return self.config.target

    @property
    def compiler_args(self) -> list[str]:
        """The resolved argument list, as the artifact metadata records it."""
        return list(self.config.args)

    def deferred(self) -> "DeferredRequest":
        """The part of this request that crosses a fork or a file."""
        return DeferredRequest(compiler_args=tuple(self.config.args), key_policy=self.key_policy.name)


def resolve_request(
    options: Mapping[str, Any] | None,
    *,
    seam: str,
    key_policy: KeyPolicy = DEFAULT_KEY,
    thresholds: Mapping[str, int] | None = None,
) -> CompileRequest:
    """The request for one compile under ``options`` (already validated by the seam).

    Reads the scope, the environment, the model name and the rank now; ``key_policy`` is the
    seam's (``Seam.key_policy_now()``), the object the pipeline keys with. Raises
    :class:`~reference.core.errors.CompilerArgumentError` for an argument list that does not parse,
    :class:`~reference.core.errors.BackendOptionError` for an unknown target or key policy, and
    :class:`~reference.core.errors.EnvVarError` for a malformed variable.
    """
    options = dict(options or {})
    scoped = current_scoped_compiler_args()
    if scoped is not None:
        options["compiler_args"] = scoped
    config = platform_compiler_config(options)
    return CompileRequest(
        seam=seam,
        config=config,
        settings=BuildSettings.from_env(),
        key_policy=key_policy,
        fallback=not env.get(env.DISABLE_FALLBACK_EXECUTION),
        thresholds=dict(thresholds or {}),
        model_name=get_model_name(),
        rank=get_rank(),
        enable_fx_passes=bool(option(options, "enable_fx_passes")),
        target_device=str(option(options, "target_device")),
    )


def on_one_thread(request: CompileRequest) -> CompileRequest:
    """``request`` compiled on one thread (a worker beside as many others as there are cores)."""
    return replace(request, threads=1, config=request.config.on_one_thread())


@dataclass(frozen=True)
class DeferredRequest:
    """The serialisable part of a request: what a trace job carries into its forked child.

    ``compiler_args``: the job's concrete list (``None``: no per-graph override, the base
    arguments apply); ``key_policy``: how the staged graphs are keyed (``"native"`` for graphs the
    native seam will serve).
    """

    compiler_args: tuple[str, ...] | None = None
    key_policy: str = "default"

    def __post_init__(self) -> None:
        args = self.compiler_args
        if args is not None:
            if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or not all(isinstance(a, str) for a in args):
                raise BackendOptionError(f"compiler_args must be a list of strings or None, got {args!r}")
            object.__setattr__(self, "compiler_args", tuple(args))
        key_policy_named(self.key_policy)  # a name the flows know, or BackendOptionError

    def to_json(self) -> str:
        args = None if self.compiler_args is None else list(self.compiler_args)
        return json.dumps({"compiler_args": args, "key_policy": self.key_policy}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DeferredRequest":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BackendOptionError(f"a deferred request must be JSON: {exc}") from None
        if not isinstance(data, dict) or set(data) - {"compiler_args", "key_policy"}:
            raise BackendOptionError(f"a deferred request holds compiler_args and key_policy, got {data!r}")
        return cls(data.get("compiler_args"), data.get("key_policy", "default"))
