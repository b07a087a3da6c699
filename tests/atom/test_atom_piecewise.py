"""Unit tests of ATOM's custom ops, splitting, the compiler manager and the level-3 backend.

Most tests fake the piece compiler (:class:`EagerPieces` runs each piece as the FX graph it is)
so that they test the manager and the backend, not a compiler; the Inductor adaptor test at the
end uses the real ``compile_fx``.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import reference.atom as atom
from reference.atom.vllm_backend import CACHE_FILE_NAME
from reference.atom.counters import COUNTERS

HIDDEN = 8


def _scale_rows(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * torch.arange(1, x.shape[0] + 1, dtype=x.dtype)[:, None])


OP = atom.direct_register_custom_op("unit_scale_rows", _scale_rows, mutates_args=["out"], namespace="atom_unit")


class Net(torch.nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(layers + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin[0](x)
        for lin in self.lin[1:]:
            out = torch.zeros_like(h)
            torch.ops.atom_unit.unit_scale_rows(h, out)
            h = lin(out).relu()
        return h


class EagerPieces(atom.CompilerInterface):
    """A fake piece compiler: the 'compiled' piece is the graph itself; the handle names it."""

    name = "eager_pieces"

    def __init__(self) -> None:
        self.compiled: list = []
        self.loaded: list = []

    def compile(self, graph, example_inputs, compiler_config, runtime_shape=None, key=None):
        self.compiled.append((key, runtime_shape))
        return graph, {"key": key}

    def load(self, handle, graph, example_inputs, graph_index, runtime_shape=None):
        if not (isinstance(handle, dict) and "key" in handle):
            raise atom.CompileCacheLoadError(f"bad handle {handle!r}")
        self.loaded.append((graph_index, runtime_shape))
        return graph


def _config(tmp_path, **cc) -> atom.Config:
    cc.setdefault("splitting_ops", [OP])
    return atom.Config(
        max_num_seqs=8,
        compilation_config=atom.CompilationConfig(level=3, cudagraph_capture_sizes=[1, 2, 4, 8], cache_dir=str(tmp_path), **cc),
    )


def _run(backend, model, sizes, mark=True):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    outs = {}
    with torch.no_grad():
        for i, size in enumerate(sizes):
            x = torch.randn(size, HIDDEN)
            if i == 0 and mark:
                torch._dynamo.mark_dynamic(x, 0)
            outs[size] = (compiled(x), model(x))
    return outs


@pytest.mark.spec("004.customop.register")
def test_a_registered_op_is_one_node_in_the_traced_graph():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(Net(layers=1), backend=capture, fullgraph=True)(torch.randn(3, HIDDEN))
    targets = [atom.splitting.op_name(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count(OP) == 1
    assert atom.is_registered_op(OP) and not atom.is_registered_op("atom_unit.missing")


@pytest.mark.spec("004.customop.register")
def test_registering_again_is_a_no_op_and_a_taken_name_is_an_error():
    assert atom.direct_register_custom_op("unit_scale_rows", _scale_rows, mutates_args=["out"], namespace="atom_unit") == OP
    with pytest.raises(atom.CustomOpError, match="atom_unit.unit_scale_rows"):
        atom.direct_register_custom_op("unit_scale_rows", lambda x: x, namespace="atom_unit")
    with pytest.raises(atom.CustomOpError, match="identifier"):
        atom.direct_register_custom_op("bad-name", _scale_rows, namespace="atom_unit")



@pytest.mark.spec("004.customop.cuda-dispatch-key")
def test_a_default_registration_has_a_cuda_kernel_and_a_cpu_kernel_and_an_explicit_key_only_that_one():
    # Asked of the dispatcher, so it holds on a CPU-only build: a model written as the design writes
    # one (no dispatch_key) runs on the GPU it was written for, and here on the CPU.
    from reference.core.torch_compat import dispatch_has_kernel_for_key

    def _double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def _triple(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    default = atom.direct_register_custom_op("unit_double", _double, namespace="atom_unit").replace(".", "::")
    explicit = atom.direct_register_custom_op("unit_triple", _triple, namespace="atom_unit", dispatch_key="CPU").replace(".", "::")
    assert [dispatch_has_kernel_for_key(default, key) for key in ("CUDA", "CPU", "XPU")] == [True, True, False]
    assert [dispatch_has_kernel_for_key(explicit, key) for key in ("CUDA", "CPU")] == [False, True]
    assert torch.ops.atom_unit.unit_double(torch.ones(2)).tolist() == [2.0, 2.0]

@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.spec("004.piecewise.split-graph")
def test_split_graph_gives_2L_plus_1_pieces_that_stitch_back_to_the_graph(layers):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    model = Net(layers)
    x = torch.randn(5, HIDDEN)
    torch.compile(model, backend=capture, fullgraph=True)(x)
    split_gm, items = atom.split_graph(graphs[0], [OP])
    assert [item.is_splitting_graph for item in items] == [i % 2 == 1 for i in range(2 * layers + 1)]
    assert [item.graph_id for item in items] == list(range(2 * layers + 1))
    with torch.no_grad():
        torch.testing.assert_close(split_gm(*_graph_args(graphs[0], model, x))[0], model(x))


def _graph_args(gm, model, x):
    """The traced graph's inputs in placeholder order (parameters by name, the input, sizes)."""
    params = dict(model.named_parameters())
    args = []
    for node in gm.graph.find_nodes(op="placeholder"):
        name = node.name
        if name.startswith("l_x_") or name == "L_x_":
            args.append(x)
        elif isinstance(node.meta.get("example_value"), torch.SymInt):
            args.append(x.shape[0])
        else:
            key = name.removeprefix("L_self_modules_").removeprefix("l_self_modules_").rstrip("_")
            key = key.replace("_modules_", ".").replace("_parameters_", ".")
            args.append(params[key])
    return args


