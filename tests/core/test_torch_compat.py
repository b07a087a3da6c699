"""The torch-compat boundary (:mod:`reference.core.torch_compat`): no other module of the reference
names a private torch name, the version guard, and one test per hook showing torch still does
what the reference relies on. The scoping of the Dynamo hooks is shown in real processes: one
that compiled with ``backend="neuron"`` and then with Inductor gets exactly the graphs of a process
that only ran Inductor.

These tests talk to torch directly (they are the tests of the boundary); the reference's own code
goes through the compat module.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conformance.harness.env import unmeasured
from reference.core import torch_compat as tc

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "reference" / "core" / "torch_compat.py"
#: The other module allowed private names: those of the runtime, importing no Dynamo.
COMPAT_RUNTIME = ROOT / "reference" / "core" / "torch_runtime.py"


# --- the rule: private torch names only in the compat module --------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.AST) -> list[str] | None:
    """``["torch", "utils", "_pytree"]`` for ``torch.utils._pytree``; ``None`` unless rooted at ``torch``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "torch":
        return ["torch", *reversed(parts)]
    return None


def private_torch_names(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, what) for each place the code names a private torch module or attribute, at any depth:
    ``torch._x``, ``torch.utils._x``, ``import torch.a._x``, ``from torch.a._x import ...``,
    ``from torch.a import _x``. A chain is reported once, at its first private part. ``torch.ops.*``
    is the op registry, whose names (``_c10d_functional``, ``aten._foo``) are operators, not Python API."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute):
            parts = _dotted(node)
            if parts and parts[1:2] != ["ops"] and _private(parts[-1]) and not any(_private(p) for p in parts[1:-1]):
                found.append((node.lineno, ".".join(parts)))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "torch":
                continue
            if any(_private(p) for p in parts[1:]):
                found.append((node.lineno, f"from {node.module} import ..."))
            else:
                found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "torch" and any(_private(p) for p in parts[1:]):
                    found.append((node.lineno, f"import {alias.name}"))
    return sorted(found)


def test_the_scanner_finds_every_spelling_and_ignores_strings_comments_and_dunders():
    source = (
        "import torch\nimport torch._dynamo\nfrom torch._ops import OpOverload\nfrom torch import _C, nn\n"
        "x = torch._C._foo\ny = torch.__version__\n# torch._comment\ns = 'torch._string'\n"
        "from torch.utils import _pytree\nimport torch.utils._pytree\nz = torch.utils._pytree.tree_map\n"
    )
    assert private_torch_names(source) == [
        (2, "import torch._dynamo"), (3, "from torch._ops import ..."), (4, "from torch import _C"), (5, "torch._C"),
        (9, "from torch.utils import _pytree"), (10, "import torch.utils._pytree"), (11, "torch.utils._pytree"),
    ]


def test_no_module_outside_the_compat_module_names_a_private_torch_name():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "reference").rglob("*.py"))
        if path not in (COMPAT, COMPAT_RUNTIME)
        for line, what in private_torch_names(path.read_text(), str(path))
    ]
    assert offenders == [], (
        "private torch names outside reference/core/torch_compat.py and torch_runtime.py (import them from there):\n" + "\n".join(offenders)
    )


# --- the version guard ----------------------------------------------------------------------------


def test_the_running_torch_is_one_the_hooks_were_written_for():
    assert tc.torch_release() in tc.WRITTEN_FOR, f"torch {torch.__version__}: update WRITTEN_FOR after checking the hooks"
    assert tc.torch_release("2.13.0+cpu") == "2.13" and tc.torch_supported("2.13.1") and not tc.torch_supported("2.14.0")


def test_outside_the_versions_a_hook_stays_off_with_a_warning_naming_the_release(monkeypatch):
    monkeypatch.setattr(tc, "_warned", set())
    with pytest.warns(tc.TorchVersionWarning, match=r"written for torch 2\.13; this process runs torch 2\.99\.0, so it is off"):
        assert tc.check_torch_version("a hook", "it is off", version="2.99.0") is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tc.check_torch_version("a hook", "it is off", version="2.99.0") is False  # once per feature


