"""The backend reference's contract, asserted: what ``torch.compile(model, backend=<impl>)`` must do
for an implementation that provides the Neuron backend's capabilities. (The probes in
``test_backend_support.py`` observe and report; these tests fail when the contract is broken.)"""

from __future__ import annotations

import re

import pytest
import torch

from conformance.harness.evidence import observe
from conformance.harness.implementation import NotSupported, declared_variable, forced_graph_break, helper_api
from conformance.harness.tolerances import assert_close
from conformance.harness.warnings_given import warnings_given

pytestmark = pytest.mark.contract("backend")

# The seeds' graph-break contract. Tests check it through compile; an implementation that also
# reports what it forces (``forced_graph_breaks``) must report these values.
GB_TYPE = "Op not supported by the Neuron backend"
THRESHOLDS = {"sort": 16384, "topk": 16384}


def _reported(impl, key: str):
    """What the implementation reports for one forced graph break, or ``None`` when it reports none
    (the test then relies on what it observes through compile alone)."""
    try:
        return forced_graph_break(impl, key)
    except NotSupported:
        return None


def _fn(x):
    return torch.relu(x) * 2 + 1


@pytest.mark.evidence
@pytest.mark.spec("001.param.dynamic-true-rejected", "001.param.shapes-recompile")
def test_dynamic_true_is_rejected_at_compile_time_and_shapes_recompile_per_shape(impl):
    with pytest.raises(Exception) as info:
        impl.backend().torch_compile(_fn, dynamic=True)(torch.randn(4, 8))
    assert "dynamic" in str(info.value)
    impl.reset()
    impl.backend().reset_graph_count()
    compiled = impl.backend().torch_compile(_fn)
    for n in (3, 5, 7, 5):
        x = torch.randn(n, 8)
        assert_close(compiled(x), _fn(x))
    assert impl.backend().graph_count() == 3, "each new shape compiles its own graph, a repeated shape reuses it"


@pytest.mark.evidence
@pytest.mark.spec("001.param.mode-warns")
def test_a_mode_other_than_default_warns_and_falls_back(impl):
    with warnings_given() as given:
        x = torch.randn(4, 8)
        assert_close(impl.backend().torch_compile(_fn, mode="max-autotune")(x), _fn(x))
    assert any("max-autotune" in m for m in given), given


@pytest.mark.evidence
@pytest.mark.spec("001.param.options")
def test_options_must_be_a_dict_or_none(impl):
    x = torch.randn(4, 8)
    assert_close(impl.backend().torch_compile(_fn, options=None)(x), _fn(x))
    impl.reset()
    with pytest.raises(Exception, match="options"):
        impl.backend().torch_compile(_fn, options=["-O2"])(x)


@pytest.mark.evidence
@pytest.mark.parametrize("form", ["function", "method"])
@pytest.mark.spec("001.param.fullgraph-true-raises", "001.breaks.no-lowering", "001.breaks.eager-rest-compiles", "001.breaks.fullgraph-unsupported",
                  "001.breaks.diagnostic-type", "001.breaks.diagnostic-names-op-and-reason")
def test_an_op_with_no_lowering_breaks_the_graph(impl, form):
    ops = _reported(impl, "no_lowering")
    assert ops is None or "histc" in ops, "histc has no lowering, yet is not reported"

    def f(x):
        y = x * 2
        h = torch.histc(y, bins=4) if form == "function" else y.histc(bins=4)
        return h.sum() + y.sum()

    x = torch.randn(64)
    impl.backend().reset_graph_count()
    assert_close(impl.backend().torch_compile(f)(x), f(x))
    assert impl.backend().graph_count() == 2, "the op runs eagerly and both sides of it compile"
    impl.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        impl.backend().torch_compile(f, fullgraph=True)(x)
    assert info.value.gb_type == GB_TYPE
    assert "histc" in str(info.value)
    reported_type = _reported(impl, "gb_type")
    assert reported_type in (None, GB_TYPE), f"forced_graph_breaks() reports gb_type {reported_type!r}"
    if ops is not None:
        assert ops["histc"] in str(info.value), "the diagnostic does not give the reported reason"