@pytest.mark.spec("004.piecewise.general-shape-first", "004.piecewise.fields")
def test_piecewise_backend_compiles_general_then_each_compile_size_once(tmp_path):
    fake = EagerPieces()
    backend = atom.VllmBackend(_config(tmp_path, compile_sizes=[4]), compiler=fake)
    before = COUNTERS.snapshot()
    outs = _run(backend, Net(2), [5, 4, 4, 3, 4])
    delta = COUNTERS.delta(before)
    for got, want in outs.values():
        torch.testing.assert_close(got, want)
    assert delta.num_piecewise_graphs_seen == 5 and delta.num_piecewise_capturable_graphs_seen == 3
    assert sorted(fake.compiled, key=str) == sorted(
        [(f"artifact_shape_None_subgraph_{i}", None) for i in range(3)] + [(f"artifact_shape_4_subgraph_{i}", 4) for i in range(3)], key=str
    )
    entries = {name: b.concrete_size_entries[4] for name, b in backend.piecewise_backends.items()}
    assert all(e.compiled and e.runnable is not None for e in entries.values())


@pytest.mark.spec("004.cache.key", "004.cache.file", "004.compiler.standalone-adaptor")
def test_the_map_file_is_a_literal_that_a_new_manager_loads_instead_of_compiling(tmp_path):
    first = EagerPieces()
    backend = atom.VllmBackend(_config(tmp_path, compile_sizes=[4]), compiler=first)
    _run(backend, Net(1), [5, 4])
    path = os.path.join(backend.cache_dir, CACHE_FILE_NAME)
    assert path.startswith(os.path.join(str(tmp_path), backend.hash_key, "rank_0"))
    text = open(path).read()
    assert "(4, 1, 'eager_pieces')" in text and "(None, 0, 'eager_pieces')" in text
    assert not [f for f in os.listdir(backend.cache_dir) if f.startswith(".tmp")], "a temporary file was left"
    assert os.path.exists(os.path.join(backend.cache_dir, "computation_graph.py"))

    second = EagerPieces()
    before = COUNTERS.snapshot()
    again = atom.VllmBackend(_config(tmp_path, compile_sizes=[4]), compiler=second)
    _run(again, Net(1), [5, 4])
    assert again.hash_key == backend.hash_key
    assert second.compiled == [] and sorted(second.loaded, key=str) == sorted([(0, None), (1, None), (0, 4), (1, 4)], key=str)
    assert COUNTERS.delta(before).num_cache_hits == 4


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{   'entries': {(None, 0, 'eager_pieces'): {'key': 'x'}", "does not parse"),
        ("__import__('os').system('touch EXECUTED')", "does not parse"),
        ("{'format': 'something-else', 'hash': 'h', 'entries': {}}", "not a map of format"),
        ("{'format': 'atom-compile-cache-1', 'hash': 'other', 'entries': {}}", "written for hash 'other'"),
        ("{'format': 'atom-compile-cache-1', 'hash': '@', 'entries': {'k': 1}}", "keys other than"),
    ],
)
@pytest.mark.spec("004.cache.file")
def test_a_damaged_or_foreign_map_is_not_used_and_is_rebuilt(tmp_path, monkeypatch, content, reason):
    monkeypatch.chdir(tmp_path)
    fake = EagerPieces()
    backend = atom.VllmBackend(_config(tmp_path), compiler=fake)
    _run(backend, Net(1), [5])  # learn the cache directory and hash
    path = backend.compiler_manager.cache_file_path
    open(path, "w").write(content.replace("'@'", repr(backend.hash_key)))
    fresh = EagerPieces()
    with pytest.warns(atom.CompileCacheWarning, match=reason):
        _run(atom.VllmBackend(_config(tmp_path), compiler=fresh), Net(1), [5])
    assert len(fresh.compiled) == 2, "the pieces were compiled again"
    assert not os.path.exists(tmp_path / "EXECUTED")
    rebuilt = open(path).read()
    assert "'atom-compile-cache-1'" in rebuilt and repr(backend.hash_key) in rebuilt


