"""Unit tests of the runner's policy wiring; nothing is compiled (``torch.compile`` is lazy and no
compiled model is called), the trace jobs are only built."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from neuron_fixtures.policy import PolicyVLM, StringPolicyVLM
from reference.compiler.scope import apply_scoped_compiler_args, scoped_compiler_args
from reference.runner import CompilerArgsPolicyError, NeuronModelRunner, NeuronWorker, UnknownGraphTypeError
from reference.runner.opt_level import with_optimization_level

BASE = ["--model-type", "transformer"]
# The reference's helpers, handed to the policy fixtures (they import no implementation).
HELPERS = SimpleNamespace(scoped_compiler_args=scoped_compiler_args, with_optimization_level=with_optimization_level)


def _runner(model=None, **kw):
    return NeuronModelRunner(model or PolicyVLM(HELPERS), compiler_args=BASE, **kw).load_model()


@pytest.mark.spec("000.policy.signature", "000.policy.example-inputs-none")
def test_policy_on_without_explicit_level():
    r = _runner()
    assert r.per_graph_compiler_args
    assert r.compile_options["compiler_args"] == BASE
    assert r.model._neuron_base_compiler_args == BASE
    assert r.resolve_graph_compiler_args("decode") == [*BASE, "-O3"]
    assert r.resolve_graph_compiler_args("jf") == [*BASE, "-O2"]
    assert r.resolve_graph_compiler_args("prefill") == BASE
    assert r.resolve_graph_compiler_args(None) is None


@pytest.mark.spec("000.precedence.explicit-level-wins")
def test_explicit_level_wins_and_disables_the_policy():
    r = _runner(optimization_level=1)
    assert not r.per_graph_compiler_args
    assert r.compile_options["compiler_args"] == [*BASE, "-O1"]
    assert r.model._neuron_base_compiler_args is None
    assert all(r.resolve_graph_compiler_args(g) is None for g in ("decode", "encoder", "jf", "prefill"))
    with r.model._scoped_compiler_args("encoder"):
        assert apply_scoped_compiler_args({"compiler_args": ["x"]}) == {"compiler_args": ["x"]}


@pytest.mark.spec("000.runner.resolve-none")
def test_model_without_policy_keeps_base():
    import torch

    model = torch.nn.Linear(2, 2)
    before = dict(vars(model))
    r = NeuronModelRunner(model, compiler_args=BASE).load_model()
    assert not r.per_graph_compiler_args and r.resolve_graph_compiler_args("decode") is None
    added = set(vars(model)) - set(before) - {"_is_torch_compile"}  # the last is torch.compile's own mark
    assert not added, f"the runner set {sorted(added)} on a user's model"


@pytest.mark.spec("000.flow.encoder-model-scope")
def test_model_encoder_scope_uses_stamped_base():
    r = _runner()
    with r.model._scoped_compiler_args("encoder"):
        assert apply_scoped_compiler_args({})["compiler_args"] == [*BASE, "-O3"]


def test_bad_policy_and_graph_type_errors_name_the_graph_type():
    with pytest.raises(CompilerArgsPolicyError, match="'decode'.*list of strings"):
        _runner(StringPolicyVLM(HELPERS)).resolve_graph_compiler_args("decode")
    for bad in ("", 3, ("decode",)):
        with pytest.raises(UnknownGraphTypeError, match="non-empty string"):
            _runner().resolve_graph_compiler_args(bad)


def test_graph_types_are_open_and_the_known_ones_keep_the_seeds_defaults():
    r = _runner()
    # Any graph type reaches the model's policy, which gives its default (the base) for one it
    # does not single out.
    assert r.resolve_graph_compiler_args("vision") == BASE
    assert r.resolve_graph_compiler_args("audio_encoder") == BASE
    assert r.resolve_graph_compiler_args("decode") == [*BASE, "-O3"]
    assert r.resolve_graph_compiler_args("encoder") == [*BASE, "-O3"]
    # The policy off: no override for any graph type, known or not.
    assert _runner(optimization_level=2).resolve_graph_compiler_args("vision") is None


@pytest.mark.spec("000.runner.stamp-base-on-model")
def test_the_runner_stamps_the_base_arguments_on_a_model_with_a_policy():
    import torch

    class Bare(torch.nn.Linear):
        """A policy and nothing else: no setter, no attribute of its own."""

        def compiler_args_for(self, graph_type, example_inputs, base):
            return with_optimization_level(base, 3) if graph_type == "vision" else list(base)

    model = Bare(2, 2)
    r = NeuronModelRunner(model, compiler_args=BASE).load_model()
    assert model._neuron_base_compiler_args == BASE
    assert model._neuron_base_compiler_args is not r.compile_options["compiler_args"]  # a copy
    assert r.resolve_graph_compiler_args("vision") == [*BASE, "-O3"]
    # A later load with an explicit level turns the policy off and clears the stamp.
    NeuronModelRunner(model, compiler_args=BASE, optimization_level=1).load_model()
    assert model._neuron_base_compiler_args is None


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
        NeuronModelRunner(PolicyVLM(HELPERS), mode="xla")