def test_the_dynamo_hooks_are_not_installed_on_another_release(monkeypatch):
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    monkeypatch.setattr(tc, "_warned", set())
    monkeypatch.setattr(tc, "WRITTEN_FOR", ("0.1",))
    before = TorchInGraphFunctionVariable.call_function
    hooks = tc.DynamoTraceHooks()
    with pytest.warns(tc.TorchVersionWarning, match=r"Dynamo trace hooks.*not installed"):
        assert hooks.install(lambda *a: None, lambda *a: None, lambda tx: False) is False
    assert not hooks.installed() and TorchInGraphFunctionVariable.call_function is before


# --- one test per hook ----------------------------------------------------------------------------


def test_ops_overloads_and_the_dispatcher():
    assert isinstance(torch.ops.aten.add.Tensor, tc.OpOverload)
    assert isinstance(torch.ops.aten.add, tc.OpOverloadPacket)
    assert tc.dispatch_has_kernel("aten::relu") and tc.dispatch_has_kernel("aten::add.Tensor")
    assert not tc.dispatch_has_kernel("no_such_namespace::op")
    assert tc.has_composite_implicit_kernel(torch.ops.aten.linear.default)
    assert not tc.has_composite_implicit_kernel(torch.ops.aten.add.Tensor)
    t = torch.ones(2)
    assert tc.resolve_packet_overload(torch.ops.aten.add, (t, t), {}) == "Tensor"
    assert tc.resolve_packet_overload(torch.ops.aten.add, ("not", "tensors", "at all"), {}) is None


def test_custom_op_definitions_are_found_by_name():
    @torch.library.custom_op("torch_compat_tests::triple", mutates_args=())
    def triple(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    opdef = tc.OPDEFS.get("torch_compat_tests::triple")
    assert opdef is not None and opdef._init_fn(torch.ones(1)).item() == 3


def test_decomposition_tables():
    core = tc.core_aten_decompositions()
    assert torch.ops.aten.addcdiv.default in core and len(core) > 100
    table = tc.get_decompositions([torch.ops.aten.silu])
    assert torch.ops.aten.silu.default in table


def test_fake_tensors_and_the_python_dispatcher():
    mode = tc.FakeTensorMode()
    with mode:
        fake = torch.ones(3)
        with tc.unset_fake_temporarily():
            real = torch.ones(3)
    assert type(fake).__name__ == "FakeTensor" and type(real) is torch.Tensor
    assert tc.detect_fake_mode([fake]) is mode
    with tc.enable_python_dispatcher():
        assert torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher)


def test_an_exception_deriving_from_shorten_traceback_leaves_a_backend_unwrapped():
    class Mine(tc.ShortenTraceback):
        def __init__(self, message: str) -> None:
            super().__init__(message, first_useful_frame=None)

    def backend(gm, example_inputs):
        raise Mine("from the backend")

    torch.compiler.reset()
    with pytest.raises(Mine, match="from the backend"):
        torch.compile(lambda x: x + 1, backend=backend)(torch.ones(2))
    torch.compiler.reset()


_GLOBAL_WEIGHT = torch.ones(2)


def test_optimized_module_local_sources_and_the_config():
    seen = []

    def backend(gm, example_inputs):
        seen.extend(type(n.meta["grapharg"].source) for n in gm.graph.find_nodes(op="placeholder"))
        return gm.forward

    torch.compiler.reset()
    assert isinstance(torch.compile(torch.nn.Linear(2, 2), backend=backend), tc.OptimizedModule)
    torch.compile(lambda x: x * _GLOBAL_WEIGHT, backend=backend)(torch.ones(2))
    assert len(seen) == 2 and seen[0] is tc.LocalSource and seen[1] is not tc.LocalSource  # the argument; a global
    cfg = tc.dynamo_config()
    assert isinstance(cfg.automatic_dynamic_shapes, bool) and isinstance(cfg.assume_static_by_default, bool)
    assert isinstance(cfg.caching_precompile, bool)
    assert callable(tc.lookup_backend("eager"))
    torch.compiler.reset()


