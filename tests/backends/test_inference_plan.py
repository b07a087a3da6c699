"""Inference plans: a warm start serves a graph without AOT Autograd's trace, with the same results.

A "warm start" here is a second ``torch.compile`` of the same model after ``torch._dynamo.reset()``
in this process, over this module's own caches: Dynamo traces again, as a new process would, and
the plan cache, the HLO cache and the NEFF cache are on disk. The planned path is proven by
making AOT Autograd's entry point raise while it runs.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import given, settings, strategies as st

from reference.backends import aot_autograd, inference_plan
from reference.cache.plan_cache import PlanCache, create_plan_key, graph_digest, input_signature, plan_cache
from reference.core.build_settings import CacheRoots
from reference.core import env
from reference.core.build_settings import BuildSettings
from reference.core.metrics import METRICS


@pytest.fixture()
def caches(tmp_path):
    """Caches of this test only, so that the first compile is cold."""
    with env.override(**{
        env.NEFF_CACHE_DIR: str(tmp_path / "neff"), env.HLO_CACHE_DIR: str(tmp_path / "hlo"),
        env.NEFF_LOCAL_CACHE_DIR: str(tmp_path / "local"),
    }):
        torch._dynamo.reset()
        yield tmp_path
    torch._dynamo.reset()


@pytest.fixture()
def no_aot(monkeypatch):
    """Make AOT Autograd's trace fail: a graph compiled while this is on was served from its plan."""

    def refuse(*_a, **_k):
        raise AssertionError("AOT Autograd traced a graph that has a plan")

    def arm():
        monkeypatch.setattr(aot_autograd, "trace_aten_graphs", refuse)

    return arm


