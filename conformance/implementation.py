"""The adapter protocol: what an implementation provides to the conformance suite.

An implementation is plugged in as ``--impl package.module:factory`` (or ``CONFORMANCE_IMPL``). The
factory takes no arguments and returns an :class:`Implementation`. Subclass it and override what
your implementation supports; every capability left alone raises :class:`NotSupported`, which the
suite reports as a skip carrying the reason, never as a pass.

Tests talk to an implementation only through this interface.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Mapping, Sequence

DEFAULT_IMPL = "conformance.adapters.reference:make"


class NotSupported(Exception):
    """The implementation does not provide this capability; the test is skipped with the reason."""


class Implementation:
    #: Short name used in reports and snapshot directories (letters, digits, ``_`` and ``-``).
    name: str = "unnamed"

    # --- identity -----------------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        """Versions of what shapes results: at least torch, the lowering, the compiler."""
        return {}

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
        """Forget compiled graphs (called between tests); the default resets Dynamo."""
        import torch

        torch._dynamo.reset()

    # --- FX passes (issue 3) -------------------------------------------------------------------
    # (adapter methods for the FX pass contract go here)

    # --- backend contract: parameters, graph breaks, variables, metrics (issue 4) ---------------
    # (adapter methods for the backend contract go here)

    # --- compile caches (issue 5) -----------------------------------------------------------------
    # Cache tests run real child processes (``conformance/_cache_child.py``) that load this same
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
    ) -> dict[str, str]:
        """Environment variables that make a fresh process keep every cache under ``root``:
        ``lock_timeout_s`` bounds a wait for another process's compile of the same key,
        ``disable`` turns the persistent cache off, ``assert_hit`` makes a miss an error, and
        ``neff_dir`` places the artifact cache itself elsewhere (a read-only or full directory)."""
        raise NotSupported("cache_env")

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

    # --- per-graph compiler arguments and the compile flows (issue 6) ---------------------------
    # (adapter methods for the compiler-argument contract go here)

    # --- SPMD (issue 7) ---------------------------------------------------------------------------
    # (adapter methods for the SPMD contract go here)

    def compile_env(self) -> Mapping[str, str]:
        """Environment variables a fresh process needs to use this implementation (e.g. a cache
        directory); the suite adds them to the child processes it starts."""
        return {}


def load_implementation(spec: str | None = None) -> Implementation:
    """Import ``module:factory`` and call the factory; raises ``ValueError`` with guidance."""
    spec = spec or os.environ.get("CONFORMANCE_IMPL") or DEFAULT_IMPL
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--impl / CONFORMANCE_IMPL must look like 'package.module:factory', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import implementation module {module_name!r} (from {spec!r}): {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise ValueError(f"{module_name!r} has no callable {attr!r} (from {spec!r})")
    impl = factory()
    if not isinstance(impl, Implementation):
        raise ValueError(f"{spec!r} returned {type(impl).__name__}, not a conformance.Implementation")
    return impl
