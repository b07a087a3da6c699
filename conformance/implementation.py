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

    # --- backend contract: parameters, graph breaks, variables, metrics (issue 4) ---------------
    # (adapter methods for the backend contract go here)

    # --- compile caches (issue 5) -----------------------------------------------------------------
    # (adapter methods for the cache contract go here)

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
