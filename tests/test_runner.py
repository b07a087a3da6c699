"""Unit tests of the runner's policy wiring; nothing is compiled (``torch.compile`` is lazy and no
compiled model is called), the trace jobs are only built."""

from __future__ import annotations

import pytest

from neuron_fixtures.policy import PolicyVLM, StringPolicyVLM
from reference.compiler.scope import apply_scoped_compiler_args
from reference.runner import CompilerArgsPolicyError, NeuronModelRunner, NeuronWorker, UnknownGraphTypeError

BASE = ["--model-type", "transformer"]


def _runner(model=None, **kw):
    return NeuronModelRunner(model or PolicyVLM(), compiler_args=BASE, **kw).load_model()


def test_policy_on_without_explicit_level():
    r = _runner()
    assert r.per_graph_compiler_args
    assert r.compile_options["compiler_args"] == BASE
    assert r.model._neuron_base_compiler_args == BASE
    assert r.resolve_graph_compiler_args("decode") == [*BASE, "-O3"]
    assert r.resolve_graph_compiler_args("jf") == [*BASE, "-O2"]
    assert r.resolve_graph_compiler_args("prefill") == BASE
    assert r.resolve_graph_compiler_args(None) is None


def test_explicit_level_wins_and_disables_the_policy():
    r = _runner(optimization_level=1)
    assert not r.per_graph_compiler_args
    assert r.compile_options["compiler_args"] == [*BASE, "-O1"]
    assert r.model._neuron_base_compiler_args is None
    assert all(r.resolve_graph_compiler_args(g) is None for g in ("decode", "encoder", "jf", "prefill"))
    with r.model._scoped_compiler_args("encoder"):
        assert apply_scoped_compiler_args({"compiler_args": ["x"]}) == {"compiler_args": ["x"]}


def test_model_without_policy_keeps_base():
    import torch

    r = NeuronModelRunner(torch.nn.Linear(2, 2), compiler_args=BASE).load_model()
    assert not r.per_graph_compiler_args and r.resolve_graph_compiler_args("decode") is None


def test_model_encoder_scope_uses_stamped_base():
    r = _runner()
    with r.model._scoped_compiler_args("encoder"):
        assert apply_scoped_compiler_args({})["compiler_args"] == [*BASE, "-O3"]


def test_bad_policy_and_graph_type_errors_name_the_graph_type():
    with pytest.raises(CompilerArgsPolicyError, match="'decode'.*list of strings"):
        _runner(StringPolicyVLM()).resolve_graph_compiler_args("decode")
    with pytest.raises(UnknownGraphTypeError, match="'vision'"):
        _runner().resolve_graph_compiler_args("vision")


def test_worker_jobs_carry_the_resolved_list():
    r = _runner(mode="capture")
    w = NeuronWorker(r)
    model, kwargs, args = w._build_trace_job("decode")
    assert model is r.compiled_model and args == [*BASE, "-O3"]
    assert set(kwargs) == {"input_ids", "positions", "k_caches", "v_caches"}
    assert w._build_trace_job(None)[2] is None
    assert set(w._build_trace_job("encoder")[1]) == {"pixels"}
    assert len(NeuronWorker(_runner(mode="native"))._build_trace_job("decode")) == 2


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode"):
        NeuronModelRunner(PolicyVLM(), mode="xla")