@pytest.mark.spec("001.breaks.no-lowering")
def test_lowering_splits_around_an_op_with_no_lowering(impl):

    def f(x):
        y = x * 2
        return torch.histc(y, bins=4) + 1

    hlos = impl.lower(f, [torch.randn(16)])
    assert len(hlos) == 2 and not any("histc" in h for h in hlos)


@pytest.mark.evidence
@pytest.mark.spec("001.breaks.sort")
def test_sort_breaks_above_the_threshold_and_topk_from_it(impl):
    for op, limit in THRESHOLDS.items():
        reported = _reported(impl, op)
        assert reported in (None, limit), f"forced_graph_breaks() reports {op} at {reported}, not {limit}"
    limit = THRESHOLDS["sort"]

    def f(x):
        return torch.argsort(x * 2)[..., :3] + 1

    x = torch.randn(2, limit + 1)
    impl.backend().reset_graph_count()
    assert_close(impl.backend().torch_compile(f)(x), f(x))
    assert impl.backend().graph_count() == 2
    impl.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match=rf"{limit + 1}"):
        impl.backend().torch_compile(f, fullgraph=True)(x)
    impl.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="topk"):
        impl.backend().torch_compile(lambda t: torch.topk(t * 2, THRESHOLDS["topk"])[0] + 1, fullgraph=True)(x)


@pytest.mark.evidence
@pytest.mark.spec("001.helper.get-dynamo-metrics", "001.metrics.one-record-per-graph", "001.metrics.model-name", "001.metrics.graph-id", "001.metrics.graph-name", "001.metrics.has-collectives", "001.metrics.graph-node-count", "001.metrics.timestamp", "001.metrics.fx-passes-us", "001.metrics.lower-us", "001.metrics.compile-us")
def test_metrics_describe_every_compiled_graph(impl):
    api = helper_api(impl, "reset_dynamo_metrics", "set_model_name", "get_dynamo_metrics")
    api.reset_dynamo_metrics()
    api.set_model_name("contract_model")
    try:
        x = torch.randn(4, 8)
        impl.backend().torch_compile(_fn)(x)
    finally:
        api.set_model_name("model_default")
    (m,) = api.get_dynamo_metrics()
    assert m.model_name == "contract_model"
    assert re.fullmatch(r"contract_model_\d+_inference_\d+", m.graph_name), f"graph_name {m.graph_name!r}"
    # the graph's cache key: the seeds' 32 lowercase hex characters
    assert isinstance(m.graph_id, str) and re.fullmatch(r"[0-9a-f]{32}", m.graph_id), f"graph_id {m.graph_id!r}"
    assert m.has_collectives is False, f"has_collectives {m.has_collectives!r}"
    assert isinstance(m.timestamp, str) and m.timestamp, f"timestamp {m.timestamp!r} is not a non-empty str"
    for field in ("graph_node_count", "torch_neuronx_fx_passes_us", "torch_neuronx_lower_us", "torch_neuronx_compile_us"):
        value = getattr(m, field)
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"{field} {value!r} is not an int >= 0"
    assert m.graph_node_count > 0, "graph_node_count 0 for a graph of several nodes"
    api.reset_dynamo_metrics()
    assert api.get_dynamo_metrics() == []


@pytest.mark.spec("001.env.boolean-spellings")
def test_a_boolean_variable_with_a_bad_value_names_itself(impl, monkeypatch):
    declared_variable(impl, "TORCH_NEURONX_COMPILE_ONLY")  # one it does not read is an honest skip
    monkeypatch.setenv("TORCH_NEURONX_COMPILE_ONLY", "perhaps")
    with pytest.raises(Exception, match=r"TORCH_NEURONX_COMPILE_ONLY.*1/true/yes"):
        impl.backend().torch_compile(_fn)(torch.randn(4, 8))