@pytest.mark.spec("004.compiler.manager-compile-or-load")
def test_a_handle_that_no_longer_loads_is_recompiled(tmp_path):
    backend = atom.VllmBackend(_config(tmp_path), compiler=EagerPieces())
    _run(backend, Net(1), [5])
    path = backend.compiler_manager.cache_file_path
    text = open(path).read()
    open(path, "w").write(text.replace("'key'", "'gone'"))
    fresh = EagerPieces()
    with pytest.warns(atom.CompileCacheWarning, match="recompiled"):
        _run(atom.VllmBackend(_config(tmp_path), compiler=fresh), Net(1), [5])
    assert len(fresh.compiled) == 2


@pytest.mark.spec("004.cache.rank-dir", "004.backend.cache-dir-hash", "004.config.cache-dir-default")
def test_the_cache_directory_changes_with_the_config_and_the_model_source(tmp_path):
    a = atom.VllmBackend(_config(tmp_path), compiler=EagerPieces())
    _run(a, Net(1), [5])
    b = atom.VllmBackend(_config(tmp_path, compile_sizes=[2]), compiler=EagerPieces())
    _run(b, Net(1), [5])
    c = atom.VllmBackend(_config(tmp_path), compiler=EagerPieces())
    _run(c, Net(2), [5])
    assert len({a.hash_key, b.hash_key, c.hash_key}) == 3
    assert os.path.abspath(__file__) in atom.vllm_backend.traced_files(_traced(Net(1))), "the model's source enters the hash"


def _traced(model):
    graphs = []
    torch._dynamo.reset()
    torch.compile(model, backend=lambda gm, ex: graphs.append(gm) or gm, fullgraph=True)(torch.randn(3, HIDDEN))
    return graphs[0]


@pytest.mark.spec("004.backend.copy-inputs")
def test_copy_inputs_reads_every_call_from_one_static_buffer(tmp_path):
    config = _config(tmp_path, cudagraph_copy_inputs=True)
    backend = atom.VllmBackend(config, compiler=EagerPieces())
    torch._dynamo.reset()
    model = Net(1)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    seen = []

    with torch.no_grad():
        x = torch.randn(5, HIDDEN)
        torch._dynamo.mark_dynamic(x, 0)
        compiled(x)
        wrapper = backend.runnable
        for size in (3, 7):
            y = torch.randn(size, HIDDEN)
            torch.testing.assert_close(compiled(y), model(y))
            seen.append([b.data_ptr() for b in wrapper.input_buffers.values()])
    assert seen[0] == seen[1] and seen[0], "inputs were not copied into the same static buffer"


