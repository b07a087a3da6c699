"""Three honest adapters: the suite must never fail an implementation for saying what it lacks.

All three compile with torch's ``aot_eager`` (cheap, and no code of this project), as an outside
team's adapter would:

- ``not_supported`` declares every capability group (adapter v2, ``conformance.harness.capabilities``)
  with an object whose every member raises :class:`~conformance.harness.implementation.NotSupported`
  (the ATOM accessor raises it itself): every test of a group must skip with the reason;
- ``empty`` provides the backend group for real (``torch_compile``, graph counting) and answers
  every optional question with an empty answer: no variables, no forced graph breaks, no debug
  artifacts, no declared support matrix, a helper API with no symbols (``HelperApi()``), no FX
  passes (``[]``); it declares no cache (``aot_eager`` has none); where ``aot_eager`` itself breaks the Neuron contract, the known failures of
  ``conformance/expected/aot_eager.txt`` apply;
- ``partial`` answers some questions and not others, as a real implementation rarely has all or
  nothing: a helper API with some symbols (``get_rank``, ``get_model_name``, ``set_model_name``),
  some variables (``NEURON_CC_FLAGS`` and ``NEURON_PLATFORM_TARGET_OVERRIDE``, which it reads and has
  no compiler to hand to), a forced-graph-break answer whose one entry is empty
  (``{"no_lowering": {}}``), no debug artifacts (``{}``), ``unsupported_compiler_apis`` raising
  ``NotSupported``, and no support matrix (``NotSupported``: the probes observe and skip). It
  declares no FX passes and no cache. Each test needing an answer it lacks must skip even when it
  got the other answers it asked for.

``tests/suite/test_conformance_honest.py`` runs every module of the suite against each of them and
requires 0 failures and 0 errors. Use them as
``--conformance-impl conformance.selfcheck.honest:not_supported`` (or ``:empty``, ``:partial``).

Loaded as a pytest plugin as well (``-p conformance.selfcheck.honest``), the module fails a test
that passes although ``not_supported`` refused it something in the test's body: a refusal the
test caught and then passed anyway, where it must be a skip.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pytest

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
from conformance.harness import env
from conformance.harness.implementation import Implementation, NotSupported
from conformance.harness.not_supported import suite_is_asking


#: The members ``not_supported`` refused during the running test's body (see pytest_pyfunc_call).
_REFUSED: list[str] = []


def _refuses(name: str) -> Callable[..., Any]:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        if not suite_is_asking():  # the harness's own question, not the test's
            _REFUSED.append(name)
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


class PartialBackend(BuiltinBackend):
    """``aot_eager``'s backend contract with some of the optional answers: each one true of what
    this adapter does, the rest empty or refused."""

    #: The variables it reads, with their defaults; :meth:`torch_compile` reads them on every call.
    VARIABLES = {"NEURON_CC_FLAGS": "", "NEURON_PLATFORM_TARGET_OVERRIDE": ""}

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self._model_name = "model_default"
        #: The variables as the last compile read them (aot_eager has no compiler to pass them to).
        self.settings: dict[str, str] = {}

    def torch_compile(self, model: Callable, **kwargs: Any) -> Callable:
        self.settings = env.backend_variables(self.VARIABLES)
        return super().torch_compile(model, **kwargs)

    def forced_graph_breaks(self) -> Mapping[str, Any]:
        return {"no_lowering": {}}  # every op it is handed lowers: the entry is there, and empty

    def environment_variables(self) -> Mapping[str, Any]:
        return dict(self.VARIABLES)

    def helper_api(self) -> HelperApi:
        return HelperApi(get_rank=_rank, get_model_name=lambda: self._model_name, set_model_name=self._set_model_name)

    def _set_model_name(self, name: str) -> None:
        # Kept and returned; aot_eager writes no artifacts and keeps no metrics it could name.
        self._model_name = name

    def debug_artifact_globs(self) -> Mapping[str, str]:
        return {}

    def unsupported_compiler_apis(self) -> Mapping[str, str]:
        raise NotSupported("honest-partial declares nothing about torch.compiler's APIs")

    def expected_support(self) -> Mapping[str, Mapping[str, str]]:
        # A declared matrix must give every row a status (an undeclared row that a probe observes
        # fails), so an adapter that has not written one yet says so.
        raise NotSupported("honest-partial declares no support matrix yet")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class PartialAnswers(TorchBuiltinImplementation):
    """``aot_eager`` behind an adapter that answers some optional questions and not others."""

    backend_capability = PartialBackend

    def __init__(self) -> None:
        super().__init__("aot_eager")
        self.name = "honest-partial"

    # No fx_passes(), no cache(): the groups are not declared.


def not_supported() -> NotSupportedEverywhere:
    return NotSupportedEverywhere()


def empty() -> EmptyAnswers:
    return EmptyAnswers()


def partial() -> PartialAnswers:
    return PartialAnswers()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    # The test function alone: a fixture may meet a refusal and carry on (the test then skips where
    # it needs the answer); a test body that met one may not pass.
    _REFUSED.clear()
    result = yield
    if _REFUSED:
        refused = ", ".join(sorted(set(_REFUSED)))
        pytest.fail(f"passed although the adapter refused {refused}: a refusal is a skip, never a pass", pytrace=False)
    return result