@pytest.mark.spec("001.env.disable-fallback-execution", "001.env.fallback-off-compile-failure", "001.env.fallback-on-runs-original")
def test_fallback_is_off_by_default_and_zero_turns_it_on(impl, monkeypatch):
    api = helper_api(impl, "NEFFCompilationError")
    assert declared_variable(impl, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION") is True
    monkeypatch.setenv("NEURON_CC_FLAGS", "--conformance-no-such-flag")
    x = torch.randn(4, 8)
    with pytest.raises(api.NEFFCompilationError, match="NEURON_CC_FLAGS"):
        impl.backend().torch_compile(_fn)(x)
    impl.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with warnings_given() as given:
        assert_close(impl.backend().torch_compile(_fn)(x), _fn(x))
    assert any("eager" in m for m in given), given


@pytest.mark.spec("001.env.fallback-off-execution-failure", "001.helper.neff-execution-error")
def test_an_execution_failure_reaches_the_caller_as_neff_execution_error_by_default(impl, monkeypatch):
    api = helper_api(impl, "NEFFExecutionError")
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    x = torch.randn(4, 8)
    compiled = impl.backend().torch_compile(_fn)
    assert_close(compiled(x), _fn(x))  # compiled, loaded and run: what fails next is the execution
    impl.backend().fail_next_execution()
    with pytest.raises(api.NEFFExecutionError):
        compiled(x)
    assert_close(compiled(x), _fn(x))  # one failed call; the graph was not dropped


@pytest.mark.spec("001.env.fallback-on-runs-original")
def test_with_fallback_on_an_execution_failure_runs_the_original_graph_with_a_warning(impl, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    x = torch.randn(4, 8)
    compiled = impl.backend().torch_compile(_fn)
    assert_close(compiled(x), _fn(x))
    impl.backend().fail_next_execution()
    with warnings_given() as given, observe(impl) as ev:
        assert_close(compiled(x), _fn(x))
    assert any("eager" in m for m in given), given
    fallbacks = ev.refresh().fallbacks
    assert not fallbacks or any("execution" in f["reason"] for f in fallbacks), fallbacks


# --- graph-break thresholds at the boundary itself -----------------------------------------------------

SMALL_LIMIT = 8  # a small threshold, so the graphs at the boundary stay small


@pytest.fixture
def small_limits(impl):
    contract = {key: forced_graph_break(impl, key) for key in ("gb_type", "sort", "topk")}
    impl.backend().set_graph_break_thresholds(sort=SMALL_LIMIT, topk=SMALL_LIMIT)
    try:
        yield {**contract, **{key: forced_graph_break(impl, key) for key in ("sort", "topk")}}
    finally:
        impl.backend().set_graph_break_thresholds(sort=None, topk=None)


def _argsort(x):
    return torch.argsort(x * 2)[..., :3] + 1


def _sort_method(x):
    return (x * 2).sort()[0][..., :3] + 1


def _topk(k):
    def f(x):
        return torch.topk(x * 2, k)[1] + 1

    return f


def _assert_breaks_under_fullgraph(impl, contract, fn, x, what):
    impl.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        impl.backend().torch_compile(fn, fullgraph=True)(x)
    assert info.value.gb_type == contract["gb_type"], f"{what}: gb_type {info.value.gb_type!r}"


_SORTING_OPS = re.compile(r"\b(sort|top_?k)\b", re.IGNORECASE)


def _compiled_sorts(impl, fn, x) -> tuple[int, int]:
    """(graphs, graphs that sort): a call that breaks runs eagerly, so no lowered graph sorts."""
    texts = impl.lower(fn, [x])
    return len(texts), sum(bool(_SORTING_OPS.search(t)) for t in texts)


@pytest.mark.parametrize("fn", [_argsort, _sort_method], ids=["argsort", "sort-method"])
@pytest.mark.spec("001.breaks.sort", "001.breaks.method-form", "001.breaks.fullgraph-unsupported")
def test_sort_at_the_threshold_does_not_break_and_one_more_does(impl, small_limits, fn):
    assert small_limits["sort"] == SMALL_LIMIT
    at = _compiled_sorts(impl, fn, torch.randn(2, SMALL_LIMIT))
    above = _compiled_sorts(impl, fn, torch.randn(2, SMALL_LIMIT + 1))
    assert at == (1, 1), f"a sorted dimension of exactly the threshold ({SMALL_LIMIT}) broke the graph: {at}"
    assert above[1] == 0, f"a sorted dimension of {SMALL_LIMIT + 1} (threshold + 1) was compiled: {above}"
    _assert_breaks_under_fullgraph(impl, small_limits, fn, torch.randn(2, SMALL_LIMIT + 1), "sort above the threshold")


@pytest.mark.spec("001.breaks.topk")
def test_topk_below_the_threshold_does_not_break_and_at_it_does(impl, small_limits):
    """The seeds' rule for ``topk``: it breaks when k is the threshold or larger."""
    assert small_limits["topk"] == SMALL_LIMIT
    x = torch.randn(2, 2 * SMALL_LIMIT)
    below = _compiled_sorts(impl, _topk(SMALL_LIMIT - 1), x)
    at = _compiled_sorts(impl, _topk(SMALL_LIMIT), x)
    assert below == (1, 1), f"k={SMALL_LIMIT - 1} (below the threshold) broke the graph: {below}"
    assert at[1] == 0, f"k={SMALL_LIMIT} (the threshold) was compiled: {at}"
    _assert_breaks_under_fullgraph(impl, small_limits, _topk(SMALL_LIMIT), x, "topk at the threshold")


# --- model names cannot leave the artifact directories ---------------------------------------------------

HOSTILE_NAMES = ["../escape/probe", "a/../../../up"]


@pytest.mark.spec("001.param.name")
def test_a_model_name_never_leaves_the_artifact_directories(impl, monkeypatch, tmp_path):
    api = helper_api(impl, "get_model_name", "set_model_name", "reset_dynamo_metrics", "get_dynamo_metrics")
    base = tmp_path / "a" / "b"
    allowed = (base / "debug", base / "cache")
    for var, value in impl.cache().env(str(allowed[1])).items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(allowed[0]))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    before = api.get_model_name()
    names = []
    try:
        for i, hostile in enumerate(HOSTILE_NAMES):
            api.set_model_name(hostile)
            api.reset_dynamo_metrics()
            impl.reset()
            x = torch.randn(3 + i, 8)
            assert_close(impl.backend().torch_compile(_fn)(x), _fn(x))
            names += [m.graph_name for m in api.get_dynamo_metrics()]
    finally:
        api.set_model_name(before)
    assert names and all("/" not in n and ".." not in n for n in names), f"graph names: {names}"
    outside = [
        str(p) for p in tmp_path.rglob("*")
        if p.is_file() and not any(p.is_relative_to(d) for d in allowed)
    ]
    assert outside == [], f"files written outside the debug and cache directories: {outside}"


# --- the list of ops with no lowering, the target, the default backend, the default folders ---------

#: ops every StableHLO toolchain lowers: none of them is on a list built from the installed tools
_LOWERED = {"exp": torch.exp, "sin": torch.sin, "tanh": torch.tanh, "abs": torch.abs}


@pytest.mark.slow  # several ops traced and a graph compiled (about 10 s of a core)
@pytest.mark.evidence
@pytest.mark.spec("001.breaks.list-from-installed", "001.breaks.no-lowering")
def test_the_reported_no_lowering_list_is_the_one_compiles_break_on(impl):
    """The list the backend reports is the one it enforces, built from what the installed tools
    lower: each op of it that takes one float tensor breaks the graph under ``fullgraph=True``, its
    reason in the diagnostic, and ops the tools lower are not on it and compile in one graph."""
    ops = _reported(impl, "no_lowering")
    if ops is None:
        pytest.skip("the implementation reports no list of ops with no lowering")
    listed = sorted(set(_LOWERED) & set(ops))
    assert not listed, f"ops every toolchain lowers are on the no-lowering list: {listed}"
    x = torch.linspace(0.1, 0.9, 8)
    checked = []
    for name in sorted(ops):
        op = getattr(torch, name, None)
        try:
            op(x)  # an op of the list that takes one float tensor, eagerly
        except Exception:  # noqa: BLE001 - another signature: not this test's sample
            continue
        impl.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported) as info:
            impl.backend().torch_compile(lambda t, _op=op: _op(t * 2) + 1, fullgraph=True)(x)
        assert name in str(info.value) and ops[name] in str(info.value), f"{name}: {info.value}"
        checked.append(name)
        if len(checked) == 4:
            break
    assert checked, f"no op of the list takes one float tensor: {sorted(ops)[:10]}..."
    impl.reset()
    impl.backend().reset_graph_count()

    def lowered(t):
        return sum(f(t) for f in _LOWERED.values())

    assert_close(impl.backend().torch_compile(lowered, fullgraph=True)(x), lowered(x))
    assert impl.backend().graph_count() == 1


