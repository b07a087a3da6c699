"""The adapter for this project's reference implementation (the default ``--impl``)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.implementation import Implementation


class ReferenceImplementation(Implementation):
    name = "reference"

    def versions(self) -> dict[str, str]:
        from reference.cache.key import tool_versions

        return dict(tool_versions())

    def backend_names(self) -> dict[str, str]:
        return {"compile": "neuron"}

    def compile(
        self,
        model: Callable,
        *,
        options: Mapping[str, Any] | None = None,
        fullgraph: bool = False,
        dynamic: bool | None = False,
        mode: str | None = None,
    ) -> Callable:
        return torch.compile(
            model, backend="neuron", options=dict(options) if options else None, fullgraph=fullgraph, dynamic=dynamic, mode=mode
        )

    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:
        from reference.compile.backend import lower_graphs

        return [g.hlo for g in lower_graphs(model, tuple(args))]

    # --- FX passes (issue 3) -------------------------------------------------------------------
    # (adapter methods for the FX pass contract go here)

    # --- backend contract: parameters, graph breaks, variables, metrics (issue 4) ---------------
    # (adapter methods for the backend contract go here)

    # --- compile caches (issue 5) -----------------------------------------------------------------
    def cache_hash(self, hlo, compiler_args, input_specs, *, versions=None, replica_groups=None, breakdown=False):
        from reference.cache.key import create_cache_hash

        return create_cache_hash(
            hlo, compiler_args, input_specs, versions, replica_groups=replica_groups, breakdown=breakdown
        )

    def cache_env(self, root, *, lock_timeout_s=None, disable=False, assert_hit=False, neff_dir=None):
        import os

        out = {
            "TORCH_NEURONX_NEFF_CACHE_DIR": neff_dir or os.path.join(root, "neff"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": os.path.join(root, "local"),
            "TORCH_NEURONX_HLO_CACHE_DIR": os.path.join(root, "hlo"),
            "TORCH_NEURONX_NEFF_DISABLE_CACHE": "1" if disable else "0",
            "NEURON_LIBTORCH_ASSERT_CACHE_HIT": "1" if assert_hit else "0",
        }
        if lock_timeout_s is not None:
            out["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"] = str(int(lock_timeout_s))
        return out

    def compiler_invocations(self) -> int:
        from reference.compile.metrics import METRICS

        return METRICS.counters().get("compiler_invocations", 0)

    def _neff_cache(self, root):
        import os

        from reference.cache.neff_cache import NeffCache

        return NeffCache(os.path.join(root, "neff"), os.path.join(root, "local"))

    def cache_keys(self, root):
        return self._neff_cache(root).keys()

    def cache_entry_files(self, root, key):
        import os

        from reference.cache.neff_cache import ARTIFACT_FILE, METADATA_FILE

        d = self._neff_cache(root).entry_dir(key)
        return [os.path.join(d, ARTIFACT_FILE), os.path.join(d, METADATA_FILE)]

    def cache_scratch(self, root):
        from reference.cache.neff_cache import _pid_alive

        out = []
        for path in self._neff_cache(root).scratch_dirs():
            parts = path.rsplit("-", 2)
            pid = parts[-2] if len(parts) == 3 else ""
            if not (pid.isdigit() and _pid_alive(int(pid))):
                out.append(path)
        return out

    def compiles_in_progress(self, root):
        from reference.cache.neff_cache import _pid_alive

        notes = self._neff_cache(root).holders()
        return [n for n in notes if isinstance(n.get("pid"), int) and _pid_alive(n["pid"])]

    def lowerings(self) -> int:
        from reference.compile.metrics import METRICS

        return METRICS.counters().get("lowerings", 0)

    # --- per-graph compiler arguments and the compile flows (issue 6) ---------------------------
    # (adapter methods for the compiler-argument contract go here)

    # --- SPMD (issue 7) ---------------------------------------------------------------------------
    # (adapter methods for the SPMD contract go here)


def make() -> ReferenceImplementation:
    return ReferenceImplementation()
