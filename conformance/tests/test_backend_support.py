"""Probes that make the support matrix (``reports/<impl>/<lane>/support.md``).

Each test tries one row of the backend reference's tables (a ``torch.compile`` parameter, a
``torch.compiler`` API, a forced graph break, an environment variable, a helper symbol) against the
implementation, through the adapter only, and records the status it observed with a note saying
what it did. The status is asserted against the one the implementation declares for the row
(``expected_support``): a disagreement fails naming the row. A probe also fails when it sees
something wrong itself (a compiled result that differs from eager). Rows an adapter cannot run are
skipped with its reason and appear as Unsupported (a failure if the row is declared available).

The contract tests (``test_backend_contract.py``) assert the behaviour behind the rows in detail.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re

import pytest
import torch
from torch.compiler._cache import CacheArtifactManager  # private: the probe's fresh artifact record

from conformance.harness.evidence import observe
from conformance.harness.implementation import (
    NotSupported,
    debug_artifacts,
    declared_unsupported_api,
    declared_variable,
    forced_graph_break,
    helper_api,
)
from conformance.reporting.support import PARTIAL, SUPPORTED, UNSUPPORTED, support_marker
from conformance.harness.tolerances import assert_close
from conformance.harness.warnings_given import warnings_given

pytestmark = pytest.mark.contract("backend_support")


def _fn(x):
    return torch.relu(x) * 2 + 1


def _x(n: int = 4) -> torch.Tensor:
    return torch.randn(n, 8)


def _runs(compiled, fn=_fn, x=None) -> None:
    x = _x() if x is None else x
    assert_close(compiled(x), fn(x))


def _captured():
    """Warnings and log records alike (both are how backends report ignored settings)."""
    return warnings_given()


_GRAPH_NAME = re.compile(r"\b(\w+?)_\d+_(inference|training)_\d+\b")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _graph_name_form(text: str) -> str:
    """``text`` with the process-wide counters of graph names (``<model>_<n>_inference_<k>``) and
    object addresses (``<function f at 0x7f...>``) masked: they depend on what the worker did
    before, and would make the checked-in matrices drift."""
    return _ADDRESS.sub(" at 0x…", _GRAPH_NAME.sub(r"\1_<n>_\2_<k>", text))


def _first_line(exc: BaseException) -> str:
    # Dynamo wraps a backend's own error; its first line only names the backend.
    inner = getattr(exc, "inner_exception", None)
    if isinstance(exc, torch._dynamo.exc.BackendCompilerFailed) and inner is not None:
        return f"{type(exc).__name__} from {_first_line(inner)}"
    return _graph_name_form(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}")


# --- torch.compile parameters -----------------------------------------------------------------


@support_marker("parameters", "model")
@pytest.mark.spec("001.param.model")
def test_model(impl, support):
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = _x()
    with torch.no_grad():
        assert_close(impl.backend().torch_compile(module)(x), module(x))
    _runs(impl.backend().torch_compile(_fn))
    support.record(SUPPORTED, "An nn.Module and a plain function both compile and match eager.")


@support_marker("parameters", "fullgraph")
@pytest.mark.spec("001.param.fullgraph", "001.param.fullgraph-true-raises")
def test_fullgraph(impl, support):
    def with_break(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    _runs(impl.backend().torch_compile(_fn, fullgraph=True))
    _runs(impl.backend().torch_compile(with_break, fullgraph=False), with_break)
    impl.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        impl.backend().torch_compile(with_break, fullgraph=True)(_x())
    support.record(SUPPORTED, "True and False. With True a graph break raises torch._dynamo.exc.Unsupported; "
                   "with False the function runs around the break.")


@support_marker("parameters", "dynamic")
@pytest.mark.spec("001.param.dynamic")
def test_dynamic(impl, support):
    def shapes_run(**kw):
        impl.reset()
        impl.backend().reset_graph_count()
        compiled = impl.backend().torch_compile(_fn, **kw)
        for n in (3, 5, 7):
            _runs(compiled, x=_x(n))
        return impl.backend().graph_count()

    try:
        impl.reset()
        _runs(impl.backend().torch_compile(_fn, dynamic=True))
        rejected = None
    except Exception as exc:  # noqa: BLE001 - the probe reports whatever the implementation raised
        rejected = exc
    graphs = shapes_run()
    if rejected is not None:
        support.record(UNSUPPORTED, f"dynamic=True is rejected at compile time ({_first_line(rejected)}). "
                       f"Shapes that vary between calls run: 3 shapes compiled {graphs} graph(s).")
    else:
        support.record(SUPPORTED, f"dynamic=True compiles and runs; 3 shapes with dynamic unset compiled {graphs} graph(s).")


@support_marker("parameters", "backend")
@pytest.mark.spec("001.param.backend")
def test_backend(impl, support):
    name = impl.backend().names()["compile"]
    listed = name in torch._dynamo.list_backends(exclude_tags=())
    _runs(impl.backend().torch_compile(_fn))
    support.record(SUPPORTED if listed else PARTIAL,
                   f"'{name}'" + (" is registered with Dynamo (list_backends)." if listed else " works but is not listed by list_backends."))


@support_marker("parameters", "mode")
@pytest.mark.spec("001.param.mode")
def test_mode(impl, support):
    warned = []
    for mode in ("reduce-overhead", "max-autotune-no-cudagraphs"):
        impl.reset()
        with _captured() as messages:
            _runs(impl.backend().torch_compile(_fn, mode=mode))
        if any(mode in m or "mode" in m for m in messages):
            warned.append(mode)
    if warned:
        support.record(UNSUPPORTED, f"Only the default applies: {', '.join(warned)} log a warning and compile as default.")
    else:
        support.record(SUPPORTED, "reduce-overhead and max-autotune-no-cudagraphs compile and run without a warning.")


@support_marker("parameters", "options")
@pytest.mark.spec("001.param.options")
def test_options(impl, support):
    _runs(impl.backend().torch_compile(_fn, options=None))
    impl.reset()
    outcome = ""
    with _captured() as messages:
        try:
            _runs(impl.backend().torch_compile(_fn, options={"conformance_unknown_key": 1}))
        except Exception as exc:  # noqa: BLE001
            outcome = f"rejected ({_first_line(exc)})"
    if not outcome:
        outcome = "ignored with a warning" if any("conformance_unknown_key" in m for m in messages) else "silently ignored"
    impl.reset()
    wrong_type = ""
    try:
        impl.backend().torch_compile(_fn, options=["not", "a", "dict"])(_x())
        wrong_type = "a list is accepted"
    except Exception as exc:  # noqa: BLE001
        wrong_type = f"a list is rejected ({type(exc).__name__})"
    status = PARTIAL if outcome.startswith("ignored") or outcome == "silently ignored" else SUPPORTED
    support.record(status, f"Accepts a dict or None; an unknown key is {outcome}; {wrong_type}.")


@support_marker("parameters", "name")
@pytest.mark.spec("001.param.name")
def test_name(impl, support):
    _runs(impl.backend().torch_compile(_fn, name="conformance_probe_region"))
    try:
        api = _helper(impl, "get_dynamo_metrics")
    except NotSupported:  # propagation cannot be observed through this adapter
        support.record(PARTIAL, "Accepted without an error; whether it reaches artifacts is not observable through this adapter.")
        return
    names = [m.graph_name + m.model_name for m in api.get_dynamo_metrics()]
    if any("conformance_probe_region" in n for n in names):
        support.record(SUPPORTED, "Accepted and used in graph names.")
    else:
        support.record(UNSUPPORTED, "Accepted without an error, but not propagated to graph or artifact names.")


@support_marker("parameters", "disable")
@pytest.mark.spec("001.param.disable")
def test_disable(impl, support):
    impl.backend().reset_graph_count()
    _runs(impl.backend().torch_compile(_fn, disable=True))
    assert impl.backend().graph_count() == 0, "disable=True still compiled a graph"
    support.record(SUPPORTED, "True disables compilation: the function runs eagerly and nothing is compiled.",
                   compiles=False)


@support_marker("parameters", "recompile_limit")
@pytest.mark.spec("001.param.recompile-limit")
def test_recompile_limit(impl, support):
    impl.backend().reset_graph_count()
    compiled = impl.backend().torch_compile(_fn, dynamic=False, recompile_limit=1)
    for n in (3, 5, 7):
        _runs(compiled, x=_x(n))
    graphs = impl.backend().graph_count()
    impl.reset()
    strict = impl.backend().torch_compile(_fn, dynamic=False, recompile_limit=1, fullgraph=True)
    strict(_x(3))
    raised = None
    try:
        strict(_x(5))
    except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
        raised = exc
    if graphs == 1 and raised is not None:
        support.record(SUPPORTED, "With fullgraph=False, shapes past the limit run eagerly (1 graph for 3 shapes); "
                       "with fullgraph=True the next recompile raises FailOnRecompileLimitHit.")
    else:
        support.record(PARTIAL, f"limit 1: {graphs} graph(s) for 3 shapes; fullgraph=True raised: {raised is not None}.")


@support_marker("parameters", "isolate_recompiles")
@pytest.mark.spec("001.param.isolate-recompiles")
def test_isolate_recompiles(impl, support):
    impl.backend().reset_graph_count()
    a = impl.backend().torch_compile(_fn, dynamic=False, recompile_limit=1, isolate_recompiles=True)
    b = impl.backend().torch_compile(_fn, dynamic=False, recompile_limit=1, isolate_recompiles=True)
    _runs(a, x=_x(3))
    _runs(b, x=_x(5))
    graphs = impl.backend().graph_count()
    support.record(SUPPORTED if graphs == 2 else PARTIAL,
                   f"Compiles and runs; two isolated calls with limit 1 compiled {graphs} graph(s) for two shapes. "
                   "Independent tracking is not stress-tested.")


@support_marker("parameters", "shapes_spec")
@pytest.mark.spec("001.param.shapes-spec")
def test_shapes_spec(impl, support):
    from torch.fx.experimental.dynamic_spec import ShapesSpec, ShapeVar, TensorSpec

    _runs(impl.backend().torch_compile(_fn, shapes_spec=ShapesSpec(params={"x": TensorSpec([None, None])})))
    impl.reset()
    try:
        compiled = impl.backend().torch_compile(_fn, shapes_spec=ShapesSpec(params={"x": TensorSpec([ShapeVar("n"), None])}))
        _runs(compiled, x=_x(6))
        support.record(SUPPORTED, "A static and a dynamic shape spec both compile and run.")
    except Exception as exc:  # noqa: BLE001
        support.record(UNSUPPORTED, f"A static spec runs; a dynamic one fails ({_first_line(exc)}).")


# --- torch.compiler APIs --------------------------------------------------------------------------


def _api_probe(impl, support, api: str, body) -> None:
    declared = declared_unsupported_api(impl, api)
    if declared is not None:
        support.record(UNSUPPORTED, declared)
        return
    try:
        note = body()
    except Exception as exc:  # noqa: BLE001 - an API that fails with this backend is unsupported
        support.record(UNSUPPORTED, f"Fails with this backend: {_first_line(exc)}")
        return
    support.record(SUPPORTED, note, compiles=api not in _COMPILES_NOTHING, runs_a_copy=api in _RUNS_A_COPY)


# APIs whose probe by design hands the backend no graph (so no compile evidence is asked of it).
_COMPILES_NOTHING = frozenset({"list_backends"})
# APIs whose probe runs a saved and reloaded copy of the compiled function, not the callable the
# backend returned.
_RUNS_A_COPY = frozenset({"load_compiled_function"})


def _compile_api(impl):
    compiled = torch.compiler.compile(_fn, backend=impl.backend().names()["compile"])
    _runs(compiled)
    return "torch.compiler.compile with this backend matches eager."


def _reset_api(impl):
    impl.backend().reset_graph_count()
    compiled = impl.backend().torch_compile(_fn)
    compiled(_x())
    torch.compiler.reset()
    compiled(_x())
    assert impl.backend().graph_count() == 2
    return "After reset the same call compiles again."


def _allow_in_graph_api(impl):
    def helper(x):
        return x * 3

    torch.compiler.allow_in_graph(helper)
    _runs(impl.backend().torch_compile(lambda x: helper(x) + 1), lambda x: helper(x) + 1)
    return "A function allowed in the graph compiles and matches eager."


def _substitute_api(impl):
    import operator

    def polyfill(a, b):
        return sum(1 for x in a if x is b or x == b)

    try:
        torch.compiler.substitute_in_graph(operator.countOf, skip_signature_check=True)(polyfill)
    except ValueError:
        pass  # already substituted in this process (Dynamo ships a polyfill for it)

    def f(x):
        return x * operator.countOf([1, 2, 2], 2)

    _runs(impl.backend().torch_compile(f), f)
    return "A builtin with a substituted polyfill compiles and matches eager."


def _assume_constant_api(impl):
    @torch.compiler.assume_constant_result
    def scale():
        return 3

    def f(x):
        return x * scale()

    _runs(impl.backend().torch_compile(f), f)
    return "A function assumed constant is folded and the result matches eager."


def _list_backends_api(impl):
    name = impl.backend().names()["compile"]
    assert name in torch.compiler.list_backends(exclude_tags=())
    return f"'{name}' is listed."


def _disable_api(impl):
    @torch.compiler.disable
    def eager_part(x):
        return x.sum()

    def f(x):
        return torch.relu(x) + eager_part(x)

    _runs(impl.backend().torch_compile(f), f)
    return "A disabled function runs eagerly inside a compiled one; the result matches."


def _default_backend_api(impl):
    name = impl.backend().names()["compile"]
    old = torch.compiler.get_default_backend()
    try:
        torch.compiler.set_default_backend(name)
        assert torch.compiler.get_default_backend() in (name, torch._dynamo.lookup_backend(name))
        impl.backend().reset_graph_count()
        _runs(torch.compile(_fn))
        assert impl.backend().graph_count() == 1
    finally:
        torch.compiler.set_default_backend(old)
    return "set_default_backend makes torch.compile() without a backend use this one; get_default_backend reports it."


def _set_stance_api(impl):
    compiled = impl.backend().torch_compile(_fn)
    impl.backend().reset_graph_count()
    with torch.compiler.set_stance("force_eager"):
        _runs(compiled)
    assert impl.backend().graph_count() == 0
    _runs(compiled)
    assert impl.backend().graph_count() == 1
    return "force_eager skips compiling; the default stance compiles."


def _guard_collectives_api(impl):
    old = torch.compiler.set_enable_guard_collectives(True)
    try:
        _runs(impl.backend().torch_compile(_fn))
    finally:
        torch.compiler.set_enable_guard_collectives(old)
    return "Enabled, a single process compiles and runs."


def _cudagraph_step_api(impl):
    compiled = impl.backend().torch_compile(_fn)
    for _ in range(2):
        torch.compiler.cudagraph_mark_step_begin()
        _runs(compiled)
    return "Callable between steps; the results match eager."


def _is_compiling_api(impl, which: str):
    probe = getattr(torch.compiler, which)

    def f(x):
        return x + (1 if probe() else 0)

    x = _x()
    out = impl.backend().torch_compile(f)(x)
    expect_in_graph = which != "is_exporting"
    assert_close(out, x + (1 if expect_in_graph else 0))
    return f"Returns {expect_in_graph} inside the compiled region."


def _guard_filter_api(impl, which: str):
    def f(x):
        return torch.relu(x) * 2 + 1

    _runs(impl.backend().torch_compile(f, options={"guard_filter_fn": getattr(torch.compiler, which)}), f)
    return "Accepted as guard_filter_fn; compiles and runs."


def _nested_region_api(impl):
    @torch.compiler.nested_compile_region
    def block(x):
        return torch.relu(x) * 2

    def f(x):
        return block(x) + block(x + 1)

    _runs(impl.backend().torch_compile(f, fullgraph=True), f)
    return "A region called twice compiles and matches eager."


def _cache_artifacts_api(impl):
    # save_cache_artifacts returns everything the process recorded so far; a fresh record keeps
    # the observation to this backend's own compile, whatever ran earlier in the same worker.
    with CacheArtifactManager.with_fresh_cache():
        _runs(impl.backend().torch_compile(_fn))
        saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return "Callable; nothing was saved for this backend (no artifacts in PyTorch's cache)."
    data, _info = saved
    assert data, "save_cache_artifacts returned an empty blob"
    torch.compiler.load_cache_artifacts(data)
    # No size in the note: it changes from run to run and would make the checked-in matrices drift.
    return "Saves a non-empty blob of artifacts and loads it back."


def _load_compiled_api(impl, tmp_path):
    compiled = impl.backend().torch_compile(_fn, fullgraph=True)
    x = _x()
    aot = compiled.aot_compile(((x,), {}))
    path = tmp_path / "fn.bin"
    aot.save_compiled_function(str(path))
    with open(path, "rb") as f:
        loaded = torch.compiler.load_compiled_function(f)
    assert_close(loaded(x), _fn(x))
    return "An aot-compiled function saved to a file loads back and matches eager."


def _wrap_numpy_api(impl):
    import numpy as np

    @torch.compiler.wrap_numpy
    def f(a):
        return np.maximum(a, 0) * 2 + 1

    x = _x()
    assert_close(impl.backend().torch_compile(f)(x), _fn(x))
    return "A NumPy function wrapped for tensors compiles and matches eager."


_APIS = {
    "compile": _compile_api,
    "reset": _reset_api,
    "allow_in_graph": _allow_in_graph_api,
    "substitute_in_graph": _substitute_api,
    "assume_constant_result": _assume_constant_api,
    "list_backends": _list_backends_api,
    "disable": _disable_api,
    "set_default_backend": _default_backend_api,
    "get_default_backend": _default_backend_api,
    "set_stance": _set_stance_api,
    "set_enable_guard_collectives": _guard_collectives_api,
    "cudagraph_mark_step_begin": _cudagraph_step_api,
    "is_compiling": lambda impl: _is_compiling_api(impl, "is_compiling"),
    "is_dynamo_compiling": lambda impl: _is_compiling_api(impl, "is_dynamo_compiling"),
    "is_exporting": lambda impl: _is_compiling_api(impl, "is_exporting"),
    "keep_portable_guards_unsafe": lambda impl: _guard_filter_api(impl, "keep_portable_guards_unsafe"),
    "skip_guard_on_inbuilt_nn_modules_unsafe": lambda impl: _guard_filter_api(impl, "skip_guard_on_inbuilt_nn_modules_unsafe"),
    "skip_guard_on_all_nn_modules_unsafe": lambda impl: _guard_filter_api(impl, "skip_guard_on_all_nn_modules_unsafe"),
    "keep_tensor_guards_unsafe": lambda impl: _guard_filter_api(impl, "keep_tensor_guards_unsafe"),
    "skip_guard_on_globals_unsafe": lambda impl: _guard_filter_api(impl, "skip_guard_on_globals_unsafe"),
    "skip_all_guards_unsafe": lambda impl: _guard_filter_api(impl, "skip_all_guards_unsafe"),
    "nested_compile_region": _nested_region_api,
    "load_cache_artifacts": _cache_artifacts_api,
    "load_compiled_function": None,  # needs tmp_path; see below
    "save_cache_artifacts": _cache_artifacts_api,
    "wrap_numpy": _wrap_numpy_api,
}


#: The seed statement each API's probe checks (its support row says the status the seed gives it).
API_SPEC = {
    "compile": "001.api.compile",
    "reset": "001.api.reset",
    "allow_in_graph": "001.api.allow-in-graph",
    "substitute_in_graph": "001.api.substitute-in-graph",
    "assume_constant_result": "001.api.assume-constant-result",
    "list_backends": "001.api.list-backends",
    "disable": "001.api.disable",
    "set_default_backend": "001.api.set-default-backend",
    "get_default_backend": "001.api.get-default-backend",
    "set_stance": "001.api.set-stance",
    "set_enable_guard_collectives": "001.api.set-enable-guard-collectives",
    "cudagraph_mark_step_begin": "001.api.cudagraph-mark-step-begin",
    "is_compiling": "001.api.is-compiling",
    "is_dynamo_compiling": "001.api.is-dynamo-compiling",
    "is_exporting": "001.api.is-exporting",
    "keep_portable_guards_unsafe": "001.api.keep-portable-guards-unsafe",
    "skip_guard_on_inbuilt_nn_modules_unsafe": "001.api.skip-guard-on-inbuilt-nn-modules-unsafe",
    "skip_guard_on_all_nn_modules_unsafe": "001.api.skip-guard-on-all-nn-modules-unsafe",
    "keep_tensor_guards_unsafe": "001.api.keep-tensor-guards-unsafe",
    "skip_guard_on_globals_unsafe": "001.api.skip-guard-on-globals-unsafe",
    "skip_all_guards_unsafe": "001.api.skip-all-guards-unsafe",
    "nested_compile_region": "001.api.nested-compile-region",
    "load_cache_artifacts": "001.api.load-cache-artifacts",
    "save_cache_artifacts": "001.api.save-cache-artifacts",
    "wrap_numpy": "001.api.wrap-numpy",
    "load_compiled_function": "001.api.load-compiled-function",
}

@pytest.mark.parametrize(
    "api", [pytest.param(name, marks=[support_marker("apis", name), pytest.mark.spec(API_SPEC[name])]) for name in _APIS]
)
def test_compiler_api(impl, support, api, tmp_path):
    body = _APIS[api]
    if body is None:
        _api_probe(impl, support, api, lambda: _load_compiled_api(impl, tmp_path))
    else:
        _api_probe(impl, support, api, lambda: body(impl))


# --- forced graph breaks ------------------------------------------------------------------------


def _break_probe(impl, fn, x, *, op: str) -> tuple[int, str]:
    """Graphs compiled with fullgraph=False (result checked against eager), and the
    ``Unsupported`` message under fullgraph=True ('' when it compiled)."""
    contract = {"gb_type": forced_graph_break(impl, "gb_type")}
    impl.reset()
    impl.backend().reset_graph_count()
    assert_close(impl.backend().torch_compile(fn)(x), fn(x))
    graphs = impl.backend().graph_count()
    impl.reset()
    try:
        impl.backend().torch_compile(fn, fullgraph=True)(x)
        return graphs, ""
    except torch._dynamo.exc.Unsupported as exc:
        assert exc.gb_type == contract["gb_type"], f"gb_type {exc.gb_type!r}"
        assert op in str(exc), f"the diagnostic does not name {op}: {exc}"
        return graphs, str(exc)


def _no_break_probe(impl, fn, x) -> tuple[int, str]:
    """Graphs compiled with fullgraph=True (result checked against eager) and '' when it compiled
    without a break, else what went wrong."""
    impl.reset()
    impl.backend().reset_graph_count()
    try:
        got = impl.backend().torch_compile(fn, fullgraph=True)(x)
    except torch._dynamo.exc.Unsupported:
        return impl.backend().graph_count(), "raised Unsupported"
    except Exception as exc:  # noqa: BLE001 - no break was forced; the compiler then had its say
        return impl.backend().graph_count(), f"was not broken, and the compile failed ({type(exc).__name__})"
    assert_close(got, fn(x))
    return impl.backend().graph_count(), ""


@support_marker("graph_breaks", "torch.sort, torch.argsort")
@pytest.mark.spec("001.breaks.sort", "001.breaks.method-form", "001.breaks.fullgraph-unsupported", "001.breaks.diagnostic-type")
def test_sort_breaks(impl, support):
    limit = forced_graph_break(impl, "sort")

    def f(x):
        y = x * 2
        return torch.argsort(y)[..., :3] + 1

    def m(x):
        y = x * 2
        return y.argsort()[..., :3] + 1

    def s(x):
        v, i = torch.sort(x * 2, descending=True)
        return v[..., :3], i[..., :3]

    # At the threshold the sort compiles (and matches eager: random values, no ties); one above it breaks.
    small_graphs, small_err = _no_break_probe(impl, s, torch.randn(2, 256))
    at_graphs, at_err = _no_break_probe(impl, f, torch.randn(2, limit))
    big_graphs, big_err = _break_probe(impl, f, torch.randn(2, limit + 1), op="argsort")
    m_graphs, m_err = _break_probe(impl, m, torch.randn(2, limit + 1), op="argsort")
    ok = (small_graphs, at_graphs) == (1, 1) and not small_err and not at_err and big_graphs == 2 and big_err \
        and m_graphs == 2 and m_err
    support.record(SUPPORTED if ok else PARTIAL,
                   f"Breaks when the sorted dimension has more than {limit} elements (function and method form). "
                   f"Observed: sort of 256 and argsort of exactly {limit} elements compiled in {small_graphs} and "
                   f"{at_graphs} graph under fullgraph=True and matched eager{'' if not (small_err or at_err) else ' (not: ' + (small_err or at_err) + ')'}; "
                   f"{limit + 1} elements split the function into {big_graphs} graphs and raised Unsupported "
                   "under fullgraph=True.")


@support_marker("graph_breaks", "torch.topk")
@pytest.mark.spec("001.breaks.topk", "001.breaks.diagnostic-type")
def test_topk_breaks(impl, support):
    limit = forced_graph_break(impl, "topk")

    def f(k):
        def g(x):
            y = x * 2
            return torch.topk(y, k)[1].sum() + 1
        return g

    def router(logits):  # a Mixtral-style router: top-2 of 4 experts, renormalized
        weights, experts = torch.topk(torch.softmax(logits, dim=-1), 2, dim=-1)
        return weights / weights.sum(-1, keepdim=True), experts

    x = torch.randn(2, limit + 8)
    r_graphs, r_err = _no_break_probe(impl, router, torch.randn(16, 4))
    below_graphs, below_err = _no_break_probe(impl, f(limit - 1), x)
    at, at_err = _break_probe(impl, f(limit), x, op="topk")
    ok = (r_graphs, below_graphs) == (1, 1) and not r_err and not below_err and at_err and at == 2
    support.record(SUPPORTED if ok else PARTIAL,
                   f"Breaks when k is {limit} or larger. Observed: a router's topk(k=2) over 4 experts "
                   f"{'compiled in one graph and matched eager' if not r_err else r_err}; k={limit - 1} "
                   f"{'compiled without a break and matched eager' if not below_err else below_err}; k={limit} split "
                   f"the function into {at} graphs and raised Unsupported under fullgraph=True.")


@support_marker("graph_breaks", "torch.nn.functional.grouped_mm, torch._grouped_mm")
@pytest.mark.spec("001.breaks.grouped-mm")
def test_grouped_mm_breaks(impl, support):
    def f(a, b, offs):
        return torch._grouped_mm(a * 1, b, offs=offs)

    gb_type = forced_graph_break(impl, "gb_type")
    a = torch.randn(8, 16, dtype=torch.bfloat16)
    b = torch.randn(2, 16, 8, dtype=torch.bfloat16)
    offs = torch.tensor([4, 8], dtype=torch.int32)
    impl.reset()
    try:
        impl.backend().torch_compile(f, fullgraph=True)(a, b, offs)
        support.record(UNSUPPORTED, "grouped_mm compiled without a break.")
    except torch._dynamo.exc.Unsupported as exc:
        ok = exc.gb_type == gb_type and "grouped_mm" in str(exc)
        support.record(SUPPORTED if ok else PARTIAL, "Always breaks; fullgraph=True raises Unsupported naming grouped_mm.")


@support_marker("graph_breaks", "Operations with no lowering")
@pytest.mark.spec("001.breaks.no-lowering")
def test_no_lowering_breaks(impl, support):
    ops = forced_graph_break(impl, "no_lowering")
    assert "histc" in ops, "histc has no StableHLO lowering in torch-mlir, yet the computed list lacks it"

    def f(x):
        y = x * 2
        return torch.histc(y, bins=4).sum() + y.sum()

    def m(x):
        y = x * 2
        return y.histc(bins=4).sum() + y.sum()

    graphs, err = _break_probe(impl, f, torch.randn(64), op="histc")
    m_graphs, m_err = _break_probe(impl, m, torch.randn(64), op="histc")
    ok = graphs == 2 and err and m_graphs == 2 and m_err
    support.record(SUPPORTED if ok else PARTIAL,
                   f"Always breaks. The implementation's table of ops that do not lower, compile, run and match eager ({len(ops)} ops, e.g. "
                   f"{', '.join(sorted(ops)[:6])}); torch.histc and Tensor.histc each split the function into "
                   f"{graphs} graphs, and fullgraph=True raises Unsupported naming the op and the reason.")


# --- environment variables --------------------------------------------------------------------------


# A variable the implementation does not declare is a skip saying so, and its row reads Unsupported
# (a failure only where the implementation declares the row available).
_declared = declared_variable


def _rejects_bad_bool(impl, monkeypatch, name: str) -> str:
    monkeypatch.setenv(name, "maybe")
    impl.reset()
    try:
        impl.backend().torch_compile(_fn)(_x())
    except Exception as exc:  # noqa: BLE001
        named = name in str(exc)
        return "an invalid value raises naming the variable" if named else f"an invalid value raises ({type(exc).__name__})"
    finally:
        monkeypatch.delenv(name)
    return "an invalid value is not rejected"


def _var_probe(table_item: str):
    return support_marker("variables", table_item)


@_var_probe("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")
@pytest.mark.spec("001.env.disable-fallback-execution")
def test_var_fallback(impl, support, monkeypatch):
    name = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
    default = _declared(impl, name)
    monkeypatch.setenv("NEURON_CC_FLAGS", "--conformance-no-such-flag")
    raised = None
    try:
        impl.backend().torch_compile(_fn)(_x())
    except Exception as exc:  # noqa: BLE001
        raised = exc
    impl.reset()
    monkeypatch.setenv(name, "0")
    with _captured() as messages:
        _runs(impl.backend().torch_compile(_fn))
    warned = any("eager" in m for m in messages)
    bad = _rejects_bad_bool(impl, monkeypatch, name)
    ok = raised is not None and warned
    support.record(SUPPORTED if ok else PARTIAL, expects_fallback=True, notes=
                   f"Default {default}: a compile failure is re-raised ({_first_line(raised) if raised else 'nothing raised'}); "
                   f"with 0 the graph runs eagerly{' with a warning' if warned else ''}; {bad}.")


_globs = debug_artifacts


@_var_probe("TORCH_NEURONX_DEBUG_DIR")
@pytest.mark.spec("001.env.debug-dir")
def test_var_debug_dir(impl, support, monkeypatch, tmp_path):
    _declared(impl, "TORCH_NEURONX_DEBUG_DIR")
    globs = _globs(impl)
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    _runs(impl.backend().torch_compile(_fn))
    found = {kind: sorted(glob.glob(str(tmp_path / pattern))) for kind, pattern in globs.items()}
    missing = [k for k, v in found.items() if not v]
    support.record(SUPPORTED if not missing else PARTIAL,
                   "A compile writes " + ", ".join(f"{k} ({globs[k]})" for k in globs if k not in missing)
                   + (f"; missing: {missing}" if missing else "") + ".")


@_var_probe("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS")
@pytest.mark.spec("001.env.preserve-artifacts")
def test_var_preserve(impl, support, monkeypatch, tmp_path):
    default = _declared(impl, "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS")
    globs = _globs(impl)
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    _runs(impl.backend().torch_compile(_fn))
    kept = all(glob.glob(str(tmp_path / p)) for p in globs.values())
    bad = _rejects_bad_bool(impl, monkeypatch, "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS")
    support.record(SUPPORTED if kept else PARTIAL,
                   f"Default {default}. With 1 the artifacts stay in the debug directory; {bad}. "
                   "(Removal at process exit is checked by the reference's unit tests, not in-process.)")


@_var_probe("TORCH_NEURONX_COMPILE_ONLY")
@pytest.mark.spec("001.env.compile-only", "001.env.compile-only-helper")
def test_var_compile_only(impl, support, monkeypatch):
    default = _declared(impl, "TORCH_NEURONX_COMPILE_ONLY")
    api = _helper(impl, "compile_only")
    monkeypatch.setenv("TORCH_NEURONX_COMPILE_ONLY", "1")
    impl.backend().reset_graph_count()
    with observe(impl) as by_var_ev:
        _runs(impl.backend().torch_compile(_fn))
    by_var = impl.backend().graph_count()
    monkeypatch.delenv("TORCH_NEURONX_COMPILE_ONLY")
    impl.reset()
    impl.backend().reset_graph_count()
    with api.compile_only(), observe(impl) as by_ctx_ev:
        _runs(impl.backend().torch_compile(_fn))
    by_ctx = impl.backend().graph_count()
    # compiled, never run: runs of the compiled path, where the implementation reports them, stay 0
    ran = (by_var_ev.ran, by_ctx_ev.ran)
    bad = _rejects_bad_bool(impl, monkeypatch, "TORCH_NEURONX_COMPILE_ONLY")
    ok = by_var == by_ctx == 1 and not any(ran)
    support.record(SUPPORTED if ok else PARTIAL, expects_fallback=True, notes=
                   f"Default {default}. With 1, and inside compile_only(), the graph is compiled ({by_var} and {by_ctx} graph) "
                   f"and the call still returns the eager result; {bad}."
                   + ("" if not any(ran) else f" But the compiled path ran ({ran[0]} times with the variable, "
                                              f"{ran[1]} inside compile_only())."))


@_var_probe("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY")
@pytest.mark.spec("001.env.disable-cpu-autocopy")
def test_var_autocopy(impl, support, monkeypatch):
    default = _declared(impl, "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY")
    api = _helper(impl, "to_device")
    x = _x()
    _runs(impl.backend().torch_compile(_fn), x=x)
    impl.reset()
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    compiled = impl.backend().torch_compile(_fn)
    raised = None
    try:
        compiled(x)
    except Exception as exc:  # noqa: BLE001
        raised = exc
    assert_close(compiled(api.to_device(x)), _fn(x))
    support.record(SUPPORTED if raised is not None else PARTIAL,
                   f"Default {default}: host tensors are copied to the device. With 1 a host tensor argument raises "
                   f"({_first_line(raised) if raised else 'nothing raised'}); a device tensor runs.")


@_var_probe("TORCH_NEURONX_RETAIN_DEVICE_MODE")
@pytest.mark.spec("001.env.retain-device-mode")
def test_var_retain_device(impl, support, monkeypatch):
    default = _declared(impl, "TORCH_NEURONX_RETAIN_DEVICE_MODE")
    api = _helper(impl, "is_device_tensor")
    x = _x()
    on_device = api.is_device_tensor(impl.backend().torch_compile(_fn)(x))
    impl.reset()
    monkeypatch.setenv("TORCH_NEURONX_RETAIN_DEVICE_MODE", "1")
    retained = not api.is_device_tensor(impl.backend().torch_compile(_fn)(x))
    support.record(SUPPORTED if on_device and retained else PARTIAL,
                   f"Default {default}: outputs are device tensors ({on_device}). With 1 outputs keep the host placement "
                   f"of host arguments ({retained}).")


@_var_probe("NEURON_PLATFORM_TARGET_OVERRIDE")
@pytest.mark.spec("001.env.target-override")
def test_var_target(impl, support, monkeypatch):
    _declared(impl, "NEURON_PLATFORM_TARGET_OVERRIDE")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    _runs(impl.backend().torch_compile(_fn))
    impl.reset()
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "conformance-no-such-target")
    try:
        impl.backend().torch_compile(_fn)(_x())
        bad = "an unknown target is accepted"
    except Exception as exc:  # noqa: BLE001
        bad = "an unknown target raises" + (" naming the variable" if "NEURON_PLATFORM_TARGET_OVERRIDE" in str(exc) else "")
    support.record(SUPPORTED, f"trn3 compiles and runs; {bad}.")


@_var_probe("NEURON_CC_FLAGS")
@pytest.mark.spec("001.env.cc-flags")
def test_var_cc_flags(impl, support, monkeypatch):
    default = _declared(impl, "NEURON_CC_FLAGS")
    monkeypatch.setenv("NEURON_CC_FLAGS", "-O1")
    _runs(impl.backend().torch_compile(_fn))
    impl.reset()
    monkeypatch.setenv("NEURON_CC_FLAGS", "--conformance-no-such-flag")
    try:
        impl.backend().torch_compile(_fn)(_x())
        seen = "an unknown flag is accepted"
        status = PARTIAL
    except Exception as exc:  # noqa: BLE001
        seen = f"an unknown flag reaches the compiler and fails ({type(exc).__name__})"
        status = SUPPORTED
    support.record(status, f"Default {default!r}. -O1 compiles and runs; {seen}.")


@_var_probe("TORCH_NEURONX_ENABLE_NKI_SDPA")
@pytest.mark.spec("001.env.nki-sdpa", "001.env.nki-sdpa-2048", "001.env.nki-kernel")
def test_var_nki_sdpa(impl, support, monkeypatch):
    default = _declared(impl, "TORCH_NEURONX_ENABLE_NKI_SDPA")
    api = _helper(impl, "reset_dynamo_metrics", "get_dynamo_metrics")

    def attn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = torch.randn(1, 2, 2048, 16)
    k, v = torch.randn(1, 2, 2048, 16), torch.randn(1, 2, 2048, 16)
    results = {}
    for value in ("1", "0"):
        monkeypatch.setenv("TORCH_NEURONX_ENABLE_NKI_SDPA", value)
        impl.reset()
        api.reset_dynamo_metrics()
        assert_close(impl.backend().torch_compile(attn)(q, k, v), attn(q, k, v))
        results[value] = [m.graph_id for m in api.get_dynamo_metrics()]
    differs = results["1"] != results["0"]
    support.record(SUPPORTED if differs else PARTIAL,
                   f"Default {default}. A causal SDPA with a 2048-token query matches eager both ways; "
                   + ("the switch changes the compiled graph (a different cache key)." if differs
                      else "the switch does not change the compiled graph."))


_CACHE_VARS = [
    "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
    "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "TORCH_CACHING_PRECOMPILE",
]


@pytest.mark.parametrize("name", [pytest.param(n, marks=_var_probe(n)) for n in _CACHE_VARS])
def test_cache_variables_are_read(impl, support, name):
    default = _declared(impl, name)
    support.record(PARTIAL, f"Read, default {default!r}; its effect is probed by the cache contract, not here.")


@_var_probe("TORCH_NEURONX_ENABLED_METRIC_TABLES")
@pytest.mark.spec("001.metrics.enabled-tables")
def test_var_metric_tables(impl, support, monkeypatch, tmp_path):
    _declared(impl, "TORCH_NEURONX_ENABLED_METRIC_TABLES")
    monkeypatch.setenv("TORCH_NEURONX_ENABLED_METRIC_TABLES", "graph_stats")
    monkeypatch.setenv("TORCH_NEURONX_METRICS_DIR", str(tmp_path / "metrics"))
    _runs(impl.backend().torch_compile(_fn))
    files = sorted(p for p in os.listdir(tmp_path / "metrics")) if (tmp_path / "metrics").is_dir() else []
    rows = []
    if "graph_stats.csv" in files:
        rows = list(csv.DictReader(io.StringIO((tmp_path / "metrics" / "graph_stats.csv").read_text())))
    support.record(SUPPORTED if rows and "graph_name" in rows[0] else PARTIAL,
                   f"graph_stats writes {files or 'nothing'} with {len(rows)} row(s) for one compiled graph.")


@_var_probe("TORCH_NEURONX_METRICS_DIR")
@pytest.mark.spec("001.metrics.metrics-dir")
def test_var_metrics_dir(impl, support, monkeypatch, tmp_path):
    default = _declared(impl, "TORCH_NEURONX_METRICS_DIR")
    target = tmp_path / "not" / "yet"
    monkeypatch.setenv("TORCH_NEURONX_ENABLED_METRIC_TABLES", "graph_stats")
    monkeypatch.setenv("TORCH_NEURONX_METRICS_DIR", str(target))
    _runs(impl.backend().torch_compile(_fn))
    written = (target / "graph_stats.csv").is_file()
    support.record(SUPPORTED if written else PARTIAL,
                   f"Default {default!r}. A directory that does not exist yet is created and the table written there ({written}).")


# --- helper API -------------------------------------------------------------------------------------


_helper = helper_api


@support_marker("helper_api", "set_model_name()")
@pytest.mark.spec("001.helper.set-model-name", "001.metrics.model-name")
def test_set_model_name(impl, support, monkeypatch, tmp_path):
    api = _helper(impl, "set_model_name", "get_model_name", "reset_dynamo_metrics", "get_dynamo_metrics")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "debug"))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    before = api.get_model_name()
    try:
        api.set_model_name("../escape/probe")
        api.reset_dynamo_metrics()
        _runs(impl.backend().torch_compile(_fn))
        names = [m.graph_name for m in api.get_dynamo_metrics()]
    finally:
        api.set_model_name(before)
    outside = [p for p in glob.glob(str(tmp_path / "**"), recursive=True) if not p.startswith(str(tmp_path / "debug"))
               and p != str(tmp_path) + os.sep and p != str(tmp_path)]
    safe = all("/" not in n and ".." not in n for n in names) and not outside
    support.record(SUPPORTED if names and safe else PARTIAL,
                   f"Names the graphs compiled after it ({_graph_name_form(names[0]) if names else 'none'}); "
                   "a name like '../escape/probe' cannot leave the artifact directory.")


@support_marker("helper_api", "get_model_name()")
@pytest.mark.spec("001.helper.importable", "001.helper.get-model-name-default")
def test_get_model_name(impl, support):
    api = _helper(impl, "get_model_name")
    default = api.get_model_name()
    support.record(SUPPORTED if default == "model_default" else PARTIAL, f"Returns {default!r} when no name was set.")


@support_marker("helper_api", "get_rank()")
@pytest.mark.spec("001.helper.get-rank-outside")
def test_get_rank(impl, support):
    api = _helper(impl, "get_rank")
    rank = api.get_rank()
    support.record(SUPPORTED if rank == 0 else PARTIAL, f"Returns {rank} outside torch.distributed.")


@support_marker("helper_api", "get_dynamo_metrics()")
@pytest.mark.spec("001.helper.get-dynamo-metrics", "001.metrics.one-record-per-graph", "001.metrics.graph-name")
def test_get_dynamo_metrics(impl, support):
    api = _helper(impl, "get_dynamo_metrics", "reset_dynamo_metrics")
    api.reset_dynamo_metrics()
    _runs(impl.backend().torch_compile(_fn))
    records = api.get_dynamo_metrics()
    assert len(records) == 1
    m = records[0]
    fields = ["graph_id", "graph_name", "model_name", "has_collectives", "graph_node_count", "timestamp",
              "torch_neuronx_fx_passes_us", "torch_neuronx_lower_us", "torch_neuronx_compile_us"]
    missing = [f for f in fields if not hasattr(m, f)]
    pattern = re.fullmatch(rf"{re.escape(m.model_name)}_\d+_\w+_\d+", m.graph_name) is not None
    support.record(SUPPORTED if not missing and pattern else PARTIAL,
                   f"One record per compiled graph with the documented fields{'' if not missing else f' (missing {missing})'}; "
                   f"graph_name {_graph_name_form(m.graph_name)!r}.")


@support_marker("helper_api", "reset_dynamo_metrics()")
@pytest.mark.spec("001.helper.reset-dynamo-metrics")
def test_reset_dynamo_metrics(impl, support):
    api = _helper(impl, "reset_dynamo_metrics", "get_dynamo_metrics")
    _runs(impl.backend().torch_compile(_fn))
    api.reset_dynamo_metrics()
    support.record(SUPPORTED if api.get_dynamo_metrics() == [] else PARTIAL, "Clears the records.")


@support_marker("helper_api", "NEFFCompilationError")
@pytest.mark.spec("001.helper.importable", "001.helper.neff-compilation-error")
def test_neff_compilation_error(impl, support, monkeypatch):
    api = _helper(impl, "NEFFCompilationError")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--conformance-no-such-flag")
    try:
        impl.backend().torch_compile(_fn)(_x())
        support.record(PARTIAL, "Exported, but a compiler failure did not raise it.")
    except api.NEFFCompilationError as exc:
        support.record(SUPPORTED, f"Raised when the compiler fails ({type(exc).__name__}); subclass of Exception.")


@support_marker("helper_api", "NEFFExecutionError")
@pytest.mark.spec("001.helper.neff-execution-error")
def test_neff_execution_error(impl, support, monkeypatch):
    api = _helper(impl, "NEFFExecutionError")
    assert issubclass(api.NEFFExecutionError, Exception)
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    compiled, x = impl.backend().torch_compile(_fn), _x()
    _runs(compiled, x=x)  # compiled, loaded and run once
    try:
        impl.backend().fail_next_execution()
    except NotSupported:
        support.record(PARTIAL, "Exported and a subclass of Exception; the adapter cannot make an execution fail "
                       "(fail_next_execution), so the probe cannot see it raised.")
        return
    try:
        compiled(x)
        support.record(PARTIAL, "Exported, but an execution that failed did not raise it.")
    except api.NEFFExecutionError as exc:
        support.record(SUPPORTED, f"Raised when an execution fails ({type(exc).__name__}, through torch.compile, "
                       "fallback off); subclass of Exception.")
