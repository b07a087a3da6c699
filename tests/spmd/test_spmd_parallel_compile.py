"""The single-artifact check in parallel_compile, on ranks that really staged their graphs.

Two ranks (conformance.harness.launcher, gloo) capture a model with the capture seam into one shared
directory; each staged hash directory records the ranks that staged it. Rank 0 then runs
parallel_compile over the directory: the SPMD model stages one directory holding both ranks and
compiles once; the MPMD twin stages one directory per rank, which warns by default and raises
under NEURON_LIBTORCH_SPMD_STRICT=1 naming the hashes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conformance.harness.launcher import launch

pytestmark = pytest.mark.slow
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}


def capture_and_compile(directory: str):
    import warnings

    import torch
    import torch.distributed as dist

    from neuron_fixtures.spmd import EmbedMoE
    from reference.backends.capture import capture_to
    from reference.flows.staged_build import parallel_compile
    from reference.spmd import rank_tensor
    from reference.spmd.errors import SplinterError

    rank = dist.get_rank()
    ids = torch.randint(0, 128, (2, 3), generator=torch.Generator().manual_seed(5))
    out = {}
    for mode in ("spmd", "mpmd"):
        where = os.path.join(directory, mode)
        model = EmbedMoE(rank, dist.get_world_size(), None, mpmd=(mode == "mpmd")).eval()
        with capture_to(where), torch.no_grad():
            torch._dynamo.reset()
            torch.compile(model, backend="neuron_libtorch_graph_capture")(ids, rank=rank_tensor(rank))
        dist.barrier()
        if rank == 0:
            res = {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                os.environ["NEURON_LIBTORCH_SPMD_STRICT"] = "0"
                report = parallel_compile(where, workers=1, progress=False)
            res["default"] = {"keys": sorted({g.cache_key for g in report.graphs}), "warnings": [str(w.message) for w in caught]}
            os.environ["NEURON_LIBTORCH_SPMD_STRICT"] = "1"
            try:
                parallel_compile(where, workers=1, progress=False)
                res["strict"] = None
            except SplinterError as exc:
                res["strict"] = str(exc)
            finally:
                os.environ.pop("NEURON_LIBTORCH_SPMD_STRICT", None)
            res["staged"] = sorted(d for d in os.listdir(where) if not d.startswith("."))
            out[mode] = res
        dist.barrier()
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    directory = tmp_path_factory.mktemp("staged")
    return launch(f"{__name__}:capture_and_compile", 2, kwargs={"directory": str(directory)}, env=ENV, timeout=600)[0]


def test_spmd_model_stages_one_directory_and_compiles_once_in_both_modes(results):
    spmd = results["spmd"]
    assert len(spmd["staged"]) == 1
    assert len(spmd["default"]["keys"]) == 1
    assert not [w for w in spmd["default"]["warnings"] if "splinter" in w]
    assert spmd["strict"] is None


@pytest.mark.spec("002.guards.splinter-strict-raises")
def test_mpmd_twin_splinters_warn_by_default_and_raise_under_strict(results):
    mpmd = results["mpmd"]
    assert len(mpmd["staged"]) == 2  # one hash directory per rank
    assert any("splinter" in w for w in mpmd["default"]["warnings"]), mpmd["default"]["warnings"]
    assert mpmd["strict"] is not None, "parallel_compile accepted per-rank splinters under the strict flag"
    for key in mpmd["staged"]:
        assert key in mpmd["strict"]
