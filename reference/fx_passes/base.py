"""The FX pass interface: :class:`FXPass`, the typed :class:`PassContext` every pass is given, and
the error a pass raises."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sys
from abc import ABC
from typing import Any, Mapping

import torch

from reference.core.build_settings import BuildSettings
from reference.core.errors import NeuronBackendError


@dataclasses.dataclass(frozen=True)
class PassContext:
    """What a pass knows about the graph it runs on, made once per run of the pass stage.

    ``graph_name``: the graph's name, for messages; ``target_device``: the device the graph is
    meant to run on (:class:`~reference.fx_passes.DeviceRewriterPass` moves it there);
    ``spmd_strict``: the strict-SPMD flag (a compile passes its request's; the seeds' keyword
    entry, :meth:`of`, reads ``NEURON_LIBTORCH_SPMD_STRICT`` when it is not given);
    ``extra``: keywords the seeds' ``run_passes(gm, **kwargs)`` was given that no field names,
    for passes of one's own.
    """

    graph_name: str = "<graph>"
    target_device: Any = "cpu"
    spmd_strict: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, **kwargs: Any) -> "PassContext":
        """The context for ``run_passes(gm, **kwargs)`` / ``FXPass.run(gm, **kwargs)``: the seeds'
        keyword entry, called outside a compile, so it reads the strict flag when not given (the
        seam hands a context made from its request instead)."""
        if kwargs.get("spmd_strict") is None:
            kwargs["spmd_strict"] = BuildSettings.from_env().spmd_strict
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in kwargs.items() if k in known},
                   extra={k: v for k, v in kwargs.items() if k not in known})

    def as_kwargs(self) -> dict[str, Any]:
        """The keywords a pass written to the seeds' ``run(gm, **kwargs)`` interface is given."""
        return {"graph_name": self.graph_name, "target_device": self.target_device,
                "spmd_strict": self.spmd_strict, **self.extra}


@functools.cache
def _source_digest(cls: type) -> str:
    # The bytes of the file that defines the pass (its module: the class and the helpers beside it);
    # a class with no file (made by exec) is known by its qualified name only.
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    try:
        data = open(path, "rb").read() if path and path.endswith(".py") else b""
    except OSError:
        data = b""
    return hashlib.sha256(data or f"{cls.__module__}.{cls.__qualname__}".encode()).hexdigest()[:12]


class FXPass(ABC):
    """A graph-to-graph transformation run between Dynamo's FX graph and lowering.

    A pass implements :meth:`transform` (``gm``, :class:`PassContext`) and returns the transformed
    graph module (it may edit ``gm`` in place and return it). :meth:`run` is the seeds' interface,
    ``run(gm, **kwargs)``: it makes the context and calls :meth:`transform`; a pass written to the
    seeds' interface overrides ``run`` instead and gets the context's fields as keywords.

    :attr:`name` is the class name unless a pass says otherwise. :attr:`identity` (name, ``version``
    and a digest of the source file that defines the pass) enters the pass manager's identity, and
    through it the key of anything cached from the passes' output: a changed pass changes the key
    without a hand bump of ``version``.
    """

    version: int = 1

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def identity(self) -> str:
        """``name@version#digest-of-the-source``."""
        return f"{self.name}@{self.version}#{_source_digest(type(self))}"

    def run(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        return self.transform(gm, PassContext.of(**kwargs))

    def transform(self, gm: torch.fx.GraphModule, ctx: PassContext) -> torch.fx.GraphModule:
        raise NotImplementedError(f"{type(self).__name__} implements neither transform(gm, ctx) nor run(gm, **kwargs)")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}@{self.version}>"


class FXPassError(NeuronBackendError):
    """A pass could not handle a graph; names the pass, the graph and, where known, the node.

    A :class:`~reference.core.errors.NeuronBackendError`, so the backend treats it like any
    other compile failure (eager fallback unless ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION``).
    """

    def __init__(self, pass_name: str, graph_name: str, message: str, *, node: str | None = None) -> None:
        where = f" at node {node!r}" if node else ""
        super().__init__(f"FX pass {pass_name!r} failed on graph {graph_name!r}{where}: {message}")
        self.pass_name = pass_name
        self.graph_name = graph_name
        self.node = node