def test_mark_dynamic_and_the_bytecode_hook():
    sizes, codes = [], []

    def backend(gm, example_inputs):
        sizes.extend(n.meta["example_value"].shape[0] for n in gm.graph.find_nodes(op="placeholder")
                     if isinstance(n.meta.get("example_value"), torch.Tensor))
        return gm.forward

    handle = tc.register_bytecode_hook(lambda code, new_code: codes.append(code.co_name))
    try:
        torch.compiler.reset()
        x = torch.ones(5)
        tc.mark_dynamic(x, [0])

        def twice(v):
            return v * 2

        torch.compile(twice, backend=backend)(x)
    finally:
        handle.remove()
        torch.compiler.reset()
    assert isinstance(sizes[0], torch.SymInt) and "twice" in codes


def test_the_dynamo_hooks_see_calls_in_frames_and_are_scoped_by_the_backend_dynamo_holds():
    """The four handlers: calls of torch functions and ops, tensor methods, and automatic dynamic
    shapes; ``traced_backends`` names the backend (through torch.compile's options wrapper)."""
    calls: list[tuple[str, bool]] = []

    def ours(gm, example_inputs, **_):
        graphs.append(gm)
        return gm.forward

    graphs: list = []
    mine = lambda tx: any(fn is ours for fn in tc.traced_backends(tx))  # noqa: E731

    def on_function(tx, fn, args, kwargs):
        calls.append((getattr(fn, "__name__", str(fn)), mine(tx)))

    def on_method(tx, name, args, kwargs):
        calls.append((f"Tensor.{name}", mine(tx)))

    def f(x):
        return torch.sort(x)[0] + x.sin() + torch.ops.aten.cos.default(x)

    hooks = tc.DynamoTraceHooks()
    assert hooks.install(on_function, on_method, mine)
    try:
        torch.compiler.reset()
        compiled = torch.compile(f, backend=ours, options={"anything": 1})
        for n in (3, 4, 5):
            compiled(torch.randn(n))
        torch.compiler.reset()
        torch.compile(f, backend="eager")(torch.randn(3))
    finally:
        hooks.uninstall()
        torch.compiler.reset()
    names = {name for name, _ in calls}
    assert {"sort", "Tensor.sin", "cos.default"} <= names, names
    assert ("sort", True) in calls and ("sort", False) in calls  # ours, then the eager backend's frame
    assert len(graphs) == 3, "keep_static: a new shape recompiles with static sizes"
    assert not any(isinstance(s, torch.SymInt) for g in graphs for n in g.graph.find_nodes(op="placeholder")
                   for s in getattr(n.meta.get("example_value"), "shape", ()))
    assert not hooks.installed()


def test_uninstall_restores_dynamos_handlers():
    from torch._dynamo.variables import builder
    from torch._dynamo.variables.tensor import TensorVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    owners = [(TorchInGraphFunctionVariable, "call_function"), (TensorVariable, "call_method"),
              (builder, "_automatic_dynamic"), (builder.VariableBuilder, "wrap_symint")]
    before = [getattr(o, a) for o, a in owners]
    hooks = tc.DynamoTraceHooks()
    hooks.install(lambda *a: None, lambda *a: None, lambda tx: False)
    assert all(getattr(o, a) is not b for (o, a), b in zip(owners, before))
    hooks.uninstall()
    assert [getattr(o, a) for o, a in owners] == before


def test_a_graph_break_from_a_hook_splits_the_graph_or_raises_unsupported():
    def on_function(tx, fn, args, kwargs):
        if getattr(fn, "__name__", "") == "cos":
            tc.graph_break(gb_type="test break", context="cos", explanation="a test", hints=[])

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    hooks = tc.DynamoTraceHooks()
    hooks.install(on_function, lambda *a: None, lambda tx: False)
    try:
        torch.compiler.reset()
        x = torch.randn(4)
        assert torch.allclose(torch.compile(lambda v: torch.cos(v * 2) + 1, backend=backend)(x), torch.cos(x * 2) + 1)
        assert len(graphs) == 2
        torch.compiler.reset()
        with pytest.raises(tc.Unsupported) as info:
            torch.compile(lambda v: torch.cos(v * 2), backend=backend, fullgraph=True)(x)
        assert info.value.gb_type == "test break"
    finally:
        hooks.uninstall()
        torch.compiler.reset()