@pytest.mark.spec("001.env.compile-options-target", "001.env.target-override")
def test_a_target_in_the_options_compiles_as_the_override_variable_does(impl, monkeypatch):
    """The reference has no ``CompileOptions``: ``options={"target": ...}`` stands in for its
    ``target=`` (docs/spec_coverage.md, "Deviations"). A graph compiled for ``trn3`` that way gets
    the key ``NEURON_PLATFORM_TARGET_OVERRIDE=trn3`` gives it, and another than the default's."""
    api = helper_api(impl, "reset_dynamo_metrics", "get_dynamo_metrics")
    x = torch.randn(4, 8)
    keys = {}
    for label, options, variable in (("default", None, None), ("options", {"target": "trn3"}, None),
                                     ("variable", None, "trn3")):
        if variable:
            monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", variable)
        impl.reset()
        api.reset_dynamo_metrics()
        assert_close(impl.backend().torch_compile(_fn, options=options)(x), _fn(x))
        keys[label] = [m.graph_id for m in api.get_dynamo_metrics()]
    assert keys["options"] == keys["variable"], f"options target trn3 keyed {keys['options']}, the variable {keys['variable']}"
    assert keys["options"] != keys["default"], "the target in the options did not reach the compile"


@pytest.mark.spec("001.param.backend-auto-selected", "001.api.set-default-backend")
def test_the_backend_is_named_or_made_the_default_by_the_caller(impl):
    """There is no Neuron device to auto-select on: loading the implementation leaves torch's default
    backend as it was, and ``torch.compiler.set_default_backend`` makes ``torch.compile()`` without a
    backend use it (docs/spec_coverage.md, "Deviations")."""
    name = impl.backend().names()["compile"]
    assert torch.compiler.get_default_backend() in ("inductor", torch._dynamo.lookup_backend("inductor")), (
        f"loading {impl.name} changed torch's default backend to {torch.compiler.get_default_backend()!r}")
    old = torch.compiler.get_default_backend()
    try:
        torch.compiler.set_default_backend(name)
        impl.reset()
        impl.backend().reset_graph_count()
        x = torch.randn(4, 8)
        assert_close(torch.compile(_fn)(x), _fn(x))
        assert impl.backend().graph_count() == 1, "torch.compile() without a backend did not use the default set"
    finally:
        torch.compiler.set_default_backend(old)


