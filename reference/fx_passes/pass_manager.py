"""FXPassManager: runs passes in order, times them, and names the pass that fails."""

from __future__ import annotations

import hashlib
import logging
import time

import torch

from reference.fx_passes.base import FXPass, FXPassError, PassContext
from reference.spmd.errors import SPMDViolationError


class FXPassManager:
    """An ordered list of :class:`FXPass` objects run one after another on a graph.

    Ordering constraints of the default passes (``get_default_pass_manager``):

    - ``DeviceRewriterPass`` first, so every later pass sees one device.
    - ``AliasingOutputRewritePass`` before ``InPlaceToOutOfPlacePass``: it finds outputs that alias
      an input or another output by following in-place results (``y = x.add_(1)`` *is* ``x``);
      once the in-place ops are rewritten, ``y`` is a fresh value and the aliasing is gone.
    - ``NkiKernelWriteBackendConfigPass`` after the in-place rewrite: the kernel's write into its
      buffer is meant to stay a write in place, not be turned into a functional op.
    - ``CollectiveReplicaGroupsPass`` and ``RankConstantCheckPass`` last, on the final graph.

    :meth:`identity` (the ordered list of each pass's ``name@version#source-digest``) and
    :meth:`uuid` (its digest) enter the key of anything cached from the passes' output, so adding,
    removing, reordering or changing a pass (its code, or its ``version``) invalidates it.
    """

    def __init__(self) -> None:
        self.passes: list[FXPass] = []
        self.logger = logging.getLogger("reference.fx_passes")

    def add_pass(self, pass_obj: FXPass) -> "FXPassManager":
        """Append a pass; anything that is not an :class:`FXPass` instance raises ``TypeError`` here."""
        if not isinstance(pass_obj, FXPass):
            hint = " (a class: pass an instance)" if isinstance(pass_obj, type) and issubclass(pass_obj, FXPass) else ""
            raise TypeError(
                f"FXPassManager.add_pass takes an FXPass instance, got {type(pass_obj).__name__}{hint}; "
                "subclass reference.fx_passes.FXPass and implement name and run"
            )
        self.passes.append(pass_obj)
        return self

    def pass_names(self) -> list[str]:
        return [p.name for p in self.passes]

    def identity(self) -> list[str]:
        """Each pass's :attr:`~reference.fx_passes.base.FXPass.identity`, in order."""
        return [p.identity for p in self.passes]

    def uuid(self) -> str:
        """A digest of :meth:`identity`; enters the key of anything cached from the passes' output."""
        return hashlib.sha256("\n".join(self.identity()).encode()).hexdigest()[:16]

    def run_passes(self, gm: torch.fx.GraphModule, ctx: PassContext | None = None, **kwargs) -> torch.fx.GraphModule:
        """Run every pass in order, each with ``ctx`` (or the :class:`PassContext` made of the
        seeds' keywords: ``graph_name``, ``target_device``, ``spmd_strict``, ...).

        A pass that raises is reported as :class:`FXPassError` naming the pass and the graph (an
        ``FXPassError`` the pass raised itself passes through unchanged). A pass must return a
        ``GraphModule``; anything else raises ``FXPassError`` too.

        A guard-rail violation (:class:`~reference.spmd.errors.SPMDViolationError`, raised under
        ``NEURON_LIBTORCH_SPMD_STRICT=1``) is not a failing pass: it passes through as itself, with
        a note naming the pass, so the caller can catch it by its type.
        """
        if ctx is None:
            ctx = PassContext.of(**kwargs)
        elif kwargs:
            raise TypeError(f"run_passes takes a PassContext or keywords, not both (got {sorted(kwargs)})")
        graph_name = ctx.graph_name
        for p in self.passes:
            start = time.perf_counter()
            try:
                out = p.transform(gm, ctx) if type(p).run is FXPass.run else p.run(gm, **ctx.as_kwargs())
            except FXPassError:
                raise
            except SPMDViolationError as exc:
                exc.add_note(f"raised by FX pass {p.name!r} on graph {graph_name!r}")
                raise
            except Exception as exc:
                raise FXPassError(p.name, graph_name, f"{type(exc).__name__}: {exc}") from exc
            if not isinstance(out, torch.fx.GraphModule):
                raise FXPassError(
                    p.name, graph_name, f"run() returned {type(out).__name__}, not a torch.fx.GraphModule; return the graph"
                )
            gm = out
            # the seeds' line, then the graph it ran on
            self.logger.debug("FX Pass '%s' completed in %.4fs (graph %s)", p.name, time.perf_counter() - start, graph_name)
        return gm