def test_a_retrace_request_from_a_backend_traces_the_frame_again():
    traced, compiled = [], []

    def backend(gm, example_inputs):
        traced.append(gm)
        if len(traced) == 1:
            raise tc.RetraceRequest("once more")
        compiled.append(gm)
        return gm.forward

    torch.compiler.reset()
    try:
        out = torch.compile(lambda v: v.sin() * 2, backend=backend, fullgraph=True)(torch.ones(2))
    finally:
        torch.compiler.reset()
    assert torch.allclose(out, torch.ones(2).sin() * 2)
    assert len(traced) == 2 and len(compiled) == 1


def test_the_python_value_of_a_traced_tensor_is_its_fake_tensor():
    seen = []

    def on_method(tx, name, args, kwargs):
        if name == "topk":
            seen.append([tc.python_value(a) for a in args])

    hooks = tc.DynamoTraceHooks()
    hooks.install(lambda *a: None, on_method, lambda tx: False)
    try:
        torch.compiler.reset()
        torch.compile(lambda v: v.topk(2)[0], backend="eager")(torch.randn(6))
    finally:
        hooks.uninstall()
        torch.compiler.reset()
    (tensor, k), = seen
    assert tuple(tensor.shape) == (6,) and type(tensor).__name__ == "FakeTensor" and k == 2


def test_aot_autograd_its_names_metadata_and_counter():
    seen = {}

    def fw_compiler(gm, example_inputs):
        meta = tc.aot_forward_metadata()
        seen["names"] = tc.aot_graph_names()
        seen["mutated"] = list(meta.mutated_inp_runtime_indices)
        seen["outputs"] = [o.output_type for o in meta.output_info]
        seen["inputs"] = len(meta.input_info)
        for field in ("tokens", "num_intermediate_bases", "grad_enabled_mutation", "subclass_inp_meta",
                      "subclass_fw_graph_out_meta"):
            assert hasattr(meta, field), field
        for field in ("mutates_data", "mutates_metadata", "mutates_storage_metadata", "mutation_inductor_storage_resize"):
            assert hasattr(meta.input_info[0], field), field
        seen["facts"] = tc.aot_inference_facts()
        return tc.make_boxed_func(gm.forward)

    def f(cache, x):
        cache.add_(1)
        return (x * 2,)

    def backend(gm, example_inputs):  # AOT Autograd under Dynamo, as the neuron seam runs it
        return tc.aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler)

    torch.compiler.reset()
    cache = torch.zeros(2)
    with torch.no_grad():
        out = torch.compile(f, backend=backend)(cache, torch.ones(2))
    torch.compiler.reset()
    assert seen["names"] and seen["names"][0].endswith("_inference")
    assert seen["mutated"] == [0] and seen["outputs"] == [tc.OutputType.non_alias] and seen["inputs"] == 2
    assert torch.equal(out[0], torch.full((2,), 2.0)) and torch.equal(cache, torch.ones(2))
    assert seen["facts"] == tc.AOTInferenceFacts(n_inputs=2, mutated_inputs=(0,), n_outputs=1, why_not=None)
    first = tc.next_aot_id()
    assert tc.next_aot_id() == first + 1
    assert not isinstance(tc.SubclassCreationMeta, type(None))
    portable = tc.functorch_config().save_config_portable()
    assert isinstance(portable, dict) and portable
    assert isinstance(tc.functorch_config().bundled_autograd_cache, bool)
    with tc.functorch_config().patch(force_non_lazy_backward_lowering=True):
        assert tc.functorch_config().force_non_lazy_backward_lowering is True
    assert callable(tc.aot_autograd_backend(fw_compiler=fw_compiler))


def test_aot_autograd_outside_dynamo_records_into_a_tracing_context_of_its_own():
    seen = {}

    def fw_compiler(gm, example_inputs):
        seen["names"] = tc.aot_graph_names()
        seen["facts"] = tc.aot_inference_facts()
        return tc.make_boxed_func(gm.forward)

    gm = torch.fx.symbolic_trace(lambda cache, x: (cache.add_(1), x * 2)[1:])
    cache = torch.zeros(2)
    assert tc.current_tracing_context() is None
    with torch.no_grad(), tc.tracing_of_its_own():
        run = tc.aot_module_simplified(gm, [cache, torch.ones(2)], fw_compiler=fw_compiler)
    assert tc.current_tracing_context() is None
    assert seen["names"] and seen["names"][0].endswith("_inference")
    assert seen["facts"] == tc.AOTInferenceFacts(n_inputs=2, mutated_inputs=(0,), n_outputs=1, why_not=None)
    with torch.no_grad():
        assert torch.equal(run(cache, torch.ones(2))[0], torch.full((2,), 2.0)) and torch.equal(cache, torch.ones(2))