@pytest.mark.spec("001.env.debug-dir-default", "001.cache.default-dirs")
def test_unset_folders_default_to_the_seeds_names_under_the_temporary_directory(impl, monkeypatch, tmp_path):
    """With the folder variables unset, a compile writes its NEFF and HLO caches and (with
    ``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1``) its debug artifacts into folders of the
    seeds' names, ``neff_cache``, ``hlo_cache`` and ``neuron_backend_...``, in the temporary
    directory: directly (the seeds' ``/tmp/neff_cache``), or in a per-user folder there (the
    reference's ``<tmp>/neuron-<uid>/``, docs/caching.md, "Trust")."""
    import glob
    import os
    import tempfile

    for var in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_DEBUG_DIR"):
        declared_variable(impl, var)  # an implementation that reads none of them has no folders to look for
    for var in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR",
                "TORCH_NEURONX_DEBUG_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    impl.reset()
    x = torch.randn(4, 8)
    assert_close(impl.backend().torch_compile(_fn)(x), _fn(x))
    homes = [tmp_path, tmp_path / f"neuron-{os.geteuid()}"]
    neff = [h / "neff_cache" for h in homes if (h / "neff_cache").is_dir() and any((h / "neff_cache").iterdir())]
    hlo = [h / "hlo_cache" for h in homes if (h / "hlo_cache").is_dir() and any((h / "hlo_cache").iterdir())]
    debug = [p for h in homes for p in glob.glob(str(h / "neuron_backend_*"))]
    found = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_dir())[:12]
    assert neff, f"no NEFF cache entry in <tmp>/neff_cache or <tmp>/neuron-<uid>/neff_cache; folders: {found}"
    assert hlo, f"no HLO cache entry in <tmp>/hlo_cache or <tmp>/neuron-<uid>/hlo_cache; folders: {found}"
    assert debug, f"no debug folder <tmp>/neuron_backend_* or <tmp>/neuron-<uid>/neuron_backend_*; folders: {found}"


