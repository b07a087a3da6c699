"""The reference compiler's level-3 piece (:mod:`reference.atom.reference_piece`).

Real parts throughout: pieces are lowered through torch-mlir, compiled by the IREE compiler and
run by the IREE runtime, with HLO and NEFF caches of this module's own. What is under test is the
piece's call path: one artifact per size, the weights resident in the runtime, inputs the graph
writes written back, results equal to eager.
"""

from __future__ import annotations

import pytest
import torch

import reference.atom as atom
from reference.atom import reference_piece as rp

HIDDEN = 8
TOL = dict(atol=1e-5, rtol=1e-5)


def _scale_rows(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x * torch.arange(1, x.shape[0] + 1, dtype=x.dtype)[:, None])


OP = atom.direct_register_custom_op("piece_scale_rows", _scale_rows, mutates_args=["out"], namespace="atom_piece_unit")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.register_buffer("shift", torch.linspace(-1, 1, HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin[0](x)
        for lin in self.lin[1:]:
            out = torch.zeros_like(h)
            torch.ops.atom_piece_unit.piece_scale_rows(h, out)
            h = lin(out).relu() + self.shift
        return h


@pytest.fixture(autouse=True)
def _caches(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.getbasetemp() / "reference_piece_caches"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(root / "neff"))
    monkeypatch.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(root / "hlo"))


def _backend(tmp_path) -> atom.VllmBackend:
    config = atom.Config(
        max_num_seqs=8,
        compilation_config=atom.CompilationConfig(
            level=3, cudagraph_capture_sizes=[1, 2, 4, 8], compile_sizes=[4], splitting_ops=[OP],
            piece_compiler="reference", cache_dir=str(tmp_path / "atom"),
        ),
    )
    return atom.VllmBackend(config)


def _pieces(backend) -> list[rp.ReferencePiece]:
    """Every ReferencePiece the backend's pieces hold: the general one and each compile size's."""
    out = []
    for pb in backend.piecewise_backends.values():
        out.append(pb.compiled_graph_for_general_shape)
        out += [e.runnable for e in pb.concrete_size_entries.values() if e.compiled]
    assert out and all(isinstance(p, rp.ReferencePiece) for p in out), out
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A level-3 Net with reference pieces, run at a general size (5), the compile size (4) with
    the very tensor its first call was marked dynamic with, and another size (3)."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("compiled")
    mp.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(root / "neff"))
    mp.setenv("TORCH_NEURONX_HLO_CACHE_DIR", str(root / "hlo"))
    torch._dynamo.reset()
    model = Net()
    backend = _backend(root)
    fn = torch.compile(model, backend=backend, fullgraph=True)
    results = {}
    with torch.no_grad():
        first = torch.randn(4, HIDDEN)
        torch._dynamo.mark_dynamic(first, 0)
        results["first"] = (fn(first), model(first))
        # The same tensor, still marked dynamic, now at a size in compile_sizes: compiled for it.
        results["compile size, marked tensor"] = (fn(first), model(first))
        for size in (5, 3, 3):
            x = torch.randn(size, HIDDEN)
            results[f"size {size}"] = (fn(x), model(x))
    yield model, backend, fn, results
    mp.undo()
    torch._dynamo.reset()


def test_every_size_matches_eager_including_a_compile_size_reached_with_a_marked_tensor(compiled):
    _, _, _, results = compiled
    for what, (got, want) in results.items():
        torch.testing.assert_close(got, want, **TOL, msg=lambda m, what=what: f"{what}: {m}")