def test_a_tensor_from_a_dlpack_capsule_shares_the_memory():
    source = torch.arange(6, dtype=torch.float32)
    t = tc.tensor_from_dlpack_capsule(torch.utils.dlpack.to_dlpack(source))
    assert t.data_ptr() == source.data_ptr() and torch.equal(t, source)


def test_the_inference_plans_facts_say_why_a_wrapper_does_more(monkeypatch):
    seen = []

    def fw_compiler(gm, example_inputs):
        seen.append(tc.aot_inference_facts())
        return tc.make_boxed_func(gm.forward)

    def backend(gm, example_inputs):
        return tc.aot_module_simplified(gm, example_inputs, fw_compiler=fw_compiler)

    torch.compiler.reset()
    with torch.no_grad():
        torch.compile(lambda x: (x.view(-1), x * 2), backend=backend)(torch.ones(2, 2))  # an output aliases an input
    torch.compiler.reset()
    assert seen[0].why_not == "an output that aliases an input or an intermediate"
    assert tc.aot_inference_facts() is None  # outside a forward compiler
    monkeypatch.setattr(tc, "_warned", set())
    monkeypatch.setattr(tc, "aot_forward_metadata", lambda: pytest.fail("read on a release it was not written for"))
    monkeypatch.setattr(tc, "WRITTEN_FOR", ("0.1",))
    with pytest.warns(tc.TorchVersionWarning, match=r"inference plans.*no graph gets an inference plan"):
        assert tc.aot_inference_facts() is None


def test_the_precompile_context_and_inductors_modules():
    assert hasattr(tc.PrecompileContext, "record_artifact")
    assert hasattr(tc.BackendCacheArtifact, "after_deserialization")
    assert hasattr(tc.inductor_module("codecache"), "CacheBase") and hasattr(tc.inductor_module("codecache"), "torch_key")
    assert hasattr(tc.inductor_module("compile_fx"), "graph_returns_tuple")
    assert hasattr(tc.inductor_module("compile_fx"), "compile_fx_inner")
    assert hasattr(tc.inductor_module("output_code"), "CompiledFxGraphConstantsWithGm")
    assert hasattr(tc.inductor_module(""), "standalone_compile") and hasattr(tc.inductor_module(""), "CompiledArtifact")


# --- the scope of the Dynamo hooks, in real processes ---------------------------------------------

SCOPE_PROBE = r"""
import json, sys
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

def f(x):
    y = x * 2
    h = torch.histc(y, bins=4)             # no lowering on the neuron backend: it breaks there
    s = torch.sort(x)[0]                    # below the sort threshold: no break
    return h.sum() + s.sum() + y.sum()

def run(backend_name):
    counter = CompileCounterWithBackend(backend_name)
    compiled = torch.compile(lambda x: f(x), backend=counter)   # a fresh function object
    outs = [compiled(torch.arange(n, dtype=torch.float32)).item() for n in (8, 16, 24)]
    return {"frames": counter.frame_count, "ops": counter.op_count, "codes": [g.code for g in counter.graphs],
            "outs": outs}

result = {}
if sys.argv[1] == "neuron-first":
    import reference  # noqa: F401  (as a user would)
    compiled = torch.compile(f, backend="neuron")
    with torch.no_grad():
        result["neuron_outs"] = [compiled(torch.arange(n, dtype=torch.float32)).item() for n in (8, 16)]
    result["neuron_breaks"] = sorted(k for k in counters["graph_break"] if "Neuron backend" in k)
    torch.compiler.reset()
result["eager"] = [f(torch.arange(n, dtype=torch.float32)).item() for n in (8, 16, 24)]
result["eager_backend"] = run("eager")
torch.compiler.reset()
result["inductor"] = run("inductor")
print(json.dumps(result))
"""