# --- the helper API's shapes, the variables' defaults ----------------------------------------------

#: the seed's boolean variables and their defaults (seed 001, "Environment variables", "Caching")
BOOLEAN_DEFAULTS = {
    "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": True,
    "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS": False,
    "TORCH_NEURONX_COMPILE_ONLY": False,
    "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY": False,
    "TORCH_NEURONX_RETAIN_DEVICE_MODE": False,
    "TORCH_NEURONX_ENABLE_NKI_SDPA": True,
    "TORCH_NEURONX_NEFF_DISABLE_CACHE": False,
    "TORCH_CACHING_PRECOMPILE": False,
}
BOOLEAN_DEFAULTS_SPEC = {
    "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "001.env.disable-fallback-execution",
    "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS": "001.env.preserve-artifacts-default",
    "TORCH_NEURONX_COMPILE_ONLY": "001.env.compile-only-default",
    "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY": "001.env.disable-cpu-autocopy-default",
    "TORCH_NEURONX_RETAIN_DEVICE_MODE": "001.env.retain-device-mode-default",
    "TORCH_NEURONX_ENABLE_NKI_SDPA": "001.env.nki-sdpa",
    "TORCH_NEURONX_NEFF_DISABLE_CACHE": "001.cache.disable-cache-default",
    "TORCH_CACHING_PRECOMPILE": "001.cache.caching-precompile-default",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.spec(BOOLEAN_DEFAULTS_SPEC[n])) for n in BOOLEAN_DEFAULTS])
def test_each_boolean_variable_defaults_as_the_seed_says(impl, name):
    """Unset, each boolean variable has the seed's default (the implementation's declaration of
    what it reads; the probes in test_backend_support.py show what each value does)."""
    assert declared_variable(impl, name) is BOOLEAN_DEFAULTS[name], (
        f"{name} defaults to {declared_variable(impl, name)!r}; the seed says {BOOLEAN_DEFAULTS[name]}")


