"""Two honest adapters: the suite must never fail an implementation for saying what it lacks.

Both compile with torch's ``aot_eager`` (cheap, and no code of this project), as an outside team's
adapter would:

- ``not_supported`` raises :class:`~conformance.harness.implementation.NotSupported` from every method
  outside the core (``name``, ``versions``, ``compile``, ``reset``): every capability group is
  declared, and every test of one must skip with the reason;
- ``empty`` provides the backend group for real (``torch_compile``, graph counting) and answers
  every optional question with an empty answer: no variables, no forced graph breaks, no debug
  artifacts, no declared support matrix, a helper API with no symbols, no FX passes, and a cache it
  cannot list (``[]``); where ``aot_eager`` itself breaks the Neuron contract, the known failures of
  ``conformance/expected/aot_eager.txt`` apply.

``tests/test_conformance_honest.py`` runs the suite against both and requires 0 failures and
0 errors. Use them as ``--conformance-impl conformance.selfcheck.honest:not_supported`` (or
``:empty``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from conformance.adapters.torch_builtin import TorchBuiltinImplementation
from conformance.harness.implementation import CAPABILITIES, Implementation, NotSupported

# Every method of every capability group, and the optional members outside the groups.
_OPTIONAL = sorted(
    {m for c in CAPABILITIES.values() for m in (*c.required, *c.optional)}
    | {"set_graph_break_thresholds", "capture", "graph_compile_times"}
)


def _refuses(name: str) -> Callable[..., Any]:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{self.name} has no {name} (an honest answer)")

    method.__name__ = name
    return method


class NotSupportedEverywhere(Implementation):
    """Core from ``aot_eager``; every other method raises NotSupported."""

    name = "honest-not-supported"

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__}

    def compile(self, model: Callable, *, options=None, fullgraph=False, dynamic=False, mode=None) -> Callable:
        import torch

        return torch.compile(model, backend="aot_eager", fullgraph=fullgraph, dynamic=dynamic)


for _name in _OPTIONAL:
    if hasattr(Implementation, _name):
        setattr(NotSupportedEverywhere, _name, _refuses(_name))


class _NoSymbols:
    """A helper API object with none of the helper symbols."""


class EmptyAnswers(TorchBuiltinImplementation):
    """``aot_eager`` behind an adapter that answers every optional question with ``{}`` or ``[]``."""

    def __init__(self) -> None:
        super().__init__("aot_eager")
        self.name = "honest-empty"

    # backend group: empty answers
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

    def helper_api(self) -> Any:
        return _NoSymbols()

    # FX passes: none
    def fx_pass_names(self) -> list[str]:
        return []

    def fx_passes_applied(self, model, args, options=None) -> list[str]:
        return []

    def fx_graph_after_passes(self, model, args) -> list[str]:
        return []

    # cache: one it cannot list
    def cache_env(self, root, *, lock_timeout_s=None, disable=False, assert_hit=False, neff_dir=None) -> dict[str, str]:
        return {}

    def cache_keys(self, root: str) -> list[str]:
        return []

    def cache_entry_files(self, root: str, key: str) -> list[str]:
        return []

    def cache_scratch(self, root: str) -> list[str]:
        return []

    def compiles_in_progress(self, root: str) -> list[dict[str, Any]]:
        return []


def not_supported() -> NotSupportedEverywhere:
    return NotSupportedEverywhere()


def empty() -> EmptyAnswers:
    return EmptyAnswers()
