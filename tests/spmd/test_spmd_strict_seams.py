"""Strict mode across the process boundaries of the deferred flow, and the error's own guarantees.

Under ``NEURON_LIBTORCH_SPMD_STRICT=1`` a guard-rail violation raised in a forked child
(``parallel_trace``'s trace children, ``parallel_compile``'s compile children) reaches the caller as
itself, ``from`` the child's traceback, whatever ``raise_on_error`` says; the in-process seams are
covered through the adapter in ``conformance/tests/test_spmd_guards.py``.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from reference.flows import forked
from reference.flows.forked import ChildTraceback, reraise, run_forked
from reference.flows.tracing import parallel_trace
from reference.spmd import rank_tensor
from reference.spmd.errors import RankConstantError, SplinterError, SPMDViolationError


def baked(x, rank):
    return x + rank + torch.tensor([[3]], dtype=torch.int32)


def _kwargs():
    return {"x": torch.ones(2, 2, dtype=torch.int32), "rank": rank_tensor(1)}


@pytest.mark.parametrize("raise_on_error", [True, False])
def test_parallel_trace_raises_a_childs_violation_as_itself_from_its_traceback(tmp_path, monkeypatch, raise_on_error):
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "1")
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")  # fallback on: must not matter
    with pytest.raises(RankConstantError) as info:
        parallel_trace([(baked, _kwargs(), None)], cache_dir=tmp_path, workers=1, raise_on_error=raise_on_error)
    exc = info.value
    assert "test_spmd_strict_seams.py:" in str(exc) and "node 'tensor'" in str(exc)
    assert isinstance(exc.__cause__, ChildTraceback)
    assert "RankConstantCheckPass" in exc.__cause__.text and "RankConstantError" in exc.__cause__.text
    assert any(n.startswith("raised in a forked child: trace job 0 (baked") for n in exc.__notes__), exc.__notes__
    assert not list(tmp_path.iterdir()), "nothing is staged for a refused graph"


def test_parallel_trace_stages_the_same_graph_without_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "0")
    [result] = parallel_trace([(baked, _kwargs(), None)], cache_dir=tmp_path, workers=1)
    assert result.ok and len(result.captured) == 1


def test_parallel_compile_raises_a_violation_from_a_compile_child(tmp_path, monkeypatch):
    """The compile children run no guard of their own today; a violation one raises (faked here by
    replacing the pipeline's build, which the forked child inherits) must still not become a
    failure record."""
    import importlib

    # the package re-exports the function under the module's name: fetch the module itself
    pc = importlib.import_module("reference.flows.staged_build")

    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "0")
    parallel_trace([(baked, _kwargs(), None)], cache_dir=tmp_path, workers=1)

    def refuse(*args, **kwargs):
        raise SplinterError("graph 'g': refused by a guard in the child", splinters=[])

    monkeypatch.setattr(pc, "build", refuse)
    for raise_on_error in (True, False):
        with pytest.raises(SplinterError, match="refused by a guard in the child") as info:
            pc.parallel_compile(tmp_path, workers=1, progress=False, raise_on_error=raise_on_error)
        assert isinstance(info.value.__cause__, ChildTraceback) and "refuse" in info.value.__cause__.text


def test_a_childs_exception_comes_back_as_an_object_only_when_it_pickles():
    class Local(Exception):  # defined in a function: pickles by reference to a name it cannot find
        pass

    def ok_error():
        raise SPMDViolationError("plain")

    def local_error():
        raise Local("local")

    first, second = run_forked([("a", ok_error), ("b", local_error)], workers=1)
    assert isinstance(first.exception, SPMDViolationError) and str(first.exception) == "plain"
    assert second.exception is None and second.error_type == "Local" and second.error == "local"
    with pytest.raises(SPMDViolationError) as info:
        reraise(first)
    assert info.value.__cause__.text == first.traceback
    with pytest.raises(ValueError, match="no exception"):
        reraise(second)


def test_a_violation_that_passed_through_dynamo_still_pickles(monkeypatch):
    monkeypatch.setenv("NEURON_LIBTORCH_SPMD_STRICT", "1")
    torch._dynamo.reset()
    with pytest.raises(RankConstantError) as info:
        torch.compile(baked, backend="neuron")(**_kwargs())
    torch._dynamo.reset()
    assert hasattr(info.value, "_torch_dynamo_tracer_output")  # what Dynamo attaches; it does not pickle
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is RankConstantError and str(copy) == str(info.value)
    assert copy.graph_name == info.value.graph_name and copy.findings == info.value.findings
    assert forked._picklable(info.value) is info.value