@pytest.mark.spec("001.helper.set-model-name-later", "001.helper.set-model-name")
def test_a_model_name_names_only_the_graphs_compiled_after_it(impl):
    """``set_model_name`` names the graphs compiled after the call: a graph compiled before keeps
    the name it was compiled under, in its metrics record and its graph name."""
    api = helper_api(impl, "set_model_name", "get_model_name", "reset_dynamo_metrics", "get_dynamo_metrics")
    before = api.get_model_name()
    api.reset_dynamo_metrics()
    compiled = impl.backend().torch_compile(_fn)
    try:
        compiled(torch.randn(4, 8))
        assert api.set_model_name("named_later") is None, "set_model_name returns None"
        compiled(torch.randn(5, 8))  # a new shape: a graph compiled after the call
    finally:
        api.set_model_name(before)
    first, second = api.get_dynamo_metrics()
    assert (first.model_name, second.model_name) == (before, "named_later"), (first.model_name, second.model_name)
    assert first.graph_name.startswith(f"{before}_") and second.graph_name.startswith("named_later_"), (
        first.graph_name, second.graph_name)


@pytest.mark.spec("001.helper.get-rank-returns-int", "001.helper.get-model-name-returns-str", "001.helper.reset-returns-none",
                  "001.helper.errors-subclass-exception")
def test_the_helper_api_returns_the_seeds_types(impl):
    """``get_rank() -> int``, ``get_model_name() -> str``, ``reset_dynamo_metrics() -> None``, and
    both errors subclasses of ``Exception`` (so ``except Exception`` catches them), distinct."""
    api = helper_api(impl, "get_rank", "get_model_name", "reset_dynamo_metrics", "NEFFCompilationError", "NEFFExecutionError")
    rank = api.get_rank()
    assert isinstance(rank, int) and not isinstance(rank, bool), f"get_rank() returned {rank!r}"
    assert isinstance(api.get_model_name(), str), f"get_model_name() returned {api.get_model_name()!r}"
    assert api.reset_dynamo_metrics() is None
    for cls in (api.NEFFCompilationError, api.NEFFExecutionError):
        assert isinstance(cls, type) and issubclass(cls, Exception), f"{cls!r} is not a subclass of Exception"
    assert api.NEFFCompilationError is not api.NEFFExecutionError


@pytest.mark.spec("001.env.compile-only-runtime-init", "001.env.compile-only")
def test_in_compile_only_mode_a_failing_runtime_does_not_fail_the_call(impl, monkeypatch):
    """``TORCH_NEURONX_COMPILE_ONLY=1`` builds the artifact without running it: the runtime is never
    needed, so nothing about it can fail the call, which returns what the eager graph gives."""
    declared_variable(impl, "TORCH_NEURONX_COMPILE_ONLY")
    monkeypatch.setenv("TORCH_NEURONX_COMPILE_ONLY", "1")
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    impl.backend().reset_graph_count()
    compiled = impl.backend().torch_compile(_fn)
    x = torch.randn(3, 8)
    with observe(impl) as ev:
        assert_close(compiled(x), _fn(x))
    assert impl.backend().graph_count() == 1, "compile-only mode compiled nothing"
    assert not ev.refresh().ran, "compile-only mode ran the compiled graph"


#: the seed's other variables with a stated default (an empty list of tables may be declared as
#: "" or as an empty sequence)
VALUE_DEFAULTS = {
    "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT": (1200,),
    "NEURON_CC_FLAGS": ("",),
    "TORCH_NEURONX_ENABLED_METRIC_TABLES": ("", (), []),
}
VALUE_DEFAULTS_SPEC = {
    "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT": "001.cache.lock-timeout",
    "NEURON_CC_FLAGS": "001.env.cc-flags",
    "TORCH_NEURONX_ENABLED_METRIC_TABLES": "001.metrics.enabled-tables-default",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.spec(VALUE_DEFAULTS_SPEC[n])) for n in VALUE_DEFAULTS])
def test_each_valued_variable_defaults_as_the_seed_says(impl, name):
    """Unset, the lock timeout is 1200 seconds, no extra compiler flags are added and no metric
    table is written (the tests that exercise each set their own value; this is the default's)."""
    value = declared_variable(impl, name)
    assert any(value == want and type(value) is type(want) for want in VALUE_DEFAULTS[name]), (
        f"{name} defaults to {value!r}; the seed says {VALUE_DEFAULTS[name][0]!r}")
