"""Scratch cache directories for a test run: the suite's modules and the reference's unit tests
point the cache variables the caller did not set into a directory of their own run, so a run never
reads or pollutes a cache it was not given (by default the user's ``<tmp>/neuron-<uid>/neff_cache``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pytest

from conformance.harness import env

# each variable and the subdirectory of the scratch root it points to
SCRATCH_CACHE_VARS = {
    "TORCH_NEURONX_NEFF_CACHE_DIR": "neff_cache",
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": "local_cache",
    "TORCH_NEURONX_HLO_CACHE_DIR": "hlo_cache",
    "TORCH_NEURONX_DEBUG_DIR": "debug",
}


@contextlib.contextmanager
def scratch_cache_variables(root: Path) -> Iterator[None]:
    """While the block runs, every variable of :data:`SCRATCH_CACHE_VARS` that is not set points
    under ``root``; all are restored afterwards. Variables the caller set win."""
    with pytest.MonkeyPatch.context() as mp:
        for var, sub in SCRATCH_CACHE_VARS.items():
            if not env.is_set(var):
                mp.setenv(var, str(root / sub))
        yield