class Counter(torch.nn.Module):
    """A forward that writes a buffer in place (the way a KV cache or a running statistic does)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(8))

    def forward(self, x):
        self.calls.add_(1.0)
        return torch.relu(self.lin(x)) + self.calls


def _warm_compile(model):
    torch._dynamo.reset()
    return torch.compile(model, backend="neuron", dynamic=False)


def test_the_decoder_is_served_from_its_plans_and_matches_the_cold_start(caches, no_aot):
    from neuron_fixtures import DECODER_PREFILL_BUCKETS, decoder_decode_inputs, decoder_model, decoder_prefill_inputs

    torch.manual_seed(0)
    model = decoder_model().eval()

    def run(fn):
        # fresh inputs each time: the prefill and decode steps write their KV caches in place
        prefill = decoder_prefill_inputs(model, DECODER_PREFILL_BUCKETS[0])
        decode = decoder_decode_inputs(model)
        with torch.no_grad():
            outs = [fn(*prefill)] + [fn(*decode) for _ in range(2)]
        return outs, [c.clone() for c in (*prefill[2], *prefill[3], *decode[2], *decode[3])]

    cold_outs, cold_caches = run(torch.compile(model, backend="neuron", dynamic=False))
    eager_outs, eager_caches = run(model)
    assert len(plan_cache(CacheRoots.from_env()).keys()) == 2  # prefill and decode

    no_aot()
    before = METRICS.counters()
    warm_outs, warm_caches = run(_warm_compile(model))
    after = METRICS.counters()
    assert after.get("plan_cache_hits", 0) - before.get("plan_cache_hits", 0) == 2
    assert after.get("lowerings", 0) == before.get("lowerings", 0)
    assert after.get("compiler_invocations", 0) == before.get("compiler_invocations", 0)
    for warm, cold, eager in zip(warm_outs, cold_outs, eager_outs):
        torch.testing.assert_close(warm, cold, rtol=0, atol=0)  # the same artifact on the same inputs
        torch.testing.assert_close(warm, eager, rtol=1e-4, atol=1e-5)
    assert any(not torch.equal(c, torch.zeros_like(c)) for c in eager_caches)
    for i, (warm, cold, eager) in enumerate(zip(warm_caches, cold_caches, eager_caches)):
        # the cache writes reached the caller's tensors on the planned path
        torch.testing.assert_close(warm, cold, rtol=0, atol=0, msg=f"cache {i}")
        torch.testing.assert_close(warm, eager, rtol=1e-4, atol=1e-5, msg=f"cache {i}")


def test_a_written_buffer_is_copied_back_on_every_planned_call(caches, no_aot):
    torch.manual_seed(0)
    model = Counter().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.compile(model, backend="neuron", dynamic=False)(x)
        assert model.calls.tolist() == [1.0] * 8
        no_aot()
        fn = _warm_compile(model)
        for n in range(2, 5):
            out = fn(x)
            assert model.calls.tolist() == [float(n)] * 8
            torch.testing.assert_close(out, torch.relu(model.lin(x)) + n, rtol=1e-5, atol=1e-6)


def test_graphs_whose_aot_wrapper_does_more_have_no_plan_and_stay_correct(caches):
    def aliasing(x):
        return x.view(-1), x + 1  # the first output is a view of the input: AOT regenerates it

    x = torch.randn(3, 4)
    with torch.no_grad():
        outs = torch.compile(aliasing, backend="neuron", dynamic=False)(x)
    assert plan_cache(CacheRoots.from_env()).keys() == []
    assert outs[0].data_ptr() == x.data_ptr() and torch.equal(outs[0], x.view(-1))  # a view, as in eager
    torch.testing.assert_close(outs[1], x + 1)

    lin = torch.nn.Linear(4, 4)  # a training graph (parameters need gradients): no key at all
    key = inference_plan.plan_key(graph_digest(torch.fx.symbolic_trace(lin)), [x.requires_grad_()], "p", BuildSettings.from_env())
    assert key is None


def test_an_unusable_plan_is_traced_again_and_replaced(caches):
    torch.manual_seed(0)
    model = Counter().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.compile(model, backend="neuron", dynamic=False)(x)
    cache = plan_cache(CacheRoots.from_env())
    (key,) = cache.keys()
    good = json.loads(open(cache.path(key)).read())
    with open(cache.path(key), "w") as fh:
        fh.write('{"record_version": 1, "key": "%s", "plan": {"hlo_key": 5}}' % key)
    assert cache.get(key) is None  # damaged: not served
    before = METRICS.counters().get("plan_cache_hits", 0)
    with torch.no_grad():
        out = _warm_compile(model)(x)
    assert METRICS.counters().get("plan_cache_hits", 0) == before
    torch.testing.assert_close(out, torch.relu(model.lin(x)) + 2, rtol=1e-5, atol=1e-6)
    assert json.loads(open(cache.path(key)).read()) == good  # the trace wrote the record again


def test_a_plan_whose_hlo_record_is_gone_is_traced_again(caches):
    torch.manual_seed(0)
    model = Counter().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.compile(model, backend="neuron", dynamic=False)(x)
    hlo_dir = caches / "hlo"
    for name in os.listdir(hlo_dir):
        if name.endswith(".json"):
            os.remove(hlo_dir / name)
    before = METRICS.counters()
    with torch.no_grad():
        out = _warm_compile(model)(x)
    after = METRICS.counters()
    assert after.get("plan_cache_hits", 0) == before.get("plan_cache_hits", 0)
    assert after.get("lowerings", 0) == before.get("lowerings", 0) + 1
    torch.testing.assert_close(out, torch.relu(model.lin(x)) + 2, rtol=1e-5, atol=1e-6)


def test_no_plan_is_read_or_written_with_caching_off(caches, monkeypatch):
    monkeypatch.setenv(env.NEFF_DISABLE_CACHE, "1")
    with torch.no_grad():
        torch.compile(Counter().eval(), backend="neuron", dynamic=False)(torch.randn(2, 8))
    assert PlanCache(str(caches / "hlo" / "plans")).keys() == []


# --- the key ------------------------------------------------------------------------------------------


def _traced():
    def f(x, y):
        return torch.sin(x) + y

    return torch.fx.symbolic_trace(f)


_SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(a=_SHAPES, b=_SHAPES, dtype_a=st.sampled_from([torch.float32, torch.float16]),
       dtype_b=st.sampled_from([torch.float32, torch.float16]))
def test_the_key_is_equal_exactly_when_the_inputs_look_alike(a, b, dtype_a, dtype_b):
    gm = graph_digest(_traced())
    ka = create_plan_key(gm, input_signature([torch.zeros(a, dtype=dtype_a), torch.zeros(a)]), {"c": 1})
    kb = create_plan_key(gm, input_signature([torch.zeros(b, dtype=dtype_b), torch.zeros(b)]), {"c": 1})
    assert (ka == kb) == (a == b and dtype_a == dtype_b)


def test_the_key_follows_the_graph_the_context_and_input_storage_sharing():
    gm = graph_digest(_traced())
    x, y = torch.zeros(4), torch.zeros(4)
    base = create_plan_key(gm, input_signature([x, y]), {"grad": False})
    assert create_plan_key(gm, input_signature([torch.ones(4), torch.ones(4)]), {"grad": False}) == base  # values do not count
    assert create_plan_key(gm, input_signature([x, y]), {"grad": True}) != base
    assert create_plan_key(gm, input_signature([x, x]), {"grad": False}) != base  # one tensor passed twice
    halves = torch.zeros(8)
    assert create_plan_key(gm, input_signature([halves[:4], halves[4:]]), {"grad": False}) != base  # one storage

    def g(x, y):
        return torch.cos(x) + y

    assert create_plan_key(graph_digest(torch.fx.symbolic_trace(g)), input_signature([x, y]), {"grad": False}) != base


def test_the_seams_key_follows_grad_mode_the_sdpa_switch_and_aot_autograds_config(monkeypatch):
    gm = graph_digest(_traced())
    inputs = [torch.zeros(4), torch.zeros(4)]
    with torch.no_grad():
        off = inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env())
        assert inference_plan.plan_key(gm, inputs, "passes-2", BuildSettings.from_env()) != off
        monkeypatch.setenv(env.ENABLE_NKI_SDPA, "0")
        assert inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env()) != off
    monkeypatch.delenv(env.ENABLE_NKI_SDPA)
    assert inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env()) != off  # grad mode on
    with torch.no_grad():
        assert inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env()) == off
        flipped = not torch._functorch.config.view_replay_for_aliased_outputs
        with torch._functorch.config.patch(view_replay_for_aliased_outputs=flipped):
            assert inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env()) != off  # AOT Autograd configured otherwise
        with torch._functorch.config.patch(bundled_autograd_cache=True):  # as aot_compile sets it
            assert inference_plan.plan_key(gm, inputs, "passes-1", BuildSettings.from_env()) is None
    assert input_signature([torch.zeros(2), [torch.zeros(2)]]) is None  # not a plain tensor: no plan


def _python_functions_of_one_call(fn, *args) -> set[str]:
    seen: set[str] = set()

    def profiler(frame, event, _arg):
        if event == "call":
            seen.add(frame.f_code.co_filename)

    import sys

    sys.setprofile(profiler)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_planned_call_runs_no_aot_autograd_code(caches, start):
    """The thin call path: neither a cold nor a warm start leaves AOT Autograd's runtime wrapper on
    the call path of a graph with a plan (a graph without one keeps it: the control)."""
    torch.manual_seed(0)
    model = Counter().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        fn = torch.compile(model, backend="neuron", dynamic=False)
        fn(x)
        if start == "warm":
            fn = _warm_compile(model)
            fn(x)
        files = _python_functions_of_one_call(fn, x)
    assert any("reference/runtime.py" in f for f in files)
    assert not _aot_runtime(files), sorted(files)

    def aliasing(t):
        return t.view(-1), t + 1

    with torch.no_grad():
        control = torch.compile(aliasing, backend="neuron", dynamic=False)
        control(x)
        assert _aot_runtime(_python_functions_of_one_call(control, x))


def _aot_runtime(files: set[str]) -> list[str]:
    """The files of AOT Autograd's runtime wrapper among ``files`` (Dynamo's guards call two helpers
    of ``_aot_autograd/utils.py`` on every call of any compiled frame; those are not the wrapper)."""
    wrapper = ("_aot_autograd/runtime_wrappers.py", "_aot_autograd/subclass_codegen.py", "_functorch/aot_autograd.py")
    return [f for f in files if f.endswith(wrapper) or "runtime_wrapper" in f]