def _probe(mode: str, tmp_path: Path) -> dict:
    env = {
        # not measured for coverage: the probes run what the in-process tests run, in a fresh
        # interpreter only to see the hooks' scope (a third less time)
        **unmeasured(os.environ),
        "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(tmp_path / "local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": str(tmp_path / "hlo"),
    }
    # Inductor's own cache stays where it is for every test (the machine's, as a user's would): the
    # second probe reads the kernels the first built; what is compared is Dynamo's graphs, made
    # before that cache is consulted
    proc = subprocess.run([sys.executable, "-c", SCOPE_PROBE, mode], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # about 20 s (Inductor's compiles in a child): make slow, for make test's budget
def test_after_a_neuron_compile_inductor_and_eager_get_exactly_their_own_graphs(tmp_path):
    only = _probe("inductor-only", tmp_path)
    after = _probe("neuron-first", tmp_path)
    # the neuron compile ran in that process, with its graph break on the very first trace
    assert after["neuron_breaks"], "the neuron backend did not break at histc: the hooks were not active for it"
    assert after["neuron_outs"] == pytest.approx(after["eager"][:2], rel=1e-5)
    for backend in ("inductor", "eager_backend"):
        assert after[backend]["frames"] == only[backend]["frames"], backend
        assert after[backend]["ops"] == only[backend]["ops"], backend
        assert after[backend]["codes"] == only[backend]["codes"], f"{backend}: other graphs after a neuron compile"
        assert after[backend]["outs"] == pytest.approx(after["eager"], rel=1e-5)
    # Inductor keeps histc in its graph and goes dynamic on the shape change: nothing of ours in its traces
    assert any("histc" in code for code in only["inductor"]["codes"])
    assert after["eager"] == only["eager"]


# --- the runtime's names: no Dynamo ---------------------------------------------------------------


def test_the_runtimes_stand_ins_are_what_dynamos_generated_code_calls_and_record_the_same_range():
    """``reference.core.torch_runtime.DYNAMO_STAND_INS``: each attribute exists under the same name
    in the Dynamo module it stands in for, and the profiler range the stand-ins record is the one
    Dynamo's own functions record."""
    import importlib

    from reference.core.torch_runtime import DYNAMO_STAND_INS

    def ranges(enter, exit_) -> list[str]:
        with torch.profiler.profile() as prof:
            exit_(enter())
        return [e.name for e in prof.events() if "Pregraph" in e.name]

    for name, stand_in in DYNAMO_STAND_INS.items():
        module = importlib.import_module(name)
        for attr in vars(stand_in):
            assert callable(getattr(module, attr)), f"{name}.{attr} is gone: the stand-in no longer stands for it"
    utils = importlib.import_module("torch._dynamo.utils")
    ours = DYNAMO_STAND_INS["torch._dynamo.utils"]
    assert ranges(ours.record_pregraph_bytecode_enter, ours.record_pregraph_bytecode_exit) == ranges(
        utils.record_pregraph_bytecode_enter, utils.record_pregraph_bytecode_exit) == ["Pregraph bytecode"]


def test_the_reference_and_its_errors_import_no_dynamo_and_its_errors_pass_through_dynamo_once_it_is_there():
    """``import reference`` and the errors module leave Dynamo out (a serving process never needs
    it); once torch_compat is imported (every path that lets Dynamo call the backend), every error
    of the reference is a ``ShortenTraceback``, which Dynamo passes to the caller unwrapped."""
    import subprocess
    import sys

    code = ("import sys, torch, reference, reference.core.errors as e\n"
            "before = 'torch._dynamo' in sys.modules\n"
            "import reference.core.torch_compat as tc\n"
            "print(before, all(issubclass(c, tc.ShortenTraceback) for c in (e.NeuronBackendError, e.EnvVarError,"
            " e.PrecompiledInputError)), issubclass(e.EnvVarError, ValueError))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out == ["False", "True", "True"]
    from reference.core.errors import NEFFCompilationError

    assert issubclass(NEFFCompilationError, tc.ShortenTraceback)
