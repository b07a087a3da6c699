"""What the pipeline is handed for one graph: a :class:`BuildContext`, made once from the resolved
compile request at the seam, and passed down whole (lower -> key -> build -> load) instead of its
parts one keyword at a time."""

from __future__ import annotations

from dataclasses import dataclass

from reference.compiler.driver import CompilerConfig
from reference.compiler.request import DEFAULT_KEY, CompileRequest, KeyPolicy
from reference.core.build_settings import BuildSettings


@dataclass(frozen=True)
class BuildContext:
    """One graph's build as the pipeline sees it.

    ``graph_name``: the name errors, metrics and metadata carry; ``config``: the request's parsed
    compiler configuration (never a loose list: the loose forms are parsed at the public edges);
    ``settings``: what the request read from the environment (caches, compile-only, float64,
    runtime driver, store coordination); ``key_policy``: how the artifact is keyed and checked;
    ``model_name`` and ``fx_passes_us``: what the graph's metrics record.
    """

    graph_name: str
    config: CompilerConfig
    settings: BuildSettings
    key_policy: KeyPolicy = DEFAULT_KEY
    model_name: str = "model_default"
    fx_passes_us: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.config, CompilerConfig):
            raise TypeError(
                f"graph {self.graph_name!r}: the pipeline takes a parsed CompilerConfig, got {type(self.config).__name__}; "
                "parse a loose argument list with CompilerConfig.from_args at the public edge"
            )

    @classmethod
    def of(cls, request: CompileRequest, graph_name: str, *, fx_passes_us: int = 0) -> "BuildContext":
        """The context of graph ``graph_name`` under ``request``."""
        return cls(graph_name, request.config, request.settings, request.key_policy, request.model_name, fx_passes_us)
