"""The resolved compile request and the seams: configuration read once, one door per graph.

Most tests compile for real (torch.compile, torch-mlir, IREE). Two spy on a neighbour without
replacing it: they wrap the flag parser (to count parses) and the pipeline's serve step (to see
which argument list a graph was served with), and call through.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from reference.backends import seam as seam_mod
from reference.backends.capture import CAPTURE_SEAM, capture_to
from reference.backends.native import NATIVE_SEAM, reset_native_key_registry
from reference.backends.neuron import NEURON_SEAM
from reference.cache.key import create_cache_hash
from reference.compiler import driver
from reference.compiler.request import DeferredRequest, resolve_request
from reference.compiler.scope import platform_compiler_config, scoped_compiler_args
from reference.core import env
from reference.core.errors import BackendOptionError
from reference.flows.tracing import TraceJob, TraceJobError, validate_jobs
from reference.flows.tools import lower_graphs

ROOT = Path(reference.__file__).resolve().parent
_ENV_READ = re.compile(r"os\.environ|os\.getenv|environ\.get|\bgetenv\(|\bputenv\(")


# --- the environment is read in one module --------------------------------------------------------

def test_only_core_env_reads_the_environment():
    allowed = ROOT / "core" / "env.py"
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == allowed:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _ENV_READ.search(line):
                found.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    assert not found, "the environment is read outside reference/core/env.py:\n" + "\n".join(found)


# --- the request ----------------------------------------------------------------------------------


@pytest.mark.spec("000.seams.before-platform-args")
def test_a_request_is_resolved_from_the_scope_the_platform_and_the_environment():
    with env.override(**{env.COMPILE_ONLY: True, env.DISABLE_FALLBACK_EXECUTION: False, env.CC_FLAGS: "--lnc 2"}):
        with scoped_compiler_args(["-O3"]):
            request = resolve_request({"compiler_args": ["-O1"]}, seam="neuron")
    assert request.compiler_args == ["-O3", "--lnc", "2", "--target", "trn2"]
    assert (request.config.optlevel, request.target) == (3, "trn2")
    assert request.compile_only and request.fallback
    assert request.model_name == reference.get_model_name() and request.rank == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.compile_only = False  # type: ignore[misc]


def test_a_request_does_not_follow_the_environment_after_it_is_made():
    request = resolve_request({}, seam="neuron")
    with env.override(**{env.COMPILE_ONLY: True, env.PLATFORM_TARGET_OVERRIDE: "trn3"}):
        assert not request.compile_only and request.target == "trn2"


# --- below the seam: the request's settings, never the environment ---------------------------------

#: The packages below the seam (the import-linter contract "nothing below the seam reads the
#: environment" keeps reference.core.env out of them; this checks it at run time, calls included).
_BELOW_SEAM = tuple(str(ROOT / p) for p in ("pipeline.py", "runtime.py", "cache", "lowering", "fx_passes", "spmd"))


_CORE = str(ROOT / "core")


def _spy_env_reads_below_the_seam(monkeypatch) -> list[str]:
    """Every variable read (``env.get``/``env.is_set``) that code below the seam makes, as ``NAME
    from file:line``; the read itself goes through unchanged. A read is the code's whose frame is
    the nearest outside ``reference/core`` (so a read through ``BuildSettings.from_env`` counts for
    its caller). Reads by listeners registered from above (the metric tables' CSV writer, called
    when the pipeline records a graph) are theirs, and the host identity is read by the compiler
    driver once per process (``tool_versions`` is cached)."""
    import sys

    seen: list[str] = []

    def spy(real):
        def read(name, *args, **kwargs):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(_CORE):
                frame = frame.f_back
            where = frame.f_code.co_filename if frame is not None else ""
            if where.startswith(_BELOW_SEAM):
                seen.append(f"{name} from {Path(where).relative_to(ROOT.parent)}:{frame.f_lineno}")
            return real(name, *args, **kwargs)

        return read

    monkeypatch.setattr(env, "get", spy(env.get))
    monkeypatch.setattr(env, "is_set", spy(env.is_set))
    return seen


def test_nothing_below_the_seam_reads_the_environment_while_compiling(monkeypatch, tmp_path):
    """A cold compile (lower, build, load, the plan recorded), a warm one (served from its plan), a
    training step (the backward graph built at its first call), a float64 graph and a compile-only
    one: the pipeline, the caches, the lowering and the runtime read only the request."""
    seen = _spy_env_reads_below_the_seam(monkeypatch)
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(tmp_path / "neff"))
    monkeypatch.setenv(env.HLO_CACHE_DIR, str(tmp_path / "hlo"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    for _start in ("cold", "warm"):
        torch._dynamo.reset()
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="neuron", dynamic=False)(x), model(x), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    torch.compile(model, backend="neuron", dynamic=False)(x).sum().backward()  # forward and backward graphs
    assert model[0].weight.grad is not None
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="float64"):
        torch.compile(lambda a: a * 2, backend="neuron", dynamic=False)(torch.ones(3, dtype=torch.float64))
    torch._dynamo.reset()
    with reference.compile_only():
        torch.compile(lambda a: a + 5, backend="neuron", dynamic=False)(torch.ones(3))
    torch._dynamo.reset()
    assert seen == [], "read from the environment below the seam:\n" + "\n".join(seen)


def test_a_compile_follows_the_settings_of_its_request_not_the_environment_later(monkeypatch, tmp_path):
    """Settings frozen in a request win over the environment changed after it was made: the float64
    policy, the cache folders and assert-cache-hit all come from the request."""
    from reference import pipeline
    from reference.core.build_settings import BuildSettings, CacheRoots
    from reference.compiler.driver import CompilerConfig
    from reference.core.errors import PrecisionError

    o1 = CompilerConfig.from_args(["-O1"])
    (lowered,) = lower_graphs(lambda a: a * 2, (torch.ones(3, dtype=torch.float64),))
    mine = BuildSettings(cache=CacheRoots(neff=str(tmp_path / "mine"), hlo=str(tmp_path / "hlo"), local=str(tmp_path / "lk"),
                                          configured=frozenset({env.NEFF_CACHE_DIR, env.HLO_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR})))
    monkeypatch.setenv(env.FLOAT64, "error")
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(tmp_path / "elsewhere"))
    monkeypatch.setenv(env.ASSERT_CACHE_HIT, "1")
    with pytest.warns(UserWarning, match="float64"):  # narrowed (the request's policy), not refused
        served = pipeline.serve(pipeline.Lowering(lowered), pipeline.BuildContext("g64", o1, mine))
    assert (tmp_path / "mine" / served.key).is_dir() and not (tmp_path / "elsewhere").exists()
    torch.testing.assert_close(served(torch.ones(3, dtype=torch.float64))[0], torch.full((3,), 2.0, dtype=torch.float64))
    with pytest.raises(PrecisionError, match="g64"):  # the environment's settings, read now, refuse it
        pipeline.serve(pipeline.Lowering(lowered), pipeline.BuildContext("g64", o1, BuildSettings.from_env()))


def test_an_unknown_key_policy_is_a_typed_error():
    # a key policy is named only where it crosses a file or a public call: the deferred request
    # and capture_to; both resolve the name through key_policy_named
    with pytest.raises(BackendOptionError, match="unknown key policy 'natve'; known: default, native"):
        DeferredRequest(compiler_args=None, key_policy="natve")
    with pytest.raises(BackendOptionError, match="unknown key policy 'natve'"):
        with capture_to("/nonexistent-but-unused", key_policy="natve"):
            pass


def _count_parses(monkeypatch) -> list[list[str]]:
    calls: list[list[str]] = []
    real = driver._parse_tokens

    def counting(tokens):
        calls.append(list(tokens))
        return real(tokens)

    monkeypatch.setattr(driver, "_parse_tokens", counting)
    return calls


@pytest.mark.parametrize("backend", ["neuron", "neuron_native_lite"])
def test_a_cold_compile_parses_its_arguments_once(backend, monkeypatch, tmp_path):
    reset_native_key_registry()
    calls = _count_parses(monkeypatch)
    torch._dynamo.reset()
    with env.override(**{env.NEFF_CACHE_DIR: str(tmp_path / "neff"), env.HLO_CACHE_DIR: str(tmp_path / "hlo")}):
        with scoped_compiler_args(["-O2"]):
            out = torch.compile(lambda x: x * 3 + 1, backend=backend, dynamic=False)(torch.arange(4.0))
    torch._dynamo.reset()
    assert out.tolist() == [1.0, 4.0, 7.0, 10.0]
    assert calls == [["-O2"]], f"{backend}: parsed {len(calls)} times: {calls}"


def test_the_scope_holds_strings_and_the_request_parses_them_with_the_platform_flags_once(monkeypatch):
    calls = _count_parses(monkeypatch)
    with env.override(**{env.CC_FLAGS: "--auto-cast all"}), scoped_compiler_args(["-O3", "--lnc=2"]):
        request = resolve_request({}, seam="neuron")
    assert calls == [["-O3", "--lnc=2", "--auto-cast", "all"]], "one parse: the scope's list and the platform's flags"
    assert request.compiler_args == ["-O3", "--lnc=2", "--auto-cast", "all", "--target", "trn2"]
    assert request.config.pairs == (("-O", "3"), ("--lnc", "2"), ("--auto-cast", "all"), ("--target", "trn2"))
    # a parsed configuration is a value, not an argument list: the scope takes its tokens
    config = driver.CompilerConfig.from_args(["-O3"])
    with pytest.raises(BackendOptionError, match=r"scoped_compiler_args must be a list of strings, got CompilerConfig"):
        with scoped_compiler_args(config):
            pass
    with scoped_compiler_args(config.args):
        assert resolve_request({}, seam="neuron").config.optlevel == 3


def test_a_runners_decode_graph_parses_its_policys_list_at_the_runner_and_at_the_request(monkeypatch, tmp_path):
    """The runner validates the policy's list where it enters (a bad one names the policy) and
    scopes its tokens; the compile request parses them into the compile's configuration. From the
    policy's answer to the built artifact, those two parses and no other (the platform adds no
    flags here)."""
    from types import SimpleNamespace

    from neuron_fixtures.policy import PolicyVLM
    from reference.runner import NeuronModelRunner
    from reference.runner.opt_level import with_optimization_level

    helpers = SimpleNamespace(scoped_compiler_args=scoped_compiler_args, with_optimization_level=with_optimization_level)
    runner = NeuronModelRunner(PolicyVLM(helpers), compiler_args=["--model-type", "transformer"]).load_model()
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(tmp_path / "neff"))
    monkeypatch.setenv(env.HLO_CACHE_DIR, str(tmp_path / "hlo"))
    reference.reset_dynamo_metrics()
    calls = _count_parses(monkeypatch)
    torch._dynamo.reset()
    with torch.no_grad():
        runner.run_site("decode", **runner.model.example_kwargs("decode"))
    torch._dynamo.reset()
    assert calls == [["--model-type", "transformer", "-O3"]] * 2, f"parsed {len(calls)} times: {calls}"
    assert reference.get_dynamo_metrics(), "the decode graph was compiled"


# --- the deferred path carries a typed, serialisable request ------------------------------------

_ARG = st.sampled_from(["-O1", "-O2", "-O3", "--lnc", "2", "--target", "trn3", "--auto-cast", "matmult"])


@settings(max_examples=50, deadline=None)
@given(st.one_of(st.none(), st.lists(_ARG, max_size=6)), st.sampled_from(["default", "native"]))
def test_a_deferred_request_survives_json(args, policy):
    request = DeferredRequest(compiler_args=args, key_policy=policy)
    again = DeferredRequest.from_json(request.to_json())
    assert again == request
    assert json.loads(request.to_json())["compiler_args"] == args


def test_a_malformed_deferred_request_is_a_typed_error():
    with pytest.raises(BackendOptionError, match="JSON"):
        DeferredRequest.from_json("{not json")
    with pytest.raises(BackendOptionError, match="list of strings"):
        DeferredRequest.from_json('{"compiler_args": "-O3"}')
    with pytest.raises(BackendOptionError, match="holds compiler_args and key_policy"):
        DeferredRequest.from_json('{"compiler_args": null, "rank": 3}')


def test_trace_jobs_are_typed_with_their_request():
    jobs = validate_jobs([(print, {}), (print, {}, None), (print, {}, ["-O2"])], key_policy="native")
    assert [j.scoped for j in jobs] == [False, True, True]
    assert [j.request for j in jobs] == [
        DeferredRequest(None, "native"), DeferredRequest(None, "native"), DeferredRequest(("-O2",), "native"),
    ]
    assert isinstance(jobs[0], TraceJob)
    with pytest.raises(TraceJobError, match="trace job 0: .*list of strings"):
        validate_jobs([(print, {}, "-O3")])


# --- seams ----------------------------------------------------------------------------------------

def test_the_registered_backends_are_seams_that_say_what_they_do():
    seams = {s.name: s for s in (NEURON_SEAM, NATIVE_SEAM, CAPTURE_SEAM)}
    assert {n: s.does for n, s in seams.items()} == {
        "neuron": "serve", "neuron_native_lite": "serve", "neuron_libtorch_graph_capture": "stage",
    }
    assert {n: s.key_policy.name for n, s in seams.items()} == {
        "neuron": "default", "neuron_native_lite": "native", "neuron_libtorch_graph_capture": "default",
    }
    assert all(s.graph_breaks for s in seams.values())
    assert NEURON_SEAM.plans and not NATIVE_SEAM.plans and not CAPTURE_SEAM.plans
    assert NATIVE_SEAM.no_plans_because and CAPTURE_SEAM.no_plans_because
    with capture_to("/nonexistent-but-unused", key_policy="native"):
        assert CAPTURE_SEAM.key_policy_now().name == "native"


def test_a_seam_that_opts_out_of_plans_must_say_why():
    with pytest.raises(ValueError, match="say why"):
        seam_mod.Seam("x", "serve", lambda *a, **k: None)
    with pytest.raises(ValueError, match="unknown action 'run'"):
        seam_mod.Seam("x", "run", lambda *a, **k: None, plans=True)


def _with_histc(x):
    y = torch.histc(x, bins=4)
    return y * 2, x + 1


@pytest.mark.parametrize("backend", ["neuron_native_lite", "neuron_libtorch_graph_capture"])
def test_capture_and_native_take_the_forced_graph_breaks(backend, tmp_path):
    reset_native_key_registry()
    x = torch.randn(16)
    torch._dynamo.reset()
    with capture_to(tmp_path / "captured"), torch.no_grad():
        with pytest.raises(torch._dynamo.exc.Unsupported) as info:
            torch.compile(_with_histc, backend=backend, fullgraph=True)(x)
        assert info.value.gb_type == "Op not supported by the Neuron backend"
        torch._dynamo.reset()
        got = torch.compile(_with_histc, backend=backend)(x)
    torch._dynamo.reset()
    want = _with_histc(x)
    assert torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1])


def test_inference_plans_follow_the_seam_not_the_handler(monkeypatch, tmp_path):
    from reference.backends import inference_plan

    asked: list[str] = []
    real = inference_plan.plan_key

    def spying(*args, **kwargs):
        asked.append("plan")
        return real(*args, **kwargs)

    monkeypatch.setattr(inference_plan, "plan_key", spying)
    reset_native_key_registry()
    for backend in ("neuron", "neuron_native_lite"):
        torch._dynamo.reset()
        torch.compile(lambda x: x - 2, backend=backend, dynamic=False)(torch.ones(3))
        asked.append(backend)
    torch._dynamo.reset()
    assert asked == ["plan", "neuron", "neuron_native_lite"]


def test_the_lowering_tool_keys_what_the_neuron_seam_serves():
    """The adapter's lower() (the HLO snapshots) goes through the same door and lowering as
    backend="neuron": the key made from its text is the key of the graph the backend served."""

    def f(x, w):
        return torch.tanh(x @ w) + 1

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    (lowered,) = lower_graphs(f, (x, w))
    reference.reset_dynamo_metrics()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(f, backend="neuron", dynamic=False)(x, w)
    torch._dynamo.reset()
    (record,) = reference.get_dynamo_metrics()
    key = create_cache_hash(lowered.hlo, platform_compiler_config({}).args, lowered.input_specs)
    assert record.graph_id == key


# --- ATOM: the handle's list wins over a scope open at load time ----------------------------------

def test_an_atom_piece_loads_with_the_list_in_its_handle(monkeypatch):
    from reference.atom.compiler_interface import ReferenceAdaptor

    from reference import pipeline

    served: list[list[str]] = []
    real = pipeline.serve

    def spying(lowering, ctx, **kwargs):
        served.append(list(ctx.config.args))
        return real(lowering, ctx, **kwargs)

    monkeypatch.setattr(pipeline, "serve", spying)

    graph = torch.fx.symbolic_trace(lambda x: x * 5 - 1)
    other = torch.fx.symbolic_trace(lambda x: x * 7 + 2)
    x = torch.arange(4.0)
    adaptor = ReferenceAdaptor()
    torch._dynamo.reset()
    with scoped_compiler_args(["-O3"]):
        run = adaptor.load({"compiler_args": ["-O2"]}, graph, [x], 0, runtime_shape=4)
        out = run(x)
        run_none = adaptor.load({"compiler_args": None}, other, [x], 1, runtime_shape=4)
    torch._dynamo.reset()
    assert torch.equal(out, x * 5 - 1) and torch.equal(run_none(x), x * 7 + 2)
    assert served[0] == ["-O2", "--target", "trn2"], served
    assert served[1] == ["--target", "trn2"], "a handle recorded without a scope compiles with the base arguments"


def test_a_build_context_takes_a_parsed_configuration_only():
    # below the seam compiler arguments are a CompilerConfig; a loose list is refused, naming the
    # graph and where to parse it, and a context made from a request carries the request's parts
    from reference.compiler.driver import CompilerConfig
    from reference.core.build_settings import BuildSettings
    from reference.pipeline import BuildContext

    settings = BuildSettings.from_env()
    with pytest.raises(TypeError, match=r"graph 'g'.*got list.*CompilerConfig.from_args"):
        BuildContext("g", ["-O1"], settings)
    request = resolve_request({"compiler_args": ["-O1"]}, seam="neuron")
    ctx = BuildContext.of(request, "g1", fx_passes_us=7)
    assert (ctx.graph_name, ctx.config, ctx.settings, ctx.key_policy, ctx.model_name, ctx.fx_passes_us) == (
        "g1", request.config, request.settings, request.key_policy, request.model_name, 7)
    assert isinstance(ctx.config, CompilerConfig)
