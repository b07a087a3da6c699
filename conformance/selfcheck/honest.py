"""Two honest adapters: the suite must never fail an implementation for saying what it lacks.

Both compile with torch's ``aot_eager`` (cheap, and no code of this project), as an outside team's
adapter would:

- ``not_supported`` declares every capability group (adapter v2, ``conformance.harness.capabilities``)
  with an object whose every member raises :class:`~conformance.harness.implementation.NotSupported`
  (the ATOM accessor raises it itself): every test of a group must skip with the reason;
- ``empty`` provides the backend group for real (``torch_compile``, graph counting) and answers
  every optional question with an empty answer: no variables, no forced graph breaks, no debug
  artifacts, no declared support matrix, a helper API with no symbols (``HelperApi()``), no FX
  passes (``[]``); it declares no cache (``aot_eager`` has none); where ``aot_eager`` itself breaks the Neuron contract, the known failures of
  ``conformance/expected/aot_eager.txt`` apply.

``tests/test_conformance_honest.py`` runs the suite against both and requires 0 failures and
0 errors. Use them as ``--conformance-impl conformance.selfcheck.honest:not_supported`` (or
``:empty``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from conformance.adapters.torch_builtin import BuiltinBackend, TorchBuiltinImplementation
from conformance.harness.capabilities import (
    BackendCapability,
    CacheCapability,
    CaptureCapability,
    CompilerArgsCapability,
    FxPassesCapability,
    HelperApi,
    SpmdCapability,
    members,
)
from conformance.harness.implementation import Implementation, NotSupported


def _refuses(name: str) -> Callable[..., Any]:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"honest-not-supported has no {name} (an honest answer)")

    method.__name__ = name
    return method


def _refusing(kind: type) -> Any:
    """An object of the capability type ``kind`` whose every member, required or not, raises
    NotSupported: the group is declared, and each of its tests must skip in its body."""
    return type(f"Refusing{kind.__name__}", (kind,), {m: _refuses(f"{kind.__name__}.{m}") for m in members(kind)})()


class NotSupportedEverywhere(Implementation):
    """Core from ``aot_eager``; every group is declared with every member raising NotSupported,
    except ATOM, whose accessor says so (its members are types a test catches, not calls)."""

    name = "honest-not-supported"

    def __init__(self) -> None:
        self._groups = {
            kind: _refusing(kind)
            for kind in (BackendCapability, FxPassesCapability, CacheCapability, CompilerArgsCapability,
                         CaptureCapability, SpmdCapability)
        }

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__}

    def compile(self, model: Callable, *, options=None, fullgraph=False, dynamic=False, mode=None) -> Callable:
        import torch

        return torch.compile(model, backend="aot_eager", fullgraph=fullgraph, dynamic=dynamic)

    def backend(self) -> BackendCapability:
        return self._groups[BackendCapability]

    def fx_passes(self) -> FxPassesCapability:
        return self._groups[FxPassesCapability]

    def cache(self) -> CacheCapability:
        return self._groups[CacheCapability]

    def compiler_args(self) -> CompilerArgsCapability:
        return self._groups[CompilerArgsCapability]

    def capture(self) -> CaptureCapability:
        return self._groups[CaptureCapability]

    def spmd(self) -> SpmdCapability:
        return self._groups[SpmdCapability]

    graph_compile_times = _refuses("graph_compile_times")


class EmptyBackend(BuiltinBackend):
    """``aot_eager``'s backend contract, every optional question answered with ``{}``."""

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        return {}

    def environment_variables(self) -> Mapping[str, Any]:
        return {}

    def debug_artifact_globs(self) -> Mapping[str, str]:
        return {}

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        return {}

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        return {}

    def helper_api(self) -> HelperApi:
        return HelperApi()  # none of the helper symbols


class NoFxPasses(FxPassesCapability):
    """A pass pipeline with no passes."""

    def pass_names(self) -> list[str]:
        return []

    def passes_applied(self, model, args, options=None) -> list[str]:
        return []

    def graph_after_passes(self, model, args) -> list[str]:
        return []


class EmptyAnswers(TorchBuiltinImplementation):
    """``aot_eager`` behind an adapter that answers every optional question with ``{}`` or ``[]``."""

    backend_capability = EmptyBackend

    def __init__(self) -> None:
        super().__init__("aot_eager")
        self.name = "honest-empty"
        self._fx = NoFxPasses()

    def fx_passes(self) -> FxPassesCapability:
        return self._fx

    # No cache(): aot_eager keeps no compile cache of its own and counts no compiler runs, so the
    # group is not declared (the default accessor raises NotSupported).


def not_supported() -> NotSupportedEverywhere:
    return NotSupportedEverywhere()


def empty() -> EmptyAnswers:
    return EmptyAnswers()