def test_each_size_is_built_once_and_called_thinly_with_the_weights_resident(compiled):
    model, backend, fn, _ = compiled
    pieces = _pieces(backend)
    general = [pb.compiled_graph_for_general_shape for pb in backend.piecewise_backends.values()]
    # general sizes seen: 4 (the first call, Dynamo's warm-up), 5 and 3; size 3 twice, built once
    assert all(sorted(k[0] for k in p.entries) == [3, 4, 5] for p in general), [list(p.entries) for p in general]
    assert all(p.by_sizes for p in pieces), "the pieces take the batch size as an argument: keyed by it"
    assert all(isinstance(e, rp._Thin) for p in pieces for e in p.entries.values()), "a size took the general path"
    weights = {id(t) for t in [*model.parameters(), *model.buffers()]}
    # Count per piece: the weights it takes are its resident inputs, and their buffers are held.
    x = torch.randn(3, HIDDEN)
    seen: dict = {}
    original = rp._Thin.__call__

    def spy(self, tensors):
        seen[id(self)] = (self, [id(t) in weights for t in tensors])
        return original(self, tensors)

    rp._Thin.__call__ = spy
    try:
        with torch.no_grad():
            fn(x)
    finally:
        rp._Thin.__call__ = original
    assert len(seen) == len(backend.piecewise_backends)
    for entry, is_weight in seen.values():
        loaded = entry.compiled.loaded
        assert loaded.resident == {i for i, w in enumerate(is_weight) if w} and loaded.resident, (loaded.resident, is_weight)
        assert loaded.resident_uploads() == len(loaded.resident)


def test_a_weight_changed_in_place_is_seen_by_the_next_call(compiled):
    model, _, fn, _ = compiled
    x = torch.randn(3, HIDDEN)
    with torch.no_grad():
        fn(x)
        model.lin[1].weight.mul_(-0.5)
        model.shift.add_(2.0)
        try:
            torch.testing.assert_close(fn(x), model(x), **TOL)
        finally:
            model.lin[1].weight.div_(-0.5)
            model.shift.sub_(2.0)


def _graph(fn) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


def test_an_input_the_piece_writes_is_written_back_every_call():
    def step(x, cache, w):
        cache.add_(x)
        return (x @ w).relu()

    gm = _graph(step)
    x, w = torch.randn(3, HIDDEN), torch.randn(HIDDEN, HIDDEN)
    cache = torch.zeros(3, HIDDEN)
    piece = rp.ReferencePiece(gm, None, [x, cache, w])
    assert not piece.by_sizes and piece.single
    for n in range(1, 4):
        out = piece(x, cache, w)
        torch.testing.assert_close(out, (x @ w).relu(), **TOL)
        torch.testing.assert_close(cache, n * x, **TOL)
    (entry,) = piece.entries.values()
    assert isinstance(entry, rp._Thin) and entry.mutated == (1,)


def test_shapes_key_the_entries_when_no_size_argument_gives_them():
    def step(x, w):
        return x @ w, x.sum(0)

    gm = _graph(step)
    w = torch.randn(HIDDEN, 4)
    piece = rp.ReferencePiece(gm, None, [torch.randn(2, HIDDEN), w])
    for rows in (2, 6, 2):
        x = torch.randn(rows, HIDDEN)
        got = piece(x, w)
        assert isinstance(got, (list, tuple)) and len(got) == 2
        torch.testing.assert_close(got[0], x @ w, **TOL)
        torch.testing.assert_close(got[1], x.sum(0), **TOL)
    assert sorted(k[0][0][0] for k in piece.entries) == [2, 6]


def test_a_graph_that_needs_autograd_keeps_the_seams_general_call():
    def step(x, w):
        return (x @ w).tanh()

    gm = _graph(step)
    w = torch.nn.Parameter(torch.randn(HIDDEN, 4))
    x = torch.randn(3, HIDDEN)
    piece = rp.ReferencePiece(gm, None, [x, w])
    with torch.enable_grad():
        out = piece(x, w)
        out.sum().backward()
    (entry,) = piece.entries.values()
    assert isinstance(entry, rp._General)
    torch.testing.assert_close(out, (x @ w).tanh(), **TOL)
    w_ref = w.detach().clone().requires_grad_(True)
    (x @ w_ref).tanh().sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad, **TOL)
