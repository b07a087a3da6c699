"""Every environment variable the reference reads, in one place.

Each variable is declared once with its type, default and a one-line effect. Values are read when
they are asked for (never cached at import): a compile asks once, when its request is made
(:mod:`reference.compiler.request`, and :class:`~reference.core.build_settings.BuildSettings` for
what the pipeline below the seam uses), so a test or a runner can change them between compiles
and a change during one applies from the next graph on. A malformed value raises
:class:`EnvVarError` naming the variable and what it accepts.

Booleans accept ``1``/``true``/``yes`` for true and ``0``/``false``/``no`` (or an empty value) for
false, case-insensitively; anything else is an error rather than a silent false.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from reference.core.errors import EnvVarError

_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no", "")


def _user_tmp(name: str) -> str:
    """A default folder under the per-user ``<tmp>/neuron-<uid>`` (see reference/core/folders.py)."""
    return os.path.join(tempfile.gettempdir(), f"neuron-{os.geteuid()}", name)


@dataclass(frozen=True)
class EnvVar:
    name: str
    kind: str  # "bool", "bool01", "str", "path", "int", "csv", "choice"
    default: Any
    effect: str
    table: str  # which table of the backend reference documents it
    choices: tuple[str, ...] = ()  # the accepted values of a "choice" (compared in lower case)


def _parse(var: EnvVar, raw: str) -> Any:
    if var.kind == "bool01":  # a variable PyTorch reads too, as ``== "1"``: anything else would disagree
        low = raw.strip()
        if low in ("1", "0", ""):
            return low == "1"
        raise EnvVarError(var.name, raw, "1 or 0 (PyTorch reads this variable too and takes only 1 as true)")
    if var.kind == "bool":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise EnvVarError(var.name, raw, "1/true/yes or 0/false/no")
    if var.kind == "int":
        try:
            value = int(raw.strip())
        except ValueError:
            raise EnvVarError(var.name, raw, "a positive integer (seconds)") from None
        if value <= 0:
            raise EnvVarError(var.name, raw, "a positive integer (seconds)")
        return value
    if var.kind == "choice":
        low = raw.strip().lower()
        if low not in var.choices:
            raise EnvVarError(var.name, raw, ", ".join(var.choices))
        return low
    if var.kind == "csv":
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if var.kind == "path":
        if not raw.strip():
            raise EnvVarError(var.name, raw, "a non-empty directory path")
        return os.path.abspath(os.path.expanduser(raw))
    return raw


_VARS: dict[str, EnvVar] = {}


def _declare(name: str, kind: str, default: Any, effect: str, table: str, choices: tuple[str, ...] = ()) -> str:
    _VARS[name] = EnvVar(name, kind, default, effect, table, choices)
    return name


B = "behavior"
C = "caching"
M = "metrics"
S = "spmd"

DISABLE_FALLBACK_EXECUTION = _declare(
    "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "bool", True,
    "re-raise compile/execution failures; 0 runs the original graph eagerly with a warning", B)
DEBUG_DIR = _declare(
    "TORCH_NEURONX_DEBUG_DIR", "path", None,
    "where FX graphs, StableHLO and artifacts of each compile are written", B)
PRESERVE_COMPILATION_ARTIFACTS = _declare(
    "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "bool", False,
    "keep the debug directory after the process exits", B)
COMPILE_ONLY = _declare(
    "TORCH_NEURONX_COMPILE_ONLY", "bool", False,
    "build artifacts without executing them; a runtime-init failure is non-fatal", B)
DISABLE_CPU_AUTOCOPY = _declare(
    "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "bool", False,
    "raise when a host tensor is passed instead of copying it to the device", B)
RETAIN_DEVICE_MODE = _declare(
    "TORCH_NEURONX_RETAIN_DEVICE_MODE", "bool", False,
    "outputs keep the inputs' device placement instead of the device", B)
PLATFORM_TARGET_OVERRIDE = _declare(
    "NEURON_PLATFORM_TARGET_OVERRIDE", "str", None,
    "target platform (trn2, trn3) recorded in the compiler arguments", B)
CC_FLAGS = _declare(
    "NEURON_CC_FLAGS", "str", "",
    "extra compiler flags appended to every compile", B)
ENABLE_NKI_SDPA = _declare(
    "TORCH_NEURONX_ENABLE_NKI_SDPA", "bool", True,
    "route scaled_dot_product_attention to the fused attention path when eligible", B)
RUNTIME_DRIVER = _declare(
    "NEURON_REFERENCE_RUNTIME_DRIVER", "choice", "auto",
    "how the reference's runtime runs a call: auto (by its size), local-sync or local-task", B,
    choices=("auto", "local-sync", "local-task"))
HOST_IDENTITY = _declare(
    "NEURON_REFERENCE_HOST_IDENTITY", "str", None,
    "the host identity (architecture:CPU model) that keys artifacts built for the host; "
    "unset, it is read from the machine", B)
FLOAT64 = _declare(
    "NEURON_REFERENCE_FLOAT64", "choice", "narrow",
    "float64 graphs: narrow (computed in float32, one warning per graph) or error (refused)", B,
    choices=("narrow", "error"))
PARALLEL_COMPILE_EXECUTOR = _declare(
    "NEURON_PARALLEL_COMPILE_EXECUTOR", "choice", "local",
    "where parallel_compile builds the staged graphs: local (forked children on this machine) "
    "or ray (one Ray task per graph, on the cluster RAY_ADDRESS names)", B,
    choices=("local", "ray"))
RAY_ADDRESS = _declare(
    "RAY_ADDRESS", "str", None,
    "the Ray cluster the ray executor connects to (Ray's own variable); unset: a local Ray is "
    "started for the run and stopped after it", B)

NEFF_CACHE_DIR = _declare(
    "TORCH_NEURONX_NEFF_CACHE_DIR", "path", None,
    "persistent, content-addressed artifact cache (may be a shared mount)", C)
HLO_CACHE_DIR = _declare(
    "TORCH_NEURONX_HLO_CACHE_DIR", "path", None,
    "persistent cache of lowered StableHLO", C)
NEFF_DISABLE_CACHE = _declare(
    "TORCH_NEURONX_NEFF_DISABLE_CACHE", "bool", False,
    "disable the persistent artifact cache; every compile runs fresh", C)
NEFF_LOCAL_CACHE_DIR = _declare(
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "path", None,
    "local POSIX directory for per-key compile locks and scratch", C)
NEFF_CACHE_LOCK_TIMEOUT = _declare(
    "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "int", 1200,
    "seconds to wait for another process's compile of the same key", C)
CACHING_PRECOMPILE = _declare(
    "TORCH_CACHING_PRECOMPILE", "bool01", False,
    "enable PyTorch's own precompile cache", C)
CACHE_HMAC_KEY = _declare(
    "TORCH_NEURONX_CACHE_HMAC_KEY", "str", None,
    "secret key: cache entries carry an HMAC-SHA256 under it and one that fails it is rebuilt, never run", C)
ASSERT_CACHE_HIT = _declare(
    "NEURON_LIBTORCH_ASSERT_CACHE_HIT", "bool", False,
    "after warm-up, a cache miss raises naming the graph and its key", C)

ENABLED_METRIC_TABLES = _declare(
    "TORCH_NEURONX_ENABLED_METRIC_TABLES", "csv", (),
    "comma-separated metric tables to write as CSV (graph_stats)", M)
METRICS_DIR = _declare(
    "TORCH_NEURONX_METRICS_DIR", "path", None,
    "directory the metric CSV files are written to", M)

SPMD_STRICT = _declare(
    "NEURON_LIBTORCH_SPMD_STRICT", "bool", False,
    "SPMD guard rails raise instead of warning", S)
STORE_COMPILE = _declare(
    "NEURON_LIBTORCH_STORE_COMPILE", "bool", False,
    "ranks of one process group compile each key once and share it over the group's c10d store", S)
STORE_WAIT_TIMEOUT = _declare(
    "NEURON_LIBTORCH_STORE_WAIT_TIMEOUT", "int", 3600,
    "seconds a rank waits on the c10d store for another rank's compile of a key", S)

_DEFAULT_FACTORIES: dict[str, Callable[[], Any]] = {
    DEBUG_DIR: lambda: _user_tmp("neuron_backend_"),
    NEFF_CACHE_DIR: lambda: _user_tmp("neff_cache"),
    HLO_CACHE_DIR: lambda: _user_tmp("hlo_cache"),
    NEFF_LOCAL_CACHE_DIR: lambda: _user_tmp("local_cache"),
    METRICS_DIR: lambda: tempfile.gettempdir(),
}


def declared() -> dict[str, EnvVar]:
    """All declared variables by name (a copy)."""
    return dict(_VARS)


def default(name: str) -> Any:
    var = _VARS[name]
    factory = _DEFAULT_FACTORIES.get(name)
    return factory() if factory else var.default


def documented_default(name: str) -> Any:
    """The default as the docs and the support matrix show it: the same text for every user and
    machine (the per-user folders as ``<tmp>/neuron-<uid>/...``)."""
    value = default(name)
    if isinstance(value, str) and name in _DEFAULT_FACTORIES:
        return value.replace(f"neuron-{os.geteuid()}", "neuron-<uid>")
    return value


def get(name: str) -> Any:
    """The parsed value of a declared variable, or its default when unset."""
    try:
        var = _VARS[name]
    except KeyError:
        raise KeyError(f"{name} is not a variable the reference declares") from None
    raw = os.environ.get(name)
    value = default(name) if raw is None else _parse(var, raw)
    if var.kind == "path" and value is not None and os.path.exists(value) and not os.path.isdir(value):
        # caught here, not half-way through a compile as a false "evicted" or "not cached"
        raise EnvVarError(name, value, "a directory (this path exists and is not one)", default_used=raw is None)
    return value


def is_set(name: str) -> bool:
    """Whether the user set ``name`` (as opposed to its default applying)."""
    return name in os.environ


def validate_all() -> None:
    """Parse every variable that is set; raises the first :class:`EnvVarError`."""
    for name in _VARS:
        get(name)


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Set (or, with ``None``, unset) variables for the duration of a block.

    Keys are variable names; values are written as strings (``True`` becomes ``"1"``).
    """
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if k not in _VARS:
                raise KeyError(f"{k} is not a variable the reference declares")
            if v is None:
                os.environ.pop(k, None)
            elif isinstance(v, bool):
                os.environ[k] = "1" if v else "0"
            else:
                os.environ[k] = str(v)
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


@contextlib.contextmanager
def foreign_override(name: str, value: str) -> Iterator[None]:
    """Point a variable another library reads on use (Inductor's ``TORCHINDUCTOR_CACHE_DIR``) at
    ``value`` for the duration of a block; the reference itself never reads it."""
    if name in _VARS:
        raise KeyError(f"{name} is the reference's own variable: use override()")
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
