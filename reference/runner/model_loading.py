"""A minimal model runner with the seeds' per-graph compiler-argument wiring.

``load_model`` sets the base arguments at the caller level and enables the model's policy only
when the caller set no explicit optimization level. Precedence, highest first: an explicit caller
level (it disables the policy, so every graph keeps it), the model's ``compiler_args_for``, the
compiler default (``-O1``). The model is compiled once per backend.

``resolve_graph_compiler_args(graph_type)`` calls the policy eagerly and returns the concrete list,
or ``None`` (no override: the base arguments apply) when the policy is off or the graph is untagged.
Every compile site resolves from its graph type, so warm-up, serving and the parallel trace of one
graph all key the cache with the same list.

The model the runner drives provides ``example_kwargs(graph_type)`` (inputs for a graph type's
compile site) and, for the encoder, ``embed_multimodal(pixels, compiled=...)`` which opens its own
scope; see ``neuron_fixtures/policy.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from reference.compiler.scope import scoped_compiler_args
from reference.compiler.driver import CompilerConfig
from reference.core.errors import CompilerArgumentError, NeuronBackendError
from reference.runner.opt_level import with_optimization_level
from reference.spmd.rank import rank_tensor

#: The graph types the runner has compile sites of its own for (the seed's). Graph types are open:
#: any other non-empty string names a site too (a ``"vision"`` or ``"audio"`` graph), run in its
#: own scope resolved from the model's policy; ``None`` is an untagged graph.
GRAPH_TYPES = ("prefill", "decode", "encoder", "jf", "spec_verify")

#: Backend name per runner mode.
BACKENDS = {
    "compile": "neuron_libtorch",
    "capture": "neuron_libtorch_graph_capture",
    "native": "neuron_native_lite",
}


class CompilerArgsPolicyError(NeuronBackendError, ValueError):
    """A model policy gave something the compiler cannot take, for a named graph type."""


class UnknownGraphTypeError(CompilerArgsPolicyError):
    """A compile site named a graph type that is not one: neither a non-empty string nor ``None``."""


def check_graph_type(graph_type: Any) -> None:
    if graph_type is None or (isinstance(graph_type, str) and graph_type.strip()):
        return
    raise UnknownGraphTypeError(
        f"graph type {graph_type!r} is not a graph type; name the graph with a non-empty string (the runner's own "
        f"sites: {', '.join(GRAPH_TYPES)}; any other, such as 'vision', runs in its own scope), or None for an untagged graph"
    )


def check_policy_result(result: Any, graph_type: str, policy: Callable) -> list[str]:
    """The policy's list, validated here (so a bad list names the graph type and the policy, not
    the compile that would have parsed it); raises :class:`CompilerArgsPolicyError`. The scope
    takes the list, and the compile request parses it into the compile's configuration."""
    name = getattr(policy, "__qualname__", repr(policy))
    if isinstance(result, (str, bytes)) or not isinstance(result, Sequence) or not all(isinstance(a, str) for a in result):
        raise CompilerArgsPolicyError(
            f"compiler_args_for({graph_type!r}) ({name}) must return a list of strings, got {result!r}; "
            "return the full argument list, for example with_optimization_level(base, 3)"
        )
    try:
        return list(CompilerConfig.from_args(list(result)).args)  # its tokens, as the compile will split them
    except CompilerArgumentError as exc:
        raise CompilerArgsPolicyError(f"compiler_args_for({graph_type!r}) ({name}) returned {list(result)!r}: {exc}") from None


