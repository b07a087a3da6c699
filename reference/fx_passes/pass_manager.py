"""FXPassManager: runs passes in order, times them, and names the pass that fails."""

from __future__ import annotations

import hashlib
import logging
import time

import torch

from reference.fx_passes.base import FXPass, FXPassError


class FXPassManager:
    def __init__(self) -> None:
        self.passes: list[FXPass] = []
        self.logger = logging.getLogger("reference.fx_passes")

    def add_pass(self, pass_obj: FXPass) -> "FXPassManager":
        if not isinstance(pass_obj, FXPass):
            raise TypeError(
                f"FXPassManager.add_pass takes an FXPass instance, got {type(pass_obj).__name__}; "
                "subclass reference.fx_passes.FXPass"
            )
        self.passes.append(pass_obj)
        return self

    def identity(self) -> list[str]:
        """The ordered pass names with their versions."""
        return [f"{p.name}@{p.version}" for p in self.passes]

    def uuid(self) -> str:
        """A digest of :meth:`identity`; enters the key of anything cached from the passes' output."""
        return hashlib.sha256("\n".join(self.identity()).encode()).hexdigest()[:16]

    def run_passes(self, gm: torch.fx.GraphModule, **kwargs) -> torch.fx.GraphModule:
        graph_name = kwargs.get("graph_name", "<graph>")
        for p in self.passes:
            start = time.perf_counter()
            try:
                gm = p.run(gm, **kwargs)
            except FXPassError:
                raise
            except Exception as exc:
                raise FXPassError(p.name, graph_name, f"{type(exc).__name__}: {exc}") from exc
            self.logger.debug("FX pass %r on %s took %.4fs", p.name, graph_name, time.perf_counter() - start)
        return gm