@pytest.mark.spec("004.backend.computation-graph", "004.config.debug-dump-rank-0")
def test_debug_dump_writes_under_rank_directory(tmp_path):
    dump = tmp_path / "dump"
    backend = atom.VllmBackend(_config(tmp_path / "cache", debug_dump_path=str(dump)), compiler=EagerPieces())
    _run(backend, Net(1), [5])
    assert (dump / "rank_0" / "model_computation_graph.py").read_text().count("submod_") >= 3
    assert "unit_scale_rows" in (dump / "rank_0" / "model_traced_graph.py").read_text()


@pytest.mark.spec("004.compiler.interface", "004.compiler.always-hit-shape-env")
def test_inductor_adaptor_round_trip_with_its_patches_undone(tmp_path):
    import torch._inductor.codecache as codecache

    originals = (codecache.compiled_fx_graph_hash, codecache.FxGraphCache._get_shape_env, codecache.FxGraphCache._check_can_cache)
    env_before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    before = COUNTERS.snapshot()
    first = atom.VllmBackend(_config(tmp_path, piece_compiler="inductor"))
    outs = _run(first, Net(1), [5, 3])
    assert COUNTERS.delta(before).num_backend_compilations == 2
    mark = COUNTERS.snapshot()
    second = atom.VllmBackend(_config(tmp_path, piece_compiler="inductor"))
    outs2 = _run(second, Net(1), [5, 3])
    assert COUNTERS.delta(mark).num_backend_compilations == 0 and COUNTERS.delta(mark).num_cache_hits == 2
    for got, want in [*outs.values(), *outs2.values()]:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    after = (codecache.compiled_fx_graph_hash, codecache.FxGraphCache._get_shape_env, codecache.FxGraphCache._check_can_cache)
    assert after == originals and os.environ.get("TORCHINDUCTOR_CACHE_DIR") == env_before
    assert os.path.isdir(os.path.join(first.cache_dir, "inductor_cache"))


def test_reference_pieces_keep_the_compiler_args_scope_they_were_compiled_in(tmp_path, monkeypatch):
    from reference.cache.neff_cache import NeffCache
    from reference.compiler.scope import scoped_compiler_args

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(tmp_path / "hlo"))
    backend = atom.VllmBackend(_config(tmp_path / "atom", piece_compiler="reference"))
    torch._dynamo.reset()
    model = Net(1)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    with torch.no_grad():
        x = torch.randn(5, HIDDEN)
        torch._dynamo.mark_dynamic(x, 0)
        with scoped_compiler_args(["-O2"]):
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
        y = torch.randn(3, HIDDEN)  # compiled per shape now, outside the scope
        torch.testing.assert_close(compiled(y), model(y), atol=1e-5, rtol=1e-5)
    assert "'compiler_args': ['-O2']" in open(backend.compiler_manager.cache_file_path).read()
    cache = NeffCache(str(tmp_path / "neff"))
    args = [cache.get(key).metadata.compiler_args for key in cache.keys()]
    assert len(args) == 4, "two pieces, two shapes"
    assert all("-O2" in a for a in args), args


@pytest.mark.spec("004.compiler.inductor-adaptor-tunes")
def test_inductor_adaptor_tunes_a_piece_compiled_for_one_size(tmp_path, monkeypatch):
    # compile_fx is faked (it records the config patches it is given): what is under test is which
    # patches the adaptor asks for, not Inductor's autotuning.
    import torch._inductor.compile_fx as compile_fx_mod

    seen = []

    def fake_compile_fx(graph, example_inputs, inner_compile=None, config_patches=None):
        seen.append(dict(config_patches))
        return graph

    monkeypatch.setattr(compile_fx_mod, "compile_fx", fake_compile_fx)
    adaptor = atom.InductorAdaptor()
    adaptor.initialize_cache(str(tmp_path), disable_cache=True)
    graph = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    for shape, config in ((None, {}), (4, {}), (4, {"max_autotune": False}), (True, {})):
        adaptor.compile(graph, [torch.randn(4, 2)], config, runtime_shape=shape)
    tuned = [(p.get("max_autotune"), p.get("coordinate_descent_tuning")) for p in seen]
    assert tuned == [(None, None), (True, True), (False, True), (None, None)]