class NeuronModelRunner:
    """Loads one model, wires its policy, and runs its compile sites.

    ``compiler_args``: the base arguments; ``optimization_level``: the caller's explicit level
    (``None``: not set); ``mode``: ``compile`` (in-process), ``capture`` (stage for the deferred
    flow) or ``native``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        compiler_args: Sequence[str] | None = None,
        optimization_level: int | None = None,
        mode: str = "compile",
        extra_options: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in BACKENDS:
            raise ValueError(f"runner mode {mode!r} is not known; use one of {sorted(BACKENDS)}")
        self.model = model
        self.mode = mode
        self._caller_args = list(compiler_args or [])
        self._opt_level = optimization_level
        self._extra_options = dict(extra_options or {})
        self.compile_options: dict[str, Any] = {}
        self.compiled_model: Callable | None = None
        self._per_graph_compiler_args = False
        self._compiler_args_policy: Callable | None = None

    # --- load_model: base arguments, policy, one torch.compile -------------------------------------
    def load_model(self) -> "NeuronModelRunner":
        base = list(self._caller_args)
        opt_level_explicit = self._opt_level is not None
        if opt_level_explicit:
            base = with_optimization_level(base, self._opt_level)
        self.compile_options = {**self._extra_options, "compiler_args": base}
        policy = getattr(self.model, "compiler_args_for", None)
        per_graph = not opt_level_explicit and policy is not None
        self._per_graph_compiler_args = per_graph
        self._compiler_args_policy = policy if per_graph else None
        # The model's own in-process sites (the encoder) resolve from the base arguments: with the
        # policy on, the runner stamps them on the model, as the seed's runner does. With it off a
        # stamp left by an earlier load is cleared; a model with no policy gets nothing set on it.
        if per_graph:
            self.model._neuron_base_compiler_args = list(base)
        elif "_neuron_base_compiler_args" in vars(self.model):
            self.model._neuron_base_compiler_args = None
        setter = getattr(self.model, "set_base_compiler_args", None)
        if callable(setter):  # a model that wants to be told (optional)
            setter(list(base) if per_graph else None)
        self.compiled_model = torch.compile(
            self.model, backend=BACKENDS[self.mode], options=self.compile_options, dynamic=False
        )
        return self

    @property
    def per_graph_compiler_args(self) -> bool:
        return self._per_graph_compiler_args

    # --- the resolver -------------------------------------------------------------------------------
    def resolve_graph_compiler_args(self, graph_type: str | None) -> list[str] | None:
        """The concrete list for ``graph_type`` (validated), or ``None`` for no per-graph override:
        what the compile sites scope."""
        check_graph_type(graph_type)
        if not self._per_graph_compiler_args or graph_type is None:
            return None
        base = list((self.compile_options or {}).get("compiler_args") or [])
        policy = self._compiler_args_policy
        return check_policy_result(policy(graph_type, None, base), graph_type, policy)

    # --- compile sites ------------------------------------------------------------------------------
    def _compiled(self) -> Callable:
        if self.compiled_model is None:
            raise RuntimeError("call load_model() before running the model")
        return _thread_rank(self.model, self.compiled_model)

    def prefill_forward(self, **kwargs: Any) -> Any:
        """Prefill sites are untagged: the base arguments apply."""
        return self._compiled()(**kwargs)

    def _plain_decode_capture(self, **kwargs: Any) -> Any:
        """The decode warm-up."""
        with scoped_compiler_args(self.resolve_graph_compiler_args("decode")):
            return self._compiled()(**kwargs)

    def _plain_decode_forward(self, **kwargs: Any) -> Any:
        with scoped_compiler_args(self.resolve_graph_compiler_args("decode")):
            return self._compiled()(**kwargs)

    def jump_forward(self, **kwargs: Any) -> Any:
        with scoped_compiler_args(self.resolve_graph_compiler_args("jf")):
            return self._compiled()(**kwargs)

    def execute_encoder(self, **kwargs: Any) -> Any:
        """The encoder site belongs to the model: it opens its own scope from the stamped base."""
        return self.model.embed_multimodal(compiled=self._compiled(), **kwargs)

    def run_site(self, graph_type: str | None, **kwargs: Any) -> Any:
        """Run the compile site of ``graph_type`` (``None``: an untagged forward)."""
        check_graph_type(graph_type)
        if graph_type == "decode":
            return self._plain_decode_forward(**kwargs)
        if graph_type == "jf":
            return self.jump_forward(**kwargs)
        if graph_type == "encoder":
            return self.execute_encoder(**kwargs)
        if graph_type == "prefill" or graph_type is None:
            return self.prefill_forward(**kwargs)
        # spec_verify and every graph type the runner has no site of its own for (open types).
        with scoped_compiler_args(self.resolve_graph_compiler_args(graph_type)):
            return self._compiled()(**kwargs)

    def warmup(self, graph_types: Sequence[str | None] = ("prefill", "decode")) -> None:
        for graph_type in graph_types:
            kwargs = self.model.example_kwargs(graph_type)
            if graph_type == "decode":
                self._plain_decode_capture(**kwargs)
            else:
                self.run_site(graph_type, **kwargs)


def takes_rank(model: torch.nn.Module) -> bool:
    """Whether the model's ``forward`` takes ``rank`` (an SPMD model; see docs/spmd.md)."""
    import inspect

    try:
        return "rank" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _thread_rank(model: torch.nn.Module, compiled: Callable) -> Callable:
    """SPMD: a model whose ``forward`` takes ``rank`` gets this process's rank as a runtime tensor
    (unless the caller passed one), so per-rank values are computed in the graph; see docs/spmd.md."""
    if not takes_rank(model):
        return compiled
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("rank", rank_tensor())
        return compiled(*args, **kwargs)

    return call
